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


def test_stats_follow_the_caching_allocators_transitions(sim):
    """DeviceStats as CUDACachingAllocator.cpp keeps them (notes x11): alloc_found_block raises allocation,
    allocated_bytes, active, active_bytes and requested_bytes (the unrounded size) and splits the block (a new
    inactive split block, or an inactive split block shrinking); free lowers allocation and allocated_bytes at once,
    free_block (after record_stream events) active, active_bytes and requested_bytes, merging free neighbours
    (inactive split blocks subsumed); alloc_block / release_block move segment and reserved_bytes."""
    rank = sim.rank()
    s1, s2 = sim.stream(), sim.stream(new=True)
    a = sim.malloc(4000, s1)
    mem = a.allocator
    st = mem.stats
    cur = st.current
    assert (cur("allocation"), cur("allocated_bytes"), cur("requested_bytes"), cur("segment")) == (1, 4096, 4000, 1)
    assert (cur("inactive_split"), cur("inactive_split_bytes")) == (1, (2 << 20) - 4096)
    b = sim.malloc(492, s1)  # from the inactive split rest: it shrinks by 512 bytes
    assert (cur("inactive_split"), cur("inactive_split_bytes")) == (1, (2 << 20) - 4608)
    user = sim.kernel(s2, reads=[sim.region(a)], dur=1_000_000)
    a.record_stream(s2)
    mem.free(a)  # allocated drops at once; active waits for the side stream's event
    assert (cur("allocation"), cur("allocated_bytes"), cur("active"), cur("active_bytes")) == (1, 512, 2, 4608)
    rank.drain(user.end)
    rank.host.clock = user.end + 1
    mem.empty_cache()  # the event is done: free_block, a new inactive split block in front of b
    assert (cur("active"), cur("active_bytes"), cur("requested_bytes")) == (1, 512, 492)
    assert (cur("inactive_split"), cur("inactive_split_bytes")) == (2, (2 << 20) - 512)
    assert (st.num_sync_all_streams, st.num_device_free, cur("segment")) == (1, 0, 1)
    mem.free(b)  # merges both neighbours: one whole free segment, no split block left
    assert (cur("inactive_split"), cur("inactive_split_bytes"), cur("active")) == (0, 0, 0)
    mem.empty_cache()
    assert (cur("segment"), cur("reserved_bytes"), st.num_device_free, st.num_device_alloc) == (0, 0, 1, 1)
    assert st.stat["allocation"][0] == [0, 2, 2, 2]  # current, peak, allocated, freed
    assert st.stat["requested_bytes"][1][2:] == [4492, 4492] and st.stat["requested_bytes"][2] == [0, 0, 0, 0]
    st.reset_accumulated()
    assert st.stat["allocation"][0] == [0, 2, 0, 0] and (st.num_device_alloc, st.num_sync_all_streams) == (0, 0)


def test_a_zero_byte_allocation_takes_no_block(sim):
    """CUDACachingAllocator::allocate mallocs only `if (size != 0)`: an empty storage has a null pointer, moves no
    figure, and the block a later allocation gets is the one it would get without it (notes x11)."""
    s = sim.stream()
    a = sim.malloc(1000, s)
    where = (a.block.segment.id, a.block.offset)
    mem = a.allocator
    mem.free(a)
    z = sim.malloc(0, s)
    assert z.block.size == 0 and mem.stats.current("allocation") == 0 and mem.allocated_bytes == 0
    b = sim.malloc(1000, s)
    assert (b.block.segment.id, b.block.offset) == where
    mem.free(z)
    assert mem.stats.current("allocation") == 1
