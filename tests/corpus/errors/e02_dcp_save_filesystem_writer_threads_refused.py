"""dcp.save of device tensors with FileSystemWriter(thread_count=2): the writer's extra thread copies its share of
the tensors to the host (_SerialCpuLoader: `.detach()`, `.cpu()`) in a threading.Thread of its own. simdist runs
device work only in a rank's own thread, so the copy is refused by name; that refusal killed the thread, which
threading's excepthook only printed, and the save failed later with a raw KeyError of the missing write results
(CheckpointException ... KeyError: MetadataIndex(fqn='w0', ...)). Now the run ends with the refusal (notes e6).

EXPECTED: error
ERROR: UnsupportedOperation
WORLD_SIZE: 2
MODELLED ON: torch/distributed/checkpoint/filesystem.py FileSystemWriter(path, thread_count=N) (_write_data: N - 1
threading.Thread workers running _write_files_from_queue, the caller's thread the last share), as torchtitan's
checkpointer passes `thread_count` to its writer.
REASON: on a GPU each worker's `.cpu()` synchronizes with its own current stream (c10/cuda/CUDAStream.h: current
streams are thread-local; ATen Copy.cu memcpy_and_sync); simdist does not model a second host thread's device work.
"""
import os
import shutil
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("cpu:gloo,cuda:nccl")
    rank = dist.get_rank()
    box = [tempfile.mkdtemp() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    sd = {f"w{rank}_{i}": torch.full((1000 * (i + 1),), float(rank + i), device="cuda") for i in range(4)}
    try:
        dcp.save(sd, storage_writer=FileSystemWriter(box[0], thread_count=2))
    finally:
        dist.barrier()
        if rank == 0:
            shutil.rmtree(box[0], ignore_errors=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
