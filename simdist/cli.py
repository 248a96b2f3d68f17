"""The `simdist` command.

  simdist hunt                 run the incident hunt (refit properties over the incident's configurations)
  simdist run FILE.py:FN       run a function in a simulated world and print its report (also: module:fn)
  simdist run SCRIPT.py -n 2   run a torchrun-style script as __main__ on every rank (like torchrun
                               --nproc-per-node=2 SCRIPT.py); script arguments go after `--`
  simdist bench                run the benchmarks (python -m simdist.benchmarks)
  simdist scenarios --export   write the scenario corpus for the nightly GPU job
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys


def _load(target):
    if ":" not in target:
        raise SystemExit(f"simdist run: expected FILE.py:FUNCTION or module:function, got {target!r}")
    where, name = target.rsplit(":", 1)
    if where.endswith(".py") or os.path.exists(where):
        spec = importlib.util.spec_from_file_location("__simdist_target__", where)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["__simdist_target__"] = mod
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
        spec.loader.exec_module(mod)
    else:
        mod = importlib.import_module(where)
    obj = mod
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def cmd_run(a):
    import simdist
    script = ":" not in a.target and (a.target.endswith(".py") or os.path.isfile(a.target))
    if a.args and not script:
        raise SystemExit(f"simdist run: extra arguments {a.args!r} are only for scripts (FILE.py)")
    if script:
        if not os.path.isfile(a.target):
            raise SystemExit(f"simdist run: no such script {a.target!r}")
        fn = simdist.api.script_main(a.target, a.args)
    else:
        fn = _load(a.target)
    policy = [int(x) for x in a.delays.split(",")] if a.delays else a.policy
    if a.delay_op:
        import simdist as sd
        rank, stream, seq, ns = a.delay_op.split(",")
        policy = sd.Targeted({(int(rank), stream, int(seq)): int(ns)}, sd.make_policy(a.policy, a.seed))
    import json
    kwargs = json.loads(a.kwargs) if a.kwargs else None
    args = tuple(json.loads(a.fn_args)) if a.fn_args else ()
    if script:
        res = simdist.run_script(a.target, argv=a.args, world_size=a.world_size, seed=a.seed, nccl=a.nccl,
                                 policy=policy)
    else:
        if a.spawn:
            res = simdist.spawn(fn, args=args, nprocs=a.world_size, seed=a.seed, nccl=a.nccl, policy=policy,
                                kwargs=kwargs)
        else:
            res = simdist.run(fn, world_size=a.world_size, seed=a.seed, nccl=a.nccl, policy=policy, args=args,
                              kwargs=kwargs)
    print(res.report())
    if a.trace:
        res.save_trace(a.trace)
        print(f"trace: {a.trace} (open in https://ui.perfetto.dev)")
    return 1 if res.hazards else 0


def cmd_bench(a):
    from simdist.benchmarks.__main__ import main
    main(a.rest)
    return 0


def cmd_hunt(a):
    from simdist.properties.hunt import main
    return main(a)


def cmd_scenarios(a):
    from simdist.properties.scenarios import export_corpus
    export_corpus(a.export)
    print(f"wrote {a.export}")
    return 0


def build_parser():
    p = argparse.ArgumentParser(
        prog="simdist",
        description="Simulated multi-GPU worlds on the CPU: find, explain and replay races between CUDA streams "
                    "and NCCL collectives, deterministically.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hunt", help="the main job: hunt the FP8 refit incident's cause by simulation",
                       description="Runs the refit properties over the incident's configurations (TP 1/2/4, "
                                   "per-tensor and blockwise, fp8_param on/off, PP 1/2) for the faithful stack and "
                                   "each candidate fault; prints the failure matrix beside the reported one, the "
                                   "shrunk reproducer with its replay command, a Perfetto trace of the witness, and "
                                   "checks the fix under many schedules.")
    h.add_argument("--json", action="store_true", help="machine-readable output")
    h.add_argument("--seeds", type=int, default=20, help="seeds per configuration (default 20)")
    h.add_argument("--fix-schedules", type=int, default=1000, help="schedules the fix must survive (default 1000)")
    h.add_argument("--trace", default="hunt-witness.trace.json", help="where to write the witness trace")
    h.add_argument("--export", default=None, help="also write the scenario corpus for the GPU job here")
    h.add_argument("--no-progress", action="store_true")
    h.set_defaults(func=cmd_hunt)
    r = sub.add_parser("run", help="run FILE.py:FN, module:fn or a torchrun-style SCRIPT.py in a simulated world "
                                   "and report hazards",
                       description="Runs a function (FILE.py:FN or module:fn, called once per rank) or a whole "
                                   "torchrun-style script (SCRIPT.py, executed as __main__ on every rank with RANK, "
                                   "LOCAL_RANK and WORLD_SIZE set) on simulated GPUs, and prints the hazard report. "
                                   "Exit status: 0 clean, 1 hazards found.")
    r.add_argument("target", help="FILE.py:FN, module:fn or SCRIPT.py")
    r.add_argument("args", nargs="*", help="arguments for a script (put them after `--`)")
    r.add_argument("--world-size", "--nproc-per-node", "-n", type=int, default=1, dest="world_size",
                   help="simulated ranks, one GPU each (default 1)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--nccl", default=None, help="2.7 or 2.8 (default: the installed torch)")
    r.add_argument("--policy", default=None, help="jitter (default), none, pct")
    r.add_argument("--delays", default=None, help="comma-separated choice delays (replays a shrunk schedule)")
    r.add_argument("--trace", default=None, help="write a Perfetto trace JSON here")
    r.add_argument("--kwargs", default=None, help="JSON object of keyword arguments for the function")
    r.add_argument("--args", default=None, dest="fn_args", help="JSON list of positional arguments for the function")
    r.add_argument("--spawn", action="store_true",
                   help="call FN(rank, *args), torch.multiprocessing.spawn's convention (simdist.spawn)")
    r.add_argument("--delay-op", default=None, metavar="RANK,STREAM,SEQ,NS",
                   help="delay one op by NS virtual ns (the targeted policy; as printed by simdist hunt)")
    r.set_defaults(func=cmd_run)
    b = sub.add_parser("bench", help="run the benchmark suite")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    b.set_defaults(func=cmd_bench)
    s = sub.add_parser("scenarios", help="export the scenario corpus for the nightly GPU job")
    s.add_argument("--export", default="corpus.json")
    s.set_defaults(func=cmd_scenarios)
    return p


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = []
    if "--" in argv and argv[:1] == ["run"]:  # script arguments, passed through untouched
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    a = build_parser().parse_args(argv)
    if rest:
        a.args = list(getattr(a, "args", [])) + rest
    sys.exit(a.func(a) or 0)


if __name__ == "__main__":
    main()
