"""Run every probe in this directory under simdist for seeds 0..9 and compare with its EXPECTED docstring.

usage: python tests/programs/run_all.py [-j N] [--seeds 10] [--timeout 60] [probe-name-substring ...]

Each probe runs in its own subprocess (one per probe, all seeds in sequence) with a per-seed wall-clock timeout;
a probe that exceeds it is reported as HANG. The docstring of each probe gives:
    EXPECTED: clean|hazard     KINDS: comma-separated hazard kinds     WORLD_SIZE: n (default 2)     NCCL: 2.7|2.8
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_doc(path):
    src = open(path).read()
    m = re.search(r'"""(.*?)"""', src, re.S)
    doc = m.group(1) if m else ""

    def field(name, default=None):
        mm = re.search(rf"^{name}:\s*(.+)$", doc, re.M)
        return mm.group(1).strip() if mm else default
    kinds = field("KINDS", "")
    return {"expected": field("EXPECTED", "clean"),
            "kinds": sorted(k.strip() for k in kinds.split(",") if k.strip()),
            "world_size": int(field("WORLD_SIZE", "2")),
            "nccl": field("NCCL")}


WORKER = r'''
import io, json, sys, contextlib, traceback
import simdist
path, ws, nccl, nseeds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
opts = {} if nccl == "-" else {"nccl": nccl}
for seed in range(nseeds):
    rec = {"seed": seed}
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink):
            r = simdist.run_script(path, world_size=ws, seed=seed, **opts)
        rec["kinds"] = sorted({h.kind for h in r.hazards})
        rec["observed"] = any(h.observed for h in r.hazards)
        rec["observed_kinds"] = sorted({h.kind for h in r.hazards if h.observed})
        rec["n"] = len(r.hazards)
        if seed == 0 and r.hazards:
            rec["first"] = str(r.hazards[0])[:3000]
    except BaseException as e:
        lines = [l for l in str(e).splitlines() if l.strip()]
        rec["error"] = f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]
        rec["tb"] = traceback.format_exc()[-4000:]
    with open(out, "a") as f:
        f.write(json.dumps(rec) + "\n")
'''


def run_probe(path, nseeds, timeout):
    meta = parse_doc(path)
    fd, out = tempfile.mkstemp(suffix=".jsonl")
    os.close(fd)
    hang = False
    try:
        subprocess.run([sys.executable, "-c", WORKER, path, str(meta["world_size"]), meta["nccl"] or "-",
                        str(nseeds), out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=timeout * nseeds, cwd=os.path.dirname(os.path.dirname(HERE)))
    except subprocess.TimeoutExpired:
        hang = True
    recs = [json.loads(l) for l in open(out) if l.strip()]
    os.unlink(out)
    if not hang and len(recs) < nseeds:
        recs.append({"error": "worker died (no record)"})
    return path, meta, recs, hang


def summarize(meta, recs, hang, nseeds):
    errors = [r["error"] for r in recs if "error" in r]
    kinds = sorted({k for r in recs for k in r.get("kinds", [])})
    seeds_with = sum(1 for r in recs if r.get("kinds"))
    observed = any(r.get("observed") for r in recs)
    ok_recs = [r for r in recs if "error" not in r]
    if hang:
        verdict = f"HANG after {len(recs)} seed(s)"
    elif errors:
        verdict = "ERROR " + errors[0]
    elif kinds:
        verdict = ",".join(kinds) + f" ({seeds_with}/{len(ok_recs)} seeds)"
    else:
        verdict = "clean"
    if hang or errors:
        agree = "NO(crash)"
    elif meta["expected"] == "clean":
        agree = "yes" if not kinds else "NO(false positive)"
    else:
        if not kinds:
            agree = "NO(missed)"
        elif seeds_with < len(ok_recs):
            agree = "NO(flaky detection)"
        elif meta["kinds"] and set(kinds) != set(meta["kinds"]):
            agree = "kind-differs"
        else:
            agree = "yes"
    return verdict, observed, agree


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-j", type=int, default=max(1, (os.cpu_count() or 2)))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--timeout", type=int, default=60, help="seconds per seed")
    ap.add_argument("--details", action="store_true", help="print the first hazard / traceback per disagreement")
    ap.add_argument("--json", help="write raw results here")
    ap.add_argument("only", nargs="*")
    a = ap.parse_args()
    paths = sorted(p for p in glob.glob(os.path.join(HERE, "p[0-9]*.py"))
                   if not a.only or any(s in os.path.basename(p) for s in a.only))
    with ThreadPoolExecutor(a.j) as ex:
        results = list(ex.map(lambda p: run_probe(p, a.seeds, a.timeout), paths))
    rows = []
    raw = {}
    for path, meta, recs, hang in results:
        verdict, observed, agree = summarize(meta, recs, hang, a.seeds)
        exp = meta["expected"] + (f" [{','.join(meta['kinds'])}]" if meta["kinds"] else "")
        if meta["world_size"] != 2 or meta["nccl"]:
            exp += f" (ws={meta['world_size']}{', nccl=' + meta['nccl'] if meta['nccl'] else ''})"
        rows.append((os.path.basename(path)[:-3], exp, verdict, "yes" if observed else "no", agree))
        raw[os.path.basename(path)] = {"meta": meta, "recs": recs, "hang": hang}
    w = [max(len(r[i]) for r in rows + [("probe", "expected", "verdict", "observed", "agree?")]) for i in range(5)]
    w[2] = min(w[2], 90)
    fmt = "  ".join(f"{{:{x}}}" for x in w)
    print(fmt.format("probe", "expected", "verdict", "observed", "agree?"))
    print("  ".join("-" * x for x in w))
    for r in rows:
        print(fmt.format(r[0], r[1], r[2][:90], r[3], r[4]))
    n_ok = sum(r[4] == "yes" for r in rows)
    print(f"\n{n_ok}/{len(rows)} agree")
    if a.details:
        for (path, meta, recs, hang), r in zip(results, rows):
            if r[4] == "yes":
                continue
            print(f"\n===== {r[0]}: {r[4]}")
            for rec in recs:
                if "tb" in rec:
                    print(rec["tb"])
                    break
                if "first" in rec:
                    print(rec["first"])
                    break
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()
