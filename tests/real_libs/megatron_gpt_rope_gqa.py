"""Real megatron-core, unmodified: GPTModel, local spec (no TE), TP=2 (argv dp2: TP2 x DP2, world 4): RoPE, GQA (4 heads, 2 query
groups), SwiGLU, RMSNorm, no biases, an explicit attention mask (causal | padding per sample), untied output layer,
DDP with overlap_grad_reduce, SGD-momentum 2 steps. Losses, main_grads and params vs a plain-torch GPT."""
import math, os, sys, warnings
warnings.filterwarnings("ignore")
import torch, torch.distributed as dist, torch.nn.functional as F
from megatron.core import parallel_state, tensor_parallel
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.transformer import TransformerConfig

TP, L, H, NH, G, FFN, V, S, B = 2, 2, 16, 4, 2, 24, 32, 8, 4
HN = H // NH
LR = 1e-2
DP2 = "dp2" in sys.argv
LENS = [8, 5, 3, 7]   # per-sample valid lengths (padding after)

def full_weights():
    g = torch.Generator().manual_seed(0)
    w = {"embedding.word_embeddings.weight": torch.randn(V, H, generator=g) * 0.3,
         "output_layer.weight": torch.randn(V, H, generator=g) * 0.3,
         "decoder.final_layernorm.weight": 1 + 0.1 * torch.randn(H, generator=g)}
    for i in range(L):
        p = f"decoder.layers.{i}."
        w[p + "self_attention.linear_qkv.weight"] = torch.randn((NH + 2 * G) * HN, H, generator=g) * 0.3
        w[p + "self_attention.linear_proj.weight"] = torch.randn(H, H, generator=g) * 0.3
        w[p + "mlp.linear_fc1.weight"] = torch.randn(2 * FFN, H, generator=g) * 0.3    # [gate; up]
        w[p + "mlp.linear_fc2.weight"] = torch.randn(H, FFN, generator=g) * 0.3
        w[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(H, generator=g)
        w[p + "pre_mlp_layernorm.weight"] = 1 + 0.1 * torch.randn(H, generator=g)
    return w

def shard(name, full, r):
    if name.endswith("linear_fc1.weight"):
        gte, up = full.chunk(2, 0); return torch.cat([gte.chunk(TP, 0)[r], up.chunk(TP, 0)[r]], 0)
    if name.endswith(("linear_qkv.weight", "word_embeddings.weight", "output_layer.weight")): return full.chunk(TP, 0)[r]
    if name.endswith(("linear_proj.weight", "linear_fc2.weight")): return full.chunk(TP, 1)[r]
    return full

def rope(t):  # t [s, b, n, hn]
    inv = 1.0 / (10000 ** (torch.arange(0, HN, 2, dtype=torch.float32) / HN))
    f = torch.outer(torch.arange(S, dtype=torch.float32), inv); emb = torch.cat([f, f], -1)[:, None, None, :]
    x1, x2 = t.chunk(2, -1)
    return t * emb.cos() + torch.cat([-x2, x1], -1) * emb.sin()

def rms(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

def mask():
    causal = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    pad = torch.arange(S)[None, :] >= torch.tensor(LENS)[:, None]          # [b, s] key is padding
    return (causal[None] | pad[:, None, :])[:, None]                        # [b,1,s,s] True = masked

def reference_loss(w, ids, labels, lmask):
    x = w["embedding.word_embeddings.weight"][ids].transpose(0, 1)
    m = mask()
    for i in range(L):
        p = f"decoder.layers.{i}."
        ln = rms(x, w[p + "input_layernorm.weight"])
        qkv = F.linear(ln, w[p + "self_attention.linear_qkv.weight"]).view(S, B, G, (NH // G + 2) * HN)
        q, k, v = qkv.split([NH // G * HN, HN, HN], -1)
        q = q.reshape(S, B, NH, HN); k = k.repeat_interleave(NH // G, 2); v = v.repeat_interleave(NH // G, 2)
        q, k = rope(q), rope(k)
        sc = torch.einsum("sbnd,tbnd->bnst", q, k) / math.sqrt(HN)
        pr = sc.masked_fill(m, -10000.0).softmax(-1)
        ctx = torch.einsum("bnst,tbnd->sbnd", pr, v).reshape(S, B, H)
        x = x + F.linear(ctx, w[p + "self_attention.linear_proj.weight"])
        ln = rms(x, w[p + "pre_mlp_layernorm.weight"])
        gte, up = F.linear(ln, w[p + "mlp.linear_fc1.weight"]).chunk(2, -1)
        x = x + F.linear(F.silu(gte) * up, w[p + "mlp.linear_fc2.weight"])
    x = rms(x, w["decoder.final_layernorm.weight"])
    logits = F.linear(x, w["output_layer.weight"]).transpose(0, 1)
    ce = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction="none").view(B, S)
    return (ce * lmask).sum() / lmask.sum()

def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"])); dist.init_process_group("nccl")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=TP)
    tensor_parallel.model_parallel_cuda_manual_seed(123)
    r = parallel_state.get_tensor_model_parallel_rank(); dp = parallel_state.get_data_parallel_rank()
    DPn = parallel_state.get_data_parallel_world_size()
    cfg = TransformerConfig(num_layers=L, hidden_size=H, ffn_hidden_size=FFN, num_attention_heads=NH, num_query_groups=G,
                            tensor_model_parallel_size=TP, use_cpu_initialization=True, hidden_dropout=0.0,
                            attention_dropout=0.0, add_bias_linear=False, gated_linear_unit=True, activation_func=F.silu,
                            normalization="RMSNorm", layernorm_epsilon=1e-5)
    model = GPTModel(cfg, get_gpt_layer_local_spec(normalization="RMSNorm"), vocab_size=V, max_sequence_length=S,
                     position_embedding_type="rope", share_embeddings_and_output_weights=False).cuda()
    w = full_weights()
    names = sorted(n for n, _ in model.named_parameters())
    assert sorted(w) == names, (sorted(w), names)
    with torch.no_grad():
        for n, p in model.named_parameters(): p.copy_(shard(n, w[n], r))
    model = DistributedDataParallel(config=cfg, module=model, ddp_config=DistributedDataParallelConfig(overlap_grad_reduce=True, bucket_size=500))
    cfg.finalize_model_grads_func = finalize_model_grads
    opt = get_megatron_optimizer(OptimizerConfig(optimizer="sgd", lr=LR, sgd_momentum=0.9, weight_decay=0.0, clip_grad=0.0), [model])
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (B, S), generator=g); labels = torch.randint(0, V, (B, S), generator=g)
    lmask = (torch.arange(S)[None] < torch.tensor(LENS)[:, None]).float()
    pos = torch.arange(S).unsqueeze(0).expand(B, S)
    ref = {n: t.clone().requires_grad_(True) for n, t in w.items()}
    ref_opt = torch.optim.SGD(list(ref.values()), lr=LR, momentum=0.9, foreach=False)
    bs = slice(dp * (B // DPn), (dp + 1) * (B // DPn))
    for step in range(2):
        model.zero_grad_buffer(); opt.zero_grad()
        ce = model(ids[bs].cuda(), pos[bs].cuda(), mask()[bs].cuda(), labels=labels[bs].cuda())    # [b, s]
        lm = lmask[bs].cuda()
        # global mean over valid tokens, averaged across DP as Megatron's DDP does (grads / DP)
        loss = (ce * lm).sum() / lmask.sum() * DPn
        loss.backward(); finalize_model_grads([model])
        ref_opt.zero_grad(); rl = reference_loss(ref, ids, labels, lmask); rl.backward()
        tot = loss.detach() / DPn; dist.all_reduce(tot, group=parallel_state.get_data_parallel_group())
        print(f"RANK {dist.get_rank()} step {step} loss {tot.item():.7f} ref {rl.item():.7f}", flush=True)
        assert abs(tot.item() - rl.item()) < 1e-5
        for n, p in model.module.named_parameters():
            exp = shard(n, ref[n].grad, r); got = p.main_grad.cpu()
            assert torch.allclose(got, exp, atol=1e-5, rtol=1e-4), (step, n, (got - exp).abs().max())
        ok, _, _ = opt.step(); assert ok; ref_opt.step()
    for n, p in model.module.named_parameters():
        exp = shard(n, ref[n].detach(), r)
        assert torch.allclose(p.detach().cpu(), exp, atol=1e-5), (n, (p.detach().cpu() - exp).abs().max())
    print(f"RANK {dist.get_rank()} OK", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
