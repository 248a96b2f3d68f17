"""The engine's World with the torch face plugged in: torch.cuda's Stream class, torch.distributed's group
class, each device's torch name and random generator, host-memory checks, and device work run outside any
dispatch mode (queued kernels are plain CPU torch ops on the device bytes)."""
from __future__ import annotations

import torch

from ..engine.errors import InvalidDevice, UnsupportedOperation
from ..engine.world import World
from .cuda import Stream, expandable_segments
from .host_memory import HostMemory
from . import guard
from .rng import SimGenerator

DEFAULT_RNG_SEED = 67280421310721  # c10::detail::default_rng_seed_val: a fresh process's CUDA seed, torch.Generator()'s


def process_seed(rank):
    """The seed of rank `rank`'s process-global host generators: torch's default CPU generator, Python's `random`
    and numpy's global RandomState. In a process torchrun starts, none of them has a fixed seed: c10 seeds the
    default CPU generator with getNonDeterministicRandom() (aten/src/ATen/CPUGeneratorImpl.cpp,
    getDefaultCPUGenerator), Python's random and numpy seed themselves from the OS's entropy, so every rank draws
    other numbers unless the program seeds them (only the CUDA generators start at default_rng_seed_val). simdist
    stands for that with a fixed seed per rank: the run stays a pure function of its inputs, and ranks differ, as
    on GPUs, so a program that relies on unseeded host randomness agreeing across ranks (the same shuffled batches
    on every tensor-parallel rank, the same replicated weights) diverges here too instead of looking right. Each
    rank's seed differs from default_rng_seed_val, so torch.Generator() (which starts there) draws other numbers
    than the default generator, as in a fresh process."""
    x = (DEFAULT_RNG_SEED + 0x9E3779B97F4A7C15 * (rank + 1)) & 0xFFFFFFFFFFFFFFFF  # splitmix64 of the rank
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def _name_device(device):
    device.torch_device = torch.device("cuda", device.index)
    owner = device.owner
    if len(owner.devices) == 1:
        # CUDA is being initialized in this rank: the CUDA runtime reads CUDA_LAUNCH_BLOCKING then (cuda.rst
        # "Asynchronous execution": "you can force synchronous computation by setting environment variable
        # CUDA_LAUNCH_BLOCKING=1"); os.environ is the rank's (faces/patches.py RankEnviron)
        import os
        owner.launch_blocking = os.environ.get("CUDA_LAUNCH_BLOCKING", "0").strip() == "1"
        if "PYTORCH_NO_CUDA_MEMORY_CACHING" in os.environ:
            # c10/cuda/CUDACachingAllocator.cpp forceUncachedAllocator: set at all (any value), every tensor is a
            # cudaMalloc and its free a cudaFree, which waits for the device; the caching figures stay 0
            raise UnsupportedOperation(
                "PYTORCH_NO_CUDA_MEMORY_CACHING is set: the uncached allocator (a cudaMalloc per tensor, a cudaFree "
                "that synchronizes the device at every free, no memory statistics) is not modelled by simdist; "
                "unset it (cuda-memcheck's reason for it does not apply here)")
        if os.environ.get("PYTORCH_TUNABLEOP_ENABLED") == "1":
            # aten/src/ATen/cuda/tunable/Tunable.cpp TuningContext::IsTunableOpEnabled: "1" turns TunableOp on,
            # which picks each GEMM's implementation by timing candidates on the device (torch.cuda.tunable)
            raise UnsupportedOperation(
                "PYTORCH_TUNABLEOP_ENABLED=1: TunableOp (GEMM implementations chosen by timing on the device) is "
                "not modelled by simdist; unset it")
    device.memory.expandable = expandable_segments(owner)  # the allocator settings as the device's allocator starts
    # every CUDA generator of a fresh process starts from c10's default_rng_seed_val, on every rank, unless a
    # seeding call made before CUDA was initialized is pending (simdist/faces/cuda.py manual_seed)
    seed = DEFAULT_RNG_SEED
    pending = getattr(device.owner, "pending_cuda_seeds", None)
    if pending:
        seed = pending.get(device.index, pending.get("all", seed))
    device.generator = SimGenerator(device.torch_device).manual_seed(seed)
    guard.streams_changed()  # the guard answered "no such device" for it until now


def make_world(world_size, seed, policy, nccl_profile, poison, device_count=None, avoid_record_streams=False,
               local_ranks=None):
    world = World(world_size, seed, policy, nccl_profile, poison, device_count, avoid_record_streams,
                  stream_class=Stream, on_new_device=_name_device,
                  device_work=torch._C._DisableTorchDispatch, local_ranks=local_ranks)
    for rank in world.ranks.values():
        rank.host_memory = HostMemory(rank.detector)
    world.invalid_device = InvalidDeviceOrdinal
    return world


class InvalidDeviceOrdinal(InvalidDevice, getattr(torch, "AcceleratorError", RuntimeError)):
    """A device index past device_count(): torch raises torch.AcceleratorError "CUDA error: invalid device
    ordinal" for a tensor, a stream, set_device, torch.cuda.device, synchronize there (an H200 with one GPU, torch
    2.11: ci/gpu_c_facts2.py), a RuntimeError for current_stream / memory_allocated of it; both catch this."""
