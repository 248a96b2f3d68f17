"""Per-device stream bookkeeping, as DDP/FSDP-style code keeps it (dicts keyed by stream, one default stream per
device): torch.cuda.default_stream(d) and current_stream(d) name device d's stream whatever the current device
is, the two devices' default streams differ, and a side stream of cuda:1 waiting on cuda:1's default stream
(looked up from cuda:0) orders its work after the producer there.

EXPECTED: clean
WORLD_SIZE: 1
DEVICE_COUNT: 2
REASON: torch/cuda/__init__.py default_stream(device) / current_stream(device) (the stream of that device, torch._C._cuda_getDefaultStream(index)); torch.Stream __eq__/__hash__ over (stream_id, device_index, device_type); https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams.
"""
import torch


def main():
    torch.cuda.set_device(0)
    d0, d1 = torch.cuda.default_stream(0), torch.cuda.default_stream(torch.device("cuda:1"))
    assert d0 != d1 and d0.device_index == 0 and d1.device_index == 1
    assert torch.cuda.current_stream(1) == d1 and torch.cuda.current_device() == 0
    with torch.cuda.device(1):
        side1 = torch.cuda.Stream()
        x = torch.arange(4096, dtype=torch.float32, device="cuda")
    streams = {d0: "main0", d1: "main1", side1: "side1"}
    assert len(streams) == 3 and streams[torch.cuda.default_stream(1)] == "main1"
    side1.wait_stream(torch.cuda.default_stream(1))      # from cuda:0: still cuda:1's default stream
    with torch.cuda.stream(side1):
        y = x * 3
    torch.cuda.default_stream(1).wait_stream(side1)
    y.record_stream(torch.cuda.default_stream(1))
    assert y.sum().item() == 3 * 4095 * 4096 / 2


if __name__ == "__main__":
    main()
