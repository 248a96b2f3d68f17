"""torch.cuda.comm across two GPUs of one process (the primitives under nn.DataParallel: replicate uses
broadcast_coalesced, scatter/gather move the batch): broadcast returns the source tensor itself for its own
device, scatter splits by chunk_sizes and leaves the source device's chunk a view of the input, gather
concatenates on a device or on the CPU (-1), reduce_add sums onto the destination; every value equals a CPU
computation.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch/csrc/cuda/comm.cpp broadcast (dst_tensors.emplace_back(tensor) for the source device), scatter (chunks on the source device are not copied; others .to(device, non_blocking=true)), gather (_gather_out_impl: chunks[i].copy_(tensors[i], non_blocking=out.is_cuda())), broadcast_coalesced (outputs[0] = the inputs); torch/nn/parallel/comm.py reduce_add.
"""
import torch
import torch.cuda.comm as comm


def main():
    torch.cuda.set_device(0)
    assert torch.cuda.device_count() >= 2
    x_cpu = torch.arange(24, dtype=torch.float32).view(6, 4)
    x = x_cpu.cuda(0)
    b = comm.broadcast(x, devices=[0, 1])
    assert b[0].data_ptr() == x.data_ptr() and b[1].device == torch.device("cuda", 1)
    assert torch.equal(b[1].cpu(), x_cpu)

    parts = comm.scatter(x, devices=[0, 1], chunk_sizes=[2, 4], dim=0)
    assert [p.device.index for p in parts] == [0, 1] and parts[0].data_ptr() == x.data_ptr()
    assert torch.equal(parts[0].cpu(), x_cpu[:2]) and torch.equal(parts[1].cpu(), x_cpu[2:])

    g = comm.gather([parts[1], parts[0]], dim=0, destination=1)
    assert g.device == torch.device("cuda", 1)
    assert torch.equal(g.cpu(), torch.cat([x_cpu[2:], x_cpu[:2]]))
    g_host = comm.gather([parts[0], parts[1]], dim=0, destination=-1)
    assert g_host.device.type == "cpu" and torch.equal(g_host, x_cpu)

    w = torch.randn(5, 3, device="cuda:0")
    bias = torch.full((3,), 0.5, device="cuda:0")
    reps = comm.broadcast_coalesced([w, bias], devices=[0, 1])
    assert reps[0][0] is w or reps[0][0].data_ptr() == w.data_ptr()
    assert reps[1][0].device.index == 1 and torch.equal(reps[1][0].cpu(), w.cpu())
    assert torch.equal(reps[1][1].cpu(), torch.full((3,), 0.5))

    s = comm.reduce_add([torch.ones(4, device="cuda:0"), torch.full((4,), 2.0, device="cuda:1")], destination=1)
    assert s.device.index == 1 and s.tolist() == [3.0] * 4


if __name__ == "__main__":
    main()
