"""c-series facts (documented CUDA semantics simdist models), measured on an H200 with `python ci/gpu_c_facts.py`:
CUDA_LAUNCH_BLOCKING (set before `import torch` or after it, before CUDA init) and which launches it blocks (a
_sleep kernel, a pinned device-to-host copy_(non_blocking=True), an event record), and the default stream's ids.
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
    print(json.dumps(out, indent=1))
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
