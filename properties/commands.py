"""The `simdist hunt` and `simdist scenarios` commands, registered through the `simdist.commands` entry points
(pyproject.toml) so that simdist's own command line never imports this package."""
from __future__ import annotations

from simdist.cli import UsageError


def register_hunt(sub):
    from .hunt import add_arguments
    h = sub.add_parser("hunt", help="the main job: hunt the FP8 refit incident's cause by simulation",
                       description="Runs the refit program over the incident's configurations for the faithful "
                                   "stack and each candidate cause (each drops one real ordering edge, named by its "
                                   "source line), fits the simulated matrix to the incident's evidence file, and "
                                   "prints the conclusion computed from it, a witness with its replay command and "
                                   "trace, and the fix checked in the full refit program.")
    add_arguments(h)
    h.set_defaults(func=_hunt)


def _hunt(a):
    for flag in ("seeds", "fix_schedules"):
        v = getattr(a, flag, None)
        if v is not None and v < 1:
            raise UsageError(f"simdist hunt: argument --{flag.replace('_', '-')}: expected a positive integer, "
                             f"got {v}")
    from .hunt import EvidenceError, main
    reported = getattr(a, "reported", None)
    if reported is not None:  # a bad evidence file is the user's input: one line, not a traceback
        try:
            with open(reported) as f:
                f.read(1)
        except OSError as e:
            raise UsageError(f"simdist hunt: argument --reported: cannot read {reported!r} ({e.strerror})") from None
    try:
        return main(a)
    except EvidenceError as e:
        raise UsageError(f"simdist hunt: argument --reported: {e}") from None


def register_scenarios(sub):
    s = sub.add_parser("scenarios", help="export the scenario corpus for the nightly GPU job")
    s.add_argument("--export", default="corpus.json", help="where to write it (default corpus.json)")
    s.set_defaults(func=_scenarios)


def _scenarios(a):
    from .scenarios import export_corpus
    try:
        export_corpus(a.export)
    except OSError as e:
        raise UsageError(f"simdist scenarios: cannot write {a.export!r} ({e.strerror})") from None
    print(f"wrote {a.export}")
    return 0
