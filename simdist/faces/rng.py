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
        """A CPU generator's own state. A device generator's: (seed, offset) in 16 bytes, like CUDA's Philox state,
        then the CPU state underneath: torch hands an op a generator of its own wrapper (a plain
        torch._C.Generator), so random ops called with an explicit generator draw their launch seed from that CPU
        state (launch_seed), and a replay must restore its position too."""
        if self._sim_device.type == "cpu":
            return super().get_state()
        head = torch.tensor([self._sim_seed, self._sim_offset], dtype=torch.int64).view(torch.uint8)
        return torch.cat([head, super().get_state()])

    def set_state(self, state):
        if self._sim_device.type == "cpu":
            return super().set_state(state)
        seed, off = state[:16].view(torch.int64).tolist()
        if state.numel() > 16:
            super().set_state(state[16:].clone())
        else:
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
