"""Runs one script of this folder under simdist in a process of its own (the simdist tier of
tests/test_real_libs.py): a crash, a hang or a leftover patch of a real library cannot take the test session with it.

    python tests/real_libs/_simdist_run.py SCRIPT.py WORLD_SIZE [--no-wait NAME] [--seed N]

The ranks' own output (their `RESULT {json}` lines) goes to stdout as the script prints it; then one line
`SIMDIST {json}` with the run's hazards (str of each), its report and digest. With --no-wait NAME the script runs
through no_wait.py, which removes one real library's wait in every rank (see no_wait.PATCHES).
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("script")
    ap.add_argument("world_size", type=int)
    ap.add_argument("--no-wait")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--transport", default="processes", choices=("threads", "processes"))
    args = ap.parse_args()

    import simdist

    script = os.path.abspath(args.script)
    if args.no_wait:
        res = simdist.run_script(os.path.join(HERE, "no_wait.py"), world_size=args.world_size,
                                 argv=[args.no_wait, script], seed=args.seed,
                                 transport=args.transport)
    else:
        res = simdist.run_script(script, world_size=args.world_size, seed=args.seed, transport=args.transport)
    sys.stdout.flush()
    print("SIMDIST " + json.dumps({"hazards": [str(h) for h in res.hazards], "report": res.report(),
                                   "digest": res.digest}), flush=True)


if __name__ == "__main__":
    main()
