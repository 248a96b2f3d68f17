"""A corpus of small stream / NCCL scenarios with known verdicts, shared by simdist and real GPUs.

Every scenario is a plain function ``fn(delay_cycles: int = 0) -> dict[str, Tensor]`` written as ordinary torchrun
code: it assumes ``torch.cuda.set_device(local_rank)`` and ``init_process_group("nccl")`` were done by the launcher
(``simdist.run`` or ``ci/gpu_confirm.py`` under torchrun), gets its rank from ``torch.distributed.get_rank()`` and
uses ``device="cuda"``. The same code therefore runs in the simulator on the CPU and on GPUs with NCCL.

Metadata (``SCENARIOS[name]``):
- ``expected``: "clean" or "hazard", from PyTorch's documented semantics (CUDA stream rules, the caching
  allocator's ``record_stream`` contract, ``Work.wait()`` for ``async_op=True``), the same for torch <= 2.7 and >= 2.8;
- ``producer``: which stream / tensor produces the data in the (possibly) racy pair;
- ``delayed``: where ``torch.cuda._sleep(delay_cycles)`` goes (only when ``delay_cycles > 0``): on the producer's
  stream right before the racy producer op, so that a GPU is pushed into the bad interleaving;
- ``reference``: the clean scenario with the same inputs whose outputs the hazard scenario must reproduce when no
  damage happens (for a clean scenario: itself). A hazard trial is "damaged" when its outputs differ from the
  reference's outputs.

Inputs are deterministic (a CPU ``torch.Generator`` seeded by rank and salt, or ``torch.arange`` arithmetic) and all
arithmetic is exact (FP8 codes times powers of two, casts to bf16 / float8_e4m3fn of representable values,
integer-valued float32 sums, copies, views, cat, gathers), so clean outputs are bit-identical on the CPU simulator and
on GPUs. ``set_salt(k)`` changes every input (the GPU runner uses a fresh salt per hazard trial so that stale memory
left by the previous trial can never look like the right answer); the simulator's digests are for salt 0.

``export_corpus(path)`` runs every scenario in simdist (imported lazily: this module itself needs only torch) and
writes the JSON that ``ci/gpu_confirm.py`` confirms on GPUs. ``check_corpus`` checks a corpus without simdist.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import inspect
import json
import os
import platform
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist

FORMAT = 1
M, K = 256, 384  # one blockwise-FP8 weight shard: 2 x 3 tiles of 128 x 128
TILE = 128
N = 8192  # elements of the arithmetic scenarios (32 KiB of float32: the allocator's small pool)
N_BIG = 8 << 20  # 32 MiB of float32: an async gather that takes longer than the kernel overwriting its input
GPU_DELAY_CYCLES = 2_000_000  # ~1 ms of torch.cuda._sleep on an H200 (1.98 GHz SM clock)
PROFILES = ("2.8", "2.7")  # simdist NCCL stream-semantics profiles; "2.8" is torch >= 2.8 (the GPUs run 2.11)

_SALT = 0


def set_salt(salt: int) -> None:
    """Change every scenario input (0 = the simulator's corpus)."""
    global _SALT
    _SALT = int(salt)


def get_salt() -> int:
    return _SALT


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Scenario:
    name: str
    fn: Callable
    expected: str
    producer: str
    delayed: str
    reference: str
    covers: str
    kinds: tuple = ()
    doc: str = field(default="", compare=False)
    min_world_size: int = 1  # point-to-point needs a peer: at a smaller world size the program cannot run at all

    def to_json(self) -> dict:
        return {"expected": self.expected, "producer": self.producer, "delayed": self.delayed,
                "reference": self.reference, "covers": self.covers, "expected_kinds": list(self.kinds),
                "doc": self.doc}


SCENARIOS: dict[str, Scenario] = {}

# Scenarios where simdist's verdict is known to differ from PyTorch's documented semantics (name -> note).
# Filled only with a repro in notes_engine_bugs.md; the GPU report marks them.
KNOWN_SIM_DISAGREEMENTS: dict[str, str] = {}


def scenario(expected: str, producer: str, delayed: str, reference: str | None = None, covers: str = "",
             kinds: tuple = (), min_world_size: int = 1):
    if expected not in ("clean", "hazard"):
        raise ValueError(expected)

    def deco(fn):
        name = fn.__name__
        ref = reference if reference is not None else name
        if expected == "hazard" and ref == name:
            raise ValueError(f"hazard scenario {name} needs a clean reference")
        SCENARIOS[name] = Scenario(name=name, fn=fn, expected=expected, producer=producer, delayed=delayed,
                                   reference=ref, covers=covers, kinds=tuple(kinds),
                                   doc=inspect.cleandoc(fn.__doc__ or ""), min_world_size=min_world_size)
        return fn
    return deco


# --------------------------------------------------------------------------- helpers


def _rank() -> int:
    return dist.get_rank()


def _ws() -> int:
    return dist.get_world_size()


def _delay(delay_cycles: int) -> None:
    """Sleep on the current stream (the caller makes the producer's stream current)."""
    if delay_cycles and delay_cycles > 0:
        torch.cuda._sleep(int(delay_cycles))


def _fp8_shard(m: int = M, k: int = K):
    """A blockwise FP8 weight shard of this rank: e4m3 codes (no NaN codes) and fp32 power-of-two scale_inv per tile."""
    g = torch.Generator().manual_seed(100_003 * _SALT + 7 * _rank() + 1)
    codes = torch.randint(0, 256, (m, k), generator=g, dtype=torch.uint8)
    codes = torch.where((codes & 0x7F) == 0x7F, torch.zeros_like(codes), codes)  # 0x7F / 0xFF are NaN in e4m3fn
    exps = torch.randint(-4, 5, (m // TILE, k // TILE), generator=g)
    sinv = torch.tensor([[2.0 ** int(e) for e in row] for row in exps.tolist()], dtype=torch.float32)
    return codes.view(torch.float8_e4m3fn).cuda(), sinv.cuda()


def _dequant(data: torch.Tensor, sinv: torch.Tensor) -> torch.Tensor:
    """Blockwise 128x128 dequantize as TransformerEngine's Float8BlockwiseQTensor.dequantize does (pure torch ops
    on the current stream): tiles -> fp32 -> times the tile's scale_inv -> bf16. Exact for these inputs."""
    m, k = data.shape
    t = data.view(m // TILE, TILE, k // TILE, TILE).to(torch.float32)
    t = t * sinv.view(m // TILE, 1, k // TILE, 1)
    return t.view(m, k).to(torch.bfloat16)


def _ivec(n: int = N, base: int = 0) -> torch.Tensor:
    """Integer-valued float32 on the current stream, different per rank and salt (exact under +, -, *, sums)."""
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    x.add_(float(1000 * _rank() + 37 * _SALT + base))
    return x


def _gather_shape(t: torch.Tensor):
    return (_ws() * t.shape[0],) + tuple(t.shape[1:])


# =========================================================================== FACTS.md ground-truth table


@scenario("hazard", producer="side stream: blockwise FP8 dequantize writes w", delayed="side stream, before dequantize",
          reference="fp8_ag_side_wait_stream", covers="FACTS table row 1", kinds=("read-after-write",))
def fp8_ag_side_nosync(delay_cycles: int = 0):
    """Dequantize on a side stream, then all_gather_into_tensor on the current stream with no sync: the collective
    can read w before the side stream wrote it."""
    data, sinv = _fp8_shard()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)  # the H2D copies of the inputs ran on the current stream
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        w = _dequant(data, sinv)
    out = torch.empty(_gather_shape(w), dtype=w.dtype, device="cuda")
    dist.all_gather_into_tensor(out, w)
    return {"out": out}


@scenario("clean", producer="side stream: blockwise FP8 dequantize writes w", delayed="side stream, before dequantize",
          covers="FACTS table row 2")
def fp8_ag_side_wait_stream(delay_cycles: int = 0):
    """The fix: current_stream().wait_stream(side) and w.record_stream(current)."""
    data, sinv = _fp8_shard()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        w = _dequant(data, sinv)
    cur.wait_stream(side)
    w.record_stream(cur)
    out = torch.empty(_gather_shape(w), dtype=w.dtype, device="cuda")
    dist.all_gather_into_tensor(out, w)
    return {"out": out}


@scenario("clean", producer="side stream: blockwise FP8 dequantize writes w", delayed="side stream, before dequantize",
          reference="fp8_ag_side_wait_stream", covers="FACTS table row 3")
def fp8_ag_side_synchronize(delay_cycles: int = 0):
    """The heavy fix: torch.cuda.synchronize() after the side-stream dequantize."""
    data, sinv = _fp8_shard()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        w = _dequant(data, sinv)
    torch.cuda.synchronize()
    out = torch.empty(_gather_shape(w), dtype=w.dtype, device="cuda")
    dist.all_gather_into_tensor(out, w)
    return {"out": out}


@scenario("clean", producer="current stream: blockwise FP8 dequantize writes w",
          delayed="current stream, before dequantize",
          reference="fp8_ag_side_wait_stream", covers="FACTS table row 4")
def fp8_ag_current_stream(delay_cycles: int = 0):
    """Dequantize on the current stream (what TE itself does): stream order covers the collective."""
    data, sinv = _fp8_shard()
    _delay(delay_cycles)
    w = _dequant(data, sinv)
    out = torch.empty(_gather_shape(w), dtype=w.dtype, device="cuda")
    dist.all_gather_into_tensor(out, w)
    return {"out": out}


@scenario("hazard", producer="NCCL internal stream: all_gather_into_tensor(async_op=True) writes out",
          delayed="rank 1's current stream before the collective (rank 0's NCCL kernel then waits for rank 1)",
          reference="ag_async_wait_then_read", covers="FACTS table row 5", kinds=("read-after-write",))
def ag_async_read_before_wait(delay_cycles: int = 0):
    """all_gather_into_tensor(async_op=True) and its output read (clone) on the current stream before work.wait()."""
    data, sinv = _fp8_shard()
    w = _dequant(data, sinv)
    out = torch.empty(_gather_shape(w), dtype=w.dtype, device="cuda")
    if _rank() == 1:
        _delay(delay_cycles)
    work = dist.all_gather_into_tensor(out, w, async_op=True)
    early = out.clone()
    work.wait()
    return {"early": early}


@scenario("clean", producer="NCCL internal stream: all_gather_into_tensor(async_op=True) writes out",
          delayed="rank 1's current stream before the collective", covers="FACTS table row 6")
def ag_async_wait_then_read(delay_cycles: int = 0):
    """Same with work.wait() before the read."""
    data, sinv = _fp8_shard()
    w = _dequant(data, sinv)
    out = torch.empty(_gather_shape(w), dtype=w.dtype, device="cuda")
    if _rank() == 1:
        _delay(delay_cycles)
    work = dist.all_gather_into_tensor(out, w, async_op=True)
    work.wait()
    early = out.clone()
    return {"early": early}


# =========================================================================== async collective input


def _ag_async_input_body(delay_cycles: int, mode: str):
    x = _ivec(N_BIG)
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    out = torch.empty(_gather_shape(x), dtype=x.dtype, device="cuda")
    if mode == "side":
        _delay(delay_cycles)  # the NCCL stream waits for the current stream: the gather reads x late
    elif _rank() == 1:
        _delay(delay_cycles)  # rank 1 joins late; rank 0's gather stalls on it (and reads 32 MiB slower than a fill)
    work = dist.all_gather_into_tensor(out, x, async_op=True)
    if mode == "side":
        with torch.cuda.stream(side):
            x.fill_(-1.0)
    elif mode == "current":
        x.fill_(-1.0)
    work.wait()
    if mode == "fixed":
        x.fill_(-1.0)
    cur.wait_stream(side)
    return {"out": out, "x": x}


@scenario("hazard", producer="NCCL internal stream: async all_gather reads x; current stream overwrites x",
          delayed="rank 1's current stream before the collective (rank 0's gather waits for rank 1)",
          reference="ag_async_input_overwrite_after_wait", covers="async collective input overwritten before wait",
          kinds=("write-after-read",))
def ag_async_input_overwritten(delay_cycles: int = 0):
    """The 32 MiB input of an async all_gather is overwritten on the current stream before work.wait()."""
    return _ag_async_input_body(delay_cycles, "current")


@scenario("hazard", producer="NCCL internal stream: async all_gather reads x; a side stream overwrites x",
          delayed="current stream before the collective (the NCCL stream waits for it; the side stream does not)",
          reference="ag_async_input_overwrite_after_wait",
          covers="async collective input overwritten on another stream before wait", kinds=("write-after-read",))
def ag_async_input_overwritten_side(delay_cycles: int = 0):
    """Same, the overwrite on a side stream that never waited for the collective."""
    return _ag_async_input_body(delay_cycles, "side")


@scenario("clean", producer="NCCL internal stream: async all_gather reads x; current stream overwrites x",
          delayed="rank 1's current stream before the collective", covers="async collective input, wait first")
def ag_async_input_overwrite_after_wait(delay_cycles: int = 0):
    """work.wait() before the overwrite."""
    return _ag_async_input_body(delay_cycles, "fixed")


# =========================================================================== events


@scenario("hazard", producer="side stream: y = 3x + 1", delayed="side stream, before the producer",
          reference="event_recorded_after_producer", covers="event recorded before the producer",
          kinds=("read-after-write",))
def event_recorded_before_producer(delay_cycles: int = 0):
    """The event is recorded on the side stream before the producer kernel, so waiting on it orders nothing."""
    x = _ivec()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    ev = torch.cuda.Event()
    with torch.cuda.stream(side):
        ev.record()
        _delay(delay_cycles)
        y = x * 3 + 1
    cur.wait_event(ev)
    y.record_stream(cur)
    z = y - x
    return {"z": z}


@scenario("clean", producer="side stream: y = 3x + 1", delayed="side stream, before the producer",
          covers="event recorded after the producer")
def event_recorded_after_producer(delay_cycles: int = 0):
    """The event is recorded after the producer: current.wait_event(ev) orders the consumer after it."""
    x = _ivec()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    ev = torch.cuda.Event()
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        y = x * 3 + 1
        ev.record()
    cur.wait_event(ev)
    y.record_stream(cur)
    z = y - x
    return {"z": z}


@scenario("hazard", producer="stream s1: a = 2x (s2: b = x + 5)", delayed="stream s1, before a = 2x",
          reference="wait_event_both", covers="wait_event on one of two producers", kinds=("read-after-write",))
def wait_event_missing_one(delay_cycles: int = 0):
    """Two producers on two streams, each records an event; the consumer waits only for the second."""
    x = _ivec()
    cur = torch.cuda.current_stream()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    s1.wait_stream(cur)
    s2.wait_stream(cur)
    e1, e2 = torch.cuda.Event(), torch.cuda.Event()
    with torch.cuda.stream(s1):
        _delay(delay_cycles)
        a = x * 2
        e1.record()
    with torch.cuda.stream(s2):
        b = x + 5
        e2.record()
    cur.wait_event(e2)
    a.record_stream(cur)
    b.record_stream(cur)
    out = torch.cat([a, b])
    return {"out": out}


@scenario("clean", producer="stream s1: a = 2x (s2: b = x + 5)", delayed="stream s1, before a = 2x",
          covers="wait_event on both producers")
def wait_event_both(delay_cycles: int = 0):
    """The consumer waits for both events."""
    x = _ivec()
    cur = torch.cuda.current_stream()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    s1.wait_stream(cur)
    s2.wait_stream(cur)
    e1, e2 = torch.cuda.Event(), torch.cuda.Event()
    with torch.cuda.stream(s1):
        _delay(delay_cycles)
        a = x * 2
        e1.record()
    with torch.cuda.stream(s2):
        b = x + 5
        e2.record()
    cur.wait_event(e2)
    cur.wait_event(e1)
    a.record_stream(cur)
    b.record_stream(cur)
    out = torch.cat([a, b])
    return {"out": out}


# =========================================================================== caching allocator


@scenario("hazard", producer="current stream: z = full(7) in the block freed from x (side stream still reads x)",
          delayed="side stream, before it reads x",
          reference="freed_block_reuse_record_stream", covers="reuse of a freed block across streams, no record_stream",
          kinds=("reuse-after-free",))
def freed_block_reuse_no_record_stream(delay_cycles: int = 0):
    """x (allocated on the current stream) is read on a side stream and dropped without record_stream: the caching
    allocator hands its block to the next allocation on the current stream at once, whose write can land before
    the side stream has read x."""
    x = _ivec()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        y = x * 2
    del x
    z = torch.full((N,), 7.0, dtype=torch.float32, device="cuda")
    cur.wait_stream(side)
    return {"y": y, "z": z}


@scenario("clean", producer="current stream: z = full(7) (x's block is not reused: record_stream)",
          delayed="side stream, before it reads x", covers="reuse of a freed block across streams, with record_stream")
def freed_block_reuse_record_stream(delay_cycles: int = 0):
    """Same with x.record_stream(side) before dropping x: the block is not reused until the side stream is past."""
    x = _ivec()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        y = x * 2
    x.record_stream(side)
    del x
    z = torch.full((N,), 7.0, dtype=torch.float32, device="cuda")
    cur.wait_stream(side)
    return {"y": y, "z": z}


# =========================================================================== host reads


@scenario("hazard", producer="side stream: y = 3x + 1", delayed="side stream, before the producer",
          reference="host_cpu_read_synced", covers="host read (.cpu()) of a side-stream result without sync",
          kinds=("host-read",))
def host_cpu_read_nosync(delay_cycles: int = 0):
    """y.cpu() copies on the current stream and syncs only it; the side stream may not have written y."""
    x = _ivec()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        y = x * 3 + 1
    host = y.cpu()
    return {"host": host}


@scenario("clean", producer="side stream: y = 3x + 1", delayed="side stream, before the producer",
          covers="host read (.cpu()) after side.synchronize()")
def host_cpu_read_synced(delay_cycles: int = 0):
    """side.synchronize() before y.cpu()."""
    x = _ivec()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        y = x * 3 + 1
    side.synchronize()
    host = y.cpu()
    return {"host": host}


@scenario("hazard", producer="side stream: y = 3x + 1", delayed="side stream, before the producer",
          reference="host_item_synced", covers="host read (.item()) of a side-stream result without sync",
          kinds=("host-read",))
def host_item_nosync(delay_cycles: int = 0):
    """y[i].item() reads through the current stream, which never waited for the side stream."""
    x = _ivec()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        y = x * 3 + 1
    v = y[N - 3].item()
    return {"item": torch.tensor([v], dtype=torch.float64)}


@scenario("clean", producer="side stream: y = 3x + 1", delayed="side stream, before the producer",
          covers="host read (.item()) after current.wait_stream(side)")
def host_item_synced(delay_cycles: int = 0):
    """current.wait_stream(side) before .item()."""
    x = _ivec()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        y = x * 3 + 1
    cur.wait_stream(side)
    v = y[N - 3].item()
    return {"item": torch.tensor([v], dtype=torch.float64)}


# =========================================================================== broadcast, P2P, reduce_scatter, lists


@scenario("hazard", producer="rank 0's side stream: dequantize writes w",
          delayed="rank 0's side stream, before dequantize",
          reference="broadcast_side_wait_stream", covers="broadcast from rank 0 of a side-stream-produced tensor",
          kinds=("read-after-write",))
def broadcast_side_nosync(delay_cycles: int = 0):
    """Rank 0 dequantizes on a side stream and broadcasts w with no sync (FACTS: Megatron-Bridge's PP broadcast)."""
    data, sinv = _fp8_shard()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    if _rank() == 0:
        with torch.cuda.stream(side):
            _delay(delay_cycles)
            w = _dequant(data, sinv)
    else:
        w = torch.empty((M, K), dtype=torch.bfloat16, device="cuda")
    dist.broadcast(w, src=0)
    return {"w": w}


@scenario("clean", producer="rank 0's side stream: dequantize writes w",
          delayed="rank 0's side stream, before dequantize",
          covers="broadcast of a side-stream-produced tensor after wait_stream")
def broadcast_side_wait_stream(delay_cycles: int = 0):
    """Rank 0 makes the current stream wait for the side stream (and record_stream) before the broadcast."""
    data, sinv = _fp8_shard()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    if _rank() == 0:
        with torch.cuda.stream(side):
            _delay(delay_cycles)
            w = _dequant(data, sinv)
        cur.wait_stream(side)
        w.record_stream(cur)
    else:
        w = torch.empty((M, K), dtype=torch.bfloat16, device="cuda")
    dist.broadcast(w, src=0)
    return {"w": w}


def _p2p_body(delay_cycles: int, fixed: bool):
    rank = _rank()
    data, sinv = _fp8_shard()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    if rank == 0:
        with torch.cuda.stream(side):
            _delay(delay_cycles)
            w = _dequant(data, sinv)
        if fixed:
            cur.wait_stream(side)
            w.record_stream(cur)
        dist.send(w, dst=1)
        return {"w": w}
    if rank == 1:
        buf = torch.empty((M, K), dtype=torch.bfloat16, device="cuda")
        dist.recv(buf, src=0)
        return {"w": buf}
    return {"w": _dequant(data, sinv)}


@scenario("hazard", producer="rank 0's side stream: dequantize writes w",
          delayed="rank 0's side stream, before dequantize",
          reference="p2p_send_side_wait_stream", covers="P2P send of side-stream data", kinds=("read-after-write",),
          min_world_size=2)
def p2p_send_side_nosync(delay_cycles: int = 0):
    """Rank 0 sends a side-stream-produced tensor to rank 1 with no sync."""
    return _p2p_body(delay_cycles, fixed=False)


@scenario("clean", producer="rank 0's side stream: dequantize writes w",
          delayed="rank 0's side stream, before dequantize",
          covers="P2P send of side-stream data after wait_stream", min_world_size=2)
def p2p_send_side_wait_stream(delay_cycles: int = 0):
    """Same with current.wait_stream(side) + record_stream before the send."""
    return _p2p_body(delay_cycles, fixed=True)


def _rs_body(delay_cycles: int, fixed: bool):
    x = _ivec(N * _ws())
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    ev = torch.cuda.Event()
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        y = x * 2 - 3
        ev.record()
    if fixed:
        cur.wait_event(ev)
        y.record_stream(cur)
    out = torch.empty((N,), dtype=torch.float32, device="cuda")
    dist.reduce_scatter_tensor(out, y)
    return {"out": out}


@scenario("hazard", producer="side stream: y = 2x - 3", delayed="side stream, before the producer",
          reference="reduce_scatter_side_wait_event", covers="reduce_scatter_tensor of side-stream data",
          kinds=("read-after-write",))
def reduce_scatter_side_nosync(delay_cycles: int = 0):
    """reduce_scatter_tensor (sum of integer-valued floats) of a side-stream result with no sync."""
    return _rs_body(delay_cycles, fixed=False)


@scenario("clean", producer="side stream: y = 2x - 3", delayed="side stream, before the producer",
          covers="reduce_scatter_tensor after wait_event")
def reduce_scatter_side_wait_event(delay_cycles: int = 0):
    """Same with current.wait_event(ev recorded after the producer) + record_stream."""
    return _rs_body(delay_cycles, fixed=True)


def _ag_list_body(delay_cycles: int, fixed: bool):
    data, sinv = _fp8_shard()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        w = _dequant(data, sinv)
    if fixed:
        cur.wait_stream(side)
        w.record_stream(cur)
    outs = [torch.empty_like(w) for _ in range(_ws())]
    dist.all_gather(outs, w)
    return {"cat": torch.cat(outs, dim=0)}


@scenario("hazard", producer="side stream: blockwise FP8 dequantize writes w", delayed="side stream, before dequantize",
          reference="ag_list_side_wait_stream", covers="list-form all_gather (Megatron-Bridge TP gather), no sync",
          kinds=("read-after-write",))
def ag_list_side_nosync(delay_cycles: int = 0):
    """all_gather([empty_like(w)] * n, w) of a side-stream dequantize, as Megatron-Bridge gathers TP shards."""
    return _ag_list_body(delay_cycles, fixed=False)


@scenario("clean", producer="side stream: blockwise FP8 dequantize writes w", delayed="side stream, before dequantize",
          covers="list-form all_gather after wait_stream")
def ag_list_side_wait_stream(delay_cycles: int = 0):
    """Same with wait_stream + record_stream."""
    return _ag_list_body(delay_cycles, fixed=True)


def _coll_out_body(delay_cycles: int, fixed: bool):
    x = _ivec()
    cur = torch.cuda.current_stream()
    out = torch.empty(_gather_shape(x), dtype=x.dtype, device="cuda")
    side = torch.cuda.Stream()
    _delay(delay_cycles)
    dist.all_gather_into_tensor(out, x)
    if fixed:
        side.wait_stream(cur)
    with torch.cuda.stream(side):
        y = out * 2 + 1
    cur.wait_stream(side)
    return {"y": y}


@scenario("hazard", producer="current stream: all_gather_into_tensor writes out (2.7: NCCL stream, current waits)",
          delayed="current stream, before the collective", reference="coll_output_side_read_wait",
          covers="collective output consumed on another stream without waiting", kinds=("read-after-write",))
def coll_output_side_read_nosync(delay_cycles: int = 0):
    """A synchronous all_gather's output is consumed on a side stream that never waited for the current stream."""
    return _coll_out_body(delay_cycles, fixed=False)


@scenario("clean", producer="current stream: all_gather_into_tensor writes out",
          delayed="current stream, before the collective",
          covers="collective output consumed on another stream after wait_stream")
def coll_output_side_read_wait(delay_cycles: int = 0):
    """Same with side.wait_stream(current) after the collective."""
    return _coll_out_body(delay_cycles, fixed=True)


# =========================================================================== clean multi-stream pipelines


@scenario("clean", producer="side stream: per-tile-row dequantize, one event per chunk",
          delayed="side stream, before each chunk's dequantize", covers="pipelined dequantize + gather, events")
def pipeline_chunked_dequant_gather(delay_cycles: int = 0):
    """Dequantize chunk i on a side stream while chunk i-1 is gathered on the current stream; one event per chunk."""
    data, sinv = _fp8_shard()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    chunks = []
    for i in range(M // TILE):
        with torch.cuda.stream(side):
            _delay(delay_cycles)
            wi = _dequant(data[i * TILE:(i + 1) * TILE], sinv[i:i + 1])
            ev = torch.cuda.Event()
            ev.record()
        cur.wait_event(ev)
        wi.record_stream(cur)
        gi = torch.empty(_gather_shape(wi), dtype=wi.dtype, device="cuda")
        dist.all_gather_into_tensor(gi, wi)
        chunks.append(gi)
    return {"out": torch.cat(chunks, dim=0)}


@scenario("clean", producer="side stream: bf16 -> float8_e4m3fn cast writes q", delayed="side stream, before the cast",
          covers="bf16 -> fp8 cast on a side stream, gather of uint8 codes, fp8 -> bf16 on the current stream")
def pipeline_fp8_quantize_gather(delay_cycles: int = 0):
    """Quantize (exactly representable values in [-8, 8]) on a side stream, gather the raw codes, dequantize."""
    n = M * K
    xi = torch.arange(n, dtype=torch.int64, device="cuda")
    xi.add_(3 * _rank() + _SALT).remainder_(17).sub_(8)
    x = xi.to(torch.bfloat16).view(M, K)
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    ev = torch.cuda.Event()
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        q = x.to(torch.float8_e4m3fn)
        ev.record()
    cur.wait_event(ev)
    q.record_stream(cur)
    codes = torch.empty((_ws() * n,), dtype=torch.uint8, device="cuda")
    dist.all_gather_into_tensor(codes, q.view(torch.uint8).view(-1))
    deq = codes.view(torch.float8_e4m3fn).to(torch.bfloat16).view(_ws() * M, K)
    return {"deq": deq, "codes": codes}


@scenario("clean", producer="side stream: y = 2 * allreduce(x) - 1", delayed="side stream, before the producer",
          covers="all_reduce (integer-valued floats), side-stream consumer, broadcast")
def pipeline_allreduce_side_broadcast(delay_cycles: int = 0):
    """all_reduce on the current stream, consumer on a side stream after wait_stream, broadcast of its result."""
    x = _ivec()
    dist.all_reduce(x)
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        y = x * 2 - 1
    cur.wait_stream(side)
    y.record_stream(cur)
    dist.broadcast(y, src=_ws() - 1)
    return {"sum": x, "y": y}


def _p2p_exchange_consumer(x, buf, delay_cycles):
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        y = buf * 5 + x
    cur.wait_stream(side)
    y.record_stream(cur)
    return {"recv": buf, "y": y}


@scenario("clean", producer="NCCL P2P: recv writes buf; side stream: y = 5 buf + x",
          delayed="side stream, before the consumer", covers="blocking send/recv ring (ordered), side consumer",
          min_world_size=2)
def pipeline_p2p_pingpong(delay_cycles: int = 0):
    """Ring exchange with blocking send/recv, even ranks send first, odd ranks receive first (deadlock-free), then
    a side-stream consumer after wait_stream."""
    rank, ws = _rank(), _ws()
    x = _ivec()
    buf = torch.empty_like(x)
    nxt, prv = (rank + 1) % ws, (rank - 1) % ws
    if rank % 2 == 0:
        dist.send(x, nxt)
        dist.recv(buf, prv)
    else:
        dist.recv(buf, prv)
        dist.send(x, nxt)
    return _p2p_exchange_consumer(x, buf, delay_cycles)


@scenario("clean", producer="NCCL P2P: irecv writes buf; side stream: y = 5 buf + x",
          delayed="side stream, before the consumer", covers="batch_isend_irecv ring exchange, waited",
          min_world_size=2)
def pipeline_p2p_exchange_async(delay_cycles: int = 0):
    """Ring exchange with batch_isend_irecv (simultaneous send and receive), every Work waited, then a
    side-stream consumer after wait_stream."""
    rank, ws = _rank(), _ws()
    x = _ivec()
    buf = torch.empty_like(x)
    ops = [dist.P2POp(dist.isend, x, (rank + 1) % ws), dist.P2POp(dist.irecv, buf, (rank - 1) % ws)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    return _p2p_exchange_consumer(x, buf, delay_cycles)


@scenario("clean", producer="side stream: cat of views writes buf", delayed="side stream, before the cat",
          covers="views, transpose copy, cat on a side stream, reduce_scatter_tensor")
def pipeline_views_cat_reduce_scatter(delay_cycles: int = 0):
    """Rows, a strided column view and a transposed copy are concatenated on a side stream and reduce-scattered."""
    x = _ivec(4 * N).view(4, N)
    t = x.t().contiguous()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        buf = torch.cat([x[0] * 2, x[2], t[:, 1], x[3] - x[1]])
    cur.wait_stream(side)
    buf.record_stream(cur)
    out = torch.empty((buf.numel() // _ws(),), dtype=buf.dtype, device="cuda")
    dist.reduce_scatter_tensor(out, buf)
    return {"out": out, "t": t}


@scenario("clean", producer="side stream: bf16 dequantize, then a bf16 -> fp8 requantize on the current stream",
          delayed="side stream, before dequantize",
          covers="dequantize on a side stream, requantize + list all_gather of fp8 codes on the current stream")
def pipeline_dequant_requant_list_gather(delay_cycles: int = 0):
    """Dequantize on a side stream, wait, requantize with the same scales on the current stream (exact round
    trip), gather the codes with the list form and compare nothing: return codes and dequantized weights."""
    data, sinv = _fp8_shard()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        _delay(delay_cycles)
        w = _dequant(data, sinv)
    cur.wait_stream(side)
    w.record_stream(cur)
    scale = torch.ones_like(sinv) / sinv  # powers of two: exact (division is IEEE on CPU and GPU)
    t = w.view(M // TILE, TILE, K // TILE, TILE).to(torch.float32) * scale.view(M // TILE, 1, K // TILE, 1)
    q = t.view(M, K).to(torch.float8_e4m3fn).view(torch.uint8)
    outs = [torch.empty_like(q) for _ in range(_ws())]
    dist.all_gather(outs, q)
    return {"codes": torch.stack(outs), "w": w}


# --------------------------------------------------------------------------- digests


def tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    if t.numel() == 0:
        return b""
    return t.view(-1).view(torch.uint8).numpy().tobytes()


def digest_outputs(outputs: dict) -> str:
    """sha256 over (name, dtype, shape, raw bytes) of each returned tensor, names sorted. Same on CPU and GPU."""
    h = hashlib.sha256()
    for name in sorted(outputs):
        t = outputs[name]
        h.update(f"{name}|{str(t.dtype).replace('torch.', '')}|{list(t.shape)}|".encode())
        h.update(tensor_bytes(t))
    return h.hexdigest()


def tensor_digests(outputs: dict) -> dict:
    return {name: hashlib.sha256(tensor_bytes(t)).hexdigest()[:16] for name, t in sorted(outputs.items())}


def outputs_equal(a: dict, b: dict) -> bool:
    """Bitwise equality of two output dicts (NaN payloads included)."""
    if sorted(a) != sorted(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape) or tensor_bytes(x) != tensor_bytes(y):
            return False
    return True


# --------------------------------------------------------------------------- simulator export


def run_in_simdist(name: str, seed: int = 0, nccl: str = "2.8", delay_cycles: int = 0, world_size: int = 2):
    """One simulated run of scenario `name` (salt 0). Returns simdist's RunResult."""
    import simdist
    sc = SCENARIOS[name]
    prev = get_salt()
    set_salt(0)
    try:
        return simdist.run(sc.fn, world_size=world_size, seed=seed, nccl=nccl, kwargs={"delay_cycles": delay_cycles})
    finally:
        set_salt(prev)


def sim_verdict(name: str, seed: int = 0, nccl: str = "2.8", world_size: int = 2) -> str:
    return "hazard" if run_in_simdist(name, seed, nccl, 0, world_size).hazards else "clean"


def _rank_digests(res) -> list:
    return [digest_outputs(r) for r in res.returns]


def export_corpus(path, seeds=range(20), profiles=PROFILES, world_size: int = 2, delay_cycles: int = GPU_DELAY_CYCLES,
                  names=None, verbose: bool = False) -> dict:
    """Run every scenario in simdist for each seed and NCCL profile; write the corpus JSON to `path`.

    Per scenario and profile: verdict (hazard if any seed finds one), the seeds that found one, hazard kinds,
    the fraction of seeds whose run had damage simdist marked `observed`, the fraction whose outputs differ from
    the reference scenario's (delay 0 and with `delay_cycles` on the producer's stream). For clean scenarios the
    per-rank sha256 digests of the returned tensors (checked equal across all seeds and profiles).
    The top-level `verdict` / `digests` are those of the profile matching torch >= 2.8 ("2.8") when exported.
    """
    import simdist
    seeds = list(seeds)
    profiles = list(profiles)
    names = list(names) if names is not None else list(SCENARIOS)
    prev = get_salt()
    set_salt(0)
    ref_digests: dict = {}
    try:
        def ref_of(ref, prof):
            key = (ref, prof)
            if key not in ref_digests:
                try:
                    ref_digests[key] = _rank_digests(simdist.run(SCENARIOS[ref].fn, world_size=world_size, seed=0,
                                                                 nccl=prof))
                except Exception:  # noqa: BLE001 - the scenario's own runs record the error
                    ref_digests[key] = None
            return ref_digests[key]

        out = {}
        for name in names:
            sc = SCENARIOS[name]
            entry = {"name": name, **sc.to_json(), "sim": {}}
            all_digests = set()
            digests = None
            for prof in profiles:
                ref_d = ref_of(sc.reference, prof)
                hz_seeds, kinds, observed, damaged, damaged_delayed, run_digests = [], set(), 0, 0, 0, set()
                errors = []
                for s in seeds:
                    try:
                        r = simdist.run(sc.fn, world_size=world_size, seed=s, nccl=prof)
                    except Exception as e:  # noqa: BLE001 - recorded in the corpus; check_corpus flags it
                        errors.append(f"seed {s}: {type(e).__name__}: {e}"[:500])
                        continue
                    d = _rank_digests(r)
                    run_digests.add(tuple(d))
                    if r.hazards:
                        hz_seeds.append(s)
                        kinds.update(h.kind for h in r.hazards)
                    if any(h.observed for h in r.hazards):
                        observed += 1
                    if ref_d is not None and d != ref_d:
                        damaged += 1
                    if sc.expected == "hazard" or r.hazards:
                        rd = simdist.run(sc.fn, world_size=world_size, seed=s, nccl=prof,
                                         kwargs={"delay_cycles": delay_cycles})
                        if ref_d is not None and _rank_digests(rd) != ref_d:
                            damaged_delayed += 1
                n = max(1, len(seeds) - len(errors))
                verdict = "error" if errors and not hz_seeds and len(errors) == len(seeds) else (
                    "hazard" if hz_seeds else "clean")
                p = {"verdict": verdict, "hazard_seeds": hz_seeds, "n_seeds": len(seeds), "kinds": sorted(kinds),
                     "observed_fraction": observed / n, "damage_fraction": damaged / n,
                     "damage_fraction_delayed": (damaged_delayed / n) if (sc.expected == "hazard" or hz_seeds)
                     else None, "errors": errors}
                if verdict == "clean":
                    p["digests_stable"] = len(run_digests) == 1
                    p["digests"] = list(next(iter(run_digests))) if run_digests else None
                    all_digests.update(run_digests)
                    if prof == profiles[0]:
                        digests = p["digests"]
                entry["sim"][prof] = p
                if verbose:
                    print(f"{name:40s} nccl={prof} {verdict:6s} kinds={sorted(kinds)} "
                          f"dmg={p['damage_fraction']:.2f}/{p['damage_fraction_delayed']}", flush=True)
            main = entry["sim"][profiles[0]]
            entry["verdict"] = main["verdict"]
            entry["verdict_by_profile"] = {prof: entry["sim"][prof]["verdict"] for prof in profiles}
            entry["kinds"] = main["kinds"]
            entry["agrees_with_expected"] = all(entry["sim"][p]["verdict"] == sc.expected for p in profiles)
            entry["known_sim_disagreement"] = KNOWN_SIM_DISAGREEMENTS.get(name)
            if sc.expected == "clean":
                entry["digests"] = digests
                entry["digests_stable"] = len(all_digests) == 1
            out[name] = entry
    finally:
        set_salt(prev)
    corpus = {
        "format": FORMAT,
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "generator": "properties.scenarios.export_corpus",
        "torch": torch.__version__,
        "simdist": getattr(simdist, "__version__", "?"),
        "python": platform.python_version(),
        "world_size": world_size,
        "seeds": seeds,
        "profiles": profiles,
        "gpu_profile": profiles[0],
        "delay_cycles": delay_cycles,
        "shapes": {"fp8_shard": [M, K], "tile": TILE, "n": N, "n_big": N_BIG},
        "scenarios": out,
    }
    if path is not None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(corpus, f, indent=1, sort_keys=False)
            f.write("\n")
    return corpus


def check_corpus(corpus) -> list:
    """Problems in a corpus, without simdist: simulator verdict != expected verdict (unless a known simulator
    disagreement), clean scenarios without stable per-rank digests, scenarios missing from the corpus or from
    this module; a scenario that needs more ranks than the corpus has is skipped. Returns a list of strings
    (empty = all good)."""
    if not isinstance(corpus, dict):
        with open(corpus) as f:
            corpus = json.load(f)
    problems = []
    sc_json = corpus.get("scenarios", {})
    ws = corpus.get("world_size")
    for name, e in sc_json.items():
        if name not in SCENARIOS:
            problems.append(f"{name}: in the corpus but not in properties.scenarios")
            continue
        exp = SCENARIOS[name].expected
        if ws is not None and ws < SCENARIOS[name].min_world_size:
            continue  # cannot run at this world size (the GPU job lists it as not run); its verdict is no problem
        if e.get("expected") != exp:
            problems.append(f"{name}: corpus says expected={e.get('expected')}, module says {exp}")
        known = e.get("known_sim_disagreement")
        for prof, p in e.get("sim", {}).items():
            if p.get("errors") and not known:
                problems.append(f"{name} (nccl {prof}): simulator errors: {p['errors'][0]}")
            if p.get("verdict") != exp and not known:
                problems.append(f"{name} (nccl {prof}): simulator verdict {p.get('verdict')} != expected {exp}")
        if e.get("verdict") == "clean" and not known:
            d = e.get("digests")
            if not d or len(d) != ws:
                problems.append(f"{name}: clean but has no digest per rank")
            if not e.get("digests_stable", False):
                problems.append(f"{name}: clean outputs differ between seeds or profiles")
    for name in SCENARIOS:
        if name not in sc_json:
            problems.append(f"{name}: missing from the corpus")
    return problems


def summary_table(corpus) -> str:
    lines = ["| scenario | expected | simdist (" + ", ".join(corpus["profiles"]) + ") | kinds | damage d=0 / delayed |",
             "|---|---|---|---|---|"]
    for name, e in corpus["scenarios"].items():
        main = e["sim"][corpus["profiles"][0]]
        dd = main.get("damage_fraction_delayed")
        lines.append(f"| {name} | {e['expected']} | {' / '.join(e['verdict_by_profile'].values())} | "
                     f"{', '.join(e['kinds']) or '-'} | {main['damage_fraction']:.2f} / "
                     f"{'-' if dd is None else f'{dd:.2f}'} |")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m properties.scenarios [corpus.json] [n_seeds]
    import sys
    p = sys.argv[1] if len(sys.argv) > 1 else "docs/gpu/corpus.json"
    ns = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    c = export_corpus(p, seeds=range(ns), verbose=True)
    print(summary_table(c))
    probs = check_corpus(c)
    print("\n".join(probs) if probs else "corpus OK: every simulator verdict equals the expected verdict")
    sys.exit(1 if probs else 0)
