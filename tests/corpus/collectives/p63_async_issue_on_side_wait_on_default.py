"""async all_gather_into_tensor issued inside a side-stream context (input produced there), work.wait() called later on the default stream.

EXPECTED: clean
REASON: the NCCL stream waits for the issuing (side) stream; work.wait() makes the current (default) stream wait for the NCCL stream.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    out = torch.empty(world, 1000, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        shard = torch.arange(1000, device="cuda", dtype=torch.float32) + rank * 1000
        work = dist.all_gather_into_tensor(out, shard, async_op=True)
    work.wait()
    flat = out.flatten()
    assert torch.equal(flat.cpu(), torch.arange(world * 1000, dtype=torch.float32))
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
