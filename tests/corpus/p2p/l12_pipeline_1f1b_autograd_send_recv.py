"""Two-stage pipeline with activations sent forward and activation gradients sent back (batch_isend_irecv P2POps,
waited before use), backward through torch.autograd.backward(output, grad); microbatches interleaved 1F1B-style;
parameter gradients checked against one process computing the whole model.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: megatron/core/pipeline_parallel/schedules.py `forward_backward_pipelining_without_interleaving`
(send_forward, send_forward_recv_backward, send_backward_recv_forward, `torch.autograd.backward(output_tensor,
grad_tensors=output_tensor_grad)` in backward_step) and p2p_communication.py `_communicate` (batch_isend_irecv, then
req.wait() for every request, then torch.cuda.synchronize() as Megatron does for batched p2p).
REASON: req.wait() orders the current stream after the p2p ops (torch.distributed docs, batch_isend_irecv);
gradients equal the unpartitioned model's (chain rule).
"""
import os
import torch
import torch.distributed as dist


def communicate(send=None, peer=None, recv_shape=None):
    ops, out = [], None
    if send is not None:
        ops.append(dist.P2POp(dist.isend, send.contiguous(), peer))
    if recv_shape is not None:
        out = torch.empty(recv_shape, device="cuda")
        ops.append(dist.P2POp(dist.irecv, out, peer))
    if ops:
        for r in dist.batch_isend_irecv(ops):
            r.wait()
        torch.cuda.synchronize()
    return out


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    H, B, M = 6, 3, 3
    g = torch.Generator().manual_seed(11)
    w = [torch.randn(H, H, generator=g) * 0.5 for _ in range(2)]
    mbs = [torch.randn(B, H, generator=g) for _ in range(M)]
    layer = torch.nn.Linear(H, H, bias=False).cuda()
    with torch.no_grad():
        layer.weight.copy_(w[rank])
    if rank == 0:                                # warmup: one forward; steady state: send_forward_recv_backward
        inflight = [torch.tanh(layer(mbs[0].cuda()))]
        communicate(send=inflight[0], peer=1)
        for m in range(1, M):
            act = torch.tanh(layer(mbs[m].cuda()))
            inflight.append(act)
            grad = communicate(send=act, peer=1, recv_shape=(B, H))
            torch.autograd.backward(inflight.pop(0), grad_tensors=grad)
        grad = communicate(peer=1, recv_shape=(B, H))  # cooldown
        torch.autograd.backward(inflight.pop(0), grad_tensors=grad)
    else:                                        # recv_forward, then send_backward_recv_forward
        inp = communicate(peer=0, recv_shape=(B, H))
        for m in range(M):
            inp.requires_grad_(True)
            out = layer(inp)
            (out * out).sum().backward()
            if m < M - 1:
                inp = communicate(send=inp.grad, peer=0, recv_shape=(B, H))
            else:
                communicate(send=inp.grad, peer=0)
    ref = [t.clone().requires_grad_(True) for t in w]
    sum(((torch.tanh(x @ ref[0].t()) @ ref[1].t()) ** 2).sum() for x in mbs).backward()
    assert torch.allclose(layer.weight.grad.cpu(), ref[rank].grad, atol=1e-4), (layer.weight.grad.cpu(), ref[rank].grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
