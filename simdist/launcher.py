"""Every simulated rank in an OS process of its own (simdist.run(..., transport="processes"), run_script, and
`torchrun ... -m simdist run SCRIPT.py`).

A run's processes meet in a torch.distributed Store under one key prefix (torch's own rendezvous machinery:
a TCPStore that simdist.run hosts, or under torchrun the store torchrun's agent hosts, reached through
`torch.distributed.rendezvous("env://")`). Each rank process builds a World holding only its own rank from the
run's RunSpec (simdist/session.py) and runs the program under the process transport (simdist/ranks/
processes.py), which passes the right to run and the ranks' messages through the same store. The run ends in
three steps, each through the store:
  1. every rank posts its report ("done": finished, deadlocked or failed, with its pending collectives);
  2. the collector (the caller of simdist.run, or rank 0 under torchrun) reads them all: on a failure or a
     deadlock it raises that error and tells the ranks to stop; otherwise it tells them to go on;
  3. every rank posts its resolved collective tokens, reads everyone's (they decide its deferred accesses), and
     posts its RankOutcome; the collector assembles the RunResult exactly as the thread transport does, so both
     give the same digest for the same seed.
A rank process that dies without reporting (an interpreter crash, a kill) ends the run with RankCrashed naming
the rank and its exit status; the other processes are stopped. Rank processes started by simdist.run come
from a fork server (simdist/forkserver.py) that has torch and simdist imported already.
"""
from __future__ import annotations

import os
import pickle
import sys
import time
import traceback
import uuid
from datetime import timedelta

from .engine.errors import SimulationError
from .engine.hazards import hazard_summary
from .engine.world import World
from .ranks.processes import put, take
from .session import note_other_ranks_hazards, note_rank, rank_body, release_rank, take_outcome

_ENV = "SIMDIST_RANK_PROCESS"  # host:port:prefix:rank of a rank process started by simdist.run
PRELOAD = ("simdist.launcher:prepare_fork_server",)
# SIMDIST_PRELOAD=megatron.core,transformers: libraries the fork server imports too, so that each rank process
# starts with them imported (a fresh copy each: imported before the fork, as if each process had imported them;
# only a library whose import reads the rank's environment must not be preloaded)
PRELOAD_ENV = "SIMDIST_PRELOAD"
_STOP = b"stop"
_GO = b"go"


class RankCrashed(SimulationError):
    """A rank's process died without reporting (the interpreter crashed or was killed)."""


def _dumps(x):
    return pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)


# --- what a rank process runs -----------------------------------------------------------------------------------
def program_target(fn):
    """How another process finds the program: a script and its argv, or a function by module and name."""
    src = getattr(fn, "_simdist_source", None)
    if src is not None:
        return ("script", src[0], src[1])
    spawned = getattr(fn, "_simdist_spawn", None)
    if spawned is not None:
        return ("spawn",) + program_target(spawned)
    mod = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", "")
    if "<locals>" in name or "<lambda>" in name or mod is None:
        raise SimulationError(f"transport='processes' needs a function another process can import by module and "
                              f"name; {mod}.{name} is local to a function or a lambda")
    if mod in ("__main__", "__simdist_target__") or mod not in sys.modules:
        path = getattr(sys.modules.get(mod), "__file__", None)
        if path is None:
            raise SimulationError(f"transport='processes' needs a function another process can import; {name} "
                                  "is defined in an interactive session")
        return ("file", os.path.abspath(path), name)
    module = sys.modules[mod]
    if getattr(module, "__spec__", None) is None and getattr(module, "__file__", None):
        return ("file", os.path.abspath(module.__file__), name)
    return ("function", mod, name)


def resolve_target(target):
    kind = target[0]
    if kind == "spawn":
        from .engine.context import current_rank
        worker = resolve_target(target[1:])

        def per_rank(*a):
            return worker(current_rank().rank, *a)
        return per_rank
    if kind == "script":
        from .session import script_main
        path, argv = target[1], target[2]
        sys.argv = [path, *argv]
        sys.path.insert(0, os.path.dirname(path))
        return script_main(path, argv)
    if kind == "file":
        import importlib.util
        spec = importlib.util.spec_from_file_location("__simdist_target__", target[1])
        obj = importlib.util.module_from_spec(spec)
        sys.modules["__simdist_target__"] = obj
        sys.path.insert(0, os.path.dirname(target[1]))
        spec.loader.exec_module(obj)
    else:
        import importlib
        obj = importlib.import_module(target[1])
    for part in target[2].split("."):
        obj = getattr(obj, part)
    return obj


def prepare_fork_server():
    """What the fork server does once for every rank process (simdist/forkserver.py): import torch and simdist
    (this module), and what torch would import lazily at every run's first op (torch._dynamo: a second)."""
    import torch
    import torch.distributed  # noqa: F401

    from .faces.patches import _warm_lazy_imports
    _warm_lazy_imports()
    torch.set_num_threads(1)


# --- the caller's side ------------------------------------------------------------------------------------------
def run_in_processes(fn, spec, args, kwargs):
    """simdist.run with transport="processes": a store here, one forked process per rank, the result here."""
    from .engine.policies import make_policy
    from .forkserver import ForkServer
    from .result import build_result

    policy = make_policy(spec.policy, spec.seed)  # (checked here: a bad policy fails before any process starts)
    config = dict(target=program_target(fn), spec=spec, args=tuple(args), kwargs=kwargs, sys_path=list(sys.path),
                  cwd=os.getcwd())
    try:
        blob = _dumps(config)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise SimulationError(f"transport='processes': the run's arguments and policy must pickle ({e})") from None
    store = _local_store()
    prefix = f"simdist/{uuid.uuid4().hex}/"
    put(store, prefix + "config", blob)
    extra = tuple(m.strip() for m in os.environ.get(PRELOAD_ENV, "").split(",") if m.strip())
    server = ForkServer.get(PRELOAD + extra)
    sys.stdout.flush()
    sys.stderr.flush()
    pids = []
    try:
        for r in range(spec.world_size):
            env = dict(os.environ, **{_ENV: f"127.0.0.1:{store.port}:{prefix}:{r}"})
            env.setdefault("RES_OPTIONS", "timeout:1 attempts:1")  # see _local_store
            pids.append(server.start("simdist.launcher:rank_main", env, os.getcwd()))

        def watch(r):
            code = server.poll(pids[r])
            if code is not None:
                for pid in pids:
                    server.kill(pid)
            return code

        outcomes = collect(store, prefix, spec.world_size, watch)
    except BaseException:
        for pid in pids:  # (on success they exit by themselves, once their output is flushed)
            server.kill(pid)
        raise
    return build_result(fn, outcomes, spec.world_size, spec.seed, policy, spec.nccl, kwargs, args)


def collect(store, prefix, world_size, watch=None):
    """The collector's steps 2 and 3 (see the module docstring): every rank's RankOutcome."""
    decide(store, prefix, world_size, watch)
    return outcomes(store, prefix, world_size, watch)


def decide(store, prefix, world_size, watch=None):
    """Step 2: every rank's report; raises a rank's error or the deadlock (and tells the ranks to stop), else
    tells them to go on. `watch(rank)` gives a rank process's exit code once it has died (None while it runs)."""
    reports = _gather(store, prefix, "done", world_size, watch)
    err = next((rep for rep in reports if "error" in rep), None)
    deadlock = any(rep["over"][0] == "deadlock" for rep in reports)
    pending = [line for rep in reports for line in rep["pending"]]
    try:
        if err is not None:
            exc = _rebuild_error(err)
            note_rank(exc, err["rank"], world_size)
            note_other_ranks_hazards(exc, err["rank"], {rep["rank"]: rep.get("hazards") or (0, []) for rep in reports})
            raise exc
        if deadlock:
            raise World.deadlock([rep["wait"] for rep in reports], pending)
        World.check_finished(pending)
    except BaseException:
        store.set(prefix + "go", _STOP)
        raise
    store.set(prefix + "go", _GO)


def outcomes(store, prefix, world_size, watch=None):
    """Step 3: every rank's RankOutcome, in rank order."""
    return [pickle.loads(b) for b in _gather(store, prefix, "outcome", world_size, watch, raw=True)]


def _gather(store, prefix, what, world_size, watch, raw=False):
    keys = [f"{prefix}{what}/{r}" for r in range(world_size)]
    out = [None] * world_size
    pending = list(range(world_size))
    delay = 0.0005
    while pending:
        still = []
        for r in pending:
            if store.check([keys[r]]):
                data = take(store, keys[r])
                out[r] = data if raw else pickle.loads(data)
            else:
                still.append(r)
        pending = still
        if not pending:
            break
        if watch is not None:
            for r in pending:
                code = watch(r)
                if code is not None and not store.check([keys[r]]):
                    raise RankCrashed(f"simulated rank {r}'s process died ({_exit_text(code)}) before the run "
                                      "ended; its output, if any, is above")
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    return out


def _local_store():
    """A TCPStore master on an IPv4 loopback socket. torch's store names every peer with getnameinfo (a reverse
    DNS lookup); for an IPv6 socket's v4-mapped peer /etc/hosts has no answer and the query goes to the network,
    where a lost reply costs 5 s (measured here: 1 connection in 20 stalled). An IPv4 listener's peers are found
    in /etc/hosts. The rank processes' own lookup of the server's address still goes out once each; their
    RES_OPTIONS bounds it at 1 s (then torch stops asking)."""
    import socket

    from torch.distributed import TCPStore
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)
    port = listener.getsockname()[1]
    return TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(hours=24),
                    use_libuv=True, master_listen_fd=listener.detach())


def _exit_text(code):
    import signal
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def _rebuild_error(report):
    try:
        exc = pickle.loads(report["error"])
    except Exception:  # noqa: BLE001 - the exception does not unpickle here: its text still tells what happened
        exc = RuntimeError(report["error_text"])
    if hasattr(exc, "add_note"):
        exc.add_note(f"traceback of simulated rank {report['rank']}'s process:\n" + report["traceback"].rstrip())
    return exc


# --- a rank's side ----------------------------------------------------------------------------------------------
def rank_main():
    """The entry of a rank process started by simdist.run (its environment names the store, prefix and rank)."""
    from torch.distributed import TCPStore
    host, port, rest = os.environ.pop(_ENV).split(":", 2)
    prefix, rank = rest.rsplit(":", 1)
    store = TCPStore(host, int(port), is_master=False, wait_for_workers=False, timeout=timedelta(hours=24))
    config = pickle.loads(take(store, prefix + "config"))
    sys.path[:] = config["sys_path"]
    os.chdir(config["cwd"])
    process = RankProcess(config, int(rank), store, prefix)
    process.run()
    process.finish()
    return 0


class RankProcess:
    """One rank of the run `config` describes, in this process: run() plays the program and posts the rank's
    report (step 1), finish() waits for the collector's word and posts the rank's outcome (step 3)."""

    def __init__(self, config, rank, store, prefix):
        self.config, self.rank, self.store, self.prefix = config, rank, store, prefix
        self.world = None

    def run(self):
        import faulthandler

        from .faces.patches import Installed, TorchRankHooks
        from .ranks.processes import ProcessTransport
        faulthandler.enable()  # a crash of the interpreter prints the rank's Python stack
        config, rank = self.config, self.rank
        spec = config["spec"]
        report = {"rank": rank, "pending": [], "over": ("failed", rank)}
        try:
            fn = resolve_target(config["target"])
            self.world = spec.world(local_ranks=[rank])
            me = self.world.ranks[rank]
            body = rank_body(self.world, fn, config["args"], config["kwargs"] or {}, spec.torchrun)
            with Installed():
                transport = ProcessTransport(self.world, rank, self.store, self.prefix, TorchRankHooks())
                watching = self._watch_for_stall(me, transport)
                try:
                    transport.run(body)
                finally:
                    watching.set()
                report["over"] = transport.over
                report["pending"] = me.collectives.pending_lines()
                report["hazards"] = hazard_summary(list(me.detector.order))  # (another rank's exception: decide)
                if me.error is not None:
                    _record_error(report, me.error)
                elif transport.over is not None and transport.over[0] == "deadlock":
                    report["wait"] = transport.wait_text
        except BaseException as e:  # noqa: BLE001 - a failure outside the program (set-up)
            _record_error(report, e)
        sys.stdout.flush()
        sys.stderr.flush()
        put(self.store, f"{self.prefix}done/{rank}", _dumps(report))

    def _watch_for_stall(self, me, transport):
        """A thread watching this process's program thread (simdist/ranks/stall.py). On a stall it posts the
        rank's report with the Stalled error, ends the run for the other ranks (the stalled rank holds the baton:
        only the holder runs) and, since the program thread stays blocked, exits the process once the collector
        has had the time to read the report. Returns the event that stops the watch."""
        import threading

        from .ranks.stall import INTERVAL_S, StallWatch, limit_s
        stop = threading.Event()
        limit = limit_s()
        if limit is None:
            return stop
        watch = StallWatch(me, threading.get_ident(), limit)

        def run():
            while not stop.wait(INTERVAL_S):
                err = watch.check()
                if err is None or stop.is_set():
                    continue
                report = {"rank": self.rank, "pending": me.collectives.pending_lines(), "over": ("failed", self.rank)}
                _record_error(report, err)
                sys.stderr.write(f"simdist: {err}\n")
                sys.stderr.flush()
                put(self.store, f"{self.prefix}done/{self.rank}", _dumps(report))
                transport._announce("failed")
                try:
                    self.store.wait([self.prefix + "go"], timedelta(seconds=10))
                except Exception:  # noqa: BLE001 - under torchrun the collector may be this stalled rank
                    pass
                os._exit(70)

        threading.Thread(target=run, name="simdist-stall-watch", daemon=True).start()
        return stop

    def finish(self):
        store, prefix, rank, world = self.store, self.prefix, self.rank, self.world
        try:
            if store.get(prefix + "go") != _GO or world is None:
                return
            me = world.ranks[rank]
            put(store, f"{prefix}tokens/{rank}", _dumps(me.tokens.resolved))
            tokens = {}
            if me.detector.deferred:  # (only deferred accesses need every rank's tokens: Detector.finish)
                for r in range(world.world_size):
                    tokens.update(pickle.loads(take(store, f"{prefix}tokens/{r}")))
            outcome = take_outcome(me, tokens)
            from .engine.frames import portable_frames
            for hz in outcome.hazards:
                for acc in (hz.first, hz.second):
                    acc.frames = portable_frames(acc.frames)
            try:
                blob = _dumps(outcome)
            except Exception as e:  # noqa: BLE001 - said by name, not as a pickling traceback
                outcome.returned = SimulationError(f"transport='processes': rank {rank}'s return value does not "
                                                   f"pickle ({type(e).__name__}: {e})")
                blob = _dumps(outcome)
            put(store, f"{prefix}outcome/{rank}", blob)
        finally:
            if world is not None:
                release_rank(world.ranks[rank])


# --- under torchrun ---------------------------------------------------------------------------------------------
def under_torchrun():
    """Whether this process is a worker torchrun started (torchrun ... -m simdist run SCRIPT.py)."""
    return "TORCHELASTIC_RUN_ID" in os.environ and "WORLD_SIZE" in os.environ and _ENV not in os.environ


def run_under_torchrun(fn, spec, args=(), kwargs=None):
    """This torchrun worker is rank RANK of a simulated world of WORLD_SIZE GPUs; the workers meet in torchrun's
    own store (torch.distributed.rendezvous("env://"), the store init_process_group would use). Every rank
    returns the RunResult (rank 0 collects it and hands it to the others), or raises the run's error."""
    from torch.distributed import rendezvous

    from .result import build_result
    from .engine.policies import make_policy
    store, rank, world_size = next(rendezvous("env://", timeout=timedelta(hours=24)))
    if world_size != spec.world_size:
        raise SimulationError(f"torchrun started {world_size} workers but the simulated world has {spec.world_size} "
                              "ranks (leave out -n under torchrun)")
    run_id = f"{os.environ['TORCHELASTIC_RUN_ID']}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    prefix = f"simdist/{run_id}/"
    config = dict(target=program_target(fn), spec=spec, args=tuple(args), kwargs=kwargs or {})
    process = RankProcess(config, rank, store, prefix)
    process.run()
    if rank == 0:
        try:
            decide(store, prefix, world_size)
        except BaseException as e:  # noqa: BLE001 - every rank raises the run's error
            put(store, prefix + "result", _dumps(("error", e)))
            raise
    process.finish()
    if rank == 0:
        outs = outcomes(store, prefix, world_size)
        res = build_result(fn, outs, spec.world_size, spec.seed, make_policy(spec.policy, spec.seed), spec.nccl,
                           kwargs or {}, args)
        res.digest  # noqa: B018 - computed here, where the outcomes are
        put(store, prefix + "result", _dumps(("result", res)))
    kind, value = pickle.loads(take(store, prefix + "result"))
    if kind == "error":
        raise value
    return value


def _record_error(report, e):
    report["error_text"] = f"{type(e).__name__}: {e}"
    report["traceback"] = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    try:
        report["error"] = _dumps(e)
    except Exception:  # noqa: BLE001 - an exception that does not pickle: its text and traceback still go
        report["error"] = b""
