"""simdist's new surface under the GPU machine's torch (a CUDA build, 2.11): import, and each new rule once."""
import json, sys, traceback, warnings
warnings.simplefilter("ignore")
out = {}
try:
    import torch, simdist
    out["torch"] = torch.__version__
except Exception as e:
    print(json.dumps({"import": traceback.format_exc()[-1500:]})); sys.exit(0)

def case(name, fn):
    try:
        r = simdist.run(fn)
        out[name] = {"returns": repr(r.returns)[:300], "hazards": len(r.hazards)}
    except Exception as e:
        out[name] = f"{type(e).__name__}: {str(e)[:300]}"

def hop():
    from torch._higher_order_ops.while_loop import while_loop
    from torch.nn.attention.flex_attention import flex_attention
    q = torch.ones(1, 1, 128, 16, device="cuda")
    a = torch.cond(q.sum() > 0, lambda t: t * 2, lambda t: t - 1, (q,)).sum().item()
    i, x = while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, x * 2), (torch.zeros((), dtype=torch.int64, device="cuda"), torch.ones(3, device="cuda")))
    f = flex_attention(q, q, q).sum().item()
    return a, i.item(), x.tolist(), f
def dl():
    x = torch.arange(3.0, device="cuda")
    y = torch.from_dlpack(torch.utils.dlpack.to_dlpack(x)); y.add_(1)
    z = torch.from_dlpack(x)
    return x.cpu().tolist(), z.data_ptr() == x.data_ptr()
def rng():
    torch.cuda.manual_seed(0)
    a = torch.cuda._get_rng_state_offset(); torch.randn(4, device="cuda")
    return a, torch.cuda._get_rng_state_offset()
def prof():
    torch.cuda.profiler.start(); torch.cuda.profiler.stop()
    with torch.autograd.profiler.emit_nvtx():
        x = torch.ones(4, device="cuda") + 1
    return x.sum().item(), torch.cuda.get_arch_list()[:2]
def storage():
    s = torch.UntypedStorage(16, device="cuda")
    return s.nbytes(), torch.UntypedStorage(16).pin_memory().is_pinned()
def refuse():
    try:
        from torch.distributed import _symmetric_memory
        _symmetric_memory.empty(16, device="cuda")
    except simdist.UnsupportedOperation as e:
        return "refused"
for n, f in [("hop", hop), ("dlpack", dl), ("rng", rng), ("profiler", prof), ("storage", storage), ("symm", refuse)]:
    case(n, f)
print(json.dumps(out, indent=1))
