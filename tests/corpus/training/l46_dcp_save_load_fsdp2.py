"""torch.distributed.checkpoint of an FSDP2 model: get_model_state_dict (sharded DTensors) saved with dcp.save to a
directory shared by both ranks, a fresh differently-initialised FSDP2 model loaded with dcp.load +
set_model_state_dict; its full parameters equal the saved ones.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/distributed/checkpoint (dcp.save / dcp.load with the default FileSystemWriter/Reader, the planner's
all_gather_object / scatter of the plan and the metadata), torch/distributed/checkpoint/state_dict.py
get_model_state_dict / set_model_state_dict, as torchtitan checkpoints FSDP2 models.
REASON: each rank writes and reads its own shards after copying them to the host (synchronous .cpu() / copy_), and
the coordination goes through object collectives; values round-trip exactly.
"""
import os
import shutil
import tempfile
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.fsdp import fully_shard


def make(seed):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).cuda()
    fully_shard(m[0])
    fully_shard(m[2])
    fully_shard(m)
    return m


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    box = [tempfile.mkdtemp(prefix="l46_dcp_") if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    path = box[0]
    try:
        model = make(0)
        saved = {k: v.full_tensor().cpu() for k, v in get_model_state_dict(model).items()}
        dcp.save(get_model_state_dict(model), checkpoint_id=path)
        other = make(1)
        assert any(not torch.equal(v.full_tensor().cpu(), saved[k]) for k, v in get_model_state_dict(other).items())
        sd = get_model_state_dict(other)
        dcp.load(sd, checkpoint_id=path)
        set_model_state_dict(other, sd)
        for k, v in get_model_state_dict(other).items():
            assert torch.equal(v.full_tensor().cpu(), saved[k]), k
        dist.barrier()
    finally:
        if rank == 0:
            shutil.rmtree(path, ignore_errors=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
