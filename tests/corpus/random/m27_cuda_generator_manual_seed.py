"""A private CUDA generator (torch.Generator(device="cuda").manual_seed(s), as diffusers pipelines and vLLM's
samplers use): the same seed gives the same numbers, on any stream, and drawing from it leaves the default CUDA
generator's sequence alone; get_state/set_state replays a draw.

EXPECTED: clean
WORLD_SIZE: 1
REASON: a CUDA Philox generator hands each kernel (seed, offset) at launch and advances the offset; manual_seed resets the offset (aten/src/ATen/cuda/CUDAGeneratorImpl.cpp set_current_seed, philox_cuda_state); separate generator objects have separate states.
"""
import torch


def main():
    torch.cuda.set_device(0)
    g = torch.Generator(device="cuda")
    assert g.device.type == "cuda"
    g.manual_seed(1234)
    a = torch.randn(4096, device="cuda", generator=g)
    torch.manual_seed(7)
    d1 = torch.rand(1000, device="cuda")
    g.manual_seed(1234)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        b = torch.randn(4096, device="cuda", generator=g)     # same seed on another stream: same numbers
    torch.cuda.current_stream().wait_stream(side)
    b.record_stream(torch.cuda.current_stream())
    assert torch.equal(a.cpu(), b.cpu())
    torch.manual_seed(7)
    torch.randn(4096, device="cuda", generator=g)            # the private generator does not move the default one
    d2 = torch.rand(1000, device="cuda")
    assert torch.equal(d1.cpu(), d2.cpu())
    state = g.get_state()
    c1 = torch.randint(0, 100, (512,), device="cuda", generator=g)
    g.set_state(state)
    c2 = torch.randint(0, 100, (512,), device="cuda", generator=g)
    assert torch.equal(c1.cpu(), c2.cpu())
    assert not torch.equal(a.cpu()[:512], torch.randn(4096, device="cuda", generator=g).cpu()[:512])


if __name__ == "__main__":
    main()
