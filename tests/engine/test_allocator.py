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


class _StatByStat:
    """The Stats as CUDACachingAllocator.cpp changes them, one at a time (the reference for the folded log):
    increase -> current += n, peak = max(peak, current), allocated += n; decrease -> current -= n, freed += n,
    each in its pool and in "all"."""

    def __init__(self, stat):
        self.stat = {f: [row[:] for row in rows] for f, rows in stat.items()}

    def event(self, large, allocated_bytes, active_bytes, requested, split, split_bytes):
        sign = (allocated_bytes > 0) - (allocated_bytes < 0), (active_bytes > 0) - (active_bytes < 0)
        deltas = (sign[0], allocated_bytes, sign[1], active_bytes, requested, split, split_bytes)
        for family, n in zip(FOLDED, deltas):
            for st in (self.stat[family][0], self.stat[family][2 if large else 1]):
                st[0] += n
                if n > 0:
                    st[1] = max(st[1], st[0])
                    st[2] += n
                else:
                    st[3] -= n


FOLDED = ("allocation", "allocated_bytes", "active", "active_bytes", "requested_bytes", "inactive_split",
          "inactive_split_bytes")


def test_the_logged_figures_equal_changing_each_stat_at_each_event(sim, monkeypatch):
    """engine/allocator_stats.py folds the malloc / free events in batches (cumsum / max over the batch): the
    figures must be those of changing every Stat at every event, before and after a fold, whatever the order of
    pools and signs (a seeded random sequence of mallocs and frees of both pools crossing several folds)."""
    import random
    from simdist.engine import allocator, allocator_stats
    monkeypatch.setattr(allocator, "FOLD_AT", allocator_stats.EVENT * 16)  # many folds in a short sequence
    s = sim.stream()
    mem = sim.malloc(512, s).allocator
    st = mem.stats
    ref = _StatByStat(st.stat)
    folds = []
    fold = st.fold

    def tapped_fold():  # the reference takes each logged event, one at a time, before the batch is folded
        log = st.log
        for i in range(0, len(log), allocator_stats.EVENT):
            ref.event(*log[i:i + allocator_stats.EVENT])
        folds.append(len(log) // allocator_stats.EVENT)
        fold()
    st.fold = tapped_fold

    def folded(stat):
        return {f: stat[f] for f in FOLDED}  # (segment figures change at once, not logged)
    rng = random.Random(7)
    live = []
    for _ in range(600):
        if live and rng.random() < 0.45:
            mem.free(live.pop(rng.randrange(len(live))))
        else:
            live.append(sim.malloc(rng.choice((64, 700, 5000, 300_000, 2 << 20, 3 << 20)), s))
        if rng.random() < 0.02:
            assert folded(st.stat) == folded(ref.stat)  # a read folds: equal mid-way too
    assert folded(st.stat) == folded(ref.stat)
    assert sum(n == 16 for n in folds) > 5 and sum(folds) > 500  # full batches and reads' partial ones
