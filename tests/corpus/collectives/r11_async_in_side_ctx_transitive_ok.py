"""side.wait_stream(default); async all_gather issued and waited inside the side context; default.wait_stream(side); output used on default.

EXPECTED: clean
REASON: NCCL stream waits for side (which waited for default); wait() inside the context makes side wait for NCCL; default then waits for side: a transitive chain.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    side = torch.cuda.Stream()
    inp = torch.arange(2048, device="cuda", dtype=torch.float32) + rank * 10000.0
    out = torch.empty(world * 2048, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        w = dist.all_gather_into_tensor(out, inp, async_op=True)
        w.wait()
    torch.cuda.current_stream().wait_stream(side)
    y = out + 1.0
    exp = torch.cat([torch.arange(2048, dtype=torch.float32) + r * 10000.0 for r in range(world)]) + 1.0
    assert torch.equal(y.cpu(), exp)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
