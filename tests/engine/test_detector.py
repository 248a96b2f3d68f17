"""The happens-before detector's rules (DESIGN.md "Engine semantics" 5; the kinds of torch/cuda/_sanitizer.py
plus reuse of freed memory): two accesses to overlapping bytes, at least one a write, with no order between
their ops are a hazard; its kind follows the order of launch; it is `observed` when this run's timing went the
bad way and the bytes differed. Detection does not depend on the schedule."""
import pytest


def kinds(sim):
    return sorted(h.kind for h in sim.hazards())


def test_read_after_write(sim):
    s1, s2 = sim.stream(), sim.stream(new=True)
    x = sim.region(sim.malloc(256, s1))
    sim.kernel(s1, writes=[x])
    sim.kernel(s2, reads=[x])
    assert kinds(sim) == ["read-after-write"]


def test_write_after_read(sim):
    s1, s2 = sim.stream(), sim.stream(new=True)
    x = sim.region(sim.malloc(256, s1))
    sim.kernel(s1, reads=[x])
    sim.kernel(s2, writes=[x])
    assert kinds(sim) == ["write-after-read"]


def test_write_after_write(sim):
    s1, s2 = sim.stream(), sim.stream(new=True)
    x = sim.region(sim.malloc(256, s1))
    sim.kernel(s1, writes=[x])
    sim.kernel(s2, writes=[x])
    assert kinds(sim) == ["write-after-write"]


def test_a_read_modify_write_racing_a_write_reads_it(sim):
    s1, s2 = sim.stream(), sim.stream(new=True)
    x = sim.region(sim.malloc(256, s1))
    sim.kernel(s1, writes=[x])
    sim.kernel(s2, reads=[x], writes=[x])  # x.add_(1) on s2
    assert kinds(sim) == ["read-after-write"]


def test_ordered_accesses_are_no_hazard(sim):
    host = sim.rank().host
    s1, s2 = sim.stream(), sim.stream(new=True)
    x = sim.region(sim.malloc(256, s1))
    sim.kernel(s1, writes=[x])
    s2.wait_marker(host, s1.record_marker(host))
    sim.kernel(s2, reads=[x])
    assert kinds(sim) == []


def test_two_reads_never_conflict(sim):
    s1, s2 = sim.stream(), sim.stream(new=True)
    x = sim.region(sim.malloc(256, s1))
    sim.kernel(s1, reads=[x])
    sim.kernel(s2, reads=[x])
    assert kinds(sim) == []


def test_disjoint_byte_ranges_of_one_block_do_not_conflict(sim):
    s1, s2 = sim.stream(), sim.stream(new=True)
    a = sim.malloc(512, s1)
    sim.kernel(s1, writes=[sim.region(a, 0, 256)])
    sim.kernel(s2, reads=[sim.region(a, 256, 512)])
    assert kinds(sim) == []
    sim.kernel(s2, reads=[sim.region(a, 255, 257)])  # one byte overlaps
    assert kinds(sim) == ["read-after-write"]


def test_reuse_after_free(sim):
    s1, s2 = sim.stream(), sim.stream(new=True)
    a = sim.malloc(256, s1)
    sim.kernel(s2, reads=[sim.region(a)], dur=1_000_000)  # a side stream still reads the block...
    a.allocator.free(a)  # ...when it is freed without record_stream
    b = sim.malloc(256, s1)  # the caching allocator hands it out again on its own stream
    assert b.block.offset == 0
    sim.kernel(s1, writes=[sim.region(b)])
    assert kinds(sim) == ["reuse-after-free"]


def test_record_stream_makes_the_reuse_safe(sim):
    rank = sim.rank()
    s1, s2 = sim.stream(), sim.stream(new=True)
    a = sim.malloc(256, s1)
    user = sim.kernel(s2, reads=[sim.region(a)], dur=1_000_000)
    a.record_stream(s2)
    a.allocator.free(a)
    rank.drain(user.end)
    rank.host.clock = user.end + 1
    b = sim.malloc(256, s1)
    sim.kernel(s1, writes=[sim.region(b)])
    assert kinds(sim) == []


def test_a_device_to_host_read_racing_a_write_is_a_host_read(sim):
    from simdist.engine.launch import launch
    s1, s2 = sim.stream(), sim.stream(new=True)
    x = sim.region(sim.malloc(256, s1))
    sim.kernel(s1, writes=[x])
    launch(sim.rank(), s2, "copy_d2h", "d2h", None, [x], [], 0)
    assert kinds(sim) == ["host-read"]


@pytest.mark.parametrize("writer_slow", [True, False])
def test_observed_only_when_the_timing_went_the_bad_way(sim, writer_slow):
    s1, s2 = sim.stream(), sim.stream(new=True)
    x = sim.region(sim.malloc(256, s1))
    sim.kernel(s1, writes=[x], fn=sim.fill(x, 0), dur=10)
    sim.run_all()
    sim.kernel(s1, writes=[x], fn=sim.fill(x, 7), dur=1_000_000 if writer_slow else 10)
    sim.kernel(s2, reads=[x], fn=lambda: None, dur=10 if writer_slow else 1_000_000)
    sim.run_all()
    (h,) = sim.hazards()
    assert h.kind == "read-after-write"
    assert h.observed == writer_slow  # the read ran before the write landed: it saw the old bytes


def test_detection_does_not_depend_on_the_schedule(make_sim):
    for d1, d2 in ((10, 1_000_000), (1_000_000, 10)):
        sim = make_sim()
        s1, s2 = sim.stream(), sim.stream(new=True)
        x = sim.region(sim.malloc(256, s1))
        sim.kernel(s1, writes=[x], dur=d1)
        sim.kernel(s2, reads=[x], dur=d2)
        sim.run_all()
        assert [h.kind for h in sim.hazards()] == ["read-after-write"]
