"""transformers (4.57) models, unmodified, on simulated CUDA: the values of an eager CPU run (notes b1, b2).

Tiny models built from configs (no weights are downloaded). simdist's simulated CUDA runs the CPU kernels, so
where a GPU's kernel has the CPU kernel's contract (every op here in float32 and bfloat16 autocast with eager
attention) a training run must equal the same run on the CPU bit for bit; a difference is an op simdist runs
otherwise than a GPU would (b1: SiLU's backward ran as six decomposed ops). Not compared bit for bit: SDPA (the
GPU's fused kernels round otherwise than CPU attention), dropout and sampling (CUDA's Philox stream is not
modelled), torch DDP (the ranks' gradients are averaged in another order than a single process sums them).
"""
import gc

import pytest
import torch

import simdist

transformers = pytest.importorskip("transformers")


def _llama(device):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM._from_config(cfg, attn_implementation="eager").to(device)


def _train(device, autocast, steps=2, rank=None, world=1, sgd=False):
    m = _llama(device)
    if rank is not None:
        m = torch.nn.parallel.DistributedDataParallel(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.5) if sgd else torch.optim.AdamW(m.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        ids = torch.randint(0, 128, (2 * world, 16), generator=g)
        if rank is not None:
            ids = ids[2 * rank:2 * rank + 2]
        ids = ids.to(device)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=autocast):
            out = m(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(out.loss.detach().float().cpu())
    return torch.stack(losses), [p.detach().float().cpu() for p in m.parameters()]


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16_autocast"])
def test_llama_training_on_simulated_cuda_equals_eager_cpu_bit_for_bit(autocast):
    # Rule: a GPU runs aten.silu_backward as one kernel with the CPU kernel's formula (measured bit for bit in
    # bf16 on an H200: docs/gpu/b-series-facts-2026-12-02.json), not the CPU build's decomposition (notes b1); with
    # it, every op of LlamaForCausalLM's forward, loss, backward and AdamW step has the CPU kernel's values.
    (got,), = [simdist.run(_train, args=("cuda", autocast), policy="none").returns]
    want = _train("cpu", autocast)
    assert torch.equal(got[0], want[0]), (got[0], want[0])
    for a, b in zip(got[1], want[1]):
        assert torch.equal(a, b)


def test_llama_in_torch_ddp_matches_a_single_process_and_the_process_survives_the_collector():
    # Rule: DDP averages the ranks' gradients (torch.nn.parallel.DistributedDataParallel docs), so two ranks on
    # half batches step as one process on the whole batch, up to the order of the sums; and a transformers model
    # is a reference cycle, so its DDP Reducer's CUDA Futures are destroyed by the collector after the run, which
    # needs the CUDA device guard (notes b2: the process aborted).
    import torch.distributed as dist

    def prog():
        dist.init_process_group("nccl")
        return _train("cuda", False, rank=dist.get_rank(), world=2, sgd=True)

    res = simdist.run(prog, world_size=2)
    gc.collect()
    assert not res.hazards
    want = _train("cpu", False, world=2, sgd=True)  # one process, both ranks' rows
    mean_loss = sum(losses for losses, _ in res.returns) / 2  # equal token counts: the whole batch's mean
    assert torch.allclose(mean_loss, want[0], rtol=1e-5), (mean_loss, want[0])
    for _, params in res.returns:
        for a, b in zip(params, want[1]):
            assert (a - b).abs().max() <= 1e-5 * b.abs().max() + 1e-7


def test_llama_sdpa_generate_and_checkpointed_training_agree_with_cpu():
    # SDPA runs the fused kernel an H200 picks (faces/sdpa.py), whose rounding is not CPU attention's: greedy tokens
    # (with the KV cache, without it, and with a static cache compiled out) must still be the CPU's, and a
    # gradient-checkpointed step's loss within float rounding of the CPU's (no hazard in either).
    def prog(device):
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        m = transformers.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa").to(device).eval()
        ids = torch.randint(3, 128, (2, 6), generator=torch.Generator().manual_seed(1)).to(device)
        outs = [m.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0, **kw).cpu()
                for kw in ({}, {"use_cache": False},
                           {"cache_implementation": "static", "disable_compile": True})]
        m.train()
        m.gradient_checkpointing_enable()
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        return outs, loss.detach().cpu(), m.model.embed_tokens.weight.grad.cpu()

    res = simdist.run(prog, args=("cuda",))
    assert not res.hazards
    (outs, loss, grad), = res.returns
    want_outs, want_loss, want_grad = prog("cpu")
    for a, b in zip(outs, want_outs):
        assert torch.equal(a, b)
    assert torch.allclose(loss, want_loss, rtol=1e-6)
    assert (grad - want_grad).abs().max() <= 1e-5 * want_grad.abs().max()
