"""Timing events around a matmul loop (the benchmarking recipe of torch.utils.benchmark / Megatron's timers):
elapsed_time after end.synchronize() is positive and additive over a middle event; elapsed_time refuses events
made without enable_timing and events never recorded; a never-recorded event's query() is True and waiting on it
is a no-op.

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/cuda/streams.py Event.elapsed_time -> at::cuda::CUDAEvent::elapsed_time (aten/src/ATen/cuda/CUDAEvent.h: TORCH_CHECK "Both events must be created with argument 'enable_timing=True'", "Both events must be recorded before calculating elapsed time"); CUDAEvent::query returns true when the event was never created; CUDAEvent::block is a no-op then.
"""
import torch


def main():
    torch.cuda.set_device(0)
    a = torch.randn(64, 64)
    start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    x = a.cuda()
    start.record()
    for _ in range(4):
        x = x @ x.T / 64
    mid.record()
    for _ in range(4):
        x = x @ x.T / 64
    end.record()
    end.synchronize()
    t_all, t1, t2 = start.elapsed_time(end), start.elapsed_time(mid), mid.elapsed_time(end)
    assert t_all > 0 and t1 > 0 and t2 > 0, (t_all, t1, t2)
    assert abs(t_all - (t1 + t2)) <= 1e-3 * t_all + 1e-3, (t_all, t1, t2)
    ref = a
    for _ in range(8):
        ref = ref @ ref.T / 64
    assert torch.allclose(x.cpu(), ref, rtol=1e-4, atol=1e-5)

    plain = torch.cuda.Event()
    plain.record()
    plain.synchronize()
    try:
        start.elapsed_time(plain)
        raise AssertionError("elapsed_time accepted an event without timing")
    except ValueError:  # TORCH_CHECK_VALUE: a ValueError, not a RuntimeError (the H200 run of 2026-12-02)
        pass
    never = torch.cuda.Event(enable_timing=True)
    assert never.query()
    torch.cuda.current_stream().wait_event(never)    # no-op
    try:
        start.elapsed_time(never)
        raise AssertionError("elapsed_time accepted a never-recorded event")
    except ValueError:  # TORCH_CHECK_VALUE: a ValueError, not a RuntimeError (the H200 run of 2026-12-02)
        pass


if __name__ == "__main__":
    main()
