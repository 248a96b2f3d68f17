"""Megatron-Core 0.16.1's all-to-all MoE token dispatcher (as w04: EP=2, 4 experts, top-2) with a debug log
added the way a user adds one: right after `_maybe_dtoh_and_synchronize` has issued the non_blocking D2H copies
of the token counts (at "before_permutation_1"), the hook logs the per-rank token counts from the numpy split
sizes, before the dispatcher's own `d2h_event.synchronize()` at the sync point ("before_ep_alltoall"). The
dispatcher itself is unchanged and still waits before it uses the splits, so the MoE's values are right (checked
as in w04); only the log reads early.

EXPECTED: hazard
KINDS: host-read
WORLD_SIZE: 2
MODELLED ON: megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize
(0.16.1 lines 862-900: the D2H copies on `cuda_dtoh_stream` into pinned memory, `.numpy()`, the event, and
`self.d2h_event.synchronize()` only at `self.cuda_sync_point`), `self.input_splits` / `self.output_splits`.
REASON: a non_blocking device-to-host copy returns before it has run (its CPU output is pinned); the host may read
it only after waiting for it (https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html). The numpy array
shares the pinned bytes, so the log's `int(splits.sum())` is the host read; the dispatcher's own later read,
after the event's synchronize, is clean (w04). With the log's read the logged counts can be garbage (simdist's
schedules: poison) while the layer's outputs are not.
"""
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

import megatron.core.transformer.moe.moe_utils as moe_utils
from megatron.core import parallel_state, tensor_parallel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.spec_utils import build_module

from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher

if not hasattr(moe_utils, "te_general_gemm"):
    moe_utils.te_general_gemm = None          # what a TE-less import should have bound (notes w5)

_original = MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize


LOG = []


def _with_a_log(self, point, tokens_per_expert=None):
    out = _original(self, point, tokens_per_expert)
    if point == self.cuda_dtoh_point and point != self.cuda_sync_point:
        # BUG: the log reads the counts the D2H copies are still writing (the wait comes at the sync point)
        LOG.append((int(self.input_splits.sum()), int(self.output_splits.sum())))
    return out


MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize = _with_a_log

EP, E, K, H, FFN, S, B = 2, 4, 2, 8, 16, 6, 2
LOCAL = E // EP


def full_weights():
    g = torch.Generator().manual_seed(0)
    w = {"router.weight": torch.randn(E, H, generator=g)}
    for e in range(E):
        w[f"fc1.{e}"] = torch.randn(FFN, H, generator=g) * 0.3
        w[f"fc2.{e}"] = torch.randn(H, FFN, generator=g) * 0.3
    return w


def tokens(step, rank):
    g = torch.Generator().manual_seed(100 + 10 * step + rank)
    return torch.randn(S, B, H, generator=g), torch.randn(S, B, H, generator=g)


def reference_moe(w, x):
    """Top-k over the router logits, softmax over the chosen k (moe_utils.topk_routing_with_score_function,
    use_pre_softmax=False), each token's output = sum of prob * fc2(gelu(fc1(x)))."""
    flat = x.reshape(-1, H)
    logits = flat @ w["router.weight"].t()
    top, idx = torch.topk(logits, K, dim=1)
    probs = torch.softmax(top, dim=-1)
    out = torch.zeros_like(flat)
    for e in range(E):
        y = F.linear(F.gelu(F.linear(flat, w[f"fc1.{e}"])), w[f"fc2.{e}"])
        p = (probs * (idx == e)).sum(-1, keepdim=True)
        out = out + p * y
    return out.reshape(x.shape)


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    parallel_state.initialize_model_parallel(expert_model_parallel_size=EP)
    tensor_parallel.model_parallel_cuda_manual_seed(123)
    rank = dist.get_rank()
    ep_rank = parallel_state.get_expert_model_parallel_rank()
    config = TransformerConfig(num_layers=1, hidden_size=H, ffn_hidden_size=FFN, num_attention_heads=1,
                               num_moe_experts=E, moe_router_topk=K, moe_token_dispatcher_type="alltoall",
                               expert_model_parallel_size=EP, add_bias_linear=False, use_cpu_initialization=True,
                               moe_aux_loss_coeff=0.0, hidden_dropout=0.0, attention_dropout=0.0)
    moe = build_module(get_gpt_layer_local_spec(num_experts=E).submodules.mlp, config=config).cuda()
    w = full_weights()
    names = {"router.weight": "router.weight"}
    for j in range(LOCAL):
        e = ep_rank * LOCAL + j
        names[f"experts.local_experts.{j}.linear_fc1.weight"] = f"fc1.{e}"
        names[f"experts.local_experts.{j}.linear_fc2.weight"] = f"fc2.{e}"
    assert sorted(names) == sorted(n for n, _ in moe.named_parameters())
    with torch.no_grad():
        for n, p in moe.named_parameters():
            p.copy_(w[names[n]])

    ref = {n: t.clone().requires_grad_(True) for n, t in w.items()}
    for step in range(2):
        moe.zero_grad()
        for t in ref.values():
            t.grad = None
        x, dy = tokens(step, rank)
        xd = x.cuda().requires_grad_(True)
        out, bias = moe(xd)
        assert bias is None
        (out * dy.cuda()).sum().backward()
        # the reference: both ranks' tokens through the full MoE (experts see every rank's tokens)
        ref_x = [tokens(step, r)[0].requires_grad_(True) for r in range(EP)]
        ref_out = [reference_moe(ref, xr) for xr in ref_x]
        mine = ref_out[rank]
        assert torch.allclose(out.detach().cpu(), mine.detach(), atol=1e-5), (step, (out.cpu() - mine).abs().max())
        router_grad = torch.autograd.grad((mine * dy).sum(), ref["router.weight"], retain_graph=True)[0]
        sum(((o * tokens(step, r)[1]).sum() for r, o in enumerate(ref_out))).backward()
        assert torch.allclose(xd.grad.cpu(), ref_x[rank].grad, atol=1e-5), (step, "input grad")
        for n, p in moe.named_parameters():
            exp = router_grad if n == "router.weight" else ref[names[n]].grad
            assert torch.allclose(p.grad.cpu(), exp, atol=1e-5), (step, n, (p.grad.cpu() - exp).abs().max())
    assert len(LOG) == 2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
