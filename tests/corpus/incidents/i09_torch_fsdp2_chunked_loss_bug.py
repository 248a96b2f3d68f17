"""I9 PyTorch FSDP2, chunked loss (grouped fully_shard, post_backward once per chunk): the next chunk's backward
allocates on the default stream while the previous chunk's reduce-scatter still reads its input on the
reduce-scatter stream. This is the standalone form of the race ("vector 1"), without FSDP2's ref-hold.

EXPECTED: hazard
KINDS: reuse-after-free
NCCL: 2.8
INCIDENT: https://github.com/pytorch/pytorch/pull/181218 ("FSDP2 chunked-loss ROCm race: stream-level wait_event at
post_backward exit", 2026): "When a standalone per-chunk head call triggers post_backward, chunk N+1's autograd
backward runs on the default stream concurrently with chunk N's accumulate on the RS stream. The caching allocator
can hand an autograd kernel a block that is a live input/output of chunk N's accumulate". Fix:
`current_stream().wait_event(self._post_reduce_event)` at post_backward exit on the partial-group path; twin:
i09_torch_fsdp2_chunked_loss_fix.py. The PR's own notes (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py,
`post_backward`, "TODO(#181218)") say that "the standalone repro shows the stream-ordering hazard (vector 1) is
cross-platform, but FSDP's ref-hold closes it on both" and that the residual ROCm race "is on a non-Python-reachable
buffer - RCCL workspace or allocator fragment"; FSDP2's structure with the ref-hold is
i09_torch_fsdp2_chunked_loss_refhold_bug.py (clean).
MODELLED ON: torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py `foreach_reduce` (torch 2.13): the
reduce-scatter input is allocated and filled (`foreach_reduce_scatter_copy_in`) on the current stream,
`reduce_scatter_stream.wait_stream(current_stream)`, then on the reduce-scatter stream: `_div_if_needed(
reduce_scatter_input, predivide_factor)`, the reduce-scatter into `reduce_output` (allocated there),
`reduce_scatter_event`, the sharded-gradient accumulation (`sharded_param.grad._local_tensor += new_sharded_grad`),
`post_reduce_event`; `FSDPParamGroup.post_backward` and the root's `_root_post_backward_final_callback`
(`current_stream().wait_event(...)` on the post-reduce events before the optimizer).
SIMPLIFIED: one FSDP parameter group holding the LM head weight (64 x 32), already unsharded (reshard_after_forward
off, so no all-gather); two loss chunks; autograd's backward of `h @ W.T` with an MSE loss is written out as two
matmuls on the default stream; the reduce-scatter input is released at the end of `foreach_reduce` (no ref-hold).
RULE: a block allocated on the default stream and read on another stream is reused by the next default-stream
allocation at once, unless record_stream or a wait orders that allocation after the read (c10/cuda/
CUDACachingAllocator.cpp); with NCCL profile 2.8 (torch >= 2.8, the incident's era) the synchronous reduce-scatter
runs on the reduce-scatter stream with no record_stream.
WHAT SIMDIST SAYS: reuse-after-free: chunk 1's gradient matmul (default stream) writes the block chunk 0's
reduce-scatter (reduce-scatter stream) reads.
"""
import os

import torch
import torch.distributed as dist

V, H, B = 64, 32, 16          # vocab, hidden, tokens per chunk
CHUNKS = 2
LR = 0.5


def data(rank):
    g = torch.Generator().manual_seed(3)
    w = torch.randn(V, H, generator=g) / H
    g = torch.Generator().manual_seed(100 + rank)
    hs = [torch.randn(B, H, generator=g) for _ in range(CHUNKS)]
    ts = [torch.randn(B, V, generator=g) for _ in range(CHUNKS)]
    return w, hs, ts


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    reduce_scatter_stream = torch.cuda.Stream()           # comm_ctx.reduce_scatter_stream
    w_cpu, hs, ts = data(rank)
    weight = w_cpu.cuda()                                 # unsharded head weight
    shard = weight.numel() // world
    sharded_param = weight.view(-1)[rank * shard:(rank + 1) * shard].clone()
    sharded_grad = None
    post_reduce_event = None

    for c in range(CHUNKS):                               # chunked loss: head forward + backward per chunk
        h, t = hs[c].cuda(), ts[c].cuda()
        logits = h @ weight.t()
        dlogits = (logits - t) * (2.0 / logits.numel())   # d(mse)/d(logits)
        unsharded_grad = dlogits.t() @ h                  # autograd kernel: allocates on the default stream

        # FSDPParamGroup.post_backward -> foreach_reduce
        current_stream = torch.cuda.current_stream()
        reduce_scatter_input = torch.empty(weight.numel(), device="cuda")
        reduce_scatter_input.copy_(unsharded_grad.view(-1))          # foreach_reduce_scatter_copy_in
        unsharded_grad = None
        reduce_scatter_stream.wait_stream(current_stream)
        with torch.cuda.stream(reduce_scatter_stream):
            reduce_scatter_input.div_(world)                          # _div_if_needed(..., predivide_factor)
            reduce_output = torch.empty(shard, device="cuda")
            dist.reduce_scatter_tensor(reduce_output, reduce_scatter_input)
            reduce_scatter_event = reduce_scatter_stream.record_event()
            if sharded_grad is None:                                  # accumulate the sharded gradient
                sharded_grad = reduce_output
            else:
                sharded_grad += reduce_output
            post_reduce_event = reduce_scatter_stream.record_event()
        del reduce_scatter_input, reduce_scatter_event                # BUG (vector 1): no ref-hold, no wait
        # (pull/181218 adds here: current_stream().wait_event(self._post_reduce_event))

    torch.cuda.current_stream().wait_event(post_reduce_event)         # _root_post_backward_final_callback
    sharded_param.sub_(sharded_grad, alpha=LR)                        # optimizer.step()
    print(f"rank {rank}: updated shard sum {sharded_param.sum().item():.5f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
