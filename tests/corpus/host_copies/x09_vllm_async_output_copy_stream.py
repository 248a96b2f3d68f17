"""vLLM's asynchronous model-runner output: after each decode step the sampled token ids, the per-request token
counts and a pooled output are copied to the host on a copy stream (which first waits for the main stream) with
non_blocking copies into pinned memory, an event is recorded on the copy stream, and the main stream goes on with
the next step at once; `get_output()` synchronizes the event before reading the arrays (`.tolist()`), and the
pooling variant takes `unbind` views of its pending host tensor before the event's synchronize (views read
nothing). The GPU tensors stay referenced by the output object until then (x10 drops them: a race). Every step's output equals the same
computation on the CPU.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: vllm/v1/worker/gpu/async_utils.py at 015a47e: `AsyncOutput.__init__` (`copy_stream.wait_stream(main_stream)`,
`async_copy_to_np(x)` = `x.to("cpu", non_blocking=True).numpy()`, `self.copy_event.record(copy_stream)`, a
`torch.cuda.Event(blocking=True)`, the "We must retain references to the GPU tensors" note), `get_output`
(`self.copy_event.synchronize()`, then `.tolist()` and `del token_ids[num_tokens:]`), `AsyncPoolingOutput.get_output`
(`list(self.pooler_output_cpu.unbind(dim=0))` before the synchronize), and its `stream()` helper
(`torch.cuda.set_stream(to)`, then `set_stream(from)`).
SIMPLIFIED: a linear "model" over a [4, 16] hidden state, greedy sampling (argmax), three steps, two outputs in
flight at once (the runner keeps one step ahead).
RULE: a non_blocking device-to-host copy returns before it completes (the output is pinned memory); the host may
read it after synchronizing an event recorded after the copy on its stream
(https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html); tensors used on a stream other than the one that
allocated them must stay referenced (or be record_stream-ed) until that stream is done with them (torch.Tensor.record_stream docs).
"""
import contextlib

import torch


@contextlib.contextmanager
def stream(to_stream, from_stream):
    try:
        torch.cuda.set_stream(to_stream)
        yield
    finally:
        torch.cuda.set_stream(from_stream)


class AsyncOutput:
    def __init__(self, sampled, num_tokens, pooled, main_stream, copy_stream):
        self.sampled, self.num_tokens, self.pooled = sampled, num_tokens, pooled  # keep the GPU tensors alive
        self.copy_event = torch.cuda.Event(blocking=True)
        with stream(copy_stream, main_stream):
            copy_stream.wait_stream(main_stream)
            self.sampled_np = sampled.to("cpu", non_blocking=True).numpy()
            self.num_tokens_np = num_tokens.to("cpu", non_blocking=True).numpy()
            self.pooled_cpu = pooled.to("cpu", non_blocking=True)
            self.copy_event.record(copy_stream)

    def get_output(self):
        rows = list(self.pooled_cpu.unbind(dim=0))  # views of the pending host tensor: nothing read yet
        self.copy_event.synchronize()
        ids = self.sampled_np.tolist()
        for token_ids, n in zip(ids, self.num_tokens_np.tolist()):
            del token_ids[n:]
        return ids, [r.sum().item() for r in rows]


def step(w, h, lengths):
    logits = h @ w                                    # [4, 2, 8]: two candidate positions per request
    sampled = logits.argmax(-1)                       # [4, 2]
    return sampled, lengths.clone(), logits.mean(1)   # pooled [4, 8]


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    main_stream, copy_stream = torch.cuda.current_stream(), torch.cuda.Stream()
    w = torch.randn(16, 8)
    hs = [torch.randn(4, 2, 16) for _ in range(3)]
    lengths = torch.tensor([2, 1, 2, 1])
    wd, ld = w.cuda(), lengths.cuda()
    pending, outputs = [], []
    for h in hs:
        pending.append(AsyncOutput(*step(wd, h.cuda(), ld), main_stream, copy_stream))
        if len(pending) == 2:  # one step ahead, as the async scheduler runs
            outputs.append(pending.pop(0).get_output())
    outputs += [p.get_output() for p in pending]
    for (ids, pooled), h in zip(outputs, hs):
        s, n, p = step(w, h, lengths)
        want = [row[:k] for row, k in zip(s.tolist(), n.tolist())]
        assert ids == want, (ids, want)
        assert all(abs(a - b) < 1e-4 for a, b in zip(pooled, p.sum(1).tolist())), (pooled, p.sum(1))
    print("async outputs", [o[0] for o in outputs])


if __name__ == "__main__":
    main()
