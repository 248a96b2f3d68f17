"""c-series facts (documented CUDA semantics simdist models), measured on an H200 with `python ci/gpu_c_facts.py`:
CUDA_LAUNCH_BLOCKING (set before `import torch` or after it, before CUDA init) and which launches it blocks (a
_sleep kernel, a pinned device-to-host copy_(non_blocking=True), an event record), the default stream's ids, and
memory_allocated of a large block with a 0.3 MiB rest with and without expandable segments, cufft_plan_cache defaults.
Output of 2026-12-02 (torch 2.11.0+cu130): docs/gpu/c-series-facts-2026-12-02.json."""
import os, sys, json, time, subprocess
mode = sys.argv[1] if len(sys.argv) > 1 else "main"
if mode == "main":
    out = {}
    for env in ("0", "1"):
        for when in ("before_import", "after_import"):
            e = dict(os.environ)
            e.pop("CUDA_LAUNCH_BLOCKING", None)
            if when == "before_import":
                e["CUDA_LAUNCH_BLOCKING"] = env
            r = subprocess.run([sys.executable, __file__, "child", env, when], env=e, capture_output=True, text=True)
            out[f"{env}:{when}"] = r.stdout.strip() or r.stderr[-500:]
    for conf in ("", "expandable_segments:True"):
        e = dict(os.environ)
        e.pop("CUDA_LAUNCH_BLOCKING", None)
        e["PYTORCH_CUDA_ALLOC_CONF"] = conf
        r = subprocess.run([sys.executable, __file__, "alloc"], env=e, capture_output=True, text=True)
        out[f"alloc:{conf or 'default'}"] = r.stdout.strip() or r.stderr[-500:]
    print(json.dumps(out, indent=1))
elif mode == "alloc":
    # a large block's rest of 0.3 MiB: split only with expandable segments (CUDACachingAllocator.cpp should_split)
    import torch
    MiB = 1 << 20
    a = torch.empty(int(4.5 * MiB), dtype=torch.uint8, device="cuda")
    b = torch.empty(int(15.2 * MiB) // 512 * 512, dtype=torch.uint8, device="cuda")
    c = torch.backends.cuda.cufft_plan_cache
    print(json.dumps({"memory_allocated": torch.cuda.memory_allocated(), "requested": a.numel() + b.numel(),
                      "cufft_max_size": c.max_size, "cufft_size_before": c.size}))
else:
    env, when = sys.argv[2], sys.argv[3]
    if when == "after_import":
        import torch
        os.environ["CUDA_LAUNCH_BLOCKING"] = env
    import torch
    res = {}
    d0 = torch.cuda.default_stream(); 
    res["default_ids"] = [d0.stream_id, d0.cuda_stream, torch.cuda.current_stream().stream_id]
    side = torch.cuda.Stream()
    res["side_id"] = [side.stream_id, side.cuda_stream != 0]
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)
    res["kernel_query_after_sleep"] = side.query()
    torch.cuda.synchronize()
    x = torch.ones(1 << 24, device="cuda")
    h = torch.empty(1 << 24).pin_memory()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)
    t0 = time.time()
    with torch.cuda.stream(side):
        h.copy_(x, non_blocking=True)
    res["pinned_copy_call_s"] = round(time.time() - t0, 3)
    res["pinned_copy_query"] = side.query()
    torch.cuda.synchronize()
    # is an event record blocking? wait_event?
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)
    e = torch.cuda.Event()
    t0 = time.time(); e.record(side); res["event_record_s"] = round(time.time() - t0, 3)
    torch.cuda.synchronize()
    print(json.dumps(res))
