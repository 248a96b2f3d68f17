"""Random numbers on simulated devices, with CUDA's launch-time semantics.

A CUDA generator (Philox) hands each random kernel (seed, offset) when it is LAUNCHED and advances the offset;
the kernel draws later. Reseeding restarts the offsets, so `manual_seed(7); a = randn(); manual_seed(7);
b = randn()` gives a == b however late the kernels run. The simulator does the same: each random op gets, at
launch, a private CPU generator seeded from (seed, offset); values differ from a GPU's Philox stream, but they are
deterministic and follow the same reseeding rules.

A CUDA generator's (seed, offset) is a state object that generators can share (CUDAGeneratorImpl's `state_`, a
CUDAGeneratorState): `graphsafe_get_state()` returns a generator over the same state, `graphsafe_set_state(g)`
makes this generator use g's state, and `clone_state()` copies it (aten/src/ATen/cuda/CUDAGeneratorImpl.cpp).
Megatron-Core's and TransformerEngine's CUDA-graph-safe RNG trackers swap the default generator's state so. Here
the state is a `_State`; a device generator holds one, shared as CUDA shares it.
"""
from __future__ import annotations

import itertools
import weakref

import torch

from ..engine.context import current_rank

_Generator = torch.Generator


class _State:
    """CUDAGeneratorState: a Philox seed and offset (one per random op here, not per thread)."""

    __slots__ = ("seed", "offset")

    def __init__(self, seed, offset=0):
        self.seed, self.offset = seed, offset


# An op called with an explicit generator receives a plain torch._C.Generator over the same C++ generator (not the
# SimGenerator). A device generator's C++ generator is seeded with a key of its own, and the registry gives back
# the state the generator holds now, so the op draws from that state (shared or not) and advances it.
_HELD: dict = {}
_keys = itertools.count(0x5EED << 48)  # never a seed a program picks, never a value the draws depend on


def _value(seed, off):
    return (seed * 1_000_003 + off * 7919 + 1) % (2**63 - 1)


class SimGenerator(_Generator):
    """torch.Generator(device="cuda") inside a simulated rank: a CPU generator that says it is on the device."""

    def __new__(cls, device="cpu", _state=None):
        dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        if dev.type == "cuda" and dev.index is None:
            me = current_rank()
            dev = torch.device("cuda", me.current_device if me is not None else 0)
        g = super().__new__(cls, device="cpu")
        g._sim_device = dev
        if dev.type != "cpu":
            key = next(_keys)
            _Generator.manual_seed(g, key)
            # a new CUDA generator starts at c10's default_rng_seed_val, as a new CPU one does
            g._state = _state if _state is not None else _State(int(_Generator().initial_seed()))
            _HELD[key] = g._state
            weakref.finalize(g, _HELD.pop, key, None)
        return g

    def _hold(self, state):
        self._state = state
        _HELD[_Generator.initial_seed(self)] = state

    @property
    def device(self):
        return self._sim_device

    def manual_seed(self, seed):
        if self._sim_device.type == "cpu":
            return super().manual_seed(seed)
        st = self._state
        st.seed, st.offset = int(seed), 0
        return self

    def seed(self):
        if self._sim_device.type == "cpu":
            return super().seed()
        s = int(_Generator().seed())
        self.manual_seed(s)
        return s

    def initial_seed(self):
        if self._sim_device.type == "cpu":
            return super().initial_seed()
        return self._state.seed

    def get_state(self):
        """A CPU generator's own state. A device generator's: (seed, offset) in 16 bytes, like CUDA's Philox
        state, the offset as get_offset() gives it."""
        if self._sim_device.type == "cpu":
            return super().get_state()
        return torch.tensor([self._state.seed, PHILOX_STEP * self._state.offset], dtype=torch.int64).view(torch.uint8)

    def set_state(self, state):
        if self._sim_device.type == "cpu":
            return super().set_state(state)
        seed, off = state[:16].view(torch.int64).tolist()
        _check_offset(off)
        self._state.seed, self._state.offset = int(seed), int(off) // PHILOX_STEP  # the shared state, as CUDA's
        return self

    def get_offset(self):
        """CUDAGeneratorImpl::get_offset (torch.cuda._get_rng_state_offset reads it): Philox's offset, which each
        random op advances by a multiple of 4; here by 4 per op (a GPU's step depends on the kernel's launch
        shape, so the number is not a GPU's; saving it and setting it back is what programs do with it). A CPU
        generator's is torch's ("CPU Generator does not use offset")."""
        if self._sim_device.type == "cpu":
            return super().get_offset()
        return PHILOX_STEP * self._state.offset

    def set_offset(self, offset):
        if self._sim_device.type == "cpu":
            return super().set_offset(offset)
        _check_offset(offset)
        self._state.offset = int(offset) // PHILOX_STEP
        return self

    def clone_state(self):
        """A new generator over a copy of this one's state."""
        if self._sim_device.type == "cpu":
            return super().clone_state()
        return SimGenerator(self._sim_device, _State(self._state.seed, self._state.offset))

    def graphsafe_get_state(self):
        """A new generator over this one's state itself: draws through either advance both."""
        if self._sim_device.type == "cpu":
            return super().graphsafe_get_state()
        return SimGenerator(self._sim_device, self._state)

    def graphsafe_set_state(self, other):
        """This generator uses `other`'s state from now on (shared, not copied)."""
        if self._sim_device.type == "cpu":
            return super().graphsafe_set_state(other)
        if getattr(other, "_sim_device", torch.device("cpu")).type == "cpu":
            raise RuntimeError("Expected a CUDA Generator")
        self._hold(other._state)
        return self


PHILOX_STEP = 4  # CUDA's Philox offsets are multiples of 4 (CUDAGeneratorImpl: "offset must be a multiple of 4")


def _check_offset(offset):
    if int(offset) % PHILOX_STEP:
        raise RuntimeError("offset must be a multiple of 4")  # (CUDAGeneratorImpl::set_offset / set_state's check)


def launch_seed(gen):
    """The seed of the next random op launched with `gen` (advances its state's offset, as Philox does)."""
    st = getattr(gen, "_state", None)
    if st is None:
        st = _HELD.get(_Generator.initial_seed(gen))
        if st is None:  # a plain CPU generator handed to a device op: draw from it now, in launch order
            return int(torch.randint(0, 2**62, (1,), generator=gen))
    v = _value(st.seed, st.offset)
    st.offset += 1
    return v


def generator_for(seed):
    return _Generator().manual_seed(seed)
