"""Run every program (p*.py, q*.py, r*.py) in a directory under simdist for seeds 0..N-1 and compare with its EXPECTED docstring.

usage: python tests/corpus/run_all.py [--dir tests/corpus/p2p] [-j N] [--seeds 5] [--timeout 60] [--details] [name-substring ...]

Docstring fields of each probe:
    EXPECTED: clean | hazard | error | clean-or-error
    KINDS: hazard kinds that must all be reported (hazard)      KINDS_ALSO: kinds that may also be reported
    ERROR: exception class name(s), '|'-separated; a match on any class in the raised exception's MRO counts
    WORLD_SIZE: n (default 2)    NCCL: 2.7|2.8    DEVICE_COUNT: devices per world (simdist.run device_count)
A probe exceeding timeout*seeds seconds is reported as HANG.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
from simdist.properties.programs import corpus_paths, parse  # noqa: E402  (the docstring fields, shared with the tests and the GPU job)


def parse_doc(path):
    return parse(path)


WORKER = r'''
import io, json, sys, contextlib, traceback
import simdist
path, ws, nccl, dc, nseeds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
opts = {} if nccl == "-" else {"nccl": nccl}
if dc != "-":
    opts["device_count"] = int(dc)
for seed in range(nseeds):
    rec = {"seed": seed}
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink):
            r = simdist.run_script(path, world_size=ws, seed=seed, **opts)
        rec["kinds"] = sorted({h.kind for h in r.hazards})
        rec["observed"] = any(h.observed for h in r.hazards)
        rec["n"] = len(r.hazards)
        if r.hazards:
            rec["first"] = str(r.hazards[0])[:3000]
    except BaseException as e:
        lines = [l for l in str(e).splitlines() if l.strip()]
        rec["error"] = f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]
        rec["mro"] = [c.__name__ for c in type(e).__mro__]
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
                        str(meta["device_count"] or "-"), str(nseeds), out], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=timeout * nseeds, cwd=ROOT)
    except subprocess.TimeoutExpired:
        hang = True
    recs = [json.loads(l) for l in open(out) if l.strip()]
    os.unlink(out)
    if not hang and len(recs) < nseeds:
        recs.append({"error": "worker died (no record)", "mro": []})
    return path, meta, recs, hang


def summarize(meta, recs, hang):
    errors = [r for r in recs if "error" in r]
    ok_recs = [r for r in recs if "error" not in r]
    kinds = sorted({k for r in ok_recs for k in r.get("kinds", [])})
    seeds_with = sum(1 for r in ok_recs if r.get("kinds"))
    observed = any(r.get("observed") for r in recs)
    exp = meta["expected"]
    if hang:
        verdict = f"HANG after {len(recs)} seed(s)"
    elif errors:
        verdict = f"ERROR({len(errors)}/{len(recs)}) " + errors[0]["error"]
    elif kinds:
        verdict = ",".join(kinds) + f" ({seeds_with}/{len(ok_recs)} seeds)"
    else:
        verdict = "clean"
    if hang:
        agree = "NO(hang)"
    elif exp in ("error", "clean-or-error") and errors:
        good = all(set(r.get("mro", [])) & set(meta["errors"]) for r in errors) if meta["errors"] else True
        if exp == "error" and len(errors) < len(recs):
            agree = "NO(error only on some seeds)"
        elif exp == "clean-or-error" and kinds:
            agree = "NO(hazard)"
        else:
            agree = "yes" if good else "NO(wrong error class)"
    elif errors:
        agree = "NO(crash)"
    elif exp == "error":
        agree = "NO(no error)"
    elif exp in ("clean", "clean-or-error"):
        agree = "yes" if not kinds else "NO(false positive)"
    else:
        if not kinds:
            agree = "NO(missed)"
        elif seeds_with < len(ok_recs):
            agree = "NO(flaky detection)"
        elif meta["kinds"] and not (set(meta["kinds"]) <= set(kinds) <= set(meta["kinds"]) | set(meta["kinds_also"])):
            agree = "kind-differs"
        else:
            agree = "yes"
    return verdict, observed, agree


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=HERE)
    ap.add_argument("-j", type=int, default=max(1, (os.cpu_count() or 2)))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=60, help="seconds per seed")
    ap.add_argument("--details", action="store_true", help="print the first hazard / traceback per disagreement")
    ap.add_argument("--json", help="write raw results here")
    ap.add_argument("only", nargs="*")
    a = ap.parse_args()
    paths = sorted(p for p in corpus_paths(os.path.abspath(a.dir))
                   if not a.only or any(s in os.path.basename(p) for s in a.only))
    with ThreadPoolExecutor(a.j) as ex:
        results = list(ex.map(lambda p: run_probe(p, a.seeds, a.timeout), paths))
    rows = []
    raw = {}
    for path, meta, recs, hang in results:
        verdict, observed, agree = summarize(meta, recs, hang)
        exp = meta["expected"]
        if meta["kinds"]:
            exp += f" [{','.join(meta['kinds'])}]"
        if meta["errors"]:
            exp += f" [{'|'.join(meta['errors'])}]"
        extra = []
        if meta["world_size"] != 2:
            extra.append(f"ws={meta['world_size']}")
        if meta["nccl"]:
            extra.append(f"nccl={meta['nccl']}")
        if meta["device_count"]:
            extra.append(f"dc={meta['device_count']}")
        if extra:
            exp += f" ({', '.join(extra)})"
        rows.append((os.path.basename(path)[:-3], exp, verdict, "yes" if observed else "no", agree))
        raw[os.path.basename(path)] = {"meta": meta, "recs": recs, "hang": hang}
    hdr = ("probe", "expected", "verdict", "observed", "agree?")
    w = [max(len(r[i]) for r in rows + [hdr]) for i in range(5)]
    w[2] = min(w[2], 100)
    fmt = "  ".join(f"{{:{x}}}" for x in w)
    print(fmt.format(*hdr))
    print("  ".join("-" * x for x in w))
    for r in rows:
        print(fmt.format(r[0], r[1], r[2][:100], r[3], r[4]))
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
