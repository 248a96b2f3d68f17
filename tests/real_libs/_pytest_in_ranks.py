"""Run pytest in every simulated rank, as Megatron-LM's CI runs its unit tests under torchrun (each rank collects
and runs the same tests; their collectives meet across ranks). Test harness, not user code:

    python -m simdist run tests/real_libs/_pytest_in_ranks.py -n 8 -- MEGATRON_LM/tests/unit_tests/FILE.py ...

Each rank prints `RANK r pytest rc=N` at its end; the caller checks every rank's line."""
import os
import sys

import pytest

rank = int(os.environ.get("RANK", "0"))
rc = pytest.main(["-p", "no:cacheprovider", "-q", "-W", "ignore", "--noconftest", *sys.argv[1:]])
print(f"RANK {rank} pytest rc={int(rc)}", flush=True)
