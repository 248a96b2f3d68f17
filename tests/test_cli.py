"""The `simdist` command: help, run with a report, and a replay that reproduces the digest."""
import os
import re
import subprocess
import sys

import pytest

import simdist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _simdist(*args):
    return subprocess.run([sys.executable, "-m", "simdist", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_help_explains_itself():
    out = _simdist("--help")
    assert out.returncode == 0
    for word in ("hunt", "run", "bench", "scenarios"):
        assert word in out.stdout


def test_run_reports_and_replays():
    out = _simdist("run", "examples/incident.py:refit_one_weight", "--world-size", "2", "--seed", "1")
    assert out.returncode == 1, out.stderr  # hazards found
    assert "read-after-write" in out.stdout and "OBSERVED" in out.stdout
    digest = re.search(r"digest=(\w+)", out.stdout).group(1)
    replay = re.search(r"^replay: simdist (run .*)$", out.stdout, re.M).group(1).split()
    again = _simdist(*replay[:1], "examples/incident.py:refit_one_weight", *replay[2:])
    assert re.search(r"digest=(\w+)", again.stdout).group(1) == digest


def test_run_with_the_fix_is_clean():
    out = _simdist("run", "examples/incident.py:refit_one_weight", "--world-size", "2", "--kwargs", '{"fix": true}')
    assert out.returncode == 0 and "no hazards" in out.stdout


def test_run_a_torchrun_script_and_replay_it():
    # a whole torchrun-style script runs as __main__ on every rank, with its own arguments after `--`
    out = _simdist("run", "examples/torchrun_allreduce.py", "-n", "2", "--seed", "1")
    assert out.returncode == 1, out.stderr
    assert "read-after-write" in out.stdout and "OBSERVED" in out.stdout  # all_reduce reads y in place
    replay = re.search(r"^replay: simdist run (.*)$", out.stdout, re.M).group(1).split()
    assert replay[0] == "examples/torchrun_allreduce.py"
    again = _simdist("run", *replay)
    assert re.search(r"digest=(\w+)", again.stdout).group(1) == re.search(r"digest=(\w+)", out.stdout).group(1)
    fixed = _simdist("run", "examples/torchrun_allreduce.py", "-n", "2", "--", "--fix")
    assert fixed.returncode == 0 and "no hazards" in fixed.stdout, fixed.stdout + fixed.stderr
    assert fixed.stdout.count("sum=393216.0") == 2


def test_a_script_path_implies_run():
    """`simdist train.py ...` (what `torchrun ... -m simdist train.py` passes) is `simdist run train.py ...`."""
    plain = _simdist("run", "examples/torchrun_allreduce.py", "-n", "2", "--", "--fix")
    implied = _simdist("examples/torchrun_allreduce.py", "-n", "2", "--", "--fix")
    assert implied.returncode == 0 and "no hazards" in implied.stdout, implied.stdout + implied.stderr
    digest = re.compile(r"digest=(\w+)")
    assert digest.search(implied.stdout).group(1) == digest.search(plain.stdout).group(1)


def test_run_script_api_gives_each_rank_its_own_module(tmp_path):
    import simdist
    script = tmp_path / "counter.py"
    script.write_text("import os, sys\nCOUNT = []\nCOUNT.append(os.environ['RANK'])\n"
                      "assert len(COUNT) == 1, COUNT\nassert sys.argv[1:] == ['--x', '1'], sys.argv\n"
                      "if __name__ == '__main__':\n    import torch\n    t = torch.ones(4, device='cuda')\n"
                      "    assert t.sum().item() == 4\n")
    res = simdist.run_script(str(script), world_size=3, argv=["--x", "1"])
    assert res.hazards == [] and res.returns == [None, None, None]
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.exit(3)\n")
    import pytest
    with pytest.raises(simdist.api.ScriptExit, match="status 3"):
        simdist.run_script(str(bad), world_size=2)


def test_spawn_replay_reproduces_the_digest(tmp_path):
    import simdist
    (tmp_path / "spw.py").write_text(
        "import torch, torch.distributed as dist\n"
        "def worker(rank, scale):\n"
        "    dist.init_process_group('nccl', rank=rank, world_size=2)\n"
        "    torch.cuda.set_device(rank)\n"
        "    x = torch.full((4,), float(rank + 1) * scale, device='cuda')\n"
        "    side = torch.cuda.Stream()\n"
        "    with torch.cuda.stream(side):\n"
        "        y = x * 2\n"
        "    dist.all_reduce(y)\n"
        "    return y.sum().item()\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import spw
        res = simdist.spawn(spw.worker, args=(2.0,), nprocs=2, seed=3)
    finally:
        sys.path.remove(str(tmp_path))
    assert "--spawn" in res.replay and "--args" in res.replay
    cmd = res.replay.split(" ", 1)[1]
    import shlex
    out = subprocess.run([sys.executable, "-m", "simdist", *shlex.split(cmd)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
    assert re.search(r"digest=(\w+)", out.stdout).group(1) == res.digest, out.stdout + out.stderr


import pytest  # noqa: E402


@pytest.mark.parametrize("args, message", [
    (["run", "examples/incident.py:no_such_function"], "has no function 'no_such_function'"),
    (["run", "examples/incident.py:refit_one_weight", "-n", "0"], "expected a positive integer, got 0"),
    (["run", "examples/incident.py:refit_one_weight", "--policy", "fastest"], "invalid choice: 'fastest'"),
    (["run", "examples/incident.py:refit_one_weight", "--kwargs", "{oops"], "--kwargs is not valid JSON"),
    (["run", "examples/incident.py:refit_one_weight", "--delay-op", "0,1"], "--delay-op expects RANK,STREAM,SEQ,NS"),
    (["run", "no_such_script.py"], "no such script"),
    (["run", "no_such_module_xyz:fn"], "cannot import module 'no_such_module_xyz'"),
    (["hunt", "--seeds", "0"], "expected a positive integer, got 0"),
    (["hunt", "--reported", "no_such_evidence.json"], "--reported: cannot read 'no_such_evidence.json'"),
    (["hunt", "--reported", "README.md"], "README.md: not JSON"),
    (["hunt", "--reported", "pyproject.toml"], "not JSON"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_input_is_one_line_and_status_2(args, message):
    out = _simdist(*args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_bench_works_from_a_non_editable_install(tmp_path):
    # a wheel-style copy of the project (not the editable checkout): the bench command comes from the installed
    # simdist.benchmarks package through the simdist.commands entry point, and its code runs
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(target), ROOT], check=True, capture_output=True, timeout=300)
    assert (target / "simdist" / "benchmarks" / "__main__.py").exists()
    env = dict(os.environ, PYTHONPATH=str(target))
    code = ("import simdist, simdist.benchmarks.__main__ as b, sys; "
            "assert simdist.__file__.startswith(sys.argv[1]), simdist.__file__; "
            "print('per-op us', round(b.per_op_us(n_ops=200, reps=1), 1))")
    out = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert out.returncode == 0 and "per-op us" in out.stdout, out.stderr
    helped = subprocess.run([sys.executable, "-m", "simdist", "bench", "--help"], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=300)
    assert helped.returncode == 0 and "--quick" in helped.stdout, helped.stderr


@pytest.mark.parametrize("transport", ["processes", "threads"])
def test_a_programs_exception_prints_the_programs_traceback_and_status_1(tmp_path, transport):
    # the program's own error is the program's traceback (its frames, the rank it happened on), not the
    # command line's frames through simdist
    script = tmp_path / "raises.py"
    script.write_text("import torch.distributed as dist\n"
                      "def main():\n"
                      "    dist.init_process_group('nccl')\n"
                      "    if dist.get_rank() == 1:\n"
                      "        raise ValueError('bad shape from the program')\n"
                      "    dist.barrier()\n"
                      "main()\n")
    out = _simdist("run", str(script), "-n", "2", "--transport", transport)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ValueError: bad shape from the program" in out.stderr
    assert f'File "{script}", line 5, in main' in out.stderr
    assert "simdist/cli.py" not in out.stderr and "simdist/api.py" not in out.stderr, out.stderr
    assert out.stderr.rstrip().splitlines()[-1].startswith("simdist run: the program raised ValueError")


@pytest.mark.parametrize("transport", ["processes", "threads"])
def test_a_named_refusal_says_where_the_program_was(tmp_path, transport):
    # simdist's own errors print their text, not simdist's frames; a refusal raised inside library code must still
    # say which line of the program (or library) asked for it: the innermost frame outside simdist, with its source
    helper = tmp_path / "lib_helper.py"
    helper.write_text("import torch\n"
                      "def capture(x):\n"
                      "    return x.cuda(), torch.cuda.memory_snapshot()\n")
    script = tmp_path / "refused.py"
    script.write_text("import sys, torch\n"
                      "sys.path.insert(0, %r)\n"
                      "import lib_helper\n"
                      "lib_helper.capture(torch.ones(2))\n" % str(tmp_path))
    out = _simdist("run", str(script), "-n", "1", "--transport", transport)
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stderr.startswith("simdist: UnsupportedOperation"), out.stderr
    site = f'raised at File "{helper}", line 3, in capture: return x.cuda(), torch.cuda.memory_snapshot()'
    assert site in out.stderr, out.stderr


def _one_op():
    import torch
    return torch.ones(2, device="cuda").sum().item()


@pytest.mark.parametrize("options, error, message", [
    (dict(world_size=0), ValueError, "world_size must be a positive integer, got 0"),
    (dict(world_size="2"), ValueError, "world_size must be a positive integer, got '2'"),
    (dict(seed="x"), ValueError, "seed must be an integer, got 'x'"),
    (dict(seed=True), ValueError, "seed must be an integer, got True"),
    (dict(device_count=0), ValueError, "device_count must be a positive integer"),
    (dict(kwargs=[1]), TypeError, "kwargs must be a mapping"),
    (dict(args=5), TypeError, "args must be a tuple or list"),
    (dict(policy="fastest"), ValueError, "unknown policy 'fastest'"),
    (dict(nccl="3.0"), ValueError, "nccl profile must be '2.7' or '2.8'"),
    (dict(poison="blue"), ValueError, "poison must be 'nan', 'zero' or a byte value"),
    (dict(transport="mpi"), ValueError, "transport must be one of"),
])
def test_bad_options_of_simdist_run_are_named(options, error, message):
    import simdist
    with pytest.raises(error, match=re.escape(message)):
        simdist.run(_one_op, **options)
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        simdist.run(42)
    import numpy as np
    assert simdist.run(_one_op, seed=np.int64(3)).seed == 3  # a numpy integer is an integer


_PICKLES_MAIN = '''
import dataclasses, io, os
import torch, torch.distributed as dist


@dataclasses.dataclass
class Rollout:
    rank: int
    reward: float


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)


dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
objs = [None] * dist.get_world_size()
dist.all_gather_object(objs, Rollout(rank, rank * 0.5))
buf = io.BytesIO()
torch.save(Net().cuda(), buf)
buf.seek(0)
net = torch.load(buf, weights_only=False)
with open(os.environ["OUT"] + f".{rank}", "w") as f:
    f.write(repr([(o.rank, o.reward) for o in objs]) + " " + type(net).__name__)
dist.destroy_process_group()
'''


@pytest.mark.parametrize("transport", ["processes", "threads"])
def test_a_script_is_main_so_pickle_finds_its_classes(tmp_path, transport):
    """Under torchrun a script is its process's `__main__` module, so pickle finds the classes it defines by
    reference (all_gather_object of a dataclass, torch.save / torch.load of a model, a spawned Process's
    target). simdist ran the script in a module it never registered in sys.modules: a raw PicklingError "attribute
    lookup Rollout on __main__ failed". Now each rank's script is its __main__ (each rank thread its own), and the
    caller's __main__ is back after the run."""
    script = tmp_path / "pickles_main.py"
    script.write_text(_PICKLES_MAIN)
    main_before = sys.modules["__main__"]
    os.environ["OUT"] = str(tmp_path / "out")
    try:
        res = simdist.run_script(str(script), world_size=2, transport=transport)
    finally:
        del os.environ["OUT"]
    assert sys.modules["__main__"] is main_before and res.hazards == []
    for r in range(2):
        assert (tmp_path / f"out.{r}").read_text() == "[(0, 0.0), (1, 0.5)] Net"
