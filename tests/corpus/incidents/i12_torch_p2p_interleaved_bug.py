"""I12 PyTorch point-to-point: interleaved isend/irecv between two ranks, issued in orders that the pair's NCCL
stream serializes into a cycle: the ranks hang.

EXPECTED: error
ERROR: Deadlock
INCIDENT: https://github.com/pytorch/pytorch/issues/109401 ("Interleaved isend and irecv causes hang", 2023, open):
"rank 0: sync send() [completed] -> Async recv() -> Async send() [completed] -> Async recv(); rank 1: sync recv()
[completed] -> Async recv() [completed] -> Async send() -> Async send()", a pipeline-parallel schedule's forward
sends and backward receives (`fwd_handles`, `bwd_handles`). The issue has no fix; the known ways out are to batch each
exchange (`dist.batch_isend_irecv`, one ncclGroupStart/End) or to issue the operations in the same order on both
ranks (sjeaugey, https://github.com/NVIDIA/nccl/issues/783: "You need to send when you also receive ... merge the two
together to make sure they won't deadlock each other"); twin: i12_torch_p2p_interleaved_fix.py. The cause given
here is a reading of the report (../shared/INCIDENTS.md marks it [?]): the report also says rank 0's async send
"[completed]", which strict per-stream order would not allow (small messages may be buffered by NCCL's protocols);
simdist models no such buffering, so it reports the cycle the documented semantics allow.
MODELLED ON: the issue's minimal example (`dist.isend(...).wait()` / `dist.irecv(...).wait()`, then
`fwd_handles.append(dist.isend(...))`, `bwd_handles.append(dist.irecv(...))` on rank 0 and
`fwd_handles.append(dist.irecv(...))`, `bwd_handles.append(dist.isend(...))` on rank 1, then every handle waited).
SIMPLIFIED: one-element tensors filled with known values instead of randn; the pipeline's compute is omitted.
RULE: ProcessGroupNCCL runs all P2P operations between a pair of ranks on one communicator and one NCCL stream, in
issue order (ProcessGroupNCCL `pointToPoint`: the communicator and stream are keyed by the pair); ncclSend /
ncclRecv: "This operation is blocking for the GPU. If multiple ncclSend() and ncclRecv() operations need to
progress concurrently to complete, they must be fused within a ncclGroupStart()/ncclGroupEnd() section" (NCCL API
docs, "Point To Point Communication Functions"). Rank 0's stream holds recv(a), send(b), recv(c); rank 1's holds
recv(b), send(a), send(c): recv(a) waits for send(a), which is queued behind recv(b), which waits for send(b), which
is queued behind recv(a).
WHAT SIMDIST SAYS: Deadlock, naming each rank's blocked operation and call site.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    fwd_handles, bwd_handles = [], []
    t = {k: torch.full((1,), float(v), device="cuda") for k, v in (("x", 1), ("a", 2), ("b", 3), ("c", 4))}
    got = {k: torch.zeros(1, device="cuda") for k in t}
    if rank == 0:
        dist.isend(t["x"], dst=1).wait()                          # sync send() [completed]
        bwd_handles.append(dist.irecv(got["a"], src=1))           # async recv (a)
    elif rank == 1:
        dist.irecv(got["x"], src=0).wait()                        # sync recv() [completed]
    if rank == 0:
        fwd_handles.append(dist.isend(t["b"], dst=1))             # async send (b)
        bwd_handles.append(dist.irecv(got["c"], src=1))           # async recv (c)
    elif rank == 1:
        fwd_handles.append(dist.irecv(got["b"], src=0))           # async recv (b)
        bwd_handles.append(dist.isend(t["a"], dst=0))             # async send (a)
        bwd_handles.append(dist.isend(t["c"], dst=0))             # async send (c)
    for h in fwd_handles + bwd_handles:
        h.wait()
    torch.cuda.synchronize()
    print(f"rank {rank}: received {[got[k].item() for k in ('x', 'a', 'b', 'c')]}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
