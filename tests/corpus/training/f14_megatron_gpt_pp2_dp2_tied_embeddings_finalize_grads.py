"""Real Megatron-Core 0.16.1 GPTModel (2 layers, learned positions, the local layer spec) at PP=2 x DP=2 (world 4)
with tied input/output embeddings (`share_embeddings_and_output_weights=True`): stage 0 holds the word
embeddings, stage 1 an output layer whose weight is the same parameter logically (`shared_embedding`), kept in
sync only by `finalize_model_grads`' all-reduce of the two stages' gradients over the embedding group. Megatron's
DistributedDataParallel with overlap_grad_reduce (bucketed async all-reduces over DP issued from backward's hooks),
the 1F1B schedule with 2 micro-batches per DP rank (P2P between the stages), SGD with momentum and gradient clipping (the grad
norm counts the tied weight once: the last stage skips its `shared` copy), 2 steps. The last stage's losses, the
grad norm and every parameter after the last step are checked against the same GPT written in plain torch in one
process, with one embedding matrix used at both ends; the two stages' copies of it must stay bit-identical.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: megatron/core/distributed/finalize_model_grads.py (`finish_grad_sync` of every chunk, then
`_allreduce_word_embedding_grads` -> `_allreduce_embedding_grad`: `torch.distributed.all_reduce(grad, group=
embd_group)` on the main_grad of `shared_embedding_or_output_weight()`), models/common/language_module/
language_module.py (setup_embeddings_and_output_layer: the last stage's `shared_embedding` weight),
optimizer/optimizer.py get_main_grads_for_grad_norm (`param_is_not_shared`), pipeline_parallel/schedules.py
forward_backward_pipelining_without_interleaving, all run unmodified.
REASON: the embedding all-reduce is synchronous and runs after every bucket's DP all-reduce was waited
(finish_grad_sync: `grad_reduce_handle.wait()`), on the gradients the optimizer then reads on the same stream;
the P2P activations and gradients are waited before use (the schedule's `wait_handles`).
"""
import math
import os
from functools import partial

import torch
import torch.distributed as dist
import torch.nn.functional as F

from megatron.core import parallel_state, tensor_parallel
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.transformer import TransformerConfig

PP, DP, L, H, NH, FFN, V, S = 2, 2, 2, 16, 2, 32, 32, 8
HN = H // NH
GLOBAL_B, MICRO_B, STEPS, LR, CLIP = 8, 2, 3, 1e-1, 1.0


def full_weights():
    g = torch.Generator().manual_seed(0)
    w = {"embedding.word_embeddings.weight": torch.randn(V, H, generator=g) * 0.3,
         "embedding.position_embeddings.weight": torch.randn(S, H, generator=g) * 0.3}
    norms = ["decoder.final_layernorm"]
    for i in range(L):
        p = f"decoder.layers.{i}."
        norms += [p + "input_layernorm", p + "pre_mlp_layernorm"]
        for name, shape in (("self_attention.linear_qkv", (3 * H, H)), ("self_attention.linear_proj", (H, H)),
                            ("mlp.linear_fc1", (FFN, H)), ("mlp.linear_fc2", (H, FFN))):
            w[p + name + ".weight"] = torch.randn(*shape, generator=g) * 0.3
            w[p + name + ".bias"] = torch.randn(shape[0], generator=g) * 0.1
    for n in norms:
        w[n + ".weight"] = 1 + 0.1 * torch.randn(H, generator=g)
        w[n + ".bias"] = 0.1 * torch.randn(H, generator=g)
    return w


def batch(step):
    g = torch.Generator().manual_seed(10 + step)
    return torch.randint(0, V, (GLOBAL_B, S), generator=g), torch.randint(0, V, (GLOBAL_B, S), generator=g)


def reference_loss(w, ids, labels):
    """The same GPT, unsharded, in plain torch ([s, b, h] activations), the embedding reused as the output layer."""
    B = ids.shape[0]
    x = (w["embedding.word_embeddings.weight"][ids] + w["embedding.position_embeddings.weight"][:S]).transpose(0, 1)
    causal = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    for i in range(L):
        p = f"decoder.layers.{i}."
        ln = F.layer_norm(x, (H,), w[p + "input_layernorm.weight"], w[p + "input_layernorm.bias"])
        qkv = F.linear(ln, w[p + "self_attention.linear_qkv.weight"], w[p + "self_attention.linear_qkv.bias"])
        q, k, v = qkv.view(S, B, NH, 3 * HN).split(HN, dim=-1)
        probs = (torch.einsum("sbnd,tbnd->bnst", q, k) / math.sqrt(HN)).masked_fill(causal, float("-inf")).softmax(-1)
        ctx = torch.einsum("bnst,tbnd->sbnd", probs, v).reshape(S, B, H)
        x = x + F.linear(ctx, w[p + "self_attention.linear_proj.weight"], w[p + "self_attention.linear_proj.bias"])
        ln = F.layer_norm(x, (H,), w[p + "pre_mlp_layernorm.weight"], w[p + "pre_mlp_layernorm.bias"])
        x = x + F.linear(F.gelu(F.linear(ln, w[p + "mlp.linear_fc1.weight"], w[p + "mlp.linear_fc1.bias"])),
                         w[p + "mlp.linear_fc2.weight"], w[p + "mlp.linear_fc2.bias"])
    x = F.layer_norm(x, (H,), w["decoder.final_layernorm.weight"], w["decoder.final_layernorm.bias"])
    logits = F.linear(x, w["embedding.word_embeddings.weight"])
    return F.cross_entropy(logits.transpose(0, 1).reshape(-1, V), labels.reshape(-1))


def reference():
    w = {n: t.clone().requires_grad_(True) for n, t in full_weights().items()}
    # SGD with momentum, not Adam: the key bias's gradient is zero up to rounding (softmax ignores a per-row
    # constant), and Adam would turn either side's rounding noise into a full step of lr (as in w03)
    opt = torch.optim.SGD(w.values(), lr=LR, momentum=0.9, foreach=False)
    losses, norms = [], []
    for step in range(STEPS):
        ids, labels = batch(step)
        opt.zero_grad()
        loss = reference_loss(w, ids, labels)
        loss.backward()
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in w.values())).item()
        if CLIP / (norm + 1e-6) < 1.0:
            for p in w.values():
                p.grad.mul_(CLIP / (norm + 1e-6))
        opt.step()
        losses.append(loss.item())
        norms.append(norm)
    return losses, norms, {n: p.detach() for n, p in w.items()}


def global_name(name, pp_rank):
    """A stage's parameter name in the full model's numbering (stage 1's layer 0 is layer 1)."""
    if name.startswith("decoder.layers."):
        i = int(name.split(".")[2])
        return name.replace(f"decoder.layers.{i}.", f"decoder.layers.{pp_rank * (L // PP) + i}.", 1)
    if name == "output_layer.weight":
        return "embedding.word_embeddings.weight"
    return name


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    parallel_state.initialize_model_parallel(pipeline_model_parallel_size=PP)
    tensor_parallel.model_parallel_cuda_manual_seed(123)
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    dp_rank = parallel_state.get_data_parallel_rank()
    first, last = pp_rank == 0, pp_rank == PP - 1
    config = TransformerConfig(num_layers=L, hidden_size=H, ffn_hidden_size=FFN, num_attention_heads=NH,
                               pipeline_model_parallel_size=PP, pipeline_dtype=torch.float32,
                               use_cpu_initialization=True, hidden_dropout=0.0, attention_dropout=0.0)
    model = GPTModel(config, get_gpt_layer_local_spec(), vocab_size=V, max_sequence_length=S,
                     position_embedding_type="learned_absolute", share_embeddings_and_output_weights=True,
                     pre_process=first, post_process=last).cuda()
    w = full_weights()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(w[global_name(name, pp_rank)])    # a checkpoint load: stage 1 gets the tied matrix too
    model = DistributedDataParallel(config=config, module=model, ddp_config=DistributedDataParallelConfig(
        overlap_grad_reduce=True, bucket_size=2000))
    config.no_sync_func = model.no_sync
    config.finalize_model_grads_func = finalize_model_grads
    opt = get_megatron_optimizer(OptimizerConfig(optimizer="sgd", lr=LR, sgd_momentum=0.9, weight_decay=0.0,
                                                 clip_grad=CLIP),
                                 [model])
    pos = torch.arange(S).unsqueeze(0).expand(MICRO_B, S)

    def loss_func(per_token):
        loss = per_token.float().mean()
        return loss, {"loss": loss.detach().clone()}

    def forward_step(data_iterator, model):
        ids, labels = next(data_iterator)
        out = model(ids.cuda(), pos.cuda(), None, labels=labels.cuda())
        return out, loss_func

    forward_backward = get_forward_backward_func()
    want_losses, want_norms, want_w = reference()
    per_dp = GLOBAL_B // DP
    for step in range(STEPS):
        ids, labels = batch(step)
        ids, labels = ids[dp_rank * per_dp:(dp_rank + 1) * per_dp], labels[dp_rank * per_dp:(dp_rank + 1) * per_dp]
        micro = [(ids[i:i + MICRO_B], labels[i:i + MICRO_B]) for i in range(0, per_dp, MICRO_B)]
        model.zero_grad_buffer()
        opt.zero_grad()
        out = forward_backward(forward_step_func=forward_step, data_iterator=iter(micro), model=model,
                               num_microbatches=len(micro), seq_length=S, micro_batch_size=MICRO_B,
                               forward_only=False)
        ok, grad_norm, _ = opt.step()
        assert ok
        assert abs(float(grad_norm) - want_norms[step]) < 1e-4 * want_norms[step], (step, grad_norm, want_norms)
        if last:
            mine = torch.stack([o["loss"] for o in out]).mean().reshape(1)
            every = [torch.empty(1, device="cuda") for _ in range(DP)]
            dist.all_gather(every, mine, group=parallel_state.get_data_parallel_group())
            loss = torch.cat(every).mean().item()
            assert abs(loss - want_losses[step]) < 1e-5, (step, loss, want_losses[step])
    for name, p in model.module.named_parameters():
        torch.testing.assert_close(p.detach().cpu(), want_w[global_name(name, pp_rank)], rtol=1e-4, atol=2e-5)
    tied = (model.module.embedding.word_embeddings.weight if first else model.module.output_layer.weight).detach()
    other = tied.clone()
    dist.broadcast(other, parallel_state.get_pipeline_model_parallel_first_rank(),
                   group=parallel_state.get_pipeline_model_parallel_group())
    assert torch.equal(other, tied), "the two stages' copies of the tied embedding differ"
    print(f"rank {dist.get_rank()} (pp {pp_rank}, dp {dp_rank}): {STEPS} steps equal the reference")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
