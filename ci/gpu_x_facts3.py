"""The third x-series check on one GPU (notes x22-x24): the facts behind the rules simdist got wrong in this batch
(factories `*_like(host_tensor, device="cuda")` / `host.new_*(..., device="cuda")`; host writes and reads through a
numpy array made from a pinned buffer before an asynchronous copy of it; a block freed on one stream, taken again
there, and first written by another stream's copy), and corpus programs x22-x29 run as written, each trial in this
process after device memory was filled with 0xFF bytes (NaN as float: a read of a fresh block shows), with
torch.cuda._sleep on the racing stream (X_DELAY_CYCLES) so that a missing wait shows.

    python3 ci/gpu_x_facts3.py > docs/gpu/x-series-facts3-DATE.json      # on the GPU machine, from the repo root
"""
import contextlib
import io
import json
import os
import re
import runpy
import sys
import time

import torch

T0 = time.time()
D = 50_000_000  # about 25 ms of torch.cuda._sleep on an H200
out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "delay_cycles": D}
torch.cuda.set_device(0)


def err(e):
    return f"{type(e).__name__}: {str(e)[:300]}"


def poison(mb=4096):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    b = torch.empty(mb << 20, dtype=torch.uint8, device="cuda")
    b.fill_(0xFF)
    small = [torch.empty(1 << 19, dtype=torch.uint8, device="cuda").fill_(0xFF) for _ in range(256)]
    torch.cuda.synchronize()
    del b, small
    torch.cuda.empty_cache()


# 1. x22: factories from a host tensor's metadata onto the device
facts = {}
c = torch.arange(6, dtype=torch.float32).reshape(2, 3)
p = c.pin_memory()
forms = {
    "zeros_like": lambda: torch.zeros_like(c, device="cuda"),
    "zeros_like_pinned": lambda: torch.zeros_like(p, device="cuda"),
    "ones_like": lambda: torch.ones_like(c, device="cuda"),
    "full_like": lambda: torch.full_like(c, 7.0, device="cuda"),
    "zeros_like_transposed": lambda: torch.zeros_like(c.t(), device="cuda"),
    "new_zeros": lambda: c.new_zeros((4,), device="cuda"),
    "new_ones": lambda: c.new_ones((4,), device="cuda"),
    "new_full": lambda: c.new_full((4,), 3.0, device="cuda"),
}
for k, f in forms.items():
    try:
        t = f()
        facts[k] = {"device": str(t.device), "shape": list(t.shape), "stride": list(t.stride()),
                    "dtype": str(t.dtype), "values": t.cpu().tolist()}
    except Exception as e:  # noqa: BLE001
        facts[k] = err(e)
for name, fn in (("rand_like", torch.rand_like), ("randn_like", torch.randn_like)):
    torch.manual_seed(5)
    a = fn(c, device="cuda")
    torch.manual_seed(5)
    b = fn(torch.empty_like(c, device="cuda"))
    facts[f"{name}_host_arg_equals_device_arg"] = bool(torch.equal(a, b))
torch.manual_seed(5)
a = torch.randint_like(c, 10, device="cuda")
torch.manual_seed(5)
b = torch.randint_like(torch.empty_like(c, device="cuda"), 10)
facts["randint_like_host_arg_equals_device_arg"] = bool(torch.equal(a, b))
out["x22_like_factories"] = facts

# 2. x23: numpy arrays of pinned buffers made before the copies
n = 1 << 20
pinned = torch.zeros(n, dtype=torch.float32, pin_memory=True)
arr = pinned.numpy()                      # made once, nothing pending (vLLM's CpuGpuBuffer.np)
gpu = torch.empty(n, device="cuda")
torch.cuda._sleep(D)
gpu.copy_(pinned, non_blocking=True)      # the DMA runs after the sleep
arr[:] = 7.0                              # the host rewrites the buffer at once
torch.cuda.synchronize()
h2d_saw = gpu[:4].tolist()
src = torch.full((n,), 3.0, device="cuda")
torch.cuda._sleep(D)
pinned.copy_(src, non_blocking=True)      # a D2H copy into the same pinned buffer, run after the sleep
early = float(arr[:4].sum())              # read through the old array before any wait
torch.cuda.synchronize()
out["x23_numpy_of_pinned"] = {"h2d_copy_saw_after_host_write": h2d_saw,
                              "numpy_read_before_d2h_done_sum4": early, "after_sync_sum4": float(arr[:4].sum())}

# 3. x24: a block freed on the main stream, taken again there, first written by a side stream's copy
poison()
side = torch.cuda.Stream()
a = torch.full((1 << 20,), 1.0, device="cuda")
torch.cuda.synchronize()
ptr_a = a.data_ptr()
torch.cuda._sleep(D)
s = a.sum()                               # queued behind the sleep: reads a late
del a
b = torch.empty(1 << 20, device="cuda")   # the main stream's pool gives a's block back at once
host = torch.full((1 << 20,), 2.0).pin_memory()
with torch.cuda.stream(side):
    b.copy_(host, non_blocking=True)      # no side.wait_stream(main): it may land before the sum read
torch.cuda.synchronize()
out["x24_reuse_first_access_on_another_stream"] = {"same_block": b.data_ptr() == ptr_a, "sum": s.item(),
                                                   "sum_if_ordered": float(1 << 20)}
out["seconds_after_facts"] = round(time.time() - T0, 1)

# 4. corpus programs as written, without and with the racing stream delayed
PROGS = {
    "x22": "tests/corpus/training/x22_torchao_cpu_offload_optimizer_draft_no_wait_bug.py",
    "x23": "tests/corpus/training/x23_torchao_cpu_offload_optimizer_released.py",
    "x24": "tests/corpus/training/x24_nemo_ema_optimizer_side_stream.py",
    "x25": "tests/corpus/training/x25_nemo_ema_optimizer_no_join_before_step_bug.py",
    "x26": "tests/corpus/host_copies/x26_vllm_async_scheduling_pinned_inputs_rewritten_bug.py",
    "x27": "tests/corpus/host_copies/x27_vllm_synchronize_input_prep_pinned_buffers.py",
    "x28": "tests/corpus/allocator/x28_apex_data_prefetcher_record_stream.py",
    "x29": "tests/corpus/allocator/x29_apex_prefetcher_main_stream_buffers_no_wait_bug.py",
}


def damaged(text, e):
    if e:
        return True
    nums = [float(v) for v in re.findall(r"(?<![\w.])(inf|nan|[0-9.]+(?:e[-+]?[0-9]+)?)(?![\w.])", text.split(":", 1)[-1])]
    if "differ" in text and " of " in text:
        return nums[0] > 0
    return any(v != v or v > 1e-4 for v in nums)


out["programs"] = {}
for name, path in PROGS.items():
    trials = []
    for delay in (0, D):
        if time.time() - T0 > float(os.environ.get("X_BUDGET_S", "300")):
            trials.append({"skipped": "time budget"})
            continue
        os.environ["X_DELAY_CYCLES"] = str(delay)
        poison()
        buf = io.StringIO()
        t = time.time()
        try:
            with contextlib.redirect_stdout(buf):
                runpy.run_path(path, run_name="__main__")
            e = None
        except BaseException as ex:  # noqa: BLE001
            e = err(ex)
        try:
            torch.cuda.synchronize()
        except Exception as ex:  # noqa: BLE001
            e = (e or "") + " | sync: " + err(ex)
        text = buf.getvalue().strip().splitlines()[-1] if buf.getvalue().strip() else ""
        trials.append({"delay_cycles": delay, "stdout": text[-300:], "error": e, "damaged": damaged(text, e),
                       "seconds": round(time.time() - t, 2)})
    out["programs"][name] = trials

# 5. a table on stderr, the JSON on stdout
for name, trials in out["programs"].items():
    for tr in trials:
        print(f"{name:4} delay={tr.get('delay_cycles', '-'):>10} damaged={str(tr.get('damaged')):5} "
              f"error={str(tr.get('error'))[:50]!s:52} out={tr.get('stdout', tr.get('skipped', ''))[-90:]}",
              file=sys.stderr)
for k in ("x22_like_factories", "x23_numpy_of_pinned", "x24_reuse_first_access_on_another_stream"):
    print(k, json.dumps(out[k])[:600], file=sys.stderr)
out["seconds"] = round(time.time() - T0, 1)
json.dump(out, sys.stdout, indent=1, default=str)
