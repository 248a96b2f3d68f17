"""One run of a simulated world, whatever runs its ranks: the run's settings (RunSpec, plain data that crosses
a process boundary), what each rank starts with (torchrun's environment, its current device), the program
body each rank calls, and how a finished rank's share of the result is taken (RankOutcome). simdist/api.py
runs every rank in this process (simdist/ranks/threads.py); simdist/launcher.py runs one rank per process
(simdist/ranks/processes.py). Both build the same World for the same spec, so both give the same digest."""
from __future__ import annotations

import numbers
import os
import sys
from dataclasses import dataclass

import torch

from .engine.allocator import recycle
from .engine.errors import SimulationError
from .engine.hazards import hazards_before_error_note
from .engine.outcome import rank_outcome
from .engine.policies import make_policy
from .faces.c10d import auto_init
from .faces.tensor import SimTensor
from .faces.world import make_world


def default_nccl_profile():
    v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return "2.7" if v < (2, 8) else "2.8"


def nccl_profile(nccl):
    """'2.7' or '2.8' from a profile or a torch version (None: the installed torch's)."""
    nccl = str(nccl) if nccl is not None else default_nccl_profile()
    if nccl.startswith("2.") and nccl not in ("2.7", "2.8"):
        try:
            nccl = "2.7" if tuple(map(int, nccl.split(".")[:2])) < (2, 8) else "2.8"
        except ValueError:
            pass
    if nccl not in ("2.7", "2.8"):
        raise ValueError(f"nccl profile must be '2.7' or '2.8' (or a torch version), got {nccl!r}")
    return nccl


@dataclass
class RunSpec:
    """Everything a rank needs to build its share of the world: the same in every process of a run."""

    world_size: int
    seed: int
    policy: object  # what make_policy takes (None, a name, a list of delays, a Policy)
    nccl: str
    poison: object
    device_count: object
    avoid_record_streams: bool
    torchrun: bool

    @classmethod
    def make(cls, world_size, seed, policy, nccl, poison, device_count, avoid_record_streams, torchrun):
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        seed = int(seed)  # (a numpy integer too)
        if device_count is not None and (not isinstance(device_count, int) or device_count < 1):
            raise ValueError(f"device_count must be a positive integer (GPUs of the simulated host) or None, got "
                             f"{device_count!r}")
        if avoid_record_streams is None:
            avoid_record_streams = os.environ.get("TORCH_NCCL_AVOID_RECORD_STREAMS", "0") == "1"
        return cls(world_size, seed, policy, nccl_profile(nccl), poison, device_count, bool(avoid_record_streams),
                   bool(torchrun))

    def world(self, local_ranks=None):
        """The World of this run holding `local_ranks` (None: every rank), each prepared as a torchrun process."""
        world = make_world(self.world_size, self.seed, make_policy(self.policy, self.seed), self.nccl, self.poison,
                           self.device_count, self.avoid_record_streams, local_ranks=local_ranks)
        for rank in world.ranks.values():
            prepare_rank(world, rank, self.torchrun)
        return world


def prepare_rank(world, rank, torchrun):
    """What a torchrun process of this rank starts with: its environment, its current device."""
    n = world.world_size
    rank.env = {"RANK": str(rank.rank), "LOCAL_RANK": str(rank.rank), "WORLD_SIZE": str(n),
                "LOCAL_WORLD_SIZE": str(n), "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29500", "ROLE_RANK": str(rank.rank), "ROLE_WORLD_SIZE": str(n),
                "GROUP_WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "simdist"}  # what torchrun sets
    if not torchrun:
        rank.current_device = rank.rank % world.device_count


def rank_body(world, fn, args, kwargs, torchrun):
    """What each rank's transport calls: the program, with the default group made at first use for a function
    (torchrun=False) as simdist.run documents."""
    def body(rank):
        me = world.ranks[rank]
        # every op launched from inside this call has this frame and the transport's frames above it at the top of
        # its stack, unchanged while the program runs: launch_kernel copies them once instead of walking them per op
        me.stack_base = [sys._getframe(), -1, None]
        try:
            if not torchrun:
                auto_init(me)
            return fn(*args, **kwargs)
        finally:
            me.stack_base = None  # (the frame holds the program's arguments)
    return body


def note_other_ranks_hazards(err, failed, hazards_by_rank):
    """The hazards the other ranks had found when rank `failed`'s program raised: values a race damaged on one
    rank reach another through a collective, and that rank's crash is where the run ends (f-series f3)."""
    if not hasattr(err, "add_note"):
        return
    for r in sorted(hazards_by_rank):
        if r != failed:
            note = hazards_before_error_note(r, hazards_by_rank[r], failed=failed)
            if note:
                err.add_note(note)


def note_rank(err, rank, world_size):
    """An exception of the program says which simulated rank raised it (simdist's own errors say so already)."""
    if not isinstance(err, SimulationError) and hasattr(err, "add_note"):
        err.add_note(f"(raised inside simulated rank {rank} of {world_size})")


def to_host(x):
    """A rank's return value with its simulated tensors copied to the host."""
    if isinstance(x, SimTensor):
        return x._inner.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(to_host(v) for v in x)
    if isinstance(x, dict):
        return {k: to_host(v) for k, v in x.items()}
    return x


def take_outcome(rank, tokens):
    """The finished rank's RankOutcome: its deferred accesses decided with every rank's `tokens`."""
    return rank_outcome(rank, tokens, to_host(rank.returned))


def release_rank(rank):
    """The rank's device memory goes back to the pool for the next run, and its executed ops are dropped (the
    outcome has what it needs of them) while gc is still paused: freed by their reference counts now, they are not
    there for the first collection after the run to scan (one op and its frames each: ~0.5 us an op)."""
    rank.returned = None
    rank.ops_log = []
    for d in rank.devices.values():
        d.memory.closed = True
        recycle(d.memory)


class ScriptExit(Exception):
    """A rank's script called sys.exit with a non-zero status."""


def script_main(path, argv=()):
    """A callable that executes a torchrun-style script as `__main__`, in a fresh module namespace per call.

    Each simulated rank gets its own module globals, as each torchrun process would. `sys.exit(0)` (or None)
    ends the rank normally; any other status raises ScriptExit naming it.
    """
    import os
    import types
    path = os.path.abspath(path)
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec")

    def main():
        mod = types.ModuleType("__main__")
        mod.__file__ = path
        mod.__builtins__ = __builtins__
        # the script is the process's __main__, as under torchrun: pickle finds the classes and functions it
        # defines there by reference (all_gather_object of a dataclass, torch.save of a model, a spawned
        # Process's target); in rank threads the hooks keep each rank's own (faces/patches.py TorchRankHooks)
        prev = sys.modules.get("__main__")
        sys.modules["__main__"] = mod
        try:
            exec(code, mod.__dict__)
        except SystemExit as e:
            if e.code not in (None, 0):
                raise ScriptExit(f"{os.path.basename(path)} exited with status {e.code!r}") from None
        finally:
            if prev is not None:
                sys.modules["__main__"] = prev
        return None

    main.__name__ = main.__qualname__ = os.path.basename(path)
    main._simdist_source = (path, tuple(argv))  # how another process runs the same script (simdist/launcher.py)
    main._simdist_script = (os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path,
                            tuple(argv))
    return main
