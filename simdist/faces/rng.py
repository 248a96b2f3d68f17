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


# A device generator's CPU generator underneath is always seeded with the launch value of its next offset,
# `_value(seed, offset)`, registered here: an op called with an explicit generator receives a plain
# torch._C.Generator over the same C++ generator (not the SimGenerator), whose initial_seed() is that value, and
# the registry gives back (seed, offset). So a torch.Generator(device="cuda").manual_seed(s) and the default
# device generator seeded s draw the same stream, as two Philox generators with one seed do; before, an explicit
# generator drew its launch seed from the CPU state instead (the differential tier's random programs).
_STATES: dict = {}


def _value(seed, off):
    return (seed * 1_000_003 + off * 7919 + 1) % (2**63 - 1)


class SimGenerator(_Generator):
    """torch.Generator(device="cuda") inside a simulated rank: a CPU generator that says it is on the device."""

    def __new__(cls, device="cpu"):
        dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        if dev.type == "cuda" and dev.index is None:
            me = current_rank()
            dev = torch.device("cuda", me.current_device if me is not None else 0)
        g = super().__new__(cls, device="cpu")
        g._sim_device = dev
        if dev.type != "cpu":
            g._place(int(_Generator.initial_seed(g)), 0)
        return g

    def _place(self, seed, off):
        v = _value(seed, off)
        _STATES[v] = (seed, off)
        _Generator.manual_seed(self, v)

    @property
    def _sim_seed(self):
        return _STATES[_Generator.initial_seed(self)][0]

    @property
    def _sim_offset(self):
        return _STATES[_Generator.initial_seed(self)][1]

    @property
    def device(self):
        return self._sim_device

    def manual_seed(self, seed):
        if self._sim_device.type == "cpu":
            return super().manual_seed(seed)
        self._place(int(seed), 0)
        return self

    def seed(self):
        if self._sim_device.type == "cpu":
            return super().seed()
        s = int(_Generator().seed())
        self._place(s, 0)
        return s

    def initial_seed(self):
        if self._sim_device.type == "cpu":
            return super().initial_seed()
        return self._sim_seed

    def get_state(self):
        """A CPU generator's own state. A device generator's: (seed, offset) in 16 bytes, like CUDA's Philox
        state."""
        if self._sim_device.type == "cpu":
            return super().get_state()
        return torch.tensor([self._sim_seed, self._sim_offset], dtype=torch.int64).view(torch.uint8)

    def set_state(self, state):
        if self._sim_device.type == "cpu":
            return super().set_state(state)
        seed, off = state[:16].view(torch.int64).tolist()
        self._place(int(seed), int(off))
        return self


def launch_seed(gen):
    """The seed of the next random op launched with `gen` (advances its offset, as Philox does)."""
    key = _Generator.initial_seed(gen)
    so = _STATES.get(key) if getattr(gen, "_sim_device", torch.device("cuda")).type != "cpu" else None
    if so is None:  # a plain CPU generator handed to a device op: draw from it now, in launch order
        return int(torch.randint(0, 2**62, (1,), generator=gen))
    seed, off = so
    v = _value(seed, off + 1)
    _STATES[v] = (seed, off + 1)
    _Generator.manual_seed(gen, v)  # (the plain wrapper and the SimGenerator share the C++ generator)
    return key


def generator_for(seed):
    return _Generator().manual_seed(seed)
