"""Which ops synchronize the host on a GPU (torch.cuda.set_sync_debug_mode("warn"), 47 ops; H200, torch 2.11,
2026-12-02: docs/gpu/x-series-sync-ops-2026-12-02.json; notes x9). FACTS_OUT=file writes the counts as JSON, also
under simdist (simdist run ci/gpu_x_sync_ops.py) to compare.
"""
import json, os, warnings, torch
torch.cuda.set_device(0)
torch.manual_seed(0)
a = torch.randn(8, 8, device="cuda"); spd = a @ a.T + 8 * torch.eye(8, device="cuda")
v = torch.rand(64, device="cuda"); iv = torch.randint(0, 10, (64,), device="cuda")
cpu_idx = torch.tensor([1, 3, 5]); p = torch.softmax(torch.randn(4, 6, device="cuda"), -1)
params = [torch.nn.Parameter(torch.randn(4, device="cuda")) for _ in range(2)]
for q in params: q.grad = torch.randn(4, device="cuda")
cases = {
    "cholesky": lambda: torch.linalg.cholesky(spd), "cholesky_ex": lambda: torch.linalg.cholesky_ex(spd),
    "inv": lambda: torch.linalg.inv(spd), "solve": lambda: torch.linalg.solve(spd, a), "eigh": lambda: torch.linalg.eigh(spd),
    "det": lambda: torch.linalg.det(spd), "qr": lambda: torch.linalg.qr(a), "svd": lambda: torch.linalg.svd(a),
    "histc": lambda: torch.histc(v, bins=5), "bincount": lambda: torch.bincount(iv), "multinomial": lambda: torch.multinomial(p, 2),
    "randperm": lambda: torch.randperm(10, device="cuda"), "index_cpu_idx": lambda: v[cpu_idx], "index_put_cpu_idx": lambda: v.index_put_((cpu_idx,), torch.tensor(1.0, device="cuda")),
    "index_list": lambda: v[[1, 2, 3]], "isin": lambda: torch.isin(iv, iv[:3]), "sort": lambda: torch.sort(v), "topk": lambda: torch.topk(v, 3),
    "cumsum": lambda: torch.cumsum(v, 0), "any_bool": lambda: bool(torch.any(v > 2)), "clip_nonfinite": lambda: torch.nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=True),
    "clip": lambda: torch.nn.utils.clip_grad_norm_(params, 1.0), "categorical_sample": lambda: torch.distributions.Categorical(probs=p).sample(),
    "categorical_novalidate": lambda: torch.distributions.Categorical(probs=p, validate_args=False).sample(),
    "embedding_bag": lambda: torch.nn.functional.embedding_bag((iv[:8] % 8).view(2, 4), a), "arange": lambda: torch.arange(5, device="cuda"),
    "zeros": lambda: torch.zeros(5, device="cuda"), "full_scalar": lambda: torch.full((3,), 2.0, device="cuda"),
    "nonzero_static": lambda: torch.nonzero_static(v > 0.5, size=10), "masked_scatter": lambda: v.masked_scatter(v > 0.5, v),
    "where_1arg": lambda: torch.where(v > 0.5), "argwhere": lambda: torch.argwhere(v > 0.5), "unique_consecutive": lambda: torch.unique_consecutive(iv),
    "max_item": lambda: v.max().item(), "allclose": lambda: torch.allclose(v, v + 0), "isclose": lambda: torch.isclose(v, v),
    "cross_entropy_ignore": lambda: torch.nn.functional.cross_entropy(torch.randn(4, 3, device="cuda"), torch.tensor([0, -100, 1, 2], device="cuda")),
    "ctc_loss": lambda: None, "interpolate": lambda: torch.nn.functional.interpolate(a[None, None], scale_factor=2),
    "repeat_interleave_int": lambda: torch.repeat_interleave(v, 2), "tensor_split_cpu": lambda: torch.tensor_split(v, cpu_idx),
    "split_sizes_list": lambda: torch.split(v, [32, 32]), "narrow_tensor_start": lambda: v.narrow(0, torch.tensor(2), 3),
    "setitem_mask_scalar": lambda: v.clone().__setitem__(v > 0.5, 0.0), "setitem_mask_tensor": lambda: v.clone().__setitem__(v > 0.5, v[:1]),
    "dropout": lambda: torch.nn.functional.dropout(v, 0.5), "normal_": lambda: v.clone().normal_(),
}
res = {}
for k, fn in cases.items():
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fn()
        res[k] = sum("synchronizing CUDA operation" in str(m.message) for m in w)
    except Exception as e:
        res[k] = f"EXC {type(e).__name__}: {e}"[:150]
    finally:
        torch.cuda.set_sync_debug_mode(0)
if os.environ.get("FACTS_OUT"):
    open(os.environ["FACTS_OUT"], "w").write(json.dumps(res))
print(json.dumps(res))
