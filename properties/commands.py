"""The `simdist hunt` and `simdist scenarios` commands, registered through the `simdist.commands` entry points
(pyproject.toml) so that simdist's own command line never imports this package."""
from __future__ import annotations

from simdist.cli import UsageError, positive_int


def register_hunt(sub):
    h = sub.add_parser("hunt", help="the main job: hunt the FP8 refit incident's cause by simulation",
                       description="Runs the refit properties over the incident's configurations for the faithful "
                                   "stack and each candidate fault; prints the failure matrix beside the reported "
                                   "one, the shrunk reproducer with its replay command, a Perfetto trace of the "
                                   "witness, and checks the fix under many schedules.")
    h.add_argument("--json", action="store_true", help="machine-readable output")
    h.add_argument("--seeds", type=positive_int, default=20, help="seeds per configuration (default 20)")
    h.add_argument("--fix-schedules", type=positive_int, default=1000,
                   help="schedules the fix must survive (default 1000)")
    h.add_argument("--trace", default="hunt-witness.trace.json", help="where to write the witness trace")
    h.add_argument("--export", default=None, help="also write the scenario corpus for the GPU job here")
    h.add_argument("--no-progress", action="store_true")
    h.set_defaults(func=_hunt)


def _hunt(a):
    from .hunt import main
    return main(a)


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
