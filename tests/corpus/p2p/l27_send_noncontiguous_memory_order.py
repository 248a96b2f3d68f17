"""send of a non-contiguous tensor (a transposed matrix): ProcessGroupNCCL only warns for P2P and NCCL moves the
tensor's numel elements in memory order from its data pointer; a contiguous receive buffer gets the sender's memory
order, a receive into the same transposed layout gets the sender's logical values.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: pipeline code sending `activation.transpose(0, 1)` (sequence-first vs batch-first layouts) without
`.contiguous()`.
REASON: torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp check_gpu_single_tensor(tensor, p2p=true): for P2P a
non-contiguous tensor is accepted with TORCH_WARN_ONCE("Detected non-contiguous tensor in P2P operations. It is
user responsibility to guarantee that source and destination tensors have the same contiguity format."); the send
is ncclSend(tensor.data_ptr(), tensor.numel(), ...), which reads memory order.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    if rank == 0:
        src = a.cuda()
        dist.send(src.t(), dst=1)                 # logical [[0, 3], [1, 4], [2, 5]], memory 0..5
        dist.send(src.t(), dst=1)
    else:
        flat = torch.empty(3, 2, device="cuda")
        dist.recv(flat, src=0)
        assert torch.equal(flat.cpu(), a.reshape(3, 2)), flat.cpu()      # memory order: [[0, 1], [2, 3], [4, 5]]
        same = torch.empty(2, 3, device="cuda").t()
        dist.recv(same, src=0)
        assert torch.equal(same.cpu(), a.t()), same.cpu()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
