"""Random numbers on simulated devices, with CUDA's launch-time semantics.

A CUDA generator (Philox) hands each random kernel (seed, offset) when it is LAUNCHED and advances the offset;
the kernel draws later. Reseeding restarts the offsets, so `manual_seed(7); a = randn(); manual_seed(7);
b = randn()` gives a == b however late the kernels run. The simulator does the same: each random op gets, at
launch, a private CPU generator seeded from (seed, offset); values differ from a GPU's Philox stream, but they are
deterministic and follow the same reseeding rules.
"""
from __future__ import annotations

import torch

from ..engine.context import current_rank

_Generator = torch.Generator


class SimGenerator(_Generator):
    """torch.Generator(device="cuda") inside a simulated rank: a CPU generator that says it is on the device."""

    def __new__(cls, device="cpu"):
        dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        if dev.type == "cuda" and dev.index is None:
            me = current_rank()
            dev = torch.device("cuda", me.current_device if me is not None else 0)
        g = super().__new__(cls, device="cpu")
        g._sim_device = dev
        g._sim_seed = g.initial_seed()
        g._sim_offset = 0
        return g

    @property
    def device(self):
        return self._sim_device

    def manual_seed(self, seed):
        super().manual_seed(seed)
        self._sim_seed = int(seed)
        self._sim_offset = 0
        return self

    def seed(self):
        s = super().seed()
        self._sim_seed = int(s)
        self._sim_offset = 0
        return s

    def initial_seed(self):
        return self._sim_seed if hasattr(self, "_sim_seed") else super().initial_seed()

    def get_state(self):
        """16 bytes, (seed, offset), like the state of CUDA's Philox generator."""
        return torch.tensor([self._sim_seed, self._sim_offset], dtype=torch.int64).view(torch.uint8)

    def set_state(self, state):
        seed, off = state.view(torch.int64).tolist()
        super().manual_seed(seed)
        self._sim_seed, self._sim_offset = int(seed), int(off)
        return self


def launch_seed(gen):
    """The seed of the next random op launched with `gen` (advances its offset, as Philox does)."""
    seed = getattr(gen, "_sim_seed", None)
    if seed is None:  # a plain CPU generator handed to a device op: draw from it now, in launch order
        return int(torch.randint(0, 2**62, (1,), generator=gen))
    off = gen._sim_offset
    gen._sim_offset = off + 1
    return (seed * 1_000_003 + off * 7919 + 1) % (2**63 - 1)


def generator_for(seed):
    return _Generator().manual_seed(seed)
