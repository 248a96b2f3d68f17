"""torch.cuda's whole public surface under simdist: each function either works as on a GPU or raises simdist's
UnsupportedOperation naming itself; never the CPU build's raw errors (AttributeError for a missing torch._C._cuda_*
binding, "Torch not compiled with CUDA enabled"), which name no reason and which a user of a real GPU never sees.
The surface is enumerated, not listed, so a function torch adds is checked the day it appears."""
import inspect
import types
import warnings

import pytest
import torch

import simdist
from simdist import UnsupportedOperation

MODULES = ("torch.cuda", "torch.cuda.memory", "torch.cuda.random", "torch.cuda.tunable")
NOT_FUNCTIONS = {"Optional", "Literal", "lru_cache", "classproperty", "cast", "signature", "deprecated", "overload"}
# answers a GPU machine gives too when nvidia-ml-py is not installed (torch/cuda/__init__.py _get_pynvml_handler)
NVML = ("nvidia-ml-py does not seem to be installed", "pynvml")


def _callables():
    import importlib
    out = []
    for modname in MODULES:
        mod = importlib.import_module(modname)
        for name in sorted(dir(mod)):
            obj = getattr(mod, name)
            if (name.startswith("_") or name in NOT_FUNCTIONS or isinstance(obj, types.ModuleType)
                    or inspect.isclass(obj) or not callable(obj)):
                continue
            try:
                params = inspect.signature(obj).parameters.values()
            except (TypeError, ValueError):
                continue
            if any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
                continue  # needs arguments: the rule tests call those
            out.append((modname, name))
    return out


def test_every_argument_free_torch_cuda_function_works_or_is_refused_by_name():
    names = _callables()
    assert len(names) > 60  # the enumeration found torch.cuda's surface

    def fn():
        import importlib
        got = {}
        for modname, name in names:
            f = getattr(importlib.import_module(modname), name)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    r = f()
                    if hasattr(r, "__enter__") and hasattr(r, "__exit__"):  # a context manager: enter it
                        with r:
                            torch.ones(4, device="cuda").sum()
                    got[f"{modname}.{name}"] = "ok"
                except UnsupportedOperation:
                    got[f"{modname}.{name}"] = "refused"
                except ModuleNotFoundError as e:
                    got[f"{modname}.{name}"] = "nvml" if any(s in str(e) for s in NVML) else f"raw {e!r}"
                except Exception as e:  # noqa: BLE001 - what the test is about
                    got[f"{modname}.{name}"] = f"raw {type(e).__name__}: {e}"
        return got

    got = simdist.run(fn).returns[0]
    raw = {k: v for k, v in got.items() if v.startswith("raw")}
    assert not raw, raw
    # what a GPU answers, for the ones simdist models
    assert got["torch.cuda.is_available"] == got["torch.cuda.synchronize"] == "ok"
    assert got["torch.cuda.memory.caching_allocator_disabled"] == "refused"
    assert got["torch.cuda.tunable.is_enabled"] == "ok"


def test_caching_allocator_switch_and_tunableop_answer_as_a_gpu_or_are_refused():
    """torch.cuda.memory.caching_allocator_enable(True) keeps the caching allocator (a no-op); False and
    caching_allocator_disabled() would give the uncached allocator (every free a synchronizing cudaFree:
    c10/cuda/CUDACachingAllocator.cpp), refused as PYTORCH_NO_CUDA_MEMORY_CACHING is (notes c8). TunableOp is off
    by default (aten/src/ATen/cuda/tunable/Tunable.cpp), so tunable.is_enabled() is False and enable(False) is
    accepted; enable(True) and PYTORCH_TUNABLEOP_ENABLED=1 (GEMMs chosen by timing on the device) are refused.
    torch.backends.cuda.is_built() is True as on a CUDA build; before CUDA is initialized caching_allocator_enable
    does nothing (torch/cuda/memory.py: `if is_initialized()`); check_error(0) passes and check_error(n) raises
    torch.cuda.CudaError; raw-handle functions are refused by name."""
    def fn():
        out = {}
        torch.cuda.memory.caching_allocator_enable(False)  # before CUDA's initialization torch does nothing
        torch.ones(1, device="cuda")
        torch.cuda.memory.caching_allocator_enable(True)
        torch.cuda.tunable.enable(False)
        out["tunable"] = torch.cuda.tunable.is_enabled()
        out["is_built"] = torch.backends.cuda.is_built()
        torch.cuda.check_error(0)
        for name, call in (("enable_false", lambda: torch.cuda.memory.caching_allocator_enable(False)),
                           ("tunable_on", lambda: torch.cuda.tunable.enable(True)),
                           ("tuning_duration", lambda: torch.cuda.tunable.set_max_tuning_duration(10)),
                           ("external", lambda: torch.cuda.get_stream_from_external(1234)),
                           ("solver", lambda: torch.cuda.current_solver_handle())):
            try:
                call()
                out[name] = "ran"
            except UnsupportedOperation as e:
                out[name] = str(e)
        try:
            torch.cuda.check_error(2)
        except torch.cuda.CudaError as e:
            out["check_error"] = str(e)
        return out
    out = simdist.run(fn).returns[0]
    assert out["tunable"] is False and out["is_built"] is True
    assert "caching_allocator_enable(False)" in out["enable_false"]
    assert "torch.cuda.tunable.enable" in out["tunable_on"]
    assert "set_max_tuning_duration" in out["tuning_duration"]
    assert "get_stream_from_external" in out["external"] and "cuSOLVER" in out["solver"]
    assert out["check_error"].endswith("(2)")
    assert torch.backends.cuda.is_built() is False  # undone after the run (the CPU build here)


def test_tunableop_enabled_by_the_environment_is_refused(monkeypatch):
    monkeypatch.setenv("PYTORCH_TUNABLEOP_ENABLED", "1")
    with pytest.raises(UnsupportedOperation, match="PYTORCH_TUNABLEOP_ENABLED"):
        simdist.run(lambda: torch.ones(2, device="cuda").sum().item())


@pytest.mark.parametrize("activities", ["cuda", "cpu+cuda", "use_device"])
def test_the_profiler_with_cuda_activity_profiles_the_host_side(activities):
    """torch.profiler with ProfilerActivity.CUDA, as training scripts write it, runs: torch turns CUDA profiling off
    where CUDA is unavailable (torch/autograd/profiler.py: "CUDA is not available, disabling CUDA profiling"), and
    simulated devices have no CUPTI either, so the host side is profiled (one warning says so). A CPU build asked
    for CUDA events raised "Legacy CUDA profiling requires use_cpu=True" (CUDA only) or printed a C++ warning per
    op; the patch is undone after the run."""
    from torch.profiler import ProfilerActivity, profile
    before = torch.autograd.profiler.profile.__init__

    def prog():
        x = torch.ones(64, device="cuda")
        if activities == "use_device":
            with torch.autograd.profiler.profile(use_device="cuda") as prof:
                y = x * 2
        else:
            acts = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if activities == "cpu+cuda" else [])
            with profile(activities=acts) as prof:
                y = x * 2
        return y.sum().item(), [e.key for e in prof.key_averages()]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the warning is once per process)
        res = simdist.run(prog)
    total, keys = res.returns[0]
    assert total == 128.0 and "aten::mul" in keys, keys
    assert not res.hazards
    assert torch.autograd.profiler.profile.__init__ is before


def test_cuda_profiler_ranges_and_emit_nvtx_run_and_keep_their_synchronizations():
    """torch.cuda.profiler.start()/stop()/profile() (Megatron's --profile window: cudaProfilerStart/Stop through
    cudart, each result checked by check_error, which torch/cuda/profiler.py binds at import) and
    torch.autograd.profiler.emit_nvtx() (torch/autograd/profiler.py: it synchronizes the device on entry and exit
    and turns NVTX ranges on) run as on a GPU; NVTX ranges are not emitted (nothing reads them). The CPU build
    raised raw errors ("'NoneType' object has no attribute 'cudaError'"; "Can't use NVTX profiler - PyTorch was
    compiled without CUDA"). emit_nvtx's entry synchronizes: a side stream's write before it is ordered before a
    host read after it, so no hazard is reported."""
    def prog():
        torch.cuda.profiler.start()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            x = torch.ones(256, device="cuda") * 3
        with torch.autograd.profiler.emit_nvtx():
            host = x.sum()  # on the default stream: emit_nvtx's synchronize ordered the side stream's kernel
        with torch.cuda.profiler.profile():
            pass
        torch.cuda.profiler.stop()
        return host.item()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = simdist.run(prog)
    assert res.returns == [768.0]
    assert not res.hazards, res.report()


def test_arch_list_and_the_raw_current_stream_answer_as_a_cuda_build():
    """torch.cuda.get_arch_list() of a CUDA build lists the architectures it was compiled for (the CPU build: [],
    so library checks like `"sm_90" in get_arch_list()` took the CPU path) and includes the simulated H200's sm_90;
    get_gencode_flags follows from it. torch._C._cuda_getCurrentRawStream(i) (Triton / inductor launchers) is the
    current stream's cuda_stream (the CPU build has no such binding: a raw AttributeError)."""
    def prog():
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            raw_side = torch._C._cuda_getCurrentRawStream(0)
        return (torch.cuda.get_arch_list(), torch.cuda.get_gencode_flags(), raw_side == side.cuda_stream,
                torch._C._cuda_getCurrentRawStream(0) == torch.cuda.current_stream().cuda_stream)

    archs, flags, side_ok, cur_ok = simdist.run(prog).returns[0]
    assert "sm_90" in archs and "code=sm_90" in flags and side_ok and cur_ok
    assert torch.cuda.get_arch_list() == [] and not hasattr(torch._C, "_cuda_getCurrentRawStream")  # undone
