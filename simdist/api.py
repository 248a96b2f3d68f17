"""simdist.run and RunResult: the public entry point."""
from __future__ import annotations

import hashlib
import json
import shlex
import sys
from dataclasses import dataclass, field

import torch

from .engine.allocator import recycle
from .engine.context import current_rank
from .engine.errors import DeterminismError, HazardError, SimulationError
from .engine.outcome import merge_hazards, rank_outcome
from .engine.policies import Choice, Jitter, make_policy
from .engine.world import World
from .faces.c10d import auto_init
from .faces.patches import Installed, TorchRankHooks
from .faces.tensor import SimTensor
from .faces.world import make_world
from .ranks.threads import ThreadTransport
from .trace import TraceSource, chrome_trace


def default_nccl_profile():
    v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return "2.7" if v < (2, 8) else "2.8"


@dataclass
class RunResult:
    """What one simulated run produced."""

    returns: list
    hazards: list
    _digest: object = field(repr=False)
    _trace_source: tuple = field(repr=False)
    schedule: dict = field(repr=False)
    seed: int = 0
    world_size: int = 1
    policy: str = ""
    nccl: str = ""
    end_time_ns: int = 0
    ops: int = 0
    replay: str = ""

    @property
    def digest(self) -> str:
        """Hash of the schedule (every op's stream, sequence, start and end), the returns and the hazards."""
        d = self._digest
        if not isinstance(d, str):
            d = self._digest = d.hexdigest()
        return d

    @property
    def trace(self):
        """The Perfetto / Chrome trace as a dict (built on first use: most runs never need it)."""
        t = self.__dict__.get("_trace")
        if t is None:
            t = self.__dict__["_trace"] = chrome_trace(*self._trace_source)
        return t

    def save_trace(self, path):
        """Write a Perfetto / chrome://tracing JSON: a rank is a process, a stream a thread."""
        with open(path, "w") as f:
            json.dump(self.trace, f)
        return path

    def report(self) -> str:
        head = (f"simdist run: world_size={self.world_size} seed={self.seed} policy={self.policy} "
                f"nccl={self.nccl} ops={self.ops} virtual_time={self.end_time_ns / 1e6:.3f} ms "
                f"digest={self.digest}")
        if not self.hazards:
            return head + "\nno hazards"
        obs = sum(h.observed for h in self.hazards)
        body = "\n\n".join(str(h) for h in self.hazards)
        return f"{head}\n{len(self.hazards)} hazard(s), {obs} observed\n\n{body}\n\nreplay: {self.replay}"

    def raise_for_hazards(self):
        if self.hazards:
            raise HazardError(self.hazards)
        return self

    @property
    def observed(self):
        return [h for h in self.hazards if h.observed]


def _to_host(x):
    if isinstance(x, SimTensor):
        return x._inner.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_host(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_host(v) for k, v in x.items()}
    return x


def _hash_value(h, x):
    if isinstance(x, torch.Tensor):
        t = x.detach().contiguous()
        h.update(f"T{tuple(t.shape)}{t.dtype}".encode())
        t = t.reshape(-1)  # a 0-dim tensor cannot be viewed as bytes
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(x, (list, tuple)):
        h.update(b"[")
        for v in x:
            _hash_value(h, v)
        h.update(b"]")
    elif isinstance(x, dict):
        h.update(b"{")
        for k in sorted(x, key=repr):
            h.update(repr(k).encode())
            _hash_value(h, x[k])
        h.update(b"}")
    else:
        h.update(repr(x).encode())


def _target_of(fn):
    mod = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", "fn"))
    if mod is None or mod.startswith("__"):
        main = sys.modules.get(mod or "__main__")
        path = getattr(main, "__file__", None)
        return f"{path}:{name}" if path else f"<interactive>:{name}"
    return f"{mod}:{name}"


def _replay_command(fn, world_size, seed, pol, nccl, kwargs=None, args=()):
    script = getattr(fn, "_simdist_script", None)
    spawned = getattr(fn, "_simdist_spawn", None)
    target = shlex.quote(script[0]) if script else shlex.quote(_target_of(spawned or fn))
    cmd = f"simdist run {target} --world-size {world_size} --seed {seed} --nccl {nccl}"
    if spawned is not None:
        cmd += " --spawn"
    for flag, value in (("--args", list(args)), ("--kwargs", kwargs)):
        if value:
            try:
                cmd += f" {flag} {shlex.quote(json.dumps(value))}"
            except TypeError:
                cmd += f" (with non-JSON {flag[2:]})"
    if isinstance(pol, Choice) and not callable(pol.choices):
        cmd += f" --delays {','.join(str(int(c)) for c in pol.choices) or '0'}"
    elif not isinstance(pol, Jitter):
        cmd += f" --policy {shlex.quote(pol.name)}"
    if script and script[1]:
        cmd += " -- " + " ".join(shlex.quote(a) for a in script[1])  # last: everything after `--` is the script's
    return cmd


def run(fn, *, world_size=1, seed=0, args=(), kwargs=None, policy=None, nccl=None, poison="nan",
        check_determinism=False, device_count=None, avoid_record_streams=None, torchrun=False) -> RunResult:
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
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if check_determinism:
        a = _run_once(fn, world_size, seed, args, kwargs, policy, nccl, poison, device_count,
                      avoid_record_streams, torchrun)
        b = _run_once(fn, world_size, seed, args, kwargs, policy, nccl, poison, device_count,
                      avoid_record_streams, torchrun)
        if a.digest != b.digest:
            raise DeterminismError(f"two runs of seed {seed} differ: {a.digest} != {b.digest}. The program "
                                   "depends on something outside the simulation (wall clock, id(), global "
                                   "state kept across runs, unseeded randomness).")
        return a
    return _run_once(fn, world_size, seed, args, kwargs, policy, nccl, poison, device_count,
                     avoid_record_streams, torchrun)


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
        try:
            exec(code, mod.__dict__)
        except SystemExit as e:
            if e.code not in (None, 0):
                raise ScriptExit(f"{os.path.basename(path)} exited with status {e.code!r}") from None
        return None

    main.__name__ = main.__qualname__ = os.path.basename(path)
    main._simdist_script = (os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path,
                            tuple(argv))
    return main


def spawn(fn, args=(), nprocs=1, **options) -> RunResult:
    """torch.multiprocessing.spawn's calling convention: `fn(rank, *args)` on each of `nprocs` simulated ranks.

    For code written for mp.spawn (whose worker takes its rank first and may call
    init_process_group(rank=rank, world_size=nprocs)). Other options are those of `simdist.run`.
    """

    def per_rank(*a):
        return fn(current_rank().rank, *a)

    per_rank.__name__ = per_rank.__qualname__ = getattr(fn, "__qualname__", getattr(fn, "__name__", "fn"))
    per_rank.__module__ = getattr(fn, "__module__", None)
    per_rank._simdist_spawn = fn  # the replay command names the worker, with --spawn
    options.setdefault("torchrun", True)
    return run(per_rank, world_size=nprocs, args=tuple(args), **options)


def run_script(path, *, world_size=1, argv=(), **options) -> RunResult:
    """Run a torchrun-style script in a simulated world: what `torchrun --nproc-per-node=N path argv...` does.

    Each rank executes the file as `__main__` with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT set, and
    `sys.argv` = [path, *argv] for the run. Other options are those of `simdist.run`.
    """
    import os
    main = script_main(path, argv)
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    options.setdefault("torchrun", True)
    try:
        return run(main, world_size=world_size, **options)
    finally:
        sys.argv = old_argv
        sys.path[:] = old_path


class _DigestSource:
    """Computes RunResult.digest on first use: most runs (the hunt's thousands) never read it."""

    def __init__(self, outcomes, returns, hazards):
        self.outcomes, self.hazards = outcomes, hazards
        r = hashlib.blake2b(digest_size=16)
        _hash_value(r, returns)  # now: the caller may change the returned objects before reading the digest
        self.returns_hash = r.digest()

    def hexdigest(self):
        h = hashlib.blake2b(digest_size=16)
        for o in self.outcomes:  # every rank's (stream, seq, start, end) of every op, in its execution order
            h.update(o.rank.to_bytes(4, "little"))
            h.update(o.ops.tobytes())
        h.update(self.returns_hash)
        for hz in self.hazards:
            h.update(f"{hz.kind}|{hz.first.site}|{hz.second.site}|{hz.observed}".encode())
        return h.hexdigest()


def _run_once(fn, world_size, seed, args, kwargs, policy, nccl, poison, device_count, avoid_record_streams,
              torchrun):
    import os
    kwargs = kwargs or {}
    nccl = str(nccl) if nccl is not None else default_nccl_profile()
    if nccl.startswith("2.") and nccl not in ("2.7", "2.8"):
        nccl = "2.7" if tuple(map(int, nccl.split(".")[:2])) < (2, 8) else "2.8"
    if nccl not in ("2.7", "2.8"):
        raise ValueError(f"nccl profile must be '2.7' or '2.8' (or a torch version), got {nccl!r}")
    if avoid_record_streams is None:
        avoid_record_streams = os.environ.get("TORCH_NCCL_AVOID_RECORD_STREAMS", "0") == "1"
    pol = make_policy(policy, seed)
    world = make_world(world_size, seed, pol, nccl, poison, device_count, avoid_record_streams)
    ranks = [world.ranks[r] for r in range(world_size)]
    for rs in ranks:
        rs.env = {"RANK": str(rs.rank), "LOCAL_RANK": str(rs.rank), "WORLD_SIZE": str(world_size),
                  "LOCAL_WORLD_SIZE": str(world_size), "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                  "MASTER_PORT": "29500", "ROLE_RANK": str(rs.rank), "ROLE_WORLD_SIZE": str(world_size),
                  "GROUP_WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "simdist"}  # what torchrun sets
        if not torchrun:
            rs.current_device = rs.rank % world.device_count

    def body(rank):
        if not torchrun:
            auto_init(world.ranks[rank])
        return fn(*args, **kwargs)

    with Installed():  # the returns are copied out before torch's thread settings are restored
        caller_rng = torch.default_generator.get_state()  # the ranks' generators must not disturb the caller's
        try:
            ThreadTransport(world, TorchRankHooks()).run(body)
        finally:
            torch.default_generator.set_state(caller_rng)
        try:
            if world.fatal is not None:
                err = world.fatal
                for rs in ranks:
                    if rs.error is err and not isinstance(err, SimulationError):
                        note = f"(raised inside simulated rank {rs.rank} of {world_size})"
                        if hasattr(err, "add_note"):
                            err.add_note(note)
                raise err
            World.check_finished([line for rs in ranks for line in rs.collectives.pending_lines()])
            tokens = {}
            for rs in ranks:
                tokens.update(rs.tokens.resolved)
            outcomes = [rank_outcome(rs, tokens, _to_host(rs.returned)) for rs in ranks]
        finally:
            for rs in ranks:
                rs.returned = None
                for d in rs.devices.values():
                    d.memory.closed = True
                    recycle(d.memory)
    return _result(fn, outcomes, world_size, seed, pol, nccl, kwargs, args)


def _result(fn, outcomes, world_size, seed, pol, nccl, kwargs, args):
    hazards = merge_hazards(outcomes)
    returns = [o.returned for o in outcomes]
    schedule = {}
    for o in outcomes:
        schedule.update(o.schedule)
    replay = _replay_command(fn, world_size, seed, pol, nccl, kwargs, args)
    return RunResult(returns=returns, hazards=hazards, _digest=_DigestSource(outcomes, returns, hazards),
                     _trace_source=(TraceSource(outcomes, world_size), hazards), schedule=schedule, seed=seed,
                     world_size=world_size, policy=pol.describe(), nccl=nccl,
                     end_time_ns=max((o.end_time for o in outcomes), default=0),
                     ops=sum(len(o.ops) // 4 for o in outcomes), replay=replay)
