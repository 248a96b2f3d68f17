"""g-series facts (notes_engine_bugs.md `[g-series, documented semantics]`), measured on GPUs with
`python ci/gpu_g_facts.py` (2 GPUs or more for the NCCL and cross-device parts; prints one JSON object):

- nccl_reduce: every rank's tensor after `dist.reduce(t, dst)` on NCCL (ProcessGroupNCCL::reduce passes t as
  ncclReduce's sendbuff and recvbuff; nccl.h: recvbuff is written only on the root), each root, sync and async.
- peer_copy: under CUDA_LAUNCH_BLOCKING=1 and without it, whether `t.to("cuda:1")` / `copy_` from cuda:0 (with and
  without non_blocking) returns with the source's or the destination's stream still busy (a _sleep queued first
  on either), i.e. which streams a cross-device copy orders and whether the host waits for it.
- expandable: a sequence of large allocations, a free, empty_cache and a regrowth under
  expandable_segments:True (and False): block offsets, memory_stats figures after each step (CUDACachingAllocator.cpp
  try_allocate_expandable_block / map_block / unmap_block), as tests/test_g_series.py asserts them from the source.
- stream_ids: stream_id / cuda_stream / device_index / device_type of default, side, high-priority and external
  streams per device, torch.cuda.Stream(stream_id=..., device_index=..., device_type=...) round trips, and
  equality / hash of the same stream reached twice.
"""
import json
import os
import subprocess
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "main"


def _nccl_reduce_rank(rank, world, port, q):
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    out = {}
    for root in range(world):
        for async_op in (False, True):
            t = torch.arange(6.0, device="cuda") + 10 * rank
            w = dist.reduce(t, dst=root, async_op=async_op)
            if async_op:
                w.wait()
            torch.cuda.synchronize()
            out[f"dst={root},async={async_op}"] = t.tolist()
    dist.destroy_process_group()
    q.put((rank, out))


def nccl_reduce():
    import torch
    import torch.multiprocessing as mp
    world = torch.cuda.device_count()
    if world < 2:
        return {"skipped": f"{world} GPU"}
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_nccl_reduce_rank, args=(r, world, 29533, q)) for r in range(world)]
    for p in ps:
        p.start()
    res = dict(q.get(timeout=300) for _ in ps)
    for p in ps:
        p.join()
    return {"world": world, "ranks": {str(r): res[r] for r in sorted(res)}}


def peer_copy():
    """Each cross-device copy with a _sleep queued first on the source's (or the destination's) current stream:
    how long the call took, and whether either current stream is idle when it returns."""
    import time
    import torch
    if torch.cuda.device_count() < 2:
        return {"skipped": "1 GPU"}
    out = {"launch_blocking": os.environ.get("CUDA_LAUNCH_BLOCKING"),
           "p2p": torch.cuda.can_device_access_peer(0, 1)}
    n = 1 << 22
    for how in ("to", "cast", "strided", "copy_contig"):
        for nb in (False, True):
            for busy in (0, 1):
                x = torch.randn(n, device="cuda:0")
                d = torch.empty(2048, 2048, device="cuda:1").t() if how == "strided" else torch.empty(n, device="cuda:1")
                torch.cuda.synchronize(0)
                torch.cuda.synchronize(1)
                with torch.cuda.device(busy):
                    torch.cuda._sleep(500_000_000)
                t0 = time.time()
                if how == "to":
                    y = x.to("cuda:1", non_blocking=nb)
                elif how == "cast":
                    y = x.to("cuda:1", dtype=torch.float16, non_blocking=nb)
                elif how == "strided":
                    y = d.copy_(x.view(2048, 2048), non_blocking=nb)
                else:
                    y = d.copy_(x, non_blocking=nb)
                dt = time.time() - t0
                out[f"{how},nb={nb},sleep_on=cuda:{busy}"] = {
                    "call_s": round(dt, 4), "src_current_idle": torch.cuda.current_stream(0).query(),
                    "dst_current_idle": torch.cuda.current_stream(1).query()}
                torch.cuda.synchronize(0)
                torch.cuda.synchronize(1)
                del y
    return out


def stream_ids():
    import torch
    out = {}
    for dev in range(min(2, torch.cuda.device_count())):
        with torch.cuda.device(dev):
            d = torch.cuda.default_stream(dev)
            side, side2 = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
            hi = torch.cuda.Stream(dev, priority=-1)
            streams = [("default", d), ("side", side), ("side2", side2), ("high", hi),
                       ("current", torch.cuda.current_stream(dev))]
            try:
                streams.append(("external", torch.cuda.ExternalStream(side.cuda_stream, device=dev)))
            except Exception as e:  # noqa: BLE001 - (simdist refuses ExternalStream by name)
                streams.append(("external", repr(e)))
            rows = {}
            for name, s in streams:
                if isinstance(s, str):
                    rows[name] = s
                    continue
                back = torch.cuda.Stream(stream_id=s.stream_id, device_index=s.device_index,
                                         device_type=s.device_type)
                rows[name] = {"stream_id": s.stream_id, "cuda_stream_nonzero": s.cuda_stream != 0,
                              "device_index": s.device_index, "device_type": s.device_type,
                              "roundtrip_equal": back == s, "roundtrip_hash_equal": hash(back) == hash(s),
                              "roundtrip_cuda_stream_equal": back.cuda_stream == s.cuda_stream,
                              "repr": repr(s)}
            rows["default_is_current_equal"] = d == torch.cuda.current_stream(dev)
            rows["default_hash_equal"] = hash(d) == hash(torch.cuda.default_stream(dev))
            out[f"cuda:{dev}"] = rows
    return out


def expandable():
    """tests/test_g_series.py _expandable_prog's sequence under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    (the child sets it): block offsets from the first block (MiB), memory figures after each step, and whether a
    page mapped again reads as the earlier tensor's bytes."""
    import torch
    MiB = 1 << 20
    keys = ("allocated_bytes.all.current", "reserved_bytes.all.current", "segment.all.current",
            "inactive_split.all.current", "inactive_split_bytes.all.current", "num_device_alloc", "num_device_free")
    out = {"conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), "steps": []}

    def step(name):
        st = torch.cuda.memory_stats()
        out["steps"].append([name, {k: st.get(k) for k in keys}])
    a = torch.empty(int(4.5 * MiB), dtype=torch.uint8, device="cuda")
    step("a 4.5")
    b = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
    step("b 16")
    c = torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")
    step("c 30")
    base = a.data_ptr()
    offs = [(t.data_ptr() - base) / MiB for t in (a, b, c)]
    del b
    f = torch.empty(9 * MiB, dtype=torch.uint8, device="cuda")
    step("f 9")
    offs.append((f.data_ptr() - base) / MiB)
    f.fill_(1)
    c.fill_(1)
    del f, c
    torch.cuda.empty_cache()
    step("empty_cache")
    g = torch.empty(60 * MiB, dtype=torch.uint8, device="cuda")
    step("g 60")
    offs.append((g.data_ptr() - base) / MiB)
    out["offsets_mib"] = offs
    out["remapped_reads_old_ones"] = bool((g.view(torch.float32)[10 * MiB:10 * MiB + 4] == 1).all().item())
    s = torch.empty(100, device="cuda")
    out["small_pool_offset_mib"] = (s.data_ptr() - base) / MiB
    step("small")
    return out


def child(mode):
    r = subprocess.run([sys.executable, __file__, mode], capture_output=True, text=True, timeout=300)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except Exception:  # noqa: BLE001 - the failure is the fact
        return {"rc": r.returncode, "stdout": r.stdout[-1500:], "stderr": r.stderr[-1500:]}


if __name__ == "__main__":
    if MODE == "main":
        import torch
        out = {"torch": torch.__version__, "gpus": torch.cuda.device_count(), "nccl_reduce": nccl_reduce()}
        for mode in ("stream_ids", "peer_copy"):
            out[mode] = child(mode)
        e = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
        r = subprocess.run([sys.executable, __file__, "peer_copy"], env=e, capture_output=True, text=True, timeout=300)
        try:
            out["peer_copy_launch_blocking"] = json.loads(r.stdout.strip().splitlines()[-1])
        except Exception:  # noqa: BLE001
            out["peer_copy_launch_blocking"] = {"rc": r.returncode, "stderr": r.stderr[-1500:]}
        for conf in ("expandable_segments:True", "expandable_segments:False"):
            e = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
            r = subprocess.run([sys.executable, __file__, "expandable"], env=e, capture_output=True, text=True,
                               timeout=300)
            try:
                out[f"expandable:{conf}"] = json.loads(r.stdout.strip().splitlines()[-1])
            except Exception:  # noqa: BLE001
                out[f"expandable:{conf}"] = {"rc": r.returncode, "stderr": r.stderr[-1500:]}
        print(json.dumps(out, indent=1))
    elif MODE == "expandable":
        print(json.dumps(expandable()))
    elif MODE == "peer_copy":
        print(json.dumps(peer_copy()))
    elif MODE == "stream_ids":
        print(json.dumps(stream_ids()))
