"""simdist.run, run_script and spawn: the public entry points. A run is built by simdist/session.py, its ranks
run as threads of this process (simdist/ranks/threads.py) or as processes of their own (simdist/launcher.py),
and its RunResult is assembled by simdist/result.py."""
from __future__ import annotations

import sys
from collections.abc import Mapping

import torch

from .engine.context import current_rank
from .engine.errors import DeterminismError
from .engine.world import World
from .faces.patches import (Installed, TorchRankHooks, host_rng_states, process_globals, set_host_rng_states,
                             set_process_globals)
from .ranks.threads import ThreadTransport
from .result import RunResult, build_result
from .session import (RunSpec, ScriptExit, default_nccl_profile, note_other_ranks_hazards, note_rank, rank_body,
                      release_rank, script_main, take_outcome)

__all__ = ["run", "run_script", "spawn", "script_main", "RunResult", "ScriptExit", "default_nccl_profile"]
TRANSPORTS = ("threads", "processes")


def run(fn, *, world_size=1, seed=0, args=(), kwargs=None, policy=None, nccl=None, poison="nan",
        check_determinism=False, device_count=None, avoid_record_streams=None, torchrun=False,
        transport="threads") -> RunResult:
    """Run `fn(*args, **kwargs)` once per rank in a simulated world of `world_size` GPUs.

    Inside `fn`, torch.cuda and torch.distributed (NCCL semantics) behave as
    under torchrun with one GPU per rank. Returns a RunResult; tensors in the
    returned values are copied to the CPU.

    policy: None (seeded jitter), "none", "pct", a list of delays (choice),
    or a simdist.policies.Policy. nccl: "2.7" or "2.8" (default: installed torch).
    poison: fill of fresh device memory, "nan" (0xFF bytes), "zero" or a byte.
    torchrun: False (a function): each rank starts on device `rank` and torch.distributed's default group is
    made at its first use if fn does not call init_process_group; True (what a torchrun process has): device 0
    until set_device, and no process group until init_process_group (run_script and spawn).
    transport: "threads" (every rank a thread of this process; fastest to start) or "processes" (every rank
    its own process, own module globals, as torchrun runs it: for libraries that keep per-process state in
    modules, such as Megatron-Core's parallel_state). Both give the same digest for the same seed. With
    "processes", fn must be importable by its module and name, and args, kwargs, policy and returns picklable.
    """
    if not callable(fn):
        raise TypeError(f"simdist.run: fn must be callable, got {type(fn).__name__}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(f"simdist.run: kwargs must be a mapping (keyword arguments of fn), got {type(kwargs).__name__}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"simdist.run: args must be a tuple or list (positional arguments of fn), got "
                        f"{type(args).__name__}")
    if check_determinism:
        a = _run_once(fn, world_size, seed, args, kwargs, policy, nccl, poison, device_count,
                      avoid_record_streams, torchrun, transport)
        b = _run_once(fn, world_size, seed, args, kwargs, policy, nccl, poison, device_count,
                      avoid_record_streams, torchrun, transport)
        if a.digest != b.digest:
            raise DeterminismError(f"two runs of seed {seed} differ: {a.digest} != {b.digest}. The program "
                                   "depends on something outside the simulation (wall clock, id(), global "
                                   "state kept across runs, unseeded randomness).")
        return a
    return _run_once(fn, world_size, seed, args, kwargs, policy, nccl, poison, device_count,
                     avoid_record_streams, torchrun, transport)


def spawned(fn):
    """`fn(rank, *args)` as a program every rank calls with `*args` (mp.spawn's convention)."""
    def per_rank(*a):
        return fn(current_rank().rank, *a)

    per_rank.__name__ = per_rank.__qualname__ = getattr(fn, "__qualname__", getattr(fn, "__name__", "fn"))
    per_rank.__module__ = getattr(fn, "__module__", None)
    per_rank._simdist_spawn = fn  # the replay command names the worker, with --spawn; processes import it
    return per_rank


def spawn(fn, args=(), nprocs=1, **options) -> RunResult:
    """torch.multiprocessing.spawn's calling convention: `fn(rank, *args)` on each of `nprocs` simulated ranks.

    For code written for mp.spawn (whose worker takes its rank first and may call
    init_process_group(rank=rank, world_size=nprocs)). Other options are those of `simdist.run`.
    """
    options.setdefault("torchrun", True)
    return run(spawned(fn), world_size=nprocs, args=tuple(args), **options)


def run_script(path, *, world_size=1, argv=(), **options) -> RunResult:
    """Run a torchrun-style script in a simulated world: what `torchrun --nproc-per-node=N path argv...` does.

    Each rank executes the file as `__main__` with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT set, and
    `sys.argv` = [path, *argv] for the run. Every rank is a process of its own by default (transport=
    "processes"), as torchrun starts them: modules the script imports keep their globals per rank (Megatron-Core's
    parallel_state). Other options are those of `simdist.run`.
    """
    import os
    main = script_main(path, argv)
    options.setdefault("transport", "processes")
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    options.setdefault("torchrun", True)
    try:
        return run(main, world_size=world_size, **options)
    finally:
        sys.argv = old_argv
        sys.path[:] = old_path


def _run_once(fn, world_size, seed, args, kwargs, policy, nccl, poison, device_count, avoid_record_streams,
              torchrun, transport="threads"):
    kwargs = kwargs or {}
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
    spec = RunSpec.make(world_size, seed, policy, nccl, poison, device_count, avoid_record_streams, torchrun)
    if transport == "processes":
        from .launcher import run_in_processes
        return run_in_processes(fn, spec, args, kwargs)
    world = spec.world()
    ranks = [world.ranks[r] for r in range(world_size)]
    body = rank_body(world, fn, args, kwargs, torchrun)
    with Installed():  # the returns are copied out before torch's thread settings are restored
        caller_rng = host_rng_states()  # the ranks' generators must not disturb the caller's
        caller_globals = process_globals()  # nor their torch module globals (DTensor's RNG tracker)
        caller_main = sys.modules.get("__main__")  # nor its __main__ (a script's ranks set their own)
        try:
            ThreadTransport(world, TorchRankHooks()).run(body)
        finally:
            set_host_rng_states(caller_rng)
            set_process_globals(caller_globals)
            if caller_main is not None:
                sys.modules["__main__"] = caller_main
        try:
            if world.fatal is not None:
                err = world.fatal
                failed = next((rank.rank for rank in ranks if rank.error is err), None)
                if failed is not None:
                    note_rank(err, failed, world_size)
                    note_other_ranks_hazards(err, failed, {rank.rank: list(rank.detector.order) for rank in ranks})
                raise err
            World.check_finished([line for rank in ranks for line in rank.collectives.pending_lines()])
            tokens = {}
            if any(rank.detector.deferred for rank in ranks):  # (only deferred accesses need them: Detector.finish)
                for rank in ranks:
                    tokens.update(rank.tokens.resolved)
            outcomes = [take_outcome(rank, tokens) for rank in ranks]
        finally:
            for rank in ranks:
                release_rank(rank)
    return build_result(fn, outcomes, world_size, seed, world.policy, spec.nccl, kwargs, args)
