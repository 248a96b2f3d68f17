"""I9 with torch's own FSDP2: the body and the LM head in one grouped `fully_shard([body, head])`, the loss computed
in chunks through the head alone (the partial-group path of pull/181218), one optimizer step.

EXPECTED: clean
INCIDENT: https://github.com/pytorch/pytorch/pull/181218; plain-torch models: tests/corpus/incidents/
i09_torch_fsdp2_chunked_loss_{bug,fix,refhold_bug}.py.
MODELLED ON: torch/distributed/fsdp/_fully_shard (installed torch): `fully_shard` of a list of modules (one
FSDPParamGroup), `FSDPParamGroup.post_backward` (`is_partial_group_backward`: the current stream waits on the
post-reduce event), `foreach_reduce`, the root's post-backward final callback.
SIMPLIFIED: Linear(32, 32) body, Linear(32, 64) head, two loss chunks of 8 tokens, MSE loss, SGD.
RULE: see the corpus programs.
WHAT SIMDIST SAYS: clean (torch's own DeviceMesh and FSDP2 run on simdist's process group; seeds 0-4); on a GPU with
torch >= 2.13 it is clean (the wait is in the installed code).
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

H, V, B, CHUNKS = 32, 64, 8, 2


class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(H, H)
        self.head = torch.nn.Linear(H, V)

    def forward(self, x):
        return self.body(x)          # hidden states; the loss applies the head in chunks


def build():
    torch.manual_seed(0)
    return LM()


def data(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(B * CHUNKS, H, generator=g), torch.randn(B * CHUNKS, V, generator=g)


def chunked_step(model, x, t):
    h = model(x)
    for c in range(CHUNKS):                          # chunked loss: the head alone, per chunk
        sl = slice(c * B, (c + 1) * B)
        loss = torch.nn.functional.mse_loss(model.head(h[sl]), t[sl]) / CHUNKS
        loss.backward(retain_graph=c < CHUNKS - 1)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    ref = build()
    model = build().cuda()
    fully_shard([model.body, model.head])      # one FSDP parameter group for both modules
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x, t = data(rank)
    chunked_step(model, x.cuda(), t.cuda())
    opt.step()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    for r in range(world):                           # reference: the mean gradient over ranks, on the CPU
        xr, tr = data(r)
        h = ref(xr)
        for c in range(CHUNKS):
            sl = slice(c * B, (c + 1) * B)
            (torch.nn.functional.mse_loss(ref.head(h[sl]), tr[sl]) / CHUNKS / world).backward(retain_graph=True)
    ref_opt.step()
    full = {k: v.full_tensor().detach().cpu() for k, v in model.state_dict().items()}
    print(f"rank {rank}: head weight sum {full['head.weight'].sum().item():.5f}")
    for k, v in ref.state_dict().items():
        assert torch.allclose(full[k], v, atol=1e-5), f"{k} differs from the reference"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
