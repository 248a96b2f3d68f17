"""I12 PyTorch point-to-point, fixed: the interleaved sends and receives of each exchange are issued as one
`batch_isend_irecv`, so NCCL runs them as one group and no rank's stream holds a receive in front of the send its
peer is waiting for.

EXPECTED: clean
INCIDENT: https://github.com/pytorch/pytorch/issues/109401 (open; the workaround is batching, as
torch.distributed.pipelining's schedules do with `batch_isend_irecv`); twin of i12_torch_p2p_interleaved_bug.py.
MODELLED ON: the issue's minimal example, with the three asynchronous operations after the first exchange put into
one `dist.batch_isend_irecv([P2POp(...), ...])` per rank.
SIMPLIFIED: as in the buggy twin.
RULE: `batch_isend_irecv` issues its operations between ncclGroupStart/ncclGroupEnd (torch.distributed.
batch_isend_irecv docs), and "calls within a group can be seen as progressing independently, hence should never
block each other ... The only exception is point-to-point calls within a group targeting the same peer, which are
executed in order" (NCCL docs, "Point-to-point communication"): rank 0's two receives from rank 1 run in order, as
do rank 1's two sends, and they pair up (a, then c); the send and the receives no longer wait behind each other.
WHAT SIMDIST SAYS: clean; each rank checks the values it received.
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    t = {k: torch.full((1,), float(v), device="cuda") for k, v in (("x", 1), ("a", 2), ("b", 3), ("c", 4))}
    got = {k: torch.zeros(1, device="cuda") for k in t}
    if rank == 0:
        dist.isend(t["x"], dst=1).wait()                          # sync send() [completed]
    elif rank == 1:
        dist.irecv(got["x"], src=0).wait()                        # sync recv() [completed]
    # FIX: the interleaved sends and receives of the steady state go in one batch (ncclGroupStart/End)
    if rank == 0:
        ops = [dist.P2POp(dist.irecv, got["a"], 1),               # bwd recv (a)
               dist.P2POp(dist.isend, t["b"], 1),                 # fwd send (b)
               dist.P2POp(dist.irecv, got["c"], 1)]               # bwd recv (c)
    else:
        ops = [dist.P2POp(dist.irecv, got["b"], 0),               # fwd recv (b)
               dist.P2POp(dist.isend, t["a"], 0),                 # bwd send (a)
               dist.P2POp(dist.isend, t["c"], 0)]                 # bwd send (c)
    for h in dist.batch_isend_irecv(ops):
        h.wait()
    torch.cuda.synchronize()
    print(f"rank {rank}: received {[got[k].item() for k in ('x', 'a', 'b', 'c')]}")
    expected = {0: {"a": 2.0, "c": 4.0}, 1: {"x": 1.0, "b": 3.0}}[rank]
    assert all(got[k].item() == v for k, v in expected.items()), got
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
