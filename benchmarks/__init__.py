"""The benchmarks: `python -m simdist.benchmarks` or `simdist bench` (registered through the `simdist.commands`
entry points, pyproject.toml)."""


def register_command(sub):
    import argparse
    b = sub.add_parser("bench", help="run the benchmark suite (python -m simdist.benchmarks)", add_help=False)
    b.add_argument("rest", nargs=argparse.REMAINDER, help="arguments of python -m simdist.benchmarks")
    b.set_defaults(func=_bench)


def _bench(a):
    from .__main__ import main
    main(a.rest)
    return 0
