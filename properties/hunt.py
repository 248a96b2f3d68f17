"""`simdist hunt`: which candidate cause fits an incident's evidence? (default: NeMo-RL #1164, FP8 refit NaN)

The hunt runs the GRPO refit program of a stack (``stack="fakes"``: fakes/, plain torch code) in simulated
worlds, for the faithful stack (the real code's ordering at the versions named in ``CANDIDATES``) and for each
candidate cause (one ordering edge dropped, each tied to the real source line it corresponds to, or labelled
hypothetical), over a sweep of configurations (TP x DP x recipe x fp8_param, PP=2), two model depths and
several schedule seeds. It compares every simulated cell with the incident's evidence, read from a file, and
generates every sentence of its conclusion from that comparison.

Evidence file (``--reported FILE``; default ``properties/evidence/nemo_rl_1164.json``), JSON::

    {"format": "simdist-hunt-evidence/1",
     "incident": "<one line>", "source": "<where the observations come from>", "symptom": "<what was measured>",
     "run": {"tp": 2, "pp": 2, "dp": 2, "recipe": "blockwise-fp32", "fp8_param": true, "refit": "colocated"},
     "run_status": {"<factor>": "observed: <why>" | "inferred: <why>", ...},
     "observations": [
        {"change": {<factor>: <value>, ...},   # this cell = the run with these factors changed; {} = the run
         "status": "observed" | "inferred" | "unknown",
         "outcome": "nan" | "high" | "fine",   # NaN metric / metric >= 1.05 / fine at every step (not for unknown)
         "onset_step": 2,                      # nan/high: first bad step (1-based); the steps before were fine
         "quote": "<the report's words>", "note": "<optional>"},
        {"change": {"fix": "<name in fakes.megatron_core.FIXES>"}, ...},   # the run with an edge added
        {"change": {"program": "<name>"}, ...}]}                         # outside the refit program: listed only

Factors: tp, pp, dp, recipe (per-tensor, blockwise-pow2, blockwise-fp32, mxfp8, bf16), fp8_param, refit
(colocated, broadcast, packed-broadcast). A simulated configuration that no observed/inferred observation
describes is unknown: it prints ``?`` and counts neither way; so does a cell whose observation is ``unknown``.

What a cell shows (per depth, one symbol per GRPO step; ``/`` separates the depths; ``~`` = the seeds differ,
the symbols are seed 0's): ``.`` clean, ``h`` hazard with intact values, ``w`` weights differ from the reference
but the metric stays below 1.05, ``M`` metric >= 1.05, ``N`` NaN metric, ``X`` the run crashed. A schedule seed
matters only where there is a hazard: a run without one is ordered in every schedule, so its values are the
same in all of them and it runs once (the text says which cells ran all seeds).

The fit: a candidate matches an evidence cell in one replicate (depth, seed) when its simulated metric per step
agrees with the reported outcome (fine: no NaN and below 1.05 at every step; NaN from step k: fine before k,
NaN at k). It reproduces the incident when it matches every evidence cell in every replicate, is fragile when
it does in some replicates only, and does not fit otherwise; the closest is the one matching most cells on
average over the replicates. The fix of the best candidate is then run in the full refit program under every
configuration of the sweep and a sample of schedules, and its cost is read from the newest committed GPU
report (``docs/gpu-fixcost-*.json``), or the hunt says there is none.

A second stack (real Megatron-Core / Megatron-Bridge) plugs in with ``register_stack(name, fn)``:
``refit_program(..., stack=name)`` then calls ``fn(**same keywords)``.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

import simdist

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_EVIDENCE = os.path.join(HERE, "evidence", "nemo_rl_1164.json")
FORMAT = "simdist-hunt-evidence/1"
FACTORS = ("tp", "pp", "dp", "recipe", "fp8_param", "refit")
RECIPES = ("per-tensor", "blockwise-pow2", "blockwise-fp32", "mxfp8", "bf16")
REFITS = ("colocated", "broadcast", "packed-broadcast")
OUTCOMES = ("nan", "high", "fine")
METRIC_BOUND = 1.05      # NeMo-RL's acceptance: token_mult_prob_error < 1.05
LR = 0.02                # one synthetic step moves a weight by ~0.1% of its scale (see DEPTHS' note)
DEPTHS = (2, 4)          # decoder layers: 1 and 2 per pipeline stage at PP=2
NCCL = "2.7"             # the incident ran torch 2.7.1: collectives on ProcessGroupNCCL's internal stream
TARGET_DELAY_NS = 5_000_000
DEFAULT_CANDIDATES = ("faithful", "refit_during_param_gather", "ipc_pack_no_sync", "dequant_side_stream",
                      "packed_broadcast_unjoined")  # --candidates all adds the other hypothetical ones
VERSIONS = ("NeMo-RL 94a3d49 (2025-09-12, the incident's), megatron-core 0.16.1, Megatron-Bridge 0.3.1, "
            "TransformerEngine 2.5, torch 2.7 NCCL semantics")


# ============================================================================ candidates, from the real code
@dataclass(frozen=True)
class Candidate:
    name: str
    faults: Tuple[str, ...]
    fix: str                      # the edge that repairs it (fakes.megatron_core.FIXES)
    counterpart: str              # "real" or "hypothetical"
    edge: str                     # the ordering it drops, in words
    sources: Tuple[str, ...]      # library version file:line of the ordering it drops (or why none)
    refit: Optional[str] = None   # refit path it lives on, if not the evidence's


CANDIDATES: Dict[str, Candidate] = {c.name: c for c in (
    Candidate(
        "faithful", (), "param_sync_before_refit", "real",
        "none dropped: the code's own ordering; the optimizer step leaves the DP param all-gather undispatched "
        "(overlap_param_gather) and the refit comes next, so the other DP ranks' slices are one step old",
        ("megatron-core 0.16.1 optimizer/distrib_optimizer.py:2617-2619 (no param all-gather in the step with "
         "overlap_param_gather)",
         "megatron-core 0.16.1 distributed/param_and_grad_buffer.py:322-323 (dispatched by the forward "
         "pre-hook's finish_param_sync)",
         "NeMo-RL 94a3d49 nemo_rl/algorithms/grpo.py:615-619 and 758 (refit before the next forward, right "
         "after train()'s optimizer.step at megatron_policy_worker.py:989)",
         "examples/configs/grpo_math_1B_megatron.yaml:114,131 (use_distributed_optimizer, overlap_param_gather "
         "true, inherited by the 8B recipe)")),
    Candidate(
        "refit_during_param_gather", ("refit_during_param_gather",), "param_sync_before_refit", "real",
        "DP param all-gather (dispatched asynchronously in the optimizer step) -> the refit reading the params",
        ("megatron-core 0.16.1 optimizer/optimizer.py:1247-1250 (overlap_param_gather_with_optimizer_step: "
         "start_param_sync(force_dispatch=True) right after the step)",
         "NeMo-RL 94a3d49 nemo_rl/models/policy/megatron_policy_worker.py:278 (the option is passed through)",
         "megatron-core 0.16.1 distributed/distributed_data_parallel.py:390-416 (only the forward pre-hook "
         "waits for it)")),
    Candidate(
        "ipc_pack_no_sync", ("ipc_pack_no_sync",), "ipc_synchronize", "hypothetical",
        "pack copy_ on the trainer's stream -> the inference engine reading the IPC buffer on its stream",
        ("none: NeMo-RL 94a3d49 megatron_policy_worker.py:1655-1660 hands the packed buffer over without a "
         "synchronize, but torch's reduce_tensor records an IPC event on the current stream "
         "(torch/csrc/CudaIPCTypes.cpp CudaIPCSentData) that rebuild_cuda_tensor makes the consumer wait for "
         "(torch/csrc/StorageSharing.cpp THPStorage_newSharedCuda: cudaStreamWaitEvent)",
         "the explicit synchronize arrived later: NeMo-RL 3a69c2168 nemo_rl/models/policy/utils.py:298-299")),
    Candidate(
        "dequant_side_stream", ("dequant_side_stream",), "side_stream_wait", "hypothetical",
        "blockwise dequantize on a side stream -> its consumer (TP all-gather, PP broadcast, pack copy)",
        ("none (the reporter's suspicion): TransformerEngine 2.5 "
         "pytorch/tensor/_internal/float8_blockwise_tensor_base.py:221-293 dequantizes with torch ops on the "
         "current stream; Megatron-Bridge 0.3.1 src/megatron/bridge/models/conversion/param_mapping.py:709-713 "
         "calls it inline",)),
    Candidate(
        "no_record_stream", ("no_record_stream",), "side_stream_wait", "hypothetical",
        "consumer's use of a side-stream dequantize output -> the reuse of its freed block (record_stream)",
        ("none: as dequant_side_stream, with the wait_stream but without record_stream",)),
    Candidate(
        "async_gather_no_wait", ("async_gather_no_wait",), "gather_wait", "hypothetical",
        "asynchronous TP all-gather -> the concat reading its outputs (work.wait())",
        ("none: Megatron-Bridge 0.3.1 param_mapping.py:525-526 gathers synchronously "
         "(torch.distributed.all_gather, async_op=False)",)),
    Candidate(
        "packed_broadcast_unjoined", ("packed_broadcast_unjoined",), "join_side_streams", "real",
        "packing/broadcast side streams -> generation reading the weights (no final join)",
        ("NeMo-RL v0.4.0 nemo_rl/utils/packed_tensor.py:64-95 (producer) and 153-205 (consumer): side streams "
         "synchronized only before their buffer's reuse, never joined; the join came with 705340674 "
         "(packed_tensor.py:104-105, 215-216). Non-colocated refit only, from a777f2aa1 (Oct 2025): after the "
         "incident",),
        refit="packed-broadcast"),
)}


# ============================================================================ the refit program (stacks)
_STACKS = {}
_LAZY_STACKS = {"real": "simdist.properties.real_stack:real_refit"}  # real Megatron-Core + Megatron-Bridge
STACK = "fakes"  # the stack every cell's refit program runs on (main sets it from --stack)


def _stack_kwargs() -> dict:
    return {} if STACK == "fakes" else {"stack": STACK}


def _transport(kw: dict) -> str:
    """A stack other than the fakes runs real libraries with module globals (Megatron-Core): ranks as processes."""
    return "threads" if kw.get("stack", "fakes") == "fakes" else "processes"


def _prepare_stack(stack: str) -> str:
    """Select `stack` for this hunt; returns its versions line (a real stack may refuse: SystemExit, why)."""
    global STACK
    STACK = stack
    if stack == "fakes":
        return VERSIONS
    module = _LAZY_STACKS[stack].partition(":")[0]
    return __import__(module, fromlist=["prepare_hunt"]).prepare_hunt()


def register_stack(name: str, fn) -> None:
    """Plug a stack into ``refit_program(stack=name)``: `fn` takes refit_program's keywords (less `stack`)
    and returns refit_program's per-step records on this rank."""
    _STACKS[name] = fn


def hunt_model_config(recipe="blockwise-fp32", fp8_param=True, layers=2):
    """The smallest Llama-like shape whose TP=2 shards are whole 128x128 FP8 tiles (hidden 128, 2 heads and 2
    query groups of 128 channels, ffn 256, vocab 256)."""
    from simdist.fakes.megatron_core import TransformerConfig
    return TransformerConfig(hidden_size=128, num_attention_heads=2, num_query_groups=2, kv_channels=128,
                             ffn_hidden_size=256, num_layers=layers, vocab_size=256, fp8_recipe=recipe,
                             fp8_param=fp8_param)


def _fakes_refit(tp, pp, recipe, fp8_param, faults, fixes, steps, layers, refit, lr, metric, seed):
    from simdist.fakes import nemo_rl
    recs = nemo_rl.grpo_refit_loop(hunt_model_config(recipe, fp8_param, layers), tp=tp, pp=pp, steps=steps,
                                   seed=seed, faults=frozenset(faults), fixes=frozenset(fixes), refit=refit,
                                   lr=lr, compute_metric=metric, digest=False, ipc_pack_threshold=1)
    return [{"mismatched": len(r["mismatched"]), "metric": r.get("token_mult_prob_error", float("nan"))}
            for r in recs]


register_stack("fakes", _fakes_refit)


def refit_program(tp=2, pp=2, recipe="blockwise-fp32", fp8_param=True, faults=(), fixes=(), steps=2, layers=2,
                  refit="colocated", lr=LR, metric=True, seed=0, stack="fakes"):
    """One rank of the GRPO refit loop (NeMo-RL's order: refit -> generation -> logprobs -> train). The world
    size sets DP = world / (tp x pp). `fixes` are ordering edges added on top of the real code (``()`` = the
    real code). Returns per-step records ``{"mismatched": n, "metric": token_mult_prob_error}``."""
    if stack not in _STACKS and stack in _LAZY_STACKS:  # (rank processes import it here)
        module, _, name = _LAZY_STACKS[stack].partition(":")
        register_stack(stack, getattr(__import__(module, fromlist=[name]), name))
    try:
        fn = _STACKS[stack]
    except KeyError:
        raise ValueError(f"unknown stack {stack!r}; registered: {sorted(_STACKS)} (register_stack adds one)")
    return fn(tp=tp, pp=pp, recipe=recipe, fp8_param=fp8_param, faults=tuple(faults), fixes=tuple(fixes),
              steps=steps, layers=layers, refit=refit, lr=lr, metric=metric, seed=seed)


# ============================================================================ evidence
class EvidenceError(ValueError):
    pass


@dataclass
class Observation:
    change: dict
    status: str
    outcome: Optional[str] = None
    onset_step: Optional[int] = None
    quote: str = ""
    note: str = ""

    @property
    def counts(self):
        return self.status in ("observed", "inferred")

    def reported(self) -> str:
        if not self.counts:
            return "?"
        if self.outcome == "fine":
            return "fine"
        return f"{'NaN' if self.outcome == 'nan' else 'high'}@{self.onset_step}"


@dataclass
class Evidence:
    path: str
    incident: str
    source: str
    symptom: str
    run: dict
    run_status: dict
    observations: List[Observation]

    @classmethod
    def load(cls, path: str) -> "Evidence":
        with open(path) as f:
            try:
                d = json.load(f)
            except ValueError as e:
                raise EvidenceError(f"{path}: not JSON ({e})") from None
        if not isinstance(d, dict):
            raise EvidenceError(f"{path}: expected a JSON object with 'format' {FORMAT!r}, got {type(d).__name__}")
        if d.get("format") != FORMAT:
            raise EvidenceError(f"{path}: 'format' must be {FORMAT!r}, got {d.get('format')!r}")
        run = dict(d.get("run") or {})
        missing = [k for k in ("tp", "pp", "dp", "recipe", "fp8_param") if k not in run]
        if missing:
            raise EvidenceError(f"{path}: 'run' lacks {missing}")
        run.setdefault("refit", "colocated")
        _check_config(run, path)
        obs = []
        for i, o in enumerate(d.get("observations") or []):
            where = f"{path}: observations[{i}]"
            status = o.get("status")
            if status not in ("observed", "inferred", "unknown"):
                raise EvidenceError(f"{where}: status must be observed, inferred or unknown, got {status!r}")
            change = dict(o.get("change") or {})
            outcome, onset = o.get("outcome"), o.get("onset_step")
            if status != "unknown":
                if outcome not in OUTCOMES:
                    raise EvidenceError(f"{where}: outcome must be one of {OUTCOMES}, got {outcome!r}")
                if outcome != "fine" and not (isinstance(onset, int) and onset >= 1):
                    raise EvidenceError(f"{where}: outcome {outcome!r} needs onset_step >= 1")
            if "fix" in change:
                from simdist.fakes.megatron_core import FIXES
                if change["fix"] not in FIXES:
                    raise EvidenceError(f"{where}: unknown fix {change['fix']!r}; known: {sorted(FIXES)}")
            _check_config({**run, **{k: v for k, v in change.items() if k in FACTORS}}, where)
            obs.append(Observation(change, status, outcome, onset if outcome != "fine" else None,
                                   o.get("quote", ""), o.get("note", "")))
        return cls(path, d.get("incident", os.path.basename(path)), d.get("source", ""), d.get("symptom", ""),
                   run, dict(d.get("run_status") or {}), obs)

    def config_of(self, o: Observation) -> dict:
        return {**self.run, **{k: v for k, v in o.change.items() if k in FACTORS}}

    def lookup(self, config: dict, fix: Optional[str] = None) -> Optional[Observation]:
        """The observation describing this simulated configuration (None: unknown)."""
        hit = None
        for o in self.observations:
            if "program" in o.change or o.change.get("fix") != fix:
                continue
            if self.config_of(o) == {k: config[k] for k in self.config_of(o)}:
                hit = o if (hit is None or (o.counts and not hit.counts)) else hit
        return hit

    def inferred_factors(self) -> List[str]:
        return [k for k in FACTORS if str(self.run_status.get(k, "")).startswith("inferred")]

    def steps_needed(self) -> int:
        return max([2] + [o.onset_step for o in self.observations if o.counts and o.onset_step])

    def fixes_observed(self) -> List[str]:
        return sorted({o.change["fix"] for o in self.observations if "fix" in o.change})


def _check_config(c: dict, where: str) -> None:
    for k in ("tp", "pp", "dp"):
        if k in c and not (isinstance(c[k], int) and c[k] >= 1):
            raise EvidenceError(f"{where}: {k} must be a positive integer, got {c[k]!r}")
    if "recipe" in c and c["recipe"] not in RECIPES:
        raise EvidenceError(f"{where}: recipe must be one of {RECIPES}, got {c['recipe']!r}")
    if "fp8_param" in c and not isinstance(c["fp8_param"], bool):
        raise EvidenceError(f"{where}: fp8_param must be true or false")
    if "refit" in c and c["refit"] not in REFITS:
        raise EvidenceError(f"{where}: refit must be one of {REFITS}, got {c['refit']!r}")


# ============================================================================ the sweep
def sweep_configs(evidence: Evidence, wide: bool = False) -> List[dict]:
    """Every configuration an observed or inferred observation describes; those with the run's recipe and
    fp8_param at DP=1 as well as DP=2. With `wide`: every one at DP 1 and 2 and PP 1 and the run's, plus the
    TP {1, 2} x (recipe, fp8_param) in {(blockwise FP32 scales, on), (same, off), (per-tensor, on)} cross
    product."""
    base = []
    for o in evidence.observations:
        if o.counts and "program" not in o.change and "fix" not in o.change:
            base.append(evidence.config_of(o))
    if wide:
        for recipe, fp8 in (("blockwise-fp32", True), ("blockwise-fp32", False), ("per-tensor", True)):
            for tp in (1, 2):
                base.append(dict(evidence.run, tp=tp, recipe=recipe, fp8_param=fp8))
    out = []
    pps = sorted({evidence.run["pp"], 1}) if wide else [evidence.run["pp"]]
    run_variant = (evidence.run["recipe"], evidence.run["fp8_param"])
    for c in base:
        for pp in pps:
            dps = (1, 2) if wide or (c["recipe"], c["fp8_param"]) == run_variant else (c["dp"],)
            for dp in dps:
                x = dict(c, pp=pp if c["pp"] == evidence.run["pp"] else c["pp"], dp=dp)
                if x not in out:
                    out.append(x)
    order = {"recipe": {"blockwise-fp32": 0, "blockwise-pow2": 1, "per-tensor": 2, "mxfp8": 3, "bf16": 4}}
    out.sort(key=lambda c: (-c["pp"], not c["fp8_param"], order["recipe"].get(c["recipe"], 9), c["tp"], c["dp"]))
    return out


def _cfg_text(c: dict) -> str:
    recipe = {"blockwise-fp32": "blockwise", "blockwise-pow2": "block-pow2"}.get(c["recipe"], c["recipe"])
    s = f"TP{c['tp']} PP{c['pp']} DP{c['dp']} {recipe:<10} fp8_param={'on ' if c['fp8_param'] else 'off'}"
    if c.get("fix"):
        s += f" +{c['fix']}"
    return s


# ============================================================================ cells
@dataclass
class Replicate:
    seed: int
    steps: List[str]            # per step: '.', 'h', 'w', 'M', 'N', 'X'
    metrics: List[float]
    hazards: List[str]
    error: str = ""

    def outcomes(self) -> List[str]:
        return ["nan" if s == "N" else "high" if s in ("M", "X") else "fine" for s in self.steps]


@dataclass
class Cell:
    candidate: str
    config: dict
    depth: int
    replicates: List[Replicate] = field(default_factory=list)

    @property
    def varies(self) -> bool:
        return len({tuple(r.steps) for r in self.replicates}) > 1

    def text(self) -> str:
        return "".join(self.replicates[0].steps) if self.replicates else "?"


def _symbols(res, steps) -> Tuple[List[str], List[float]]:
    hz = bool(res.hazards)
    out, metrics = [], []
    for i in range(steps):
        recs = [r[i] for r in res.returns]
        m = [x["metric"] for x in recs]
        worst = max((x for x in m if x == x), default=float("nan"))
        metrics.append(float("nan") if any(x != x for x in m) else worst)
        if any(x != x for x in m):
            out.append("N")
        elif worst >= METRIC_BOUND:
            out.append("M")
        elif any(x["mismatched"] for x in recs):
            out.append("w")
        else:
            out.append("h" if hz else ".")
    return out, metrics


def cell_kwargs(candidate: str, config: dict, depth: int, steps: int) -> dict:
    cand = CANDIDATES[candidate]
    fixes = tuple(sorted({config["fix"]} if config.get("fix") else set()))
    return dict(tp=config["tp"], pp=config["pp"], recipe=config["recipe"], fp8_param=config["fp8_param"],
                faults=cand.faults, fixes=fixes, steps=steps, layers=depth, refit=cand.refit or config["refit"], **_stack_kwargs())


def run_replicate(candidate: str, config: dict, depth: int, seed: int, steps: int, poison: str) -> Replicate:
    """One schedule seed of a cell: the simulated refit and what it shows (a crash is shown as such)."""
    kw = cell_kwargs(candidate, config, depth, steps)
    world = config["tp"] * config["pp"] * config["dp"]
    try:
        res = simdist.run(refit_program, world_size=world, seed=seed, kwargs=kw, nccl=NCCL, poison=poison, transport=_transport(kw))
        sym, metrics = _symbols(res, steps)
        return Replicate(seed, sym, metrics, sorted({h.kind for h in res.hazards}))
    except Exception as e:  # noqa: BLE001 - a crashing cell is shown as such, never hidden
        return Replicate(seed, ["X"] * steps, [float("nan")] * steps, [],
                         f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")


def _more_seeds(rep: Replicate) -> bool:
    """Whether a cell needs its other seeds: no hazard means every access is ordered, so every schedule gives
    seed 0's values."""
    return bool(rep.hazards or rep.error)


def run_cell(job) -> Cell:
    """One (candidate, configuration, depth): seed 0, and every other seed if seed 0 found a hazard (`seeds`
    is 1 for cells the evidence does not describe: they are shown, never fitted)."""
    candidate, config, depth, seeds, steps, poison = job
    cell = Cell(candidate, config, depth)
    for seed in range(seeds):
        cell.replicates.append(run_replicate(candidate, config, depth, seed, steps, poison))
        if seed == 0 and not _more_seeds(cell.replicates[0]):
            break  # no hazard: every access is ordered, so every schedule gives these values
    return cell


def _pool_map(fn, jobs, progress, what, processes=None, cost=None):
    """Map over worker processes (each simulated run is independent and deterministic); results in job order.
    Jobs are dispatched most expensive first (`cost`) so the cores finish together."""
    processes = processes or min(len(jobs), os.cpu_count() or 1)
    order = sorted(range(len(jobs)), key=lambda i: -(cost(jobs[i]) if cost else 0))
    out = [None] * len(jobs)
    t0 = time.time()
    if processes > 1 and len(jobs) > 1:
        import multiprocessing as mp
        with mp.get_context("fork").Pool(processes) as pool:
            for n, (i, r) in enumerate(pool.imap_unordered(_indexed, [(fn, i, jobs[i]) for i in order])):
                out[i] = r
                _progress(progress, n + 1, len(jobs), t0, what)
    else:
        for n, i in enumerate(order):
            out[i] = fn(jobs[i])
            _progress(progress, n + 1, len(jobs), t0, what)
    if progress:
        sys.stderr.write("\n")
    return out


def _indexed(args):
    fn, i, job = args
    return i, fn(job)


def _progress(on, done, total, t0, what):
    if not on or (not sys.stderr.isatty() and done % max(1, total // 10) and done != total):
        return
    w = 30
    k = int(w * done / total)
    sys.stderr.write(f"\r  simulating [{'#' * k}{'.' * (w - k)}] {done}/{total} {what}  {time.time() - t0:5.1f}s")
    sys.stderr.flush()


def _warm_caches(configs, depths, steps):
    """Build the schedule-independent CPU state (canonical weights, references, quantized initial shards) once
    in this process, so forked workers inherit it instead of rebuilding it per run."""
    import torch
    from simdist.fakes import megatron_core as mc
    from simdist.fakes import nemo_rl as nr
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as inside a simulated run (the values are the same: measured, identical bytes);
    try:                      # torch's intra-op pool made a 4 ms reference forward take 200-300 ms on 2 busy cores
        seen = set()
        for c in configs:
            for d in depths:
                key = (c["recipe"], c["fp8_param"], d)
                if key in seen:
                    continue
                seen.add(key)
                cfg = hunt_model_config(c["recipe"], c["fp8_param"], d).without_parallelism()
                for s in range(steps):
                    mc.reference_hf_state_dict(cfg, 0, s, LR)
                    nr._clean_metric(cfg, 0, s, float(LR), 2, 16)
        # one small simulated refit: the simulator's and torch's lazy first-use costs are paid here, not per worker
        simdist.run(refit_program, world_size=2, nccl=NCCL, kwargs=dict(tp=2, pp=1, steps=1, layers=1))
    finally:
        torch.set_num_threads(threads)


def compute_cells(evidence, configs, depths, seeds, steps, poison, progress=True, processes=None,
                  candidates=None):
    fix_cfgs = [dict(evidence.run, fix=f) for f in evidence.fixes_observed()]
    counted = lambda c: (lambda o: o is not None and o.counts)(evidence.lookup(c, c.get("fix")))  # noqa: E731
    jobs = [(cand, c, d, seeds if counted(c) else 1, steps, poison) for cand in (candidates or DEFAULT_CANDIDATES)
            for c in configs + fix_cfgs for d in depths]
    _warm_caches(configs, depths, steps)
    cost = lambda j: j[1]["tp"] * j[1]["pp"] * j[1]["dp"] * j[2]  # noqa: E731
    return _pool_map(run_cell, jobs, progress, "cells", processes, cost)


# ============================================================================ every run of the hunt, one pool
class _Scheduler:
    """Jobs over worker processes, most expensive first, with more added as results come in (a cell's other
    seeds once seed 0 shows a hazard, the fix check once the evidence cells are in): exactly `processes` jobs
    are in flight, so the next one is always the most expensive one known, and the cores finish together."""

    def __init__(self, processes, progress):
        self.processes = processes
        self.progress = progress
        self.heap = []
        self.n = 0
        self.done = 0
        self.t0 = time.time()

    def add(self, cost, tag, job):
        import heapq
        heapq.heappush(self.heap, (-cost, self.n, tag, job))
        self.n += 1

    def run(self, on_result):
        """Run every job (on_result(tag, result) may add more) until none is left."""
        import heapq
        if self.processes <= 1:
            while self.heap:
                _, _, tag, job = heapq.heappop(self.heap)
                self._tick()
                on_result(tag, _run_job(job))
            return
        import multiprocessing as mp
        import queue
        results = queue.Queue()
        with mp.get_context("fork").Pool(self.processes) as pool:
            flying = 0
            while self.heap or flying:
                while self.heap and flying < self.processes:
                    _, _, tag, job = heapq.heappop(self.heap)
                    pool.apply_async(_run_job, (job,), callback=lambda r, tag=tag: results.put((tag, r, None)),
                                     error_callback=lambda e, tag=tag: results.put((tag, None, e)))
                    flying += 1
                tag, r, err = results.get()
                flying -= 1
                if err is not None:
                    raise err
                self._tick()
                on_result(tag, r)

    def _tick(self):
        self.done += 1
        if self.progress:
            _progress(True, self.done, self.done + len(self.heap), self.t0, "runs")


def _run_job(job):
    kind = job[0]
    if kind == "cell":
        return run_replicate(*job[1:])
    if kind == "fix":
        return _fix_one(job[1])
    if kind == "witness":
        w = find_witness(*job[1:])
        if w is None:
            return None
        cell, kw, world, key, res, sym = w  # what the parent prints and saves (a RunResult stays here)
        return cell, kw, world, key, sym, res.trace, res.digest, [h.kind for h in res.hazards]
    raise ValueError(f"unknown job {kind!r}")


def _job_cost(config, depth):
    return config["tp"] * config["pp"] * config["dp"] * depth


def run_hunt(evidence, configs, depths, seeds, steps, poison, progress=True, processes=None, candidates=None,
             fix_schedules=48):
    """Every simulated run of the hunt in one pool: the cells (seed 0, then the other seeds where seed 0 has a
    hazard), then, as soon as the evidence cells are in, the best candidate's fix check (`fix_schedules`
    schedules) and, once its cells are in, its smallest reproducer. The same runs as compute_cells, check_fix and
    find_witness one after the other, and the same results; the pool just never waits for a phase to end.

    Returns (cells, verdicts, best, fix (runs, failures) or None, witness or None)."""
    fix_cfgs = [dict(evidence.run, fix=f) for f in evidence.fixes_observed()]
    counted = lambda c: (lambda o: o is not None and o.counts)(evidence.lookup(c, c.get("fix")))  # noqa: E731
    specs = [(cand, c, d, seeds if counted(c) else 1) for cand in (candidates or DEFAULT_CANDIDATES)
             for c in configs + fix_cfgs for d in depths]
    _warm_caches(configs, depths, steps)
    processes = processes or min(len(specs), os.cpu_count() or 1)
    sched = _Scheduler(processes, progress)
    reps = [dict() for _ in specs]
    left = [1] * len(specs)  # runs still to come per cell (seed 0 first; the others once it shows a hazard)
    is_evidence = [counted(sp[1]) for sp in specs]
    evidence_left = sum(is_evidence)
    state = {"best": None, "fix_jobs": None, "fix_results": None, "witness": None, "witness_added": False}

    def cell_of(i):
        cand, c, d, _ = specs[i]
        return Cell(cand, c, d, [reps[i][k] for k in sorted(reps[i])])

    def on_result(tag, r):
        nonlocal evidence_left
        if tag[0] == "cell":
            i, seed = tag[1], tag[2]
            cand, c, d, n = specs[i]
            reps[i][seed] = r
            left[i] -= 1
            if seed == 0 and n > 1 and _more_seeds(r):
                for k in range(1, n):
                    sched.add(_job_cost(c, d), ("cell", i, k), ("cell", cand, c, d, k, steps, poison))
                left[i] += n - 1
            if left[i] == 0 and is_evidence[i]:
                evidence_left -= 1
                if evidence_left == 0:
                    _start_fix()
        elif tag[0] == "fix":
            state["fix_results"][tag[1]] = r
        else:
            state["witness"] = r
        _maybe_witness()

    def _start_fix():
        ev_cells = [cell_of(i) for i in range(len(specs)) if is_evidence[i]]
        best = best_candidate(fit(evidence, ev_cells, depths, seeds))  # the fit reads the evidence cells only
        state["best"] = best
        if best is None:
            return
        grid = [(c, d) for c in configs for d in depths]
        jobs = [(best, grid[k % len(grid)][0], grid[k % len(grid)][1], steps, k, poison) for k in range(fix_schedules)]
        state["fix_jobs"], state["fix_results"] = jobs, [None] * len(jobs)
        for k, j in enumerate(jobs):
            sched.add(_job_cost(j[1], j[2]), ("fix", k), ("fix", j))

    def _maybe_witness():
        best = state["best"]
        if best is None or state["witness_added"]:
            return
        if all(left[i] == 0 for i in range(len(specs)) if specs[i][0] == best):
            state["witness_added"] = True
            mine = [cell_of(i) for i in range(len(specs)) if specs[i][0] == best]
            sched.add(float("inf"), ("witness",), ("witness", best, mine, evidence, steps, poison))

    if evidence_left == 0:
        _start_fix()
    for i, (cand, c, d, _n) in enumerate(specs):
        sched.add(_job_cost(c, d), ("cell", i, 0), ("cell", cand, c, d, 0, steps, poison))
    _maybe_witness()
    sched.run(on_result)
    if progress:
        sys.stderr.write("\n")
    cells = [cell_of(i) for i in range(len(specs))]
    v = fit(evidence, cells, depths, seeds)
    best = best_candidate(v)
    if best != state["best"]:  # cannot happen (the fit reads evidence cells only); never report another's check
        raise RuntimeError(f"internal: best candidate {best!r} from every cell, {state['best']!r} from the evidence")
    fix = None
    if best is not None:
        res = state["fix_results"]
        skipped = [r[1] for r in res if isinstance(r, tuple)]
        fix = (len(state["fix_jobs"]) - len(skipped), [r for r in res if r and not isinstance(r, tuple)], skipped)
    return cells, v, best, fix, state["witness"]


# ============================================================================ the fit
def _bad_from(outcomes: List[str]) -> Optional[Tuple[int, str]]:
    for i, o in enumerate(outcomes):
        if o != "fine":
            return i + 1, o
    return None


def matches(obs: Observation, rep: Replicate) -> bool:
    out = rep.outcomes()
    if obs.outcome == "fine":
        return all(o == "fine" for o in out)
    k = obs.onset_step
    return k <= len(out) and all(o == "fine" for o in out[:k - 1]) and out[k - 1] == obs.outcome


def simulated_text(rep: Replicate) -> str:
    """What one replicate shows, in the report's terms."""
    if rep.error:
        return f"a crash ({rep.error})"
    bad = _bad_from(rep.outcomes())
    if bad:
        step, what = bad
        return f"{'NaN' if what == 'nan' else 'a metric >= 1.05'} from step {step}"
    if "w" in rep.steps:
        step = rep.steps.index("w") + 1
        return f"fine (weights differ from the reference from step {step}, metric < {METRIC_BOUND})"
    if "h" in rep.steps:
        return "fine (a hazard, values intact)"
    return "fine"


def reported_text(obs: Observation) -> str:
    if obs.outcome == "fine":
        return "fine"
    return f"{'NaN' if obs.outcome == 'nan' else 'a metric >= 1.05'} from step {obs.onset_step}"


def fit(evidence: Evidence, cells: List[Cell], depths, seeds) -> dict:
    """Per candidate: which evidence cells each replicate matches, and the verdict."""
    index = {}
    for c in cells:
        key = (c.candidate, _ckey(c.config), c.depth)
        index[key] = c
    out = {}
    for cand in sorted({c.candidate for c in cells}, key=list(CANDIDATES).index):
        ev = []  # (observation, config)
        for o in evidence.observations:
            if not o.counts or "program" in o.change:
                continue
            cfg = dict(evidence.config_of(o), **({"fix": o.change["fix"]} if "fix" in o.change else {}))
            if all((cand, _ckey(cfg), d) in index for d in depths):
                ev.append((o, cfg))
        reps = []
        for d in depths:
            for s in range(seeds):
                row = []
                for o, cfg in ev:
                    cell = index[(cand, _ckey(cfg), d)]
                    rep = cell.replicates[min(s, len(cell.replicates) - 1)]
                    row.append((o, cfg, rep, matches(o, rep)))
                reps.append(((d, s), row))
        if not ev:
            verdict = "no verdict"
        elif all(all(m for *_, m in row) for _, row in reps):
            verdict = "reproduces"
        elif any(all(m for *_, m in row) for _, row in reps):
            verdict = "fragile"
        else:
            verdict = "does not fit"
        score = (sum(sum(m for *_, m in row) for _, row in reps) / len(reps)) if ev else 0.0
        nsym = sum(1 for o, _ in ev if o.outcome != "fine")
        sym = (sum(sum(m for o, _c, _r, m in row if o.outcome != "fine") for _, row in reps) / len(reps)
               if ev else 0.0)
        out[cand] = {"verdict": verdict, "score": score, "symptom_score": sym, "symptom_cells": nsym,
                     "evidence_cells": len(ev), "replicates": reps}
    return out


def _ckey(c: dict) -> str:
    return json.dumps(c, sort_keys=True)


# ============================================================================ the text, generated
def format_matrix(evidence: Evidence, cells: List[Cell], configs, depths) -> List[str]:
    cands = [c for c in CANDIDATES if any(x.candidate == c for x in cells)]
    index = {(c.candidate, _ckey(c.config), c.depth): c for c in cells}
    rows = configs + [dict(evidence.run, fix=f) for f in evidence.fixes_observed()]
    width = max(len(_cfg_text(c)) for c in rows) + 2
    colw = max(2 * len(depths) * 3 + 2, 9)
    short = {c: (c if len(c) <= colw - 1 else c[:colw - 1]) for c in cands}
    lines = [f"{'configuration':<{width}}{'reported':<10}" + "".join(f"{short[c]:>{colw}}" for c in cands)]
    for cfg in rows:
        o = evidence.lookup(cfg, cfg.get("fix"))
        rep = o.reported() if o else "?"
        if o and o.counts and evidence.inferred_factors():
            rep += "*"
        row = f"{_cfg_text(cfg):<{width}}{rep:<10}"
        for cand in cands:
            parts = []
            vary = False
            for d in depths:
                cell = index.get((cand, _ckey(cfg), d))
                parts.append(cell.text() if cell else "?")
                vary |= bool(cell and cell.varies)
            row += f"{'/'.join(parts) + ('~' if vary else ''):>{colw}}"
        lines.append(row)
    return lines


def _cells_where(cells, cand, pred):
    return [c for c in cells if c.candidate == cand and pred(c)]


def describe_faithful(cells, depths) -> List[str]:
    fc = [c for c in cells if c.candidate == "faithful" and not c.config.get("fix")]
    if not fc:
        return []
    hz = [c for c in fc if any(r.hazards for r in c.replicates)]
    wrong = [c for c in fc if any(s != "." for r in c.replicates for s in r.steps)]
    crashed = [c for c in fc if any(r.error for r in c.replicates)]
    lines = []
    if not wrong:
        lines.append("The faithful stack is clean in every configuration, depth and seed: the symptom needs a "
                     "missing edge.")
        return lines
    cfgs = _unique_cfgs(wrong)
    worst = max((s for c in wrong for r in c.replicates for s in r.steps),
                key=lambda s: "hwMNX".index(s) if s in "hwMNX" else -1)
    first = min(r.steps.index(s) + 1 for c in wrong for r in c.replicates for s in r.steps if s != ".")
    what = {"h": "a hazard with intact values", "w": f"weights that differ from the reference (metric < "
            f"{METRIC_BOUND})", "M": f"a metric >= {METRIC_BOUND}", "N": "a NaN metric", "X": "a crash"}[worst]
    common = _common_factors(cfgs)
    lines.append(f"The faithful stack (the code's own ordering) shows at worst {what}, from step {first}, in "
                 f"{len(cfgs)} configuration(s){' (all ' + common + ')' if common else ''}: "
                 f"{'; '.join(_cfg_text(c).strip() for c in cfgs[:3])}{' ...' if len(cfgs) > 3 else ''}; "
                 f"{'with a hazard in ' + str(len(_unique_cfgs(hz))) + ' of them' if hz else 'with no hazard'}"
                 f"{', crashing in ' + str(len(crashed)) if crashed else ''}.")
    return lines


def _unique_cfgs(cells):
    out = []
    for c in cells:
        if c.config not in out:
            out.append(c.config)
    return out


def _common_factors(cfgs) -> str:
    if not cfgs:
        return ""
    parts = []
    for k in ("tp", "pp", "dp", "recipe", "fp8_param"):
        vals = {c[k] for c in cfgs}
        if len(vals) == 1:
            v = vals.pop()
            parts.append(f"{k.upper() if k in ('tp', 'pp', 'dp') else k}" +
                         (f"={v}" if k not in ("tp", "pp", "dp") else f"{v}"))
    return ", ".join(parts)


def explain(evidence: Evidence, cells: List[Cell], v: dict, depths, seeds) -> List[str]:
    """Every sentence generated from the fit."""
    lines = []
    nrep = len(depths) * seeds
    repro = [c for c, r in v.items() if r["verdict"] == "reproduces"]
    fragile = [c for c, r in v.items() if r["verdict"] == "fragile"]
    if all(r["verdict"] == "no verdict" for r in v.values()):
        lines.append("No verdict: the evidence has no observed or inferred cell that the sweep simulates, so "
                     "every column counts neither way.")
        return lines
    lines += describe_faithful(cells, depths)
    if repro:
        for c in repro:
            r = v[c]
            lines.append(f"Reproduces the incident: {c} ({CANDIDATES[c].counterpart}; drops: "
                         f"{CANDIDATES[c].edge}). It matches all {r['evidence_cells']} evidence cells in all "
                         f"{nrep} replicates ({len(depths)} depths x {seeds} seeds): "
                         + "; ".join(f"{_cfg_text(cfg).strip()} {reported_text(o)}"
                                     for o, cfg, _rep, _m in r["replicates"][0][1]) + ".")
    else:
        lines.append("No candidate reproduces the evidence in every replicate.")
    for c in fragile:
        r = v[c]
        ok = [rk for rk, row in r["replicates"] if all(m for *_, m in row)]
        bad = [(rk, row) for rk, row in r["replicates"] if not all(m for *_, m in row)]
        (d, s), row = bad[0]
        o, cfg, rep, _ = next(x for x in row if not x[3])
        lines.append(f"{c} is fragile: it matches every evidence cell only at "
                     f"{', '.join(f'depth {dd} seed {ss}' for dd, ss in ok)}; at depth {d} seed {s}, "
                     f"{_cfg_text(cfg).strip()} (reported {reported_text(o)}) gives {simulated_text(rep)}.")
    for c, r in v.items():
        if r["verdict"] != "does not fit":
            continue
        misses = _consistent_misses(r)
        if misses:
            why = "; ".join(f"{_cfg_text(cfg).strip()} (reported {reported_text(o)}) gives "
                            f"{simulated_text(rep)}{' in every replicate' if every else ' in some replicates'}"
                            for o, cfg, rep, every in misses[:2])
            more = f" (and {len(misses) - 2} more cell(s))" if len(misses) > 2 else ""
            lines.append(f"{c} does not fit: {why}{more}.")
    best = best_candidate(v)
    if best and not repro:
        r = v[best]
        matched = _always_matched(r)
        misses = _consistent_misses(r)
        lines.append(
            f"Closest: {best} ({CANDIDATES[best].counterpart}), matching {_num(r['symptom_score'])} of "
            f"{r['symptom_cells']} reported-failure cell(s) and {_num(r['score'])} of {r['evidence_cells']} evidence "
            f"cells on average over {nrep} replicates (ranked by failure cells, then all cells)"
            + (f"; it matches {', '.join(_cfg_text(cfg).strip() + ' ' + reported_text(o) for o, cfg in matched)}"
               f" in every replicate" if matched else "")
            + (f"; it differs at {', '.join(_cfg_text(cfg).strip() for _, cfg, _, _ in misses)}" if misses else "")
            + ".")
    return lines


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 1e-9 else f"{x:.2f}"


def _consistent_misses(r):
    """(observation, config, example replicate, missed in every replicate?) for each evidence cell missed."""
    out = []
    n = len(r["replicates"][0][1]) if r["replicates"] else 0
    for i in range(n):
        col = [row[i] for _, row in r["replicates"]]
        missed = [x for x in col if not x[3]]
        if missed:
            o, cfg, rep, _ = missed[0]
            out.append((o, cfg, rep, len(missed) == len(col)))
    return out


def _always_matched(r):
    n = len(r["replicates"][0][1]) if r["replicates"] else 0
    out = []
    for i in range(n):
        col = [row[i] for _, row in r["replicates"]]
        if all(x[3] for x in col):
            out.append((col[0][0], col[0][1]))
    return out


def best_candidate(v: dict) -> Optional[str]:
    """A reproducing candidate, else a fragile one, else the one matching most reported-failure cells on average
    over the replicates, then most evidence cells (faithful included: the real code may be the cause)."""
    ranked = sorted((c for c in v if v[c]["verdict"] != "no verdict"),
                    key=lambda c: ({"reproduces": 0, "fragile": 1}.get(v[c]["verdict"], 2), -v[c]["symptom_score"],
                                   -v[c]["score"], list(CANDIDATES).index(c)))
    return ranked[0] if ranked else None


# ============================================================================ fix: proof and cost
def _fix_one(job):
    candidate, config, depth, steps, k, poison = job
    import hashlib
    import random
    # a stable hash (Python's hash() of strings changes per process, so the sample changed with every hunt)
    rng = random.Random(int.from_bytes(hashlib.blake2b(repr((candidate, _ckey(config), depth, k)).encode(),
                                                       digest_size=4).digest(), "little"))
    kind = k % 3
    pol = (simdist.Jitter(rng.randrange(2**32)) if kind == 0 else
           simdist.PCT(rng.randrange(2**32), depth=rng.choice([1, 2, 3])) if kind == 1 else
           simdist.Choice([rng.choice([0, 0, 0, 1, 4, 8]) for _ in range(64)]))
    kw = cell_kwargs(candidate, config, depth, steps)
    kw["fixes"] = tuple(sorted(set(kw["fixes"]) | set(fixes_for(candidate))))
    world = config["tp"] * config["pp"] * config["dp"]
    try:
        res = simdist.run(refit_program, world_size=world, policy=pol, kwargs=kw, nccl=NCCL, poison=poison, transport=_transport(kw))
    except Exception as e:  # noqa: BLE001
        text = f"{_cfg_text(config).strip()} depth {depth}: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
        # a configuration the real stack names unsupported is not run, so the fix is not proven there either way
        return ("unsupported", text) if type(e).__name__ == "RealStackUnsupported" else text
    sym, _ = _symbols(res, steps)
    if res.hazards or any(s != "." for s in sym):
        return (f"{_cfg_text(config).strip()} depth {depth} schedule {k}: {''.join(sym)}"
                f"{' ' + res.hazards[0].kind if res.hazards else ''}")
    return None


def fixes_for(candidate: str) -> Tuple[str, ...]:
    """The candidate's fix, plus the faithful stack's own (a candidate is the real code with one more edge
    dropped, so a clean refit needs both)."""
    return tuple(dict.fromkeys((CANDIDATES[candidate].fix, CANDIDATES["faithful"].fix)))


def check_fix(candidate, configs, depths, steps, schedules, poison, progress=True, processes=None):
    """The candidate's fix in the full refit program, every configuration x depth, `schedules` in total
    (round-robin over them; jitter, PCT and choice policies). Returns (runs, failures, not run): schedules of
    configurations the stack names unsupported are neither runs nor failures."""
    grid = [(c, d) for c in configs for d in depths]
    jobs = [(candidate, grid[i % len(grid)][0], grid[i % len(grid)][1], steps, i, poison)
            for i in range(schedules)]
    cost = lambda j: j[1]["tp"] * j[1]["pp"] * j[1]["dp"] * j[2]  # noqa: E731
    res = _pool_map(_fix_one, jobs, progress, "fix schedules", processes, cost)
    skipped = [r[1] for r in res if isinstance(r, tuple)]
    return len(jobs) - len(skipped), [r for r in res if r and not isinstance(r, tuple)], skipped


_FIX_COST_ROWS = {"side_stream_wait": "wait_stream", "synchronize_after_dequantize": "synchronize"}


def fix_cost(fix: str) -> Tuple[Optional[str], Optional[str]]:
    """(sentence, report path) from the newest committed GPU fix-cost report, or (None, path-or-None)."""
    reports = sorted(glob.glob(os.path.join(ROOT, "docs", "gpu-fixcost-*.json")))
    if not reports:
        return None, None
    path = reports[-1]
    with open(path) as f:
        d = json.load(f)
    timing = d.get("timing") or {}
    strategies = timing.get("strategies") or {}
    row = _FIX_COST_ROWS.get(fix)
    date = (d.get("environment") or {}).get("date", "?")
    rel = os.path.relpath(path, ROOT)
    if row is None or row not in strategies:
        return None, rel
    s, base = strategies[row], strategies.get("unsynced", {})
    env = d.get("environment") or {}
    return (f"{s.get('text', row)}: {s['median_ms']:.2f} ms vs {base.get('median_ms', float('nan')):.2f} ms unsynced "
            f"({s['overhead_pct']:+.1f}%), {timing.get('layers', '?')} layers, median of {timing.get('iters', '?')}"
            f" iterations on {len(env.get('gpus', []))}x {(env.get('gpus') or ['?'])[0]}, "
            f"torch {env.get('torch', '?')} ({rel}, {date})"), rel


# ============================================================================ the smallest reproducer
def find_witness(candidate, cells, evidence, steps, poison):
    """The smallest damaging cell of the candidate (fewest ranks, then depth), then the fewest delays: none if
    the cost model alone shows the damage, else one delayed producer (each hazard's in turn, targeted)."""
    dmg = [c for c in cells if c.candidate == candidate and not c.config.get("fix")
           and any(s in "wMN" for r in c.replicates for s in r.steps)]
    if not dmg:
        return None
    dmg.sort(key=lambda c: (c.config["tp"] * c.config["pp"] * c.config["dp"], c.depth,
                            evidence.lookup(c.config) is None))
    cell = dmg[0]
    kw = cell_kwargs(candidate, cell.config, cell.depth, steps)
    world = cell.config["tp"] * cell.config["pp"] * cell.config["dp"]
    res = simdist.run(refit_program, world_size=world, kwargs=kw, policy="none", nccl=NCCL, poison=poison, transport=_transport(kw))
    sym, _ = _symbols(res, steps)
    if any(s in "wMN" for s in sym):
        return cell, kw, world, None, res, sym
    for h in res.hazards:
        key = getattr(h, "first_op_key", None)
        if key is None:
            continue
        pol = simdist.Targeted({key: TARGET_DELAY_NS}, simdist.NoJitter())
        res2 = simdist.run(refit_program, world_size=world, kwargs=kw, policy=pol, nccl=NCCL, poison=poison, transport=_transport(kw))
        sym2, _ = _symbols(res2, steps)
        if any(s in "wMN" for s in sym2):
            return cell, kw, world, key, res2, sym2
    return None


# ============================================================================ the command
def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--reported", default=DEFAULT_EVIDENCE, metavar="FILE",
                   help="the incident's evidence file (format in the module docstring; default: NeMo-RL #1164)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--seeds", type=int, default=3, help="schedule seeds per cell that has a hazard (default 3)")
    p.add_argument("--depths", default=",".join(map(str, DEPTHS)), help="model depths in layers (default 2,4)")
    p.add_argument("--fix-schedules", type=int, default=48,
                   help="schedules for the fix in the full refit program, spread over every configuration and "
                        "depth (default 48)")
    p.add_argument("--wide", action="store_true",
                   help="the full TP x DP x recipe cross product, and PP=1 too (slower)")
    p.add_argument("--candidates", default=",".join(DEFAULT_CANDIDATES),
                   help=f"comma-separated, or 'all' ({', '.join(CANDIDATES)})")
    p.add_argument("--fresh-memory", default="nan", choices=("nan", "zero"),
                   help="what never-written device memory holds (simdist's poison; default nan)")
    p.add_argument("--processes", type=int, default=None, help="worker processes (default: every core)")
    p.add_argument("--stack", default="fakes", choices=("fakes", "real"),
                   help="the refit program's stack: fakes (default) or real (the installed megatron-core and "
                        "megatron-bridge, ranks as processes; bf16 params only: see properties/real_stack.py)")
    p.add_argument("--trace", default="hunt-witness.trace.json", help="where to write the witness trace")
    p.add_argument("--export", default=None, help="also write the scenario corpus for the GPU job here")
    p.add_argument("--no-progress", action="store_true")
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m simdist.properties.hunt",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    return add_arguments(p)


def _options(a):
    """Options from `a`; a namespace from a CLI that predates --reported gets the hunt's own defaults."""
    defaults = build_parser().parse_args([])
    legacy = not hasattr(a, "reported")
    get = lambda k: getattr(defaults if legacy and k in ("seeds", "fix_schedules") else a, k,  # noqa: E731
                            getattr(defaults, k))
    opts = {k: get(k) for k in vars(defaults)}
    opts["legacy"] = legacy
    return argparse.Namespace(**opts)


def main(a=None) -> int:
    if a is None or isinstance(a, list):
        a = build_parser().parse_args(a)
    a = _options(a)
    t0 = time.time()
    import torch
    import warnings
    torch.set_num_threads(1)  # one simulation per core; each runs its ops on one intra-op thread anyway
    # the fakes call all_gather_into_tensor as Megatron-Core 0.16.1 does; torch 2.13 deprecates it, and every
    # worker process printed the warning once, between the hunt's lines
    warnings.filterwarnings("ignore", message=r"`torch\.distributed\.all_gather_into_tensor` is deprecated",
                            category=FutureWarning)
    evidence = Evidence.load(a.reported)
    depths = tuple(int(x) for x in str(a.depths).split(","))
    seeds = max(1, int(a.seeds))
    steps = evidence.steps_needed()
    configs = sweep_configs(evidence, a.wide)
    progress = not a.no_progress and not a.json
    say = (lambda *x: None) if a.json else print
    out = {"incident": evidence.incident, "evidence": os.path.relpath(evidence.path, ROOT), "versions": VERSIONS}
    say(f"simdist hunt: {evidence.incident}")
    say(f"evidence: {out['evidence']} ({evidence.source})")
    if a.legacy:
        say("  (this CLI does not pass the hunt's options yet: hunt defaults used; see "
            "`python -m simdist.properties.hunt --help`)")
    counted = [o for o in evidence.observations if o.counts and "program" not in o.change]
    say(f"  {len(counted)} observed/inferred cells, "
        f"{sum(1 for o in evidence.observations if o.status == 'unknown')} unknown, "
        f"{sum(1 for o in evidence.observations if 'program' in o.change)} outside the refit program "
        f"({', '.join(o.quote for o in evidence.observations if 'program' in o.change)}: not simulated)")
    inf = evidence.inferred_factors()
    if inf:
        say(f"  * the run's {', '.join(f'{k}={evidence.run[k]}' for k in inf)} are inferred, not reported")
    out["versions"] = stack_versions = _prepare_stack(a.stack)
    say(f"stack: {a.stack} ({stack_versions}); {len(configs)} configurations x depths {list(depths)} x up to {seeds} seeds, "
        f"{steps} GRPO steps, fresh device memory = {a.fresh_memory}")
    cands = list(CANDIDATES) if a.candidates == "all" else [c.strip() for c in a.candidates.split(",") if c]
    unknown = [c for c in cands if c not in CANDIDATES]
    if unknown:
        raise SystemExit(f"unknown candidate(s) {unknown}; known: {list(CANDIDATES)}")
    cells, v, best, fix, witness = run_hunt(evidence, configs, depths, seeds, steps, a.fresh_memory, progress,
                                            a.processes, cands, a.fix_schedules)
    say("")
    say("candidates (the ordering each drops; where it lives in the real code):")
    for name, c in ((n, CANDIDATES[n]) for n in cands):
        say(f"  {name} [{c.counterpart}]: {c.edge}")
        for s in c.sources:
            say(f"      {s}")
    say("")
    say(f"failure matrix: depth {'/'.join(map(str, depths))} layers, one symbol per GRPO step (. clean  h hazard, "
        f"values intact  w weights differ, metric < {METRIC_BOUND}  M metric >= {METRIC_BOUND}  N NaN metric  "
        "X crash  ~ seeds differ; reported: ? unknown, * with inferred factors)")
    for line in format_matrix(evidence, cells, configs, depths):
        say(line)
    say("")
    conclusion = explain(evidence, cells, v, depths, seeds)
    for line in conclusion:
        say(line)
    multi = [c for c in cells if len(c.replicates) > 1]
    if seeds > 1:
        by = sorted({c.candidate for c in multi}, key=list(CANDIDATES).index)
        say(f"Seeds: {len(multi)} evidence cell(s) with a hazard ran {seeds} seeds each"
            f"{' (' + ', '.join(by) + ')' if by else ''}; hazard-free cells ran once (every schedule orders "
            "them alike); cells outside the evidence ran seed 0 only.")
    out["cells"] = [dict(candidate=c.candidate, config=c.config, depth=c.depth, text=c.text(),
                         replicates=[asdict(r) for r in c.replicates]) for c in cells]
    out["verdicts"] = {c: {"verdict": r["verdict"], "score": r["score"], "evidence_cells": r["evidence_cells"]}
                       for c, r in v.items()}
    out["conclusion"] = conclusion
    out["best"] = best
    ok = True
    if best is not None:
        cand = CANDIDATES[best]
        say("")
        runs, failures, skipped = fix
        verdict = "clean in all" if not failures else f"{len(failures)} FAILED (first: {failures[0]})"
        if skipped:
            verdict += f"; {len(skipped)} not run, the stack does not support them (first: {skipped[0]})"
        say(f"fix for {best}: {' + '.join(fixes_for(best))}, in the full refit program, {runs} schedules (jitter, "
            f"PCT, choice) over {len(configs)} configurations x {len(depths)} depths: {verdict}")
        cost, report = fix_cost(cand.fix)
        if cost:
            say(f"  its cost on GPUs: {cost}")
        else:
            say(f"  its cost on GPUs: no measurement of this fix in {report or 'any docs/gpu-fixcost-*.json'}")
        out["fix"] = {"candidate": best, "fixes": list(fixes_for(best)), "schedules": runs, "failures": failures, "not_run": skipped,
                      "cost": cost}
        ok = not failures
        if witness is not None:
            cell, kw, world, key, sym, trace, digest, kinds = witness
            with open(a.trace, "w") as f:  # RunResult.save_trace of the witness run (it ran in a worker)
                json.dump(trace, f)
            pol = "--policy none" + (f" --delay-op {key[0]},{key[1]},{key[2]},{TARGET_DELAY_NS}" if key else "")
            replay = (f"simdist run simdist.properties.hunt:refit_program --world-size {world} --nccl {NCCL} {pol} "
                      f"--kwargs '{json.dumps(kw)}'")
            how = (f"one delay: {TARGET_DELAY_NS / 1e6:g} ms on rank {key[0]} {key[1]} op #{key[2]}" if key
                   else "no delay (the cost model alone)")
            say(f"smallest reproducer of {best}: {_cfg_text(cell.config).strip()}, depth {cell.depth}, {how}: "
                f"steps {''.join(sym)}")
            say(f"  replay: {replay}")
            say(f"  Perfetto trace: {a.trace}")
            out["witness"] = {"config": cell.config, "depth": cell.depth, "replay": replay, "steps": "".join(sym),
                              "digest": digest, "hazards": kinds}
    if a.export:
        from simdist.properties.scenarios import export_corpus
        export_corpus(a.export)
        out["corpus"] = a.export
    errors = [c for c in cells if any(r.error for r in c.replicates)]
    out["seconds"] = round(time.time() - t0, 1)
    if a.json:
        print(json.dumps(out, indent=1, default=str))
    else:
        print(f"\nhunt finished in {out['seconds']} s")
    return 0 if ok and not errors else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
