"""Two scripted allocation sequences whose torch.cuda.memory_stats() an H200 gave (ci/gpu_x_facts2.py, output in
docs/gpu/x-series-facts2-2026-12-02.json) and simdist must give key for key (tests/test_engine_rules.py,
notes x11). Each starts from an empty cache with both resets; run them before any other device work."""
import torch


def _fresh():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()


def sequence1():
    """Small and large pool blocks split from fresh segments, two freed (inactive split blocks)."""
    _fresh()
    a = torch.empty(1000, device="cuda")             # small pool
    b = torch.empty(300_000, device="cuda")          # 1.2 MB: large pool (a 20 MiB segment)
    c = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
    d = torch.empty(123, device="cuda")
    del a, b
    st = dict(torch.cuda.memory_stats())
    del c, d
    return st


def sequence2():
    """An empty tensor, a record_stream-pending free, merges, empty_cache, then each reset."""
    _fresh()
    snaps = {}
    side = torch.cuda.Stream()
    z = torch.empty(0, device="cuda")                    # no block (allocate(0) mallocs nothing)
    x = torch.empty(256, 1024, device="cuda")            # 1 MiB: the small pool's largest
    y = torch.empty(100, device="cuda")
    big = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        x.add_(1)
    x.record_stream(side)
    del x                                                # freed, its reuse waiting for the side stream
    snaps["pending"] = dict(torch.cuda.memory_stats())
    del y, big                                           # merge with the free rest of their segments
    w = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
    snaps["merged"] = dict(torch.cuda.memory_stats())
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    snaps["emptied"] = dict(torch.cuda.memory_stats())
    torch.cuda.reset_peak_memory_stats()
    v = torch.empty(1000, device="cuda")
    snaps["peak_reset"] = dict(torch.cuda.memory_stats())
    torch.cuda.reset_accumulated_memory_stats()
    del v, w, z
    snaps["accumulated_reset"] = dict(torch.cuda.memory_stats())
    return snaps
