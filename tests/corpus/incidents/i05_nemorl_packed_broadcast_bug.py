"""I5 NeMo-RL refit (non-colocated, NCCL): packed weight broadcast round-robin over two side streams, never joined
before the function returns: generation reads weights still being loaded, and the trainer updates weights still being
sent.

EXPECTED: hazard
KINDS: read-after-write, write-after-read
NCCL: 2.8
INCIDENT: https://github.com/NVIDIA-NeMo/RL/pull/3280 ("build: bump vllm 0.20.0 -> 0.25.1", 2026), whose commit
cf766d5 adds to nemo_rl/utils/packed_tensor.py, at the end of both functions, `for s in streams: s.synchronize()`
with the comments "the caller may mutate or offload the source weights while the final broadcasts are still in
flight on the side streams" and "generation can start reading model weights while the final unpack/load copies are
still in flight on the side streams, producing garbage logprobs (vLLM >= 0.25's PyNcclCommunicator enqueues on the
current stream without blocking)". See also https://github.com/NVIDIA-NeMo/RL/pull/3055.
MODELLED ON: nemo_rl/utils/packed_tensor.py at cf766d5^: `packed_broadcast_producer(iterator, group, src,
post_iter_func)` and `packed_broadcast_consumer(iterator, group, src, post_unpack_func)`: `num_buffers = 2` streams
(`NRL_REFIT_NUM_BUFFERS`), `buffer_idx = (buffer_idx + 1) % num_buffers`, `streams[buffer_idx].synchronize()` before
a stream's buffer is reused, then under `with torch.cuda.stream(streams[buffer_idx])`: the producer packs
`post_iter_func(next(iterator)).contiguous().view(torch.uint8).view(-1)` views until `target_packed_tensor_size` is
passed, `torch.cat`s them and calls `group.broadcast(packed_tensors[buffer_idx], src=src)`; the consumer allocates
`torch.empty(size, dtype=torch.uint8)`, receives the broadcast and calls `post_unpack_func(unpack_tensor(...))`
(split_with_sizes + view; vLLM's `model.load_weights` copies into the parameters).
SIMPLIFIED: rank 0 is the trainer (producer), rank 1 the vLLM worker (consumer); vLLM's PyNcclCommunicator is
torch.distributed's world group: with NCCL profile 2.8 a synchronous broadcast is enqueued on the current stream and
does not block the host, which is what PyNcclCommunicator >= 0.25 does; eight fp32 weights of 4 KiB and
`target_packed_tensor_size` = 8 KiB, so three packed buffers go over the two streams (the first stream is
synchronized before its reuse, the last two never); generation is one matmul per weight on the default stream; the
trainer's next use of its weights is the next optimizer step (`add_` on the default stream).
RULE: `Stream.synchronize()` of a stream the host is about to reuse orders nothing on other streams; work on a side
stream is unordered with later default-stream work unless a wait or a host synchronization of that stream orders it
(CUDA Programming Guide, "Streams").
WHAT SIMDIST SAYS: read-after-write on the consumer (load_weights' copy_ on a side stream, generation's matmul on the
default stream) and write-after-read on the producer (torch.cat reads a weight on a side stream, the next optimizer
step writes it on the default stream).
"""
import math
import os

import torch
import torch.distributed as dist

NAMES = [f"model.layers.{i // 2}.{'mlp' if i % 2 else 'attn'}.weight" for i in range(8)]
SHAPE = (32, 32)
TARGET_PACKED_TENSOR_SIZE = 8 * 1024            # get_target_packed_tensor_size(), in bytes
NUM_BUFFERS = 2                                 # get_num_buffers()


def trained_weight(i, step):
    g = torch.Generator().manual_seed(i)
    return torch.randn(*SHAPE, generator=g) + 0.01 * step


def packed_broadcast_producer(iterator, group, src, post_iter_func):
    streams = [torch.cuda.Stream() for _ in range(NUM_BUFFERS)]
    buffer_idx = 0
    packing_tensor_list = [[] for _ in range(NUM_BUFFERS)]
    packing_tensor_sizes = [0 for _ in range(NUM_BUFFERS)]
    packed_tensors = [torch.empty(0, dtype=torch.uint8, device="cuda") for _ in range(NUM_BUFFERS)]
    while True:
        buffer_idx = (buffer_idx + 1) % NUM_BUFFERS
        streams[buffer_idx].synchronize()
        with torch.cuda.stream(streams[buffer_idx]):
            try:
                packing_tensor_list[buffer_idx] = []
                packing_tensor_sizes[buffer_idx] = 0
                while True:
                    tensor = post_iter_func(next(iterator)).contiguous().view(torch.uint8).view(-1)
                    packing_tensor_list[buffer_idx].append(tensor)
                    packing_tensor_sizes[buffer_idx] += tensor.view(torch.uint8).numel()
                    if packing_tensor_sizes[buffer_idx] > TARGET_PACKED_TENSOR_SIZE:
                        break
                packed_tensors[buffer_idx] = torch.cat(packing_tensor_list[buffer_idx], dim=0)
                dist.broadcast(packed_tensors[buffer_idx], src=src, group=group)
            except StopIteration:
                if len(packing_tensor_list[buffer_idx]) > 0:
                    packed_tensors[buffer_idx] = torch.cat(packing_tensor_list[buffer_idx], dim=0)
                    dist.broadcast(packed_tensors[buffer_idx], src=src, group=group)
                break
    # BUG (before cf766d5): no `for s in streams: s.synchronize()` here


def packed_broadcast_consumer(iterator, group, src, post_unpack_func):
    def unpack_tensor(packed_tensor, meta_data_list):
        sizes = [m[4] for m in meta_data_list]
        return [(meta_data_list[i][0], t.view(meta_data_list[i][2]).view(*meta_data_list[i][1]))
                for i, t in enumerate(packed_tensor.split_with_sizes(sizes))]

    streams = [torch.cuda.Stream() for _ in range(NUM_BUFFERS)]
    buffer_idx = 0
    packing_tensor_meta_data = [[] for _ in range(NUM_BUFFERS)]
    packing_tensor_sizes = [0 for _ in range(NUM_BUFFERS)]
    offsets = [0 for _ in range(NUM_BUFFERS)]
    packed_tensors = [torch.empty(0, dtype=torch.uint8, device="cuda") for _ in range(NUM_BUFFERS)]
    while True:
        buffer_idx = (buffer_idx + 1) % NUM_BUFFERS
        streams[buffer_idx].synchronize()
        with torch.cuda.stream(streams[buffer_idx]):
            packing_tensor_meta_data[buffer_idx] = []
            packing_tensor_sizes[buffer_idx] = 0
            offsets[buffer_idx] = 0
            try:
                while True:
                    name, (shape, dtype) = next(iterator)
                    tensor_size = math.prod(shape) * dtype.itemsize
                    packing_tensor_meta_data[buffer_idx].append((name, shape, dtype, offsets[buffer_idx], tensor_size))
                    packing_tensor_sizes[buffer_idx] += tensor_size
                    offsets[buffer_idx] += tensor_size
                    if packing_tensor_sizes[buffer_idx] > TARGET_PACKED_TENSOR_SIZE:
                        break
                packed_tensors[buffer_idx] = torch.empty(packing_tensor_sizes[buffer_idx], dtype=torch.uint8,
                                                         device="cuda")
                dist.broadcast(packed_tensors[buffer_idx], src=src, group=group)
                post_unpack_func(unpack_tensor(packed_tensors[buffer_idx], packing_tensor_meta_data[buffer_idx]))
            except StopIteration:
                if len(packing_tensor_meta_data[buffer_idx]) > 0:
                    packed_tensors[buffer_idx] = torch.empty(packing_tensor_sizes[buffer_idx], dtype=torch.uint8,
                                                             device="cuda")
                    dist.broadcast(packed_tensors[buffer_idx], src=src, group=group)
                    post_unpack_func(unpack_tensor(packed_tensors[buffer_idx],
                                                   packing_tensor_meta_data[buffer_idx]))
                break
    # BUG (before cf766d5): no `for s in streams: s.synchronize()` here


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    group = dist.group.WORLD                     # the refit communicator (vLLM PyNcclCommunicator)
    x = torch.ones(4, SHAPE[0], device="cuda")
    if rank == 0:                                # trainer (Megatron policy worker)
        params = {n: trained_weight(i, 1).cuda() for i, n in enumerate(NAMES)}
        params[NAMES[0]].mul_(1.0)               # the optimizer step wrote the weights on the default stream...
        torch.cuda.current_stream().synchronize()  # ...and the step's metrics were read back (.item()): host sync
        packed_broadcast_producer(iter(params.items()), group, 0, lambda kv: kv[1])
        for i, n in enumerate(NAMES):            # next training step: the optimizer updates the weights
            params[n].add_(0.01)
        print(f"rank {rank}: trainer weights after the next step {sum(p.sum().item() for p in params.values()):.3f}")
    else:                                        # vLLM worker
        model = {n: torch.zeros(*SHAPE, device="cuda") for n in NAMES}
        torch.cuda.synchronize()                 # the engine was built (and synchronized) long before the refit

        def load_weights(named_tensors):         # vLLM model.load_weights -> param.copy_(loaded)
            for name, t in named_tensors:
                model[name].copy_(t)
        meta = iter([(n, (SHAPE, torch.float32)) for n in NAMES])
        packed_broadcast_consumer(meta, group, 0, load_weights)
        logits = sum((x @ model[n]).sum() for n in NAMES)   # generation reads the weights on the default stream
        print(f"rank {rank}: generation logits sum {logits.item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
