"""Colocated RL refit: the trainer packs its bf16 weights into one flat buffer per dtype with copy_, synchronizes the
current stream, and hands the buffer to the (colocated) inference engine as a CUDA IPC handle
(`reduce_tensor`); the engine side rebuilds it and checks the bytes.

EXPECTED: clean-or-error
ERROR: UnsupportedOperation
MODELLED ON: NeMo-RL's colocated refit (nemo_rl/models/policy/*_policy_worker.py `prepare_weights_for_ipc` /
`get_weights_ipc_handles`: pack per dtype, `torch.cuda.current_stream().synchronize()`, then
`torch.multiprocessing.reductions.reduce_tensor(packed)`), consumed by vLLM's worker through `rebuild_cuda_tensor`.
REASON: torch/multiprocessing/reductions.py reduce_tensor -> `storage._share_cuda_()` (a cudaIpcMemHandle); the
stream synchronize orders the packing copies before the handle is used. simdist has no second process to map IPC
memory into and refuses it by name; on a GPU the program is clean (the handle is only made here, the consumer
process that would rebuild it is not part of the program).
"""
import os

import torch
import torch.distributed as dist
from torch.multiprocessing.reductions import reduce_tensor


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    weights = {f"layer{i}.weight": (torch.arange(64, dtype=torch.float32).reshape(8, 8) * (i + 1 + rank))
               .to(torch.bfloat16).cuda() for i in range(3)}
    total = sum(w.numel() for w in weights.values())
    packed = torch.empty(total, dtype=torch.bfloat16, device="cuda")
    off, meta = 0, []
    for name, w in weights.items():
        packed[off:off + w.numel()].copy_(w.view(-1))
        meta.append((name, off, tuple(w.shape)))
        off += w.numel()
    torch.cuda.current_stream().synchronize()
    rebuild, args = reduce_tensor(packed)          # the IPC handle handed to the inference engine
    for name, o, shape in meta:
        want = weights[name].view(-1)
        assert torch.equal(packed[o:o + want.numel()].cpu(), want.cpu())
    print(f"rank {rank}: {len(meta)} tensors packed, handle made by {rebuild.__name__}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
