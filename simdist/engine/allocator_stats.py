"""The caching allocator's DeviceStats (c10/core/CachingDeviceAllocator.h), kept as CUDACachingAllocator.cpp
changes them, at a cost the per-op path can bear.

Per family and pool ("all", "small_pool", "large_pool") a Stat of current, peak, allocated (the sum of increases)
and freed (of decreases), changed where CUDACachingAllocator.cpp changes them: alloc_found_block (allocation,
allocated_bytes, active, active_bytes, requested_bytes up; inactive_split by the split), free (allocation,
allocated_bytes down, before any record_stream events), free_block (active, active_bytes, requested_bytes down;
inactive_split by the merges), alloc_block / release_block (segment, reserved_bytes; num_device_alloc /
num_device_free), and synchronize_and_free_events (num_sync_all_streams, at every empty_cache and OOM retry).

Why a log: every malloc and free of every op changes seven of the families, each in its pool and in "all", with a
peak to keep: done one by one in Python that was a quarter of a small op's cost. So each malloc / free appends its
seven deltas to a flat list (one `extend`), and the list is folded into the figures, with torch's cumsum / max
over the whole batch, when it grows long or when a figure is read. A Stat's peak is the maximum of its current
after each increase, i.e. the maximum of the running sum of its deltas: the fold gives the same figures as
changing them one event at a time (tests/engine/test_allocator.py checks it against that, event by event).
"""
from __future__ import annotations

from array import array

import torch

# torch's own (the faces patch torch.tensor & co. while a run is on: simdist/faces/patches.py)
_frombuffer = torch._C._VariableFunctions.frombuffer

STAT_FAMILIES = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
                 "active_bytes", "inactive_split_bytes", "requested_bytes")
STAT_POOLS = ("all", "small_pool", "large_pool")

# a family's slots in AllocatorStats.v, from its base: current, allocated and freed per pool (small, large), then
# the peaks (small, large, all). "all"'s current / allocated / freed are the pools' sums; its peak is not (the
# pools peak at other times), so it is kept.
_CUR, _INC, _DEC, _PEAK, _PEAK_ALL = 0, 2, 4, 6, 8
_WIDTH = 9
_BASE = {f: _WIDTH * i for i, f in enumerate(STAT_FAMILIES)}

# an event of the log: (large pool?, then a delta per family in this order). allocation and active change by
# one block exactly when allocated_bytes and active_bytes change (a block has a size; a zero-byte storage takes
# none), so their deltas are those bytes' signs and are not logged.
LOGGED = ("allocated_bytes", "active_bytes", "requested_bytes", "inactive_split", "inactive_split_bytes")
EVENT = 1 + len(LOGGED)
FOLD_AT = EVENT * 4096  # the log's length at which it is folded
# the families the fold gives, in its column order: the two block counts from the signs, then LOGGED
_FOLDED = ("allocation", "allocated_bytes", "active", "active_bytes", "requested_bytes", "inactive_split",
           "inactive_split_bytes")


class AllocatorStats:
    def __init__(self):
        self.v = [0] * (_WIDTH * len(STAT_FAMILIES))
        # malloc / free events not folded into v yet: EVENT ints each (DeviceMemory appends them)
        self.log = []
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0

    # --- the rare changes (segments), applied at once --------------------------------------------------------
    def up(self, family, small, amount):
        if amount:
            v = self.v
            b = _BASE[family]
            i = b + (0 if small else 1)
            c = v[i] = v[i] + amount
            v[i + _INC] += amount
            if c > v[i + _PEAK]:
                v[i + _PEAK] = c
            c = v[b] + v[b + 1]
            if c > v[b + _PEAK_ALL]:
                v[b + _PEAK_ALL] = c

    def down(self, family, small, amount):
        if amount:
            v = self.v
            i = _BASE[family] + (0 if small else 1)
            v[i] -= amount
            v[i + _DEC] += amount

    # --- the log -------------------------------------------------------------------------------------------
    def fold(self):
        """Apply the logged events to v, in order."""
        log = self.log
        if not log:
            return
        data = array("q", log)  # (then frombuffer: 4x torch.tensor's speed on a list)
        # in place (DeviceMemory holds this list), and only what was read: a thread the program started may free
        # a tensor meanwhile (each event is one extend, each step here one C call under the GIL)
        del log[:len(data)]
        # plain CPU kernels on int64, whatever modes the program has on (a rank's dispatch mode, a default device)
        with torch._C._DisableTorchDispatch(), torch._C.DisableTorchFunction():
            t = _frombuffer(data, dtype=torch.int64).view(-1, EVENT)
            large = t[:, :1]
            b = t[:, 1:]
            d = torch.cat((b[:, :1].sign(), b[:, :1], b[:, 1:2].sign(), b[:, 1:]), 1)  # _FOLDED's columns
            d_large = d * large
            pools = torch.cat((d - d_large, d_large), 1)  # [small deltas | large deltas]
            run = pools.cumsum(0)
            highs = run.max(0).values.tolist()
            nets = run[-1].tolist()
            sizes = pools.abs().sum(0).tolist()
            highs_all = d.cumsum(0).max(0).values.tolist()
        v = self.v
        n = len(_FOLDED)
        for j, family in enumerate(_FOLDED):
            b = _BASE[family]
            cur_all = v[b] + v[b + 1]
            for p in (0, 1):
                k = j + p * n
                net, size = nets[k], sizes[k]
                i = b + p
                if v[i] + highs[k] > v[i + _PEAK]:
                    v[i + _PEAK] = v[i] + highs[k]
                v[i] += net
                v[i + _INC] += (size + net) // 2  # each event's delta has one sign: increases and decreases
                v[i + _DEC] += (size - net) // 2
            if cur_all + highs_all[j] > v[b + _PEAK_ALL]:
                v[b + _PEAK_ALL] = cur_all + highs_all[j]

    # --- the figures (each read folds first) ----------------------------------------------------------------
    def current(self, family, pool="all"):
        self.fold()
        b = _BASE[family]
        v = self.v
        return v[b] + v[b + 1] if pool == "all" else v[b + STAT_POOLS.index(pool) - 1]

    @property
    def stat(self):
        """{family: [all, small_pool, large_pool]}, each [current, peak, allocated, freed] (memory_stats' order)."""
        self.fold()
        v = self.v
        out = {}
        for f, b in _BASE.items():
            pools = [[v[b + p], v[b + _PEAK + p], v[b + _INC + p], v[b + _DEC + p]] for p in (0, 1)]
            out[f] = [[pools[0][0] + pools[1][0], v[b + _PEAK_ALL], pools[0][2] + pools[1][2],
                       pools[0][3] + pools[1][3]]] + pools
        return out

    def reset_peak(self):
        self.fold()
        v = self.v
        for b in _BASE.values():
            v[b + _PEAK], v[b + _PEAK + 1] = v[b], v[b + 1]
            v[b + _PEAK_ALL] = v[b] + v[b + 1]

    def reset_accumulated(self):
        self.fold()
        v = self.v
        for b in _BASE.values():
            v[b + _INC] = v[b + _INC + 1] = v[b + _DEC] = v[b + _DEC + 1] = 0
        self.num_sync_all_streams = self.num_device_alloc = self.num_device_free = 0
