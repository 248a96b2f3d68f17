"""async all_gather_into_tensor, input overwritten on the default stream before work.wait().

EXPECTED: hazard
KINDS: write-after-read
REASON: the NCCL stream reads the input asynchronously; writing it on the current stream before wait() races with that read.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    inp = torch.full((4096,), float(rank), device="cuda")
    out = torch.empty(4096 * world, device="cuda")
    work = dist.all_gather_into_tensor(out, inp, async_op=True)
    inp.fill_(-1.0)                        # BUG: overwrite before wait
    work.wait()
    print(out.view(world, -1)[:, 0].tolist())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
