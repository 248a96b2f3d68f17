"""async all_gather_into_tensor whose *output* is dropped before wait(); same-size scratch allocated and written on the default stream meanwhile.

EXPECTED: clean
REASON: ProcessGroupNCCL keeps both inputs and outputs of an async collective alive (stashed in the Work for 2.8+, record_stream for older) until the work is waited on; the scratch cannot alias the output still being written.
"""
import os
import torch
import torch.distributed as dist

N = 1 << 14


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    inp = torch.full((N,), float(rank + 1), device="cuda")
    out = torch.empty(world * N, device="cuda")
    work = dist.all_gather_into_tensor(out, inp, async_op=True)
    del out
    scratch = torch.empty(world * N, device="cuda")
    scratch.fill_(3.0)
    scratch.mul_(2.0)
    work.wait()
    torch.cuda.synchronize()
    assert torch.all(scratch == 6.0).item()
    assert torch.all(inp == float(rank + 1)).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
