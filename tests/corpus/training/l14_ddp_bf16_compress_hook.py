"""torch DDP with `default_hooks.bf16_compress_hook` (and fp16_compress_hook): the bucket is cast to bf16, divided by
the world size, all-reduced in bf16 and copied back; parameters checked against a reference that rounds the same way.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py `bf16_compress_hook` / `_compress_hook`
(`compressed_tensor = buffer.to(dtype).div_(world_size)`, all_reduce async, then in the callback
`decompressed_tensor.copy_(fut.value()[0])`).
REASON: the Reducer waits the hook's future (reducer.cpp finalize_backward), so the copy back into the bucket is
ordered before the optimizer; values: bf16(g_r) / 2 rounded in bf16, summed over two ranks in bf16.
"""
import os
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP


def run(hook, dtype, rank, world):
    torch.manual_seed(1)
    model = torch.nn.Linear(8, 4).cuda()
    ref = torch.nn.Linear(8, 4)
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ddp = DDP(model)
    ddp.register_comm_hook(dist.group.WORLD, hook)
    xs = [torch.randn(3, 8, generator=torch.Generator().manual_seed(r)) for r in range(world)]
    ddp(xs[rank].cuda()).square().sum().backward()
    grads = []
    for x in xs:
        ref.zero_grad()
        ref(x).square().sum().backward()
        grads.append([p.grad.clone() for p in ref.parameters()])
    for i, p in enumerate(model.parameters()):
        parts = [(g[i].to(dtype) / world).to(dtype) for g in grads]
        exp = parts[0]
        for q in parts[1:]:
            exp = (exp + q).to(dtype)
        assert torch.allclose(p.grad.cpu(), exp.float(), rtol=1e-2, atol=1e-3), (p.grad.cpu(), exp)
        assert p.grad.dtype == torch.float32


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    run(default_hooks.bf16_compress_hook, torch.bfloat16, rank, world)
    run(default_hooks.fp16_compress_hook, torch.float16, rank, world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
