#!/usr/bin/env python3
"""Nightly real-GPU confirmation of simdist's verdicts (torchrun entry point).

    torchrun --nproc_per_node=2 ci/gpu_confirm.py --corpus docs/gpu/corpus.json --out report

Reads the scenario corpus that properties.scenarios.export_corpus wrote on the CPU (simulator verdicts and, for
clean scenarios, per-rank sha256 digests of the returned tensors), then on real CUDA + NCCL:

A. scenarios: a clean scenario runs once with delay 0 (its digest must equal the simulator's, bit for bit) and once
   with GPU_DELAY_CYCLES on the producer's stream (same digest: a clean program does not depend on timing). A hazard
   scenario runs K trials (delays escalate: the first half 0, the second half 2e6 cycles of torch.cuda._sleep on the
   producer's stream); each trial uses a fresh input salt and is compared with its clean reference scenario run with
   the same salt right after it: a trial whose outputs differ on any rank is "damaged".
B. PyTorch's CUDA sanitizer: every scenario once (delay 0) in a pair of subprocesses (one per rank, their own NCCL
   world) with TORCH_CUDA_SANITIZER=1; its reports are counted, not raised, so the ranks stay in step.
C. fix costs: 8 layers of an 8B Llama (hidden 4096, 32 heads / 8 KV heads, MLP 14336) sharded TP=world size,
   blockwise-FP8 weights dequantized to bf16 and all_gather_into_tensor'ed (~3.5 GB of bf16 gathered per rank with
   TP=2), four ways: unsynced side stream, side stream + wait_stream/record_stream, side stream +
   torch.cuda.synchronize(), current stream. Median ms with CUDA events.

Rank 0 writes OUT.md and OUT.json, the verdicts in the table format of ci/gpu_programs.py (ci/gpu_witness.py
render_verdicts): a clean simulator verdict *agrees* when every rank's digests equal the simulator's and no salted
trial shows damage, else it *disagrees*; a hazard verdict is *confirmed* when damage showed in at least one trial
and *unconfirmed* when none did (listed with why, never counted as agreement). Scenarios that simdist cannot run
at this world size (its verdict is an error, e.g. point-to-point needs two ranks) are not run, and listed so.
Exit status 1 on any disagreement (scenarios listed in KNOWN_SIM_DISAGREEMENTS excepted), 3 when a phase could
not run to the end. The fix-cost phase runs --timing-runs times (default 2); the report gives min / median / max
over the iterations of each run, and every sample is in the JSON.

Each rank appends its evidence to OUT.rank<r>.jsonl as it goes; `--assemble` builds the report from those files
(used by ci/nightly-gpu when the job was killed part-way). `--simulate` runs the whole job inside simdist on the CPU
(a dry run of this file's logic: small timing shapes, no sanitizer).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from ci.source_tree import use_source_tree  # noqa: E402

use_source_tree()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from simdist.properties import scenarios as S  # noqa: E402
from ci.gpu_witness import VERDICTS, render_verdicts  # noqa: E402

STRATEGIES = ("unsynced", "wait_stream", "wait_stream_per_layer", "synchronize", "current_stream")
STRATEGY_TEXT = {
    "unsynced": "dequantize on a side stream, no sync (wrong)",
    "wait_stream": "side stream + current_stream().wait_stream(side) + record_stream",
    "wait_stream_per_layer": "side stream, one wait_stream per layer (7 weights) + record_stream",
    "synchronize": "side stream + torch.cuda.synchronize()",
    "current_stream": "dequantize on the current stream",
}


def log(msg):
    r = os.environ.get("RANK", "?")
    print(f"[gpu_confirm rank {r} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# =========================================================================== evidence files


class Evidence:
    """Append-only JSON lines per rank, so a killed job still leaves what it measured."""

    def __init__(self, out, rank, append=False):
        self.path = f"{out}.rank{rank}.jsonl"
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self.f = open(self.path, "a" if append else "w")

    def write(self, rec):
        self.f.write(json.dumps(rec) + "\n")
        self.f.flush()

    def close(self):
        self.f.close()


def read_evidence(out, world_size):
    per_rank = {}
    for r in range(world_size):
        p = f"{out}.rank{r}.jsonl"
        recs = []
        if os.path.exists(p):
            with open(p) as f:
                for line in f:
                    line = line.strip()
                    if line:
                        try:
                            recs.append(json.loads(line))
                        except json.JSONDecodeError:
                            pass  # a line cut by a kill
        per_rank[r] = recs
    return per_rank


# =========================================================================== phase A: scenarios


def _sync_all():
    torch.cuda.synchronize()


def run_once(fn, delay):
    """One run of a scenario, aligned across ranks, outputs copied to the CPU after a full sync."""
    _sync_all()
    torch.cuda.empty_cache()  # the allocator starts each run from the same state, as in the simulator
    dist.barrier()
    out = fn(delay_cycles=delay)
    _sync_all()
    return {k: v.detach().to("cpu") for k, v in out.items()}


def trial_delays(k, delay):
    return [0 if i < (k + 1) // 2 else delay for i in range(k)]


def phase_scenarios(corpus, names, args, ev, rank):
    sims = corpus["scenarios"]
    for name in names:
        e = sims[name]
        sc = S.SCENARIOS[name]
        sim_v = e.get("verdict")
        treat = sim_v if sim_v in ("clean", "hazard") else sc.expected
        t0 = time.time()
        rec = {"type": "scenario", "name": name, "rank": rank, "treated_as": treat}
        try:
            if treat == "clean":
                want = (e.get("digests") or [None] * args.world_size)[rank]
                S.set_salt(0)
                out0 = run_once(sc.fn, 0)
                d0 = S.digest_outputs(out0)
                S.set_salt(0)
                outd = run_once(sc.fn, args.delay)
                dd = S.digest_outputs(outd)
                rec.update(digest=d0, sim_digest=want, digest_match=(d0 == want) if want else None,
                           delayed_digest=dd, delayed_match=(dd == want) if want else (dd == d0),
                           tensor_digests=S.tensor_digests(out0))
                # a few salted trials against themselves: a clean program must not show damage either
                dmg = []
                for i, dl in enumerate(trial_delays(args.clean_trials, args.delay)):
                    S.set_salt(1000 + i)
                    a = run_once(sc.fn, dl)
                    b = run_once(S.SCENARIOS[sc.reference].fn, 0)
                    dmg.append({"delay": dl, "damaged": not S.outputs_equal(a, b)})
                rec["trials"] = dmg
            else:
                ref = S.SCENARIOS[sc.reference]
                trials = []
                for i, dl in enumerate(trial_delays(args.trials, args.delay)):
                    S.set_salt(1 + i)
                    h = run_once(sc.fn, dl)
                    S.set_salt(1 + i)
                    r = run_once(ref.fn, 0)
                    diff = [k for k in sorted(r) if k not in h or not S.outputs_equal({k: h[k]}, {k: r[k]})]
                    trials.append({"delay": dl, "damaged": bool(diff), "diff": diff})
                rec["trials"] = trials
        except Exception as exc:  # noqa: BLE001 - recorded; the other rank may now be out of step
            rec["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            rec["traceback"] = traceback.format_exc()[-4000:]
            log(f"{name}: ERROR {rec['error'][:300]}")
        finally:
            S.set_salt(0)
        rec["seconds"] = round(time.time() - t0, 3)
        ev.write(rec)
        if "trials" in rec and treat == "hazard":
            k = sum(t["damaged"] for t in rec["trials"])
            log(f"{name}: hazard trials damaged on this rank {k}/{len(rec['trials'])} ({rec['seconds']} s)")
        elif treat == "clean" and "digest" in rec:
            log(f"{name}: clean digest match={rec['digest_match']} delayed={rec['delayed_match']}")


# =========================================================================== phase B: CUDA sanitizer


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def phase_sanitizer(args, names, ev, rank, local_rank):
    port = [_free_port() if rank == 0 else 0]
    dist.broadcast_object_list(port, src=0)
    res_path = f"{args.out}.sanitizer.rank{rank}.json"
    if os.path.exists(res_path):
        os.remove(res_path)
    drop = ("MASTER_ADDR", "MASTER_PORT", "TORCH_NCCL_ASYNC_ERROR_HANDLING")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC_") and k not in drop}
    env["TORCH_CUDA_SANITIZER"] = "1"
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    # rank-asymmetric scenarios last: if the sanitizer breaks one of them on one rank only, the others are done
    names = sorted(names, key=lambda n: ("p2p" in n) or ("broadcast" in n))
    cmd = [sys.executable, os.path.abspath(__file__), "--sanitizer-worker", "--corpus", args.corpus,
           "--out", args.out, "--port", str(port[0]), "--rank", str(rank), "--world-size", str(args.world_size),
           "--local-rank", str(local_rank), "--names", ",".join(names), "--result", res_path]
    t0 = time.time()
    status = "ok"
    try:
        p = subprocess.run(cmd, env=env, timeout=args.sanitizer_timeout, capture_output=True, text=True)
        tail = (p.stdout[-3000:] + "\n" + p.stderr[-3000:]).strip()
        if p.returncode != 0:
            status = f"exit {p.returncode}"
    except subprocess.TimeoutExpired as e:
        status = f"timeout after {args.sanitizer_timeout} s"
        so = e.stdout or b""
        tail = so[-2000:].decode(errors="replace") if isinstance(so, bytes) else str(so)[-2000:]
    results = {}
    if os.path.exists(res_path):
        with open(res_path) as f:
            results = json.load(f)
    ev.write({"type": "sanitizer", "rank": rank, "status": status, "seconds": round(time.time() - t0, 1),
              "results": results.get("scenarios", {}), "enabled": results.get("enabled"),
              "log_tail": tail[-3000:] if status != "ok" else tail[-600:]})
    log(f"sanitizer subprocess: {status} in {time.time() - t0:.1f} s, {len(results.get('scenarios', {}))} scenarios")


def sanitizer_worker(args):
    """Runs in a subprocess started with TORCH_CUDA_SANITIZER=1 (torch enabled the sanitizer at import)."""
    import datetime
    out = {"enabled": False, "scenarios": {}}
    found = []
    try:
        import torch.cuda._sanitizer as csan
        san = getattr(csan, "cuda_sanitizer", None)
        if san is not None and not san.enabled:
            csan.enable_cuda_sanitizer()
        handler = san.dispatch.event_handler
        orig = handler._handle_kernel_launch

        def counting(*a, **k):
            errs = orig(*a, **k)
            if errs:
                found.extend(errs)
            return []  # count, don't raise: a raise on one rank would leave the other in a collective
        handler._handle_kernel_launch = counting
        out["enabled"] = True
    except Exception as e:  # noqa: BLE001
        out["setup_error"] = f"{type(e).__name__}: {e}"
    torch.cuda.set_device(args.local_rank)
    store = dist.TCPStore("127.0.0.1", args.port, args.world_size, args.rank == 0,
                          timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("nccl", store=store, rank=args.rank, world_size=args.world_size,
                            timeout=datetime.timedelta(seconds=60),
                            device_id=torch.device("cuda", args.local_rank))
    for name in args.names.split(","):
        if not name:
            continue
        before = len(found)
        r = {}
        try:
            S.set_salt(0)
            torch.cuda.synchronize()
            dist.barrier()
            S.SCENARIOS[name].fn(delay_cycles=0)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            r["exception"] = f"{type(e).__name__}: {e}"[:1000]
        errs = found[before:]
        r["errors"] = len(errs)
        if errs:
            text = str(errs[0])
            r["first"] = text[:6000]
            r["summary"] = [x for x in text.splitlines() if x and not x[0].isspace() and not x.startswith("=")][:16]
        out["scenarios"][name] = r
        with open(args.result, "w") as f:
            json.dump(out, f)
    dist.barrier()
    torch.cuda.synchronize()
    dist.destroy_process_group()
    with open(args.result, "w") as f:
        json.dump(out, f)
    return 0


# =========================================================================== phase C: fix costs


def llama8b_shapes(tp, scale=1):
    """Per-rank weight shards of one Llama-3-8B layer with tensor parallel size tp (dim 0 = gathered dim)."""
    hidden, inter, kv = 4096, 14336, 8 * 128

    def r(x):
        return max(128, (x // scale) // 128 * 128)
    return {"q_proj": (r(hidden // tp), r(hidden)), "k_proj": (r(kv // tp), r(hidden)),
            "v_proj": (r(kv // tp), r(hidden)), "o_proj": (r(hidden // tp), r(hidden)),
            "gate_proj": (r(inter // tp), r(hidden)), "up_proj": (r(inter // tp), r(hidden)),
            "down_proj": (r(inter // tp), r(hidden))}
    # o_proj / down_proj are row-parallel (split on the input dim); the shard has the same element count, so for
    # timing they are gathered on dim 0 like the others (Megatron-Bridge concatenates them on dim 1 afterwards).


def _convert(params, strategy, side, ws, per_layer=7):
    cur = torch.cuda.current_stream()
    side.wait_stream(cur)
    outs = []
    if strategy == "wait_stream_per_layer":
        # the same fix with fewer host calls: dequantize a layer's weights, then one wait for all of them
        for i in range(0, len(params), per_layer):
            with torch.cuda.stream(side):
                ws_ = [S._dequant(d, s) for d, s in params[i:i + per_layer]]
            cur.wait_stream(side)
            for w in ws_:
                w.record_stream(cur)
                out = torch.empty((ws * w.shape[0],) + tuple(w.shape[1:]), dtype=w.dtype, device="cuda")
                dist.all_gather_into_tensor(out, w)
                outs.append(out)
        cur.wait_stream(side)
        return outs
    for data, sinv in params:
        if strategy == "current_stream":
            w = S._dequant(data, sinv)
        else:
            with torch.cuda.stream(side):
                w = S._dequant(data, sinv)
            if strategy == "wait_stream":
                cur.wait_stream(side)
                w.record_stream(cur)
            elif strategy == "synchronize":
                torch.cuda.synchronize()
        out = torch.empty((ws * w.shape[0],) + tuple(w.shape[1:]), dtype=w.dtype, device="cuda")
        dist.all_gather_into_tensor(out, w)
        outs.append(out)
    cur.wait_stream(side)  # every variant's time includes all of its device work
    return outs


def phase_te(args, ev, rank):
    """The fake quantizers against TransformerEngine's, byte for byte, where transformer_engine imports."""
    try:
        import transformer_engine_torch as tex  # noqa: F401
        from transformer_engine.pytorch.tensor.float8_blockwise_tensor import Float8BlockQuantizer as TEQ
    except Exception as exc:  # noqa: BLE001
        ev.write({"type": "te", "rank": rank, "status": "skipped",
                  "reason": f"transformer_engine does not import here ({type(exc).__name__}: {exc}); the fake "
                            "quantizers were not compared with TE's on this machine"})
        log("TE cross-check skipped: transformer_engine does not import")
        return
    from simdist.fakes import transformer_engine as fte
    results = []
    g = torch.Generator(device="cpu").manual_seed(7 + rank)
    for pow2 in (True, False):
        for dim in (2, 1):
            x = (torch.randn(512, 1024, generator=g) * torch.logspace(-3, 3, 1024)).to(torch.bfloat16).cuda()
            real = TEQ(fp8_dtype=tex.DType.kFloat8E4M3, rowwise=True, columnwise=False, amax_epsilon=0.0,
                       force_pow_2_scales=pow2, block_scaling_dim=dim)(x)
            fake = fte.Float8BlockQuantizer(fte.TE_DType.kFloat8E4M3, rowwise=True, columnwise=False,
                                            force_pow_2_scales=pow2, block_scaling_dim=dim)(x)
            d_bad = int((real._rowwise_data.view(torch.uint8) != fake._rowwise_data.view(torch.uint8)).sum())
            rs, fs = real._rowwise_scale_inv, fake._rowwise_scale_inv
            r0, c0 = min(rs.shape[0], fs.shape[0]), min(rs.shape[1], fs.shape[1])
            s_bad = int((rs[:r0, :c0].view(torch.int32) != fs[:r0, :c0].view(torch.int32)).sum())
            results.append({"pow2": pow2, "block_dim": dim, "data_bytes_differing": d_bad,
                            "scale_inv_differing": s_bad, "scale_shape_real": list(rs.shape),
                            "scale_shape_fake": list(fs.shape)})
    ev.write({"type": "te", "rank": rank, "status": "compared", "results": results,
              "te_version": getattr(__import__("transformer_engine"), "__version__", "?")})


def phase_timing(args, ev, rank, ws, run=0):
    t0 = time.time()
    shapes = llama8b_shapes(ws, args.timing_scale)
    torch.cuda.manual_seed(1234 + rank)
    params = []
    for _layer in range(args.timing_layers):
        for _name, (m, k) in shapes.items():
            codes = torch.randint(0, 256, (m, k), dtype=torch.uint8, device="cuda")
            codes.bitwise_and_(0xBF)  # exponent never all ones: no NaN codes
            sinv = torch.full((m // 128, k // 128), 0.5, dtype=torch.float32, device="cuda")
            params.append((codes.view(torch.float8_e4m3fn), sinv))
    n_params = sum(d.numel() for d, _ in params)
    side = torch.cuda.Stream()
    ref = _convert(params, "current_stream", side, ws)
    torch.cuda.synchronize()
    gathered_bytes = sum(o.numel() * o.element_size() for o in ref)
    times = {s: [] for s in STRATEGIES}
    wrong = {s: 0 for s in STRATEGIES}
    checked = {s: 0 for s in STRATEGIES}
    for it in range(args.timing_warmup + args.timing_iters):
        for st in STRATEGIES:  # interleaved, so clock or thermal drift hits every strategy alike
            torch.cuda.synchronize()
            dist.barrier()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            outs = _convert(params, st, side, ws, len(shapes))
            end.record()
            torch.cuda.synchronize()
            if it >= args.timing_warmup:
                times[st].append(start.elapsed_time(end))
                wrong[st] += sum(0 if torch.equal(o, r) else 1 for o, r in zip(outs, ref))
                checked[st] += len(outs)
            del outs
    res = {"type": "timing", "rank": rank, "run": run, "n_params": n_params, "gathered_bytes": gathered_bytes,
           "layers": args.timing_layers, "shapes": {k: list(v) for k, v in shapes.items()},
           "iters": args.timing_iters, "warmup": args.timing_warmup, "seconds": round(time.time() - t0, 1),
           "strategies": {s: {"median_ms": statistics.median(times[s]), "min_ms": min(times[s]),
                              "max_ms": max(times[s]), "times_ms": [round(x, 4) for x in times[s]],
                              "wrong_params": wrong[s], "params_checked": checked[s]} for s in STRATEGIES}}
    ev.write(res)
    log("timing: " + ", ".join(f"{s} {res['strategies'][s]['median_ms']:.2f} ms" for s in STRATEGIES))
    del ref, params
    torch.cuda.empty_cache()


# =========================================================================== environment


def environment(ws):
    env = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
           "hostname": socket.gethostname(), "python": platform.python_version(), "torch": torch.__version__,
           "cuda": getattr(torch.version, "cuda", None), "world_size": ws}
    try:
        v = torch.cuda.nccl.version()
        env["nccl"] = ".".join(str(x) for x in v) if isinstance(v, (tuple, list)) else str(v)
    except Exception as e:  # noqa: BLE001
        env["nccl"] = f"unknown ({type(e).__name__})"
    try:
        env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001
        env["gpus"] = []
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        env["nvidia_smi"] = [x.strip() for x in q.stdout.strip().splitlines()]
    except Exception:  # noqa: BLE001
        env["nvidia_smi"] = []
    env["nccl_env"] = {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "TORCH_NCCL", "TORCH_SYMM"))}
    return env


# =========================================================================== the worker (one per rank)


def runnable(entry):
    """A scenario the simulator ran at the corpus's world size (an error there, e.g. a send to a peer that a
    one-rank world lacks, is a program that cannot run here either)."""
    return entry.get("verdict") in ("clean", "hazard") or bool(entry.get("known_sim_disagreement"))


def worker(args):
    simulate = args.simulate
    local_rank = int(os.environ.get("LOCAL_RANK", "0")) if not simulate else None
    if not simulate:
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", timeout=_dt.timedelta(seconds=args.nccl_timeout),
                                device_id=torch.device("cuda", local_rank))
    rank, ws = dist.get_rank(), dist.get_world_size()
    if simulate:
        local_rank = rank
    args.world_size = ws
    with open(args.corpus) as f:
        corpus = json.load(f)
    ev = Evidence(args.out, rank, append=args.append)
    names = [n for n in corpus["scenarios"] if n in S.SCENARIOS and runnable(corpus["scenarios"][n])]
    if args.names:
        keep = set(args.names.split(","))
        names = [n for n in names if n in keep]
    if simulate:  # the simulator cannot run what it is known to get wrong
        names = [n for n in names if n not in S.KNOWN_SIM_DISAGREEMENTS]
    ev.write({"type": "env", "rank": rank, **(environment(ws) if rank == 0 and not simulate else
                                              {"world_size": ws, "simulate": simulate})})
    if corpus.get("world_size") != ws:
        ev.write({"type": "fatal", "rank": rank,
                  "error": f"corpus was exported for world size {corpus.get('world_size')}, torchrun has {ws}"})
        ev.close()
        return 3
    phases = []
    if not args.skip_scenarios:
        phases.append(("scenarios", lambda: phase_scenarios(corpus, names, args, ev, rank)))
    if not args.skip_sanitizer and not simulate:
        phases.append(("sanitizer", lambda: phase_sanitizer(args, names, ev, rank, local_rank)))
    if not simulate:
        phases.append(("transformer_engine", lambda: phase_te(args, ev, rank)))
    if not args.skip_timing:
        for run in range(args.timing_runs):
            phases.append((f"timing{run + 1}" if run else "timing", lambda run=run: phase_timing(args, ev, rank, ws,
                                                                                                   run)))
    for pname, fn in phases:
        t0 = time.time()
        log(f"phase {pname} ...")
        try:
            fn()
            ev.write({"type": "phase", "rank": rank, "phase": pname, "ok": True, "seconds": round(time.time() - t0, 1)})
        except Exception as exc:  # noqa: BLE001
            ev.write({"type": "phase", "rank": rank, "phase": pname, "ok": False,
                      "error": f"{type(exc).__name__}: {exc}"[:2000], "traceback": traceback.format_exc()[-4000:]})
            log(f"phase {pname} FAILED: {exc}")
    ev.write({"type": "done", "rank": rank})
    ev.close()
    torch.cuda.synchronize()
    dist.barrier()
    code = 0
    if rank == 0 and not args.no_report:
        report = assemble(args.out, args.corpus, ws, phases=[p for p, _ in phases], simulate=simulate)
        code = report["exit_code"]
    codes = [code]
    dist.broadcast_object_list(codes, src=0)
    if not simulate:
        dist.destroy_process_group()
    return codes[0]


# =========================================================================== the report


def _pct(x, base):
    return 100.0 * (x - base) / base if base else float("nan")


def _verdict(row):
    """The verdict of one scenario in the table format of ci/gpu_programs.py (ci/gpu_witness.py VERDICTS)."""
    row.setdefault("sim", row.get("sim_verdict"))
    dmg = row.get("damage") or {}
    row["evidence"] = ("trials " + ", ".join(f"delay {k}: {v}" for k, v in (dmg.get("by_delay") or {}).items())
                       if dmg else "-")
    a = row.get("agreement")
    if row.get("verdict") == "not run":
        return row
    if a == "not run":
        row.update(verdict="incomplete", why="no GPU evidence for it (the job was cut short)")
    elif a == "ERROR":
        row.update(verdict="disagree", why=f"the GPU run failed: {str(row.get('gpu_error'))[:200]}")
    elif a == "unconfirmed":
        row.update(verdict="unconfirmed", why=f"no damage in {dmg.get('trials')} trials (delays "
                                              f"{', '.join((dmg.get('by_delay') or {}).keys())} cycles of "
                                              "torch.cuda._sleep on the producer's stream)")
    elif a == "agree":
        if row.get("sim_verdict") == "hazard":
            row.update(verdict="confirmed", confirmed_by="salted trials", why="")
        else:
            row.update(verdict="agree", why="")
    else:
        row.update(verdict="disagree", why=f"{a}: simulator {row.get('sim_verdict')}, GPU {row.get('gpu_verdict')}")
    return row


def assemble(out, corpus_path, ws, phases=("scenarios", "sanitizer", "timing"), simulate=False):
    with open(corpus_path) as f:
        corpus = json.load(f)
    per_rank = read_evidence(out, ws)
    env = next((r for r in per_rank.get(0, []) if r["type"] == "env"), {})
    scen = {r: {x["name"]: x for x in recs if x["type"] == "scenario"} for r, recs in per_rank.items()}
    san = {r: next((x for x in recs if x["type"] == "sanitizer"), None) for r, recs in per_rank.items()}
    timing = {r: [x for x in recs if x["type"] == "timing"] for r, recs in per_rank.items()}
    te_recs = [x for recs in per_rank.values() for x in recs if x["type"] == "te"]
    phase_recs = [x for recs in per_rank.values() for x in recs if x["type"] in ("phase", "fatal")]
    done = all(any(x["type"] == "done" for x in per_rank.get(r, [])) for r in range(ws))
    rows = []
    disagreements = []
    incomplete = []
    for name, e in corpus["scenarios"].items():
        sc = S.SCENARIOS.get(name)
        expected = e["expected"]
        sim_v = e.get("verdict")
        known = e.get("known_sim_disagreement") or S.KNOWN_SIM_DISAGREEMENTS.get(name)
        recs = [scen.get(r, {}).get(name) for r in range(ws)]
        row = {"name": name, "expected": expected, "sim_verdict": sim_v,
               "sim_verdict_by_profile": e.get("verdict_by_profile"), "sim_kinds": e.get("kinds", []),
               "sim_damage_fraction": e["sim"][corpus["gpu_profile"]].get("damage_fraction"),
               "sim_damage_fraction_delayed": e["sim"][corpus["gpu_profile"]].get("damage_fraction_delayed"),
               "known_sim_disagreement": known, "producer": e.get("producer"), "reference": e.get("reference")}
        if not runnable(e):
            errs = [x for p in (e.get("sim") or {}).values() for x in (p.get("errors") or [])][:1]
            row.update(gpu_verdict="not run", agreement="not run", verdict="not run",
                       why=f"simdist cannot run it at world size {corpus.get('world_size')} "
                           f"({errs[0] if errs else 'error'}): it needs more ranks")
        elif any(r is None for r in recs):
            row.update(gpu_verdict="not run", agreement="not run")
            incomplete.append(name)
        elif any("error" in r for r in recs):
            err = next(r["error"] for r in recs if "error" in r)
            row.update(gpu_verdict="error", gpu_error=err, agreement="ERROR")
            disagreements.append(f"{name}: GPU run failed: {err[:200]}")
        else:
            treat = recs[0]["treated_as"]
            trials = recs[0]["trials"]
            damaged = [any(r["trials"][i]["damaged"] for r in recs) for i in range(len(trials))]
            delays = [t["delay"] for t in trials]
            by_delay = {}
            for d, dm in zip(delays, damaged):
                a = by_delay.setdefault(d, [0, 0])
                a[0] += int(dm)
                a[1] += 1
            row["damage"] = {"seen": sum(damaged), "trials": len(damaged),
                             "by_delay": {str(d): f"{a}/{b}" for d, (a, b) in by_delay.items()}}
            row["damaged_tensors"] = sorted({k for r in recs for t in r["trials"] for k in t.get("diff", [])})
            if treat == "clean":
                match = [r.get("digest_match") for r in recs]
                dmatch = [r.get("delayed_match") for r in recs]
                row["digest_match_by_rank"] = match
                row["delayed_match_by_rank"] = dmatch
                row["gpu_digests"] = [r.get("digest") for r in recs]
                if all(m is True for m in match) and all(dmatch) and not any(damaged):
                    gv = "clean"
                elif any(m is None for m in match):
                    gv = "clean (no simulator digest)" if all(dmatch) and not any(damaged) else "outputs vary"
                else:
                    gv = "DIGEST MISMATCH" if not all(m is True for m in match) else "outputs vary"
                row["gpu_verdict"] = gv
                ok = gv == "clean"
            else:
                k = sum(damaged)
                row["gpu_verdict"] = f"hazard (damage seen {k}/{len(damaged)})" if k else \
                    f"no damage seen (0/{len(damaged)})"
                ok = True  # a race the trials did not show is unconfirmed, not a disagreement (verdict below)
            if sim_v not in ("clean", "hazard"):
                gpu_says = "clean" if row["gpu_verdict"].startswith("clean") else (
                    "hazard" if row["gpu_verdict"].startswith("hazard") else "?")
                row["agreement"] = f"known simulator disagreement (simulator: {sim_v}; GPU {gpu_says}, " \
                                   f"expected {expected})"
            elif ok and treat == "hazard" and not any(damaged):
                row["agreement"] = "unconfirmed"
            elif ok:
                row["agreement"] = "agree"
            elif known:
                row["agreement"] = "known simulator disagreement"
            else:
                row["agreement"] = "DISAGREE"
                disagreements.append(f"{name}: simulator {sim_v}, GPU {row['gpu_verdict']}")
        # sanitizer
        sres = [((san.get(r) or {}).get("results") or {}).get(name) for r in range(ws)]
        if all(x is None for x in sres):
            st = [(san.get(r) or {}).get("status") for r in range(ws)]
            row["sanitizer"] = "not run" if not any(st) else f"no result ({', '.join(str(s) for s in st)})"
        else:
            n = sum((x or {}).get("errors", 0) for x in sres)
            exc = [x.get("exception") for x in sres if x and x.get("exception")]
            row["sanitizer_reports"] = n
            row["sanitizer_first"] = next((x["first"] for x in sres if x and x.get("first")), None)
            row["sanitizer_summary"] = next((x["summary"] for x in sres if x and x.get("summary")), None)
            if exc:
                row["sanitizer_exception"] = exc[0]
            row["sanitizer"] = (f"flags ({n})" if n else "clean") + (" + exception" if exc else "")
            row["sanitizer_agrees_expected"] = (n > 0) == (expected == "hazard")
        _verdict(row)
        rows.append(row)
    # timing: every run's samples; the slowest rank sets each iteration's pace
    tim = None
    runs = sorted({t.get("run", 0) for r in range(ws) for t in timing.get(r, [])})
    if runs:
        t0 = next(t for r in range(ws) for t in timing.get(r, []))
        per_run = []
        for run in runs:
            trs = [t for r in range(ws) for t in timing.get(r, []) if t.get("run", 0) == run]
            strat = {}
            for s_ in STRATEGIES:
                samples = [max(xs) for xs in zip(*[t["strategies"][s_]["times_ms"] for t in trs])]
                strat[s_] = {"times_ms": samples, "min_ms": min(samples), "median_ms": statistics.median(samples),
                             "max_ms": max(samples),
                             "per_rank_times_ms": [t["strategies"][s_]["times_ms"] for t in trs],
                             "wrong_params": sum(t["strategies"][s_]["wrong_params"] for t in trs),
                             "params_checked": sum(t["strategies"][s_]["params_checked"] for t in trs)}
            per_run.append({"run": run + 1, "strategies": strat, "seconds": [t.get("seconds") for t in trs]})
        strat = {}
        for s_ in STRATEGIES:
            pooled = [x for pr in per_run for x in pr["strategies"][s_]["times_ms"]]
            strat[s_] = {"text": STRATEGY_TEXT[s_], "median_ms": statistics.median(pooled), "min_ms": min(pooled),
                         "max_ms": max(pooled),
                         "wrong_params": sum(pr["strategies"][s_]["wrong_params"] for pr in per_run),
                         "params_checked": sum(pr["strategies"][s_]["params_checked"] for pr in per_run)}
        base = strat["unsynced"]["median_ms"]
        for s_ in STRATEGIES:
            strat[s_]["overhead_pct"] = _pct(strat[s_]["median_ms"], base)
        tim = {"layers": t0["layers"], "n_params_per_rank": t0["n_params"],
               "gathered_gb_per_rank": t0["gathered_bytes"] / 1e9, "shapes": t0["shapes"], "iters": t0["iters"],
               "warmup": t0["warmup"], "tp": ws, "runs": per_run, "strategies": strat}
    phase_fail = [x for x in phase_recs if x["type"] == "fatal" or not x.get("ok", True)]
    n_agree = sum(1 for r in rows if r["agreement"] == "agree")
    exit_code = 1 if disagreements else 0
    if not exit_code and (phase_fail or incomplete or not done):
        exit_code = 3
    report = {
        "title": "simdist nightly real-GPU confirmation",
        "environment": {k: v for k, v in env.items() if k not in ("type", "rank")},
        "simulate": simulate,
        "corpus": {"path": os.path.relpath(corpus_path, ROOT) if os.path.abspath(corpus_path).startswith(ROOT + os.sep)
                   else corpus_path, "generated": corpus.get("generated"), "torch": corpus.get("torch"),
                   "simdist": corpus.get("simdist"), "seeds": corpus.get("seeds"), "profiles": corpus.get("profiles"),
                   "world_size": corpus.get("world_size")},
        "summary": {"scenarios": len(rows), "agree": n_agree,
                    "verdicts": {v: sum(1 for r in rows if r.get("verdict") == v) for v in VERDICTS},
                    "disagree": sum(1 for r in rows if r["agreement"] in ("DISAGREE", "ERROR")),
                    "known_sim_disagreements": sum(1 for r in rows if r["agreement"].startswith("known")),
                    "not_run": len(incomplete),
                    "sanitizer_agrees_expected": sum(1 for r in rows if r.get("sanitizer_agrees_expected")),
                    "sanitizer_misses": [r["name"] for r in rows if r["expected"] == "hazard"
                                         and r.get("sanitizer_agrees_expected") is False],
                    "sanitizer_false_alarms": [r["name"] for r in rows if r["expected"] == "clean"
                                               and r.get("sanitizer_agrees_expected") is False]},
        "scenarios": rows,
        "timing": tim,
        "transformer_engine": te_recs[0] if te_recs else None,
        "phase_failures": phase_fail,
        "disagreements": disagreements,
        "incomplete": incomplete + ([] if done else ["job did not finish on every rank"]),
        "exit_code": exit_code,
    }
    with open(out + ".json", "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    with open(out + ".md", "w") as f:
        f.write(render_md(report))
    return report


def render_md(rep):
    env = rep["environment"]
    s = rep["summary"]
    L = [f"# {rep['title']}", ""]
    if rep.get("simulate"):
        L += ["**Dry run inside simdist on the CPU (`--simulate`): not GPU evidence.**", ""]
    L += [f"- date: {env.get('date', '?')}; host: {env.get('hostname', '?')}",
          f"- GPUs: {', '.join(env.get('nvidia_smi') or env.get('gpus') or ['?'])}",
          f"- torch {env.get('torch', '?')} (CUDA {env.get('cuda', '?')}), NCCL {env.get('nccl', '?')}, "
          f"Python {env.get('python', '?')}, world size {env.get('world_size', '?')}",
          f"- NCCL environment: {', '.join(f'{k}={v}' for k, v in sorted((env.get('nccl_env') or {}).items())) or '-'}",
          f"- corpus: {rep['corpus']['path']} (generated {rep['corpus']['generated']} by simdist "
          f"{rep['corpus']['simdist']} on torch {rep['corpus']['torch']}, seeds {len(rep['corpus']['seeds'] or [])}, "
          f"NCCL profiles {', '.join(rep['corpus']['profiles'] or [])})",
          "",
          f"{s['scenarios']} scenarios: " + ", ".join(f"{k} {v}" for k, v in (s.get("verdicts") or {}).items()) +
          f"; {s['known_sim_disagreements']} known simulator disagreement(s). "
          f"PyTorch's CUDA sanitizer matches the expected verdict in {s['sanitizer_agrees_expected']}/{s['scenarios']}"
          f" (misses: {', '.join(s['sanitizer_misses']) or 'none'}; false alarms: "
          f"{', '.join(s['sanitizer_false_alarms']) or 'none'}). Exit status {rep['exit_code']}.", "",
          "A clean simulator verdict agrees when every rank's output digest equals the simulator's (delay 0 and with "
          "2e6 cycles on the producer's stream) and no salted trial differs from its reference; a hazard verdict is "
          "confirmed when at least one of the K trials showed damage (outputs differing from the clean reference run "
          "with the same inputs on some rank), unconfirmed when none did. Damage is given as seen/trials, per delay "
          "in cycles.", "",
          "## Scenarios", ""]
    for r in rep["scenarios"]:
        r.setdefault("world_size", env.get("world_size", rep["corpus"].get("world_size")))
    L += render_verdicts(rep["scenarios"], extra_cols=(
        ("simdist damage d0 / delayed", lambda r: "-" if r.get("sim_damage_fraction") is None else
         f"{r['sim_damage_fraction']:.2f} / " + ("-" if r.get("sim_damage_fraction_delayed") is None
                                                 else f"{r['sim_damage_fraction_delayed']:.2f}")),
        ("CUDA sanitizer", lambda r: r.get("sanitizer", "-"))), witness=False)
    L.append("")
    tim = rep.get("timing")
    if tim:
        L += ["## Fix cost: 8B-like conversion (dequantize blockwise FP8 -> bf16, all_gather_into_tensor)", "",
              f"{tim['layers']} layers of Llama-3-8B shards (q,k,v,o,gate,up,down) at TP={tim.get('tp', '?')}, "
              f"{tim['n_params_per_rank'] / 1e6:.0f}M FP8 params per rank, {tim['gathered_gb_per_rank']:.2f} GB of bf16 "
              f"gathered per rank; {len(tim.get('runs') or [])} run(s) of {tim['iters']} iterations after "
              f"{tim['warmup']} warm-up, strategies interleaved, CUDA events on the current stream (end after "
              "waiting for the side stream), the slowest rank per iteration. min / median / max over each run's "
              "iterations; overhead from the median of all iterations; every sample is in the JSON.", ""]
        if tim.get("tp") == 1:
            L += ["With TP=1 (one GPU) the all_gather_into_tensor is NCCL's one-rank copy: these are the costs of "
                  "dequantize + copy on one GPU, not the 2-GPU figures of earlier reports.", ""]
        runs = tim.get("runs") or []
        head = "| strategy | " + " | ".join(f"run {r['run']}: min / median / max ms" for r in runs) + \
            " | median, all runs | overhead vs unsynced | wrong params vs reference |"
        L += [head, "|" + "---|" * (4 + len(runs))]
        for st, v in tim["strategies"].items():
            cells = [f"{r['strategies'][st]['min_ms']:.2f} / {r['strategies'][st]['median_ms']:.2f} / "
                     f"{r['strategies'][st]['max_ms']:.2f}" for r in runs]
            L.append(f"| {st}: {v['text']} | " + " | ".join(cells) + f" | {v['median_ms']:.2f} | "
                     f"{v['overhead_pct']:+.1f}% | {v['wrong_params']}/{v['params_checked']} |")
        L += ["", "Wrong params: gathered outputs (summed over ranks, runs and measured iterations) differing from a "
              "current-stream reference. For the unsynced variant it is a lower bound: the caching allocator can "
              "hand an iteration the blocks of the previous one, whose stale bytes may already be the right answer.",
              ""]
    te = rep.get("transformer_engine")
    if te:
        L += ["## TransformerEngine cross-check", ""]
        if te.get("status") == "skipped":
            L += [f"Skipped: {te['reason']}.", ""]
        else:
            L += [f"transformer_engine {te.get('te_version')}: fake vs real Float8BlockQuantizer, E4M3, 512x1024 bf16.",
                  "", "| pow2 scales | block dim | data bytes differing | scale_inv entries differing (unpadded) |",
                  "|---|---|---|---|"]
            L += [f"| {r['pow2']} | {r['block_dim']} | {r['data_bytes_differing']} | {r['scale_inv_differing']} |"
                  for r in te["results"]] + [""]
    if rep["disagreements"]:
        L += ["## Disagreements", ""] + [f"- {d}" for d in rep["disagreements"]] + [""]
    known = [r for r in rep["scenarios"] if r.get("known_sim_disagreement")]
    if known:
        L += ["## Known simulator disagreements", ""] + [f"- {r['name']}: {r['known_sim_disagreement']}"
                                                         for r in known] + [""]
    if rep["phase_failures"] or rep["incomplete"]:
        L += ["## Incomplete", ""]
        L += [f"- {x.get('phase', x['type'])} on rank {x.get('rank')}: {x.get('error')}" for x in rep["phase_failures"]]
        L += [f"- not run: {n}" for n in rep["incomplete"]]
        L.append("")
    firsts = [r for r in rep["scenarios"] if r.get("sanitizer_first")]
    if firsts:
        L += ["## CUDA sanitizer: first report per flagged scenario (stack traces left out; see the JSON)", ""]
        for r in firsts:
            first = r.get("sanitizer_summary") or [
                x for x in r["sanitizer_first"].strip().splitlines()
                if x and not x[0].isspace() and not x.startswith("=")]
            L += [f"<details><summary>{r['name']}</summary>", "", "```", *first[:14], "```", "</details>", ""]
    return "\n".join(L) + "\n"


# =========================================================================== main


def simulate(args):
    """Dry run on the CPU: the whole job inside simdist, one fresh simulated world per scenario (a long-lived world
    slows down: notes_engine_bugs.md #6), then one for the timing phase, then the report."""
    import copy

    import simdist
    with open(args.corpus) as f:
        corpus = json.load(f)
    names = [n for n in corpus["scenarios"] if n in S.SCENARIOS and n not in S.KNOWN_SIM_DISAGREEMENTS]
    if args.names:
        keep = set(args.names.split(","))
        names = [n for n in names if n in keep]
    for r in range(args.world_size):
        p = f"{args.out}.rank{r}.jsonl"
        if os.path.exists(p):
            os.remove(p)
    runs = [dict(names=n, skip_timing=True) for n in names]
    if not args.skip_timing:
        runs.append(dict(skip_scenarios=True))
    for extra in runs:
        a = copy.copy(args)
        a.skip_sanitizer, a.append, a.no_report = True, True, True
        for k, v in extra.items():
            setattr(a, k, v)
        simdist.run(worker, world_size=args.world_size, seed=0, nccl="2.8", args=(a,))
    phases = (["scenarios"] if names else []) + ([] if args.skip_timing else ["timing"])
    rep = assemble(args.out, args.corpus, args.world_size, phases=phases, simulate=True)
    print(f"report: {args.out}.md (simulated), exit status {rep['exit_code']}")
    return rep["exit_code"]


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default=os.path.join(ROOT, "docs", "gpu", "corpus.json"))
    p.add_argument("--out", default="report", help="report prefix: writes OUT.md, OUT.json, OUT.rank<r>.jsonl")
    p.add_argument("--trials", type=int, default=20, help="trials per hazard scenario (K)")
    p.add_argument("--clean-trials", type=int, default=4, help="salted trials per clean scenario")
    p.add_argument("--delay", type=int, default=S.GPU_DELAY_CYCLES, help="torch.cuda._sleep cycles of delayed trials")
    p.add_argument("--names", default="", help="comma-separated subset of scenarios")
    p.add_argument("--skip-sanitizer", action="store_true")
    p.add_argument("--skip-timing", action="store_true")
    p.add_argument("--sanitizer-timeout", type=int, default=180)
    p.add_argument("--timing-layers", type=int, default=8)
    p.add_argument("--timing-iters", type=int, default=10)
    p.add_argument("--timing-warmup", type=int, default=3)
    p.add_argument("--timing-runs", type=int, default=2, help="fix-cost runs (each --timing-iters iterations)")
    p.add_argument("--timing-scale", type=int, default=1, help="divide the 8B shapes by this (dry runs)")
    p.add_argument("--nccl-timeout", type=int, default=180)
    p.add_argument("--deadline", type=int, default=0, help="hard stop after this many seconds (0: none)")
    p.add_argument("--simulate", action="store_true", help="dry run inside simdist on the CPU")
    p.add_argument("--assemble", action="store_true", help="only build the report from OUT.rank<r>.jsonl")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--skip-scenarios", action="store_true")
    p.add_argument("--append", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-report", action="store_true", help=argparse.SUPPRESS)
    # sanitizer subprocess
    p.add_argument("--sanitizer-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--local-rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--result", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    args.out = os.path.abspath(args.out)
    args.corpus = os.path.abspath(args.corpus)
    if args.sanitizer_worker:
        return sanitizer_worker(args)
    if args.assemble:
        rep = assemble(args.out, args.corpus, args.world_size)
        print(f"report: {args.out}.md, exit status {rep['exit_code']}")
        return rep["exit_code"]
    if args.deadline:
        def stop():
            log(f"deadline of {args.deadline} s reached: stopping (evidence so far is in {args.out}.rank*.jsonl)")
            os._exit(124)
        t = threading.Timer(args.deadline, stop)
        t.daemon = True
        t.start()
    if args.simulate:
        return simulate(args)
    return worker(args)


if __name__ == "__main__":
    sys.exit(main())
