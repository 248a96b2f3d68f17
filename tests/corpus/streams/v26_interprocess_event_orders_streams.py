"""An interprocess event (torch.cuda.Event(interprocess=True), what torch.multiprocessing's CUDA IPC producer
records so a consumer process can wait on it) used inside one process: it orders a producer on a side stream
before a consumer on the default stream exactly as any event does.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/cuda/streams.py Event(enable_timing=False, blocking=False, interprocess=False): interprocess only adds cudaEventInterprocess (requires timing off); record / wait are cudaEventRecord / cudaStreamWaitEvent (https://pytorch.org/docs/stable/generated/torch.cuda.Event.html).
"""
import torch


def main():
    torch.cuda.set_device(0)
    side = torch.cuda.Stream()
    x = torch.randn(1 << 16, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    ev = torch.cuda.Event(interprocess=True)
    with torch.cuda.stream(side):
        y = x * x
        ev.record()
    ev.wait(torch.cuda.current_stream())
    y.record_stream(torch.cuda.current_stream())
    total = (y + 1).sum().item()
    want = (x.cpu().double() ** 2 + 1).sum().item()
    assert abs(total - want) < 1e-3 * abs(want), (total, want)


if __name__ == "__main__":
    main()
