"""The fixed m16: non_blocking D2H copies of several metrics, one event recorded after them, event.synchronize(),
then .numpy(), .tolist() and .item() on the host copies all give the device values (the pattern of Lightning's
and torchtitan's asynchronous metric logging).

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch.cuda.Event.synchronize waits for the work recorded before it on the stream, the copies included (torch/cuda/streams.py); afterwards the pinned outputs hold the values.
"""
import torch


def main():
    torch.cuda.set_device(0)
    a = torch.randn(4096)
    x = a.cuda()
    loss = (x * x).mean()
    norms = torch.stack([x[:2048].norm(), x[2048:].norm()])
    h_loss = loss.to("cpu", non_blocking=True)
    h_norms = norms.to("cpu", non_blocking=True)
    ev = torch.cuda.Event()
    ev.record()
    ev.synchronize()
    assert abs(h_loss.item() - (a * a).mean().item()) < 1e-5
    ref = [a[:2048].norm().item(), a[2048:].norm().item()]
    assert all(abs(u - v) < 1e-4 for u, v in zip(h_norms.tolist(), ref)), (h_norms.tolist(), ref)
    assert abs(float(h_norms.numpy().sum()) - sum(ref)) < 1e-3


if __name__ == "__main__":
    main()
