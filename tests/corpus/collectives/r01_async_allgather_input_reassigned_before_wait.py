"""async all_gather_into_tensor; the input name is rebound to a new tensor (old block freed) and the new one written before work.wait().

EXPECTED: clean
REASON: torch>=2.8 ProcessGroupNCCL stashes async inputs in the Work until wait(), so the freed block cannot be handed out while the NCCL stream still reads it; the new tensor gets other memory.
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
    inp = torch.arange(N, device="cuda", dtype=torch.float32) + 1000.0 * rank
    out = torch.empty(world * N, device="cuda")
    work = dist.all_gather_into_tensor(out, inp, async_op=True)
    inp = torch.empty(N, device="cuda")       # old input's only reference dropped
    inp.fill_(-7.0)
    work.wait()
    exp = torch.cat([torch.arange(N, dtype=torch.float32) + 1000.0 * r for r in range(world)])
    assert torch.equal(out.cpu(), exp)
    assert torch.all(inp == -7.0).item()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
