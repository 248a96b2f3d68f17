"""The caching allocator's rules (c10/cuda/CUDACachingAllocator.cpp): 512-byte rounding, blocks owned by the
stream they were allocated on, immediate reuse on that stream, none on others, record_stream deferring the free
until the recorded stream's work queued at free time has completed, fresh memory holding poison."""
from simdist.engine.allocator import MIN_BLOCK, round_size


def test_sizes_round_up_to_512_bytes():
    assert round_size(1) == MIN_BLOCK == 512
    assert round_size(513) == 1024


def test_fresh_memory_is_poison(sim):
    a = sim.malloc(64, sim.stream())
    assert bytes(sim.region(a)._inner.tolist()) == b"\xff" * 64


def test_a_freed_block_is_reused_at_once_on_its_own_stream(sim):
    s = sim.stream()
    a = sim.malloc(1000, s)
    where = (a.block.segment.id, a.block.offset)
    a.allocator.free(a)
    b = sim.malloc(1000, s)
    assert (b.block.segment.id, b.block.offset) == where


def test_a_freed_block_is_not_reused_by_another_stream(sim):
    s1, s2 = sim.stream(), sim.stream(new=True)
    a = sim.malloc(1000, s1)
    where = (a.block.segment.id, a.block.offset)
    a.allocator.free(a)
    b = sim.malloc(1000, s2)
    assert (b.block.segment.id, b.block.offset) != where


def test_record_stream_defers_reuse_until_the_recorded_work_completed(sim):
    rank = sim.rank()
    s1, s2 = sim.stream(), sim.stream(new=True)
    a = sim.malloc(1000, s1)
    where = (a.block.segment.id, a.block.offset)
    user = sim.kernel(s2, reads=[sim.region(a)], dur=1_000_000)
    a.record_stream(s2)
    a.allocator.free(a)
    b = sim.malloc(1000, s1)  # the side stream's read has not completed: another block
    assert (b.block.segment.id, b.block.offset) != where
    rank.drain(user.end)
    rank.host.clock = user.end + 1  # the host has moved past the recorded event
    c = sim.malloc(1000, s1)
    assert (c.block.segment.id, c.block.offset) == where


def test_memory_allocated_drops_at_free_even_when_reuse_waits(sim):
    s1, s2 = sim.stream(), sim.stream(new=True)
    a = sim.malloc(1000, s1)
    mem = a.allocator
    sim.kernel(s2, reads=[sim.region(a)], dur=1_000_000)
    a.record_stream(s2)
    before = mem.allocated_bytes
    mem.free(a)
    assert mem.allocated_bytes == before - 1024


def test_empty_cache_releases_whole_free_segments(sim):
    s = sim.stream()
    a = sim.malloc(4096, s)
    mem = a.allocator
    reserved = mem.reserved_bytes
    mem.free(a)
    mem.empty_cache()
    assert mem.reserved_bytes == reserved - 2 * 1024 * 1024  # the small pool's 2 MiB segment
