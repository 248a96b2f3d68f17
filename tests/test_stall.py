"""A rank blocked outside the simulation ends the run with a named error (simdist/ranks/stall.py), never a hang.

Rule: only the rank holding the baton runs and it gives the baton up only in waits simdist simulates
(simdist/engine/turns.py), so a wait on something only another rank can provide through a channel simdist does
not see (threading.Event, a pipe, a multiprocessing queue) can never end; a GPU run can end it or not (notes w8),
a simulated run cannot. Slow work that simdist does see (a long kernel, a loop of ops) is not a stall.
"""
import os
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist

import simdist
from simdist import Stalled

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import process_programs as P  # noqa: E402

EVENT = threading.Event()


def waits_for_an_event_the_next_rank_sets():
    x = torch.ones(4, device="cuda") * (dist.get_rank() + 1)
    if dist.get_rank() == 0:
        EVENT.wait()
    dist.all_reduce(x)
    if dist.get_rank() == 1:
        EVENT.set()
    return x.sum().item()


@pytest.fixture
def short_stall_limit(monkeypatch):
    monkeypatch.setenv("SIMDIST_STALL_TIMEOUT", "1.5")


def test_a_rank_thread_waiting_for_another_rank_outside_simdist_is_a_stall(short_stall_limit):
    EVENT.clear()
    t = time.monotonic()
    with pytest.raises(Stalled) as e:
        simdist.run(waits_for_an_event_the_next_rank_sets, world_size=2)
    assert time.monotonic() - t < 30
    text = str(e.value)
    assert "rank 0" in text and "test_stall.py" in text and "EVENT.wait()" in text, text
    assert "SIMDIST_STALL_TIMEOUT" in text
    # the run's patches are undone and simdist runs again at once
    assert simdist.run(lambda: torch.ones(2, device="cuda").sum().item(), world_size=1).returns == [2.0]


def test_a_rank_process_blocked_on_a_pipe_is_a_stall(short_stall_limit):
    t = time.monotonic()
    with pytest.raises(Stalled) as e:
        simdist.run(P.blocks_on_a_pipe_nobody_writes, world_size=2, transport="processes")
    assert time.monotonic() - t < 30
    text = str(e.value)
    assert "rank 0" in text and "os.read(r, 1)" in text and "process_programs.py" in text, text


def long_kernel_and_busy_loop():
    a = torch.randn(1200, 1200, device="cuda")
    for _ in range(4):  # kernels run inside the engine (at the synchronize below): never a stall
        a = (a @ a).clamp_(-1, 1)
    deadline = time.monotonic() + 1.5  # a loop of small ops for longer than the limit: progress all along
    n = 0
    while time.monotonic() < deadline:
        a.add_(0.0)
        n += 1
    torch.cuda.synchronize()
    return n > 0


def test_slow_work_simdist_sees_is_not_a_stall(monkeypatch):
    monkeypatch.setenv("SIMDIST_STALL_TIMEOUT", "0.5")
    assert simdist.run(long_kernel_and_busy_loop, world_size=1).returns == [True]


def test_the_stall_limit_is_checked(monkeypatch):
    monkeypatch.setenv("SIMDIST_STALL_TIMEOUT", "soon")
    with pytest.raises(simdist.SimulationError, match="SIMDIST_STALL_TIMEOUT"):
        simdist.run(lambda: None, world_size=1)
