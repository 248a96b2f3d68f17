"""Layout tests of the Megatron-Core / Megatron-Bridge fakes: parallel-state groups, parameter names and
shapes, and every mapping against expected tensors built independently here (from Megatron's documented
layouts: FACTS.md "Megatron-Bridge conversion"), plus config validation."""
import types

import pytest
import torch

import simdist
from simdist.fakes import megatron_bridge as mb
from simdist.fakes import megatron_core as mc


def uid(rows, cols, base):
    """fp32 tensor of unique, exactly representable values."""
    return (torch.arange(rows * cols, dtype=torch.float32) + base).reshape(rows, cols)


def run_ranks(world, fn, **kw):
    res = simdist.run(fn, world_size=world, kwargs=kw)
    assert not res.hazards, res.report()
    return res.returns


def cfg_of(**kw):
    base = dict(hidden_size=32, num_attention_heads=4, num_query_groups=2, kv_channels=8, ffn_hidden_size=64,
                vocab_size=64, num_layers=2)
    base.update(kw)
    return mc.TransformerConfig(**base)


# ----------------------------------------------------------------------------- parallel state
def test_rank_layout_matches_megatron_order():
    def fn():
        st = mc.initialize_model_parallel(2, 2)  # world 8: tp=2, pp=2 -> dp=2
        out = {k: st.ranks[k] for k in ("tp", "pp", "dp", "mp")}
        out.update(tp_rank=mc.get_tensor_model_parallel_rank(), pp_rank=mc.get_pipeline_model_parallel_rank(),
                   dp_rank=mc.get_data_parallel_rank(), dp_size=mc.get_data_parallel_world_size(),
                   first=mc.is_pipeline_first_stage(), last=mc.is_pipeline_last_stage())
        mc.destroy_model_parallel()
        return out

    outs = run_ranks(8, fn)
    for r, o in enumerate(outs):
        # tp fastest, then dp, then pp (order tp-cp-ep-dp-pp)
        assert o["tp"] == [r - r % 2, r - r % 2 + 1]
        assert o["dp"] == [r % 2 + 4 * (r // 4), r % 2 + 4 * (r // 4) + 2]
        assert o["pp"] == [r % 4, r % 4 + 4]
        base = r % 4 - r % 2
        assert o["mp"] == [base, base + 1, base + 4, base + 5]
        assert (o["tp_rank"], o["dp_rank"], o["pp_rank"]) == (r % 2, (r // 2) % 2, r // 4)
        assert o["dp_size"] == 2 and o["first"] == (r < 4) and o["last"] == (r >= 4)


def test_expert_groups():
    def fn():
        st = mc.initialize_model_parallel(2, 1, expert_model_parallel_size=2)  # world 4: tp2 dp2, ep2 etp2 edp1
        out = {k: st.ranks[k] for k in ("ep", "etp", "edp", "dp")}
        mc.destroy_model_parallel()
        return out

    for r, o in enumerate(run_ranks(4, fn)):
        assert o["etp"] == [r - r % 2, r - r % 2 + 1]
        assert o["ep"] == [r % 2, r % 2 + 2]
        assert o["edp"] == [r]
        assert o["dp"] == [r % 2, r % 2 + 2]


def test_model_parallel_errors():
    def fn():
        mc.initialize_model_parallel(3, 1)

    with pytest.raises(ValueError, match="tensor_model_parallel_size"):
        simdist.run(fn, world_size=4)


# ----------------------------------------------------------------------------- model parameters
def expected_local_params(cfg, tp, pp, ep, tp_rank, pp_rank, ep_rank):
    h, kv, g, hpg = cfg.hidden_size, cfg.kv_channels, cfg.num_query_groups, cfg.heads_per_group
    per = cfg.num_layers // pp
    out = {}
    if pp_rank == 0:
        out["embedding.word_embeddings.weight"] = (cfg.vocab_size // tp, h)
    for i in range(pp_rank * per, (pp_rank + 1) * per):
        p = f"decoder.layers.{i}."
        out[p + "input_layernorm.weight"] = (h,)
        out[p + "self_attention.linear_qkv.weight"] = (g // tp * (hpg + 2) * kv, h)
        out[p + "self_attention.linear_proj.weight"] = (h, cfg.num_attention_heads * kv // tp)
        out[p + "pre_mlp_layernorm.weight"] = (h,)
        if cfg.num_moe_experts:
            out[p + "mlp.router.weight"] = (cfg.num_moe_experts, h)
            for j in range(cfg.num_moe_experts // ep):
                out[p + f"mlp.experts.local_experts.{j}.linear_fc1.weight"] = (2 * cfg.ffn_hidden_size // tp, h)
                out[p + f"mlp.experts.local_experts.{j}.linear_fc2.weight"] = (h, cfg.ffn_hidden_size // tp)
        else:
            out[p + "mlp.linear_fc1.weight"] = (2 * cfg.ffn_hidden_size // tp, h)
            out[p + "mlp.linear_fc2.weight"] = (h, cfg.ffn_hidden_size // tp)
    if pp_rank == pp - 1:
        out["decoder.final_layernorm.weight"] = (h,)
        out["output_layer.weight"] = (cfg.vocab_size // tp, h)
    return out


@pytest.mark.parametrize("tp,pp,ep,moe,recipe", [
    (1, 1, 1, False, "bf16"), (2, 2, 1, False, "blockwise-fp32"), (2, 1, 2, True, "per-tensor"),
    (1, 2, 2, True, "mxfp8"),
])
def test_model_param_names_and_shapes(tp, pp, ep, moe, recipe):
    cfg = mc.TransformerConfig(hidden_size=256, num_attention_heads=4, num_query_groups=2, kv_channels=64,
                               ffn_hidden_size=512, vocab_size=256, num_layers=2, num_moe_experts=4 if moe else None,
                               fp8_recipe=recipe, fp8_param=recipe != "bf16", tensor_model_parallel_size=tp,
                               pipeline_model_parallel_size=pp, expert_model_parallel_size=ep)
    world = tp * pp * 2

    def fn():
        mc.initialize_model_parallel(tp, pp, expert_model_parallel_size=ep)
        model = mc.GPTModel(cfg)
        out = {n: (tuple(t.shape), type(t).__name__, t.dtype) for n, t in model.named_parameters()}
        globals_ = {n: model.local_to_global_name(n) for n in out}
        coords = (mc.get_tensor_model_parallel_rank(), mc.get_pipeline_model_parallel_rank(),
                  mc.get_expert_model_parallel_rank())
        mc.destroy_model_parallel()
        return out, globals_, coords

    fp8_type = {"blockwise-fp32": "Float8BlockwiseQTensor", "per-tensor": "Float8Tensor",
                "mxfp8": "MXFP8Tensor", "bf16": "SimTensor"}[recipe]
    for params, globals_, (tr, pr, er) in run_ranks(world, fn):
        exp = expected_local_params(cfg, tp, pp, ep, tr, pr, er)
        assert {n: s for n, (s, _, _) in params.items()} == exp
        for n, (_, typ, dtype) in params.items():
            assert dtype == torch.bfloat16
            linear = n.endswith(("linear_qkv.weight", "linear_proj.weight", "linear_fc1.weight", "linear_fc2.weight"))
            assert typ == (fp8_type if linear else "SimTensor"), (n, typ)
            if ".local_experts." in n:
                j = int(n.split(".local_experts.")[1].split(".")[0])
                assert globals_[n] == n.replace(f"local_experts.{j}.", f"local_experts.{j + 2 * er}.")
            else:
                assert globals_[n] == n


# ----------------------------------------------------------------------------- QKV
def interleave_qkv(q, k, v, groups, hpg, kv):
    rows = []
    for g in range(groups):
        for h in range(g * hpg, (g + 1) * hpg):
            rows.append(q[h * kv:(h + 1) * kv])
        rows.append(k[g * kv:(g + 1) * kv])
        rows.append(v[g * kv:(g + 1) * kv])
    return torch.cat(rows)


@pytest.mark.parametrize("hpg", [1, 2, 4, 8])
@pytest.mark.parametrize("tp", [1, 2])
def test_qkv_mapping_gqa(hpg, tp):
    groups, kv, h = 2, 8, 32
    cfg = cfg_of(num_attention_heads=groups * hpg, num_query_groups=groups, kv_channels=kv, hidden_size=h,
                 tensor_model_parallel_size=tp)
    q = uid(groups * hpg * kv, h, 0)
    k = uid(groups * kv, h, 1_000_000)
    v = uid(groups * kv, h, 2_000_000)
    full = interleave_qkv(q, k, v, groups, hpg, kv)
    # Megatron TP shards hold whole query groups: contiguous row blocks of the interleaved tensor
    shards = full.chunk(tp, 0)
    assert torch.equal(mc.merge_qkv_weights(cfg, q, k, v), full)
    assert all(torch.equal(a, b) for a, b in zip(mc.split_qkv_weights(cfg, full), (q, k, v)))

    def fn():
        mc.initialize_model_parallel(tp)
        r = mc.get_tensor_model_parallel_rank()
        reg = mb.LlamaBridge().mapping_registry()
        m = reg.megatron_to_hf_lookup("decoder.layers.1.self_attention.linear_qkv.weight")
        assert isinstance(m, mb.QKVMapping)
        out = m.megatron_to_hf(shards[r].to("cuda"), types.SimpleNamespace(config=cfg))
        mc.destroy_model_parallel()
        return out

    for out in run_ranks(tp, fn):
        p = "model.layers.1.self_attn."
        assert sorted(out) == [p + "k_proj.weight", p + "q_proj.weight", p + "v_proj.weight"]
        assert torch.equal(out[p + "q_proj.weight"], q)
        assert torch.equal(out[p + "k_proj.weight"], k)
        assert torch.equal(out[p + "v_proj.weight"], v)


# ----------------------------------------------------------------------------- gated MLP, row / column
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_gated_mlp_row_column_mappings(tp):
    cfg = cfg_of(num_attention_heads=4, num_query_groups=4, tensor_model_parallel_size=tp)
    f, h, v = cfg.ffn_hidden_size, cfg.hidden_size, cfg.vocab_size
    gate, up = uid(f, h, 0), uid(f, h, 500_000)
    down = uid(h, f, 1_000_000)
    o_proj = uid(h, cfg.num_attention_heads * cfg.kv_channels, 2_000_000)
    embed = uid(v, h, 3_000_000)
    norm = torch.arange(h, dtype=torch.float32) + 4_000_000
    c = f // tp
    fc1_shards = [torch.cat([gate[r * c:(r + 1) * c], up[r * c:(r + 1) * c]]) for r in range(tp)]
    fc2_shards = down.chunk(tp, 1)
    proj_shards = o_proj.chunk(tp, 1)
    emb_shards = embed.chunk(tp, 0)

    def fn():
        mc.initialize_model_parallel(tp)
        r = mc.get_tensor_model_parallel_rank()
        reg = mb.LlamaBridge().mapping_registry()
        mod = types.SimpleNamespace(config=cfg)
        out = {}
        for name, t in (("decoder.layers.0.mlp.linear_fc1.weight", fc1_shards[r]),
                        ("decoder.layers.0.mlp.linear_fc2.weight", fc2_shards[r]),
                        ("decoder.layers.0.self_attention.linear_proj.weight", proj_shards[r]),
                        ("embedding.word_embeddings.weight", emb_shards[r]),
                        ("output_layer.weight", emb_shards[r]),
                        ("decoder.layers.0.pre_mlp_layernorm.weight", norm)):
            out.update(reg.megatron_to_hf_lookup(name).megatron_to_hf(t.to("cuda"), mod))
        kinds = {n: mb.detect_parallelism(n) for n in ("decoder.layers.0.mlp.linear_fc2.weight",
                                                        "output_layer.weight", "decoder.final_layernorm.weight")}
        mc.destroy_model_parallel()
        return out, kinds

    for out, kinds in run_ranks(tp, fn):
        assert kinds == {"decoder.layers.0.mlp.linear_fc2.weight": "row", "output_layer.weight": "column",
                         "decoder.final_layernorm.weight": "replicated"}
        p = "model.layers.0."
        assert torch.equal(out[p + "mlp.gate_proj.weight"], gate)
        assert torch.equal(out[p + "mlp.up_proj.weight"], up)
        assert torch.equal(out[p + "mlp.down_proj.weight"], down)
        assert torch.equal(out[p + "self_attn.o_proj.weight"], o_proj)
        assert torch.equal(out["model.embed_tokens.weight"], embed)
        assert torch.equal(out["lm_head.weight"], embed)
        assert torch.equal(out[p + "post_attention_layernorm.weight"], norm)


# ----------------------------------------------------------------------------- experts (EP naming)
@pytest.mark.parametrize("tp,ep", [(1, 2), (2, 2), (1, 4)])
def test_expert_mappings_ep_naming(tp, ep):
    n_exp = 4
    cfg = cfg_of(num_moe_experts=n_exp, tensor_model_parallel_size=tp, expert_model_parallel_size=ep)
    f, h = cfg.ffn_hidden_size, cfg.hidden_size
    per = n_exp // ep
    gate = {e: uid(f, h, 10_000 * e) for e in range(n_exp)}
    up = {e: uid(f, h, 10_000 * e + 5_000_000) for e in range(n_exp)}
    down = {e: uid(h, f, 10_000 * e + 10_000_000) for e in range(n_exp)}
    c = f // tp
    world = max(tp * ep, tp)

    def fn():
        mc.initialize_model_parallel(tp, expert_model_parallel_size=ep)
        tr, er = mc.get_expert_tensor_parallel_rank(), mc.get_expert_model_parallel_rank()
        reg = mb.LlamaBridge().mapping_registry()
        mod = types.SimpleNamespace(config=cfg)
        out = {}
        for j in range(per):
            e = j + per * er  # the bridge's task names carry the GLOBAL expert id
            m1 = reg.megatron_to_hf_lookup(f"decoder.layers.1.mlp.experts.local_experts.{e}.linear_fc1.weight")
            m2 = reg.megatron_to_hf_lookup(f"decoder.layers.1.mlp.experts.local_experts.{e}.linear_fc2.weight")
            assert isinstance(m1, mb.ExpertGatedMLPMapping) and isinstance(m2, mb.ExpertRowParallelMapping)
            assert m1.is_expert and m1.tp_size == tp and m1.ep_size == ep
            fc1 = torch.cat([gate[e][tr * c:(tr + 1) * c], up[e][tr * c:(tr + 1) * c]])
            fc2 = down[e].chunk(tp, 1)[tr]
            got1 = m1.megatron_to_hf(fc1.to("cuda"), mod)
            got2 = m2.megatron_to_hf(fc2.to("cuda"), mod)
            assert sorted(got1) == sorted(f"model.layers.1.mlp.experts.{j + per * k}.{w}_proj.weight"
                                          for k in range(ep) for w in ("gate", "up"))
            assert sorted(got2) == sorted(f"model.layers.1.mlp.experts.{j + per * k}.down_proj.weight"
                                          for k in range(ep))
            out.update(got1)
            out.update(got2)
        mc.destroy_model_parallel()
        return out

    for out in run_ranks(world, fn):
        assert len(out) == 3 * n_exp
        for e in range(n_exp):
            p = f"model.layers.1.mlp.experts.{e}."
            assert torch.equal(out[p + "gate_proj.weight"], gate[e])
            assert torch.equal(out[p + "up_proj.weight"], up[e])
            assert torch.equal(out[p + "down_proj.weight"], down[e])


# ----------------------------------------------------------------------------- whole-model export (layout only)
def test_bridge_export_names_match_reference_pp_ep():
    cfg = mc.TransformerConfig(hidden_size=256, num_attention_heads=4, num_query_groups=2, kv_channels=64,
                               ffn_hidden_size=512, vocab_size=256, num_layers=2, num_moe_experts=4)

    def fn():
        c = mc.TransformerConfig(**{**cfg.__dict__, "pipeline_model_parallel_size": 2,
                                    "expert_model_parallel_size": 2, "expert_tensor_parallel_size": 1})
        mc.initialize_model_parallel(1, 2, expert_model_parallel_size=2)
        model = mc.GPTModel(c, seed=3)
        bridge = mb.LlamaBridge()
        names = [n for n, _ in bridge.export_hf_weights(model, cpu=True)]
        again = [n for n, _ in bridge.export_hf_weights(model)]  # tasks reused (cached specs)
        ntasks = len(bridge.build_conversion_tasks(model))
        mc.destroy_model_parallel()
        return names, again, ntasks

    ref = mc.reference_hf_state_dict(cfg, 3)
    assert sorted(ref) == sorted(mb.hf_param_names(cfg))
    for names, again, ntasks in run_ranks(4, fn):
        assert sorted(names) == sorted(ref) and names == again
        assert len(set(names)) == len(names)
        assert ntasks == 3 + 2 * (5 + 2 * 2) + 0  # emb, norm, out + per layer 5 dense + 2 local experts x 2


# ----------------------------------------------------------------------------- the reference
def test_reference_blockwise_equals_per_shard_quantization():
    """With 128-aligned shards, quantizing each TP shard = quantizing the full weight (the reference)."""
    cfg = mc.TransformerConfig(hidden_size=256, num_attention_heads=4, num_query_groups=2, kv_channels=64,
                               ffn_hidden_size=512, vocab_size=256, fp8_recipe="blockwise-pow2", fp8_param=True)
    name = "decoder.layers.0.mlp.linear_fc1.weight"
    full = mc.canonical_master(cfg, 0, name, 0)
    ref = mc.reference_weight(cfg, 0, name)
    q = mc.make_quantizer("blockwise-pow2", "cpu")
    for tp in (1, 2, 4):
        shards = [mc.shard_canonical(full, "fc1", tp, r) for r in range(tp)]
        deq = [q.quantize(s, dtype=torch.bfloat16).dequantize(dtype=torch.bfloat16) for s in shards]
        gates = torch.cat([d.chunk(2)[0] for d in deq])
        ups = torch.cat([d.chunk(2)[1] for d in deq])
        assert torch.equal(torch.cat([gates, ups]).view(torch.int16), ref.view(torch.int16))
    # and the quantization is not the identity: FP8 changed the weight
    assert not torch.equal(ref, full.to(torch.bfloat16))


def test_reference_is_layout_independent_and_steps_change_it():
    cfg = mc.TransformerConfig(hidden_size=256, num_attention_heads=4, num_query_groups=2, kv_channels=64,
                               ffn_hidden_size=512, vocab_size=256)
    a = mc.reference_hf_state_dict(cfg, 1, 2)
    b = mc.reference_hf_state_dict(mc.TransformerConfig(**{**cfg.__dict__, "tensor_model_parallel_size": 2}), 1, 2)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    c = mc.reference_hf_state_dict(cfg, 1, 3)
    assert all(not torch.equal(a[k], c[k]) for k in a)


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize("kw,needle", [
    (dict(hidden_size=250, kv_channels=64, tensor_model_parallel_size=4, num_query_groups=4), "hidden_size"),
    (dict(num_attention_heads=6, num_query_groups=4), "num_attention_heads"),
    (dict(num_query_groups=2, tensor_model_parallel_size=4), "num_query_groups"),
    (dict(ffn_hidden_size=510, num_query_groups=4, tensor_model_parallel_size=4), "ffn_hidden_size"),
    (dict(vocab_size=255, tensor_model_parallel_size=2), "vocab_size"),
    (dict(num_layers=3, pipeline_model_parallel_size=2), "num_layers"),
    (dict(num_moe_experts=3, expert_model_parallel_size=2), "num_moe_experts"),
    (dict(num_moe_experts=4, moe_router_topk=5), "moe_router_topk"),
    (dict(expert_model_parallel_size=2), "expert_model_parallel_size"),
    (dict(fp8_recipe="fp4"), "fp8_recipe"),
    (dict(fp8_recipe="blockwise-fp32", fp8_param=True, ffn_hidden_size=384, tensor_model_parallel_size=2),
     "decoder.layers.*.mlp.linear_fc1.weight"),
    (dict(fp8_recipe="blockwise-pow2", fp8_param=True, kv_channels=48, tensor_model_parallel_size=2),
     "decoder.layers.*.self_attention.linear_qkv.weight"),
    (dict(fp8_recipe="blockwise-pow2", fp8_param=True, num_attention_heads=8, num_query_groups=4,
          tensor_model_parallel_size=4, hidden_size=256, kv_channels=48, ffn_hidden_size=512),
     "decoder.layers.*.self_attention.linear_qkv.weight"),
    (dict(fp8_recipe="blockwise-fp32", fp8_param=True, num_attention_heads=12, num_query_groups=2, kv_channels=32,
          tensor_model_parallel_size=2),
     "decoder.layers.*.self_attention.linear_proj.weight"),
    (dict(fp8_recipe="mxfp8", fp8_param=True, ffn_hidden_size=80), "decoder.layers.*.mlp.linear_fc2.weight"),
    (dict(fp8_recipe="blockwise-fp32", fp8_param=True, num_moe_experts=4, ffn_hidden_size=192),
     "decoder.layers.*.mlp.experts.local_experts.*.linear_fc1.weight"),
])
def test_bad_configs_raise_naming_the_parameter(kw, needle):
    base = dict(hidden_size=256, num_attention_heads=4, num_query_groups=2, kv_channels=64, ffn_hidden_size=512,
                vocab_size=256, num_layers=2)
    base.update(kw)
    with pytest.raises(ValueError) as ei:
        mc.TransformerConfig(**base)
    assert needle in str(ei.value)


def test_fp8_param_off_skips_tile_checks_and_faults_are_checked():
    mc.TransformerConfig(hidden_size=256, num_attention_heads=4, num_query_groups=2, kv_channels=64,
                         ffn_hidden_size=384, vocab_size=256, fp8_recipe="blockwise-fp32",
                         tensor_model_parallel_size=2)
    with pytest.raises(ValueError, match="unknown fault"):
        mb.MegatronModelBridge(faults={"not_a_fault"})
    assert mc.FAULTS == {"dequant_side_stream", "async_gather_no_wait", "refit_during_param_gather",
                         "no_record_stream", "ipc_pack_no_sync", "packed_broadcast_unjoined"}
    with pytest.raises(ValueError, match="removed: the PP broadcast is now modelled as Megatron-Bridge"):
        mb.MegatronModelBridge(faults={"pp_broadcast_dequantized_temp"})
    with pytest.raises(ValueError, match="unknown fix"):
        mb.MegatronModelBridge(fixes={"not_a_fix"})
