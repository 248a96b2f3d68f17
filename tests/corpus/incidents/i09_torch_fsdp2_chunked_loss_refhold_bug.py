"""I9 PyTorch FSDP2, chunked loss, as FSDP2 is written (the reduce-scatter input is ref-held until a later
post_backward waits on its event) and without pull/181218's wait: clean. The race the PR fixed on ROCm is not on a
tensor this code can reach.

EXPECTED: clean
NCCL: 2.8
INCIDENT: https://github.com/pytorch/pytorch/pull/181218 (2026). Its notes in torch/distributed/fsdp/_fully_shard/
_fsdp_param_group.py (`post_backward`, "TODO(#181218): open questions on scope"): "CUDA FSDP passes without this fix.
The standalone repro shows the stream-ordering hazard (vector 1) is cross-platform, but FSDP's ref-hold closes it on
both. The residual FSDP-side race on ROCm (vector 2) is on a non-Python-reachable buffer - RCCL workspace or
allocator fragment." Vector 1 is i09_torch_fsdp2_chunked_loss_bug.py.
MODELLED ON: as i09_torch_fsdp2_chunked_loss_bug.py, plus FSDP2's ref-hold: `self.comm_ctx.reduce_scatter_states.
append(ReduceScatterState(reduce_scatter_input, reduce_scatter_event))` after `foreach_reduce`, and at the next
`post_backward` (last param group, `len(states) >= max_input_buffers`, default 1): `current_stream().wait_event(
oldest.event)` then `del oldest`; the root's final callback waits on the remaining states' events.
SIMPLIFIED: as in i09_torch_fsdp2_chunked_loss_bug.py.
RULE: a tensor that is still referenced is not freed, so the caching allocator cannot hand its block to the next
chunk's autograd kernels; when the reference is dropped, the default stream has already waited on the reduce-scatter
event (torch.cuda.Stream.wait_event).
WHAT SIMDIST SAYS: clean. A happens-before detector over the tensors torch allocates cannot see a race inside RCCL's
workspace (../shared/INCIDENTS.md: NCCL's own buffers are out of reach), so simdist cannot confirm vector 2.
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
    reduce_scatter_states = []                            # comm_ctx.reduce_scatter_states (ReduceScatterState)
    max_input_buffers = 1                                 # comm_ctx.reduce_scatter_max_input_buffers (default 1)

    for c in range(CHUNKS):                               # chunked loss: head forward + backward per chunk
        h, t = hs[c].cuda(), ts[c].cuda()
        logits = h @ weight.t()
        dlogits = (logits - t) * (2.0 / logits.numel())   # d(mse)/d(logits)
        unsharded_grad = dlogits.t() @ h                  # autograd kernel: allocates on the default stream

        # FSDPParamGroup.post_backward: recycle prior reduce-scatter inputs (wait on their event, drop the ref)
        current_stream = torch.cuda.current_stream()
        while len(reduce_scatter_states) >= max_input_buffers:
            oldest_input, oldest_event = reduce_scatter_states.pop(0)
            current_stream.wait_event(oldest_event)
            del oldest_input
        # -> foreach_reduce
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
        reduce_scatter_states.append((reduce_scatter_input, reduce_scatter_event))   # the ref-hold
        del reduce_scatter_input, reduce_scatter_event
        # no wait on post_reduce_event here (before pull/181218)

    for _input, event in reduce_scatter_states:                      # _root_post_backward_final_callback
        torch.cuda.current_stream().wait_event(event)
    reduce_scatter_states.clear()
    torch.cuda.current_stream().wait_event(post_reduce_event)
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
