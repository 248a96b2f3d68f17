"""non_blocking=True D2H copy_ into an ordinary (pageable) CPU tensor, then immediate host read.

EXPECTED: clean
REASON: cudaMemcpyAsync to pageable host memory returns only once the copy has completed (CUDA API sync behavior), so PyTorch's copy_ is effectively synchronous here.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    y = torch.full((4096,), 7.0, device="cuda") + rank
    out = torch.empty(4096)                # pageable
    out.copy_(y, non_blocking=True)
    assert out.sum().item() == 4096 * (7.0 + rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
