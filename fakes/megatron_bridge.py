"""Fake of Megatron-Bridge's Megatron -> HF conversion (as used by NeMo-RL refit), as ordinary torch code.

Mirrors ``src/megatron/bridge/models/conversion/param_mapping.py`` and ``model_bridge.py`` (names and call
contracts; no code copied). Per parameter ("conversion task"), in this order:

1. PP broadcast from the owning stage (``broadcast_from_pp_rank``, Bridge 0.3.1 ``param_mapping.py`` 293-373).
   Skipped when PP=1. The first export ``all_gather_object``-s (shape, dtype, tensor_model_parallel,
   partition_dim) over the PP group, cached per task; non-owners allocate a plain ``torch.empty`` of that shape
   and dtype and receive ``broadcast(src=owner)``; an FP8 owner passes its TE tensor as is, which TE's
   ``__torch_dispatch__`` turns into a broadcast of a dequantized temporary (bf16 values arrive).
2. Dequantize if the weight is a TE ``QuantizedTensor``: ``t.dequantize(dtype=t.dtype)`` on the current stream.
   QKV is the exception: it is dequantized on the owner first, before the PP step.
3. TP gather with the list form ``all_gather([empty_like(t)] * n, t, group=tp)``, ``async_op=False``.
4. concat / split: column-parallel dim 0, row-parallel dim 1, QKV split per query group, gated MLP chunked
   per shard into [gate; up].
5. EP gather for expert weights (``all_gather`` over the EP group); HF expert id = local + experts_per_rank x ep_rank.

There is no stream, event or synchronize anywhere in this path (as in the real code) unless a fault or a fix
asks for one. Every rank walks the same list of tasks (global names over all PP stages, sorted), so collectives
match; with EP each rank's list names its own experts at the same positions (as in Megatron-Bridge).
``AutoMapping`` picks column/row/replicated from the parameter name (the real one asks the module class and
broadcasts the answer over PP; the name rule gives the same answer here without the object collective).

Fault switches that act here (``faults=`` of ``MegatronModelBridge``, ``GPTModel`` or
``fakes.nemo_rl.grpo_refit_loop``; each drops one ordering edge; where it lives in the real code, or that it is
hypothetical, is ``simdist.properties.hunt.CANDIDATES``):

- ``dequant_side_stream``: blockwise FP8 ``dequantize`` on a side stream (which waits once for the params); its
  consumer (TP all-gather, PP broadcast, or the refit's pack copy at TP=1) runs without waiting. Hypothetical
  (the incident reporter's suspicion); fix ``side_stream_wait``.
- ``no_record_stream``: the same side stream, waited for, but its output is not ``record_stream``-ed, so its
  freed block is reused while the consumer may still read it. Hypothetical; fix ``side_stream_wait``.
- ``async_gather_no_wait``: TP ``all_gather(..., async_op=True)`` whose outputs the concat reads before
  ``work.wait()``. Hypothetical; fix ``gather_wait``.

Fixes that act here (``fixes=``): ``side_stream_wait`` (``current.wait_stream(side)`` + ``record_stream``),
``gather_wait``, ``synchronize_after_dequantize`` (the reporter's workaround). The other switches act in
``fakes.megatron_core`` (the DP param all-gather) and ``fakes.nemo_rl`` (the refit hand-off). The fault
``pp_broadcast_dequantized_temp`` of earlier versions is retired (``megatron_core.RETIRED_FAULTS``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import torch
import torch.distributed as dist

from . import cuda
from . import megatron_core as mc
from . import transformer_engine as te

__all__ = [
    "MegatronParamMapping", "DirectMapping", "ColumnParallelMapping", "RowParallelMapping", "ReplicatedMapping",
    "AutoMapping", "QKVMapping", "GatedMLPMapping", "ExpertColumnParallelMapping", "ExpertRowParallelMapping",
    "ExpertGatedMLPMapping", "MegatronMappingRegistry", "WeightConversionTask", "MegatronModelBridge",
    "LlamaBridge", "split_qkv_weights", "merge_qkv_weights", "RefitContext", "quant_recipe_of",
]


# ============================================================================ helpers
def _pg_rank(group) -> int:
    return 0 if group is None else dist.get_rank(group=group)


def _pg_size(group) -> int:
    return 1 if group is None else dist.get_world_size(group=group)


def quant_recipe_of(t) -> Optional[str]:
    """The recipe name of a TE quantized tensor (None for a plain tensor)."""
    if isinstance(t, te.Float8BlockwiseQTensor):
        q = t._quantizer
        return "blockwise-pow2" if (q is None or q.force_pow_2_scales) else "blockwise-fp32"
    if isinstance(t, te.Float8Tensor):
        return "per-tensor"
    if isinstance(t, te.MXFP8Tensor):
        return "mxfp8"
    if isinstance(t, te.QuantizedTensor):
        raise TypeError(f"unknown quantized tensor type {type(t).__name__}")
    return None


split_qkv_weights = mc.split_qkv_weights
merge_qkv_weights = mc.merge_qkv_weights


class RefitContext:
    """Per-bridge (so per-rank) state the fault switches need: the fault set, a side stream, pending works."""

    def __init__(self, faults=frozenset(), fixes=frozenset()):
        self.faults = mc.check_faults(faults)
        self.fixes = mc.check_fixes(fixes)
        self._side = None
        self.params_ready = None
        self.pending: List = []

    def side_stream(self):
        if self._side is None:
            self._side = cuda.Stream()
        return self._side

    def mark_params_ready(self):
        """Record where the params are final on the current stream (a side stream waits for this once)."""
        if {"dequant_side_stream", "no_record_stream"} & self.faults:
            self.params_ready = cuda.Event()
            self.params_ready.record()

    def finish_pending(self):
        works, self.pending = self.pending, []
        for w in works:
            w.wait()


_NO_FAULTS = RefitContext()


# ============================================================================ mappings
class MegatronParamMapping:
    """Base of all mappings: PP broadcast, TP / EP gathers, dequantize (see module docstring)."""

    def __init__(self, megatron_param: str, hf_param: Union[str, Dict[str, str]]):
        self.megatron_param = megatron_param
        self.hf_param = hf_param
        self._broadcast_obj_cache: Dict[str, Any] = {}
        self._tensor_spec_output_cache: Dict[str, Any] = {}
        self.ctx: RefitContext = _NO_FAULTS
        if mc.model_parallel_is_initialized():
            self.pp_group = mc.get_pipeline_model_parallel_group()
            self.ep_group = mc.get_expert_model_parallel_group()
            self._tp_group = mc.get_tensor_model_parallel_group()
            self._etp_group = mc.get_expert_tensor_parallel_group()
        else:
            self.pp_group = self.ep_group = self._tp_group = self._etp_group = None

    # --- groups
    @property
    def is_expert(self) -> bool:
        return ".experts.linear_fc" in self.megatron_param or ".experts.local_experts." in self.megatron_param

    @property
    def tp_group(self):
        return self._etp_group if self.is_expert else self._tp_group

    @property
    def tp_rank(self) -> int:
        return _pg_rank(self.tp_group)

    @property
    def tp_size(self) -> int:
        return _pg_size(self.tp_group)

    @property
    def pp_rank(self) -> int:
        return _pg_rank(self.pp_group)

    @property
    def pp_size(self) -> int:
        return _pg_size(self.pp_group)

    @property
    def ep_rank(self) -> int:
        return _pg_rank(self.ep_group)

    @property
    def ep_size(self) -> int:
        return _pg_size(self.ep_group)

    def with_context(self, ctx: RefitContext) -> "MegatronParamMapping":
        self.ctx = ctx
        for v in vars(self).values():
            if isinstance(v, MegatronParamMapping):
                v.with_context(ctx)
        return self

    def _get_config(self, module):
        if module is None or not hasattr(module, "config"):
            raise ValueError(f"no config on module {type(module).__name__} for {self.megatron_param}")
        return module.config

    # --- contracts
    def megatron_to_hf(self, megatron_weights: Optional[torch.Tensor], megatron_module) -> Dict[str, torch.Tensor]:
        raise NotImplementedError

    def hf_to_megatron(self, hf_weights, megatron_module):
        raise NotImplementedError("the fake bridge only exports (Megatron -> HF)")

    def resolve(self, captures: Tuple[str, ...]) -> "MegatronParamMapping":
        mp, hp = _resolve(self.megatron_param, self.hf_param, captures)
        return type(self)(mp, hp)

    # --- PP
    def broadcast_obj_from_pp_rank(self, obj: Any, cache_key: Optional[str] = None) -> Any:
        if self.pp_size == 1:
            return obj
        if cache_key is not None and cache_key in self._broadcast_obj_cache:
            return self._broadcast_obj_cache[cache_key]
        flags = [None] * self.pp_size
        dist.all_gather_object(flags, obj is not None, group=self.pp_group)
        src = next((i for i, f in enumerate(flags) if f), None)
        if src is None:
            raise ValueError(f"object must exist on at least one PP rank ({self.megatron_param}, {cache_key})")
        lst = [obj]
        dist.broadcast_object_list(lst, src=dist.get_global_rank(self.pp_group, src), group=self.pp_group)
        if cache_key is not None:
            self._broadcast_obj_cache[cache_key] = lst[0]
        return lst[0]

    def broadcast_from_pp_rank(self, tensor: Optional[torch.Tensor], cache_key: Optional[str] = None):
        """Broadcast the weight from the PP stage that owns it to every PP rank, as Megatron-Bridge 0.3.1 does
        (``param_mapping.py`` 293-373): the first call per task all-gathers (shape, dtype, tensor_model_parallel,
        partition_dim) with ``all_gather_object`` and caches it; non-owners allocate a plain ``torch.empty``
        of that shape and dtype and receive ``broadcast(src=owner)``. For an FP8 parameter the owner passes
        its TE tensor as is: ``c10d.broadcast_`` is a mutable op, so TE 2.5's ``__torch_dispatch__``
        (``quantized_tensor.py`` 444-452) broadcasts a dequantized temporary; its write-back checks
        ``isinstance(arg, QuantizedTensor)`` on the op's tensor-LIST argument and so writes nothing back. The
        non-owners receive the nominal-dtype (bf16) values and have nothing left to dequantize."""
        if self.pp_size == 1:
            return tensor
        if cache_key is not None and cache_key in self._tensor_spec_output_cache:
            specs = self._tensor_spec_output_cache[cache_key]
        else:
            spec = None
            if tensor is not None:
                spec = (tuple(tensor.shape), tensor.dtype, getattr(tensor, "tensor_model_parallel", None),
                        getattr(tensor, "partition_dim", None))
            specs = [None] * self.pp_size
            dist.all_gather_object(specs, spec, group=self.pp_group)
            self._tensor_spec_output_cache[cache_key] = specs
        src = next((i for i, s in enumerate(specs) if s is not None), None)
        if src is None:
            raise ValueError(f"object must exist on at least one PP rank: megatron_param={self.megatron_param}")
        shape, dtype, _tp_flag, _pdim = specs[src]
        global_src = dist.get_global_rank(self.pp_group, src)
        if tensor is None:
            tensor = torch.empty(shape, dtype=dtype, device=mc.current_device())
        wire = tensor.dequantize(dtype=tensor.dtype) if isinstance(tensor, te.QuantizedTensor) else tensor
        dist.broadcast(wire, src=global_src, group=self.pp_group)
        return tensor

    # --- dequantize
    def maybe_dequantize(self, tensor: torch.Tensor) -> torch.Tensor:
        out = self._dequantize(tensor)
        if out is not tensor and "synchronize_after_dequantize" in self.ctx.fixes:
            cuda.synchronize()  # the incident reporter's workaround (NeMo-RL #1164)
        return out

    def _dequantize(self, tensor: torch.Tensor) -> torch.Tensor:
        """``t.dequantize(dtype=t.dtype)`` on the current stream (Bridge 0.3.1 ``param_mapping.py`` 709-713;
        TE 2.5's blockwise dequantize is plain torch ops on the current stream). The side-stream variants are
        the hypothetical faults ``dequant_side_stream`` / ``no_record_stream`` and the fix
        ``side_stream_wait``."""
        if not isinstance(tensor, te.QuantizedTensor):
            return tensor
        faults = self.ctx.faults
        if isinstance(tensor, te.Float8BlockwiseQTensor) and {"dequant_side_stream", "no_record_stream"} & faults:
            cur = cuda.current_stream()
            side = self.ctx.side_stream()
            if self.ctx.params_ready is not None:
                side.wait_event(self.ctx.params_ready)
            else:
                side.wait_stream(cur)
            with cuda.stream(side):
                out = tensor.dequantize(dtype=tensor.dtype)
            if "dequant_side_stream" not in faults or "side_stream_wait" in self.ctx.fixes:
                cur.wait_stream(side)
            if "side_stream_wait" in self.ctx.fixes:
                cuda.record_stream(out, cur)  # the consumer's use defers the reuse of the output's block
            return out
        return tensor.dequantize(dtype=tensor.dtype)

    # --- TP / EP
    def gather_from_tp_ranks(self, tensor: torch.Tensor) -> List[torch.Tensor]:
        if self.tp_size == 1:
            return [tensor]
        gathered = [torch.empty_like(tensor) for _ in range(self.tp_size)]
        if "async_gather_no_wait" in self.ctx.faults:
            work = dist.all_gather(gathered, tensor, group=self.tp_group, async_op=True)
            if "gather_wait" in self.ctx.fixes:
                work.wait()
            else:
                self.ctx.pending.append(work)
        else:
            dist.all_gather(gathered, tensor, group=self.tp_group)
        return gathered

    def gather_from_ep_ranks(self, megatron_weights, megatron_module, hf_param_name) -> Dict[str, torch.Tensor]:
        if self.ep_size == 1:
            return {str(hf_param_name): megatron_weights}
        if megatron_module is None:
            per_rank = self.broadcast_obj_from_pp_rank(None, "num_experts_per_rank")
        else:
            per_rank = self._get_config(megatron_module).num_moe_experts // self.ep_size
            per_rank = self.broadcast_obj_from_pp_rank(per_rank, "num_experts_per_rank")
        m = re.search(r"(?:local_experts\.|weight)(\d+)", self.megatron_param)
        local = int(m.group(1)) % per_rank
        names = [re.sub(r"experts\.(\d+)", f"experts.{local + per_rank * i}", str(hf_param_name))
                 for i in range(self.ep_size)]
        gathered = [torch.empty_like(megatron_weights) for _ in range(self.ep_size)]
        dist.all_gather(gathered, megatron_weights, group=self.ep_group)
        return dict(zip(names, gathered))


def _resolve(megatron_param, hf_param, captures):
    def fill(pattern):
        out = pattern
        for c in captures:
            out = out.replace("*", c, 1)
        return out
    if isinstance(hf_param, str):
        return fill(megatron_param), fill(hf_param)
    return fill(megatron_param), {k: fill(v) for k, v in hf_param.items()}


class DirectMapping(MegatronParamMapping):
    def megatron_to_hf(self, megatron_weights, megatron_module):
        w = self.broadcast_from_pp_rank(megatron_weights, cache_key=str(self.hf_param))
        if w is None:
            return {}
        return {str(self.hf_param): self.maybe_dequantize(w)}


class _ShardedMapping(MegatronParamMapping):
    concat_dim = 0

    def megatron_to_hf(self, megatron_weights, megatron_module):
        w = self.broadcast_from_pp_rank(megatron_weights, cache_key=str(self.hf_param))
        if w is None:
            return {}
        w = self.maybe_dequantize(w)
        if self.tp_size == 1 or (self.concat_dim == 1 and w.dim() == 1):
            full = w
        else:
            full = torch.cat(self.gather_from_tp_ranks(w), dim=self.concat_dim)
            self.ctx.finish_pending()
        if self.is_expert:
            return self.gather_from_ep_ranks(full, megatron_module, self.hf_param)
        return {str(self.hf_param): full}


class ColumnParallelMapping(_ShardedMapping):
    """Sharded on dim 0 (embeddings, output layer, column-parallel linears)."""

    concat_dim = 0


class RowParallelMapping(_ShardedMapping):
    """Sharded on dim 1 (linear_proj, linear_fc2)."""

    concat_dim = 1


class ReplicatedMapping(MegatronParamMapping):
    """Identical on every TP rank (norms, router)."""

    def megatron_to_hf(self, megatron_weights, megatron_module):
        w = self.broadcast_from_pp_rank(megatron_weights, cache_key=str(self.hf_param))
        if w is None:
            return {}
        w = self.maybe_dequantize(w)
        if self.is_expert:
            return self.gather_from_ep_ranks(w, megatron_module, self.hf_param)
        return {str(self.hf_param): w}


class ExpertColumnParallelMapping(ColumnParallelMapping):
    def __init__(self, megatron_param, hf_param):
        super().__init__(megatron_param, hf_param)
        if not self.is_expert:
            raise ValueError(f"{megatron_param} is not an expert parameter")


class ExpertRowParallelMapping(RowParallelMapping):
    def __init__(self, megatron_param, hf_param):
        super().__init__(megatron_param, hf_param)
        if not self.is_expert:
            raise ValueError(f"{megatron_param} is not an expert parameter")


def detect_parallelism(megatron_param: str, module=None) -> str:
    """column / row / replicated from the parameter name (module attributes as a fallback)."""
    name = megatron_param
    if name.endswith(("layernorm.weight", "layer_norm_weight", "norm.weight", "router.weight")):
        return "replicated"
    if re.search(r"(linear_proj|linear_fc2)\.weight\d*$", name):
        return "row"
    if re.search(r"(linear_qkv|linear_fc1)\.weight\d*$", name) or name.endswith(
            ("word_embeddings.weight", "output_layer.weight")):
        return "column"
    if module is not None and hasattr(module, "tensor_model_parallel"):
        if not module.tensor_model_parallel:
            return "replicated"
        return {0: "column", 1: "row"}.get(getattr(module, "partition_dim", None), "replicated")
    raise ValueError(f"cannot determine the parallelism of {megatron_param!r}: use an explicit mapping")


class AutoMapping(MegatronParamMapping):
    """Delegates to Column/Row/Replicated mapping by parameter name."""

    _KINDS = {"column": ColumnParallelMapping, "row": RowParallelMapping, "replicated": ReplicatedMapping}

    def __init__(self, megatron_param: str, hf_param: str):
        super().__init__(megatron_param, hf_param)
        self._mapping: Optional[MegatronParamMapping] = None
        self._detected_type: Optional[str] = None

    def _delegate(self, module=None):
        if self._mapping is None:
            self._detected_type = detect_parallelism(self.megatron_param, module)
            self._mapping = self._KINDS[self._detected_type](self.megatron_param, self.hf_param).with_context(self.ctx)
        return self._mapping

    def megatron_to_hf(self, megatron_weights, megatron_module):
        return self._delegate(megatron_module).megatron_to_hf(megatron_weights, megatron_module)


class QKVMapping(MegatronParamMapping):
    """Fused QKV (per query group [q x heads_per_group, k, v]) <-> HF q_proj, k_proj, v_proj."""

    def __init__(self, megatron_param: str, q: str = None, k: str = None, v: str = None, **kw):
        if isinstance(q, dict):
            q, k, v = q["q"], q["k"], q["v"]
        super().__init__(megatron_param, {"q": q, "k": k, "v": v})
        self._tp_mapping = AutoMapping(megatron_param, megatron_param)

    def resolve(self, captures):
        mp, hp = _resolve(self.megatron_param, self.hf_param, captures)
        return type(self)(mp, hp["q"], hp["k"], hp["v"])

    def megatron_to_hf(self, megatron_weights, megatron_module):
        if megatron_weights is not None:
            megatron_weights = self.maybe_dequantize(megatron_weights)  # on the owner, before the PP broadcast
        config = self._get_config(megatron_module) if megatron_module is not None else None
        config = self.broadcast_obj_from_pp_rank(config, "qkv_config")
        packed = self._tp_mapping.megatron_to_hf(megatron_weights, megatron_module)
        if not packed:
            return {}
        q, k, v = split_qkv_weights(config, next(iter(packed.values())))
        return {self.hf_param["q"]: q, self.hf_param["k"]: k, self.hf_param["v"]: v}


class GatedMLPMapping(MegatronParamMapping):
    """Fused gated fc1 ([gate_r; up_r] per TP shard) <-> HF gate_proj, up_proj (experts: gathered over EP)."""

    def __init__(self, megatron_param: str, gate: str = None, up: str = None):
        if isinstance(gate, dict):
            gate, up = gate["gate"], gate["up"]
        super().__init__(megatron_param, {"gate": gate, "up": up})

    def resolve(self, captures):
        mp, hp = _resolve(self.megatron_param, self.hf_param, captures)
        return type(self)(mp, hp["gate"], hp["up"])

    def megatron_to_hf(self, megatron_weights, megatron_module):
        w = self.broadcast_from_pp_rank(megatron_weights, cache_key=str(self.hf_param))
        if w is None:
            return {}
        w = self.maybe_dequantize(w)
        if self.tp_size == 1:
            gate, up = torch.chunk(w, 2, dim=0)
        else:
            shards = self.gather_from_tp_ranks(w)
            parts = [torch.chunk(s, 2, dim=0) for s in shards]
            gate = torch.cat([p[0] for p in parts], dim=0)
            up = torch.cat([p[1] for p in parts], dim=0)
            self.ctx.finish_pending()
        if self.is_expert:
            out = self.gather_from_ep_ranks(gate, megatron_module, self.hf_param["gate"])
            out.update(self.gather_from_ep_ranks(up, megatron_module, self.hf_param["up"]))
            return out
        return {self.hf_param["gate"]: gate, self.hf_param["up"]: up}


class ExpertGatedMLPMapping(GatedMLPMapping):
    def __init__(self, megatron_param, gate=None, up=None):
        super().__init__(megatron_param, gate, up)
        if not self.is_expert:
            raise ValueError(f"{megatron_param} is not an expert parameter")


# ============================================================================ registry and bridge
class MegatronMappingRegistry:
    """Pattern ("*" = a number) -> mapping; ``megatron_to_hf_lookup`` resolves a global name."""

    def __init__(self, *mappings: MegatronParamMapping):
        self.mappings = list(mappings)
        self._regex = [re.compile("^" + re.escape(m.megatron_param).replace(r"\*", r"(\d+)") + "$")
                       for m in self.mappings]

    def megatron_to_hf_lookup(self, megatron_param: str) -> Optional[MegatronParamMapping]:
        for rx, m in zip(self._regex, self.mappings):
            hit = rx.match(megatron_param)
            if hit:
                return m.resolve(hit.groups())
        return None

    def __len__(self):
        return len(self.mappings)


@dataclass
class WeightConversionTask:
    param_name: str                 # global Megatron name
    mapping: MegatronParamMapping
    param_weight: Optional[torch.Tensor] = None   # None on ranks that do not own it
    megatron_module: Any = None
    local_param_name: Optional[str] = None
    vp_stage: int = 0


def _sort_key(name: str):
    if name.startswith("embedding."):
        return (0, 0, -1, name)
    m = re.match(r"decoder\.layers\.(\d+)\.(.*)$", name)
    if m:
        e = re.search(r"local_experts\.(\d+)\.", m.group(2))
        return (1, int(m.group(1)), int(e.group(1)) if e else -1, m.group(2))
    return (2, 0, -1, name)


class MegatronModelBridge:
    """Builds conversion tasks over all global parameter names and exports HF weights."""

    def __init__(self, faults=frozenset(), fixes=frozenset()):
        self.faults = mc.check_faults(faults)
        self.ctx = RefitContext(self.faults, fixes)
        self._tasks: Dict[int, List[WeightConversionTask]] = {}
        self._cached_param_names: Dict[int, List[str]] = {}

    def mapping_registry(self) -> MegatronMappingRegistry:
        raise NotImplementedError

    def _local_to_global(self, model, local_name: str) -> str:
        if hasattr(model, "info") and local_name in model.info:
            return model.info[local_name].global_name
        return local_name

    def _megatron_global_param_names_all_pp_ranks(self, model) -> List[str]:
        key = id(model)
        if key in self._cached_param_names:
            return self._cached_param_names[key]
        names = [self._local_to_global(model, n) for n, _ in model.named_parameters()]
        if mc.get_pipeline_model_parallel_world_size() > 1:
            gathered = [None] * mc.get_pipeline_model_parallel_world_size()
            dist.all_gather_object(gathered, names, group=mc.get_pipeline_model_parallel_group())
            names = sorted(set(sum(gathered, [])), key=_sort_key)
        else:
            names = sorted(set(names), key=_sort_key)
        self._cached_param_names[key] = names
        return names

    def build_conversion_tasks(self, model) -> List[WeightConversionTask]:
        """One task per global parameter name (cached per model: built once, reused every refit)."""
        key = id(model)
        if key in self._tasks:
            return self._tasks[key]
        registry = self.mapping_registry()
        local = {}
        for n, t in model.named_parameters():
            local[self._local_to_global(model, n)] = (n, t)
        tasks = []
        for gname in self._megatron_global_param_names_all_pp_ranks(model):
            mapping = registry.megatron_to_hf_lookup(gname)
            if mapping is None:
                raise ValueError(f"no mapping for megatron_param {gname!r}")
            mapping.with_context(self.ctx)
            if gname in local:
                lname, t = local[gname]
                module = model.get_submodule(lname.rsplit(".", 1)[0])
                tasks.append(WeightConversionTask(gname, mapping, t, module, lname))
            else:
                tasks.append(WeightConversionTask(gname, mapping))
        self._tasks[key] = tasks
        return tasks

    def export_hf_weights(self, model, cpu: bool = False,
                          conversion_tasks: Optional[List[WeightConversionTask]] = None
                          ) -> Iterator[Tuple[str, torch.Tensor]]:
        """Yield (hf_name, full tensor) for every HF weight, on every rank."""
        tasks = conversion_tasks if conversion_tasks is not None else self.build_conversion_tasks(model)
        self.ctx.faults = self.faults | mc.check_faults(getattr(model, "faults", frozenset()))
        self.ctx.mark_params_ready()
        for task in tasks:
            converted = task.mapping.megatron_to_hf(task.param_weight, task.megatron_module)
            for name, t in converted.items():
                yield name, (t.cpu() if cpu else t)
        self.ctx.finish_pending()

    stream_weights_megatron_to_hf = export_hf_weights


class LlamaBridge(MegatronModelBridge):
    """Megatron GPT (Llama layout, optional MoE) <-> HF Llama / Qwen-MoE names."""

    def mapping_registry(self) -> MegatronMappingRegistry:
        L = "decoder.layers.*."
        H = "model.layers.*."
        return MegatronMappingRegistry(
            AutoMapping("embedding.word_embeddings.weight", "model.embed_tokens.weight"),
            AutoMapping("output_layer.weight", "lm_head.weight"),
            AutoMapping("decoder.final_layernorm.weight", "model.norm.weight"),
            AutoMapping(L + "input_layernorm.weight", H + "input_layernorm.weight"),
            AutoMapping(L + "pre_mlp_layernorm.weight", H + "post_attention_layernorm.weight"),
            QKVMapping(L + "self_attention.linear_qkv.weight", H + "self_attn.q_proj.weight",
                       H + "self_attn.k_proj.weight", H + "self_attn.v_proj.weight"),
            AutoMapping(L + "self_attention.linear_proj.weight", H + "self_attn.o_proj.weight"),
            GatedMLPMapping(L + "mlp.linear_fc1.weight", H + "mlp.gate_proj.weight", H + "mlp.up_proj.weight"),
            AutoMapping(L + "mlp.linear_fc2.weight", H + "mlp.down_proj.weight"),
            AutoMapping(L + "mlp.router.weight", H + "mlp.gate.weight"),
            ExpertGatedMLPMapping(L + "mlp.experts.local_experts.*.linear_fc1.weight",
                                  H + "mlp.experts.*.gate_proj.weight", H + "mlp.experts.*.up_proj.weight"),
            ExpertRowParallelMapping(L + "mlp.experts.local_experts.*.linear_fc2.weight",
                                     H + "mlp.experts.*.down_proj.weight"),
        )


def hf_param_names(config) -> List[str]:
    """Every HF weight name of the model (Llama / Qwen-MoE naming)."""
    names = ["model.embed_tokens.weight"]
    for i in range(config.num_layers):
        p = f"model.layers.{i}."
        names += [p + "input_layernorm.weight", p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                  p + "self_attn.v_proj.weight", p + "self_attn.o_proj.weight", p + "post_attention_layernorm.weight"]
        if config.is_moe:
            names.append(p + "mlp.gate.weight")
            for e in range(config.num_moe_experts):
                names += [p + f"mlp.experts.{e}.{w}_proj.weight" for w in ("gate", "up", "down")]
        else:
            names += [p + f"mlp.{w}_proj.weight" for w in ("gate", "up", "down")]
    return names + ["model.norm.weight", "lm_head.weight"]
