"""I4 ms-swift Megatron GRPO, server mode: the weight bucket's copy_ was said to read the TP-gathered weights before
the all-gathers finished. Under PyTorch's documented stream semantics it cannot: this "buggy" program is clean.

EXPECTED: clean
INCIDENT: https://github.com/modelscope/ms-swift/pull/9060 ("[bugfix] fix multi-node server mode weight sync race
condition", 2026, commit 88eae0f). The author's diagnosis: "bridge.export_weights() reconstructs full weights via
TP all-gather on the NCCL communication stream. When these tensors are yielded to _load_weights_to_server_in_buckets,
FlattenedTensorBucket.__init__ calls .copy_() on the default CUDA stream without waiting for the all-gather to
finish"; the fix adds `synchronize()` at the top of `_sync_bucket_to_server` (i04_msswift_bucket_copy_fix.py).
MODELLED ON: swift/megatron/trainers/rollout_mixin.py at 88eae0f^ (`_export_and_load_weights`,
`_load_weights_to_server_in_buckets`, `_sync_bucket_to_server`), swift/rlhf_trainers/utils.py
`FlattenedTensorBucket.__init__` (`torch.empty(total_numel, ...)`, then
`self.flattened_tensor[meta.start_idx:meta.end_idx].copy_(tensor.flatten())`), and mcore-bridge
src/mcore_bridge/bridge/gpt_bridge.py `GPTBridge._all_gather_tp` (tp_dim 0: `dist.all_gather_into_tensor(output,
tensor, group=tp_group)`; otherwise the list form `dist.all_gather(output, tensor, group=tp_group)` and
`torch.cat(output, dim=tp_dim)`), both with the default async_op=False, called from `export_weights` / `_get_weight`.
SIMPLIFIED: TP = world size = 2, PP = EP = 1 (no `_broadcast_ep_pp`); four weights, two column-parallel (dim 0) and
two row-parallel (dim 1); a bucket size of 24 KiB so that there are several buckets. `vllm_client.update_flattened_params`
(an HTTP post, then `synchronize()`, a PyNcclCommunicator broadcast of the flattened tensor to the vLLM server on the
current stream, `synchronize()`, barrier) is replaced by a host read of the flattened bucket on the main process
(rank 0): both synchronize() calls order the broadcast after the copies the same way.
RULE: a synchronous collective (async_op=False) is ordered before later work on the caller's current stream. torch
<= 2.7: it runs on the process group's internal NCCL stream and "the current stream waits on the end event"
(ProcessGroupNCCL::WorkNCCL::synchronizeStream; ../shared/FACTS.md "PyTorch semantics"); torch >= 2.8: it runs on
the current stream itself. Either way the default-stream copy_ in FlattenedTensorBucket runs after the all-gather.
WHAT SIMDIST SAYS: clean under both NCCL profiles (tests/test_incidents.py runs it under 2.7 and 2.8): the edge the
author added was already there, so `synchronize()` only over-synchronizes this path. Whatever damaged the weights
on the multi-node run is not in the code the PR names (one candidate outside it: `_update_single_server` runs in a
ThreadPoolExecutor thread, whose current device and stream are not the trainer thread's; not modelled here).
"""
import os

import torch
import torch.distributed as dist

# name -> (full shape, tp split dim): ColumnParallelLinear weights split dim 0, RowParallelLinear dim 1
WEIGHTS = {
    "model.layers.0.self_attn.qkv_proj.weight": ((96, 32), 0),
    "model.layers.0.self_attn.o_proj.weight": ((32, 32), 1),
    "model.layers.0.mlp.gate_up_proj.weight": ((128, 32), 0),
    "model.layers.0.mlp.down_proj.weight": ((32, 64), 1),
}
BUCKET_SIZE_BYTES = 24 * 1024   # SWIFT_UPDATE_WEIGHTS_BUCKET_SIZE (MB in ms-swift)


def full_weight(name):
    shape, _ = WEIGHTS[name]
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    return torch.randn(*shape, generator=g)


def local_shard(name, tp_rank, tp_size):
    _, dim = WEIGHTS[name]
    return full_weight(name).chunk(tp_size, dim=dim)[tp_rank].contiguous()


def all_gather_tp(tensor, tp_dim, tp_size):
    """GPTBridge._all_gather_tp."""
    if tp_dim == 0:
        tensor_shape = list(tensor.shape)
        tensor_shape[0] *= tp_size
        output = tensor.new_empty(tensor_shape)
        dist.all_gather_into_tensor(output, tensor)
        return output
    output = [torch.empty_like(tensor) for _ in range(tp_size)]
    dist.all_gather(output, tensor)
    return torch.cat(output, dim=tp_dim)


def export_weights(shards, tp_size):
    """GPTBridge.export_weights: yields (hf_name, full tensor), gathering each weight over TP."""
    with torch.no_grad():
        for name, shard in shards.items():
            # Megatron keeps the shard in a bf16/fp32 param; the converter scales it (a kernel on the current stream)
            tensor = shard * 1.0
            yield name, all_gather_tp(tensor, WEIGHTS[name][1], tp_size)


class FlattenedTensorBucket:
    def __init__(self, named_tensors):
        self.metadata, idx = [], 0
        for name, tensor in named_tensors:
            self.metadata.append((name, tuple(tensor.shape), idx, idx + tensor.numel()))
            idx += tensor.numel()
        first_tensor = named_tensors[0][1]
        self.flattened_tensor = torch.empty(idx, dtype=first_tensor.dtype, device=first_tensor.device)
        for (_name, _shape, start, end), (_n, tensor) in zip(self.metadata, named_tensors):
            self.flattened_tensor[start:end].copy_(tensor.flatten())   # the copy_ the PR suspected


def main():
    dist.init_process_group("nccl")
    rank, tp_size = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    shards = {name: local_shard(name, rank, tp_size).cuda() for name in WEIGHTS}
    is_main_process = rank == 0
    received = {}

    def sync_bucket_to_server(bucket_params):                    # MegatronRolloutMixin._sync_bucket_to_server
        if not bucket_params or not is_main_process:
            return
        bucket = FlattenedTensorBucket(named_tensors=bucket_params)
        flat = bucket.flattened_tensor.cpu()                     # stands for update_flattened_params (see docstring)
        for name, shape, start, end in bucket.metadata:
            received[name] = flat[start:end].view(shape)

    current_bucket, current_size = [], 0                         # _load_weights_to_server_in_buckets
    for name, param in export_weights(shards, tp_size):
        current_bucket.append((name, param))
        current_size += param.numel() * param.element_size()
        if current_size > BUCKET_SIZE_BYTES and current_bucket:
            sync_bucket_to_server(current_bucket)
            current_bucket, current_size = [], 0
    if current_bucket:
        sync_bucket_to_server(current_bucket)

    if is_main_process:
        sums = {n.split(".")[-2]: round(t.sum().item(), 3) for n, t in received.items()}
        print(f"rank {rank}: weights received by the server {sums}")
        for name, t in received.items():                         # the server got the unsharded weights
            assert torch.equal(t, full_weight(name)), f"{name} wrong"
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
