"""The fuzz campaign's programs, example log and summary, and the measure of the fuzzer (time to find).

- `refit_case(**case)`: one rank of the fakes' GRPO refit loop for a case of `strategies.refit_cases()`
  (JSON keyword arguments, so `RunResult.replay` is a command that runs it again);
- `incident_kernel(**case)`: the incident's kernel (FP8 shards dequantized, then TP-gathered) with one of its
  syncs, or without it (`drop=True`), for a case of `strategies.kernel_cases()`; `kernel_reference` is its
  answer computed on the CPU;
- `record(...)`: with SIMDIST_FUZZ_LOG set, every example a property runs is appended to that JSON-lines file
  (what `ci/fuzz` summarizes: configurations and schedules explored, failures and their replay commands);
- `python -m simdist.properties.campaign summary DIR`: the summary of a campaign's logs.

The measure of the fuzzer (time to find each fault switch and sync) is `simdist.properties.timetofind`.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time
from typing import List

LOG_ENV = "SIMDIST_FUZZ_LOG"
TRACE_ENV = "SIMDIST_TRACE_DIR"


# ================================================================================================ programs
def world_of(case) -> int:
    if "world" in case:
        return int(case["world"])
    return int(case["tp"]) * int(case["pp"]) * int(case["dp"])


def program_kwargs(case) -> dict:
    """The program's keyword arguments: the case less what `simdist.run` takes itself (world size, NCCL)."""
    return {k: v for k, v in case.items() if k not in ("nccl", "world", "dp")}


def refit_config(recipe="bf16", fp8_param=False, shape=None):
    from simdist.fakes.megatron_core import TransformerConfig
    return TransformerConfig(**(shape or {}), fp8_recipe=recipe, fp8_param=bool(fp8_param))


def refit_case(tp=1, pp=1, ep=1, recipe="bf16", fp8_param=False, shape=None, steps=2, refit="colocated",
               overlap_param_gather=True, group_bytes=1 << 20, faults=(), **loop_options):
    """One rank of `simdist.fakes.nemo_rl.grpo_refit_loop` (DP = world / (TP x PP)); per step: the HF names whose
    refitted weight differs from the no-parallelism reference, names holding NaN, the weights' digest and
    token_mult_prob_error. Other keyword arguments (`overlap_param_gather_with_optimizer_step`, `fixes`...) go
    to the loop as they are."""
    from simdist.fakes import nemo_rl
    recs = nemo_rl.grpo_refit_loop(refit_config(recipe, fp8_param, shape), tp=tp, pp=pp, ep=ep, steps=steps,
                                   faults=frozenset(faults), refit=refit, overlap_param_gather=overlap_param_gather,
                                   group_bytes=group_bytes, **loop_options)
    return [{"step": r["step"], "mismatched": list(r["mismatched"]), "nan_weights": list(r["nan_weights"]),
             "digest": r["digest"], "metric": r["token_mult_prob_error"]} for r in recs]


def _quantizer(recipe, block, device):
    from simdist.fakes import transformer_engine as te
    e4m3 = te.TE_DType.kFloat8E4M3
    if recipe == "per-tensor":
        return te.Float8CurrentScalingQuantizer(e4m3, device, rowwise=True, columnwise=False)
    if recipe == "mxfp8":
        return te.MXFP8Quantizer(e4m3, rowwise=True, columnwise=False)
    return te.Float8BlockQuantizer(e4m3, rowwise=True, columnwise=False, force_pow_2_scales=recipe.endswith("pow2"),
                                   block_scaling_dim=1 if tuple(block or (128, 128))[0] == 1 else 2)


def _shard(rank, i, rows, cols):
    import torch
    g = torch.Generator().manual_seed(7919 * rank + 104729 * i + 17)
    return torch.randn(rows, cols, generator=g).to(torch.bfloat16)


def incident_kernel(sync="wait_stream", drop=False, recipe="blockwise-fp32", block=(128, 128), rows=256, cols=256,
                    weights=2):
    """The incident in one kernel, as torchrun code: this rank's FP8 weight shards (TE fake, `recipe`/`block`) are
    dequantized and TP-gathered with `all_gather_into_tensor`, each gathered weight then read by a consumer.

    The dequantize runs on a side stream that waits once for the parameters, ordered before the gather by
    `sync` (with `record_stream` so its block is not reused early): `wait_stream`, `wait_event` (an event recorded
    after the dequantize), `synchronize` (`torch.cuda.synchronize()`), `record_stream` (wait_stream, and the
    record_stream is the sync under test), or `work.wait` (dequantize on the current stream, async gather, the
    consumer after `work.wait()`). `drop=True` removes that one sync: the mutant.
    """
    import torch
    import torch.distributed as dist
    rank, ws = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", torch.cuda.current_device())
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    q = _quantizer(recipe, block, dev)
    params = [q(_shard(rank, i, rows, cols).to(dev)) for i in range(weights)]
    side.wait_stream(cur)
    outs = []
    for p in params:
        if sync == "work.wait":
            w = p.dequantize(dtype=torch.bfloat16)
        else:
            with torch.cuda.stream(side):
                w = p.dequantize(dtype=torch.bfloat16)
                ev = torch.cuda.Event()
                ev.record()
            if sync == "synchronize":
                if not drop:
                    torch.cuda.synchronize()
            elif sync == "wait_event":
                if not drop:
                    cur.wait_event(ev)
            elif not (sync == "wait_stream" and drop):
                cur.wait_stream(side)
            if not (sync == "record_stream" and drop):
                w.record_stream(cur)
        full = torch.empty(ws * rows, cols, dtype=torch.bfloat16, device=dev)
        work = dist.all_gather_into_tensor(full, w, async_op=sync == "work.wait")
        if sync == "work.wait" and not drop:
            work.wait()
        outs.append(full * 1)  # the consumer (a GEMM in the real stack)
        if sync == "work.wait" and drop:
            work.wait()
        del w
    return outs


@functools.lru_cache(maxsize=256)
def _kernel_reference(recipe, block, rows, cols, weights, world):
    import torch
    q = _quantizer(recipe, block, torch.device("cpu"))
    return tuple(torch.cat([q(_shard(r, i, rows, cols)).dequantize(dtype=torch.bfloat16) for r in range(world)])
                 for i in range(weights))


def kernel_reference(case):
    """The gathered weights computed on the CPU with no parallelism and no streams."""
    return _kernel_reference(case["recipe"], tuple(case["block"]) if case.get("block") else None, case["rows"],
                             case["cols"], case["weights"], world_of(case))


# ================================================================================================ example log
def describe(case) -> str:
    """A short configuration key (what `ci/fuzz` counts as a configuration)."""
    if not ("sync" in case or "recipe" in case and "shape" in case):
        return json.dumps(case, sort_keys=True, default=str)
    if "sync" in case:
        blk = "x".join(map(str, case["block"])) if case.get("block") else "tensor"
        return (f"kernel ws{case['world']} {case['sync']}{' dropped' if case.get('drop') else ''} {case['recipe']} "
                f"{blk} {case['rows']}x{case['cols']} w{case['weights']} nccl{case['nccl']}")
    s = case.get("shape") or {}
    moe = f" moe{s['num_moe_experts']}" if s.get("num_moe_experts") else ""
    return (f"TP{case['tp']} PP{case['pp']} DP{case['dp']} EP{case['ep']} {case['recipe']}"
            f"{' fp8_param' if case['fp8_param'] else ''} h{s.get('hidden_size')} f{s.get('ffn_hidden_size')} "
            f"L{s.get('num_layers')} heads{s.get('num_attention_heads')}/{s.get('num_query_groups')}{moe} "
            f"steps{case['steps']} {case['refit']}{' overlap' if case['overlap_param_gather'] else ''}"
            f"{'+opt' if case.get('overlap_param_gather_with_optimizer_step') else ''} "
            f"g{case['group_bytes']} nccl{case['nccl']}" + (f" faults={','.join(case['faults'])}"
                                                            if case.get("faults") else ""))


def current_test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]


def record(prop, case, schedule, ok, *, failure=None, replay=None, trace=None, final=False, world=None):
    """Append one example to $SIMDIST_FUZZ_LOG (no-op when unset)."""
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = {"t": time.time(), "pid": os.getpid(), "test": current_test(), "property": prop,
            "config": describe(case), "case": case, "schedule": str(schedule) if schedule is not None else None,
            "nonzero_delays": getattr(schedule, "nonzero_delays", None), "world": world, "ok": ok, "final": final}
    if not ok:
        line.update(failure=(failure or "")[:2000], replay=replay, trace=trace)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(line, default=str) + "\n")


def read_log(path) -> List[dict]:
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


# ================================================================================================ campaign summary
def summarize(log_dir, profile=None, out=sys.stdout) -> int:
    """Print a campaign's summary from its worker logs (worker-*.jsonl) and pytest outputs (worker-*.out):
    configurations and schedules explored, examples per property against the profile budgets (ci vs this one),
    failures with their replay commands, traces and Hypothesis reproduce blobs. Returns the number of failing
    properties."""
    import glob
    import re

    from .settings import budget_for, current_profile_name
    profile = profile or current_profile_name()
    logs = sorted(glob.glob(os.path.join(log_dir, "worker-*.jsonl")))
    lines = [r for p in logs for r in read_log(p)]
    costs = {r["test"]: r["cost"] for r in lines if r.get("manifest")}
    rows = [r for r in lines if not r.get("manifest")]
    configs = {r["config"] for r in rows}
    schedules = {r["schedule"] for r in rows}
    pairs = {(r["config"], r["schedule"]) for r in rows}
    w = out.write
    w(f"\nsimdist fuzz summary: {len(logs)} worker log(s) in {log_dir}, profile {profile}\n")
    w(f"  examples run: {len(rows)} (shrinking and database replays included); configurations explored: "
      f"{len(configs)}; schedules explored: {len(schedules)} distinct, {len(pairs)} (configuration, schedule) "
      f"pairs\n")
    by_test = {}
    for r in rows:
        by_test.setdefault(r["test"] or r["property"], []).append(r)
    w(f"\n  examples per property: run by this campaign (all workers, shrinking included), and each profile's budget "
      f"per worker (ci: what CI runs)\n")
    w(f"  {'property':<70} {'run':>6} {'ci':>5} {'dev':>5} {'nightly':>8} {'nightly/ci':>10}\n")
    for name in sorted(set(costs) | set(by_test)):
        n = len(by_test.get(name, []))
        cost = costs.get(name)
        label = name if len(name) <= 70 else "..." + name[-67:]
        if cost is None:
            w(f"  {label:<70} {n:>6} {'?':>5} {'?':>5} {'?':>8}\n")
            continue
        b = {p: budget_for(p, cost) for p in ("ci", "dev", "nightly")}
        w(f"  {label:<70} {n:>6} {b['ci']:>5} {b['dev']:>5} {b['nightly']:>8} {b['nightly'] / b['ci']:>9.0f}x\n")
    fails = [r for r in rows if not r["ok"]]
    failing = sorted({r["test"] or r["property"] for r in fails})
    w(f"\n  failures: {len(failing)} failing propert{'y' if len(failing) == 1 else 'ies'} ({len(fails)} failing "
      f"examples, shrinking included)\n")
    for t in failing:
        mine = [r for r in fails if (r["test"] or r["property"]) == t]
        finals = [r for r in mine if r.get("final")]
        w(f"  - {t}\n")
        shown = set()
        for r in (finals or mine[-1:]):  # each worker's shrunk example (they may stop at different minima)
            key = (r["config"], r["schedule"])
            if key in shown:
                continue
            shown.add(key)
            w(f"      {'shrunk to' if finals else 'last failing example'} (pid {r['pid']}): {r['config']} | "
              f"{r['schedule']}\n")
            lines = (r.get("failure") or "").splitlines()
            if len(lines) > 1:
                w(f"        {lines[-3].strip()[:150] if len(lines) > 3 else lines[1].strip()[:150]}\n")
            w(f"        replay: {r.get('replay')}\n")
            if r.get("trace"):
                w(f"        trace:  {r['trace']}\n")
    for p in sorted(glob.glob(os.path.join(log_dir, "worker-*.out"))):
        with open(p, errors="replace") as f:
            for m in re.finditer(r"@reproduce_failure\([^)]*\)", f.read()):
                w(f"  hypothesis reproduce blob ({os.path.basename(p)}): {m.group(0)}\n")
    return len(failing)


def _main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python -m simdist.properties.campaign")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summary", help="summarize a campaign's worker logs")
    s.add_argument("log_dir")
    s.add_argument("--profile", default=None)
    a = ap.parse_args(argv)
    return 1 if summarize(a.log_dir, a.profile) else 0


if __name__ == "__main__":
    sys.exit(_main())
