"""async all_reduce; the program calls torch.cuda.current_stream().synchronize() instead of work.wait() and then reads the output.

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: host-read
REASON: an async collective runs on ProcessGroupNCCL's internal stream; synchronizing the *current* stream does not wait for it (only torch.cuda.synchronize() / work.wait() would).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.full((1 << 16,), float(rank + 1), device="cuda")
    work = dist.all_reduce(x, async_op=True)
    torch.cuda.current_stream().synchronize()    # BUG: not the NCCL stream
    print(x.sum().item())
    work.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
