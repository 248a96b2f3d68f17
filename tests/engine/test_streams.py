"""Streams, events and virtual time.

Rules: CUDA Programming Guide, "Streams" (work on one stream runs in issue order; streams are unordered unless
synchronized) and "Events" (cudaEventRecord captures the work queued so far; cudaStreamWaitEvent makes later
work on the waiting stream start after it, without blocking the host); cost model simdist/engine/cost.py.
"""
from simdist.engine.ops import LAUNCH_NS


def test_one_stream_runs_in_launch_order(sim):
    s = sim.stream()
    a = sim.kernel(s, dur=1000)
    b = sim.kernel(s, dur=10)
    assert b.start >= a.end
    assert sim.ordered(a, b) and not sim.ordered(b, a)


def test_two_streams_are_unordered(sim):
    s1, s2 = sim.stream(), sim.stream(new=True)
    a = sim.kernel(s1, dur=1_000_000)
    b = sim.kernel(s2, dur=10)
    assert b.end < a.end  # the second stream ran ahead: nothing orders it after the first
    assert sim.ordered(a, b) is False and sim.ordered(b, a) is False


def test_event_wait_orders_later_work_without_blocking_the_host(sim):
    host = sim.rank().host
    s1, s2 = sim.stream(), sim.stream(new=True)
    a = sim.kernel(s1, dur=1_000_000)
    t_before = host.clock
    s2.wait_marker(host, s1.record_marker(host))
    assert host.clock == t_before  # a wait is queued, not waited for on the host
    b = sim.kernel(s2, dur=10)
    assert b.start >= a.end
    assert sim.ordered(a, b)


def test_event_recorded_before_the_producer_orders_nothing(sim):
    host = sim.rank().host
    s1, s2 = sim.stream(), sim.stream(new=True)
    marker = s1.record_marker(host)
    a = sim.kernel(s1, dur=1_000_000)  # launched after the record
    s2.wait_marker(host, marker)
    b = sim.kernel(s2, dur=10)
    assert sim.ordered(a, b) is False
    assert b.end < a.end


def test_each_launch_costs_the_host_launch_latency(sim):
    host = sim.rank().host
    s = sim.stream()
    t0 = host.clock
    sim.kernel(s)
    sim.kernel(s)
    assert host.clock - t0 == 2 * LAUNCH_NS


def test_host_sync_joins_the_device_into_the_host(sim):
    rank = sim.rank()
    s1, s2 = sim.stream(), sim.stream(new=True)
    a = sim.kernel(s1, dur=50_000)
    marker = s1.record_marker(rank.host)
    rank.drain(marker.end)
    rank.wait_op(marker, "synchronize")  # due already: no wait needed
    assert rank.host.clock >= a.end
    b = sim.kernel(s2)  # work queued after a host sync is ordered after everything the sync waited for
    assert sim.ordered(a, b)


def test_kernels_run_at_their_end_time_in_time_order(sim):
    s1, s2 = sim.stream(), sim.stream(new=True)
    ran = []
    sim.kernel(s1, fn=lambda: ran.append("slow"), dur=1_000_000)
    sim.kernel(s2, fn=lambda: ran.append("fast"), dur=10)
    sim.run_all()
    assert ran == ["fast", "slow"]


def test_streams_come_from_a_pool_of_32_per_priority_round_robin(sim):
    # c10/cuda/CUDAStream.h "Stream pool note": 32 streams per device and priority level, handed out round-robin
    # ("if 33 low priority streams are requested, the first and last streams requested are actually the same
    # stream ... kernels enqueued on them cannot run concurrently"); each priority level has a pool of its own
    dev = sim.rank().device()
    low = [dev.new_stream() for _ in range(33)]
    assert len(set(map(id, low[:32]))) == 32 and low[32] is low[0] and low[33 - 1].priority == 0
    high = [dev.new_stream(-1) for _ in range(33)]
    assert high[32] is high[0] and not set(map(id, high)) & set(map(id, low))
    a = sim.kernel(low[0], dur=1_000_000)
    b = sim.kernel(low[32], dur=10)
    assert b.start >= a.end and sim.ordered(a, b)  # one stream: launch order
