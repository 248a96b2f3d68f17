"""Megatron-Core 0.16.1 MoELayer with the all-to-all token dispatcher (`moe_token_dispatcher_type="alltoall"`),
expert parallelism 2 (4 experts, 2 per rank, top-2 routing, dropless), SequentialMLP experts, two forward and
backward passes with different tokens on each rank: the router's top-k, the permutation, the token-count
all-to-all and its D2H copies on the dispatcher's side stream (`cuda_dtoh_stream`), the host sync at the sync
point, the uneven `all_to_all_single` of tokens (split sizes as numpy arrays), the experts, the reverse
all-to-all and the unpermute, and their backward. Outputs, input gradients, router gradients (per rank) and
expert gradients (summed over both ranks' tokens) checked against a plain-torch MoE in one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: megatron/core/transformer/moe/token_dispatcher.py (MoEAlltoAllTokenDispatcher: preprocess,
`_maybe_dtoh_and_synchronize` with `cuda_dtoh_stream`, `record_stream`, `d2h_event.synchronize()`, token_dispatch /
token_combine through tensor_parallel.mappings.all_to_all), moe/moe_layer.py, moe/router.py (TopKRouter),
moe/moe_utils.py (permute: masked_select; unpermute: scatter_add), moe/experts.py (SequentialMLP).
Megatron-Core 0.16.1 without TransformerEngine leaves `moe_utils.te_general_gemm` unbound while
router_gating_linear tests it (NameError on any machine without TE, notes w5): the program binds it to None.
REASON: the dispatcher's side stream waits the current stream before its D2H copies and records the device
tensors on itself before they are dropped (record_stream), the host synchronizes the copies' event before the
numpy split sizes are read, and the token all-to-alls are synchronous (async_op=False) inside autograd Functions,
so every value is the unsharded MoE's. simdist reported a host-read at `.numpy()` and a reuse-after-free at
permute's masked_select until notes w3/w4, and crashed on the numpy split sizes until w2.
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

if not hasattr(moe_utils, "te_general_gemm"):
    moe_utils.te_general_gemm = None          # what a TE-less import should have bound (notes w5)

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
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
