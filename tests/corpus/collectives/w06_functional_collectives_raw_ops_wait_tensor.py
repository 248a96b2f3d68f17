"""The functional collectives' raw ops, as a compiled graph (Inductor's output code) or a hand-written overlap
calls them: `torch.ops._c10d_functional.all_reduce`, `all_gather_into_tensor_coalesced`, `reduce_scatter_tensor`
and the in-place `all_reduce_`, each followed by independent compute and then `wait_tensor` on every output before
it is read; a bucketed pattern (two coalesced all-gathers in flight at once, waited in order). Values checked
against plain sums and concatenations.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: torch/csrc/distributed/c10d/Functional.cpp (`all_reduce`, `all_gather_into_tensor_coalesced`,
`reduce_scatter_tensor`, `all_reduce_`: the op returns at once with its Work registered against the output,
`c10d::register_work`; `wait_tensor` waits it), torch/_inductor's generated code for torch.compile'd
collectives (`torch.ops._c10d_functional.all_reduce_.default(buf, 'sum', '0')` ... compute ...
`torch.ops._c10d_functional.wait_tensor.default(buf)`), torchtitan's / SimpleFSDP's bucketed all-gathers.
REASON: wait_tensor makes the current stream wait for the collective's Work (Functional.cpp `wait_tensor`:
`c10d::unregister_work(tensor)->wait()`), so every read after it is ordered after the collective's write; the
compute between the launch and the wait reads only other tensors.
"""
import os

import torch
import torch.distributed as dist

fc = torch.ops._c10d_functional


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    name = dist.group.WORLD.group_name
    base = torch.arange(8, dtype=torch.float32)
    x = (base + rank).cuda()
    other = torch.randn(64, 64, device="cuda")

    s = fc.all_reduce(x, "sum", name)
    busy = other @ other                          # overlapped with the all-reduce
    s = fc.wait_tensor(s)
    assert torch.equal((s * 1).cpu(), base * world + sum(range(world)))

    y = x.clone()
    fc.all_reduce_(y, "avg", name)
    busy = busy @ other
    fc.wait_tensor(y)
    assert torch.allclose(y.cpu(), base + (world - 1) / 2)

    shards = [torch.full((4,), float(rank * 10 + i), device="cuda") for i in range(3)]
    first = fc.all_gather_into_tensor_coalesced(shards[:2], world, name)
    second = fc.all_gather_into_tensor_coalesced(shards[2:], world, name)   # two buckets in flight
    busy = busy @ other
    for bucket, idx in ((first, (0, 1)), (second, (2,))):
        for out, i in zip(bucket, idx):
            out = fc.wait_tensor(out)
            exp = torch.cat([torch.full((4,), float(r * 10 + i)) for r in range(world)])
            assert torch.equal(out.cpu(), exp), (i, out.cpu())

    rs = fc.reduce_scatter_tensor(torch.arange(8, dtype=torch.float32, device="cuda") * (rank + 1), "sum", world,
                                  name)
    rs = fc.wait_tensor(rs)
    full = torch.arange(8, dtype=torch.float32) * sum(r + 1 for r in range(world))
    assert torch.equal(rs.cpu(), full.chunk(world)[rank])
    torch.cuda.synchronize()
    assert torch.isfinite(busy).all()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
