"""Fake of NeMo-RL's GRPO refit path (Megatron training backend; colocated IPC, collective or packed-collective
refit) and its ``token_mult_prob_error`` metric, written as ordinary torch code.

The loop follows NeMo-RL 94a3d49 (2025-09-12, the incident's version; ``grpo.py`` 388, 433-502, 615-619, 758):
``prepare_refit_info`` exports once at set-up; then per GRPO step, on every rank:

1. refit (right after the previous step's optimizer step). Colocated: ``offload_before_refit`` (optimizer
   state to the CPU, ``empty_cache``), then per group of conversion tasks (a byte budget)
   ``get_weights_ipc_handles``: export, pack per dtype with ``copy_`` (from 32 tensors on), hand over. The
   hand-off is CUDA IPC: torch's ``reduce_tensor`` records an event on the producer's current stream and the
   consumer's ``rebuild_cuda_tensor`` waits for it; the inference engine (an object on the same simulated GPU)
   loads on ITS OWN stream and synchronizes it when it releases the handles (torch's IPC deleter). There is no
   explicit synchronize at this version (NeMo-RL 3a69c2168 added one: fix ``ipc_synchronize``; fault
   ``ipc_pack_no_sync`` drops the IPC event). Collective: train rank 0 broadcasts every weight. Packed
   collective (NeMo-RL v0.4.0 ``packed_tensor.py``): round-robin side streams, fault
   ``packed_broadcast_unjoined`` drops the final join.
2. generation reads the engine's weights; they are compared with the no-parallelism reference, and the metric
   is computed (single-device forward) when they differ;
3. ``get_logprobs``: the forward pre-hook finishes the DP param all-gather;
4. ``train``: forward pre-hook, optimizer step (``DistributedOptimizer``: with ``overlap_param_gather`` the
   DP param all-gather is NOT dispatched in the step), ``update_successful`` all-reduced and read (``.item()``).

Because of 4 and 1, the real order exports the other DP ranks' parameter slices from before the last optimizer
step (no race: the gather has not run). ``grpo_refit_loop``'s default adds the fix ``param_sync_before_refit``
so that tests of the conversion itself see a bit-exact refit; ``fixes=()`` is the real code.

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

from . import cuda
from . import megatron_bridge as mb
from . import megatron_core as mc

__all__ = [
    "token_mult_prob_error", "masked_mean", "logprobs", "rollout_batch", "InferenceEngine", "refit_colocated",
    "refit_broadcast", "refit_packed_broadcast", "grpo_refit_loop", "DEFAULT_FIXES", "state_dict_digest",
    "compare_state_dicts", "reference_hf_state_dict",
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
    """The inference side of a refit (a vLLM worker on the same GPU). It owns its weights from start-up (vLLM
    loads the HF checkpoint: the step-0 reference) in one flat buffer per dtype, reads handed-over tensors on
    ITS OWN stream and copies them into its weights, as ``load_weights`` does."""

    def __init__(self, initial: Dict[str, torch.Tensor]):
        self.stream = cuda.Stream()
        self.params: Dict[str, torch.Tensor] = {}
        self._flat: Dict[torch.dtype, torch.Tensor] = {}
        dev = mc.current_device()
        for dtype, (flat, layout) in _flat_by_dtype(initial).items():
            buf = flat.to(dev)
            self._flat[dtype] = buf
            for name, off, n, shape in layout:
                self.params[name] = buf[off:off + n].view(shape)
        self._layout = {dtype: layout for dtype, (_, layout) in _flat_by_dtype(initial).items()}

    def update_weights_from_ipc_handles(self, weights, event) -> None:
        """``update_weights_from_local_ipc_handles`` (NeMo-RL 94a3d49 vllm_backend.py 90-170): rebuild the
        tensors from their handles (``rebuild_cuda_tensor``: the engine's stream waits for the IPC event the
        producer recorded when it shared them, StorageSharing.cpp ``THPStorage_newSharedCuda``), then
        ``load_weights`` copies them into the engine's parameters on the engine's stream. Releasing the rebuilt
        tensors runs torch's IPC deleter, which synchronizes the consumer's stream before the producer may
        reuse the memory."""
        with cuda.stream(self.stream):
            if event is not None:
                self.stream.wait_event(event)
            for name, t in weights:
                self.params[name].copy_(t)
        self.stream.synchronize()

    def load(self, weights) -> None:
        """Copy (name, tensor) pairs into the engine's weights on the CURRENT stream (collective refit)."""
        for name, t in weights:
            self.params[name].copy_(t)

    def state_dict_cpu(self, stream=None) -> Dict[str, torch.Tensor]:
        """What generation reads: the engine's weights, copied to the host on `stream` (the stream its process
        loaded them on: the engine's own stream for IPC, the current stream for a collective refit)."""
        out = {}
        with cuda.stream(stream or self.stream):
            for dtype, buf in self._flat.items():
                host = buf.cpu() if cuda.available() else buf.clone()
                for name, off, n, shape in self._layout[dtype]:
                    out[name] = host[off:off + n].view(shape)
        return out


def _flat_by_dtype(sd: Dict[str, torch.Tensor]):
    """{dtype: (flat CPU tensor, [(name, offset, numel, shape)])} in the state dict's order."""
    key = id(sd)
    hit = _FLAT_CACHE.get(key)
    if hit is not None and hit[0] is sd:
        return hit[1]
    groups: Dict[torch.dtype, list] = {}
    for name, t in sd.items():
        groups.setdefault(t.dtype, []).append((name, t))
    out = {}
    for dtype, items in groups.items():
        layout, off = [], 0
        for name, t in items:
            layout.append((name, off, t.numel(), tuple(t.shape)))
            off += t.numel()
        out[dtype] = (torch.cat([t.reshape(-1) for _, t in items]), layout)
    _FLAT_CACHE[key] = (sd, out)
    return out


_FLAT_CACHE: Dict[int, tuple] = {}


def _ipc_groups(bridge, model, group_bytes: int) -> List[List]:
    """``prepare_weights_for_ipc``: the conversion tasks in order, grouped by a byte budget (NeMo-RL sizes each
    task as the full HF tensor in the model dtype: ``calculate_size_in_bytes``)."""
    tasks = bridge.build_conversion_tasks(model)
    cfg = model.config.without_parallelism()
    groups, cur, used = [], [], 0
    for task in tasks:
        size = math.prod(mc.canonical_shape(cfg, task.param_name)) * 2
        cur.append(task)
        used += size
        if used >= group_bytes:
            groups.append(cur)
            cur, used = [], 0
    if cur:
        groups.append(cur)
    return groups


class _IpcProducer:
    """``get_weights_ipc_handles`` of NeMo-RL 94a3d49 (megatron_policy_worker.py 1589-1681)."""

    def __init__(self, faults, fixes, pack_threshold: int):
        self.faults, self.fixes, self.pack_threshold = faults, fixes, pack_threshold
        self.held = None

    def handles(self, bridge, model, tasks):
        self.held = None  # ``del self._held_gather_buffer`` (the consumer already released it)
        gathered = list(bridge.export_hf_weights(model, conversion_tasks=tasks))
        if len(gathered) >= self.pack_threshold:
            # pack per dtype into one buffer with copy_ (lines 1628-1662)
            sizes: Dict[torch.dtype, int] = {}
            for _, t in gathered:
                sizes[t.dtype] = sizes.get(t.dtype, 0) + t.numel()
            dev = gathered[0][1].device
            packed = {d: torch.empty(n, dtype=d, device=dev) for d, n in sizes.items()}
            offs: Dict[torch.dtype, int] = {d: 0 for d in sizes}
            weights = []
            for name, t in gathered:
                o, n = offs[t.dtype], t.numel()
                packed[t.dtype][o:o + n].copy_(t.detach().view(-1))
                weights.append((name, packed[t.dtype][o:o + n].view(t.shape)))
                offs[t.dtype] = o + n
            self.held = packed
        else:
            weights = gathered
            self.held = dict(gathered)
        if "ipc_synchronize" in self.fixes:  # NeMo-RL 3a69c2168 utils.py: "Synchronize before getting IPC handle"
            cuda.current_stream().synchronize()
        event = None
        if "ipc_pack_no_sync" not in self.faults:
            # reduce_tensor -> storage._share_cuda_(): CudaIPCSentData records an event on the producer's
            # current stream (CudaIPCTypes.cpp), which the consumer waits for when it rebuilds the tensor
            event = cuda.Event()
            event.record()
        return weights, event


def refit_colocated(bridge, model, engine: InferenceEngine, faults=frozenset(), group_bytes: int = 1 << 20,
                    fixes=frozenset(), pack_threshold: int = 32) -> None:
    """NeMo-RL 94a3d49 ``refit_policy_generation`` (colocated, grpo.py 433-502): per group of keys,
    ``get_weights_ipc_handles`` then the engine's ``update_weights_from_ipc_handles``."""
    producer = _IpcProducer(faults, fixes, pack_threshold)
    for tasks in _ipc_groups(bridge, model, group_bytes):
        weights, event = producer.handles(bridge, model, tasks)
        engine.update_weights_from_ipc_handles(weights, event)
    producer.held = None  # offload_after_refit: ``del self._held_gather_buffer``


def refit_broadcast(bridge, model, engine: InferenceEngine, faults=frozenset(), src: int = 0) -> None:
    """NeMo-RL 94a3d49 ``broadcast_weights_for_collective`` (megatron_policy_worker.py 1683-1692): every
    exported weight is broadcast from train rank `src` (here over the world group; every rank's engine plays an
    inference worker and receives into a fresh tensor, then loads it)."""
    rank = dist.get_rank()
    for name, t in bridge.export_hf_weights(model):
        buf = t.contiguous() if rank == src else torch.empty(tuple(t.shape), dtype=t.dtype, device=t.device)
        dist.broadcast(buf, src=src)
        engine.load([(name, buf)])


def refit_packed_broadcast(bridge, model, engine: InferenceEngine, faults=frozenset(), fixes=frozenset(),
                           src: int = 0, target_bytes: int = 1 << 19, num_buffers: int = 2) -> None:
    """NeMo-RL's packed non-colocated refit (``nemo_rl/utils/packed_tensor.py``, v0.4.0 39-95 / 98-205; from
    a777f2aa1, Oct 2025): tensors are packed round-robin into `num_buffers` buffers, each on its own side
    stream, which is synchronized only before its buffer is reused; the export itself runs inside the side
    stream's context and the side stream never waits on the caller's stream. Every rank runs the producer's
    loop (the export is collective over TP/PP); rank `src` sends each packed buffer, the others receive it and
    unpack it into their engine on the same side stream (the consumer). The final join of every side stream
    (``for s in streams: s.synchronize()``) arrived with 705340674 (Jul 2026): fault
    ``packed_broadcast_unjoined`` removes it, fix ``join_side_streams`` restores it."""
    rank = dist.get_rank()
    streams = [cuda.Stream() for _ in range(num_buffers)]
    it = iter(bridge.export_hf_weights(model))
    idx, done = 0, False
    while not done:
        idx = (idx + 1) % num_buffers
        streams[idx].synchronize()
        with cuda.stream(streams[idx]):
            names, parts, size = [], [], 0
            while size <= target_bytes:
                try:
                    name, t = next(it)
                except StopIteration:
                    done = True
                    break
                names.append((name, t.dtype, tuple(t.shape), t.numel() * t.element_size()))
                parts.append(t.contiguous().view(torch.uint8).view(-1))
                size += parts[-1].numel()
            if not parts:
                break
            packed = torch.cat(parts, dim=0)
            if rank != src:
                packed = torch.empty_like(packed)  # the consumer's fresh buffer (packed_tensor.py 176-178)
            dist.broadcast(packed, src=src)
            off, unpacked = 0, []
            for name, dtype, shape, nbytes in names:
                unpacked.append((name, packed[off:off + nbytes].view(dtype).view(shape)))
                off += nbytes
            engine.load(unpacked)
    if "packed_broadcast_unjoined" not in faults or "join_side_streams" in fixes:
        for s in streams:
            s.synchronize()


# ============================================================================ the GRPO loop
DEFAULT_FIXES = frozenset({"param_sync_before_refit"})


@functools.lru_cache(maxsize=256)
def _clean_metric(cfg, seed, step, lr, batch, seq_len):
    """token_mult_prob_error when the refitted weights are bit-identical to the reference (same computation)."""
    tokens, mask = rollout_batch(cfg, seed, step, batch, seq_len)
    lp = _train_logprobs(cfg, seed, step, lr, batch, seq_len)
    return float(token_mult_prob_error(lp, lp, mask))


def grpo_refit_loop(config, *, tp: int = 1, pp: int = 1, ep: int = 1, etp: Optional[int] = None, steps: int = 5,
                    seed: int = 0, faults=frozenset(), fixes=None, refit: str = "colocated",
                    overlap_param_gather: bool = True, overlap_param_gather_with_optimizer_step: bool = False,
                    lr: float = 1.0, group_bytes: int = 1 << 20, ipc_pack_threshold: int = 32, batch: int = 2,
                    seq_len: int = 16, compute_metric: bool = True, return_weights: bool = False,
                    prepare_refit_info: bool = True, digest: bool = True):
    """Run `steps` GRPO steps on this rank in NeMo-RL's order (grpo.py of 94a3d49, the incident's version):
    ``prepare_refit_info`` (one export at set-up, metadata only), then per step: refit (colocated:
    ``offload_before_refit``, IPC groups, ``offload_after_refit``) -> generation reads the engine's weights ->
    ``get_logprobs`` (forward pre-hook) -> ``prepare_for_training`` -> ``train`` (forward pre-hook, optimizer
    step, ``update_successful`` all-reduced and read with ``.item()``).

    `fixes` are ordering edges added on top of the real code (``mc.FIXES``). The default (None) is
    ``DEFAULT_FIXES`` = {``param_sync_before_refit``}, so that the refit is bit-exact for tests of the
    conversion itself, less that edge when the fault ``refit_during_param_gather`` asks for a refit during the
    gather. NeMo-RL does not have it (``fixes=()``): with the distributed optimizer, ``overlap_param_gather``
    and DP > 1 the refit after an optimizer step exports the other DP ranks' slices from before that step,
    because megatron-core dispatches the param all-gather only at the next forward pre-hook.

    Returns per-step dicts: ``step`` (0-based), ``token_mult_prob_error`` (float; computed from the refitted
    weights only when they differ from the reference, else the reference's own value), ``mismatched`` (HF
    names not bit-identical to ``reference_hf_state_dict`` of that step), ``nan_weights``, ``digest`` (None
    unless `digest`), and ``weights`` if `return_weights`.
    """
    faults = mc.check_faults(faults)
    if fixes is None:
        fixes = DEFAULT_FIXES - ({"param_sync_before_refit"} if "refit_during_param_gather" in faults else set())
    fixes = mc.check_fixes(fixes)
    if refit not in ("colocated", "broadcast", "packed-broadcast"):
        raise ValueError(f"refit must be 'colocated', 'broadcast' or 'packed-broadcast', got {refit!r}")
    if "LOCAL_RANK" in os.environ:
        cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if not dist.is_initialized():
        dist.init_process_group("nccl")
    with_step = overlap_param_gather_with_optimizer_step or "refit_during_param_gather" in faults
    cfg = replace(config, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                  expert_model_parallel_size=ep, expert_tensor_parallel_size=etp or tp)
    mc.initialize_model_parallel(tp, pp, expert_model_parallel_size=ep, expert_tensor_parallel_size=etp)
    try:
        model = mc.GPTModel(cfg, seed=seed, faults=faults, overlap_param_gather=overlap_param_gather or with_step)
        bridge = mb.LlamaBridge(faults=faults, fixes=fixes)
        opt = mc.DistributedOptimizer(model, lr=lr, overlap_param_gather_with_optimizer_step=with_step)
        base = cfg.without_parallelism()
        engine = InferenceEngine(mc.reference_hf_state_dict(base, seed, 0, lr))
        if prepare_refit_info:  # grpo.py 388: policy.prepare_refit_info() exports once for the metadata
            for _name, _t in bridge.export_hf_weights(model):
                pass
        cuda.synchronize()  # set-up (checkpoint load, Ray round-trips) ends with the GPU idle
        mp_group = mc.get_model_parallel_group()
        out = []
        for step in range(steps):
            if "param_sync_before_refit" in fixes:
                model.finish_param_sync()
            if refit == "colocated":
                opt.offload_state()       # offload_before_refit: optimizer state to the CPU (blocking copy)
                cuda.empty_cache()
                refit_colocated(bridge, model, engine, faults, group_bytes, fixes, ipc_pack_threshold)
                cuda.empty_cache()  # offload_after_refit
            elif refit == "broadcast":
                refit_broadcast(bridge, model, engine, faults)
            else:
                refit_packed_broadcast(bridge, model, engine, faults, fixes)
            # generation reads the refitted weights (colocated: in the vLLM process, on its stream)
            weights = engine.state_dict_cpu(None if refit == "colocated" else cuda.current_stream())
            ref = mc.reference_hf_state_dict(base, seed, step, lr)
            mismatched = compare_state_dicts(weights, ref)
            rec = {"step": step, "mismatched": mismatched,
                   "nan_weights": sorted(k for k in mismatched if weights[k].is_floating_point() and
                                         bool(torch.isnan(weights[k]).any())),
                   "digest": state_dict_digest(weights) if digest else None}
            if compute_metric:
                if mismatched:
                    tokens, mask = rollout_batch(base, seed, step, batch, seq_len)
                    train_lp = _train_logprobs(base, seed, step, float(lr), batch, seq_len)
                    rec["token_mult_prob_error"] = float(token_mult_prob_error(logprobs(weights, base, tokens),
                                                                               train_lp, mask))
                else:
                    rec["token_mult_prob_error"] = _clean_metric(base, seed, step, float(lr), batch, seq_len)
            if return_weights:
                rec["weights"] = weights
            out.append(rec)
            model.forward_pre_hook()      # get_logprobs: the forward pre-hook finishes the param all-gather
            if refit == "colocated":
                opt.reload_state()        # prepare_for_training
            model.forward_pre_hook()      # train: forward_backward's pre-hook
            opt.step(step)
            ok = torch.ones(1, dtype=torch.int32, device=model.device)
            dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=mp_group)  # logical_and_across_model_parallel_group
            ok.item()
        model.finish_param_sync()
        return out
    finally:
        mc.destroy_model_parallel()
