"""One fact for notes zd5, on one H200: torch.FloatTensor([s, z]) of CUDA 0-d tensors (as torch's DDP quantization
comm hook does with MinMaxObserver's qparams) and the quantization_pertensor_hook in a one-rank DDP run."""
import os
import torch
import torch.distributed as dist
for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29534"), ("RANK", "0"), ("WORLD_SIZE", "1")):
    os.environ.setdefault(k, v)
torch.cuda.set_device(0)
s = torch.tensor(1.5, device="cuda")
z = torch.tensor(2, device="cuda")
try:
    t = torch.FloatTensor([s, z])
    print("FloatTensor:", t.device, t.dtype, t.tolist())
except Exception as e:
    print("FloatTensor:", type(e).__name__, e)
dist.init_process_group("nccl")
from torch.distributed.algorithms.ddp_comm_hooks import quantization_hooks as qh
m = torch.nn.Linear(8, 4).cuda()
ddp = torch.nn.parallel.DistributedDataParallel(m, device_ids=[0])
ddp.register_comm_hook(None, qh.quantization_pertensor_hook)
try:
    ddp(torch.randn(16, 8, device="cuda")).square().sum().backward()
    print("quantization hook: ok", m.weight.grad.shape)
except Exception as e:
    print("quantization hook:", type(e).__name__, str(e)[:300])
dist.destroy_process_group()
