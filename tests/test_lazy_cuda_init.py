"""CUDA initializes lazily, per process, and its generator state is CUDA's.

Rules (torch/cuda/__init__.py `_lazy_init`, torch/cuda/random.py `_lazy_call`, aten/src/ATen/cuda/CUDAGeneratorImpl.cpp):
- `torch.cuda.is_initialized()` is False until the process's first call that needs a device (a CUDA tensor, a
  stream, `set_device`, `current_device`); `device_count()` / `is_available()` do not initialize;
- `torch.manual_seed` / `torch.cuda.manual_seed(_all)` before that are queued, not run: they do not initialize
  CUDA, and the seed applies when the device comes up. DeviceMesh relies on both: it sets each process's device
  from LOCAL_RANK only while CUDA is uninitialized (torch/distributed/device_mesh.py
  `_setup_world_group_and_device`), so a script that seeds first and never calls set_device still gets one
  GPU per rank (pytorch/examples distributed/FSDP2/example.py, tensor_parallelism/*.py);
- `torch.cuda.get_rng_state()` is 16 bytes, the Philox (seed, offset); setting it back replays the draws, and
  DTensor's RNG tracker rewrites the offset in place (torch/distributed/tensor/_random.py `_PhiloxState`).
"""
import torch

import simdist


def test_is_initialized_is_lazy_and_per_rank():
    def fn():
        seen = [torch.cuda.is_initialized()]
        torch.cuda.device_count()
        torch.cuda.is_available()
        seen.append(torch.cuda.is_initialized())
        torch.zeros(1, device="cuda")
        seen.append(torch.cuda.is_initialized())
        return seen
    assert simdist.run(fn, world_size=2).returns == [[False, False, True]] * 2

    def current():
        torch.cuda.current_device()
        return torch.cuda.is_initialized()
    assert simdist.run(current, world_size=1).returns == [True]


def test_seeding_before_cuda_is_queued():
    def fn():
        torch.manual_seed(5)
        torch.cuda.manual_seed(7)
        uninit = not torch.cuda.is_initialized()
        x = torch.randn(4, device="cuda")
        torch.cuda.manual_seed(7)
        y = torch.randn(4, device="cuda")
        torch.cuda.manual_seed_all(5)
        z = torch.randn(4, device="cuda")
        torch.manual_seed(5)
        w = torch.randn(4, device="cuda")
        return uninit, torch.equal(x.cpu(), y.cpu()), torch.equal(z.cpu(), w.cpu()), torch.equal(x.cpu(), z.cpu())
    assert simdist.run(fn, world_size=1).returns == [(True, True, True, False)]


def test_device_mesh_sets_the_device_from_local_rank_after_seeding():
    def fn():
        torch.manual_seed(0)
        from torch.distributed.device_mesh import init_device_mesh
        init_device_mesh("cuda", (2,))
        return torch.cuda.current_device()
    assert simdist.run(fn, world_size=2).returns == [0, 1]


def test_rng_state_is_cudas_philox_seed_and_offset():
    def fn():
        torch.cuda.manual_seed(3)
        st = torch.cuda.get_rng_state()
        a = torch.randn(8, device="cuda").cpu()
        torch.cuda.set_rng_state(st)
        b = torch.randn(8, device="cuda").cpu()
        seed = st[:8].view(torch.int64).item()
        moved = st.clone()
        moved[8:] = torch.tensor([4], dtype=torch.int64).view(torch.uint8)  # DTensor: offset rewritten in place
        torch.cuda.set_rng_state(moved)
        c = torch.randn(8, device="cuda").cpu()
        return st.numel(), st.dtype, seed, torch.equal(a, b), torch.equal(a, c)
    assert simdist.run(fn, world_size=1).returns == [(16, torch.uint8, 3, True, False)]


def test_a_host_thread_of_the_program_asks_for_its_process_rank():
    """A thread the program starts (DataLoader's pin-memory thread) is no simulated rank; torch.cuda.is_initialized()
    there answers for the process's one rank (it raised SimulationError)."""
    import threading

    def fn():
        out = []
        for make in (False, True):
            if make:
                torch.zeros(1, device="cuda")
            t = threading.Thread(target=lambda: out.append(torch.cuda.is_initialized()))
            t.start()
            t.join()
        return out
    assert simdist.run(fn, world_size=1).returns == [[False, True]]
