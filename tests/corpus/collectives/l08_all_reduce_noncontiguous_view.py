"""all_reduce on a non-contiguous view (a column of a matrix, a transposed matrix) is refused by ProcessGroupNCCL;
the contiguous copy, reduced and copied back, gives the column sums.

EXPECTED: clean
MODELLED ON: code reducing `param.grad[:, idx]` or `w.t()` in place.
REASON: torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp check_gpu_single_tensor: `if
(!tensor.is_contiguous(tensor.suggest_memory_format())) C10_THROW_ERROR(ValueError, "Tensors must be contiguous")`
(raised as ValueError in Python); a one-element-wide slice whose strides are trivially contiguous is accepted.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    base = (torch.arange(12, dtype=torch.float32).reshape(3, 4) + 100 * rank).cuda()
    col = base[:, 1]
    assert not col.is_contiguous()
    for bad in (col, base.t()):
        try:
            dist.all_reduce(bad)
        except ValueError as e:
            assert "contiguous" in str(e), e
        else:
            raise AssertionError("all_reduce accepted a non-contiguous tensor")
    c = col.contiguous()
    dist.all_reduce(c)
    col.copy_(c)
    exp = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1] * world + 100 * sum(range(world))
    assert torch.equal(base[:, 1].cpu(), exp), base.cpu()
    row = base[1]                                # contiguous row view: fine in place
    dist.all_reduce(row)
    assert torch.equal(base[1].cpu()[[0, 2, 3]], (torch.arange(4.0) + 4)[[0, 2, 3]] * world + 100 * sum(range(world)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
