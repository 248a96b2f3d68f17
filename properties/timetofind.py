"""The measure of the fuzzer: for each fault switch of the fakes and each sync of the incident kernel, examples and
seconds to the first failure from an empty database, and the example Hypothesis shrinks it to.

    python -m simdist.properties.timetofind [--only NAMES] [--seeds 0,1,2] [--json PATH]
    python -m simdist.benchmarks --fuzz-only            (the same, as the benchmarks' fuzz section)
"""
from __future__ import annotations

import functools
import json
import sys
import time

from .campaign import describe, world_of


class _Stop(BaseException):
    """Ends a measured Hypothesis run past its time budget (a BaseException: not a failure to shrink)."""


def time_to_find(check, cases, schedules, *, seed=0, find_s=120.0, shrink_s=90.0, max_examples=100_000,
                 delay_schedules=None):
    """Run `check(case, schedule)` under Hypothesis from an empty database until the first failure (at most
    `find_s` seconds), then let Hypothesis shrink it (at most `shrink_s` seconds).

    Returns dict(found, examples, seconds: to the first failure; shrunk case and schedule, shrink_seconds, calls:
    test-function calls in all, shrink_complete: False when the shrink budget cut shrinking short, in which case
    the smallest failing example seen is reported). With `delay_schedules` (a strategy of choice schedules), a
    failure shrunk to a PCT or jitter schedule is searched again on its configuration with explicit delays only.
    """
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis.database import InMemoryExampleDatabase

    state = {"calls": 0, "first": None, "first_calls": None, "fails": {}, "last_fail": None, "final": None}
    t0 = time.perf_counter()

    @settings(database=InMemoryExampleDatabase(), max_examples=max_examples, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False, print_blob=False,
              phases=(Phase.generate, Phase.target, Phase.shrink))
    @hseed(seed)
    @given(cases, schedules)
    def test(case, schedule):
        from hypothesis.control import current_build_context
        key = json.dumps([case, schedule.to_json()], sort_keys=True, default=str)
        final = current_build_context().is_final
        if key in state["fails"]:
            if final:
                state["final"] = (case, schedule)
            raise state["fails"][key]
        now = time.perf_counter()
        if state["first"] is None and now - t0 > find_s:
            raise _Stop()
        if state["first"] is not None and now - state["first"] > shrink_s:
            raise _Stop()
        state["calls"] += 1
        try:
            check(case, schedule)
        except Exception as e:  # noqa: BLE001 - every failure of the property counts
            if state["first"] is None:
                state["first"], state["first_calls"] = time.perf_counter(), state["calls"]
            state["fails"][key] = e
            state["last_fail"] = (case, schedule, e)
            if final:
                state["final"] = (case, schedule)
            raise

    complete = True
    try:
        test()
    except _Stop:
        complete = False
    except Exception:  # noqa: BLE001 - the expected end: Hypothesis re-raises the shrunk failure
        pass
    end = time.perf_counter()
    if state["first"] is None:
        return {"found": False, "examples": state["calls"], "seconds": end - t0, "calls": state["calls"]}
    case, schedule = state["final"] or state["last_fail"][:2]
    err = state["fails"][json.dumps([case, schedule.to_json()], sort_keys=True, default=str)]
    out = {"found": True, "examples": state["first_calls"], "seconds": state["first"] - t0, "case": case,
           "schedule": schedule, "failure": str(err).splitlines()[0][:200] if str(err) else type(err).__name__,
           "shrink_seconds": end - state["first"], "calls": state["calls"], "shrink_complete": complete,
           "error": err}
    if delay_schedules is not None and getattr(schedule, "kind", "choice") != "choice":
        # PCT or jitter perturbs every op and does not shrink to a choice schedule; on the shrunk configuration,
        # a second search over choice schedules alone finds the fewest explicit delays that still fail
        from hypothesis import strategies as st
        d = time_to_find(check, st.just(case), delay_schedules, seed=seed, find_s=find_s, shrink_s=shrink_s,
                         max_examples=max_examples)
        out["delay_search"] = {k: d[k] for k in ("found", "examples", "seconds") if k in d}
        if d["found"]:
            out.update(schedule=d["schedule"], shrink_complete=complete and d["shrink_complete"],
                       pct_or_jitter=str(schedule))
    return out


def _attributable(check, unplant):
    """A failure counts only if the same case and schedule pass without the planted fault (or with the sync
    back): the time to find measures that fault, not another failure the search may meet on its way."""
    def attributed(case, schedule):
        try:
            check(case, schedule)
        except Exception:
            try:
                check(unplant(case), schedule)
            except Exception:  # noqa: BLE001 - fails without the plant too: not this fault's failure
                return
            raise
    return attributed


def measure(targets=None, *, seeds=(0, 1, 2), find_s=120.0, shrink_s=90.0, progress=True,
            what=("detect", "damage")):
    """The time-to-find table: one row per fault switch of the fakes (read from FAULTS now) and per sync of the
    incident kernel. For each, searches from an empty database (one per Hypothesis seed) for the first hazard
    report (detection: `refit_equals_reference` / `kernel_matches_reference`) and for the first damaged values
    (the same property without its hazard check: what a fuzzer without simdist's detector, e.g. on GPUs, has).
    A failure counts only when the same example passes without the plant (`_attributable`)."""
    from simdist.fakes.megatron_core import FAULTS

    from . import checks
    from . import strategies as S
    rows = []
    if targets is None:
        targets = [("fault", f) for f in sorted(FAULTS)] + [("sync", s) for s in S.SYNCS]
    for kind, name in targets:
        if kind == "fault":
            cases = S.refit_cases(faults=frozenset([name]))
            prop, unplant = checks.refit_equals_reference, (lambda c: dict(c, faults=[]))
        else:
            cases = S.kernel_cases(drop=name, syncs=(name,))
            prop, unplant = checks.kernel_matches_reference, (lambda c: dict(c, drop=False))
        detect = _attributable(functools.partial(prop, record_as=None), unplant)
        damage = _attributable(functools.partial(prop, hazards=False, record_as=None), unplant)
        row = {"kind": kind, "name": name, "seeds": list(seeds)}
        for kind_of_search, check in (("detect", detect), ("damage", damage)):
            if kind_of_search not in what:
                continue
            runs = []
            for seed in seeds:
                t = time.perf_counter()
                r = time_to_find(check, cases, S.run_schedules(), seed=seed, find_s=find_s, shrink_s=shrink_s,
                                 delay_schedules=S.choice_schedules() if shrink_s > 0 else None)
                r.pop("error", None)
                runs.append(r)
                if progress:
                    sys.stderr.write(f"  fuzz {kind} {name:<28} {kind_of_search:<6} seed {seed}: "
                                     + _progress_line(r, t))
            row[kind_of_search] = runs
        rows.append(row)
    return rows


def _progress_line(r, t):
    if not r["found"]:
        return f"NOT found in {r['examples']} examples, {r['seconds']:.0f} s\n"
    extra = ""
    if r.get("delay_search"):
        ds = r["delay_search"]
        extra = (f" [shrunk to {r.get('pct_or_jitter') or 'PCT/jitter'} first; explicit delays "
                 + (f"found after {ds['examples']} examples]" if ds["found"] else "not found]"))
    return (f"found after {r['examples']} examples, {r['seconds']:.1f} s; shrunk to {describe(r['case'])} | "
            f"{r['schedule']}{extra} ({time.perf_counter() - t:.0f} s in all)\n")


def _shrunk_key(r):
    nz = r["schedule"].nonzero_delays
    return (world_of(r["case"]), 99 if nz is None else nz, len(json.dumps(r["case"])))


def format_table(rows) -> str:
    """The README's markdown table of `measure` rows: median and worst over the seeds, and the smallest shrunk
    damaging example (fewest ranks, then fewest non-zero delays)."""
    out = ["| target | first hazard report: examples, seconds (median / worst) | first damaged values: examples, "
           "seconds (median / worst) | smallest shrunk damaging example | schedule (non-zero delays) | world |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        def cell(runs):
            found = [x for x in runs if x["found"]]
            if len(found) < len(runs):
                lost = [x for x in runs if not x["found"]]
                miss = f"; not found by {len(lost)}/{len(runs)} seeds in {max(x['seconds'] for x in lost):.0f} s"
            else:
                miss = ""
            if not found:
                return miss.lstrip("; ")
            ex = sorted(x["examples"] for x in found)
            sec = sorted(x["seconds"] for x in found)
            return f"{ex[len(ex) // 2]} / {ex[-1]} ex, {sec[len(sec) // 2]:.1f} / {sec[-1]:.1f} s{miss}"
        shrunk = [x for x in r["damage"] if x["found"]] or [x for x in r["detect"] if x["found"]]
        if shrunk:
            best = min(shrunk, key=_shrunk_key)
            sch, nz = best["schedule"], best["schedule"].nonzero_delays
            cfg = describe(best["case"]) + ("" if best["shrink_complete"] else " (shrink budget hit)")
            sched = f"{sch} ({nz if nz is not None else 'every op perturbed: no explicit-delay schedule found'})"
            world = world_of(best["case"])
        else:
            cfg, sched, world = "-", "-", "-"
        label = f"fault `{r['name']}`" if r["kind"] == "fault" else f"kernel without `{r['name']}`"
        out.append(f"| {label} | {cell(r['detect'])} | {cell(r['damage'])} | {cfg} | {sched} | {world} |")
    return "\n".join(out)


def _main(argv=None):
    import argparse
    from . import strategies as S
    ap = argparse.ArgumentParser(prog="python -m simdist.properties.timetofind")
    ap.add_argument("--only", default=None, help="comma-separated fault switches / syncs")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated Hypothesis seeds (one search each)")
    ap.add_argument("--find-s", type=float, default=120.0)
    ap.add_argument("--shrink-s", type=float, default=90.0, help="0: no shrinking (time to the first failure only)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--what", default="detect,damage", help="which searches: detect, damage or both")
    ap.add_argument("--no-target", action="store_true", help="without hypothesis.target on hazard slack (ablation)")
    a = ap.parse_args(argv)
    if a.no_target:
        from . import checks
        checks.TARGETING = False
    targets = [("sync" if n in S.SYNCS else "fault", n) for n in a.only.split(",")] if a.only else None
    rows = measure(targets, seeds=[int(x) for x in a.seeds.split(",")], find_s=a.find_s, shrink_s=a.shrink_s,
                   what=a.what.split(","))
    if set(a.what.split(",")) == {"detect", "damage"}:
        print(format_table(rows))
    else:
        for r in rows:
            for w in a.what.split(","):
                found = [x for x in r[w] if x["found"]]
                print(f"{r['kind']} {r['name']} {w}: found by {len(found)}/{len(r[w])} seeds; examples "
                      f"{[x['examples'] if x['found'] else None for x in r[w]]}; seconds "
                      f"{[round(x['seconds'], 1) for x in r[w]]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
