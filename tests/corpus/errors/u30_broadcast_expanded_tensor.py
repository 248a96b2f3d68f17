"""dist.broadcast of an expanded tensor (stride 0 along the batch dimension): ProcessGroupNCCL refuses it with a
ValueError, since an expanded view is not contiguous in any memory format.

EXPECTED: error
ERROR: ValueError
MODELLED ON: broadcasting a bias or a position-embedding that was `expand`-ed to the batch shape for the forward
pass (e.g. `pos = self.pos_emb.expand(batch, -1, -1)`) instead of the parameter itself.
REASON: ProcessGroupNCCL.cpp broadcast -> check_gpu_single_tensor: `tensor.is_contiguous(tensor.suggest_memory_format())`
is false for a stride-0 expand: C10_THROW_ERROR(ValueError, "Tensors must be contiguous").
"""
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    pos_emb = torch.arange(16, dtype=torch.float32, device="cuda").reshape(1, 16)
    pos = pos_emb.expand(8, 16)
    dist.broadcast(pos, src=0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
