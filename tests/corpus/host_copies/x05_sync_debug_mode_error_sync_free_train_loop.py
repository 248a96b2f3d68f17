"""A training loop checked for host syncs with torch.cuda.set_sync_debug_mode("error"), as a throughput audit does:
batches come from pinned memory with non_blocking copies, AdamW (foreach) and clip_grad_norm_ run without reading a
value back, and the loss is logged through a non_blocking copy into a pinned buffer read after an event's
synchronize, none of which c10 counts as a synchronizing call. A stray loss.item() in the same mode raises
RuntimeError("called a synchronizing CUDA operation"); in "warn" mode it warns and the loop goes on. The parameters
match the same loop on the CPU.

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: the sync audit https://pytorch.org/docs/stable/generated/torch.cuda.set_sync_debug_mode.html describes
("warn" or "error" out on synchronizing operations); the pinned / non_blocking input path of
https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html; torchtitan-style loss logging through a pinned
buffer and an event instead of .item().
REASON: c10/cuda/CUDAFunctions.h: memcpy_and_sync (blocking copies, .item()) and stream_synchronize call
warn_or_error_on_sync(); cudaEventSynchronize (torch.cuda.Event.synchronize) and the non_blocking copies of ATen's
Copy.cu do not (measured call by call on an H200, torch 2.11).
"""
import copy
import warnings

import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    model = copy.deepcopy(ref).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    batches = [(torch.randn(8, 16).pin_memory(), torch.randint(0, 4, (8,)).pin_memory()) for _ in range(4)]
    log = torch.empty(len(batches)).pin_memory()
    done = torch.cuda.Event()

    torch.cuda.set_sync_debug_mode("error")
    for i, (x, y) in enumerate(batches):
        xd, yd = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
        loss = nn.functional.cross_entropy(model(xd), yd)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        log[i:i + 1].copy_(loss.detach().view(1), non_blocking=True)
    done.record()
    done.synchronize()  # cudaEventSynchronize: not a "synchronizing operation" for the debug mode
    try:
        loss.item()
        stray = None
    except RuntimeError as e:
        stray = str(e)
    torch.cuda.set_sync_debug_mode("warn")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        last = loss.item()
    torch.cuda.set_sync_debug_mode("default")
    assert stray is not None and "called a synchronizing CUDA operation" in stray, stray
    assert any("called a synchronizing CUDA operation" in str(m.message) for m in w), [str(m.message) for m in w]

    losses = []
    for x, y in batches:
        loss_ref = nn.functional.cross_entropy(ref(x), y)
        opt_ref.zero_grad(set_to_none=True)
        loss_ref.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt_ref.step()
        losses.append(loss_ref.item())
    assert torch.allclose(log, torch.tensor(losses), rtol=1e-5, atol=1e-6), (log, losses)
    assert abs(last - losses[-1]) < 1e-5, (last, losses[-1])
    for p, q in zip(ref.parameters(), model.parameters()):
        assert torch.allclose(p, q.detach().cpu(), rtol=1e-4, atol=1e-6), (p - q.detach().cpu()).abs().max()
    print("no synchronizing call in the loop; losses", [round(v, 4) for v in log.tolist()])


if __name__ == "__main__":
    main()
