"""all_reduce on contiguous slices of a buffer, with torch.cuda.set_stream switching streams explicitly (no context manager).

EXPECTED: clean
REASON: set_stream changes the current stream; every cross-stream use is covered by wait_stream both ways.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    buf = torch.zeros(4, 256, device="cuda")
    buf[rank % 4] = 1.0
    buf[:, :8] += rank
    default = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(default)
    torch.cuda.set_stream(side)
    dist.all_reduce(buf[1])                 # a contiguous row view
    dist.all_reduce(buf[2:4])
    torch.cuda.set_stream(default)
    default.wait_stream(side)
    dist.all_reduce(buf[0])
    host = buf.cpu()
    r = sum(range(world))
    for row in range(4):
        owners = sum(1 for k in range(world) if k % 4 == row)
        assert host[row, 100].item() == owners, (row, host[row, 100])
        assert host[row, 0].item() == owners + r, (row, host[row, 0])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
