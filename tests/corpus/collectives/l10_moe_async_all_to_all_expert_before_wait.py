"""MoE dispatch with an async all_to_all_single overlapped with shared-expert compute; the routed expert reads the
received tokens before handle.wait().

EXPECTED: hazard
KINDS: read-after-write
MODELLED ON: MoE overlap of the token all_to_all with the shared expert (Megatron-Core `shared_expert_overlap`,
DeepSpeed-MoE); the bug is the routed expert's matmul issued before the all_to_all's work is waited.
REASON: with async_op=True the collective runs on the NCCL stream and the current stream is ordered after it only
by work.wait() (torch.distributed docs, "Synchronous and asynchronous collective operations").
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    H = 64
    in_splits = [3, 5] if rank == 0 else [6, 2]
    out_splits = [3, 6] if rank == 0 else [5, 2]
    x = torch.randn(sum(in_splits), H, device="cuda")
    w_shared = torch.randn(H, H, device="cuda")
    w_expert = torch.randn(H, H, device="cuda")
    recv = torch.empty(sum(out_splits), H, device="cuda")
    work = dist.all_to_all_single(recv, x, out_splits, in_splits, async_op=True)
    shared = x @ w_shared                         # overlapped: fine
    routed = recv @ w_expert                      # BUG: before work.wait()
    work.wait()
    print(shared.sum().item() + routed.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
