"""Casts to bf16/fp16/float8 and back on a side stream with proper sync; values exactly representable.

EXPECTED: clean
REASON: single side stream with wait_stream both ways; exact values survive each cast.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    vals = [0.0, 0.5, 1.0, -2.0, 4.0, 8.0, -0.25, 3.0]
    x = torch.tensor(vals, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        b = x.to(torch.bfloat16)
        h = x.half()
        f8 = x.to(torch.float8_e4m3fn)
        f5 = x.to(torch.float8_e5m2)
        back = torch.stack([b.float(), h.float(), f8.float(), f5.to(torch.float32)])
        i8 = (x * 2).to(torch.int8)
    torch.cuda.current_stream().wait_stream(side)
    assert back.tolist() == [vals] * 4, back.tolist()
    assert i8.tolist() == [int(v * 2) for v in vals], i8.tolist()
    assert b.dtype == torch.bfloat16 and f8.dtype == torch.float8_e4m3fn
    big = torch.tensor([1000.0], device="cuda").to(torch.float8_e5m2).float().item()
    assert big == 1024.0, big
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
