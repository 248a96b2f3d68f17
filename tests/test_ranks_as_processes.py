"""Ranks as OS processes (simdist/launcher.py, simdist/ranks/processes.py, simdist/forkserver.py): each simulated
rank has its own interpreter state, as under torchrun, and a run gives the same digest as with rank threads.
Errors that cross processes (a rank's exception, a crash, a mismatched collective, a deadlock) end the run with a
named error in seconds, never a hang."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

import simdist
from simdist.launcher import RankCrashed
from simdist.properties.programs import corpus_paths, parse, run_options

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import process_programs as P  # noqa: E402  (tests/process_programs.py: functions importable by rank processes)

CORPUS = corpus_paths(os.path.join(HERE, "corpus"))


def _sample():
    """Two programs of every topic folder of the corpus (clean and hazard ones, several world sizes)."""
    by_topic = {}
    for p in CORPUS:
        m = parse(p)
        if m["transport"] is None:
            by_topic.setdefault(os.path.basename(os.path.dirname(p)), []).append(p)
    return [p for paths in by_topic.values() for p in paths[:: max(1, len(paths) // 2)][:2]]


def _verdict(path, transport, seed):
    m = parse(path)
    try:
        res = simdist.run_script(path, world_size=m["world_size"], seed=seed, transport=transport, **run_options(m))
    except Exception as e:  # noqa: BLE001 - the programs of the errors folder fail by design
        return ("error", type(e).__name__)
    return (res.digest, sorted((h.kind, h.observed) for h in res.hazards))


@pytest.mark.parametrize("path", _sample(), ids=lambda p: os.path.basename(p)[:-3])
def test_processes_give_the_digest_of_threads(path, capfd):
    # A run is a pure function of (program, world size, seed, policy): how ranks are run cannot change it.
    for seed in (0, 1):
        assert _verdict(path, "processes", seed) == _verdict(path, "threads", seed)


def test_module_globals_are_per_rank_in_processes():
    # Megatron-Core's parallel_state keeps process groups in module globals; as threads the ranks would share
    # them. As processes each rank's import is its own.
    res = simdist.run(P.register_in_module_global, world_size=3, transport="processes")
    assert res.returns == [[0], [1], [2]]
    with pytest.raises(AssertionError, match="already registered"):
        simdist.run(P.register_in_module_global, world_size=3, transport="threads")


def test_scripts_run_as_processes_by_default(tmp_path):
    script = tmp_path / "globals.py"
    script.write_text(textwrap.dedent("""
        import os, sys, json
        import torch.distributed as dist
        sys.path.insert(0, %r)
        import process_programs as P
        dist.init_process_group("nccl")
        import torch
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        P.REGISTRY.append(dist.get_rank())
        assert P.REGISTRY == [dist.get_rank()], P.REGISTRY
        dist.barrier()
    """ % HERE))
    res = simdist.run_script(str(script), world_size=2)
    assert res.hazards == []


def test_a_rank_exception_ends_the_run_with_its_traceback():
    t = time.monotonic()
    with pytest.raises(ZeroDivisionError) as info:
        simdist.run(P.divide_by_zero_on_rank_one, world_size=2, transport="processes")
    assert time.monotonic() - t < 5
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "simulated rank 1" in notes and "process_programs.py" in notes and "1 / 0" in notes, notes


@pytest.mark.parametrize("how", ["sigsegv", "exit"])
def test_a_crashed_rank_process_ends_the_run(how, capfd):
    t = time.monotonic()
    with pytest.raises(RankCrashed, match="rank 1's process died" + (" .signal SIGSEGV" if how == "sigsegv" else
                                                                      " .exit status 3")):
        simdist.run(P.crash_on_rank_one, world_size=2, args=(how,), transport="processes")
    assert time.monotonic() - t < 5
    if how == "sigsegv":
        assert "crash_on_rank_one" in capfd.readouterr().err  # faulthandler: the dying rank's Python stack


def test_a_mismatch_across_processes_names_each_rank_call_site():
    t = time.monotonic()
    with pytest.raises(simdist.CollectiveMismatch) as info:
        simdist.run(P.mismatched_collectives, world_size=2, transport="processes")
    assert time.monotonic() - t < 5
    text = str(info.value)
    assert "all_reduce" in text and "broadcast" in text and text.count("process_programs.py") >= 2, text


def test_a_deadlock_across_processes_is_reported_with_each_rank_wait():
    t = time.monotonic()
    with pytest.raises(simdist.Deadlock) as info:
        simdist.run(P.rank_zero_skips_the_barrier, world_size=2, transport="processes")
    assert time.monotonic() - t < 5
    text = str(info.value)
    assert "rank 0" in text and "rank 1" in text and "process_programs.py" in text, text


def test_programs_that_cannot_cross_a_process_boundary_are_refused_by_name():
    def local():
        return 1
    with pytest.raises(simdist.SimulationError, match="local to a function"):
        simdist.run(local, world_size=2, transport="processes")
    with pytest.raises(simdist.SimulationError, match="must pickle"):
        simdist.run(P.returns_its_argument, world_size=2, args=(lambda: 0,), transport="processes")
    res = simdist.run(P.returns_a_lock, world_size=2, transport="processes")
    assert all(isinstance(r, simdist.SimulationError) and "does not pickle" in str(r) for r in res.returns)


def test_spawn_and_large_messages_cross_processes():
    # mp.spawn's convention in processes; a collective of 24 MiB goes through the store in parts
    res = simdist.spawn(P.spawn_worker, args=(3 << 20,), nprocs=2, transport="processes")
    assert res.returns == [float(3 << 20) * 3] * 2
    assert res.digest == simdist.spawn(P.spawn_worker, args=(3 << 20,), nprocs=2).digest


def _torchrun(*args, nnodes=1, nproc=2, cwd=ROOT, env=None):
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
                           f"--nproc-per-node={nproc}", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))


def _digest(text):
    import re
    m = re.search(r"digest=(\w+)", text)
    assert m, text[-3000:]
    return m.group(1)


def test_torchrun_launches_the_simulated_ranks():
    # `torchrun --nproc-per-node=2 -m simdist run SCRIPT.py`: each torchrun worker is one simulated rank; the
    # result is the one `simdist run SCRIPT.py -n 2` gives
    out = _torchrun("--standalone", "-m", "simdist", "run", "examples/torchrun_allreduce.py", "--seed", "1")
    assert out.returncode != 0  # hazards: exit status 1 on every worker
    here = subprocess.run([sys.executable, "-m", "simdist", "run", "examples/torchrun_allreduce.py", "-n", "2",
                           "--seed", "1"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert _digest(out.stdout) == _digest(here.stdout)
    assert out.stdout.count("simdist run: world_size=2") == 1  # rank 0 prints the report


def test_two_torchrun_agents_on_localhost_simulate_one_world():
    # `--nnodes=2`: two agents (two hosts' worth) of two workers each make one simulated world of 4 GPUs
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    common = ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=simdist-test",
              "-m", "simdist", "run", "examples/torchrun_allreduce.py", "--seed", "2", "--", "--fix"]
    agents = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
                                *common], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                               env=dict(os.environ, OMP_NUM_THREADS="1")) for _ in range(2)]
    outs = [a.communicate(timeout=300) for a in agents]
    assert [a.returncode for a in agents] == [0, 0], outs
    printed = "".join(o for o, _ in outs)
    assert printed.count("simdist run: world_size=4") == 1 and "no hazards" in printed
    here = subprocess.run([sys.executable, "-m", "simdist", "run", "examples/torchrun_allreduce.py", "-n", "4",
                           "--seed", "2", "--", "--fix"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert _digest(printed) == _digest(here.stdout)


def test_under_torchrun_a_wrong_world_size_is_one_line():
    out = _torchrun("--standalone", "-m", "simdist", "run", "examples/torchrun_allreduce.py", "-n", "3")
    assert "-n 3 but torchrun started 2 workers" in out.stderr
    assert "simdist/cli.py" not in out.stderr  # simdist's own answer has no traceback


@pytest.mark.parametrize("transport", ["threads", "processes"])
def test_an_exception_after_a_hazard_names_the_hazard(transport):
    """A program that crashes on values a race damaged (garbage split sizes read before their D2H copy) gets a
    note naming the hazards its rank had found by then, since the run ends without a report: without it the user
    sees only 'negative dimension' (corpus w05's unwaited pattern in Megatron's dispatcher, notes w6)."""
    with pytest.raises(RuntimeError) as info:
        simdist.run(P.split_sizes_read_before_the_copy, world_size=1, transport=transport)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "had found 1 hazard(s) before this exception" in notes, notes
    assert "host-read [OBSERVED: values damaged]: copy_d2h_async" in notes and "process_programs.py" in notes, notes


def test_a_rank_process_runs_its_exit_handlers(tmp_path):
    """A rank process ends as the interpreter torchrun starts would: its atexit handlers run, and
    multiprocessing's (util._exit_function) shuts down the Managers it left. simdist's fork-server children ended
    with os._exit only, so Megatron-Core's dist_checkpointing results-queue Manager (filesystem_async.py
    `_get_write_results_queue`) outlived every run (corpus w12, notes w7)."""
    import os
    path = str(tmp_path / "handler")
    assert simdist.run(P.leaves_a_manager_and_an_exit_handler, args=(path,), world_size=1,
                       transport="processes").returns == [True]
    # (a rank process exits by itself after the run has its result: its exit handlers run just after the return)
    for _ in range(200):
        if os.path.exists(path) and open(path).read() == "ran":
            break
        time.sleep(0.05)
    assert open(path).read() == "ran"
    pid = int(open(path + ".pid").read())
    for _ in range(100):
        if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the Manager process {pid} outlived the run")


def test_a_failed_run_ends_the_processes_its_ranks_started(tmp_path):
    """When a run fails, every rank process is killed together with the processes it started (its descendants, as
    torchrun's agent ends its workers' processes): a killed rank
    left its multiprocessing Manager's server running, re-parented to init and holding the run's stdout, so
    `simdist run ... | tee log` never finished (seen with Megatron's dist_checkpointing after a failed save)."""
    import os
    path = str(tmp_path / "manager")
    with pytest.raises(ValueError, match="rank 1 fails"):
        simdist.run(P.starts_a_manager_then_fails, args=(path,), world_size=2, transport="processes")
    for rank in (0, 1):
        pid = int(open(f"{path}.{rank}").read())
        for _ in range(200):
            if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z":
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            raise AssertionError(f"rank {rank}'s Manager process {pid} outlived the failed run")
