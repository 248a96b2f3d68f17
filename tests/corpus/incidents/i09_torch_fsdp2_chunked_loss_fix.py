"""I9 PyTorch FSDP2, chunked loss, fixed as in pull/181218: at post_backward exit the current stream waits for the
post-reduce event, so the next chunk's backward runs after this chunk's reduce-scatter and accumulation.

EXPECTED: clean
NCCL: 2.8
INCIDENT: https://github.com/pytorch/pytorch/pull/181218 (2026); twin of i09_torch_fsdp2_chunked_loss_bug.py (same
program, the fix added).
MODELLED ON: torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py (torch 2.13) `FSDPParamGroup.post_backward`:
`if is_partial_group_backward: self.device_handle.current_stream().wait_event(self._post_reduce_event)` ("Serialize
the default stream on this invocation's post-accumulate event before returning to autograd ... No CPU sync").
SIMPLIFIED: as in the buggy twin.
RULE: `Stream.wait_event(e)` orders all later work on the stream after the work `e` captured (torch.cuda.Stream docs;
cudaStreamWaitEvent), so the next default-stream allocation's kernels run after the reduce-scatter read the block.
WHAT SIMDIST SAYS: clean; the program checks the updated shard against the same step on the CPU.
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
        del reduce_scatter_input, reduce_scatter_event
        current_stream.wait_event(post_reduce_event)                  # FIX (pull/181218), at post_backward exit

    torch.cuda.current_stream().wait_event(post_reduce_event)         # _root_post_backward_final_callback
    sharded_param.sub_(sharded_grad, alpha=LR)                        # optimizer.step()
    print(f"rank {rank}: updated shard sum {sharded_param.sum().item():.5f}")
    full_grad = torch.zeros(V, H)                                     # reference: the same step on the CPU
    for r in range(world):
        w, hs_r, ts_r = data(r)
        for c in range(CHUNKS):
            full_grad += (((hs_r[c] @ w.t()) - ts_r[c]) * (2.0 / (B * V))).t() @ hs_r[c] / world
    ref = w_cpu.view(-1)[rank * shard:(rank + 1) * shard] - LR * full_grad.view(-1)[rank * shard:(rank + 1) * shard]
    assert torch.allclose(sharded_param.cpu(), ref, atol=1e-5), "updated shard wrong"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
