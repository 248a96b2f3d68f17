"""I11 DGL SparseAdam with optimizer state on the CPU, fixed as in pull/3013: device-to-host copies are blocking.

EXPECTED: clean
INCIDENT: https://github.com/dmlc/dgl/issues/2760, fix https://github.com/dmlc/dgl/pull/3013 (commit 8932285); twin
of i11_dgl_sparse_adam_d2h_bug.py (same program, the fix applied).
MODELLED ON: python/dgl/optim/pytorch/sparse_optim.py at 8932285, `SparseAdam.update`: "only perform async copies cpu
-> gpu, or gpu-> gpu, but block when copying to the cpu, so as to ensure the copy is finished before operating on the
data on the cpu": `state_nonblock = state_dev != th.device('cpu')`, `exec_nonblock = exec_dev != th.device('cpu')`,
and `non_blocking=state_nonblock` / `exec_nonblock` on the copies.
SIMPLIFIED: as in the buggy twin.
RULE: a blocking device-to-host copy returns after the copy (and all earlier work on the current stream) is done
(torch.Tensor.to; CUDA "API synchronization behavior": cudaMemcpy to pageable memory is synchronous).
WHAT SIMDIST SAYS: clean; the program checks its embedding rows and Adam state against the same update run on the CPU.
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
    """SparseAdam.update (dgl, pull/3013)."""
    state_step, state_mem, state_power = state
    exec_dev, state_dev = grad.device, state_step.device
    # FIX (pull/3013): only perform async copies cpu -> gpu, or gpu -> gpu, but block when copying to the cpu
    state_nonblock = state_dev != torch.device("cpu")
    exec_nonblock = exec_dev != torch.device("cpu")
    grad_indices, inverse, cnt = torch.unique(idx, return_inverse=True, return_counts=True)
    state_idx = grad_indices.to(state_dev)
    state_step[state_idx] += 1
    state_step = state_step[state_idx].to(exec_dev, non_blocking=exec_nonblock)
    orig_mem = state_mem[state_idx].to(exec_dev, non_blocking=exec_nonblock)
    orig_power = state_power[state_idx].to(exec_dev, non_blocking=exec_nonblock)

    grad_values = torch.zeros((grad_indices.shape[0], grad.shape[1]), device=exec_dev)
    grad_values.index_add_(0, inverse, grad)
    grad_values = grad_values / cnt.unsqueeze(1)
    grad_mem = grad_values
    grad_power = grad_values * grad_values
    update_mem = BETA1 * orig_mem + (1. - BETA1) * grad_mem
    update_power = BETA2 * orig_power + (1. - BETA2) * grad_power
    state_mem[state_idx] = update_mem.to(state_dev, non_blocking=state_nonblock)
    state_power[state_idx] = update_power.to(state_dev, non_blocking=state_nonblock)

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
    # reference: the same step on the CPU (this rank's rows, gradients from every rank)
    ref_w, ref_state = torch.ones(N, D), (torch.zeros(N), torch.zeros(N, D), torch.zeros(N, D))
    all_idx = torch.cat([local_grads(r, world)[0][rank * ROWS:(rank + 1) * ROWS] for r in range(world)])
    all_grad = torch.cat([local_grads(r, world)[1][rank * ROWS:(rank + 1) * ROWS] for r in range(world)])
    sparse_adam_update(all_idx, all_grad, ref_w, ref_state)
    assert torch.allclose(emb_weight, ref_w, atol=1e-6), "embedding rows wrong"
    assert torch.allclose(state[1], ref_state[1], atol=1e-6), "state_mem wrong"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
