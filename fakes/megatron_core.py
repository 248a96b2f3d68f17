"""Fake of Megatron-Core: parallel state, a tiny TP/PP/EP-sharded Llama-style GPT, FP8 primary
weights and the distributed optimizer's param path, written as ordinary torch code.

Everything here is plain ``torch.distributed`` + ``torch.cuda`` code on
``fakes.cuda.device()`` (``cuda:<current>``; the CPU without CUDA), so the same module runs on real GPUs with
NCCL (one process per rank, under torchrun) and inside simdist (one thread per rank).

What is modelled (names follow megatron/core):

* ``parallel_state`` (also importable as ``mpu``): ``initialize_model_parallel``, the group getters
  and ``destroy_model_parallel``. Rank layout "tp-cp-ep-dp-pp" (tp fastest) as in Megatron's
  ``RankGenerator``; the expert groups come from a second generator "tp-ep-dp-pp" over
  (expert_tp, ep, expert_dp, pp). Megatron keeps this state in module globals; simdist runs ranks as
  threads of one process, so the state is kept per rank in a dict keyed by the global rank.
  Every rank calls ``new_group`` for every group, in the same order (torch's requirement).
* ``TransformerConfig``: the model fields plus the parallel sizes (Megatron's config inherits
  ``ModelParallelConfig``), the FP8 recipe name (``bf16``, ``per-tensor``, ``blockwise-pow2``,
  ``blockwise-fp32``, ``mxfp8``) and ``fp8_param``. Invalid combinations raise ``ValueError`` naming the
  offending field or parameter.
* ``GPTModel``: embedding, decoder layers (RMSNorm, fused QKV in Megatron's per-query-group
  ``[q x heads_per_group, k, v]`` row layout, row-parallel ``linear_proj``, fused gated ``linear_fc1`` =
  ``[gate_r; up_r]`` per TP shard, row-parallel ``linear_fc2``, or a MoE layer with a replicated router
  and ``experts.local_experts.{j}``), final norm and a vocab-parallel output layer. PP stage ``s`` owns a
  contiguous slice of layers; parameter names carry the global layer index (expert names carry the
  LOCAL expert index, as in Megatron; the bridge maps them to global).
  Weights come from a global reference: a generator seeded by (seed, global name) produces the full
  unsharded fp32 tensor on the CPU ("canonical" layout: TP-independent, see ``canonical_shape``), each
  rank slices its shard. With ``fp8_param`` the four linear weights of every layer are TE quantized
  tensors of the recipe (FP8 primary weights); all other parameters are ``params_dtype``.
* Megatron DDP's parameter buffers: the parameters of one storage dtype (bf16 params; the FP8 params' row-wise
  uint8 data) are views into one contiguous zero-initialised buffer per (expert?, dtype), padded to a multiple
  of DP; each DP rank owns one contiguous 1/DP shard of it. Initial values come from a CPU cache (canonical
  weights, FP8 quantization of the full weight), copied in once: they do not depend on the schedule.
* ``DistributedOptimizer`` / ``optimizer_step``: this rank's fp32 main-param shard; a deterministic synthetic
  gradient; then the param update as Megatron + TE do it: bf16 params cast their local slice; FP8 params get
  TE's ``cast_master_weights_to_fp8`` (partial amax of the local slice per 128x128 tile / per tensor / per
  1x32 block, one all-reduce(MAX) of the packed amaxes over DP, new scale_inv for every tile, only the local
  slice of the row-wise data re-cast); the DP param all-gather (``all_gather_into_tensor`` of each buffer, in
  place) completes the other slices where megatron-core 0.16.1 dispatches it: in the step without
  ``overlap_param_gather``; with it, at the next forward pre-hook (``GPTModel.finish_param_sync``), or right
  after the step, asynchronously, with ``overlap_param_gather_with_optimizer_step``.

Deliberate simplifications (no ordering edge depends on them):

* Master weights start from the fp32 canonical tensor (as with ``preserve_high_precision_init_val``).
* Per-tensor current scaling uses ONE scale for the full (unsharded) weight: its amax is all-reduced over
  the TP group as well as the DP group, so "dequantize the full weight" is the exact reference. Real TE
  scales each TP shard separately (values differ, ordering does not).
* Only the row-wise FP8 data exists (columnwise usage dropped, as TE does after the optimizer step).
* No forward pass on the sharded model: refit correctness needs none. ``fakes.nemo_rl.logprobs`` runs a
  single-device forward from an HF state dict.

Fault switches live in ``FAULTS``, fixes (edges added on top of the real code) in ``FIXES``; where each one
lives in the real code is ``simdist.properties.hunt.CANDIDATES``. ``GPTModel`` accepts ``faults=`` and carries
the set; the bridge (dequantize, gathers) and the NeMo-RL loop (refit hand-off, param sync) act on them.
``refit_during_param_gather`` makes ``fakes.nemo_rl.grpo_refit_loop`` select the optimizer's
``overlap_param_gather_with_optimizer_step`` (the all-gather then runs while the refit reads).
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import math
import re
import threading
from dataclasses import dataclass, field, replace
from typing import Dict, Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import cuda
from . import transformer_engine as te

__all__ = [
    "RECIPES", "FAULTS", "RETIRED_FAULTS", "FIXES", "check_faults", "check_fixes", "FP8_RECIPES",
    "parallel_state", "mpu", "ParallelState", "initialize_model_parallel",
    "destroy_model_parallel", "model_parallel_is_initialized", "TransformerConfig", "GPTModel",
    "DistributedOptimizer", "optimizer_step", "make_quantizer", "canonical_shape", "canonical_master",
    "shard_canonical", "param_kind", "layer_param_names", "current_device", "reference_hf_state_dict",
    "reference_weight", "hf_names_of", "global_param_names", "split_qkv_weights", "merge_qkv_weights",
]

RECIPES = ("bf16", "per-tensor", "blockwise-pow2", "blockwise-fp32", "mxfp8")
FP8_RECIPES = RECIPES[1:]
# Fault switches: each drops ONE ordering edge of the stack (the table, with the real source line each one
# corresponds to or "hypothetical", is CANDIDATES in simdist.properties.hunt and the docstring of
# fakes/megatron_bridge.py).
FAULTS = frozenset({
    "dequant_side_stream", "async_gather_no_wait", "refit_during_param_gather", "no_record_stream",
    "ipc_pack_no_sync", "packed_broadcast_unjoined",
})
# Switches that existed and were removed, with the reason (asking for one raises ValueError saying it).
RETIRED_FAULTS = {
    "pp_broadcast_dequantized_temp": "removed: the PP broadcast is now modelled as Megatron-Bridge 0.3.1 does it "
                                     "(non-owners allocate a plain tensor; the owner's TE tensor is broadcast "
                                     "as a dequantized temporary), so the dropped-data path it modelled has no "
                                     "counterpart",
}
# Fixes: ordering edges ADDED on top of the real code (each restores what a fault or the real code lacks).
FIXES = frozenset({
    "param_sync_before_refit",   # finish the DP param all-gather (forward pre-hook) before the refit's export
    "ipc_synchronize",           # NeMo-RL 3a69c2168: current_stream().synchronize() before each IPC handle
    "side_stream_wait",          # side-stream dequantize: current.wait_stream(side) + out.record_stream(current)
    "gather_wait",               # an async TP all-gather is waited for before its outputs are read
    "join_side_streams",         # NeMo-RL 705340674: synchronize every packed-broadcast side stream at the end
    "synchronize_after_dequantize",  # the incident reporter's workaround: torch.cuda.synchronize() per dequantize
})
E4M3 = te.TE_DType.kFloat8E4M3
BLOCK = 128
MX_BLOCK = 32


def current_device() -> torch.device:
    return cuda.device()


def check_faults(faults) -> frozenset:
    faults = frozenset(faults or ())
    retired = sorted(faults & set(RETIRED_FAULTS))
    if retired:
        raise ValueError(f"fault switch {retired[0]!r} was {RETIRED_FAULTS[retired[0]]}")
    bad = sorted(faults - FAULTS)
    if bad:
        raise ValueError(f"unknown fault switch(es) {bad}; known: {sorted(FAULTS)}")
    return faults


def check_fixes(fixes) -> frozenset:
    fixes = frozenset(fixes or ())
    bad = sorted(fixes - FIXES)
    if bad:
        raise ValueError(f"unknown fix(es) {bad}; known: {sorted(FIXES)}")
    return fixes


# ============================================================================ parallel state
def _orthogonal_groups(sizes: List[int], names: List[str], token: str) -> List[List[int]]:
    """Megatron's ``generate_masked_orthogonal_rank_groups``: ranks are mixed-radix numbers over `sizes`
    (first dimension fastest); a group varies the dimensions named in `token`, all others fixed."""
    sel = token.split("-")
    for s in sel:
        if s not in names:
            raise ValueError(f"unknown parallel dimension {s!r} in {token!r}")
    strides = [math.prod(sizes[:i]) for i in range(len(sizes))]
    inner = [i for i, n in enumerate(names) if n in sel]
    outer = [i for i, n in enumerate(names) if n not in sel]

    def first_fastest(dims):
        for combo in itertools.product(*[range(sizes[d]) for d in reversed(dims)]):
            yield dict(zip(reversed(dims), combo))

    groups = []
    for o in first_fastest(outer):
        base = sum(o[d] * strides[d] for d in outer)
        groups.append([base + sum(i[d] * strides[d] for d in inner) for i in first_fastest(inner)])
    return groups


@dataclass
class ParallelState:
    """One rank's view of the model-parallel layout (Megatron keeps this in module globals)."""

    rank: int
    world_size: int
    tp: int
    pp: int
    cp: int
    dp: int
    ep: int
    etp: int
    edp: int
    groups: Dict[str, object] = field(default_factory=dict)
    ranks: Dict[str, List[int]] = field(default_factory=dict)

    def group(self, key):
        return self.groups[key]

    def group_rank(self, key):
        return self.ranks[key].index(self.rank)

    def group_size(self, key):
        return len(self.ranks[key])


_STATES: Dict[int, ParallelState] = {}
_STATES_LOCK = threading.Lock()

_DENSE_DIMS = ["tp", "cp", "ep", "dp", "pp"]
# (state key, generator, token) in the order every rank creates the groups
_GROUP_PLAN = [
    ("dp", "dense", "dp"), ("dp_cp", "dense", "cp-dp"), ("cp", "dense", "cp"), ("tp", "dense", "tp"),
    ("pp", "dense", "pp"), ("mp", "dense", "tp-pp"), ("tp_cp", "dense", "tp-cp"),
    ("etp", "expert", "tp"), ("ep", "expert", "ep"), ("etp_ep", "expert", "tp-ep"), ("edp", "expert", "dp"),
    ("epp", "expert", "pp"),
]


def _rank() -> int:
    return dist.get_rank()


def initialize_model_parallel(tensor_model_parallel_size: int = 1, pipeline_model_parallel_size: int = 1,
                              virtual_pipeline_model_parallel_size=None, pipeline_model_parallel_split_rank=None,
                              context_parallel_size: int = 1, expert_model_parallel_size: int = 1,
                              expert_tensor_parallel_size: Optional[int] = None, order: str = "tp-cp-ep-dp-pp",
                              **_ignored) -> ParallelState:
    """Create every model-parallel group (Megatron's ``initialize_model_parallel``) for the calling rank."""
    if order != "tp-cp-ep-dp-pp":
        raise ValueError(f"order: only 'tp-cp-ep-dp-pp' is modelled, got {order!r}")
    if virtual_pipeline_model_parallel_size not in (None, 1):
        raise ValueError("virtual_pipeline_model_parallel_size: virtual pipeline stages are not modelled")
    world = dist.get_world_size()
    rank = _rank()
    tp, pp, cp, ep = (int(tensor_model_parallel_size), int(pipeline_model_parallel_size),
                      int(context_parallel_size), int(expert_model_parallel_size))
    for name, v in (("tensor_model_parallel_size", tp), ("pipeline_model_parallel_size", pp),
                    ("context_parallel_size", cp), ("expert_model_parallel_size", ep)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if world % (tp * pp * cp):
        raise ValueError(f"tensor_model_parallel_size ({tp}) x pipeline_model_parallel_size ({pp}) x "
                         f"context_parallel_size ({cp}) must divide the world size ({world})")
    dp = world // (tp * pp * cp)
    etp = int(expert_tensor_parallel_size or tp)
    if world % (etp * ep * pp):
        raise ValueError(f"expert_tensor_parallel_size ({etp}) x expert_model_parallel_size ({ep}) x "
                         f"pipeline_model_parallel_size ({pp}) must divide the world size ({world})")
    edp = world // (etp * ep * pp)
    gens = {"dense": [tp, cp, 1, dp, pp], "expert": [etp, 1, ep, edp, pp]}
    st = ParallelState(rank, world, tp, pp, cp, dp, ep, etp, edp)
    for key, gen, token in _GROUP_PLAN:
        for ranks in _orthogonal_groups(gens[gen], _DENSE_DIMS, token):
            g = dist.new_group(ranks)
            if rank in ranks:
                st.groups[key] = g
                st.ranks[key] = list(ranks)
    if sorted(st.ranks["pp"]) != sorted(st.ranks["epp"]):
        raise ValueError("pipeline groups of the dense and expert layouts differ")
    with _STATES_LOCK:
        _STATES[rank] = st
    return st


def _state() -> ParallelState:
    st = _STATES.get(_rank())
    if st is None:
        raise RuntimeError("model parallel is not initialized: call initialize_model_parallel() first")
    return st


def model_parallel_is_initialized() -> bool:
    try:
        return dist.is_initialized() and _rank() in _STATES
    except Exception:  # noqa: BLE001 - no default group / outside a simulated rank
        return False


is_initialized = model_parallel_is_initialized


def destroy_model_parallel() -> None:
    with _STATES_LOCK:
        _STATES.pop(_rank(), None)


def get_parallel_state() -> ParallelState:
    return _state()


def _getter(key, what):
    if what == "group":
        return lambda *a, **k: _state().group(key)
    if what == "rank":
        return lambda *a, **k: _state().group_rank(key)
    return lambda *a, **k: _state().group_size(key)


get_tensor_model_parallel_group = _getter("tp", "group")
get_tensor_model_parallel_rank = _getter("tp", "rank")
get_tensor_model_parallel_world_size = _getter("tp", "size")
get_pipeline_model_parallel_group = _getter("pp", "group")
get_pipeline_model_parallel_rank = _getter("pp", "rank")
get_pipeline_model_parallel_world_size = _getter("pp", "size")
get_context_parallel_group = _getter("cp", "group")
get_context_parallel_rank = _getter("cp", "rank")
get_context_parallel_world_size = _getter("cp", "size")
get_model_parallel_group = _getter("mp", "group")
get_expert_model_parallel_group = _getter("ep", "group")
get_expert_model_parallel_rank = _getter("ep", "rank")
get_expert_model_parallel_world_size = _getter("ep", "size")
get_expert_tensor_parallel_group = _getter("etp", "group")
get_expert_tensor_parallel_rank = _getter("etp", "rank")
get_expert_tensor_parallel_world_size = _getter("etp", "size")
get_expert_data_parallel_group = _getter("edp", "group")
get_expert_data_parallel_rank = _getter("edp", "rank")
get_expert_data_parallel_world_size = _getter("edp", "size")
get_expert_tensor_and_model_parallel_group = _getter("etp_ep", "group")


def get_data_parallel_group(with_context_parallel: bool = False, **_k):
    return _state().group("dp_cp" if with_context_parallel else "dp")


def get_data_parallel_rank(with_context_parallel: bool = False, **_k):
    return _state().group_rank("dp_cp" if with_context_parallel else "dp")


def get_data_parallel_world_size(with_context_parallel: bool = False, **_k):
    return _state().group_size("dp_cp" if with_context_parallel else "dp")


def is_pipeline_first_stage(ignore_virtual: bool = True, **_k) -> bool:
    return get_pipeline_model_parallel_rank() == 0


def is_pipeline_last_stage(ignore_virtual: bool = True, **_k) -> bool:
    return get_pipeline_model_parallel_rank() == get_pipeline_model_parallel_world_size() - 1


class _ParallelStateNamespace:
    """``from simdist.fakes.megatron_core import parallel_state`` then ``parallel_state.get_..._group()``."""

    def __getattr__(self, name):
        g = globals()
        if name in g and not name.startswith("_"):
            return g[name]
        raise AttributeError(name)

    def __dir__(self):
        return [n for n in globals() if n.startswith(("get_", "initialize_", "destroy_", "is_", "model_"))]


parallel_state = _ParallelStateNamespace()
mpu = parallel_state


# ============================================================================ config
@dataclass(frozen=True)
class TransformerConfig:
    """Model + parallel configuration (subset of Megatron's TransformerConfig/ModelParallelConfig)."""

    hidden_size: int = 256
    num_attention_heads: int = 4
    num_query_groups: Optional[int] = None
    kv_channels: Optional[int] = None
    ffn_hidden_size: Optional[int] = None
    num_layers: int = 2
    vocab_size: int = 256
    num_moe_experts: Optional[int] = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: Optional[int] = None
    params_dtype: torch.dtype = torch.bfloat16
    fp8_recipe: str = "bf16"
    fp8_param: bool = False
    layernorm_epsilon: float = 1e-5
    rotary_base: float = 10000.0
    use_rotary: bool = True
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: Optional[int] = None

    def __post_init__(self):
        s = object.__setattr__
        if self.num_query_groups is None:
            s(self, "num_query_groups", self.num_attention_heads)
        if self.kv_channels is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                                 f"({self.num_attention_heads}) when kv_channels is not given")
            s(self, "kv_channels", self.hidden_size // self.num_attention_heads)
        if self.ffn_hidden_size is None:
            s(self, "ffn_hidden_size", 4 * self.hidden_size)
        if self.moe_ffn_hidden_size is None:
            s(self, "moe_ffn_hidden_size", self.ffn_hidden_size)
        if self.expert_tensor_parallel_size is None:
            s(self, "expert_tensor_parallel_size", self.tensor_model_parallel_size)
        self.validate()

    # --- derived
    @property
    def heads_per_group(self) -> int:
        return self.num_attention_heads // self.num_query_groups

    @property
    def is_moe(self) -> bool:
        return self.num_moe_experts is not None

    @property
    def fp8_param_recipe(self) -> Optional[str]:
        """The recipe of the FP8 primary weights, or None (bf16 params)."""
        return self.fp8_recipe if (self.fp8_param and self.fp8_recipe != "bf16") else None

    def without_parallelism(self) -> "TransformerConfig":
        return replace(self, tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                       expert_model_parallel_size=1, expert_tensor_parallel_size=1)

    def validate(self):
        tp, pp = self.tensor_model_parallel_size, self.pipeline_model_parallel_size
        ep, etp = self.expert_model_parallel_size, self.expert_tensor_parallel_size

        def need(cond, msg):
            if not cond:
                raise ValueError(msg)

        for name in ("hidden_size", "num_attention_heads", "num_query_groups", "kv_channels", "ffn_hidden_size",
                     "num_layers", "vocab_size", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                     "expert_model_parallel_size", "expert_tensor_parallel_size"):
            need(int(getattr(self, name)) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        need(self.fp8_recipe in RECIPES, f"fp8_recipe must be one of {RECIPES}, got {self.fp8_recipe!r}")
        need(self.params_dtype in (torch.bfloat16, torch.float16, torch.float32),
             f"params_dtype must be bf16/fp16/fp32, got {self.params_dtype}")
        need(self.hidden_size % tp == 0,
             f"hidden_size ({self.hidden_size}) must be divisible by tensor_model_parallel_size ({tp})")
        need(self.num_attention_heads % self.num_query_groups == 0,
             f"num_attention_heads ({self.num_attention_heads}) must be divisible by num_query_groups "
             f"({self.num_query_groups})")
        need(self.num_query_groups % tp == 0,
             f"num_query_groups ({self.num_query_groups}) must be divisible by tensor_model_parallel_size ({tp})")
        need(self.ffn_hidden_size % tp == 0,
             f"ffn_hidden_size ({self.ffn_hidden_size}) must be divisible by tensor_model_parallel_size ({tp})")
        need(self.vocab_size % tp == 0,
             f"vocab_size ({self.vocab_size}) must be divisible by tensor_model_parallel_size ({tp})")
        need(self.num_layers % pp == 0,
             f"num_layers ({self.num_layers}) must be divisible by pipeline_model_parallel_size ({pp})")
        if self.is_moe:
            need(self.num_moe_experts >= 1, f"num_moe_experts must be >= 1, got {self.num_moe_experts}")
            need(self.num_moe_experts % ep == 0,
                 f"num_moe_experts ({self.num_moe_experts}) must be divisible by expert_model_parallel_size ({ep})")
            need(1 <= self.moe_router_topk <= self.num_moe_experts,
                 f"moe_router_topk ({self.moe_router_topk}) must be in [1, num_moe_experts={self.num_moe_experts}]")
            need(self.moe_ffn_hidden_size % etp == 0,
                 f"moe_ffn_hidden_size ({self.moe_ffn_hidden_size}) must be divisible by "
                 f"expert_tensor_parallel_size ({etp})")
        else:
            need(ep == 1, f"expert_model_parallel_size ({ep}) > 1 needs num_moe_experts")
        if self.fp8_param_recipe is not None:
            for pname, (rows, cols), chunk_rows in _fp8_shard_geometry(self):
                _check_fp8_tiling(self.fp8_param_recipe, pname, rows, cols, chunk_rows)


def _fp8_shard_geometry(cfg: TransformerConfig):
    """(pattern name, TP-shard shape, row-chunk size inside the shard) of every FP8 linear weight."""
    tp, etp = cfg.tensor_model_parallel_size, cfg.expert_tensor_parallel_size
    h, kv, g, hpg = cfg.hidden_size, cfg.kv_channels, cfg.num_query_groups, cfg.heads_per_group
    qkv_rows = (g // tp) * (hpg + 2) * kv
    out = [("decoder.layers.*.self_attention.linear_qkv.weight", (qkv_rows, h), qkv_rows),
           ("decoder.layers.*.self_attention.linear_proj.weight", (h, cfg.num_attention_heads * kv // tp), h)]
    if cfg.is_moe:
        f = cfg.moe_ffn_hidden_size // etp
        pre = "decoder.layers.*.mlp.experts.local_experts.*"
    else:
        f = cfg.ffn_hidden_size // tp
        pre = "decoder.layers.*.mlp"
    out += [(pre + ".linear_fc1.weight", (2 * f, h), f), (pre + ".linear_fc2.weight", (h, f), h)]
    return out


def _check_fp8_tiling(recipe, pname, rows, cols, chunk_rows):
    if recipe.startswith("blockwise"):
        bad = [(what, v) for what, v in (("rows", rows), ("columns", cols), ("row chunk", chunk_rows))
               if v % BLOCK]
        if bad:
            what, v = bad[0]
            raise ValueError(
                f"{pname}: FP8 recipe {recipe!r} quantizes 128x128 tiles, but this weight's TP shard "
                f"{rows}x{cols} has {what} = {v}, not a multiple of {BLOCK}; the per-shard tiles would not be "
                f"the tiles of the full weight (the refit reference)")
    elif recipe == "mxfp8":
        bad = [(what, v) for what, v in (("rows", rows), ("columns", cols)) if v % MX_BLOCK]
        if bad:
            what, v = bad[0]
            raise ValueError(f"{pname}: FP8 recipe 'mxfp8' needs both dims of the TP shard {rows}x{cols} divisible "
                             f"by {MX_BLOCK}; {what} = {v}")


def make_quantizer(recipe: str, device, amax_reduction_group=None):
    """The TE quantizer of an FP8 primary weight for `recipe` (row-wise data only)."""
    if recipe == "per-tensor":
        return te.Float8CurrentScalingQuantizer(E4M3, device, rowwise=True, columnwise=False,
                                                with_amax_reduction=amax_reduction_group is not None,
                                                amax_reduction_group=amax_reduction_group)
    if recipe in ("blockwise-pow2", "blockwise-fp32"):
        return te.Float8BlockQuantizer(E4M3, rowwise=True, columnwise=False,
                                       force_pow_2_scales=recipe == "blockwise-pow2", block_scaling_dim=2)
    if recipe == "mxfp8":
        return te.MXFP8Quantizer(E4M3, rowwise=True, columnwise=False)
    raise ValueError(f"no FP8 quantizer for recipe {recipe!r}")


# ============================================================================ global reference weights
def param_kind(name: str) -> str:
    """How a Megatron parameter is sharded: column / row / replicated / qkv / fc1."""
    if name.endswith("linear_qkv.weight"):
        return "qkv"
    if name.endswith("linear_fc1.weight"):
        return "fc1"
    if name.endswith(("linear_proj.weight", "linear_fc2.weight")):
        return "row"
    if name.endswith(("word_embeddings.weight", "output_layer.weight")):
        return "column"
    return "replicated"


def is_expert_param(name: str) -> bool:
    return ".experts.local_experts." in name


def is_fp8_param(cfg: TransformerConfig, name: str) -> bool:
    return cfg.fp8_param_recipe is not None and param_kind(name) in ("qkv", "fc1", "row")


def canonical_shape(cfg: TransformerConfig, name: str) -> Tuple[int, ...]:
    """Unsharded shape of a parameter in the canonical (TP-independent) layout.

    qkv: the TP concat of Megatron shards = per query group [q x heads_per_group, k, v] (TP-independent);
    fc1: [gate; up] (the TP=1 Megatron layout; at TP=n shard r is [gate_r; up_r]).
    """
    h, kv = cfg.hidden_size, cfg.kv_channels
    ffn = cfg.moe_ffn_hidden_size if is_expert_param(name) else cfg.ffn_hidden_size
    if name.endswith(("word_embeddings.weight", "output_layer.weight")):
        return (cfg.vocab_size, h)
    if name.endswith("linear_qkv.weight"):
        return (cfg.num_query_groups * (cfg.heads_per_group + 2) * kv, h)
    if name.endswith("linear_proj.weight"):
        return (h, cfg.num_attention_heads * kv)
    if name.endswith("linear_fc1.weight"):
        return (2 * ffn, h)
    if name.endswith("linear_fc2.weight"):
        return (h, ffn)
    if name.endswith("router.weight"):
        return (cfg.num_moe_experts, h)
    if name.endswith("layernorm.weight"):
        return (h,)
    raise KeyError(f"unknown parameter {name!r}")


def _fan_in(shape):
    return shape[-1] if len(shape) > 1 else 1


def _seed_of(*parts) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "little") >> 1


@functools.lru_cache(maxsize=8192)
def _randn(seed: int, step: int, kind: str, name: str, shape: Tuple[int, ...]) -> torch.Tensor:
    g = torch.Generator().manual_seed(_seed_of(seed, step, kind, name))
    return torch.randn(shape, generator=g, dtype=torch.float32)


def _init_full(cfg, seed, name):
    shape = canonical_shape(cfg, name)
    r = _randn(seed, 0, "init", name, shape)
    if name.endswith("layernorm.weight"):
        return 1.0 + 0.1 * r
    if name.endswith("word_embeddings.weight"):
        return r.clone()
    return r * (1.0 / math.sqrt(_fan_in(shape)))


def _grad_full(cfg, seed, step, name):
    shape = canonical_shape(cfg, name)
    r = _randn(seed, step, "grad", name, shape)
    if name.endswith("layernorm.weight"):
        return r * 0.01
    if name.endswith("word_embeddings.weight"):
        return r * 0.05
    return r * (0.05 / math.sqrt(_fan_in(shape)))


@functools.lru_cache(maxsize=4096)
def canonical_master(cfg: TransformerConfig, seed: int, name: str, step: int = 0, lr: float = 1.0) -> torch.Tensor:
    """fp32 master weight (canonical layout, CPU) after `step` optimizer steps. Do not modify the result.

    `name` is the GLOBAL Megatron name (global layer index, global expert index)."""
    cfg = cfg.without_parallelism()
    if step == 0:
        return _init_full(cfg, seed, name)
    prev = canonical_master(cfg, seed, name, step - 1, lr)
    return prev - _grad_full(cfg, seed, step - 1, name) * lr


def canonical_grad(cfg: TransformerConfig, seed: int, name: str, step: int) -> torch.Tensor:
    return _grad_full(cfg.without_parallelism(), seed, step, name)


def shard_canonical(full: torch.Tensor, kind: str, tp_size: int, tp_rank: int) -> torch.Tensor:
    """This TP rank's shard of a canonical full tensor (a contiguous CPU/device tensor)."""
    if tp_size == 1 or kind == "replicated":
        return full.contiguous()
    if kind in ("column", "qkv"):
        return full.chunk(tp_size, 0)[tp_rank].contiguous()
    if kind == "row":
        return full.chunk(tp_size, 1)[tp_rank].contiguous()
    if kind == "fc1":
        gate, up = full.chunk(2, 0)
        return torch.cat([gate.chunk(tp_size, 0)[tp_rank], up.chunk(tp_size, 0)[tp_rank]], 0)
    raise ValueError(kind)


def layer_param_names(cfg: TransformerConfig, layer: int, local_expert_ids=None) -> List[str]:
    """Megatron names of one decoder layer's parameters (expert ids as given, default all global ids)."""
    p = f"decoder.layers.{layer}."
    names = [p + "input_layernorm.weight", p + "self_attention.linear_qkv.weight",
             p + "self_attention.linear_proj.weight", p + "pre_mlp_layernorm.weight"]
    if cfg.is_moe:
        names.append(p + "mlp.router.weight")
        ids = range(cfg.num_moe_experts) if local_expert_ids is None else local_expert_ids
        for e in ids:
            names += [p + f"mlp.experts.local_experts.{e}.linear_fc1.weight",
                      p + f"mlp.experts.local_experts.{e}.linear_fc2.weight"]
    else:
        names += [p + "mlp.linear_fc1.weight", p + "mlp.linear_fc2.weight"]
    return names


def split_qkv_weights(config, qkv: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Megatron's interleaved [q x heads_per_group, k, v] per query group -> HF q, k, v."""
    g, hpg, kv = config.num_query_groups, config.heads_per_group, config.kv_channels
    h = qkv.shape[-1]
    x = qkv.reshape(g, (hpg + 2) * kv, h)
    q = x[:, : hpg * kv].reshape(g * hpg * kv, h)
    k = x[:, hpg * kv:(hpg + 1) * kv].reshape(g * kv, h)
    v = x[:, (hpg + 1) * kv:].reshape(g * kv, h)
    return q, k, v


def merge_qkv_weights(config, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """HF q, k, v -> Megatron's interleaved QKV (inverse of ``split_qkv_weights``)."""
    g, hpg, kv = config.num_query_groups, config.heads_per_group, config.kv_channels
    h = q.shape[-1]
    return torch.cat([q.reshape(g, hpg * kv, h), k.reshape(g, kv, h), v.reshape(g, kv, h)], 1).reshape(-1, h)


def global_param_names(cfg: TransformerConfig) -> List[str]:
    """Every global Megatron parameter name of the unsharded model."""
    names = ["embedding.word_embeddings.weight"]
    for i in range(cfg.num_layers):
        names += layer_param_names(cfg, i)
    return names + ["decoder.final_layernorm.weight", "output_layer.weight"]


# ============================================================================ modules
class Module:
    """Minimal module tree (no nn.Parameter wrapping: FP8 params are TE wrapper tensors)."""

    def __init__(self, config: TransformerConfig):
        self.config = config
        self._modules: Dict[str, "Module"] = {}
        self._params: Dict[str, torch.Tensor] = {}

    def add_module(self, name: str, module: "Module") -> "Module":
        self._modules[name] = module
        return module

    def register_parameter(self, name: str, tensor: torch.Tensor) -> None:
        self._params[name] = tensor

    def __getattr__(self, name):
        d = self.__dict__
        if "_params" in d and name in d["_params"]:
            return d["_params"][name]
        if "_modules" in d and name in d["_modules"]:
            return d["_modules"][name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def named_modules(self, prefix: str = "") -> Iterator[Tuple[str, "Module"]]:
        yield prefix, self
        for n, m in self._modules.items():
            yield from m.named_modules(f"{prefix}.{n}" if prefix else n)

    def named_parameters(self, prefix: str = "") -> Iterator[Tuple[str, torch.Tensor]]:
        for n, t in self._params.items():
            yield (f"{prefix}.{n}" if prefix else n), t
        for n, m in self._modules.items():
            yield from m.named_parameters(f"{prefix}.{n}" if prefix else n)

    def parameters(self):
        return [t for _, t in self.named_parameters()]

    def get_submodule(self, path: str) -> "Module":
        m = self
        for part in path.split(".") if path else []:
            m = m._modules[part]
        return m

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(self._params) or ''})"


class RMSNorm(Module):
    tensor_model_parallel = False
    partition_dim = None


class TopKRouter(Module):
    tensor_model_parallel = False
    partition_dim = None


class VocabParallelEmbedding(Module):
    tensor_model_parallel = True
    partition_dim = 0


class TEColumnParallelLinear(Module):
    tensor_model_parallel = True
    partition_dim = 0
    parallel_mode = "column"


class TERowParallelLinear(Module):
    tensor_model_parallel = True
    partition_dim = 1
    parallel_mode = "row"


class ColumnParallelLinear(Module):  # the output layer (not a TE module: never FP8)
    tensor_model_parallel = True
    partition_dim = 0


_MODULE_FOR_KIND = {"qkv": TEColumnParallelLinear, "fc1": TEColumnParallelLinear, "row": TERowParallelLinear}


@dataclass
class ParamInfo:
    """Bookkeeping of one local parameter."""

    name: str           # local Megatron name (model.named_parameters())
    global_name: str    # global layer + global expert index: the generator key and the bridge's task name
    kind: str
    module: Module
    tp_size: int
    tp_rank: int
    is_expert: bool
    fp8: bool
    dp_group: object
    dp_size: int
    dp_rank: int
    tp_group: object
    shard_shape: Tuple[int, ...]
    buffer: Optional["ParamBuffer"] = None   # the DDP param buffer holding it (or its FP8 data)
    offset: int = 0                          # its first element in that buffer
    local: Tuple[int, int] = (0, 0)          # [lo, hi) of its flat elements inside this DP rank's shard


class GPTModel(Module):
    """Tiny Llama-style GPT sharded for TP, PP and EP. See the module docstring."""

    def __init__(self, config: TransformerConfig, pre_process: Optional[bool] = None,
                 post_process: Optional[bool] = None, *, seed: int = 0, faults=frozenset(),
                 overlap_param_gather: bool = False):
        super().__init__(config)
        ps = _state()
        cfg = config
        for fname, mine, theirs in (("tensor_model_parallel_size", ps.tp, cfg.tensor_model_parallel_size),
                                    ("pipeline_model_parallel_size", ps.pp, cfg.pipeline_model_parallel_size),
                                    ("expert_model_parallel_size", ps.ep, cfg.expert_model_parallel_size),
                                    ("expert_tensor_parallel_size", ps.etp, cfg.expert_tensor_parallel_size)):
            if mine != theirs:
                raise ValueError(f"{fname}: config says {theirs}, initialize_model_parallel said {mine}")
        self.parallel_state = ps
        self.seed = int(seed)
        self.faults = check_faults(faults)
        self.overlap_param_gather = bool(overlap_param_gather)
        self.device = current_device()
        pp_rank = ps.group_rank("pp")
        self.pre_process = (pp_rank == 0) if pre_process is None else bool(pre_process)
        self.post_process = (pp_rank == ps.pp - 1) if post_process is None else bool(post_process)
        per_stage = cfg.num_layers // ps.pp
        self.layer_offset = pp_rank * per_stage
        self.layer_ids = list(range(self.layer_offset, self.layer_offset + per_stage))
        self.ep_rank = ps.group_rank("ep")
        self.experts_per_rank = (cfg.num_moe_experts // ps.ep) if cfg.is_moe else 0
        self.info: Dict[str, ParamInfo] = {}
        self._pending_param_sync: List = []
        self._param_sync_due = False          # the optimizer step deferred the DP all-gather (overlap)
        self._param_gather_dispatched = False
        self._optimizer: Optional[DistributedOptimizer] = None
        self.param_buffers: Dict[Tuple[bool, torch.dtype], "ParamBuffer"] = {}

        if self.pre_process:
            emb = self.add_module("embedding", Module(cfg))
            we = emb.add_module("word_embeddings", VocabParallelEmbedding(cfg))
            self._make_param(we, "weight", "embedding.word_embeddings.weight")
        decoder = self.add_module("decoder", Module(cfg))
        layers = decoder.add_module("layers", Module(cfg))
        for i in self.layer_ids:
            self._build_layer(layers.add_module(str(i), Module(cfg)), i)
        if self.post_process:
            fn = decoder.add_module("final_layernorm", RMSNorm(cfg))
            self._make_param(fn, "weight", "decoder.final_layernorm.weight")
            out = self.add_module("output_layer", ColumnParallelLinear(cfg))
            self._make_param(out, "weight", "output_layer.weight")
        self._build_param_buffers()

    # --- construction
    def _build_layer(self, layer: Module, i: int):
        cfg = self.config
        p = f"decoder.layers.{i}."
        self._make_param(layer.add_module("input_layernorm", RMSNorm(cfg)), "weight", p + "input_layernorm.weight")
        att = layer.add_module("self_attention", Module(cfg))
        self._make_param(att.add_module("linear_qkv", TEColumnParallelLinear(cfg)), "weight",
                         p + "self_attention.linear_qkv.weight")
        self._make_param(att.add_module("linear_proj", TERowParallelLinear(cfg)), "weight",
                         p + "self_attention.linear_proj.weight")
        self._make_param(layer.add_module("pre_mlp_layernorm", RMSNorm(cfg)), "weight",
                         p + "pre_mlp_layernorm.weight")
        mlp = layer.add_module("mlp", Module(cfg))
        if cfg.is_moe:
            self._make_param(mlp.add_module("router", TopKRouter(cfg)), "weight", p + "mlp.router.weight")
            experts = mlp.add_module("experts", Module(cfg))
            local = experts.add_module("local_experts", Module(cfg))
            for j in range(self.experts_per_rank):
                e = j + self.experts_per_rank * self.ep_rank
                ex = local.add_module(str(j), Module(cfg))
                for lin, cls in (("linear_fc1", TEColumnParallelLinear), ("linear_fc2", TERowParallelLinear)):
                    m = ex.add_module(lin, cls(cfg))
                    m.is_expert = True
                    self._make_param(m, "weight", p + f"mlp.experts.local_experts.{j}.{lin}.weight",
                                     p + f"mlp.experts.local_experts.{e}.{lin}.weight")
        else:
            self._make_param(mlp.add_module("linear_fc1", TEColumnParallelLinear(cfg)), "weight",
                             p + "mlp.linear_fc1.weight")
            self._make_param(mlp.add_module("linear_fc2", TERowParallelLinear(cfg)), "weight",
                             p + "mlp.linear_fc2.weight")

    def _make_param(self, module: Module, attr: str, name: str, global_name: Optional[str] = None):
        """Book-keep one parameter; its device storage is created by ``_build_param_buffers`` (Megatron DDP's
        contiguous param buffers), its initial value comes from the CPU cache ``_initial_shard``."""
        cfg, ps = self.config, self.parallel_state
        global_name = global_name or name
        kind = param_kind(name)
        expert = is_expert_param(name)
        tpk, dpk = ("etp", "edp") if expert else ("tp", "dp")
        tp_size, tp_rank = ps.group_size(tpk), ps.group_rank(tpk)
        fp8 = is_fp8_param(cfg, name)
        shape = _shard_shape(cfg, global_name, kind, tp_size)
        info = ParamInfo(name=name, global_name=global_name, kind=kind, module=module, tp_size=tp_size,
                         tp_rank=tp_rank, is_expert=expert, fp8=fp8, dp_group=ps.group(dpk),
                         dp_size=ps.group_size(dpk), dp_rank=ps.group_rank(dpk), tp_group=ps.group(tpk),
                         shard_shape=shape)
        module.register_parameter(attr, None)
        self.info[name] = info

    def _build_param_buffers(self) -> None:
        """Megatron DDP's ``_ParamAndGradBuffer``: the parameters of one storage dtype (bf16 params; the FP8
        params' row-wise uint8 data) live in one contiguous buffer per (expert?, dtype), zero-initialised and
        padded to a multiple of the data-parallel size; each DP rank owns one contiguous 1/DP shard of it (the
        distributed optimizer's main-param shard) and the DP param all-gather fills the rest in place
        (``param_and_grad_buffer.py`` ``start_param_sync``: ``dist_all_gather_func(bucket.param_data,
        local_data_view)``). One bucket per buffer here."""
        cfg, dev = self.config, self.device
        groups: Dict[Tuple[bool, torch.dtype], List[str]] = {}
        for name, info in self.info.items():
            groups.setdefault((info.is_expert, torch.uint8 if info.fp8 else cfg.params_dtype), []).append(name)
        self.param_buffers = {}
        for (expert, dtype), names in groups.items():
            first = self.info[names[0]]
            dp, dp_rank = first.dp_size, first.dp_rank
            sizes = [math.prod(self.info[n].shard_shape) for n in names]
            total = -(-sum(sizes) // dp) * dp
            buf = torch.zeros(total, dtype=dtype, device=dev)
            shard = total // dp
            lo_r, hi_r = dp_rank * shard, (dp_rank + 1) * shard
            pb = ParamBuffer(dtype=dtype, is_expert=expert, data=buf, dp_group=first.dp_group, dp_size=dp,
                             dp_rank=dp_rank, shard_size=shard, names=list(names))
            off = 0
            for n, size in zip(names, sizes):
                info = self.info[n]
                info.buffer, info.offset = pb, off
                lo, hi = max(off, lo_r) - off, min(off + size, hi_r) - off
                info.local = (lo, hi) if hi > lo else (0, 0)
                view = buf[off:off + size].view(info.shard_shape)
                init, bufs = _initial_shard(cfg, self.seed, info.global_name, info.kind, info.tp_size,
                                            info.tp_rank, info.fp8)
                if info.fp8:
                    t = make_quantizer(cfg.fp8_param_recipe, dev).make_empty(info.shard_shape,
                                                                             dtype=cfg.params_dtype, device=dev)
                    for key, cpu in bufs.items():
                        attr = _TE_BUFFER_ATTRS[key]
                        if attr in ("_rowwise_data", "_data"):
                            setattr(t, attr, view)  # the FP8 data is a view into the param buffer
                        getattr(t, attr).copy_(cpu)
                else:
                    t = view
                    t.copy_(init)
                for k, v in (("tensor_model_parallel", info.kind != "replicated"),
                             ("partition_dim", {"column": 0, "qkv": 0, "fc1": 0, "row": 1}.get(info.kind, -1))):
                    try:
                        setattr(t, k, v)
                    except (AttributeError, TypeError):
                        pass
                info.module.register_parameter("weight", t)
                off += size
            self.param_buffers[(expert, dtype)] = pb

    # --- Megatron DDP surface (distributed_data_parallel.py, param_and_grad_buffer.py of megatron-core 0.16.1)
    def start_param_sync(self, force_sync: bool = False) -> None:
        """Dispatch the DP param all-gather of every buffer: asynchronous with ``overlap_param_gather`` (unless
        `force_sync`), synchronous otherwise (``_ParamAndGradBucketGroup.start_param_sync``)."""
        async_op = self.overlap_param_gather and not force_sync
        for pb in self.param_buffers.values():
            if pb.dp_size == 1:
                continue
            work = dist.all_gather_into_tensor(pb.data, pb.local_view(), group=pb.dp_group, async_op=async_op)
            if work is not None and async_op:
                self._pending_param_sync.append(work)
        self._param_gather_dispatched = True
        self._param_sync_due = False

    def finish_param_sync(self) -> None:
        """The forward pre-hook's ``finish_param_sync``: dispatch the all-gather if the optimizer step left it
        undispatched, then wait for it (``param_and_grad_buffer.py`` 322-332)."""
        if self._param_sync_due and not self._param_gather_dispatched:
            self.start_param_sync()
        works, self._pending_param_sync = self._pending_param_sync, []
        for w in works:
            w.wait()

    def forward_pre_hook(self) -> None:
        self.finish_param_sync()

    def forward(self, *args, **kwargs):
        self.forward_pre_hook()
        raise NotImplementedError("the fake GPTModel has no sharded forward; use fakes.nemo_rl.logprobs on the "
                                  "refitted HF state dict")

    __call__ = forward

    @property
    def param_sync_pending(self) -> bool:
        """An all-gather is in flight, or due and not dispatched: non-local DP slices are not current."""
        return bool(self._pending_param_sync) or self._param_sync_due

    def local_to_global_name(self, name: str) -> str:
        return self.info[name].global_name


# ============================================================================ distributed optimizer
class DistributedOptimizer:
    """fp32 main-param shards + synthetic gradient + the Megatron/TE param update, and the DP param all-gather
    dispatched where megatron-core 0.16.1 dispatches it:

    - ``overlap_param_gather=False``: synchronously at the end of the step (``distrib_optimizer.py``
      ``step_with_ready_grads`` 2617-2619);
    - ``overlap_param_gather=True`` (NeMo-RL's default): NOT in the step; the forward pre-hook's
      ``finish_param_sync`` dispatches and waits for it (``param_and_grad_buffer.py`` 322-332), so until the
      next forward the other ranks' slices of every parameter hold the previous step's values;
    - ``overlap_param_gather_with_optimizer_step=True``: dispatched asynchronously right after the step
      (``optimizer.py`` ``ChainedOptimizer.step_with_ready_grads`` 1247-1250), waited by the forward pre-hook.
    """

    def __init__(self, model: GPTModel, lr: float = 1.0, overlap_param_gather: Optional[bool] = None,
                 overlap_param_gather_with_optimizer_step: bool = False):
        self.model = model
        self.lr = float(lr)
        if overlap_param_gather is not None:
            model.overlap_param_gather = bool(overlap_param_gather)
        self.overlap_param_gather = model.overlap_param_gather
        self.with_optimizer_step = bool(overlap_param_gather_with_optimizer_step)
        if self.with_optimizer_step and not self.overlap_param_gather:
            raise ValueError("overlap_param_gather_with_optimizer_step needs overlap_param_gather")
        cfg = model.config
        self.master: Dict[Tuple[bool, torch.dtype], torch.Tensor] = {}
        for key, pb in model.param_buffers.items():
            self.master[key] = _main_shard(cfg, model.seed, pb.layout(model.info), 0, 1.0).to(model.device)

    def _master_view(self, info) -> torch.Tensor:
        pb = info.buffer
        lo, hi = info.local
        start = info.offset + lo - pb.dp_rank * pb.shard_size
        return self.master[(pb.is_expert, pb.dtype)][start:start + (hi - lo)]

    def step(self, step: int) -> None:
        """Apply the synthetic gradient of optimizer step `step` (0-based) and update the params."""
        model = self.model
        works, model._pending_param_sync = model._pending_param_sync, []
        for w in works:  # a gather still in flight must land before its slices are rewritten
            w.wait()
        cfg = model.config
        for key, pb in model.param_buffers.items():
            grad = _main_shard(cfg, model.seed, pb.layout(model.info), step, self.lr, grad=True)
            self.master[key].sub_(grad.to(model.device))
            if pb.dtype != torch.uint8:
                pb.local_view().copy_(self.master[key])
        fp8_infos = [info for info in model.info.values() if info.fp8]
        if fp8_infos and cfg.fp8_param_recipe in ("blockwise-pow2", "blockwise-fp32", "per-tensor"):
            for expert in (False, True):
                group = [i for i in fp8_infos if i.is_expert == expert]
                if group:
                    self._cast_master_weights_to_fp8(group)
        else:
            for info in fp8_infos:
                lo, hi = info.local
                self._update_fp8(info.module._params["weight"], self._master_view(info), info, lo, hi)
        if any(pb.dp_size > 1 for pb in model.param_buffers.values()):
            if not self.overlap_param_gather:
                model.start_param_sync(force_sync=True)
            elif self.with_optimizer_step:
                model.start_param_sync()
            else:
                model._param_sync_due, model._param_gather_dispatched = True, False

    def offload_state(self) -> None:
        """NeMo-RL ``offload_before_refit``: optimizer state to the CPU (a blocking device-to-host copy)."""
        self.master = {k: v.to("cpu") for k, v in self.master.items()}

    def reload_state(self) -> None:
        """NeMo-RL ``prepare_for_training``: optimizer state back to the GPU."""
        self.master = {k: v.to(self.model.device) for k, v in self.master.items()}

    # --- FP8 primary weights (TE cast_master_weights_to_fp8, per recipe)
    def _cast_master_weights_to_fp8(self, infos) -> None:
        """TE 2.5 ``cast_master_weights_to_fp8`` for the blockwise (``utils.py`` 333-455) and per-tensor
        current-scaling (225-330) recipes, over all FP8 params at once: each rank's partial amax of its main-param
        slice (per 128x128 tile / per tensor), ONE all-reduce(MAX) of the packed amaxes over the DP group (the
        per-tensor recipe here also over TP: one scale for the full weight, see the module docstring), new
        scale_inv for every tile, columnwise usage dropped, and only this rank's slice of the row-wise data
        re-cast (``fp8_block_scaling_partial_cast``); the DP param all-gather fills the other slices."""
        recipe = self.model.config.fp8_param_recipe
        fp8 = torch.float8_e4m3fn
        dev = self.model.device
        blockwise = recipe.startswith("blockwise")
        zs, amaxes = [], []
        for info in infos:
            m, k = info.shard_shape
            lo, hi = info.local
            if blockwise:
                z = torch.zeros(m * k, dtype=torch.float32, device=dev)
                if hi > lo:
                    z[lo:hi].copy_(self._master_view(info))
                zt = z.view(m // BLOCK, BLOCK, k // BLOCK, BLOCK)  # _check_fp8_tiling: whole tiles only
                amaxes.append(te._abs_ignoring_nan(zt).amax(dim=(1, 3)).reshape(-1))
                zs.append(zt)
            else:
                master = self._master_view(info)
                amaxes.append(te._abs_ignoring_nan(master).amax().reshape(1) if hi > lo
                              else torch.zeros(1, dtype=torch.float32, device=dev))
                zs.append(master)
        packed = torch.cat(amaxes)
        first = infos[0]
        if first.dp_size > 1:
            dist.all_reduce(packed, op=dist.ReduceOp.MAX, group=first.dp_group)
        if not blockwise and first.tp_size > 1:
            dist.all_reduce(packed, op=dist.ReduceOp.MAX, group=first.tp_group)
        scales = te._scale_from_amax(packed, te._FP8_MAX[fp8], recipe == "blockwise-pow2", 0.0,
                                     torch.finfo(torch.float32).max if blockwise else te._FLT_MAX)
        scale_invs = te._reciprocal(scales)
        off = 0
        for info, z in zip(infos, zs):
            param = info.module._params["weight"]
            m, k = info.shard_shape
            lo, hi = info.local
            if blockwise:
                mt, kt = m // BLOCK, k // BLOCK
                scale = scales[off:off + mt * kt].view(mt, kt)
                param._rowwise_scale_inv[:, :kt].copy_(scale_invs[off:off + mt * kt].view(mt, kt))
                off += mt * kt
                if hi > lo:
                    q = te._saturating_cast((z * scale[:, None, :, None]).reshape(-1)[lo:hi], fp8)
                    param._rowwise_data.view(-1)[lo:hi].copy_(q)
            else:
                param._scale_inv.copy_(scale_invs[off:off + 1].reshape(param._scale_inv.shape))
                if hi > lo:
                    param._data.view(-1)[lo:hi].copy_(te._saturating_cast(z * scales[off:off + 1].reshape(()),
                                                                          fp8))
                off += 1

    def _update_fp8(self, param, master, info, lo, hi):
        recipe = self.model.config.fp8_param_recipe
        fp8 = torch.float8_e4m3fn
        m, k = info.shard_shape
        dev = master.device
        if recipe == "per-tensor":
            amax = te._abs_ignoring_nan(master).amax().reshape(1) if hi > lo else torch.zeros(1, device=dev)
            if info.dp_size > 1:
                dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=info.dp_group)
            if info.tp_size > 1:  # one scale for the full weight (see module docstring)
                dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=info.tp_group)
            scale = te._scale_from_amax(amax, te._FP8_MAX[fp8], False, 0.0, te._FLT_MAX)
            param._scale_inv.copy_(te._reciprocal(scale.reshape(1)).reshape(param._scale_inv.shape))
            if hi > lo:
                param._data.view(-1)[lo:hi].copy_(te._saturating_cast(master * scale.reshape(()), fp8))
            return
        z = torch.zeros(m * k, dtype=torch.float32, device=dev)
        if hi > lo:
            z[lo:hi].copy_(master)
        if recipe.startswith("blockwise"):
            mt, kt = -(-m // BLOCK), -(-k // BLOCK)
            zp = F.pad(z.view(m, k), (0, kt * BLOCK - k, 0, mt * BLOCK - m)).view(mt, BLOCK, kt, BLOCK)
            amax = te._abs_ignoring_nan(zp).amax(dim=(1, 3))
            if info.dp_size > 1:
                dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=info.dp_group)
            scale = te._scale_from_amax(amax, te._FP8_MAX[fp8], recipe == "blockwise-pow2", 0.0,
                                        torch.finfo(torch.float32).max)
            param._rowwise_scale_inv[:, :kt].copy_(te._reciprocal(scale))
            per_elem = scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:m, :k].reshape(-1)
        elif recipe == "mxfp8":
            kb = k // MX_BLOCK
            amax = te._abs_ignoring_nan(z.view(m, kb, MX_BLOCK)).amax(dim=2)
            if info.dp_size > 1:
                dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=info.dp_group)
            e = te._float_to_e8m0(amax * te._FP8_MAX_RCP[fp8])
            param._rowwise_scale_inv[:m, :kb].copy_(e)
            per_elem = te._exp2f_rcp(e).repeat_interleave(MX_BLOCK, 1).reshape(-1)
        else:
            raise ValueError(recipe)
        if hi > lo:
            param._rowwise_data.view(-1)[lo:hi].copy_(te._saturating_cast(master * per_elem[lo:hi], fp8))


def optimizer_step(model: GPTModel, lr: float = 1.0, step: int = 0) -> None:
    """One DistributedOptimizer step on `model` (the optimizer is created on first use)."""
    opt = model._optimizer
    if opt is None or opt.lr != float(lr):
        if opt is not None:
            raise ValueError(f"optimizer_step: lr changed from {opt.lr} to {lr}")
        opt = model._optimizer = DistributedOptimizer(model, lr)
    opt.step(step)


_TE_BUFFER_ATTRS = {"rowwise_data": "_rowwise_data", "rowwise_scale_inv": "_rowwise_scale_inv",
                    "columnwise_data": "_columnwise_data", "columnwise_scale_inv": "_columnwise_scale_inv",
                    "data": "_data", "fp8_scale_inv": "_scale_inv", "data_transpose": "_transpose"}


@dataclass
class ParamBuffer:
    """One contiguous DP-sharded parameter buffer (Megatron DDP)."""

    dtype: torch.dtype
    is_expert: bool
    data: torch.Tensor
    dp_group: object
    dp_size: int
    dp_rank: int
    shard_size: int
    names: List[str]

    def local_view(self) -> torch.Tensor:
        return self.data[self.dp_rank * self.shard_size:(self.dp_rank + 1) * self.shard_size]

    def layout(self, info: Dict[str, "ParamInfo"]) -> tuple:
        """Hashable description of this rank's shard: (global name, kind, tp size, tp rank, offset, local range)."""
        return (self.dp_rank * self.shard_size, self.shard_size,
                tuple((info[n].global_name, info[n].kind, info[n].tp_size, info[n].tp_rank, info[n].offset,
                       info[n].local) for n in self.names))


def _shard_shape(cfg, global_name, kind, tp_size) -> Tuple[int, ...]:
    shape = canonical_shape(cfg.without_parallelism(), global_name)
    if tp_size == 1 or kind == "replicated":
        return tuple(shape)
    if kind in ("column", "qkv", "fc1"):
        return (shape[0] // tp_size,) + tuple(shape[1:])
    return (shape[0], shape[1] // tp_size)


@functools.lru_cache(maxsize=4096)
def _initial_shard(cfg, seed, global_name, kind, tp_size, tp_rank, fp8):
    """This TP rank's initial parameter on the CPU, cached (it does not depend on the schedule): the
    params_dtype tensor, or for an FP8 primary weight the recipe's raw buffers, quantized exactly as the
    full-weight reference is (per-tensor: one scale for the full weight; block recipes: the shard's tiles
    are tiles of the full weight)."""
    full = canonical_master(cfg, seed, global_name, 0)
    shard = shard_canonical(full, kind, tp_size, tp_rank)
    if not fp8:
        return shard.to(cfg.params_dtype), None
    recipe = cfg.fp8_param_recipe
    cpu = torch.device("cpu")
    if recipe == "per-tensor":
        qf = _quantized_full(cfg, seed, global_name)
        data = shard_canonical(qf._data.view(full.shape), kind, tp_size, tp_rank)
        return None, {"data": data.contiguous(), "fp8_scale_inv": qf._scale_inv.clone()}
    q = make_quantizer(recipe, cpu).quantize(shard, dtype=cfg.params_dtype)
    return None, {k: v.clone() for k, v in q._buffers().items() if v is not None}


@functools.lru_cache(maxsize=1024)
def _quantized_full(cfg, seed, global_name):
    full = canonical_master(cfg, seed, global_name, 0)
    return make_quantizer(cfg.fp8_param_recipe, torch.device("cpu")).quantize(full, dtype=cfg.params_dtype)


@functools.lru_cache(maxsize=1024)
def _main_shard(cfg, seed, layout, step, lr, grad=False):
    """This DP rank's fp32 main-param shard of one buffer (CPU, cached): the canonical masters at `step`, or
    with `grad` the synthetic gradient of step `step` times `lr` (so ``master - grad`` rounds exactly as
    ``canonical_master`` does)."""
    start, size, params = layout
    out = torch.zeros(size, dtype=torch.float32)
    for gname, kind, tp_size, tp_rank, offset, (lo, hi) in params:
        if hi <= lo:
            continue
        if grad:
            src = _grad_full(cfg.without_parallelism(), seed, step, gname) * lr
        else:
            src = canonical_master(cfg, seed, gname, step)
        flat = shard_canonical(src, kind, tp_size, tp_rank).reshape(-1)
        out[offset + lo - start:offset + hi - start] = flat[lo:hi]
    return out


# ============================================================================ the no-parallelism reference
def hf_names_of(cfg: TransformerConfig, global_name: str) -> List[str]:
    """HF (Llama / Qwen-MoE) names produced by one global Megatron parameter, in split order."""
    m = re.match(r"decoder\.layers\.(\d+)\.(.*)$", global_name)
    if global_name == "embedding.word_embeddings.weight":
        return ["model.embed_tokens.weight"]
    if global_name == "output_layer.weight":
        return ["lm_head.weight"]
    if global_name == "decoder.final_layernorm.weight":
        return ["model.norm.weight"]
    if not m:
        raise KeyError(global_name)
    p, rest = f"model.layers.{m.group(1)}.", m.group(2)
    e = re.match(r"mlp\.experts\.local_experts\.(\d+)\.(linear_fc1|linear_fc2)\.weight$", rest)
    if e:
        q = p + f"mlp.experts.{e.group(1)}."
        if e.group(2) == "linear_fc1":
            return [q + "gate_proj.weight", q + "up_proj.weight"]
        return [q + "down_proj.weight"]
    table = {
        "input_layernorm.weight": ["input_layernorm.weight"],
        "pre_mlp_layernorm.weight": ["post_attention_layernorm.weight"],
        "self_attention.linear_qkv.weight": ["self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                             "self_attn.v_proj.weight"],
        "self_attention.linear_proj.weight": ["self_attn.o_proj.weight"],
        "mlp.linear_fc1.weight": ["mlp.gate_proj.weight", "mlp.up_proj.weight"],
        "mlp.linear_fc2.weight": ["mlp.down_proj.weight"],
        "mlp.router.weight": ["mlp.gate.weight"],
    }
    return [p + n for n in table[rest]]


def reference_weight(cfg: TransformerConfig, seed: int, global_name: str, step: int = 0,
                     lr: float = 1.0) -> torch.Tensor:
    """The clean value of one Megatron parameter (canonical layout, CPU, params_dtype) after `step` steps:
    the fp32 master cast to params_dtype, or for FP8 primary weights dequantize(quantize(FULL master))."""
    master = canonical_master(cfg, seed, global_name, step, lr)
    if is_fp8_param(cfg, global_name):
        q = make_quantizer(cfg.fp8_param_recipe, torch.device("cpu"))
        return q.quantize(master, dtype=cfg.params_dtype).dequantize(dtype=cfg.params_dtype)
    return master.to(cfg.params_dtype)


@functools.lru_cache(maxsize=64)
def _reference_hf(cfg: TransformerConfig, seed: int, step: int, lr: float):
    out = {}
    for gname in global_param_names(cfg):
        w = reference_weight(cfg, seed, gname, step, lr)
        names = hf_names_of(cfg, gname)
        kind = param_kind(gname)
        if kind == "qkv":
            parts = split_qkv_weights(cfg, w)
        elif kind == "fc1":
            parts = torch.chunk(w, 2, dim=0)
        else:
            parts = (w,)
        for n, t in zip(names, parts):
            out[n] = t.contiguous()
    return out


def reference_hf_state_dict(config: TransformerConfig, seed: int = 0, step: int = 0,
                            lr: float = 1.0) -> Dict[str, torch.Tensor]:
    """HF state dict (CPU, no parallelism) the refit after `step` optimizer steps must reproduce bit-exactly.

    Independent of the parallel layout: built from the canonical full fp32 masters; FP8 primary weights are
    dequantize(quantize(full weight)) with the recipe's quantizer."""
    return dict(_reference_hf(config.without_parallelism(), int(seed), int(step), float(lr)))
