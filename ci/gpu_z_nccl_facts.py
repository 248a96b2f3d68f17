"""The z-series facts of ProcessGroupNCCL measured on one H200 (torch 2.11, NCCL of its wheel), 2026-12-02: for each
dtype and collective, whether it runs and with what values, and for each misuse the exception's type and message,
in a one-rank NCCL world (what one GPU allows). Output: docs/gpu/z-series-nccl-facts-2026-12-02.json (notes zd*).

    python3 ci/gpu_z_nccl_facts.py --driver > facts.json     # on the GPU machine
    FACTS_OUT=sim.json simdist run ci/gpu_z_nccl_facts.py -n 1 # the same in simdist, to compare

A probe that kills the process (an illegal memory access poisons the CUDA context) is recorded as
{"ok": false, "type": "crash"}: with --driver, the script reruns itself, skipping the probes already done, each run
appending one JSON line per probe to FACTS_LINES before and after it runs.
"""
import datetime
import json
import os
import sys
import warnings

import torch
import torch.distributed as dist

warnings.simplefilter("ignore")
if "--driver" in sys.argv:
    import subprocess
    import tempfile
    lines = tempfile.mktemp(suffix=".jsonl")
    env = dict(os.environ, FACTS_LINES=lines)
    for attempt in range(40):
        r = subprocess.run([sys.executable, __file__], env=env, stdout=subprocess.DEVNULL)
        if r.returncode == 0:
            break
    facts, started = {}, None
    with open(lines) as f:
        for line in f:
            e = json.loads(line)
            if "start" in e:
                started = e["start"]
                facts.setdefault(started, {"ok": False, "type": "crash", "msg": "the process died in this probe"})
            else:
                facts[e["name"]] = e["fact"]
    sys.stdout.write(json.dumps({"torch": torch.__version__, "nccl": list(torch.cuda.nccl.version()),
                                 "facts": facts}, indent=1, sort_keys=True) + "\n")
    sys.exit(0)
_LINES = os.environ.get("FACTS_LINES")
_DONE = set()
if _LINES and os.path.exists(_LINES):
    with open(_LINES) as f:
        for line in f:
            e = json.loads(line)
            _DONE.add(e.get("start") or e.get("name"))
for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29533"), ("RANK", "0"), ("WORLD_SIZE", "1"),
             ("LOCAL_RANK", "0")):
    os.environ.setdefault(k, v)
torch.cuda.set_device(0)
dist.init_process_group("nccl")
out = {}


def _log(entry):
    if _LINES:
        with open(_LINES, "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())


def rec(name, fn):
    if name in _DONE:
        return
    _log({"start": name})
    _rec(name, fn)
    _log({"name": name, "fact": out[name]})
    if not out[name]["ok"] and "CUDA error" in out[name]["msg"]:
        os._exit(3)  # the context is poisoned: the driver reruns the rest in a fresh process


def _rec(name, fn):
    try:
        v = fn()
        torch.cuda.synchronize()
        out[name] = {"ok": True, "value": _plain(v)}
    except Exception as e:  # noqa: BLE001 - the exception's type is the fact
        out[name] = {"ok": False, "type": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__[:4]],
                     "msg": str(e).split("\n")[0][:240]}


def _plain(v):
    if isinstance(v, torch.Tensor):
        return {"dtype": str(v.dtype), "device": str(v.device), "shape": list(v.shape),
                "values": v.detach().cpu().to(torch.float64 if not v.is_complex() else torch.complex128)
                .reshape(-1)[:8].tolist() if not v.is_complex() else
                [str(c) for c in v.detach().cpu().reshape(-1)[:8].tolist()]}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return type(v).__name__


DTYPES = ["int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool", "uint16",
          "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
          "complex64", "complex32"]


def make(dt, n=4):
    base = torch.tensor([1, 2, 3, 0, 5, 1, 2, 3][:n], dtype=torch.float32)
    if dt == torch.bool:
        return (base > 1).cuda()
    return base.to(dt).cuda() if not dt.is_complex else base.to(torch.complex64).to(dt).cuda()


OPS = {"SUM": dist.ReduceOp.SUM, "MAX": dist.ReduceOp.MAX, "MIN": dist.ReduceOp.MIN, "AVG": dist.ReduceOp.AVG,
       "PRODUCT": dist.ReduceOp.PRODUCT}
for name in DTYPES:
    dt = getattr(torch, name, None)
    if dt is None:
        continue
    for opn, op in OPS.items():
        rec(f"all_reduce/{name}/{opn}", lambda: (lambda x: (dist.all_reduce(x, op=op), x)[1])(make(dt)))
    rec(f"all_reduce/{name}/PREMUL_SUM(2.0)",
        lambda: (lambda x: (dist.all_reduce(x, op=dist._make_nccl_premul_sum(2.0)), x)[1])(make(dt)))
    rec(f"all_gather_into_tensor/{name}", lambda: (lambda x, o: (dist.all_gather_into_tensor(o, x), o)[1])(
        make(dt), torch.empty(4, dtype=dt, device="cuda")))
    rec(f"broadcast/{name}", lambda: (lambda x: (dist.broadcast(x, 0), x)[1])(make(dt)))
    rec(f"reduce_scatter_tensor/{name}/SUM", lambda: (lambda x, o: (dist.reduce_scatter_tensor(o, x), o)[1])(
        make(dt), torch.empty(4, dtype=dt, device="cuda")))
    rec(f"all_to_all_single/{name}", lambda: (lambda x, o: (dist.all_to_all_single(o, x), o)[1])(
        make(dt), torch.empty(4, dtype=dt, device="cuda")))
    rec(f"reduce/{name}/SUM", lambda: (lambda x: (dist.reduce(x, 0), x)[1])(make(dt)))

cuda = lambda *s: torch.arange(float(torch.tensor(s).prod())).reshape(*s).cuda()  # noqa: E731
# layouts
rec("all_reduce/transposed", lambda: (lambda x: (dist.all_reduce(x), x)[1])(cuda(2, 3).t()))
rec("all_reduce/channels_last", lambda: (lambda x: (dist.all_reduce(x), x)[1])(
    cuda(1, 2, 2, 2).contiguous(memory_format=torch.channels_last)))
rec("all_reduce/expanded", lambda: (lambda x: (dist.all_reduce(x), x)[1])(cuda(3)[:1].expand(4)))
rec("all_reduce/strided_slice", lambda: (lambda x: (dist.all_reduce(x), x)[1])(cuda(8)[::2]))
rec("all_reduce/cpu_tensor", lambda: (lambda x: (dist.all_reduce(x), x)[1])(torch.ones(2)))
rec("all_reduce/sparse", lambda: (lambda x: (dist.all_reduce(x), x)[1])(torch.eye(3).to_sparse().cuda()))
rec("all_reduce/leaf_requires_grad", lambda: (lambda x: (dist.all_reduce(x), x)[1])(
    torch.ones(3, device="cuda", requires_grad=True)))
rec("all_reduce/inference_tensor", lambda: (lambda x: (dist.all_reduce(x), x)[1])(
    (lambda: torch.inference_mode()(lambda: torch.ones(3, device="cuda"))())()))
rec("all_reduce/complex64/MAX", lambda: (lambda x: (dist.all_reduce(x, op=dist.ReduceOp.MAX), x)[1])(
    torch.ones(2, dtype=torch.complex64, device="cuda")))
rec("all_reduce/float32/BAND", lambda: (lambda x: (dist.all_reduce(x, op=dist.ReduceOp.BAND), x)[1])(
    torch.ones(2, dtype=torch.int32, device="cuda")))
rec("all_reduce/float32/PREMUL_SUM_enum", lambda: (lambda x: (dist.all_reduce(x, op=dist.ReduceOp.PREMUL_SUM), x)[1])(
    torch.ones(2, device="cuda")))
rec("all_reduce/bfloat16/PREMUL_SUM(tensor fp32)", lambda: (lambda x: (
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(torch.tensor([0.5], device="cuda"))), x)[1])(
    torch.ones(2, dtype=torch.bfloat16, device="cuda")))
rec("all_reduce/float32/PREMUL_SUM(tensor cpu)", lambda: (lambda x: (
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(torch.tensor([0.5]))), x)[1])(torch.ones(2, device="cuda")))
for dn in ("bfloat16", "float16", "float32", "float64"):
    for f in (0.5, 1.0 / 3.0, 0.75, 3.0):
        rec(f"premul/{dn}/host({f:.4f})", lambda: (lambda x: (dist.all_reduce(x, op=dist._make_nccl_premul_sum(f)), x)[1])(
            torch.full((2,), 2.0, dtype=getattr(torch, dn), device="cuda")))
    for fn in ("bfloat16", "float16", "float32", "float64"):
        rec(f"premul/{dn}/tensor_{fn}(3.0)", lambda: (lambda x: (dist.all_reduce(
            x, op=dist._make_nccl_premul_sum(torch.tensor([3.0], dtype=getattr(torch, fn), device="cuda"))), x)[1])(
            torch.full((2,), 2.0, dtype=getattr(torch, dn), device="cuda")))
rec("premul/bfloat16/reduce(0.5)", lambda: (lambda x: (dist.reduce(x, 0, op=dist._make_nccl_premul_sum(0.5)), x)[1])(
    torch.full((2,), 2.0, dtype=torch.bfloat16, device="cuda")))
rec("all_reduce/zero_size", lambda: (lambda x: (dist.all_reduce(x), x)[1])(torch.empty(0, device="cuda")))
rec("broadcast/transposed", lambda: (lambda x: (dist.broadcast(x, 0), x)[1])(cuda(2, 3).t()))
rec("broadcast/src_out_of_range", lambda: (lambda x: (dist.broadcast(x, 1), x)[1])(cuda(2)))
rec("all_gather_into_tensor/out_transposed", lambda: (lambda x, o: (dist.all_gather_into_tensor(o, x), o)[1])(
    cuda(3, 2).t().contiguous().t().t().contiguous().reshape(2, 3)[0], torch.empty(3, 2, device="cuda").t()[0]))
rec("all_gather_into_tensor/in_strided", lambda: (lambda x, o: (dist.all_gather_into_tensor(o, x), o)[1])(
    cuda(8)[::2], torch.empty(4, device="cuda")))
rec("all_gather_into_tensor/dtype_mismatch", lambda: (lambda x, o: (dist.all_gather_into_tensor(o, x), o)[1])(
    cuda(4), torch.empty(4, device="cuda", dtype=torch.float16)))
rec("all_gather_into_tensor/wrong_size", lambda: (lambda x, o: (dist.all_gather_into_tensor(o, x), o)[1])(
    cuda(4), torch.empty(5, device="cuda")))
rec("all_gather_into_tensor/stacked_2d", lambda: (lambda x, o: (dist.all_gather_into_tensor(o, x), o)[1])(
    cuda(4), torch.empty(1, 4, device="cuda")))
rec("all_gather/list_out_strided", lambda: (lambda x, o: (dist.all_gather(o, x), o)[1])(
    cuda(4), [torch.empty(8, device="cuda")[::2]]))
rec("all_gather/list_in_strided", lambda: (lambda x, o: (dist.all_gather(o, x), o)[1])(
    cuda(8)[::2], [torch.empty(4, device="cuda")]))
rec("all_gather/list_wrong_len", lambda: (lambda x, o: (dist.all_gather(o, x), o)[1])(
    cuda(4), [torch.empty(4, device="cuda"), torch.empty(4, device="cuda")]))
rec("all_gather/list_dtype_mismatch", lambda: (lambda x, o: (dist.all_gather(o, x), o)[1])(
    cuda(4), [torch.empty(4, device="cuda", dtype=torch.float64)]))
rec("all_gather/list_size_mismatch", lambda: (lambda x, o: (dist.all_gather(o, x), o)[1])(
    cuda(4), [torch.empty(6, device="cuda")]))
rec("reduce_scatter_tensor/dtype_mismatch", lambda: (lambda x, o: (dist.reduce_scatter_tensor(o, x), o)[1])(
    cuda(4), torch.empty(4, device="cuda", dtype=torch.float16)))
rec("reduce_scatter_tensor/out_strided", lambda: (lambda x, o: (dist.reduce_scatter_tensor(o, x), o)[1])(
    cuda(4), torch.empty(8, device="cuda")[::2]))
rec("reduce_scatter_tensor/stacked_2d_in", lambda: (lambda x, o: (dist.reduce_scatter_tensor(o, x), o)[1])(
    cuda(1, 4), torch.empty(4, device="cuda")))
rec("reduce_scatter/list", lambda: (lambda o: (dist.reduce_scatter(o, [cuda(4)]), o)[1])(torch.empty(4, device="cuda")))
rec("reduce_scatter/list_size_mismatch", lambda: (lambda o: (dist.reduce_scatter(o, [cuda(5)]), o)[1])(
    torch.empty(4, device="cuda")))
rec("all_to_all_single/splits", lambda: (lambda x, o: (dist.all_to_all_single(o, x, [4], [4]), o)[1])(
    cuda(4), torch.empty(4, device="cuda")))
rec("all_to_all_single/bad_splits", lambda: (lambda x, o: (dist.all_to_all_single(o, x, [3], [4]), o)[1])(
    cuda(4), torch.empty(4, device="cuda")))
rec("all_to_all_single/out_strided", lambda: (lambda x, o: (dist.all_to_all_single(o, x), o)[1])(
    cuda(4), torch.empty(8, device="cuda")[::2]))
rec("all_to_all_single/2d_rows", lambda: (lambda x, o: (dist.all_to_all_single(o, x, [2], [2]), o)[1])(
    cuda(2, 3), torch.empty(2, 3, device="cuda")))
rec("all_to_all/list", lambda: (lambda o: (dist.all_to_all(o, [cuda(3)]), o)[1])([torch.empty(3, device="cuda")]))
rec("all_to_all/list_strided_out", lambda: (lambda o: (dist.all_to_all(o, [cuda(3)]), o)[1])(
    [torch.empty(6, device="cuda")[::2]]))
rec("all_to_all/list_size_mismatch", lambda: (lambda o: (dist.all_to_all(o, [cuda(3)]), o)[1])(
    [torch.empty(4, device="cuda")]))
rec("gather/dst", lambda: (lambda o: (dist.gather(cuda(3), o, dst=0), o)[1])([torch.empty(3, device="cuda")]))
rec("gather/strided_in", lambda: (lambda o: (dist.gather(cuda(6)[::2], o, dst=0), o)[1])([torch.empty(3, device="cuda")]))
rec("gather/size_mismatch", lambda: (lambda o: (dist.gather(cuda(3), o, dst=0), o)[1])([torch.empty(4, device="cuda")]))
rec("gather/no_list_on_dst", lambda: dist.gather(cuda(3), None, dst=0))
rec("scatter/src", lambda: (lambda o: (dist.scatter(o, [cuda(3)], src=0), o)[1])(torch.empty(3, device="cuda")))
rec("scatter/size_mismatch", lambda: (lambda o: (dist.scatter(o, [cuda(4)], src=0), o)[1])(torch.empty(3, device="cuda")))
rec("scatter/strided_out", lambda: (lambda o: (dist.scatter(o, [cuda(3)], src=0), o)[1])(torch.empty(6, device="cuda")[::2]))
rec("scatter/no_list_on_src", lambda: dist.scatter(torch.empty(3, device="cuda"), None, src=0))
rec("send/self", lambda: dist.send(cuda(2), 0))
rec("batch_isend_irecv/empty", lambda: dist.batch_isend_irecv([]))
rec("barrier/device_ids", lambda: dist.barrier(device_ids=[0]))
rec("monitored_barrier/nccl", lambda: dist.monitored_barrier())
rec("barrier/async_work", lambda: (lambda w: (w.wait(), w.is_completed())[1])(dist.barrier(async_op=True)))


def work_facts():
    x = cuda(4)
    w = dist.all_reduce(x, async_op=True)
    r = {"type": type(w).__name__}
    r["wait_returns"] = w.wait()
    torch.cuda.synchronize()
    r["is_completed_after_sync"] = w.is_completed()
    r["is_success"] = _try(lambda: w.is_success())
    r["exception"] = _try(lambda: w.exception())
    r["source_rank"] = _try(lambda: w.source_rank())
    r["result"] = _try(lambda: _plain(w.result()))
    fut = w.get_future()
    r["future_value"] = _try(lambda: _plain(fut.value()))
    r["future_done"] = fut.done()
    w2 = dist.all_reduce(cuda(4), async_op=True)
    r["wait_timeout_returns"] = _try(lambda: w2.wait(timeout=datetime.timedelta(seconds=30)))
    w3 = dist.all_gather_into_tensor(torch.empty(4, device="cuda"), cuda(4), async_op=True)
    r["allgather_future_value"] = _try(lambda: _plain(w3.get_future().wait()))
    w4 = dist.broadcast(cuda(3), 0, async_op=True)
    r["then_value"] = _try(lambda: _plain(w4.get_future().then(lambda f: f.value()[0] * 2).wait()))
    w5 = dist.reduce_scatter_tensor(torch.empty(4, device="cuda"), cuda(4), async_op=True)
    r["reduce_scatter_future_value"] = _try(lambda: _plain(w5.get_future().wait()))
    w6 = dist.barrier(async_op=True)
    r["barrier_future_value"] = _try(lambda: _plain(w6.get_future().wait()))
    w7 = dist.all_to_all_single(torch.empty(4, device="cuda"), cuda(4), async_op=True)
    r["all_to_all_future_value"] = _try(lambda: _plain(w7.get_future().wait()))
    w8 = dist.all_gather([torch.empty(4, device="cuda")], cuda(4), async_op=True)
    r["all_gather_list_future_value"] = _try(lambda: _plain(w8.get_future().wait()))
    return r


def _try(fn):
    try:
        return _plain(fn())
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200]}" if str(e) else type(e).__name__


rec("work", work_facts)
rec("object/broadcast_cuda_tensor", lambda: (lambda b: (dist.broadcast_object_list(b, 0), b)[1])([cuda(2)]))
rec("object/all_gather_cuda_tensor", lambda: (lambda b: (dist.all_gather_object(b, {"t": cuda(2)}), b)[1])([None]))
rec("object/gather_object", lambda: (lambda b: (dist.gather_object(cuda(2), b, dst=0), b)[1])([None]))
rec("object/scatter_object", lambda: (lambda b: (dist.scatter_object_list(b, [cuda(2)], src=0), b)[1])([None]))
rec("backend_name", lambda: dist.get_backend())
rec("pg_device_types", lambda: [str(d) for d in dist.group.WORLD._device_types])
rec("supports_complex_max", lambda: dist.distributed_c10d.supports_complex(dist.ReduceOp.MAX))

dist.destroy_process_group()
text = json.dumps({"torch": torch.__version__, "facts": out}, indent=1, sort_keys=True)
if os.environ.get("FACTS_OUT"):
    with open(os.environ["FACTS_OUT"], "w") as f:
        f.write(text)
else:
    sys.stdout.write(text + "\n")
