"""Megatron-style process groups made with NCCL options: `ProcessGroupNCCL.Options(is_high_priority_stream=True)`
with communicator config fields (cga_cluster_size, max_ctas) set from a per-group config dict, passed to new_group
as pg_options; the TP and DP groups then carry collectives as usual.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: megatron/core/parallel_state.py (megatron-core 0.16.1) `get_nccl_options(pg_name, nccl_comm_cfgs)`
(lines 155-185: `torch.distributed.ProcessGroupNCCL.Options(is_high_priority_stream=...)`,
`nccl_options.config.cga_cluster_size = ...`, `.max_ctas`) used by `initialize_model_parallel` as
`torch.distributed.new_group(ranks, pg_options=get_nccl_options("tp", nccl_comm_cfgs))`.
REASON: ProcessGroupNCCL.Options carries stream priority and ncclConfig_t fields into the communicator; they change
scheduling and resources, not results. Values: plain sums.
"""
import os

import torch
import torch.distributed as dist

NCCL_COMM_CFGS = {"tp": {"is_high_priority_stream": True, "cga_cluster_size": 2, "max_ctas": 16},
                  "dp": {"max_ctas": 8}}


def get_nccl_options(pg_name, cfgs):
    if pg_name not in cfgs:
        return None
    opts = torch.distributed.ProcessGroupNCCL.Options(is_high_priority_stream=cfgs[pg_name].get(
        "is_high_priority_stream", False))
    for key in ("cga_cluster_size", "max_ctas", "min_ctas"):
        if key in cfgs[pg_name]:
            setattr(opts.config, key, cfgs[pg_name][key])
    return opts


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    tp_groups = [dist.new_group(r, pg_options=get_nccl_options("tp", NCCL_COMM_CFGS)) for r in ([0, 1], [2, 3])]
    dp_groups = [dist.new_group(r, pg_options=get_nccl_options("dp", NCCL_COMM_CFGS)) for r in ([0, 2], [1, 3])]
    tp, dp = tp_groups[rank // 2], dp_groups[rank % 2]
    x = torch.full((32,), float(rank + 1), device="cuda")
    dist.all_reduce(x, group=tp)
    assert torch.equal(x.cpu(), torch.full((32,), float(sum(r + 1 for r in ([0, 1], [2, 3])[rank // 2]))))
    y = torch.full((32,), float(rank), device="cuda")
    dist.all_reduce(y, group=dp)
    assert torch.equal(y.cpu(), torch.full((32,), float(sum(([0, 2], [1, 3])[rank % 2]))))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
