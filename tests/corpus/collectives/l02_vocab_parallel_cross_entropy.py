"""Megatron vocab-parallel cross entropy: logits sharded over the vocabulary; all_reduce MAX of the row max, masked
target logit all_reduce SUM, sum of exp all_reduce SUM; the loss equals the full-vocabulary cross entropy.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: megatron/core/tensor_parallel/cross_entropy.py `_VocabParallelCrossEntropy.forward` (all_reduce
ReduceOp.MAX on logits_max, then ReduceOp.SUM on predicted_logits and sum_exp_logits, all synchronous on the TP
group) and `VocabUtility.vocab_range_from_per_partition_vocab_size`.
REASON: synchronous collectives are ordered on the current stream (torch.distributed docs, async_op=False), so each
in-place all_reduce result is what the next op reads; values are F.cross_entropy on the full logits.
"""
import os
import torch
import torch.distributed as dist
import torch.nn.functional as F


def vocab_parallel_cross_entropy(logits, target):
    rank, world = dist.get_rank(), dist.get_world_size()
    logits_max = torch.max(logits, dim=-1)[0]
    dist.all_reduce(logits_max, op=dist.ReduceOp.MAX)
    logits = logits - logits_max.unsqueeze(-1)
    part = logits.size(-1)
    start, end = rank * part, (rank + 1) * part
    mask = (target < start) | (target >= end)
    masked_target = target.clone() - start
    masked_target[mask] = 0
    logits_2d = logits.view(-1, part)
    arange = torch.arange(0, logits_2d.size(0), device=logits_2d.device)
    predicted = logits_2d[arange, masked_target.view(-1)].clone().contiguous().view_as(target)
    predicted[mask] = 0.0
    dist.all_reduce(predicted, op=dist.ReduceOp.SUM)
    exp_logits = torch.exp(logits)
    sum_exp = exp_logits.sum(dim=-1)
    dist.all_reduce(sum_exp, op=dist.ReduceOp.SUM)
    return torch.log(sum_exp) - predicted


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    g = torch.Generator().manual_seed(7)
    V, T = 16, 5
    full_logits = torch.randn(2, T, V, generator=g) * 3
    target = torch.randint(0, V, (2, T), generator=g)
    part = V // world
    local = full_logits[..., rank * part:(rank + 1) * part].contiguous().cuda()
    loss = vocab_parallel_cross_entropy(local, target.cuda())
    ref = F.cross_entropy(full_logits.view(-1, V), target.view(-1), reduction="none").view(2, T)
    assert torch.allclose(loss.cpu(), ref, atol=1e-5), (loss.cpu(), ref)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
