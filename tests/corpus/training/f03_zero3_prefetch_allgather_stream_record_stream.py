"""ZeRO-3 by hand, DeepSpeed's stream structure: every linear layer's weight lives as a flat shard per rank
(`ds_tensor`); before a layer runs, its full weight is all-gathered on the coordinator's all-gather stream
(which first waits for the current stream: the optimizer wrote the shards there), and the next layer is
prefetched while the current one computes. An event recorded on the all-gather stream after the gather marks the
fetch; the consumer waits it with `current_stream().wait_event`, and at most two fetches are in flight (older
ones are host-synchronized, DeepSpeed's `max_ongoing_fetch_events` throttle). Released parameters are freed after
`record_stream(current_stream())` (the gathered block belongs to the all-gather stream and was read on the
current one). Three layers, two training steps (forward, backward through the gathered weights, gradient
reduce-scatter into each rank's shard, SGD on the shard); the loss and the shards are checked against the same
training done unsharded on the host.

EXPECTED: clean
WORLD_SIZE: 2
MODELLED ON: DeepSpeed deepspeed/runtime/zero/partitioned_param_coordinator.py (`fetch_sub_module`: `with
get_accelerator().stream(self.__allgather_stream)` around `__all_gather_params`, the `__ongoing_fetch_events`
deque with `event.record()` after a fetch and `popleft().synchronize()` beyond the limit, prefetching the next
sub-modules of the trace) and partition_parameters.py (`AllGatherHandle.wait()`, `free_param`:
`param.data.record_stream(get_accelerator().current_stream())` then `param.data = torch.empty(0)`), written out
in plain torch.
REASON: the gather's output is ordered before the consumer by work.wait() on the all-gather stream and the event
waited on the current stream (torch/cuda/streams.py wait_event: cudaStreamWaitEvent); the gather reads the shard
after the optimizer wrote it (the all-gather stream waits for the current stream first); a freed gathered block
is reused only after the current stream's queued reads (Tensor.record_stream); the throttle's synchronize only
limits memory.
"""
import collections
import os

import torch
import torch.distributed as dist

D, LAYERS, STEPS, LR = 64, 3, 2, 0.1


def full_weights():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(D, D, generator=g) / D ** 0.5 for _ in range(LAYERS)]


def batch(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(8, D, generator=g)


class Coordinator:
    def __init__(self, shards, world, max_ongoing=2):
        self.shards = shards
        self.world = world
        self.stream = torch.cuda.Stream()
        self.inflight = {}                      # layer -> (full weight, work, event)
        self.ongoing = collections.deque()
        self.max_ongoing = max_ongoing

    def prefetch(self, i):
        if i >= len(self.shards) or i in self.inflight:
            return
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            full = torch.empty(self.world * self.shards[i].numel(), device="cuda")
            work = dist.all_gather_into_tensor(full, self.shards[i], async_op=True)
            work.wait()                          # the all-gather stream waits for the collective
            ev = torch.cuda.Event()
            ev.record()
        self.inflight[i] = (full, ev)
        self.ongoing.append(ev)
        while len(self.ongoing) > self.max_ongoing:
            self.ongoing.popleft().synchronize()

    def fetch(self, i):
        self.prefetch(i)
        full, ev = self.inflight.pop(i)
        torch.cuda.current_stream().wait_event(ev)
        self.prefetch(i + 1)                     # overlap the next layer's gather with this layer's compute
        return full.view(D, D)

    @staticmethod
    def release(w):
        w.record_stream(torch.cuda.current_stream())


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    weights = full_weights()
    shards = [w.reshape(-1).chunk(world)[rank].clone().cuda() for w in weights]
    coord = Coordinator(shards, world)
    ref = [w.clone().requires_grad_(True) for w in weights]
    for step in range(STEPS):
        x = batch(step)
        # forward: gather, compute, release (autograd keeps what backward needs: the gathered weights)
        h = x.cuda()
        gathered = []
        for i in range(LAYERS):
            w = coord.fetch(i).requires_grad_(True)
            gathered.append(w)
            h = torch.tanh(h @ w.t())
        loss = h.pow(2).mean()
        loss.backward()
        # gradient reduce-scatter into each rank's shard (averaged), then SGD on the shard
        for i, w in enumerate(gathered):
            g_shard = torch.empty_like(shards[i])
            dist.reduce_scatter_tensor(g_shard, w.grad.reshape(-1).contiguous(), op=dist.ReduceOp.SUM)
            shards[i].add_(g_shard, alpha=-LR / world)
            coord.release(w)
        del gathered, w, h
        # the reference: the same step unsharded (every rank draws the same batch: the average is the gradient)
        r = x
        for w in ref:
            r = torch.tanh(r @ w.t())
        rloss = r.pow(2).mean()
        rloss.backward()
        with torch.no_grad():
            for w in ref:
                w -= LR * w.grad
                w.grad = None
        torch.testing.assert_close(loss.detach().cpu(), rloss.detach(), rtol=1e-5, atol=1e-6)
    for i in range(LAYERS):
        want = ref[i].detach().reshape(-1).chunk(world)[rank]
        torch.testing.assert_close(shards[i].cpu(), want, rtol=1e-5, atol=1e-6)
    print(f"rank {rank}: {STEPS} ZeRO-3 steps match the unsharded reference")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
