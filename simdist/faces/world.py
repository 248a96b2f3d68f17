"""The engine's World with the torch face plugged in: torch.cuda's Stream class, torch.distributed's group
class, each device's torch name and random generator, host-memory checks, and device work run outside any
dispatch mode (queued kernels are plain CPU torch ops on the device bytes)."""
from __future__ import annotations

import torch

from ..engine.world import World
from .cuda import Stream
from .host_memory import HostMemory
from . import guard
from .rng import SimGenerator

DEFAULT_RNG_SEED = 67280421310721  # c10::detail::default_rng_seed_val: a fresh process's CPU and CUDA seed


def _name_device(device):
    device.torch_device = torch.device("cuda", device.index)
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
    return world
