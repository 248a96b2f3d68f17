"""vLLM's GPU model runner under async scheduling: each step's input ids and positions are written by the host
into persistent pinned buffers through their numpy views (`CpuGpuBuffer.np`) and sent with `copy_to_gpu` (a
non_blocking H2D copy on the current stream); the host runs one step ahead of the device, so before it rewrites
the pinned buffers for the next step it synchronizes `prepare_inputs_event`, recorded on the current stream
right after the previous step's copies were queued (`synchronize_input_prep`: "Ensure prior step has finished
with reused CPU tensors. This is required in the async scheduling case because the CPU->GPU transfer happens
async."). The sampled tokens come back through x09's AsyncOutput one step later. Every step's tokens equal the
same computation on the CPU.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: vllm/v1/worker/gpu_model_runner.py `GPUModelRunner.synchronize_input_prep` (`self.prepare_inputs_event
.synchronize()`, then `yield`, then `self.prepare_inputs_event.record()`; a no-op when the event is None, i.e.
without async scheduling), the `with self.synchronize_input_prep():` block of `execute_model` around
`_update_states` / `_prepare_inputs`, and vllm/v1/utils.py `CpuGpuBuffer` (`cpu` pinned, `np = cpu.numpy()`,
`gpu`, `copy_to_gpu(n)` = `self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)`).
SIMPLIFIED: an embedding + position embedding + output projection "model", greedy argmax, three requests of
chunked prefill, six steps, the async output of x09 (copy stream, pinned D2H, event) read one step late.
RULE: a non_blocking H2D copy from pinned memory reads the host buffer when it runs, after the host went on; the
host may rewrite the buffer once an event recorded after the copy has completed
(https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html; torch.cuda.Event.synchronize docs).
"""
import contextlib
import os

import torch

DELAY = int(os.environ.get("X_DELAY_CYCLES", "0"))  # a GPU check's torch.cuda._sleep before the input copies
SYNC_INPUT_PREP = True  # x26: False (async scheduling without prepare_inputs_event)


class CpuGpuBuffer:
    def __init__(self, *size, dtype, device):
        self.cpu = torch.zeros(*size, dtype=dtype, device="cpu", pin_memory=True)
        self.np = self.cpu.numpy()
        self.gpu = torch.zeros_like(self.cpu, device=device)

    def copy_to_gpu(self, n):
        return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)


class AsyncOutput:  # x09's, tokens only
    def __init__(self, sampled, main_stream, copy_stream):
        self.sampled = sampled
        self.copy_event = torch.cuda.Event()
        with torch.cuda.stream(copy_stream):
            copy_stream.wait_stream(main_stream)
            self.sampled_cpu = sampled.to("cpu", non_blocking=True)
            self.copy_event.record(copy_stream)

    def get_output(self):
        self.copy_event.synchronize()
        return self.sampled_cpu.tolist()


class GPUModelRunner:
    def __init__(self, weights, max_num_tokens, device):
        self.emb, self.pos_emb, self.w_out = (w.to(device) for w in weights)
        self.input_ids = CpuGpuBuffer(max_num_tokens, dtype=torch.int64, device=device)
        self.positions = CpuGpuBuffer(max_num_tokens, dtype=torch.int64, device=device)
        self.prepare_inputs_event = torch.cuda.Event() if SYNC_INPUT_PREP else None
        self.main_stream, self.copy_stream = torch.cuda.current_stream(), torch.cuda.Stream()

    @contextlib.contextmanager
    def synchronize_input_prep(self):
        if self.prepare_inputs_event is None:
            yield
            return
        self.prepare_inputs_event.synchronize()  # the prior step's H2D copies have read the pinned buffers
        try:
            yield
        finally:
            self.prepare_inputs_event.record()

    def execute_model(self, chunks):
        with self.synchronize_input_prep():
            n = 0
            for tokens, start in chunks:  # _prepare_inputs: the scheduled tokens of each request
                self.input_ids.np[n:n + len(tokens)] = tokens
                self.positions.np[n:n + len(tokens)] = range(start, start + len(tokens))
                n += len(tokens)
            if DELAY:
                torch.cuda._sleep(DELAY)
            self.input_ids.copy_to_gpu(n)
            self.positions.copy_to_gpu(n)
        h = self.emb[self.input_ids.gpu[:n]] + self.pos_emb[self.positions.gpu[:n]]
        return AsyncOutput((h @ self.w_out).argmax(-1), self.main_stream, self.copy_stream)


def reference(weights, chunks):
    emb, pos_emb, w_out = weights
    ids = torch.tensor([t for tokens, _ in chunks for t in tokens])
    pos = torch.tensor([p for tokens, s in chunks for p in range(s, s + len(tokens))])
    return ((emb[ids] + pos_emb[pos]) @ w_out).argmax(-1).tolist()


def main():
    torch.cuda.set_device(0)
    g = torch.Generator().manual_seed(0)
    weights = (torch.randn(50, 32, generator=g), torch.randn(64, 32, generator=g), torch.randn(32, 50, generator=g))
    prompts = [torch.randint(0, 50, (24,), generator=g).tolist() for _ in range(3)]
    steps = [[(p[i * 4:(i + 1) * 4], i * 4) for p in prompts] for i in range(6)]  # 4-token chunks
    runner = GPUModelRunner(weights, max_num_tokens=16, device="cuda")
    pending, outputs = None, []
    for chunks in steps:
        out = runner.execute_model(chunks)   # the host prepares the next step before reading this one
        if pending is not None:
            outputs.append(pending.get_output())
        pending = out
    outputs.append(pending.get_output())
    wrong = sum(o != reference(weights, c) for o, c in zip(outputs, steps))
    print(f"steps whose sampled tokens differ from the CPU reference: {wrong} of {len(steps)}")
    if SYNC_INPUT_PREP:
        assert wrong == 0, outputs


if __name__ == "__main__":
    main()
