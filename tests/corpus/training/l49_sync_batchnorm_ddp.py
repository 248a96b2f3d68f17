"""torch.nn.SyncBatchNorm (convert_sync_batchnorm) under torch DDP: batch statistics all-gathered across ranks in
forward, the gradient reductions all-reduced in backward; the output, the input gradient and the running stats
checked against BatchNorm1d on the concatenated global batch in one process.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/nn/modules/batchnorm.py `SyncBatchNorm.convert_sync_batchnorm` and
torch/nn/modules/_functions.py `SyncBatchNorm.forward` (torch.batch_norm_stats, all_gather_into_tensor of
mean / invstd / count, torch.batch_norm_gather_stats_with_counts, torch.batch_norm_elemt) and `backward`
(batch_norm_backward_reduce, all_reduce of sum_dy / sum_dy_xmu, batch_norm_backward_elemt), as vision and detection
training scripts use it.
REASON: the collectives are synchronous on the current stream; SyncBatchNorm normalises with the global batch's
statistics (the docs: "the mean and standard-deviation are calculated per-dimension over all mini-batches of the same
process groups"), so it equals BatchNorm on the concatenated batch.
"""
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(15)
    net = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6))
    ref = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6))
    ref.load_state_dict(net.state_dict())
    model = DDP(torch.nn.SyncBatchNorm.convert_sync_batchnorm(net).cuda())
    xs = [torch.randn(5, 4, generator=torch.Generator().manual_seed(r)) for r in range(world)]
    x = xs[rank].cuda().requires_grad_(True)
    out = model(x)
    (out * torch.arange(6.0, device="cuda")).sum().backward()
    gx = torch.cat(xs).requires_grad_(True)
    ref_out = ref(gx)
    (ref_out * torch.arange(6.0)).sum().backward()
    assert torch.allclose(out.detach().cpu(), ref_out.detach()[rank * 5:(rank + 1) * 5], atol=1e-5)
    assert torch.allclose(x.grad.cpu(), gx.grad[rank * 5:(rank + 1) * 5], atol=1e-5)
    bn = model.module[1]
    assert torch.allclose(bn.running_mean.cpu(), ref[1].running_mean, atol=1e-6)
    assert torch.allclose(bn.running_var.cpu(), ref[1].running_var, atol=1e-5)
    w = model.module[0].weight.grad.cpu()
    assert torch.allclose(w, ref[0].weight.grad / world, atol=1e-5), (w, ref[0].weight.grad / world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
