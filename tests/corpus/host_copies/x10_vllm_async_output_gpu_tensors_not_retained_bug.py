"""The bug twin of x09: vLLM's asynchronous output without the "We must retain references to the GPU tensors"
line: the output object keeps only the host arrays, so the sampled ids, counts and pooled tensors (allocated on the
main stream, read by the copy stream's D2H copies) are freed when the step returns, and the next step's
allocations on the main stream take their blocks while the copies may still be reading them.

EXPECTED: hazard
KINDS: reuse-after-free
KINDS_ALSO: write-after-read
WORLD_SIZE: 1
MODELLED ON: vllm/v1/worker/gpu/async_utils.py at 015a47e `AsyncOutput.__init__`, whose note says why it keeps
`self.sampler_output` and `self.num_sampled_tokens`: "We must retain references to the GPU tensors, as the copy
operations are performed on a different CUDA stream than the one where the tensors were created." Here they are
not kept (the fix is x09).
RULE: the caching allocator hands a freed block to the next allocation on the stream that allocated it at once;
work queued on another stream is not waited for unless the tensor was record_stream-ed (torch.Tensor.record_stream
docs; https://pytorch.org/docs/stable/notes/cuda.html#cuda-memory-management).
WHAT SIMDIST SAYS: reuse-after-free, three: the copy stream's D2H copies of the sampled ids, the counts and the
pooled output read blocks that the next step's argmax, clone and mean on the default stream are given.
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
        # BUG: the GPU tensors are not kept: they are freed when the caller's step returns
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
    print("async outputs", [o[0] for o in outputs])


if __name__ == "__main__":
    main()
