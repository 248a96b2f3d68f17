"""A torch DDP model that is part of a reference cycle (a transformers PreTrainedModel is: its modules and config
refer back to each other; here `ddp.myself = [ddp]`), trained for two steps and left to the garbage collector
when the script ends. Its C++ Reducer keeps a CUDA ivalue::Future per bucket, and ~Future destroys the Future's
CUDA events under `c10::OptionalDeviceGuard(event.device())` (ATen/core/ivalue_inl.h), which asks torch's registry
for the CUDA device guard. On a GPU that is the CUDA guard; the losses and gradients agree on both ranks.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: a transformers 4.57 LlamaForCausalLM wrapped in torch.nn.parallel.DistributedDataParallel, trained
with AdamW and left as a script global (b-series, notes b2); without transformers.
SIMPLIFIED: a Linear layer, two SGD steps, the cycle made explicitly.
RULE: destroying a CUDA Future destroys its events under a device guard of their device (ATen/core/ivalue_inl.h
`~Future`); its destruction is ordinary Python garbage collection, whenever the collector runs.
WHAT SIMDIST SAYS: clean. Before notes b2 the collector freed the Reducer after the run, with simdist's fake CUDA
guard already out of torch's registry: `getDeviceGuardImpl` threw inside the destructor and the rank's process
aborted (SIGABRT, RankCrashed; with rank threads, the caller's process) after a clean run.
"""
import os

import torch
import torch.distributed as dist

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Linear(8, 4).cuda()
ddp = torch.nn.parallel.DistributedDataParallel(model)
ddp.myself = [ddp]
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
for step in range(2):
    x = torch.randn(world, 3, 8, generator=g)
    loss = ddp(x[rank].cuda()).square().mean()
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    # DDP averages: every rank holds the mean of the ranks' gradients, computed here on the CPU
    ref = torch.nn.Linear(8, 4)
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    for r in range(world):
        (ref(x[r]).square().mean() / world).backward()
    for got, want in zip(grads, ref.parameters()):
        assert torch.allclose(got.cpu(), want.grad, rtol=1e-5, atol=1e-6), (step, got.cpu(), want.grad)
    opt.step()
    opt.zero_grad()
print(f"rank {rank}: two DDP steps, gradients the ranks' mean")
