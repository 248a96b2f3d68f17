"""A side stream produces a tensor and records an event; the consumer makes torch.cuda.current_stream() wait on
that event (the pattern of torch.distributed's _CoalescingManager and Megatron's overlap helpers), then reads.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/cuda/streams.py Stream.wait_event: all future work submitted to the stream waits for the event (cudaStreamWaitEvent); Event.record captures the work queued on the stream so far.
"""
import torch


def main():
    torch.cuda.set_device(0)
    a = torch.randn(256, 256)
    x = a.cuda()
    side = torch.cuda.Stream()
    ready = torch.cuda.Event()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = torch.relu(x @ x) + 1
        ready.record()
    torch.cuda.current_stream().wait_event(ready)
    y.record_stream(torch.cuda.current_stream())
    out = y.sum(dim=0)
    assert torch.allclose(out.cpu(), (torch.relu(a @ a) + 1).sum(dim=0), rtol=1e-4, atol=1e-3)


if __name__ == "__main__":
    main()
