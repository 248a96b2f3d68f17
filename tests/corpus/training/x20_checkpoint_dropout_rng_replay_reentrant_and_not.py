"""Activation checkpointing of dropout blocks, both implementations (use_reentrant=True: CheckpointFunction;
use_reentrant=False: saved-tensor hooks that recompute on first unpack), as Megatron-Core's and HF Transformers'
gradient checkpointing use them: the recomputation in backward must draw the same dropout masks as the forward
did (preserve_rng_state=True stashes the CPU and CUDA generator states and restores them around the recompute),
so the gradients equal those of the same model without checkpointing, bit for bit on one device. A second
pass with preserve_rng_state=False shows the masks differ (the recompute draws the next numbers).

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: torch/utils/checkpoint.py (`CheckpointFunction.forward` stashes `torch.get_rng_state()` and
`get_device_states(*args)` (the CUDA generator states of the devices of the tensor arguments); backward recomputes
under `torch.random.fork_rng(devices=rng_devices)` after `set_device_states`; the non-reentrant
`_checkpoint_without_reentrant_generator` does the same in its recompute hook); huggingface/transformers
`gradient_checkpointing_enable` (checkpoint(layer, ..., use_reentrant=...)).
RULE: a CUDA generator's state is its (seed, offset) pair; setting it back makes the next kernels draw the same
numbers (torch.cuda.get_rng_state / set_rng_state; aten/src/ATen/cuda/CUDAGeneratorImpl.cpp).
"""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


def blocks():
    torch.manual_seed(0)
    return nn.ModuleList(nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Dropout(0.3), nn.Linear(128, 64))
                         for _ in range(3)).cuda()


def grads(mode, preserve=True):
    layers = blocks()
    torch.cuda.manual_seed(123)
    x = torch.randn(16, 64, device="cuda", requires_grad=True)
    h = x
    for layer in layers:
        if mode == "plain":
            h = h + layer(h)
        else:
            h = h + checkpoint(layer, h, use_reentrant=(mode == "reentrant"), preserve_rng_state=preserve)
    h.square().mean().backward()
    return [x.grad.cpu()] + [p.grad.cpu() for p in layers.parameters()]


def main():
    torch.cuda.set_device(0)
    plain = grads("plain")
    for mode in ("reentrant", "non_reentrant"):
        got = grads(mode)
        assert all(torch.equal(a, b) for a, b in zip(plain, got)), mode
        unpreserved = grads(mode, preserve=False)
        assert not all(torch.equal(a, b) for a, b in zip(plain, unpreserved)), mode
    print("checkpointed gradients equal the plain ones; without preserve_rng_state they differ")


if __name__ == "__main__":
    main()
