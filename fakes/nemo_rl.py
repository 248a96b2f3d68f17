"""Fake of NeMo-RL's GRPO refit path (Megatron training backend, colocated or broadcast refit) and its
``token_mult_prob_error`` metric, written as ordinary torch code.

A GRPO step on every rank, in NeMo-RL's order (FACTS.md "NeMo-RL refit and the metric"):

1. refit: ``MegatronModelBridge.export_hf_weights`` (conversion tasks built once, reused). Colocated: the
   exported HF tensors are grouped by a byte budget, each group packed per dtype into one flat buffer with
   ``copy_`` and handed to the inference engine (CUDA IPC in the real stack; here the engine is an object on
   the same simulated GPU that reads the buffer on ITS OWN stream). Newer NeMo-RL calls
   ``torch.cuda.current_stream().synchronize()`` before handing a buffer over (fault ``ipc_pack_no_sync``
   removes it). Broadcast (non-colocated): world rank 0 broadcasts every exported tensor.
   Before the export the training side finishes the overlapped DP param all-gather
   (``model.finish_param_sync()``; fault ``refit_during_param_gather`` skips it).
2. generation-side logprobs from the refitted weights (single-device forward, ``logprobs``);
3. training-side logprobs from the training weights (the no-parallelism reference of this step; Megatron's
   forward pre-hook ``finish_param_sync`` runs here);
4. optimizer step (``DistributedOptimizer``: may start the async DP param all-gather).

``token_mult_prob_error`` is NeMo-RL's: ``masked_mean(exp(|gen - train| * mask), mask)`` with
``masked_mean(v, m) = sum(v * m) / (sum(m) + 1e-8)``; 1.0 when both sides agree, NaN if any logprob is NaN.
"""
from __future__ import annotations

import functools
import hashlib
import math
import os
from dataclasses import replace
from typing import Dict, List, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import megatron_bridge as mb
from . import megatron_core as mc

__all__ = [
    "token_mult_prob_error", "masked_mean", "logprobs", "rollout_batch", "InferenceEngine", "refit_colocated",
    "refit_broadcast", "grpo_refit_loop", "state_dict_digest", "compare_state_dicts", "reference_hf_state_dict",
]

reference_hf_state_dict = mc.reference_hf_state_dict


# ============================================================================ metric
def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim=None, global_normalization_factor=None):
    """NeMo-RL ``nemo_rl.algorithms.utils.masked_mean``."""
    norm = torch.sum(mask, dim=dim) if global_normalization_factor is None else global_normalization_factor
    return torch.sum(values * mask, dim=dim) / (norm + 1e-8)


def token_mult_prob_error(gen_logprobs: torch.Tensor, train_logprobs: torch.Tensor, mask: torch.Tensor,
                          global_valid_toks=None) -> torch.Tensor:
    """``sum(exp(|gen - train| * mask) * mask) / valid tokens`` (NeMo-RL ClippedPGLossFn's metric)."""
    mask = mask.to(gen_logprobs.dtype)
    lp_error = torch.abs(gen_logprobs - train_logprobs)
    return masked_mean(torch.exp(lp_error * mask), mask, global_normalization_factor=global_valid_toks)


# ============================================================================ single-device forward
def _rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rotary(x, base):
    # x: [B, S, nh, d]; HF Llama rotate_half convention
    b, s, nh, d = x.shape
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = torch.arange(s, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def logprobs(hf_state_dict: Dict[str, torch.Tensor], config, tokens: torch.Tensor) -> torch.Tensor:
    """Token logprobs [B, S-1] of `tokens` [B, S] under the HF Llama / Qwen-MoE weights (fp32, one device).

    RMSNorm, GQA attention with a causal mask and (optional) rotary embeddings, gated SiLU MLP or a top-k MoE.
    """
    cfg = config
    sd = {k: v.float() for k, v in hf_state_dict.items()}
    heads, groups, kv = cfg.num_attention_heads, cfg.num_query_groups, cfg.kv_channels
    eps = cfg.layernorm_epsilon
    b, s = tokens.shape
    x = sd["model.embed_tokens.weight"][tokens]
    causal = torch.full((s, s), float("-inf")).triu(1)
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        h = _rms_norm(x, sd[p + "input_layernorm.weight"], eps)
        q = (h @ sd[p + "self_attn.q_proj.weight"].t()).view(b, s, heads, kv)
        k = (h @ sd[p + "self_attn.k_proj.weight"].t()).view(b, s, groups, kv)
        v = (h @ sd[p + "self_attn.v_proj.weight"].t()).view(b, s, groups, kv)
        if cfg.use_rotary:
            q, k = _rotary(q, cfg.rotary_base), _rotary(k, cfg.rotary_base)
        rep = heads // groups
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        att = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(kv) + causal
        o = torch.einsum("bhqk,bkhd->bqhd", att.softmax(-1), v).reshape(b, s, heads * kv)
        x = x + o @ sd[p + "self_attn.o_proj.weight"].t()
        h = _rms_norm(x, sd[p + "post_attention_layernorm.weight"], eps)
        if cfg.is_moe:
            logits = h @ sd[p + "mlp.gate.weight"].t()
            top, idx = logits.topk(cfg.moe_router_topk, dim=-1)
            probs = top.softmax(-1)
            y = torch.zeros_like(h)
            for e in range(cfg.num_moe_experts):
                q_ = p + f"mlp.experts.{e}."
                out = (F.silu(h @ sd[q_ + "gate_proj.weight"].t()) * (h @ sd[q_ + "up_proj.weight"].t())) \
                    @ sd[q_ + "down_proj.weight"].t()
                wgt = (probs * (idx == e)).sum(-1, keepdim=True)
                y = y + wgt * out
            x = x + y
        else:
            x = x + (F.silu(h @ sd[p + "mlp.gate_proj.weight"].t()) * (h @ sd[p + "mlp.up_proj.weight"].t())) \
                @ sd[p + "mlp.down_proj.weight"].t()
    x = _rms_norm(x, sd["model.norm.weight"], eps)
    lp = torch.log_softmax(x @ sd["lm_head.weight"].t(), dim=-1)
    return lp[:, :-1].gather(-1, tokens[:, 1:, None])[..., 0]


def rollout_batch(config, seed: int, step: int, batch: int = 2, seq_len: int = 16, prompt_len: int = 4):
    """Deterministic (tokens [B, S], token mask [B, S-1]) of a GRPO step: the mask keeps generated tokens."""
    g = torch.Generator().manual_seed(mc._seed_of(seed, step, "rollout"))
    tokens = torch.randint(0, config.vocab_size, (batch, seq_len), generator=g)
    mask = torch.ones(batch, seq_len - 1)
    mask[:, : prompt_len - 1] = 0
    return tokens, mask


@functools.lru_cache(maxsize=64)
def _train_logprobs(cfg, seed, step, lr, batch, seq_len):
    tokens, _ = rollout_batch(cfg, seed, step, batch, seq_len)
    return logprobs(mc.reference_hf_state_dict(cfg, seed, step, lr), cfg, tokens)


# ============================================================================ comparison helpers
def state_dict_digest(sd: Dict[str, torch.Tensor]) -> str:
    """sha256 over names, dtypes, shapes and bytes (CPU tensors)."""
    h = hashlib.sha256()
    for k in sorted(sd):
        t = sd[k].detach().contiguous().cpu()
        h.update(f"{k}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def bit_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
            and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


def compare_state_dicts(got: Dict[str, torch.Tensor], ref: Dict[str, torch.Tensor]) -> List[str]:
    """Names that are missing, unexpected or not bit-identical (sorted)."""
    bad = set(ref) ^ set(got)
    for k in set(ref) & set(got):
        if not bit_equal(got[k].cpu(), ref[k]):
            bad.add(k)
    return sorted(bad)


# ============================================================================ refit
class InferenceEngine:
    """The inference side of a refit (a vLLM worker on the same GPU): reads handed-over buffers on its own
    stream and keeps a copy of every weight, as its ``load_weights`` does."""

    def __init__(self):
        self.stream = torch.cuda.Stream()
        self.weights: Dict[str, torch.Tensor] = {}

    def load_packed(self, packed: Dict[torch.dtype, torch.Tensor], layout) -> None:
        """Unpack views of the packed buffers (IPC handles) and copy them into the engine's weights."""
        with torch.cuda.stream(self.stream):
            for name, dtype, off, n, shape in layout:
                self.weights[name] = packed[dtype][off:off + n].view(shape).clone()
        self.stream.synchronize()  # the engine finishes loading before it acknowledges the handles

    def state_dict_cpu(self) -> Dict[str, torch.Tensor]:
        with torch.cuda.stream(self.stream):
            out = {k: v.cpu() for k, v in self.weights.items()}
        self.weights = {}
        return out


def _flush_group(group, engine, faults, device):
    by_dtype: Dict[torch.dtype, list] = {}
    for name, t in group:
        by_dtype.setdefault(t.dtype, []).append((name, t))
    packed, layout = {}, []
    for dtype, items in by_dtype.items():
        buf = torch.empty(sum(t.numel() for _, t in items), dtype=dtype, device=device)
        off = 0
        for name, t in items:
            n = t.numel()
            buf[off:off + n].copy_(t.reshape(-1))
            layout.append((name, dtype, off, n, tuple(t.shape)))
            off += n
        packed[dtype] = buf
    if "ipc_pack_no_sync" not in faults:
        torch.cuda.current_stream().synchronize()
    engine.load_packed(packed, layout)


def refit_colocated(bridge, model, engine: InferenceEngine, faults=frozenset(),
                    group_bytes: int = 1 << 20) -> Dict[str, torch.Tensor]:
    """Export, pack per dtype per group, hand over; returns the engine's weights on the CPU."""
    device = mc.current_device()
    group, used = [], 0
    for name, t in bridge.export_hf_weights(model):
        group.append((name, t))
        used += t.numel() * t.element_size()
        if used >= group_bytes:
            _flush_group(group, engine, faults, device)
            group, used = [], 0
    if group:
        _flush_group(group, engine, faults, device)
    return engine.state_dict_cpu()


def refit_broadcast(bridge, model, engine: InferenceEngine, faults=frozenset(), src: int = 0):
    """Non-colocated: world rank `src` broadcasts every exported weight to the inference ranks."""
    rank = dist.get_rank()
    for name, t in bridge.export_hf_weights(model):
        buf = t.contiguous() if rank == src else torch.empty(tuple(t.shape), dtype=t.dtype, device=t.device)
        dist.broadcast(buf, src=src)
        engine.weights[name] = buf
    out = {k: v.cpu() for k, v in engine.weights.items()}
    engine.weights = {}
    return out


# ============================================================================ the GRPO loop
def grpo_refit_loop(config, *, tp: int = 1, pp: int = 1, ep: int = 1, etp: Optional[int] = None, steps: int = 5,
                    seed: int = 0, faults=frozenset(), refit: str = "colocated", overlap_param_gather: bool = True,
                    lr: float = 1.0, group_bytes: int = 1 << 20, batch: int = 2, seq_len: int = 16,
                    compute_metric: bool = True, return_weights: bool = False):
    """Run `steps` GRPO steps (refit -> gen logprobs -> train logprobs -> optimizer step) on this rank.

    Returns a list of per-step dicts: ``step``, ``token_mult_prob_error`` (float), ``mismatched`` (HF names
    whose refitted weight is not bit-identical to ``reference_hf_state_dict`` of that step), ``nan_weights``
    (names holding a NaN), ``digest`` (of the refitted state dict), and ``weights`` if `return_weights`.
    """
    faults = mc.check_faults(faults)
    if refit not in ("colocated", "broadcast"):
        raise ValueError(f"refit must be 'colocated' or 'broadcast', got {refit!r}")
    if "LOCAL_RANK" in os.environ:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if not dist.is_initialized():
        dist.init_process_group("nccl")
    cfg = replace(config, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                  expert_model_parallel_size=ep, expert_tensor_parallel_size=etp or tp)
    mc.initialize_model_parallel(tp, pp, expert_model_parallel_size=ep, expert_tensor_parallel_size=etp)
    try:
        model = mc.GPTModel(cfg, seed=seed, faults=faults, overlap_param_gather=overlap_param_gather)
        bridge = mb.LlamaBridge(faults=faults)
        opt = mc.DistributedOptimizer(model, lr=lr)
        engine = InferenceEngine()
        out = []
        for step in range(steps):
            if "refit_during_param_gather" not in faults:
                model.finish_param_sync()
            if refit == "colocated":
                weights = refit_colocated(bridge, model, engine, faults, group_bytes)
            else:
                weights = refit_broadcast(bridge, model, engine, faults)
            ref = mc.reference_hf_state_dict(cfg, seed, step, lr)
            rec = {"step": step, "mismatched": compare_state_dicts(weights, ref),
                   "nan_weights": sorted(k for k, v in weights.items() if v.is_floating_point() and
                                         bool(torch.isnan(v).any())),
                   "digest": state_dict_digest(weights)}
            if compute_metric:
                tokens, mask = rollout_batch(cfg, seed, step, batch, seq_len)
                gen_lp = logprobs(weights, cfg, tokens)
                model.forward_pre_hook()  # the training forward starts by finishing the param all-gather
                train_lp = _train_logprobs(cfg.without_parallelism(), seed, step, float(lr), batch, seq_len)
                rec["token_mult_prob_error"] = float(token_mult_prob_error(gen_lp, train_lp, mask))
            if return_weights:
                rec["weights"] = weights
            out.append(rec)
            opt.step(step)
        model.finish_param_sync()
        return out
    finally:
        mc.destroy_model_parallel()
