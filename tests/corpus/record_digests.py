"""Record every corpus program's digest for seeds 0..2 (tests/corpus/digests.json), which tests/test_programs.py
then checks: a change that alters a schedule, a report's site or a value shows as a changed digest, and is
either a bug or recorded again on purpose (say why in the commit).

    python tests/corpus/record_digests.py                  # every program
    python tests/corpus/record_digests.py p25_ r03_        # only programs whose name holds one of these; the rest kept

Digests are a pure function of (program, world size, seed, policy) for one torch version (a newer torch may
decompose ops differently): the file names the torch it was recorded with, and the check runs only there.
"""
import contextlib
import io
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
import simdist  # noqa: E402
from simdist.properties.programs import corpus_paths, parse, run_options  # noqa: E402

SEEDS = range(3)
PATH = os.path.join(HERE, "digests.json")


def key(path, seed):
    return f"{os.path.relpath(path, HERE)}:{seed}"


def main(only=()):
    digests = {}
    if only:
        with open(PATH) as f:
            digests = json.load(f)["digests"]
    for path in corpus_paths(HERE):
        m = parse(path)
        if only and not any(o in m["name"] for o in only):
            continue
        for seed in SEEDS:
            digests.pop(key(path, seed), None)
        for seed in SEEDS:
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    # (each rank a process, as test_programs runs them: a program that patches a library, as
                    # the FSDP1 incident's bug twin does, must not leak the patch into the next program)
                    res = simdist.run_script(path, world_size=m["world_size"], seed=seed, **run_options(m))
            except Exception:  # noqa: BLE001 - the programs that must fail have no digest
                continue
            digests[key(path, seed)] = res.digest
    with open(PATH, "w") as f:
        json.dump({"torch": torch.__version__, "digests": digests}, f, indent=0, sort_keys=True)
        f.write("\n")
    print(f"{len(digests)} digests -> {PATH}")


if __name__ == "__main__":
    main(tuple(sys.argv[1:]))
