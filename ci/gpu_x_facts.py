"""The x-series facts measured on one H200 (torch 2.11), 2026-12-02: the stream pool (32 per priority, round-robin),
priority clamping and priority_range, cross-stream block reuse, which calls set_sync_debug_mode("warn") flags, and the
per-epoch reserved figures of timm #2781. Output: docs/gpu/x-series-facts-2026-12-02.json (notes x2-x4).

    python3 ci/gpu_x_facts.py > facts.json             # on the GPU machine
    FACTS_OUT=sim.json simdist run ci/gpu_x_facts.py    # the same in simdist, to compare
"""
import json, warnings, torch
out = {}
torch.cuda.set_device(0)
# 1. stream pool
ss = [torch.cuda.Stream() for _ in range(33)]
ids = [s.stream_id for s in ss]
out["pool_distinct_first32"] = len(set(ids[:32]))
out["pool_33rd_is_first"] = ids[32] == ids[0]
out["pool_33rd_eq_first"] = ss[32] == ss[0]
hp = [torch.cuda.Stream(priority=-1) for _ in range(33)]
out["hp_33rd_is_first"] = hp[32].stream_id == hp[0].stream_id
out["hp_distinct_from_low"] = not (set(s.stream_id for s in hp) & set(ids))
out["priorities"] = {}
for p in (1, 0, -1, -2, -3, -4, -10):
    try:
        out["priorities"][p] = torch.cuda.Stream(priority=p).priority
    except Exception as e:
        out["priorities"][p] = f"{type(e).__name__}: {e}"[:200]
out["priority_range"] = torch.cuda.Stream.priority_range() if hasattr(torch.cuda.Stream, "priority_range") else None
out["stream_ids_sample"] = ids[:3] + [hp[0].stream_id]
# 2. cross-stream reuse
a, b = torch.cuda.Stream(), torch.cuda.Stream()
with torch.cuda.stream(a):
    x = torch.empty(1 << 20, device="cuda")
p = x.data_ptr(); r0 = torch.cuda.memory_reserved()
del x
with torch.cuda.stream(b):
    y = torch.empty(1 << 20, device="cuda")
out["other_stream_reuses"] = y.data_ptr() == p
out["reserved_grew"] = torch.cuda.memory_reserved() - r0
with torch.cuda.stream(a):
    z = torch.empty(1 << 20, device="cuda")
out["same_stream_reuses"] = z.data_ptr() == p
del y, z
# 3. sync debug mode: which calls warn
def warns(fn):
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fn()
        msgs = [str(m.message) for m in w]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return msgs
t = torch.randn(64, device="cuda")
pinned = torch.empty(64).pin_memory()
pageable = torch.randn(64)
ev = torch.cuda.Event()
cases = {
    "item": lambda: t.sum().item(),
    "cpu": lambda: t.cpu(),
    "tolist": lambda: t.tolist(),
    "to_cpu_nonblocking": lambda: t.to("cpu", non_blocking=True),
    "copy_to_pinned_nonblocking": lambda: pinned.copy_(t, non_blocking=True),
    "copy_to_pageable_nonblocking": lambda: pageable.copy_(t, non_blocking=True),
    "h2d_pageable_blocking": lambda: pageable.cuda(),
    "h2d_pageable_nonblocking": lambda: pageable.to("cuda", non_blocking=True),
    "h2d_pinned_blocking": lambda: pinned.cuda(),
    "h2d_pinned_nonblocking": lambda: pinned.to("cuda", non_blocking=True),
    "nonzero": lambda: t.nonzero(),
    "bool_index": lambda: t[t > 0],
    "masked_select": lambda: torch.masked_select(t, t > 0),
    "unique": lambda: torch.unique(t),
    "device_synchronize": lambda: torch.cuda.synchronize(),
    "stream_synchronize": lambda: torch.cuda.current_stream().synchronize(),
    "event_synchronize": lambda: (ev.record(), ev.synchronize()),
    "equal": lambda: torch.equal(t, t),
    "bool_of_tensor": lambda: bool(t[0] > 0),
    "print": lambda: repr(t),
    "scalar_tensor_from_python": lambda: torch.tensor(3.0, device="cuda"),
    "clip_grad_norm_nonfinite_false": lambda: None,
    "index_put_bool": lambda: t.__setitem__(t > 10, 0.0),
    "max_memory_allocated": lambda: torch.cuda.max_memory_allocated(),
    "repeat_interleave_tensor": lambda: torch.repeat_interleave(torch.tensor([1, 2], device="cuda")),
}
res = {}
for k, fn in cases.items():
    try:
        m = warns(fn)
        res[k] = [len(m), m[0][:160] if m else ""]
    except Exception as e:
        res[k] = f"EXC {type(e).__name__}: {e}"[:200]
out["sync_warns"] = res
torch.cuda.set_sync_debug_mode("error")
try:
    t.sum().item(); out["error_mode_item"] = "no error"
except RuntimeError as e:
    out["error_mode_item"] = str(e)[:200]
torch.cuda.set_sync_debug_mode("default")
out["mode_after"] = torch.cuda.get_sync_debug_mode()
# 4. per-epoch streams (timm #2781) reserved figures
torch.cuda.synchronize(); torch.cuda.empty_cache()
res = []
for epoch in range(4):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for i in range(3):
            bt = torch.empty(1 << 20, device="cuda")
            del bt
    torch.cuda.synchronize()
    res.append(torch.cuda.memory_reserved())
out["per_epoch_reserved"] = res
import os
if os.environ.get("FACTS_OUT"): open(os.environ["FACTS_OUT"], "w").write(json.dumps(out, default=str))
print(json.dumps(out, indent=1, default=str))
