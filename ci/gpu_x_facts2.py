"""The second x-series check on one GPU (notes x10-): torch.compile facts (what torch.compile returns, what
cudagraph trees do with outputs kept across calls, whether compiled dropout draws eager's numbers), the caching
allocator's memory_stats keys and figures after a scripted sequence, and corpus programs x15-x21 run as written,
each trial in this process after device memory was filled with NaN bytes (a race reading a fresh block then shows),
the offload programs also with torch.cuda._sleep on their copy streams (X_DELAY_CYCLES) so that a missing wait shows.

    python3 ci/gpu_x_facts2.py > docs/gpu/x-series-facts2-DATE.json      # on the GPU machine, from the repo root
"""
import contextlib
import io
import json
import os
import runpy
import sys
import time

import torch

T0 = time.time()
out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
torch.cuda.set_device(0)


def err(e):
    return f"{type(e).__name__}: {str(e)[:400]}"


def poison(mb=4096):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    b = torch.empty(mb << 20, dtype=torch.uint8, device="cuda")
    b.fill_(0xFF)
    small = [torch.empty(1 << 19, dtype=torch.uint8, device="cuda").fill_(0xFF) for _ in range(256)]
    torch.cuda.synchronize()
    del b, small
    torch.cuda.empty_cache()


# 1. memory_stats: keys and figures after two scripted sequences (no program ran yet)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ci.x_memory_sequences import sequence1, sequence2  # noqa: E402
st = sequence1()
out["memory_stats_keys"] = sorted(st)
out["memory_stats_after_sequence"] = st
out["memory_stats_sequence2"] = sequence2()

# 2. torch.compile facts
try:
    import triton  # noqa: F401
    out["triton"] = triton.__version__
except Exception as e:  # noqa: BLE001
    out["triton"] = err(e)
m = torch.nn.Linear(4, 2).cuda()
cm = torch.compile(m)
out["compile_module_type"] = type(cm).__name__
out["compile_module_keys"] = sorted(cm.state_dict())
try:
    f = torch.compile(lambda x: x * 2 + 1, mode="reduce-overhead")
    outs = [f(torch.full((4,), float(i), device="cuda")) for i in range(4)]
    res = {}
    for i, o in enumerate(outs):
        try:
            res[i] = o.tolist()
        except Exception as e:  # noqa: BLE001
            res[i] = err(e)
    out["reduce_overhead_outputs_kept"] = res
except Exception as e:  # noqa: BLE001
    out["reduce_overhead_outputs_kept"] = err(e)
try:
    ones = torch.ones(4096, device="cuda")
    torch.manual_seed(0)
    eager = torch.nn.functional.dropout(ones, 0.5)
    torch.manual_seed(0)
    comp = torch.compile(lambda t: torch.nn.functional.dropout(t, 0.5))(ones)
    out["compiled_dropout_equals_eager"] = bool(torch.equal(eager, comp))
except Exception as e:  # noqa: BLE001
    out["compiled_dropout_equals_eager"] = err(e)
out["seconds_after_facts"] = round(time.time() - T0, 1)

# 3. corpus programs as written
PROGS = {
    "x15": ("tests/corpus/errors/x15_compile_reduce_overhead_outputs_kept_across_steps_refused.py", [0]),
    "x17": ("tests/corpus/training/x17_megatron_activation_offload_d2h_h2d_streams.py", [0, 0, 50_000_000]),
    "x18": ("tests/corpus/training/x18_megatron_activation_offload_reload_event_not_waited_bug.py",
            [0, 0, 50_000_000, 50_000_000]),
    "x19": ("tests/corpus/training/x19_megatron_activation_offload_no_record_stream_bug.py",
            [0, 0, 50_000_000, 50_000_000]),
    "x20": ("tests/corpus/training/x20_checkpoint_dropout_rng_replay_reentrant_and_not.py", [0]),
    "x21": ("tests/corpus/training/x21_save_on_cpu_pinned_offload_training.py", [0]),
    "x16": ("tests/corpus/training/x16_nanogpt_compiled_model_checkpoint_orig_mod_prefix.py", [0]),
}
out["programs"] = {}
for name, (path, delays) in PROGS.items():
    trials = []
    for delay in delays:
        if time.time() - T0 > float(os.environ.get("X_BUDGET_S", "420")):
            trials.append({"skipped": "time budget"})
            continue
        os.environ["X_DELAY_CYCLES"] = str(delay)
        poison()
        buf = io.StringIO()
        t = time.time()
        try:
            with contextlib.redirect_stdout(buf):
                runpy.run_path(path, run_name="__main__")
            e = None
        except BaseException as ex:  # noqa: BLE001
            e = err(ex)
        try:
            torch.cuda.synchronize()
        except Exception as ex:  # noqa: BLE001
            e = (e or "") + " | sync: " + err(ex)
        trials.append({"delay_cycles": delay, "stdout": buf.getvalue()[-300:], "error": e,
                       "seconds": round(time.time() - t, 2)})
    out["programs"][name] = trials

# 4. a table on stderr, the JSON on stdout
for name, trials in out["programs"].items():
    for tr in trials:
        print(f"{name:4} delay={tr.get('delay_cycles', '-'):>10} error={str(tr.get('error'))[:70]!s:72} "
              f"out={tr.get('stdout', tr.get('skipped', '')).strip()[-90:]}", file=sys.stderr)
out["seconds"] = round(time.time() - T0, 1)
json.dump(out, sys.stdout, indent=1, default=str)
