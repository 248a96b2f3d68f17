"""Copy.cu's copy temporaries, pinned-memory reads and Stream(stream_ptr=) on one real GPU, beside simdist's verdict.

Each program runs on the GPU (a long `torch.cuda._sleep` first keeps the stream busy, so an asynchronous copy has
not run when the host goes on) and under simdist on the same machine. A copy the GPU performs synchronously gives
the right values with no wait; an asynchronous one gives the stale or overwritten values. simdist must report no
hazard and give the right values for the first kind, and report the race for the second.

    python ci/gpu_copy_temporaries.py [OUT.json]      (PYTHONPATH: the simdist tree)
"""
import json
import sys
import warnings

import torch

warnings.simplefilter("ignore")
SLEEP = 200_000_000  # cycles: ~0.1 s on an H200, far longer than the host's next steps


def busy():
    if torch.cuda.is_available() and not _simulated():
        torch.cuda._sleep(SLEEP)


def _simulated():
    try:
        from simdist.engine.context import current_rank
        return current_rank() is not None
    except ImportError:
        return False


def d2h_into_transposed_pinned():
    g = torch.arange(64., device="cuda").reshape(8, 8)
    h = torch.zeros(8, 8, pin_memory=True)
    busy()
    h.t().copy_(g, non_blocking=True)  # temporaries: a pageable empty_like, waited for
    return h.sum().item()              # 2016 if the host waited


def d2h_into_contiguous_pinned():
    g = torch.arange(64., device="cuda")
    h = torch.zeros(64, pin_memory=True)
    busy()
    h.copy_(g, non_blocking=True)      # one cudaMemcpyAsync: the host does not wait
    return h.sum().item()              # 0 while the copy has not run


def d2h_cast_transposed_to():
    g = torch.arange(64., device="cuda").reshape(8, 8).t()
    busy()
    c = g.to("cpu", torch.float16, non_blocking=True)  # a cast into a transposed pinned output: temporaries
    return c.float().sum().item()


def h2d_transposed_into_contiguous():
    p = torch.arange(64.).reshape(8, 8).pin_memory()
    d = torch.empty(8, 8, device="cuda")
    busy()
    d.copy_(p.t(), non_blocking=True)  # temporaries: a contiguous pageable copy of p.t(), staged at the call
    p.fill_(-1.0)
    torch.cuda.synchronize()
    return d.sum().item()              # 2016 if staged


def h2d_transposed_to():
    p = torch.arange(64.).reshape(8, 8).pin_memory()
    busy()
    d = p.t().to("cuda", non_blocking=True)  # preserve_format: the same strides, one cudaMemcpyAsync from p
    p.fill_(-1.0)
    torch.cuda.synchronize()
    return d.sum().item()              # -64 if the DMA read p after the fill


def h2d_cast_contiguous():
    q = torch.arange(64.).pin_memory()
    busy()
    e = q.to("cuda", torch.float16, non_blocking=True)  # a cast: src.contiguous() is q itself, read late
    q.fill_(-1.0)
    torch.cuda.synchronize()
    return e.float().sum().item()


def stream_from_pointer():
    s = torch.cuda.Stream()
    s2 = torch.cuda.Stream(stream_ptr=s.cuda_stream)
    return s2.cuda_stream == s.cuda_stream and s2 == s


PROGRAMS = [
    (d2h_into_transposed_pinned, 2016.0, False),
    (d2h_into_contiguous_pinned, 2016.0, True),
    (d2h_cast_transposed_to, 2016.0, False),
    (h2d_transposed_into_contiguous, 2016.0, False),
    (h2d_transposed_to, 2016.0, True),
    (h2d_cast_contiguous, 2016.0, True),
    (stream_from_pointer, True, False),
]


def main(out_path=None):
    rows = []
    for fn, right, racy in PROGRAMS:
        row = {"program": fn.__name__, "right": right, "racy_by_rule": racy}
        try:
            torch.cuda.synchronize()
            row["gpu"] = fn()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            row["gpu"] = f"{type(e).__name__}: {str(e)[:200]}"
        try:
            import simdist
            r = simdist.run(fn)
            row["sim"] = r.returns[0]
            row["sim_hazards"] = sorted({h.kind for h in r.hazards})
        except Exception as e:  # noqa: BLE001
            row["sim"] = f"{type(e).__name__}: {str(e)[:200]}"
            row["sim_hazards"] = None
        gpu_damaged = row["gpu"] != right
        row["agree"] = (gpu_damaged == racy and bool(row["sim_hazards"]) == racy
                        and (racy or row["sim"] == right))
        rows.append(row)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}")
    print(f"{'program':34s} {'racy':5s} {'GPU value':>10s} {'sim value':>10s}  sim hazards  agree")
    for r in rows:
        print(f"{r['program']:34s} {str(r['racy_by_rule']):5s} {str(r['gpu'])[:10]:>10s} {str(r['sim'])[:10]:>10s}  "
              f"{','.join(r['sim_hazards'] or []) or '-':12s} {r['agree']}")
    print(f"agree: {sum(r['agree'] for r in rows)}/{len(rows)}")
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
