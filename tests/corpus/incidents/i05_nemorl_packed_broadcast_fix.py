"""I5 NeMo-RL refit, fixed as in commit cf766d5 (pull/3280): every side stream is synchronized before the producer
and the consumer return.

EXPECTED: clean
NCCL: 2.8
INCIDENT: https://github.com/NVIDIA-NeMo/RL/pull/3280 (commit cf766d5), see also pull/3055; twin of
i05_nemorl_packed_broadcast_bug.py (same program, the fix added).
MODELLED ON: nemo_rl/utils/packed_tensor.py at cf766d5: `for s in streams: s.synchronize()` at the end of
`packed_broadcast_producer` ("Join all packing/broadcast side streams before returning") and of
`packed_broadcast_consumer` ("Join all recv/unpack/load side streams before returning").
SIMPLIFIED: as in the buggy twin.
RULE: `Stream.synchronize()` blocks the host until the stream's queued work is done, so everything the host launches
afterwards, on any stream, runs after it (torch.cuda.Stream.synchronize; CUDA cudaStreamSynchronize).
WHAT SIMDIST SAYS: clean; the vLLM worker checks its weights and logits against the trainer's weights computed on the
CPU, the trainer checks its updated weights.
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
    for s in streams:                            # FIX (cf766d5): join all side streams before returning
        s.synchronize()


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
    for s in streams:                            # FIX (cf766d5): join all side streams before returning
        s.synchronize()


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
        for i, n in enumerate(NAMES):
            assert torch.allclose(params[n].cpu(), trained_weight(i, 1) + 0.01), f"{n} wrong"
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
        for i, n in enumerate(NAMES):                # the worker holds exactly the trainer's step-1 weights
            assert torch.equal(model[n].cpu(), trained_weight(i, 1)), f"{n} not loaded"
        ref = sum((torch.ones(4, SHAPE[0]) @ trained_weight(i, 1)).sum() for i in range(len(NAMES)))
        assert abs(logits.item() - ref.item()) < 1e-2, (logits.item(), ref.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
