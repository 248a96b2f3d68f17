"""A weight-update group over a TCPStore the program makes itself (the shape of vLLM's StatelessProcessGroup
rendezvous and of hand-written trainer -> inference sync): world 4, the trainer's ranks 0-1, the inference
workers 2-3. The trainer's rank 0 and the workers make `TCPStore(host, port, 3, is_master=(group rank 0))` with
the default wait_for_workers=True, count themselves in it with `add`, and make the group with c10d's
`_new_process_group_helper(3, group_rank, [], ...)` (`pg_group_ranks = {i: i}`); group rank 0 (global rank 0)
broadcasts three weight tensors, the workers receive them into `torch.empty`, check them and the join count.

EXPECTED: clean
WORLD_SIZE: 4
MODELLED ON: vLLM vllm/distributed/utils.py StatelessProcessGroup.create (`TCPStore(host_name=host, port=port,
world_size=world_size, is_master=(rank == 0))`) used for trainer-to-engine weight sync, with the torch process
group made as OpenRLHF's `init_process_group` copy makes it (c10d `_new_process_group_helper` over that store).
REASON: the store's keys are the same for every member (one server at that address); the synchronous broadcast
orders the receivers' current streams after it; its members come from the store, as NCCL learns them.
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import Backend, PrefixStore, _new_process_group_helper, _world


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if rank != 1:
        group_rank = 0 if rank == 0 else rank - 1
        store = dist.TCPStore("127.0.0.1", 29733, 3, group_rank == 0, timeout=timedelta(minutes=5))
        store.add("members", 1)
        pg, _ = _new_process_group_helper(3, group_rank, [], Backend("nccl"), PrefixStore("weight_sync", store),
                                          group_name="weight_sync", backend_options=None,
                                          timeout=timedelta(minutes=5))
        _world.pg_group_ranks[pg] = {i: i for i in range(3)}
        g = torch.Generator().manual_seed(0)
        weights = [torch.randn(64, 32, generator=g), torch.randn(32, generator=g), torch.randn(8, 64, generator=g)]
        for w in weights:
            buf = w.cuda() if rank == 0 else torch.empty(w.shape, device="cuda")
            dist.broadcast(buf, 0, group=pg)
            assert torch.equal(buf.cpu(), w)
        dist.barrier(group=pg)
        assert store.add("members", 0) == 3
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
