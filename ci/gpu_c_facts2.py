"""c-series facts, second script (run on an H200 with `python ci/gpu_c_facts2.py`, 2026-12-02, torch 2.11.0+cu130;
output in docs/gpu/c-series-facts-2026-12-02.json under "run3"): which same-device launches CUDA_LAUNCH_BLOCKING=1
makes the host wait for (copy_, clone, a cast, add_: query() right after the call), and the errors torch raises for
a device index past device_count() (one GPU: cuda:1)."""
import os, sys, json, subprocess, time
if len(sys.argv) == 1:
    out = {}
    for env in ("0", "1"):
        e = dict(os.environ); e["CUDA_LAUNCH_BLOCKING"] = env
        r = subprocess.run([sys.executable, __file__, "lb"], env=e, capture_output=True, text=True)
        out[f"lb{env}"] = r.stdout.strip() or r.stderr[-800:]
    r = subprocess.run([sys.executable, __file__, "dev"], capture_output=True, text=True)
    out["dev"] = r.stdout.strip() or r.stderr[-800:]
    print(json.dumps(out, indent=1))
elif sys.argv[1] == "lb":
    import torch
    res = {}
    a = torch.ones(1 << 30, device="cuda"); b = torch.empty_like(a); torch.cuda.synchronize()
    s = torch.cuda.current_stream()
    t0 = time.time(); b.copy_(a); res["d2d_copy_call_s"] = round(time.time() - t0, 4); res["d2d_query"] = s.query()
    torch.cuda.synchronize()
    t0 = time.time(); c = a.clone(); res["clone_call_s"] = round(time.time() - t0, 4); res["clone_query"] = s.query()
    torch.cuda.synchronize(); del c
    t0 = time.time(); d = a.to(torch.float16); res["cast_call_s"] = round(time.time() - t0, 4); res["cast_query"] = s.query()
    torch.cuda.synchronize(); del d
    t0 = time.time(); a.add_(1); res["add_call_s"] = round(time.time() - t0, 4); res["add_query"] = s.query()
    torch.cuda.synchronize()
    print(json.dumps(res))
else:
    import torch
    res = {"device_count": torch.cuda.device_count()}
    def E(name, f):
        try:
            f(); res[name] = "ok"
        except BaseException as e:
            res[name] = [type(e).__name__, [c.__name__ for c in type(e).__mro__][:3], str(e).splitlines()[0][:200]]
    E("ones_cuda1", lambda: torch.ones(1, device="cuda:1"))
    E("stream_dev1", lambda: torch.cuda.Stream(device=1))
    E("current_stream1", lambda: torch.cuda.current_stream(1))
    E("synchronize1", lambda: torch.cuda.synchronize(1))
    E("memory_allocated1", lambda: torch.cuda.memory_allocated(1))
    E("props1", lambda: torch.cuda.get_device_properties(1))
    E("device_ctx1", lambda: torch.cuda.device(1).__enter__())
    E("set_device1", lambda: torch.cuda.set_device(1))
    print(json.dumps(res))
