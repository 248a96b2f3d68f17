"""Pipeline stage computes activations on a side stream and sends them with a synchronous dist.send on the default stream, no wait.

EXPECTED: hazard
KINDS: read-after-write
REASON: send (torch>=2.8 sync P2P) runs on the current (default) stream, unordered with the side stream's write of the activations.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if rank == 0:
        x = torch.randn(64, 64, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            act = torch.relu(x @ x)
        dist.send(act, dst=1)              # BUG
        torch.cuda.synchronize()
    elif rank == 1:
        act = torch.empty(64, 64, device="cuda")
        dist.recv(act, src=0)
        print(act.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
