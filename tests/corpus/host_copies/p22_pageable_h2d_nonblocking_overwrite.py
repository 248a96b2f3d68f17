"""non_blocking=True H2D from ordinary pageable memory, then the host overwrites the source.

EXPECTED: clean
REASON: for pageable sources the CUDA driver stages the data before cudaMemcpyAsync returns, so the source may be reused immediately.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    src = torch.ones(1 << 14)
    dev = src.to("cuda", non_blocking=True)
    src.fill_(2.0)
    assert dev.sum().item() == float(1 << 14)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
