"""Determinism of a real library under simdist (issue 12): the Megatron-Core TP2 x DP2 script with DDP overlap
(tests/real_libs/megatron_tp2_dp2_ddp.py), each rank its own process, gives one digest per seed however it is run:
repeated in one process, in pytest-xdist workers, and with its ranks spread over two torchrun agents on localhost
(`--nnodes=2`, the way a world is spread over hosts). The fast tier checks seeds 0-4 (x3), two seeds under
`pytest -n 2` and one seed under two torchrun agents; the slow test runs 20 seeds x 3."""
import json
import os
import re
import socket
import subprocess
import sys

import pytest

import simdist

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "real_libs", "megatron_tp2_dp2_ddp.py")
WORLD = 4
# the fork server imports Megatron-Core once, so each rank process starts with it imported (a fresh copy each)
PRELOAD = "megatron.core.parallel_state,megatron.core.tensor_parallel,megatron.core.distributed," \
          "megatron.core.optimizer,megatron.core.pipeline_parallel,megatron.core.transformer"

pytestmark = [pytest.mark.real_libs,
              pytest.mark.skipif(not __import__("importlib").util.find_spec("megatron"),
                                 reason="megatron-core is not installed (pip install -e '.[test,real]')")]


@pytest.fixture(autouse=True)
def _preload(monkeypatch):
    monkeypatch.setenv("SIMDIST_PRELOAD", PRELOAD)


def digest(seed):
    res = simdist.run_script(SCRIPT, world_size=WORLD, seed=seed)
    assert res.hazards == [], res.report()
    return res.digest


def _repeats(seeds, n=3):
    out = {}
    for seed in seeds:
        got = {digest(seed) for _ in range(n)}
        assert len(got) == 1, f"seed {seed}: {n} runs gave {got}"
        out[seed] = got.pop()
    return out


def test_megatron_digest_repeats_over_seeds(capfd):
    digests = _repeats(range(5))
    assert len(set(digests.values())) > 1, digests  # the schedule depends on the seed


@pytest.mark.slow
def test_megatron_digest_repeats_over_twenty_seeds(capfd):
    digests = _repeats(range(20))
    assert len(set(digests.values())) > 1, digests


@pytest.mark.parametrize("seed", [0, 1])
def test_digest_probe(seed, tmp_path_factory):
    """Run by the xdist test below in worker processes (and harmless on its own): writes its seed's digest."""
    out = os.environ.get("SIMDIST_DIGEST_OUT")
    d = digest(seed)
    if out:
        with open(os.path.join(out, f"{seed}.json"), "w") as f:
            json.dump({"seed": seed, "digest": d, "worker": os.environ.get("PYTEST_XDIST_WORKER")}, f)


def test_megatron_digest_is_the_same_in_xdist_workers(tmp_path, capfd):
    env = dict(os.environ, SIMDIST_DIGEST_OUT=str(tmp_path), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                           f"{__file__}::test_digest_probe"], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = [json.load(open(tmp_path / f"{s}.json")) for s in (0, 1)]
    assert {f["worker"] for f in found} <= {"gw0", "gw1"}
    for f in found:
        assert f["digest"] == digest(f["seed"]), f


def test_megatron_digest_is_the_same_over_two_torchrun_agents(capfd):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=simdist-megatron", "-m", "simdist", "run", SCRIPT,
           "--seed", "3"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    agents = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
              for _ in range(2)]
    outs = [a.communicate(timeout=600) for a in agents]
    assert [a.returncode for a in agents] == [0, 0], [(o[-2000:], e[-3000:]) for o, e in outs]
    printed = "".join(o for o, _ in outs)
    assert printed.count("RESULT {") == WORLD  # every rank of the script ran, two on each agent
    got = re.search(r"simdist run: world_size=4 .* digest=(\w+)", printed)
    assert got, printed[-3000:]
    assert got.group(1) == digest(3)
