"""ReduceOp MAX/MIN/PRODUCT on int32/int64, SUM/MAX on bf16, AVG on float32, SUM on bool (NCCL maps it to MAX = logical or).

EXPECTED: clean
WORLD_SIZE: 3
REASON: values chosen exactly representable; ProcessGroupNCCL maps SUM on bool tensors to ncclMax (logical or).
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    R = dist.ReduceOp
    vals = [[3, -7, 2], [-1, 5, 2], [4, 0, -3]]
    a = torch.tensor(vals[rank], dtype=torch.int32, device="cuda")
    dist.all_reduce(a, op=R.MAX)
    assert a.tolist() == [4, 5, 2]
    b = torch.tensor(vals[rank], dtype=torch.int64, device="cuda")
    dist.all_reduce(b, op=R.MIN)
    assert b.tolist() == [-1, -7, -3]
    c = torch.tensor(vals[rank], dtype=torch.int64, device="cuda")
    dist.all_reduce(c, op=R.PRODUCT)
    assert c.tolist() == [-12, 0, -12]
    h = torch.tensor([0.5 * (rank + 1), 64.0 * rank, -2.0], dtype=torch.bfloat16, device="cuda")
    dist.all_reduce(h)
    assert h.dtype == torch.bfloat16 and h.float().tolist() == [3.0, 192.0, -6.0]
    hm = torch.tensor([float(rank), -float(rank)], dtype=torch.bfloat16, device="cuda")
    dist.all_reduce(hm, op=R.MAX)
    assert hm.float().tolist() == [2.0, 0.0]
    f = torch.tensor([3.0 * rank, 6.0], device="cuda")
    dist.all_reduce(f, op=R.AVG)
    assert f.tolist() == [3.0, 6.0], f.tolist()
    bo = torch.tensor([rank == 1, False, True], device="cuda")
    dist.all_reduce(bo)
    assert bo.dtype == torch.bool and bo.tolist() == [True, False, True], bo.tolist()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
