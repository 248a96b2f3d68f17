"""Programs for tests/test_ranks_as_processes.py, in a module of their own: a rank process imports them by name."""
import os
import signal
import threading

import torch
import torch.distributed as dist

REGISTRY = []  # module-global state, as Megatron-Core's parallel_state keeps its groups


def register_in_module_global():
    assert not REGISTRY, f"rank {dist.get_rank()}: a group is already registered: {REGISTRY}"
    REGISTRY.append(dist.get_rank())
    dist.barrier()
    return list(REGISTRY)


def divide_by_zero_on_rank_one():
    x = torch.ones(4, device="cuda")
    dist.all_reduce(x)
    if dist.get_rank() == 1:
        return 1 / 0
    return x.sum().item()


def crash_on_rank_one(how):
    x = torch.ones(4, device="cuda")
    dist.all_reduce(x)
    if dist.get_rank() == 1:
        if how == "sigsegv":
            os.kill(os.getpid(), signal.SIGSEGV)
        os._exit(3)
    dist.all_reduce(x)
    return x.sum().item()


def mismatched_collectives():
    x = torch.ones(4, device="cuda")
    if dist.get_rank() == 0:
        dist.all_reduce(x)
    else:
        dist.broadcast(x, src=0)
    torch.cuda.synchronize()


def rank_zero_skips_the_barrier():
    x = torch.ones(4, device="cuda")
    if dist.get_rank() == 1:
        dist.barrier()
    torch.cuda.synchronize()
    return x.sum().item()


def returns_its_argument(f):
    return f


def returns_a_lock():
    return threading.Lock()


def spawn_worker(rank, n):
    dist.init_process_group("nccl", rank=rank, world_size=2)
    torch.cuda.set_device(rank)
    x = torch.full((n,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    out = x.sum().item()
    dist.destroy_process_group()
    return out


def split_sizes_read_before_the_copy():
    """The host reads split sizes that a non_blocking D2H copy is still writing and fails on what it read (the way
    Megatron's MoE dispatcher would with its wait removed): a negative size from the fresh buffer's poison."""
    import torch
    counts = torch.tensor([3, 5], device="cuda") * 2
    host = counts.to("cpu", non_blocking=True)         # pinned, not waited
    sizes = host.tolist()                               # BUG: read before a synchronize
    return torch.empty(sum(sizes) - 1000, device="cuda")  # fails on garbage (and would be wrong on good data)


def leaves_a_manager_and_an_exit_handler(path):
    """A program that leaves a multiprocessing Manager running and registers an exit handler (what Megatron's
    dist_checkpointing does with its results queue): both are the interpreter's business at exit."""
    import atexit
    import multiprocessing as mp
    manager = mp.get_context("spawn").Manager()
    manager.Queue()
    with open(path + ".pid", "w") as f:
        f.write(str(manager._process.pid))
    atexit.register(lambda: open(path, "w").write("ran"))
    return True


def starts_a_manager_then_fails(path):
    """Every rank starts a multiprocessing Manager (a process of its own) and writes its pid; then rank 1 raises
    while rank 0 waits for it in a barrier, so the run ends by killing rank 0's process."""
    import multiprocessing as mp
    manager = mp.get_context("spawn").Manager()
    manager.Queue()
    with open(f"{path}.{dist.get_rank()}", "w") as f:
        f.write(str(manager._process.pid))
    dist.barrier()
    if dist.get_rank() == 1:
        raise ValueError("rank 1 fails")
    dist.barrier()
    return True


def blocks_on_a_pipe_nobody_writes():
    """Rank 0 reads a pipe that no one writes (as a rank waiting on a worker that died): a stall, not a hang."""
    x = torch.ones(4, device="cuda")
    dist.all_reduce(x)
    if dist.get_rank() == 0:
        r, _w = os.pipe()
        os.read(r, 1)
    dist.barrier()
    return x.sum().item()
