"""async all_reduce on a temporary; the Python reference is dropped before work.wait() and new memory is allocated and written.

EXPECTED: clean
REASON: ProcessGroupNCCL keeps the collective's tensors alive (stashed in the Work / record_stream on its stream) until the work completes, so the block cannot be reused early.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    tmp = torch.full((1 << 16,), float(rank + 1), device="cuda")
    work = dist.all_reduce(tmp, async_op=True)
    del tmp
    scratch = torch.zeros(1 << 16, device="cuda")
    scratch += 5.0
    work.wait()
    assert scratch.sum().item() == 5.0 * (1 << 16)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
