"""g-series facts (notes_engine_bugs.md `[g-series, documented semantics]`), measured on GPUs with
`python ci/gpu_g_facts.py` (2 GPUs or more for the NCCL and cross-device parts; prints one JSON object):

- nccl_reduce: every rank's tensor after `dist.reduce(t, dst)` on NCCL (ProcessGroupNCCL::reduce passes t as
  ncclReduce's sendbuff and recvbuff; nccl.h: recvbuff is written only on the root), each root, sync and async.
- peer_copy: under CUDA_LAUNCH_BLOCKING=1 and without it, whether `t.to("cuda:1")` / `copy_` from cuda:0 (with and
  without non_blocking) returns with the source's or the destination's stream still busy (a _sleep queued first
  on either), i.e. which streams a cross-device copy orders and whether the host waits for it.
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


def child(mode):
    r = subprocess.run([sys.executable, __file__, mode], capture_output=True, text=True, timeout=300)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except Exception:  # noqa: BLE001 - the failure is the fact
        return {"rc": r.returncode, "stdout": r.stdout[-1500:], "stderr": r.stderr[-1500:]}


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
    print(json.dumps(out, indent=1))
