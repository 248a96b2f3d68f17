"""torch.distributed.algorithms and friends on a 3-layer MLP at world 2, six steps, each rank on its half of the
batch: per-step losses and parameter checksums (float.hex) written per rank to $PPOUT/out<RANK>.txt, for
tests/test_e_series_real_scripts.py to compare simdist with torchrun on CPU (gloo) digit for digit (notes e7).

Modes: allreduce, fp16, bf16 (on CPU the hook's body, default_hooks._compress_hook: the hook refuses CPU builds),
powersgd (several buckets: torch's own gloo run hangs), powersgd1 (one bucket), batched_powersgd, localsgd,
zero, zero_overlap (overlap_with_ddp + hook_with_zero_step; gloo refuses it, its reference is zero_ref: ZeRO skipping
the first two steps), ddp_adam, replicate, fsdp1 / fsdp1_grad_op (FSDP1 with BACKWARD_PRE, forward_prefetch,
limit_all_gathers, use_orig_params; it needs an accelerator: its reference is ddp_adam's FULL lines and losses).
"""
import os, sys, functools
import torch, torch.distributed as dist, torch.nn as nn
MODE = sys.argv[1]
H = 16
def out(*a):
    with open(os.path.join(os.environ.get("PPOUT", "."), f"out{os.environ['RANK']}.txt"), "a") as f:
        print(*a, file=f)
def ck(t):
    t = t.detach().double().flatten().cpu()
    w = torch.linspace(-1, 1, t.numel(), dtype=torch.float64)
    return (t.sum().item().hex(), (t * w).sum().item().hex())
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(H, 4 * H); self.b = nn.Linear(4 * H, 4 * H); self.c = nn.Linear(4 * H, H)
    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))
def main():
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    net = Net().to(dev)
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as dh, powerSGD_hook as ps
    from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as pl
    opt_maker = lambda ps_: torch.optim.SGD(ps_, lr=0.05, momentum=0.9)
    averager = None
    if MODE in ("powersgd", "bf16", "fp16", "allreduce", "localsgd", "zero", "zero_overlap", "batched_powersgd",
                "zero_ref", "ddp_adam", "powersgd1"):
        kw = dict(device_ids=[rank]) if cuda else {}
        model = DDP(net, bucket_cap_mb=100 if MODE == "powersgd1" else 0.01, **kw)
        if MODE in ("powersgd", "powersgd1"):
            st = ps.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2,
                                  min_compression_rate=0.5, use_error_feedback=True, warm_start=True)
            model.register_comm_hook(st, ps.powerSGD_hook)
        elif MODE == "batched_powersgd":
            st = ps.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
            model.register_comm_hook(st, ps.batched_powerSGD_hook)
        elif MODE == "bf16":
            # the hook refuses CPU builds before it runs (a version check); on CPU the same code without the check
            model.register_comm_hook(None, dh.bf16_compress_hook if cuda else
                                     (lambda state, bucket: dh._compress_hook(torch.bfloat16, state, bucket)))
        elif MODE == "fp16":
            model.register_comm_hook(None, dh.fp16_compress_wrapper(dh.allreduce_hook))
        elif MODE == "allreduce":
            model.register_comm_hook(None, dh.allreduce_hook)
        elif MODE == "localsgd":
            from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
            sub, _ = dist.new_subgroups(group_size=1)
            st = pl.PostLocalSGDState(process_group=None, subgroup=sub, start_localSGD_iter=2)
            model.register_comm_hook(st, pl.post_localSGD_hook)
            averager = PeriodicModelAverager(period=2, warmup_steps=2)
        if MODE in ("zero", "zero_ref"):
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-2)
        elif MODE == "zero_overlap":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            from torch.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook import hook_with_zero_step
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-2,
                                          overlap_with_ddp=True)
            model.register_comm_hook(None, hook_with_zero_step(dh.allreduce_hook, model, opt))
        elif MODE == "ddp_adam":
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        else:
            opt = opt_maker(model.parameters())
    elif MODE == "replicate":
        from torch.distributed._composable.replicate import replicate
        model = replicate(net, **(dict(device_ids=[rank]) if cuda else {}))
        opt = opt_maker(model.parameters())
    elif MODE.startswith("fsdp1"):
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, BackwardPrefetch, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        kw = dict(auto_wrap_policy=ModuleWrapPolicy({nn.Linear}), backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
                  forward_prefetch=True, limit_all_gathers=True, use_orig_params=True)
        if cuda:
            kw["device_id"] = dev
        if MODE == "fsdp1_grad_op":
            kw["sharding_strategy"] = ShardingStrategy.SHARD_GRAD_OP
        model = FSDP(net, **kw)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for step in range(6):
        x = torch.randn(8, H, generator=g); y = torch.randn(8, H, generator=g)
        x, y = x[rank * 4:(rank + 1) * 4].to(dev), y[rank * 4:(rank + 1) * 4].to(dev)
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        if not (MODE == "zero_ref" and step < 2):  # overlap_with_ddp: the first two iterations do not update
            opt.step()
        if averager is not None:
            averager.average_parameters(model.parameters())
        opt.zero_grad()
        out("LOSS", step, loss.item().hex())
    if MODE.startswith("fsdp1"):
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType, FullStateDictConfig
        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=False)):
            sd = model.state_dict()
        for k in sorted(sd):
            out("FULL", k, ck(sd[k]))
        with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
            ssd = model.state_dict()
        for k in sorted(ssd):
            v = ssd[k]
            v = v.to_local() if hasattr(v, "to_local") else v.local_tensor() if hasattr(v, "local_tensor") else v
            out("SHARDED", k, ck(v))
        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=False)):
            osd = FSDP.optim_state_dict(model, opt)
        for k in sorted(osd["state"]):
            for n, v in sorted(osd["state"][k].items()):
                if torch.is_tensor(v) and v.dim():
                    out("OPT", k, n, ck(v))
        # reload the full state dict into a fresh FSDP1 model
        torch.manual_seed(5)
        net2 = Net().to(dev)
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        m2 = FSDP(net2, auto_wrap_policy=ModuleWrapPolicy({nn.Linear}), use_orig_params=True,
                  **(dict(device_id=dev) if cuda else {}))
        with FSDP.state_dict_type(m2, StateDictType.SHARDED_STATE_DICT):
            m2.load_state_dict(ssd)
        with FSDP.state_dict_type(m2, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=False)):
            sd2 = m2.state_dict()
        assert all(torch.equal(sd2[k].cpu(), sd[k].cpu()) for k in sd), "sharded reload differs"
        out("RELOAD ok")
    else:
        if MODE in ("zero", "zero_ref"):
            opt.consolidate_state_dict(to=0)
        for n, p in sorted(model.named_parameters()):
            out("PARAM", n, ck(p))
            if MODE == "ddp_adam":
                out("FULL", n.replace("module.", ""), ck(p))
    dist.destroy_process_group()
if __name__ == "__main__":
    main()
