"""A "non-blocking" checkpoint that copies the model's state dict to the host in a background thread
(concurrent.futures.ThreadPoolExecutor, `{k: v.cpu() for k, v in state_dict.items()}`) while training goes on in
the main thread, as hand-written async checkpointers do. On a GPU the worker's `.cpu()` synchronizes with the
worker thread's own current stream (the default stream: current streams are thread-local). simdist runs device
work only in a rank's own thread, so the copy must be refused by name. Before notes x6 it silently returned the
device bytes as they were at that instant: the two steps' weight checksums printed -4.8548 and -4.8548, where the
H200 prints -4.7867 and -4.8065 (2026-12-02, this program as written).

EXPECTED: error
ERROR: UnsupportedOperation
WORLD_SIZE: 1
MODELLED ON: the background-thread state-dict copy of hand-written async checkpointers (torch.distributed.checkpoint's
async_save stages on the caller's thread and hands host tensors to its executor thread instead:
torch/distributed/checkpoint/state_dict_saver.py async_save).
REASON: c10/cuda/CUDAStream.h "Stream pool note" ("the notion of current stream for device is thread local");
ATen Copy.cu memcpy_and_sync (a blocking D2H copy synchronizes the calling thread's current stream).
"""
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    model = nn.Linear(64, 64).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with ThreadPoolExecutor(max_workers=1) as pool:
        for step in range(2):
            loss = model(torch.randn(8, 64, device="cuda")).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            state = {k: v.detach() for k, v in model.state_dict().items()}
            saved = pool.submit(lambda s=state: {k: v.cpu() for k, v in s.items()})
            host = saved.result()            # the worker's .cpu(): refused
            print(step, host["weight"].sum().item())


if __name__ == "__main__":
    main()
