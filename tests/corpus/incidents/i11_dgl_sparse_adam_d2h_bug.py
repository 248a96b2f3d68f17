"""I11 DGL SparseAdam with optimizer state on the CPU: the updated moments were copied device-to-host with
non_blocking=True and written into the CPU state before the copies had finished (since torch 1.8 such a copy goes to
pinned memory and really is asynchronous).

EXPECTED: hazard
KINDS: host-read
INCIDENT: https://github.com/dmlc/dgl/issues/2760 (2021, NaN/garbage embeddings with the state on the CPU and
torch >= 1.8), fixed by https://github.com/dmlc/dgl/pull/3013 (commit 8932285: "Makes copies in the
SparseAdamOptimizer blocking if they are from the GPU to the CPU, to ensure we don't operate on them until it is safe
to do"; twin: i11_dgl_sparse_adam_d2h_fix.py); https://github.com/dmlc/dgl/pull/3207 later brought non_blocking back
with an event ("In python 1.8, when non_blocking=True in a GPU->CPU copy, the output tensor is allocated in pinned
memory (the cause of #2760)"); https://github.com/dmlc/dgl/pull/3971 fixed the same race in the distributed optimizer.
MODELLED ON: python/dgl/optim/pytorch/sparse_optim.py at 8932285^: `SparseGradOptimizer._comm_step` (the gradients
of each NodeEmbedding are pushed to the rank that owns the rows: `sparse_all_to_all_push` over NCCL) and
`SparseAdam.update` (`th.unique(idx, return_inverse=True, return_counts=True)`, `state_idx =
grad_indices.to(state_dev)`, the state rows `.to(exec_dev, non_blocking=True)`, the Adam moments on the GPU, then
`state_mem[state_idx] = update_mem.to(state_dev, non_blocking=True)`, the same for `state_power`, and
`emb.weight[state_idx] -= std_values.to(state_dev)`).
SIMPLIFIED: one NodeEmbedding of 16 rows x 8 dims on the CPU, rows owned by `idx % world`; `sparse_all_to_all_push`
is `dist.all_to_all_single` with equal splits (each rank has four gradient rows for each owner); one step.
RULE: `tensor.to("cpu", non_blocking=True)` from CUDA returns a pinned CPU tensor before the copy has run; the host
must synchronize (or wait on an event recorded after the copy) before reading it ("A guide on good usage of
non_blocking and pin_memory() in PyTorch"; CUDA cudaMemcpyAsync to page-locked memory).
WHAT SIMDIST SAYS: host-read: the CPU `index_put_` of `state_mem[state_idx] = ...` (and of `state_power`) reads the
pinned tensor before the device-to-host copy has completed.
"""
import os

import torch
import torch.distributed as dist

N, D, ROWS = 16, 8, 4         # embedding rows, dims, gradient rows per (rank, owner)
LR, BETA1, BETA2, EPS = 0.01, 0.9, 0.999, 1e-8


def local_grads(rank, world):
    """This rank's gradient rows (with a duplicate index per owner), grouped by owner rank."""
    g = torch.Generator().manual_seed(50 + rank)
    idx = torch.cat([torch.tensor([o, o, o + world, o + 2 * world]) for o in range(world)])
    return idx, torch.randn(ROWS * world, D, generator=g)


def sparse_adam_update(idx, grad, emb_weight, state):
    """SparseAdam.update (dgl 0.6, before pull/3013)."""
    state_step, state_mem, state_power = state
    exec_dev, state_dev = grad.device, state_step.device
    grad_indices, inverse, cnt = torch.unique(idx, return_inverse=True, return_counts=True)
    state_idx = grad_indices.to(state_dev)
    state_step[state_idx] += 1
    state_step = state_step[state_idx].to(exec_dev, non_blocking=True)
    orig_mem = state_mem[state_idx].to(exec_dev, non_blocking=True)
    orig_power = state_power[state_idx].to(exec_dev, non_blocking=True)

    grad_values = torch.zeros((grad_indices.shape[0], grad.shape[1]), device=exec_dev)
    grad_values.index_add_(0, inverse, grad)
    grad_values = grad_values / cnt.unsqueeze(1)
    grad_mem = grad_values
    grad_power = grad_values * grad_values
    update_mem = BETA1 * orig_mem + (1. - BETA1) * grad_mem
    update_power = BETA2 * orig_power + (1. - BETA2) * grad_power
    state_mem[state_idx] = update_mem.to(state_dev, non_blocking=True)       # BUG: read before the copy is done
    state_power[state_idx] = update_power.to(state_dev, non_blocking=True)   # BUG

    update_mem_corr = update_mem / (1. - torch.pow(torch.tensor(BETA1, device=exec_dev), state_step)).unsqueeze(1)
    update_power_corr = update_power / (1. - torch.pow(torch.tensor(BETA2, device=exec_dev), state_step)).unsqueeze(1)
    std_values = LR * update_mem_corr / (torch.sqrt(update_power_corr) + EPS)
    emb_weight[state_idx] -= std_values.to(state_dev)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    emb_weight = torch.ones(N, D)                                          # NodeEmbedding on the CPU
    state = (torch.zeros(N), torch.zeros(N, D), torch.zeros(N, D))         # emb.optm_state on the CPU

    idx, grad = local_grads(rank, world)
    idx, grad = idx.cuda(), grad.cuda()                                    # grads from the GPU backward
    idx_in, grad_in = torch.empty_like(idx), torch.empty_like(grad)        # _comm_step: sparse_all_to_all_push
    dist.all_to_all_single(idx_in, idx)
    dist.all_to_all_single(grad_in, grad)
    sparse_adam_update(idx_in, grad_in, emb_weight, state)

    owned = [i for i in range(N) if i % world == rank and i < 3 * world]
    print(f"rank {rank}: state_mem sum {state[1].sum().item():.5f} "
          f"emb rows {[round(emb_weight[i].sum().item(), 5) for i in owned]}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
