"""The fix of u04: the side-stream input of an async all_gather_into_tensor is record_stream-ed on the default stream
before it is dropped, so its block is reusable only after the default stream (which waits for the gather at
`work.wait()`) has passed that point.

EXPECTED: clean
NCCL: 2.8
MODELLED ON: the same FSDP-style cast-on-copy-stream prefetch with torch FSDP's own remedy (`_no_dispatch_record_stream(
tensor, stream)` in torch/distributed/fsdp/_runtime_utils.py / _flat_param.py).
REASON: torch.Tensor.record_stream docs: the block is not reused until all work queued on the recorded stream at the
time of the free has completed (CUDACachingAllocator insert_events); the default stream waited for the gather's end
event in WorkNCCL::synchronizeStream before the unstash freed the tensor.
"""
import os

import torch
import torch.distributed as dist

N = 1 << 16


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    master = torch.full((N,), float(rank + 1), device="cuda")
    copy_stream = torch.cuda.Stream()
    copy_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(copy_stream):
        shard = master.to(torch.bfloat16)
    torch.cuda.current_stream().wait_stream(copy_stream)
    full = torch.empty(world * N, dtype=torch.bfloat16, device="cuda")
    work = dist.all_gather_into_tensor(full, shard, async_op=True)
    shard.record_stream(torch.cuda.current_stream())
    del shard
    work.wait()
    with torch.cuda.stream(copy_stream):
        nxt = master.mul(2).to(torch.bfloat16)
    torch.cuda.current_stream().wait_stream(copy_stream)
    want = torch.cat([torch.full((N,), float(r + 1)) for r in range(world)])
    assert torch.equal(full.float().cpu(), want)
    assert torch.equal(nxt.float().cpu(), torch.full((N,), 2.0 * (rank + 1)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
