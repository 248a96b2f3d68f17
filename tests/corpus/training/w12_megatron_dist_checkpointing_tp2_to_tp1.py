"""Megatron-Core 0.16.1 distributed checkpointing: a GPTModel (2 layers, local spec) at TP=2 saves its
`sharded_state_dict()` with `dist_checkpointing.save` (the torch_dist strategy: torch.distributed.checkpoint
underneath, each rank writing its TP shards, the common state from rank 0); a second model at TP=2 with other
weights loads it back; then the parallel state is rebuilt at TP=1 (DP=2) and a TP=1 model loads the same
checkpoint, resharded. Every loaded parameter is checked against the weights the first model was built from
(drawn on the host from a seeded generator: the TP=1 model must hold the full tensors, the TP=2 ones their
shards), and a forward of the resharded model against the saving model's.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: megatron/core/dist_checkpointing/serialization.py (`save`, `load`), strategies/torch.py
(TorchDistSaveShardedStrategy / TorchDistLoadShardedStrategy: ShardedTensor -> torch DCP's
`save_state_dict` / `load_state_dict` with the planners that map TP shards to global offsets),
megatron/core/transformer/module.py and tensor_parallel/layers.py (`sharded_state_dict`: column-parallel weights
sharded on dim 0, row-parallel on dim 1, replicated LayerNorms), parallel_state.destroy_model_parallel /
initialize_model_parallel (changing TP in one job, as Megatron's checkpoint converter does).
REASON: DCP's writes copy each shard to the host and write it (synchronous save: the staging D2H copies are waited
before the files are written), and its loads copy the read bytes into the device tensors before returning; the
sharded state dict places each shard at its global offset, so TP=1 reads exactly the concatenation of the TP=2
shards. Needs psutil (the writer processes call it: notes w8); rank processes shut down the results-queue Manager
Megatron leaves, as an exiting interpreter does (notes w7).
"""
import os
import shutil
import tempfile

import torch
import torch.distributed as dist

from megatron.core import dist_checkpointing, parallel_state, tensor_parallel
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer import TransformerConfig

L, H, NH, FFN, V, S = 2, 16, 2, 32, 32, 8


def build(tp):
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
    tensor_parallel.model_parallel_cuda_manual_seed(123)
    config = TransformerConfig(num_layers=L, hidden_size=H, ffn_hidden_size=FFN, num_attention_heads=NH,
                               tensor_model_parallel_size=tp, use_cpu_initialization=True, hidden_dropout=0.0,
                               attention_dropout=0.0)
    return GPTModel(config, get_gpt_layer_local_spec(), vocab_size=V, max_sequence_length=S,
                    position_embedding_type="learned_absolute").cuda()


def full_weights(model, seed):
    """A full (unsharded) tensor per parameter name, from the parameter's global shape."""
    g = torch.Generator().manual_seed(seed)
    tp = parallel_state.get_tensor_model_parallel_world_size()
    out = {}
    for name, p in model.named_parameters():
        shape = list(p.shape)
        if getattr(p, "tensor_model_parallel", False):
            shape[p.partition_dim] *= tp
        out[name] = torch.randn(*shape, generator=g) * 0.3
    return out


def shard_of(full, p):
    tp = parallel_state.get_tensor_model_parallel_world_size()
    r = parallel_state.get_tensor_model_parallel_rank()
    return full.chunk(tp, p.partition_dim)[r] if getattr(p, "tensor_model_parallel", False) else full


def load_weights(model, w):
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(shard_of(w[name], p))


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    box = [tempfile.mkdtemp(prefix="w12_ckpt_") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    ckpt = box[0]
    ids = torch.randint(0, V, (2, S), generator=torch.Generator().manual_seed(7))
    pos = torch.arange(S).unsqueeze(0).expand(2, S)

    model = build(2)
    w = full_weights(model, 0)
    load_weights(model, w)
    with torch.no_grad():
        ref_logits = tensor_parallel.gather_from_tensor_model_parallel_region(
            model(ids.cuda(), pos.cuda(), None)).cpu()
    dist_checkpointing.save(model.sharded_state_dict(), ckpt)

    other = GPTModel(model.config, get_gpt_layer_local_spec(), vocab_size=V, max_sequence_length=S,
                     position_embedding_type="learned_absolute").cuda()
    load_weights(other, full_weights(other, 1))                   # different weights, then overwritten
    other.load_state_dict(dist_checkpointing.load(other.sharded_state_dict(), ckpt))
    for name, p in other.named_parameters():
        assert torch.equal(p.detach().cpu(), shard_of(w[name], p)), ("tp2", name)

    parallel_state.destroy_model_parallel()
    model1 = build(1)
    load_weights(model1, full_weights(model1, 2))
    model1.load_state_dict(dist_checkpointing.load(model1.sharded_state_dict(), ckpt))
    for name, p in model1.named_parameters():
        assert torch.equal(p.detach().cpu(), w[name]), ("tp1", name, (p.detach().cpu() - w[name]).abs().max())
    with torch.no_grad():
        logits = model1(ids.cuda(), pos.cuda(), None).cpu()
    assert torch.allclose(logits, ref_logits, atol=1e-5), (logits - ref_logits).abs().max()
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(ckpt)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
