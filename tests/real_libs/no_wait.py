"""One wait removed: the debugging patches of the simdist tier's race tests (tests/test_real_libs.py).

Each patch makes one real library's own wait a no-op, the way a user chasing a race would monkeypatch it, and
names (a) the removed wait, file and function of the installed library, and (b) the functions whose collective
must then appear in simdist's race report (the writer the wait used to order before the reader).

The patch has to reach the ranks wherever they run (threads of the test process today, OS processes once the
real c10d backend lands), so it travels with the program: this file is also a launcher that applies the patch and
runs a script as `__main__`,

    simdist.run_script("tests/real_libs/no_wait.py", world_size=N, argv=[NAME, "tests/real_libs/NAME.py"])

`apply(name)` is idempotent (ranks that share a process patch once), and accepts pytest's `monkeypatch.setattr` so
a test can undo it.
"""

import os
import runpy
import sys
from dataclasses import dataclass


class _NoWait:
    """A Work / coalescing-manager handle whose wait() returns at once: the collective stays in flight."""

    def wait(self, *args, **kwargs):
        return None


@dataclass(frozen=True)
class Patch:
    what: str            # one line for reports
    wait_module: str     # where the removed wait is: module, qualified name of the function, the wait's source text
    wait_function: str
    wait_text: str
    race_sites: tuple    # ((module, qualname), ...): functions whose frame the race report must show


PATCHES = {
    "megatron_tp2_dp2_ddp": Patch(
        "Megatron DDP's grad-sync wait (overlap_grad_reduce): the bucket's all-reduce handle never waited",
        "megatron.core.distributed.param_and_grad_buffer", "_ParamAndGradBucketGroup.finish_grad_sync",
        "self.grad_reduce_handle.wait()",
        (("megatron.core.distributed.param_and_grad_buffer", "_ParamAndGradBucketGroup.start_grad_sync"),),
    ),
    "megatron_distopt_overlap": Patch(
        "Megatron's overlapped param all-gather wait (distributed optimizer): forward pre-hook reads params early",
        "megatron.core.distributed.param_and_grad_buffer", "_ParamAndGradBucketGroup.finish_param_sync",
        "self.param_gather_handle.wait()",
        (("megatron.core.distributed.param_and_grad_buffer", "_ParamAndGradBucketGroup.start_param_sync"),),
    ),
    "megatron_pp2_1f1b": Patch(
        "Megatron's pipeline p2p wait: batch_isend_irecv requests never waited before the stage uses the tensor",
        "megatron.core.pipeline_parallel.p2p_communication", "P2PCommunicator._communicate",
        "req.wait()",
        (("megatron.core.pipeline_parallel.p2p_communication", "_batched_p2p_ops"),),
    ),
    "fsdp2_fully_shard": Patch(
        "FSDP2's all-gather wait: the copy-out reads the all-gather output without waiting on its event",
        "torch.distributed.fsdp._fully_shard._fsdp_collectives", "foreach_all_gather_copy_out",
        "device_handle.current_stream().wait_event(all_gather_event)",
        (("torch.distributed.fsdp._fully_shard._fsdp_collectives", "foreach_all_gather"),
         ("torch.distributed.fsdp._fully_shard._fsdp_collectives", "foreach_all_gather_copy_out")),
    ),
    "dtensor_tp_plan": Patch(
        "functional collectives' wait_tensor: DTensor's all-reduce of partial sums used unwaited",
        "torch.distributed._functional_collectives", "wait_tensor",
        "torch.ops._c10d_functional.wait_tensor(tensor)",
        (("torch.distributed._functional_collectives", "all_reduce"),),
    ),
    "torch_ddp": Patch(
        "DDP's grad-sync wait: a comm hook launches torch's all-reduce and hands the reducer a completed future",
        # the reducer's wait on the hook's future is C++ (reducer.cpp, finalize_backward); the Python side it
        # waits on is the future _allreduce_fut chains to the all-reduce's Work
        "torch.distributed.algorithms.ddp_comm_hooks.default_hooks", "_allreduce_fut",
        ".get_future()",
        (("torch.distributed.algorithms.ddp_comm_hooks.default_hooks", "_allreduce_fut"),),
    ),
}


def _resolve(module, qualname):
    import importlib

    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _patched(fn):
    fn._no_wait_patch = True
    return fn


def _is_patched(owner, name):
    return getattr(getattr(owner, name), "_no_wait_patch", False)


def apply(name, setattr=setattr):
    """Removes the wait of PATCHES[name] in this process (no-op if already removed)."""
    if name == "megatron_tp2_dp2_ddp":
        from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBucketGroup as G

        if _is_patched(G, "start_grad_sync"):
            return
        original = G.start_grad_sync

        @_patched
        def start_grad_sync(self, *args, **kwargs):
            original(self, *args, **kwargs)
            if self.grad_reduce_handle is not None:  # finish_grad_sync's wait() now returns at once
                self.grad_reduce_handle = _NoWait()

        setattr(G, "start_grad_sync", start_grad_sync)
    elif name == "megatron_distopt_overlap":
        from megatron.core.distributed.param_and_grad_buffer import _ParamAndGradBucketGroup as G

        if _is_patched(G, "start_param_sync"):
            return
        original = G.start_param_sync

        @_patched
        def start_param_sync(self, *args, **kwargs):
            original(self, *args, **kwargs)
            if self.param_gather_handle is not None:  # finish_param_sync's wait() now returns at once
                self.param_gather_handle = _NoWait()

        setattr(G, "start_param_sync", start_param_sync)
    elif name == "megatron_pp2_1f1b":
        from megatron.core.pipeline_parallel import p2p_communication as p2p

        if _is_patched(p2p, "_batched_p2p_ops"):
            return
        original = p2p._batched_p2p_ops

        @_patched
        def _batched_p2p_ops(**kwargs):
            return [_NoWait() for _ in original(**kwargs)]  # _communicate's req.wait() returns at once

        setattr(p2p, "_batched_p2p_ops", _batched_p2p_ops)
    elif name == "fsdp2_fully_shard":
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg

        if _is_patched(pg, "foreach_all_gather_copy_out"):
            return
        original = pg.foreach_all_gather_copy_out

        @_patched
        def foreach_all_gather_copy_out(all_gather_result, *args, **kwargs):
            # neither the sync op's event nor the async op's Work is waited on before the copy-out
            result = all_gather_result._replace(all_gather_event=None, all_gather_work=None)
            return original(result, *args, **kwargs)

        setattr(pg, "foreach_all_gather_copy_out", foreach_all_gather_copy_out)
    elif name == "dtensor_tp_plan":
        import torch.distributed._functional_collectives as funcol

        if _is_patched(funcol, "wait_tensor"):
            return

        @_patched
        def wait_tensor(tensor):
            return tensor

        setattr(funcol, "wait_tensor", wait_tensor)
    elif name == "torch_ddp":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel as DDP

        if _is_patched(DDP, "__init__"):
            return
        original = DDP.__init__

        def allreduce_hook_without_wait(process_group, bucket):
            import torch

            default_hooks._allreduce_fut(process_group, bucket.buffer())  # torch's all-reduce, left in flight
            done = torch.futures.Future()
            done.set_result(bucket.buffer())
            return done

        @_patched
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            self.register_comm_hook(None, allreduce_hook_without_wait)

        setattr(DDP, "__init__", __init__)
    else:
        raise KeyError(name)


def wait_site(name):
    """(file, line) of the wait PATCHES[name] removes, in the installed library."""
    import inspect

    p = PATCHES[name]
    fn = inspect.unwrap(_resolve(p.wait_module, p.wait_function))
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if p.wait_text in line:
            return inspect.getsourcefile(fn), start + i
    raise LookupError(f"{p.wait_text!r} not in {p.wait_module}.{p.wait_function}")


def race_sites(name):
    """[(file, first line, last line)] of the functions whose frame the race report must name."""
    import inspect

    out = []
    for module, qualname in PATCHES[name].race_sites:
        fn = inspect.unwrap(_resolve(module, qualname))
        lines, start = inspect.getsourcelines(fn)
        out.append((inspect.getsourcefile(fn), start, start + len(lines) - 1))
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: no_wait.py NAME SCRIPT.py [ARGS...]")
    name, script = sys.argv[1], os.path.abspath(sys.argv[2])
    apply(name)
    sys.argv = sys.argv[2:]
    sys.path.insert(0, os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
