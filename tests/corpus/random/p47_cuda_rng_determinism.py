"""torch.manual_seed gives the same CUDA random numbers on every rank and on reseeding, including on a side stream.

EXPECTED: clean
REASON: the CUDA Philox generator state is taken at launch; streams are synchronized before comparison.
"""
import os
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    world = dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(1234)
    a = torch.randn(1000, device="cuda")
    b = torch.rand(10, device="cuda")
    torch.manual_seed(1234)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        a2 = torch.randn(1000, device="cuda")
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(a, a2)
    g = torch.Generator(device="cuda")
    g.manual_seed(5)
    c = torch.randint(0, 100, (50,), device="cuda", generator=g)
    gathered = [torch.empty_like(a) for _ in range(world)]
    dist.all_gather(gathered, a)
    for t in gathered:
        assert torch.equal(t, a)
    assert 0.0 <= b.min().item() and b.max().item() < 1.0
    assert c.max().item() < 100
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
