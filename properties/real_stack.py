"""The hunt's refit program on the real stack: ``simdist hunt --stack real`` (``refit_program(stack="real")``).

What runs real (the versions installed here: megatron-core 0.16.1, megatron-bridge 0.3.1):

* Megatron-Core: ``parallel_state.initialize_model_parallel`` (TP x PP x DP groups in module globals: ranks
  must be processes), ``GPTModel`` with the local (no TE, no Apex) layer spec -- VocabParallelEmbedding,
  ColumnParallelLinear QKV with Megatron's per-query-group [q x heads_per_group, k, v] rows, RowParallelLinear
  projections, gated SiLU MLP, RMSNorm (torch's), RoPE, a vocab-parallel output layer -- on PP stages;
  ``DistributedDataParallel(overlap_grad_reduce=True, overlap_param_gather=True,
  use_distributed_optimizer=True)`` with its contiguous param/grad buffers, bucketed async reduce-scatters fired
  by the backward hooks and async param all-gathers dispatched by the forward pre-hooks; the distributed
  optimizer from ``get_megatron_optimizer`` (Adam: torch's AdamW without TE/Apex; bf16 params in
  ``Float16Module``, fp32 main-param shards); forward passes
  through Megatron's pipeline schedule (``get_forward_backward_func``, P2P between stages at PP=2).
* Megatron-Bridge: ``AutoBridge.from_hf_pretrained`` on a tiny HF Llama checkpoint written at set-up (the
  step-0 weights), ``get_conversion_tasks`` once, then ``export_hf_weights(model, conversion_tasks=...)`` per
  refit group: the real LlamaBridge mapping registry, QKVMapping / GatedMLPMapping / AutoMapping, the PP
  broadcast (``all_gather_object`` of the metadata, then ``broadcast``), TP ``all_gather`` and the
  concat/split. Its package ``__init__`` files are skipped (``_import_bridge``): they import every model
  family, and Mamba's imports ``megatron.core.ssm.mamba_mixer``, which needs ``triton``.
* TransformerEngine: the real one if installed, else simdist's stand-in (``fakes/te_standin``), which
  Megatron-Core never sees.

What is the fakes' (written as NeMo-RL 94a3d49 does it; NeMo-RL needs Ray and vLLM, absent here): the GRPO loop
order, the colocated IPC hand-off and the inference engine's weights (``fakes.nemo_rl``), the metric
``token_mult_prob_error`` from a single-device forward of the refitted HF weights against the reference's
(``fakes.nemo_rl.logprobs``), and the canonical initial weights and synthetic gradients
(``fakes.megatron_core``).

Training step: ``zero_grad_buffer``, a forward through the schedule (DDP's pre-hooks finish the param
all-gathers), then the backward of ``sum(p * c_p)`` over this rank's parameters, whose gradient is exactly the
synthetic gradient ``c_p = bf16(g * lr)`` of the fakes' ``g`` (the backward hooks add it into the fp32
``main_grad`` buffers and dispatch the bucketed reduce-scatters), ``finish_grad_sync``, ``optimizer.step()``
(the distributed optimizer's Adam on its fp32 shard; SGD is refused by its DistributedOptimizer). The
reference is computed without any parallelism (``masters``): the fp32 master starts at the canonical weight
(as an optimizer checkpoint would hold it: loaded into the distributed optimizer's main-param shards after its
creation), then torch's AdamW on the full tensors with the same gradients; the weights are its bf16 cast.

Not supported (each raises ``RealStackUnsupported`` naming why; the hunt shows such a cell as ``X``; the fault
``refit_during_param_gather`` among them, see ``check``):
FP8 primary weights (``fp8_param=True`` with an FP8 recipe): Megatron-Core creates them only through TE's
``fp8_model_init`` and TE modules (``TELayerNormColumnParallelLinear`` ...) and updates them with TE's
``cast_master_weights_to_fp8``; the stand-in has FP8 tensors but none of TE's modules or kernels, and
Megatron-Core is kept off TE. The faults ``dequant_side_stream`` and ``no_record_stream`` act on an FP8
dequantize, which bf16 parameters never reach (Bridge's ``maybe_dequantize`` returns them as they are), so they
drop nothing here, as in the fakes for non-FP8 weights; ``async_gather_no_wait`` is planted in Bridge's own
``gather_from_tp_ranks`` (``all_gather(..., async_op=True)``, the wait dropped; fix ``gather_wait``).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import math
import os
import sys
import tempfile
from typing import Dict, List

import torch
import torch.distributed as dist

SEQ, BATCH = 16, 2                 # the rollout batch of fakes.nemo_rl (rollout_batch's defaults)
BUCKET_SIZE = 1 << 15              # DDP bucket (elements): several buckets, so gathers and reduce-scatters overlap
GROUP_BYTES = 1 << 20              # NeMo-RL's IPC group budget (the fakes' default)
ADAM_LR_SCALE = 0.005              # Adam moves a weight by ~lr a step: x0.005 keeps the hunt's ~0.1% of its scale
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8   # Megatron-Core's OptimizerConfig defaults
SUPPORTED_FAULTS = ("refit_during_param_gather", "ipc_pack_no_sync", "packed_broadcast_unjoined",
                    "async_gather_no_wait", "dequant_side_stream", "no_record_stream")


class RealStackUnsupported(RuntimeError):
    """A configuration the real stack cannot run faithfully on this machine (the message says why)."""


def have_real_libs() -> str:
    """'' when megatron-core and megatron-bridge are importable, else why not."""
    missing = []
    for mod, pip in (("megatron.core", "megatron-core==0.16.1"), ("megatron.bridge", "megatron-bridge==0.3.1"),
                     ("transformers", "transformers<5")):
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(pip)
    return f"not installed: {', '.join(missing)} (pip install -c ci/constraints.txt -e '.[real]')" if missing else ""


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    def v(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return "absent"
    from simdist.fakes import te_standin
    te = f"TransformerEngine {v('transformer-engine')}" if te_standin.real_te_available() else \
        "TransformerEngine: simdist's stand-in (fakes/te_standin; kept from Megatron-Core)"
    return (f"megatron-core {v('megatron-core')} and Megatron-Bridge {v('megatron-bridge')} (real), {te}, "
            f"transformers {v('transformers')}; NeMo-RL 94a3d49's loop, IPC hand-off and metric from the fakes")


def check(recipe, fp8_param, faults, fixes) -> None:
    """Raise RealStackUnsupported for what the real stack cannot run (before any process starts)."""
    from simdist.fakes import megatron_core as mc
    mc.check_faults(faults)
    mc.check_fixes(fixes)
    if fp8_param and recipe != "bf16":
        raise RealStackUnsupported(
            f"fp8_param=True ({recipe}) needs TransformerEngine's FP8 parameter machinery (fp8_model_init, TE "
            "linear modules, cast_master_weights_to_fp8); TE is absent and its stand-in models only its FP8 "
            "tensors, so the real stack runs bf16 parameters only")
    if "refit_during_param_gather" in faults:
        raise RealStackUnsupported(
            "refit_during_param_gather needs overlap_param_gather_with_optimizer_step, which megatron-core 0.16.1 "
            "supports only with several model chunks (virtual pipeline): get_megatron_optimizer splits them into "
            "[[chunk 0], chunks 1:] (optimizer/__init__.py 537-539) and with one chunk fails on the empty second "
            "list (IndexError in ChainedOptimizer); the real stack builds one chunk per pipeline stage")
    bad = [f for f in faults if f not in SUPPORTED_FAULTS]
    if bad:
        raise RealStackUnsupported(f"faults {bad} are not planted in the real stack; it has {SUPPORTED_FAULTS}")


# ============================================================================ imports
_IMPORTED = {}


def _import_bridge():
    """Import Megatron-Bridge's conversion modules (real code) with the TE stand-in if no TE is installed.

    Its package ``__init__`` files (``megatron.bridge``, ``.models``, ``.models.conversion``) import every
    model family; ``models/mamba`` imports ``megatron.core.ssm.mamba_mixer``, which imports ``triton`` (a GPU
    compiler, 286 MB, that would also turn on Megatron-Core's triton paths). They are registered as empty
    packages with their real ``__path__``, so the submodules below run unchanged without them."""
    if _IMPORTED:
        return _IMPORTED
    from simdist.fakes import te_standin
    te_mode = te_standin.install()
    import megatron.core  # noqa: F401
    for pkg in ("megatron.bridge", "megatron.bridge.models", "megatron.bridge.models.conversion"):
        if pkg in sys.modules:
            continue
        spec = importlib.util.find_spec(pkg)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[pkg] = mod
        parent, _, child = pkg.rpartition(".")
        setattr(sys.modules[parent], child, mod)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Megatron-Core's "TE / Apex not installed" notes
        from megatron.bridge.models.conversion import auto_bridge, param_mapping
        from megatron.bridge.models.llama import llama_bridge  # noqa: F401  (registers LlamaBridge)
        from megatron.core import parallel_state, tensor_parallel
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.pipeline_parallel import get_forward_backward_func
        from megatron.core.transformer import TransformerConfig
        from megatron.core.transformer.module import Float16Module
    saw = te_standin.megatron_core_saw_te()
    if saw:
        raise RuntimeError(f"Megatron-Core modules saw the TE stand-in: {saw}")
    _IMPORTED.update(te_mode=te_mode, AutoBridge=auto_bridge.AutoBridge, param_mapping=param_mapping,
                     parallel_state=parallel_state, tensor_parallel=tensor_parallel,
                     DistributedDataParallel=DistributedDataParallel,
                     DistributedDataParallelConfig=DistributedDataParallelConfig, GPTModel=GPTModel,
                     local_spec=get_gpt_layer_local_spec, OptimizerConfig=OptimizerConfig,
                     get_megatron_optimizer=get_megatron_optimizer,
                     get_forward_backward_func=get_forward_backward_func, TransformerConfig=TransformerConfig,
                     Float16Module=Float16Module)
    return _IMPORTED


def preload():
    """SIMDIST_PRELOAD=simdist.properties.real_stack:preload: the fork server imports the real stack once."""
    _import_bridge()


# ============================================================================ the reference (no parallelism)
def base_config(layers: int):
    """The hunt's model (fakes.megatron_core.TransformerConfig, no parallelism, bf16 params)."""
    from simdist.properties.hunt import hunt_model_config
    return hunt_model_config("bf16", False, layers).without_parallelism()


@functools.lru_cache(maxsize=4096)
def synthetic_grad(cfg, seed: int, name: str, step: int) -> torch.Tensor:
    """The gradient of step `step` as the backward produces it in the bf16 params: bf16(g) of the fakes' g."""
    from simdist.fakes import megatron_core as mc
    return mc.canonical_grad(cfg, seed, name, step).to(torch.bfloat16)


@functools.lru_cache(maxsize=64)
def masters(cfg, seed: int, lr: float, steps: int):
    """fp32 masters (canonical layout, CPU) after 0..`steps` optimizer steps, without any parallelism: the
    canonical initial weights, then torch's AdamW (Megatron-Core's optimizer without TE/Apex) with Megatron's
    defaults (betas 0.9/0.999, eps 1e-8), no weight decay, lr x ADAM_LR_SCALE, on each step's synthetic
    gradient. Adam is elementwise, so a DP shard of it is the shard of this (checked: bit-identical)."""
    from simdist.fakes import megatron_core as mc
    names = mc.global_param_names(cfg)
    params = [torch.nn.Parameter(mc.canonical_master(cfg, seed, n, 0).clone()) for n in names]
    opt = torch.optim.AdamW(params, lr=lr * ADAM_LR_SCALE, weight_decay=0.0, betas=ADAM_BETAS, eps=ADAM_EPS)
    out = [{n: p.detach().clone() for n, p in zip(names, params)}]
    for step in range(steps):
        for n, p in zip(names, params):
            p.grad = synthetic_grad(cfg, seed, n, step).float()
        opt.step()
        out.append({n: p.detach().clone() for n, p in zip(names, params)})
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _reference(cfg, seed, step, lr):
    from simdist.fakes import megatron_core as mc
    out = {}
    for gname in mc.global_param_names(cfg):
        w = masters(cfg, seed, lr, step)[step][gname].to(torch.bfloat16)
        kind = mc.param_kind(gname)
        parts = (mc.split_qkv_weights(cfg, w) if kind == "qkv" else torch.chunk(w, 2, 0) if kind == "fc1"
                 else (w,))
        for n, t in zip(mc.hf_names_of(cfg, gname), parts):
            out[n] = t.contiguous()
    return out


def reference_hf_state_dict(layers: int, seed: int = 0, step: int = 0, lr: float = 0.02) -> Dict[str, torch.Tensor]:
    """The HF weights the real stack's refit after `step` optimizer steps must give, bit for bit."""
    return dict(_reference(base_config(layers), int(seed), int(step), float(lr)))


@functools.lru_cache(maxsize=256)
def _metrics(cfg, seed, step, lr):
    from simdist.fakes import nemo_rl as nr
    tokens, mask = nr.rollout_batch(cfg, seed, step, BATCH, SEQ)
    ref = _reference(cfg, seed, step, lr)
    lp = nr.logprobs(ref, cfg, tokens)
    return tokens, mask, lp, float(nr.token_mult_prob_error(lp, lp, mask))


# ============================================================================ the program
def _global_name(local: str, offset: int) -> str:
    while local.startswith("module."):
        local = local[len("module."):]
    parts = local.split(".")
    if parts[:2] == ["decoder", "layers"]:
        parts[2] = str(int(parts[2]) + offset)
    return ".".join(parts)


def _write_checkpoint(path: str, cfg, weights: Dict[str, torch.Tensor]) -> None:
    """A tiny HF Llama checkpoint (config.json + model.safetensors) of `weights`, for AutoBridge."""
    from safetensors.torch import save_file
    from transformers import LlamaConfig
    LlamaConfig(hidden_size=cfg.hidden_size, intermediate_size=cfg.ffn_hidden_size,
                num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_query_groups,
                head_dim=cfg.kv_channels, num_hidden_layers=cfg.num_layers, vocab_size=cfg.vocab_size,
                rms_norm_eps=cfg.layernorm_epsilon, rope_theta=cfg.rotary_base, tie_word_embeddings=False,
                max_position_embeddings=SEQ, torch_dtype="bfloat16",
                architectures=["LlamaForCausalLM"]).save_pretrained(path)
    save_file({k: v.contiguous() for k, v in weights.items()}, os.path.join(path, "model.safetensors"))


class _Export:
    """What fakes.nemo_rl's refit functions call on a bridge, answered by the real AutoBridge."""

    def __init__(self, bridge, ddp, cfg):
        self.bridge, self.models, self.cfg = bridge, [ddp], cfg
        self.tasks = [t for t in bridge.get_conversion_tasks(self.models) if t is not None]

    def groups(self, group_bytes: int) -> List[list]:
        """NeMo-RL ``prepare_weights_for_ipc``: tasks in order, grouped by the full HF size in bf16."""
        from simdist.fakes import megatron_core as mc
        groups, cur, used = [], [], 0
        for task in self.tasks:
            cur.append(task)
            used += math.prod(mc.canonical_shape(self.cfg, task.global_param_name)) * 2
            if used >= group_bytes:
                groups.append(cur)
                cur, used = [], 0
        return groups + ([cur] if cur else [])

    def export_hf_weights(self, model=None, conversion_tasks=None):
        return self.bridge.export_hf_weights(self.models, cpu=False, show_progress=False,
                                             conversion_tasks=conversion_tasks or self.tasks)


def _plant_async_gather_no_wait(param_mapping, wait: bool):
    """The fault async_gather_no_wait in Bridge's own ``MegatronParamMapping.gather_from_tp_ranks``
    (param_mapping.py 512-527): the TP all-gather made asynchronous and its wait dropped (`wait`: fix
    gather_wait puts it back)."""
    cls = param_mapping.MegatronParamMapping

    def gather_from_tp_ranks(self, tensor):
        if self.tp_size == 1:
            return [tensor]
        gathered = [torch.empty_like(tensor) for _ in range(self.tp_size)]
        work = torch.distributed.all_gather(gathered, tensor, group=self.tp_group, async_op=True)
        if wait:
            work.wait()
        return gathered

    cls.gather_from_tp_ranks = gather_from_tp_ranks


def real_refit(tp, pp, recipe, fp8_param, faults, fixes, steps, layers, refit, lr, metric, seed):
    """One rank of the GRPO refit loop on real Megatron-Core + Megatron-Bridge (``refit_program``'s contract:
    per-step ``{"mismatched": n, "metric": token_mult_prob_error}``). Needs ranks as processes."""
    from simdist.fakes import cuda
    from simdist.fakes import megatron_core as mc
    from simdist.fakes import nemo_rl as nr
    check(recipe, fp8_param, faults, fixes)
    faults, fixes = frozenset(faults), frozenset(fixes)
    m = _import_bridge()
    ps = m["parallel_state"]
    if ps.model_parallel_is_initialized():
        raise RuntimeError("real_refit: Megatron-Core's parallel state is already initialized in this process "
                           "(the real stack needs ranks as processes: simdist.run(..., transport='processes'))")
    if "async_gather_no_wait" in faults:
        _plant_async_gather_no_wait(m["param_mapping"], wait="gather_wait" in fixes)
    if not dist.is_initialized():
        dist.init_process_group("nccl")
    torch.cuda.set_device(dist.get_rank() % max(1, torch.cuda.device_count()))
    cfg = base_config(layers)
    lr = float(lr)
    with_step = "refit_during_param_gather" in faults
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
    tmp = tempfile.TemporaryDirectory(prefix="simdist-real-ckpt-")
    try:
        m["tensor_parallel"].model_parallel_cuda_manual_seed(seed + 1)
        tp_rank, pp_rank = ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank()
        first, last = ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage()
        offset = pp_rank * (layers // pp)
        tcfg = m["TransformerConfig"](
            num_layers=layers, hidden_size=cfg.hidden_size, ffn_hidden_size=cfg.ffn_hidden_size,
            num_attention_heads=cfg.num_attention_heads, num_query_groups=cfg.num_query_groups,
            kv_channels=cfg.kv_channels, normalization="RMSNorm", gated_linear_unit=True,
            activation_func=torch.nn.functional.silu, add_bias_linear=False, layernorm_epsilon=cfg.layernorm_epsilon,
            hidden_dropout=0.0, attention_dropout=0.0, bf16=True, params_dtype=torch.bfloat16,
            pipeline_dtype=torch.bfloat16, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
            use_cpu_initialization=True, bias_activation_fusion=False, masked_softmax_fusion=False,
            persist_layer_norm=False, bias_dropout_fusion=False, apply_rope_fusion=False,
            gradient_accumulation_fusion=False)
        model = m["GPTModel"](tcfg, m["local_spec"](normalization="RMSNorm"), vocab_size=cfg.vocab_size,
                              max_sequence_length=SEQ, pre_process=first, post_process=last,
                              share_embeddings_and_output_weights=False, position_embedding_type="rope",
                              rotary_base=int(cfg.rotary_base))
        model.cuda(torch.cuda.current_device())
        model = m["Float16Module"](tcfg, model)  # bf16 params, as Megatron's get_model / Bridge's provider wrap it
        names = {}
        with torch.no_grad():  # the checkpoint load: each rank its shard of the canonical weights
            for local, p in model.named_parameters():
                g = _global_name(local, offset)
                names[p] = g
                p.copy_(mc.shard_canonical(mc.canonical_master(cfg, seed, g, 0), mc.param_kind(g), tp, tp_rank)
                        .to(torch.bfloat16))
        ddp = m["DistributedDataParallel"](
            config=tcfg, module=model,
            ddp_config=m["DistributedDataParallelConfig"](
                grad_reduce_in_fp32=True, overlap_grad_reduce=True, overlap_param_gather=True,
                use_distributed_optimizer=True, bucket_size=BUCKET_SIZE))
        opt = m["get_megatron_optimizer"](
            m["OptimizerConfig"](optimizer="adam", lr=lr * ADAM_LR_SCALE, weight_decay=0.0, clip_grad=0.0,
                                 adam_beta1=ADAM_BETAS[0], adam_beta2=ADAM_BETAS[1], adam_eps=ADAM_EPS, bf16=True, params_dtype=torch.bfloat16, use_distributed_optimizer=True,
                                 overlap_param_gather_with_optimizer_step=with_step), [ddp])
        _load_fp32_masters(opt, names, cfg, seed, tp, tp_rank)
        ckpt = os.path.join(tmp.name, f"rank{dist.get_rank()}")
        _write_checkpoint(ckpt, cfg, _reference(cfg, seed, 0, lr))
        export = _Export(m["AutoBridge"].from_hf_pretrained(ckpt), ddp, cfg)
        engine = nr.InferenceEngine(_reference(cfg, seed, 0, lr))
        for _ in export.export_hf_weights():  # grpo.py 388: prepare_refit_info exports once at set-up
            pass
        cuda.synchronize()  # set-up ends with the GPU idle
        forward = _forward_fn(m, ddp, cfg, seed)
        out = []
        for step in range(steps):
            if "param_sync_before_refit" in fixes:
                ddp.start_param_sync(force_sync=True)
            if refit == "colocated":
                _move_optimizer_state(opt, "cpu")  # offload_before_refit
                torch.cuda.empty_cache()
                producer = nr._IpcProducer(faults, fixes, 1)
                for tasks in export.groups(GROUP_BYTES):
                    weights, event = producer.handles(export, None, tasks)
                    engine.update_weights_from_ipc_handles(weights, event)
                producer.held = None
                torch.cuda.empty_cache()  # offload_after_refit
            elif refit == "broadcast":
                nr.refit_broadcast(export, None, engine, faults)
            else:
                nr.refit_packed_broadcast(export, None, engine, faults, fixes)
            weights = engine.state_dict_cpu(None if refit == "colocated" else cuda.current_stream())
            ref = _reference(cfg, seed, step, lr)
            mismatched = nr.compare_state_dicts(weights, ref)
            rec = {"mismatched": len(mismatched), "metric": float("nan")}
            if metric:
                tokens, mask, ref_lp, clean = _metrics(cfg, seed, step, lr)
                rec["metric"] = (float(nr.token_mult_prob_error(nr.logprobs(weights, cfg, tokens), ref_lp, mask))
                                 if mismatched else clean)
            out.append(rec)
            forward(step)                          # get_logprobs: a forward (DDP's pre-hooks)
            if refit == "colocated":
                _move_optimizer_state(opt, torch.cuda.current_device())  # prepare_for_training
            ddp.zero_grad_buffer()                 # train(): Megatron's training step
            opt.zero_grad()
            forward(step)
            params = [p for p in ddp.module.parameters() if p.requires_grad]
            loss = sum((p * mc.shard_canonical(synthetic_grad(cfg, seed, names[p], step), mc.param_kind(names[p]),
                                               tp, tp_rank).to(p.device)).sum().float() for p in params)
            loss.backward()                        # DDP's hooks: main_grad += grad, bucketed reduce-scatters
            ddp.finish_grad_sync()
            ok, _grad_norm, _zeros = opt.step()
            if not ok:
                raise RuntimeError("the optimizer step reported failure (update_successful=False)")
        ddp.start_param_sync(force_sync=True)      # no collective left in flight at the end
        return out
    finally:
        ps.destroy_model_parallel()
        tmp.cleanup()


def _load_fp32_masters(opt, names, cfg, seed, tp, tp_rank):
    """Each DP rank's fp32 main-param shard := its slice of the canonical fp32 weight (an optimizer checkpoint's
    master weights; Megatron itself starts them from the bf16 params)."""
    from simdist.fakes import megatron_core as mc
    opts = getattr(opt, "chained_optimizers", [opt])
    with torch.no_grad():
        for o in opts:
            for mgroup, sgroup in zip(o.model_float16_groups, o.shard_fp32_from_float16_groups):
                for mp, sp in zip(mgroup, sgroup):
                    r = o._get_model_param_range_map(mp)["param"]
                    g = names[mp]
                    full = mc.shard_canonical(mc.canonical_master(cfg, seed, g, 0), mc.param_kind(g), tp, tp_rank)
                    sp.copy_(full.reshape(-1)[r.start:r.end])


def _move_optimizer_state(opt, device):
    """NeMo-RL ``move_optimizer``: every tensor of the torch optimizer's state to `device`."""
    for o in getattr(opt, "chained_optimizers", [opt]):
        for state in o.optimizer.state.values():
            for k, v in state.items():
                if torch.is_tensor(v):
                    state[k] = v.to(device)


def _forward_fn(m, ddp, cfg, seed):
    """A forward of the rollout batch through Megatron's pipeline schedule (forward only)."""
    from simdist.fakes import nemo_rl as nr
    run = m["get_forward_backward_func"]()

    def forward(step):
        tokens, _ = nr.rollout_batch(cfg, seed, step, BATCH, SEQ)
        dev = torch.device("cuda", torch.cuda.current_device())
        tokens = tokens.to(dev)
        position_ids = torch.arange(SEQ, device=dev).unsqueeze(0).expand(BATCH, SEQ)

        def step_fn(data_iterator, model):
            x = next(data_iterator)
            output = model(x, position_ids, None)
            return output, lambda out: (out.float().mean(), {})

        with torch.no_grad():
            run(forward_step_func=step_fn, data_iterator=iter([tokens]), model=[ddp], num_microbatches=1,
                seq_length=SEQ, micro_batch_size=BATCH, forward_only=True)

    return forward


def prepare_hunt() -> str:
    """``simdist hunt --stack real``: refuse with why if the libraries are missing; make every rank-process fork
    server import the real stack once (SIMDIST_PRELOAD); return the versions line."""
    why = have_real_libs()
    if why:
        raise SystemExit(f"simdist hunt --stack real: {why}")
    entry = f"{__name__}:preload"
    have = [x for x in os.environ.get("SIMDIST_PRELOAD", "").split(",") if x.strip()]
    if entry not in have:
        os.environ["SIMDIST_PRELOAD"] = ",".join(have + [entry])
    return versions()


def _register():
    from simdist.properties.hunt import register_stack
    register_stack("real", real_refit)


_register()
