"""The `simdist` command.

  simdist run FILE.py:FN       run a function in a simulated world and print its report (also: module:fn)
  simdist run SCRIPT.py -n 2   run a torchrun-style script as __main__ on every rank (like torchrun
                               --nproc-per-node=2 SCRIPT.py); script arguments go after `--`
  simdist hunt                 run the incident hunt (registered by simdist.properties)
  simdist scenarios --export   write the scenario corpus for the nightly GPU job (simdist.properties)
  simdist bench                run the benchmarks (simdist.benchmarks)

Other packages add commands through the `simdist.commands` entry-point group: an entry point names a function
register(subparsers) that adds its subparser and sets `func` (called with the parsed arguments; its return
value is the exit status; a command that passes its arguments on sets a `rest` argument). Bad input is answered with one line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from importlib.metadata import entry_points

POLICIES = ("jitter", "none", "pct")


class UsageError(Exception):
    """Bad input on the command line: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


def positive_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _load(target):
    if ":" not in target:
        raise UsageError(f"simdist run: expected FILE.py:FUNCTION, module:function or SCRIPT.py, got {target!r}")
    where, name = target.rsplit(":", 1)
    if where.endswith(".py") or os.path.exists(where):
        if not os.path.isfile(where):
            raise UsageError(f"simdist run: no such file {where!r}")
        spec = importlib.util.spec_from_file_location("__simdist_target__", where)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["__simdist_target__"] = mod
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
        spec.loader.exec_module(mod)
    else:
        try:
            mod = importlib.import_module(where)
        except ModuleNotFoundError as e:
            raise UsageError(f"simdist run: cannot import module {where!r} ({e})") from None
    obj = mod
    for part in name.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"simdist run: {where} has no function {name!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"simdist run: {target} is not a function")
    return obj


def _json_arg(flag, text, kind):
    try:
        v = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"simdist run: {flag} is not valid JSON ({e})") from None
    if not isinstance(v, kind):
        raise UsageError(f"simdist run: {flag} must be a JSON {'object' if kind is dict else 'list'}")
    return v


def _policy(a):
    import simdist
    if a.delays:
        try:
            policy = [int(x) for x in a.delays.split(",")]
        except ValueError:
            raise UsageError(f"simdist run: --delays expects comma-separated integers, got {a.delays!r}") from None
    else:
        policy = a.policy
    if a.delay_op:
        parts = a.delay_op.split(",")
        if len(parts) != 4:
            raise UsageError(f"simdist run: --delay-op expects RANK,STREAM,SEQ,NS, got {a.delay_op!r}")
        rank, stream, seq, ns = parts
        try:
            key = (int(rank), stream, int(seq))
            ns = int(ns)
        except ValueError:
            raise UsageError(f"simdist run: --delay-op expects RANK,STREAM,SEQ,NS, got {a.delay_op!r}") from None
        policy = simdist.Targeted({key: ns}, simdist.make_policy(a.policy, a.seed))
    return policy


def cmd_run(a):
    import simdist
    from simdist.launcher import under_torchrun
    script = ":" not in a.target and (a.target.endswith(".py") or os.path.isfile(a.target))
    if a.args and not script:
        raise UsageError(f"simdist run: extra arguments {a.args!r} are only for scripts (FILE.py)")
    if a.nccl is not None and a.nccl not in ("2.7", "2.8") and not a.nccl.startswith("2."):
        raise UsageError(f"simdist run: --nccl must be 2.7 or 2.8 (or a torch version 2.x), got {a.nccl!r}")
    policy = _policy(a)
    kwargs = _json_arg("--kwargs", a.kwargs, dict) if a.kwargs else None
    args = tuple(_json_arg("--args", a.fn_args, list)) if a.fn_args else ()
    if script and not os.path.isfile(a.target):
        raise UsageError(f"simdist run: no such script {a.target!r}")
    fn = None if script else _load(a.target)
    options = dict(seed=a.seed, nccl=a.nccl, policy=policy)
    if under_torchrun():
        res = _run_as_torchrun_worker(a, script, fn, args, kwargs, options)
        if res is None:
            return 0
    else:
        world_size = a.world_size or 1
        if a.transport:
            options["transport"] = a.transport
        if script:
            res = simdist.run_script(a.target, argv=a.args, world_size=world_size, **options)
        elif a.spawn:
            res = simdist.spawn(fn, args=args, nprocs=world_size, kwargs=kwargs, **options)
        else:
            res = simdist.run(fn, world_size=world_size, args=args, kwargs=kwargs, **options)
    print(res.report())
    if getattr(a, "export_witness", None):
        from simdist.witness import export_from_cli
        export_from_cli(a, res, script, fn, args, kwargs, options)
    if a.trace:
        res.save_trace(a.trace)
        print(f"trace: {a.trace} (open in https://ui.perfetto.dev)")
    return 1 if res.hazards else 0


def _run_as_torchrun_worker(a, script, fn, args, kwargs, options):
    """This process is one of the workers torchrun started: one simulated rank of a WORLD_SIZE-GPU world.
    Rank 0 returns the RunResult (printed as `simdist run` prints it); the other ranks return None."""
    from simdist.api import script_main, spawned
    from simdist.engine.errors import SimulationError
    from simdist.launcher import run_under_torchrun
    from simdist.session import RunSpec
    world_size = int(os.environ["WORLD_SIZE"])
    if a.world_size not in (None, world_size):
        raise UsageError(f"simdist run: -n {a.world_size} but torchrun started {world_size} workers (leave out -n "
                         "under torchrun: the simulated world has one rank per worker)")
    if a.transport == "threads":
        raise UsageError("simdist run: --transport threads cannot be used under torchrun (every worker is a rank)")
    if script:
        fn = script_main(a.target, a.args)
    elif a.spawn:
        fn = spawned(fn)
    spec = RunSpec.make(world_size, options["seed"], options["policy"], options["nccl"], "nan", None, None,
                        torchrun=script or a.spawn)
    rank = int(os.environ["RANK"])
    try:
        res = run_under_torchrun(fn, spec, args, kwargs)
    except SimulationError as e:
        if rank == 0:
            raise RankError(f"{type(e).__name__}: {e}") from None
        raise SystemExit(1) from None
    return res if rank == 0 else None


class RankError(Exception):
    """The run failed with simdist's named error: printed as it is (several lines), exit status 1."""


def build_parser():
    p = _Parser(
        prog="simdist",
        description="Simulated multi-GPU worlds on the CPU: find, explain and replay races between CUDA streams "
                    "and NCCL collectives, deterministically.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    r = sub.add_parser("run", help="run FILE.py:FN, module:fn or a torchrun-style SCRIPT.py in a simulated world "
                                   "and report hazards",
                       description="Runs a function (FILE.py:FN or module:fn, called once per rank) or a whole "
                                   "torchrun-style script (SCRIPT.py, executed as __main__ on every rank with RANK, "
                                   "LOCAL_RANK and WORLD_SIZE set) on simulated GPUs, and prints the hazard report. "
                                   "Exit status: 0 clean, 1 hazards found or the program failed (its error printed), "
                                   "2 bad input.")
    r.add_argument("target", help="FILE.py:FN, module:fn or SCRIPT.py")
    r.add_argument("args", nargs="*", help="arguments for a script (put them after `--`)")
    r.add_argument("--world-size", "--nproc-per-node", "-n", type=positive_int, default=None, dest="world_size",
                   help="simulated ranks, one GPU each (default 1; under torchrun: one per worker)")
    r.add_argument("--transport", default=None, choices=("threads", "processes"),
                   help="how ranks run: threads of this process, or processes of their own (own module globals, "
                        "as torchrun starts them). Default: processes for a script, threads for a function")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--nccl", default=None, help="2.7 or 2.8 (default: the installed torch)")
    r.add_argument("--policy", default=None, choices=POLICIES, help="jitter (default), none, pct")
    r.add_argument("--delays", default=None, help="comma-separated choice delays (replays a shrunk schedule)")
    r.add_argument("--trace", default=None, help="write a Perfetto trace JSON here")
    r.add_argument("--kwargs", default=None, help="JSON object of keyword arguments for the function")
    r.add_argument("--args", default=None, dest="fn_args", help="JSON list of positional arguments for the function")
    r.add_argument("--spawn", action="store_true",
                   help="call FN(rank, *args), torch.multiprocessing.spawn's convention (simdist.spawn)")
    r.add_argument("--delay-op", default=None, metavar="RANK,STREAM,SEQ,NS",
                   help="delay one op by NS virtual ns (the targeted policy; as printed by simdist hunt)")
    r.add_argument("--export-witness", default=None, metavar="FILE",
                   help="write each hazard's smallest delay schedule that damages the values (simdist.witness) "
                        "as JSON to FILE")
    r.set_defaults(func=cmd_run)
    for ep in sorted(entry_points(group="simdist.commands"), key=lambda e: e.name):
        try:
            ep.load()(sub)
        except Exception as e:  # noqa: BLE001 - a broken plug-in must not take the run command down
            broken = sub.add_parser(ep.name, help=f"(unavailable: {type(e).__name__}: {e})")
            broken.set_defaults(func=lambda a, e=e, n=ep.name: _unavailable(n, e))
    return p


def _unavailable(name, err):
    raise UsageError(f"simdist {name}: this command could not be loaded ({type(err).__name__}: {err})")


_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep  # simdist's own frames start with this


def _rank_traceback(e):
    """(header, text): the rank process's traceback (a note the launcher adds: header names the rank) or the
    exception's own traceback (header None)."""
    import traceback
    notes = [n for n in getattr(e, "__notes__", ()) if n.startswith("traceback of simulated rank")]
    if notes:
        header, _, text = notes[0].partition("\n")
        return header, text
    return None, "".join(traceback.format_exception(e))


def _call_site(e):
    """Where the program (or the library it called) was when simdist raised a named error: the innermost frame
    outside simdist, with its source line. A refusal inside library code (FSDP's `flat_param.data = ...`) names
    the library's line."""
    lines = _rank_traceback(e)[1].splitlines()
    site = None
    for i, line in enumerate(lines):
        if line.startswith('  File "') and not line[len('  File "'):].startswith(_PKG):
            src = lines[i + 1].strip() if i + 1 < len(lines) and lines[i + 1].startswith("    ") else ""
            site = line.strip() + (f": {src}" if src else "")
    return f"  raised at {site}" if site else ""


def _program_traceback(e):
    """A program's exception as the rank saw it, without simdist's frames between the command line and the
    program."""
    header, text = _rank_traceback(e)
    out, skip = [], False
    for line in text.splitlines():
        if line.startswith('  File "'):
            skip = line[len('  File "'):].startswith(_PKG)
        elif not line.startswith("    "):
            skip = False
        if not skip:
            out.append(line)
    where = f" ({header.rstrip(':')})" if header is not None else ""
    return "\n".join(out) + f"\nsimdist run: the program raised {type(e).__name__}{where}"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].endswith(".py") and os.path.isfile(argv[0]):
        argv.insert(0, "run")  # `simdist train.py ...` / `torchrun ... -m simdist train.py`: run is implied
    rest = []
    if "--" in argv and argv[:1] == ["run"]:  # script arguments, passed through untouched
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    try:
        parser = build_parser()
        a, unknown = parser.parse_known_args(argv)
        if unknown:
            if not hasattr(a, "rest"):  # only pass-through commands (bench) take arguments they do not declare
                raise UsageError(f"simdist: unrecognized arguments: {' '.join(unknown)}")
            a.rest = unknown + list(a.rest)
        if rest:
            a.args = list(getattr(a, "args", [])) + rest
        status = a.func(a) or 0
    except UsageError as e:
        print(str(e), file=sys.stderr)
        status = 2
    except RankError as e:
        print(str(e), file=sys.stderr)
        status = 1
    except Exception as e:  # noqa: BLE001 - simdist's named errors say everything in their text
        from simdist.engine.errors import SimulationError
        if not isinstance(e, SimulationError):
            # the program's own exception: its traceback is the program's, not the command line's
            print(_program_traceback(e), file=sys.stderr)
            sys.exit(1)
        print(f"simdist: {type(e).__name__}: {e}", file=sys.stderr)
        where = _call_site(e)
        if where:
            print(where, file=sys.stderr)
        for note in getattr(e, "__notes__", ()):
            if not note.startswith("traceback of simulated rank"):  # (simdist's own frames: the text says where)
                print(note, file=sys.stderr)
        status = 1
    sys.exit(status)


if __name__ == "__main__":
    main()
