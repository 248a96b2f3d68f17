"""The PyTorch model-parallel tutorial's pipelined version (PipelineParallelResNet50's shape): the batch is split
into micro-batches; while cuda:1 runs the second half on micro-batch i, cuda:0 runs the first half on
micro-batch i+1, the activations move with .to("cuda:1"), and the outputs are concatenated on cuda:1. Each
device's work is timed with a pair of events recorded on that device's own stream (an event pair spanning two
devices cannot be timed: notes x7). Two SGD steps give the parameters of the same model on the CPU.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
MODELLED ON: https://pytorch.org/tutorials/intermediate/model_parallel_tutorial.html (`PipelineParallelResNet50.forward`:
`splits = iter(x.split(self.split_size, dim=0)); s_next = next(splits); s_prev = self.seq1(s_next).to('cuda:1')`,
then per split `ret.append(self.fc(self.seq2(s_prev).view(s_prev.size(0), -1)))`, `s_prev = self.seq1(s_next).to('cuda:1')`,
`torch.cat(ret)`); torch.cuda.Event(enable_timing=True) per device.
REASON: ATen Copy.cu copy_device_to_device: a cross-device copy runs after the destination's current stream has
waited for the source's, and the destination's current stream waits for the copy, so each device's stream order
carries the pipeline; CUDAEvent::record and cudaEventElapsedTime work within one device.
"""
import copy

import torch
import torch.nn as nn


class Pipelined(nn.Module):
    def __init__(self, split_size=2, devices=("cuda:0", "cuda:1")):
        super().__init__()
        self.split_size, self.d0, self.d1 = split_size, devices[0], devices[1]
        self.seq1 = nn.Sequential(nn.Linear(16, 32), nn.ReLU()).to(self.d0)
        self.seq2 = nn.Sequential(nn.Linear(32, 32), nn.ReLU()).to(self.d1)
        self.fc = nn.Linear(32, 4).to(self.d1)

    def forward(self, x):
        splits = iter(x.split(self.split_size, dim=0))
        s_next = next(splits)
        s_prev = self.seq1(s_next).to(self.d1)
        ret = []
        for s_next in splits:
            ret.append(self.fc(self.seq2(s_prev)))
            s_prev = self.seq1(s_next).to(self.d1)
        ret.append(self.fc(self.seq2(s_prev)))
        return torch.cat(ret)


def main():
    torch.manual_seed(0)
    model = Pipelined()
    ref = Pipelined(devices=("cpu", "cpu"))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    opt, opt_ref = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    times = []
    for step in range(2):
        x, y = torch.randn(8, 16), torch.randn(8, 4)
        ev = {d: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for d in (0, 1)}
        for d in (0, 1):
            ev[d][0].record(torch.cuda.current_stream(d))
        out = model(x.to("cuda:0"))
        loss = nn.functional.mse_loss(out, y.to("cuda:1"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        for d in (0, 1):
            ev[d][1].record(torch.cuda.current_stream(d))
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        times.append([ev[d][0].elapsed_time(ev[d][1]) for d in (0, 1)])
        loss_ref = nn.functional.mse_loss(ref(x), y)
        opt_ref.zero_grad()
        loss_ref.backward()
        opt_ref.step()
        assert abs(loss.item() - loss_ref.item()) < 1e-5, (step, loss.item(), loss_ref.item())
    for (n, p), q in zip(ref.named_parameters(), model.parameters()):
        assert torch.allclose(p, q.detach().cpu(), rtol=1e-5, atol=1e-6), n
    assert model.fc.weight.device == torch.device("cuda:1") and all(t >= 0 for ts in times for t in ts), times
    print("pipelined model parallel matches the CPU; per-device ms", [[round(t, 4) for t in ts] for ts in times])


if __name__ == "__main__":
    main()
