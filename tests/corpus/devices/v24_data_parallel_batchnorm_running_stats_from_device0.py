"""nn.DataParallel with BatchNorm: replicate() hands replica 0 the module's own buffers (broadcast_coalesced
returns the source tensors themselves for devices[0]) and the other replicas copies, so after a training-mode
forward the module's running_mean / running_var hold the update from device 0's chunk of the batch only; the
output is each chunk normalized by its own batch statistics. Both equal a CPU computation.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch/nn/parallel/replicate.py _broadcast_coalesced_reshape (buffers through comm.broadcast_coalesced, whose outputs[0] are the inputs: torch/csrc/cuda/comm.cpp); torch/nn/parallel/data_parallel.py scatter (chunks of the batch along dim 0); documented: "In-place updates to buffers on replicas are lost except on device[0]" (https://pytorch.org/docs/stable/generated/torch.nn.DataParallel.html).
"""
import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(5, momentum=0.5).cuda()
    dp = nn.DataParallel(bn, device_ids=[0, 1])
    x = torch.randn(8, 5) * 3 + 1
    out = dp(x.cuda())
    first, second = x[:4], x[4:]
    ref = nn.BatchNorm1d(5, momentum=0.5)
    want = torch.cat([ref(first), nn.functional.batch_norm(second, None, None, training=True)])
    assert torch.allclose(out.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    # the module's running stats: replica 0's update alone (momentum 0.5 from 0 / 1)
    assert torch.allclose(bn.running_mean.cpu(), 0.5 * first.mean(0), rtol=1e-5, atol=1e-6)
    assert torch.allclose(bn.running_var.cpu(), 0.5 + 0.5 * first.var(0, unbiased=True), rtol=1e-5, atol=1e-6)
    assert bn.num_batches_tracked.item() == 1


if __name__ == "__main__":
    main()
