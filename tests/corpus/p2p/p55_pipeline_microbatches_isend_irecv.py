"""Pipeline with 4 micro-batches: rank 0 isends each micro-batch output, rank 1 irecvs and waits before computing.

EXPECTED: clean
REASON: every request is waited before its buffer is read (irecv) or the send buffer is dropped (isend); outputs kept until synchronize.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(3)
    w1 = torch.randn(16, 16)
    w2 = torch.randn(16, 16)
    mbs = [torch.randn(8, 16) for _ in range(4)]
    if rank == 0:
        w = w1.cuda()
        reqs = []
        outs = []
        for mb in mbs:
            h = torch.tanh(mb.cuda() @ w)
            outs.append(h)
            reqs.append(dist.isend(h, dst=1))
        for r in reqs:
            r.wait()
    elif rank == 1:
        w = w2.cuda()
        results = []
        for i, mb in enumerate(mbs):
            buf = torch.empty(8, 16, device="cuda")
            req = dist.irecv(buf, src=0)
            req.wait()
            results.append(buf @ w)
        got = torch.stack(results).cpu()
        ref = torch.stack([torch.tanh(mb @ w1) @ w2 for mb in mbs])
        assert torch.allclose(got, ref, rtol=1e-4, atol=1e-5), (got - ref).abs().max()
    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
