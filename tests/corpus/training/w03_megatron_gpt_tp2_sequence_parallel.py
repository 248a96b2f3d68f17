"""Megatron-Core 0.16.1 GPTModel (2 layers, learned absolute positions, the local layer spec) at TP=2 with
sequence parallelism (`sequence_parallel=True`): the embedding's reduce-scatter to the sequence dimension, the
all-gather before every column-parallel linear and the reduce-scatter after every row-parallel one, the
all-gathered output layer and vocab-parallel cross entropy; Megatron's DistributedDataParallel and
`finalize_model_grads` (which all-reduces the sequence-parallel LayerNorm and row-bias gradients over TP), then an
SGD-with-momentum step through `get_megatron_optimizer` and a second forward. Losses and every parameter's gradient shard
checked against a plain-torch GPT written out in one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: megatron/core/models/gpt/gpt_model.py (GPTModel), transformer/transformer_layer.py,
tensor_parallel/layers.py (ColumnParallelLinear / RowParallelLinear with sequence_parallel:
`gather_from_sequence_parallel_region`, `reduce_scatter_to_sequence_parallel_region`,
LinearWithGradAccumulationAndAsyncCommunication's backward reduce-scatter of grad_input), tensor_parallel/
mappings.py, distributed/finalize_model_grads.py (`_allreduce_non_tensor_model_parallel_grads` for params with
`sequence_parallel=True`). Megatron's torch-norm fallback refuses sequence parallelism (torch_norm.py: "sequence
parallel not supported by torch LayerNorm"; a GPU without Apex/TE refuses it too), so the spec's norms are a
torch LayerNorm that marks its parameters `sequence_parallel` as Megatron's FusedLayerNorm does
(fusions/fused_layer_norm.py lines 116-120).
REASON: every sequence-parallel collective is synchronous or waited before its output is used (mappings.py
autograd Functions call the collectives with async_op=False; the async grad-input reduce-scatter is waited in
LinearWithGradAccumulationAndAsyncCommunication.backward before it returns), so the values equal the unsharded
model's: the LayerNorm gradients are partial per rank until finalize_model_grads sums them over TP.
"""
import math
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

from megatron.core import parallel_state, tensor_parallel
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

TP, L, H, NH, FFN, V, S, B = 2, 2, 16, 2, 32, 32, 8, 2
HN = H // NH
LR = 1e-2


class SPNorm(torch.nn.LayerNorm):
    """A LayerNorm for the spec that marks its parameters as Megatron's FusedLayerNorm does."""

    def __init__(self, config, hidden_size, eps=1e-5, **kwargs):
        super().__init__(hidden_size, eps=eps)
        for p in self.parameters():
            p.sequence_parallel = config.sequence_parallel


def full_weights():
    g = torch.Generator().manual_seed(0)
    w = {"embedding.word_embeddings.weight": torch.randn(V, H, generator=g) * 0.3,
         "embedding.position_embeddings.weight": torch.randn(S, H, generator=g) * 0.3,
         "output_layer.weight": torch.randn(V, H, generator=g) * 0.3}
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


def shard(name, full, tp_rank, p):
    if getattr(p, "tensor_model_parallel", False):
        return full.chunk(TP, p.partition_dim)[tp_rank]
    return full


def reference_loss(w, ids, labels):
    """The same GPT, unsharded, in plain torch: [s, b, h] activations as Megatron keeps them."""
    x = (w["embedding.word_embeddings.weight"][ids] + w["embedding.position_embeddings.weight"][:S]).transpose(0, 1)
    causal = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    for i in range(L):
        p = f"decoder.layers.{i}."
        ln = F.layer_norm(x, (H,), w[p + "input_layernorm.weight"], w[p + "input_layernorm.bias"])
        qkv = F.linear(ln, w[p + "self_attention.linear_qkv.weight"], w[p + "self_attention.linear_qkv.bias"])
        q, k, v = qkv.view(S, B, NH, 3 * HN).split(HN, dim=-1)          # per head: [q, k, v] rows
        scores = torch.einsum("sbnd,tbnd->bnst", q, k) / math.sqrt(HN)
        probs = scores.masked_fill(causal, float("-inf")).softmax(-1)
        ctx = torch.einsum("bnst,tbnd->sbnd", probs, v).reshape(S, B, H)
        x = x + F.linear(ctx, w[p + "self_attention.linear_proj.weight"], w[p + "self_attention.linear_proj.bias"])
        ln = F.layer_norm(x, (H,), w[p + "pre_mlp_layernorm.weight"], w[p + "pre_mlp_layernorm.bias"])
        h = F.gelu(F.linear(ln, w[p + "mlp.linear_fc1.weight"], w[p + "mlp.linear_fc1.bias"]))
        x = x + F.linear(h, w[p + "mlp.linear_fc2.weight"], w[p + "mlp.linear_fc2.bias"])
    x = F.layer_norm(x, (H,), w["decoder.final_layernorm.weight"], w["decoder.final_layernorm.bias"])
    logits = F.linear(x, w["output_layer.weight"])                         # [s, b, v]
    return F.cross_entropy(logits.transpose(0, 1).reshape(-1, V), labels.reshape(-1))


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=TP)
    tensor_parallel.model_parallel_cuda_manual_seed(123)
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    config = TransformerConfig(num_layers=L, hidden_size=H, ffn_hidden_size=FFN, num_attention_heads=NH,
                               tensor_model_parallel_size=TP, sequence_parallel=True, use_cpu_initialization=True,
                               hidden_dropout=0.0, attention_dropout=0.0)
    layer = get_gpt_layer_local_spec()
    layer.submodules.input_layernorm = SPNorm
    layer.submodules.pre_mlp_layernorm = SPNorm
    model = GPTModel(config, TransformerBlockSubmodules(layer_specs=[layer] * L, layer_norm=SPNorm),
                     vocab_size=V, max_sequence_length=S, position_embedding_type="learned_absolute").cuda()
    w = full_weights()
    assert sorted(w) == sorted(n for n, _ in model.named_parameters())
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(shard(name, w[name], tp_rank, p))
    model = DistributedDataParallel(config=config, module=model,
                                    ddp_config=DistributedDataParallelConfig(overlap_grad_reduce=False))
    config.finalize_model_grads_func = finalize_model_grads
    opt = get_megatron_optimizer(OptimizerConfig(optimizer="sgd", lr=LR, sgd_momentum=0.9, weight_decay=0.0,
                                                 clip_grad=0.0),
                                 [model])

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (B, S), generator=g)
    labels = torch.randint(0, V, (B, S), generator=g)
    pos = torch.arange(S).unsqueeze(0).expand(B, S)

    ref = {n: t.clone().requires_grad_(True) for n, t in w.items()}
    # SGD with momentum, not Adam: the key bias's gradient is zero up to rounding (softmax ignores a per-row
    # constant), and Adam would turn either rounding noise into a full step of lr
    ref_opt = torch.optim.SGD(list(ref.values()), lr=LR, momentum=0.9, foreach=False)
    for step in range(2):
        model.zero_grad_buffer()
        opt.zero_grad()
        loss = model(ids.cuda(), pos.cuda(), None, labels=labels.cuda()).mean()
        loss.backward()
        finalize_model_grads([model])
        ref_opt.zero_grad()
        rl = reference_loss(ref, ids, labels)
        rl.backward()
        assert torch.allclose(loss.detach().cpu(), rl.detach(), atol=1e-5), (step, loss.item(), rl.item())
        for name, p in model.module.named_parameters():
            exp = shard(name, ref[name].grad, tp_rank, p)
            got = p.main_grad.cpu()
            assert torch.allclose(got, exp, atol=1e-5, rtol=1e-4), (step, name, (got - exp).abs().max())
        ok, _, _ = opt.step()
        assert ok
        ref_opt.step()
    for name, p in model.module.named_parameters():
        exp = shard(name, ref[name].detach(), tp_rank, p)
        assert torch.allclose(p.detach().cpu(), exp, atol=1e-5), (name, (p.detach().cpu() - exp).abs().max())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
