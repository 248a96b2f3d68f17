"""Bug twin of f03: the fetch event is recorded on the all-gather stream right after the async all-gather is
issued, without `work.wait()` first. With async_op=True ProcessGroupNCCL runs the gather on its internal NCCL
stream; the event on the all-gather stream then covers only that stream's own work (nothing), so the consumer's
`current_stream().wait_event(ev)` orders nothing and the layer reads its gathered weight before the collective
wrote it (on a GPU: poison or the previous use of the block).

EXPECTED: hazard
KINDS: read-after-write
KINDS_ALSO: write-after-read, write-after-write, reuse-after-free
WORLD_SIZE: 2
MODELLED ON: as f03 (DeepSpeed's partitioned_param_coordinator fetch events over partition_parameters' async
all-gather), with the handle waited only when the parameter is released, as a coordinator that trusts its
events would.
RULE: an event marks the work queued on the stream it is recorded on (torch/cuda/streams.py Event.record:
cudaEventRecord); an async collective's work is on ProcessGroupNCCL's internal stream, which the caller's
stream joins only through Work.wait() (ProcessGroupNCCL.cpp WorkNCCL::synchronizeStream).
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
        self.works = []

    def prefetch(self, i):
        if i >= len(self.shards) or i in self.inflight:
            return
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            full = torch.empty(self.world * self.shards[i].numel(), device="cuda")
            work = dist.all_gather_into_tensor(full, self.shards[i], async_op=True)
            ev = torch.cuda.Event()
            ev.record()                          # BUG: recorded before the collective is joined (work.wait())
        self.works.append(work)
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

    def release(self, w):
        for work in self.works:
            work.wait()
        self.works = []
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
        print(f"rank {rank} step {step}: loss equal to the reference: "
              f"{torch.allclose(loss.detach().cpu(), rloss.detach(), rtol=1e-5, atol=1e-6)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
