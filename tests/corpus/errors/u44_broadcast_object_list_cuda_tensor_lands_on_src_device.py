"""rank 0 broadcasts a dict holding a CUDA tensor with broadcast_object_list; on rank 1 the unpickled tensor lands on
cuda:0 (the device it was pickled from), not on rank 1's current device, and mixing it with rank 1's own tensors
fails with torch's device-mismatch RuntimeError.

EXPECTED: error
ERROR: RuntimeError
MODELLED ON: sharing a generated tensor (an RNG seed tensor, a vocabulary mask, sampled indices) from rank 0 with
`dist.broadcast_object_list([obj], src=0)` without moving it to the CPU first (accelerate's
`broadcast_object_list` helper and many RL/eval scripts), then using it in a kernel with local tensors.
REASON: torch/distributed/distributed_c10d.py broadcast_object_list pickles with torch's pickler and unpickles with
`_tensor_to_object` (torch.load semantics: a CUDA storage is restored on its saved device index, cuda:0 here); the
docs warn "Object collectives ... tensors ... will be restored on the device they were saved on". An elementwise op
on cuda:0 and cuda:1 tensors raises "Expected all tensors to be on the same device".
"""
import os

import torch
import torch.distributed as dist


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    objs = [{"mask": torch.ones(8, device="cuda")}] if rank == 0 else [None]
    dist.broadcast_object_list(objs, src=0)
    mask = objs[0]["mask"]
    assert mask.device == torch.device("cuda", 0)
    logits = torch.randn(8, device="cuda")
    print((logits * mask).sum().item())             # rank 1: cuda:1 * cuda:0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
