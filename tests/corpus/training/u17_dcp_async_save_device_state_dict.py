"""Checkpointing with torch.distributed.checkpoint.async_save of a state dict of device tensors: the stager copies
every tensor into pinned host memory, then a background thread writes the files while training goes on (the
parameters are updated before `fut.result()`); the checkpoint read back holds the values at the save call.

EXPECTED: clean-or-error
ERROR: UnsupportedOperation
MODELLED ON: torchtitan's checkpointer (`dcp.async_save(state_dict, storage_writer=..., process_group=...)` with
`AsyncCheckpointerType.THREAD`, then `self.async_future.result()` before the next save), torch docs "Asynchronous
Saving with Distributed Checkpoint (DCP)".
REASON: torch/distributed/checkpoint/state_dict_saver.py async_save stages the state dict first
(_state_dict_stager.py `_stage_untyped_storage`: `type(storage)(n, device="cpu")`, pinned, `copy_`), so updates
after the call do not reach the checkpoint; the write happens in a background thread. simdist does not model that
staging and refuses it by name (UnsupportedOperation); on a GPU the program runs clean.
"""
import os
import shutil
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("cpu:gloo,cuda:nccl")
    rank = dist.get_rank()
    path = tempfile.mkdtemp() if rank == 0 else None
    box = [path]
    dist.broadcast_object_list(box, src=0)
    path = box[0]
    w = torch.arange(64, dtype=torch.float32, device="cuda") + 100 * rank
    state = {f"w{rank}": w}
    fut = dcp.async_save(state, checkpoint_id=path)
    w.add_(1.0)                                        # training continues while the checkpoint is written
    fut.result()
    back = {f"w{rank}": torch.zeros(64, device="cuda")}
    dcp.load(back, checkpoint_id=path)
    assert torch.equal(back[f"w{rank}"].cpu(), torch.arange(64, dtype=torch.float32) + 100 * rank)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(path, ignore_errors=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
