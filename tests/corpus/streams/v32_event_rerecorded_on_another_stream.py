"""One event object reused for two producers on two streams: it is recorded after producer A on stream s1,
then re-recorded after producer B on stream s2 before anyone waited; a wait on it now captures only s2's work,
so the consumer of A's output races A.

EXPECTED: hazard
KINDS: read-after-write
WORLD_SIZE: 1
REASON: cudaEventRecord replaces what the event captures with the recording stream's work so far (CUDA Runtime API, cudaEventRecord: "calls to cudaEventQuery() and cudaStreamWaitEvent() use the most recent call"); torch/cuda/streams.py Event.record.
"""
import torch


def main():
    torch.cuda.set_device(0)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.randn(1 << 18, device="cuda")
    ev = torch.cuda.Event()
    for s in (s1, s2):
        s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s1):
        a = x.exp()
        ev.record()
    with torch.cuda.stream(s2):
        b = x.cos()
        ev.record()                                     # BUG: the same event, now s2's
    torch.cuda.current_stream().wait_event(ev)
    out = a + b
    for t in (a, b):
        t.record_stream(torch.cuda.current_stream())
    print(out.sum().item())


if __name__ == "__main__":
    main()
