"""Rules of ProcessGroupNCCL that simdist got wrong (notes zd1-zd4), each checked against what an H200 did with
torch 2.11 / NCCL 2.28 (ci/gpu_z_nccl_facts.py; docs/gpu/z-series-nccl-facts-2026-12-02.json) and the source lines
named. The whole fact table is compared too: every fact the GPU and simdist both measure at world size 1 agrees,
except the ones listed in KNOWN_DIFFERENCES with the reason."""
import json
import os

import pytest
import torch
import torch.distributed as dist

import simdist

HERE = os.path.dirname(os.path.abspath(__file__))
GPU_FACTS = os.path.join(HERE, "..", "docs", "gpu", "z-series-nccl-facts-2026-12-02.json")


# --- zd1: PREMUL_SUM ----------------------------------------------------------------------------------------
@pytest.fixture
def torch_2_11_premul(monkeypatch):
    """The bf16 PREMUL_SUM factor as torch <= 2.11 hands it to NCCL (measured), whatever torch runs the tests."""
    from simdist.faces import c10d
    monkeypatch.setattr(c10d, "BF16_PREMUL_FACTOR_AS_FLOAT", True)


def test_bf16_premul_sum_is_refused_where_the_torch_is_not_measured(monkeypatch):
    """After torch 2.11 (the measured version) it is not known whether the factor bug is fixed: a bf16 PREMUL_SUM
    is refused by name rather than given the measured zeros or the intended values (either may be a silent wrong
    value there); fp16 / fp32 PREMUL_SUM and bf16 AVG are unaffected."""
    from simdist.faces import c10d
    monkeypatch.setattr(c10d, "BF16_PREMUL_FACTOR_AS_FLOAT", None)

    def prog():
        out = []
        for dt, op in ((torch.float16, dist._make_nccl_premul_sum(0.5)), (torch.bfloat16, dist.ReduceOp.AVG),
                       (torch.bfloat16, dist._make_nccl_premul_sum(0.5))):
            x = torch.full((2,), 2.0, dtype=dt, device="cuda")
            try:
                dist.all_reduce(x, op=op)
                out.append(x[0].item())
            except simdist.UnsupportedOperation as e:
                out.append("bfloat16" in str(e) and "not measured" in str(e))
        return out

    assert simdist.run(prog, world_size=2).returns[0] == [2.0, 2.0, True]


def test_bf16_premul_sum_reads_the_factor_as_the_low_half_of_a_float(torch_2_11_premul):
    """torch <= 2.11 getNcclReduceOp hands NCCL a float factor for bfloat16 data (unpackPreMulSum<float,
    ncclBfloat16>) and NCCL reads 2 bytes of it: the factor is the bfloat16 whose bits are the float32's low half, so
    every power of two multiplies by 0 (pytorch/pytorch#190745: FSDP2's bf16 reduce-scatter with a custom
    gradient_divide_factor returns zeros). Measured on an H200: PREMUL_SUM(0.5), (3.0), (0.75) of bf16 give 0,
    (1/3) multiplies by -3.04e-13; fp16/fp32/fp64 are right."""
    def prog():
        out = {}
        for dt in (torch.bfloat16, torch.float16, torch.float32):
            for f in (0.5, 3.0, 1.0 / 3.0):
                x = torch.full((2,), 2.0, dtype=dt, device="cuda")
                dist.all_reduce(x, op=dist._make_nccl_premul_sum(f))
                out[(str(dt), f)] = x[0].item()
        x = torch.full((4,), 2.0, dtype=torch.bfloat16, device="cuda")
        y = torch.empty(2, dtype=torch.bfloat16, device="cuda")
        dist.reduce_scatter_tensor(y, x, op=dist._make_nccl_premul_sum(torch.tensor([0.5], device="cuda")))
        out["rs_tensor_factor"] = y.tolist()
        return out
    r = simdist.run(prog, world_size=2).returns[0]
    assert r[("torch.bfloat16", 0.5)] == 0.0 and r[("torch.bfloat16", 3.0)] == 0.0
    assert -1.3e-12 < r[("torch.bfloat16", 1.0 / 3.0)] < -1.1e-12  # 2 ranks x 2.0 x (-3.04e-13)
    assert r["rs_tensor_factor"] == [0.0, 0.0]
    assert r[("torch.float16", 0.5)] == 2.0 and r[("torch.float32", 3.0)] == 12.0
    assert r[("torch.float16", 1.0 / 3.0)] == 2 * float(torch.tensor(2.0 * (1.0 / 3.0), dtype=torch.float16))


@pytest.mark.parametrize("dtype, factor, exc, match", [
    (torch.int32, 2.0, TypeError, "PreMulSum Data type must be half, float, bfloat16 or double"),
    (torch.uint8, 2.0, TypeError, "PreMulSum Data type must be half, float, bfloat16 or double"),
    (torch.bool, 2.0, TypeError, "PreMulSum Data type must be half, float, bfloat16 or double"),
    (torch.float16, "float32", RuntimeError, "expected scalar type Half but found Float"),
    (torch.bfloat16, "bfloat16", RuntimeError, "expected scalar type Float but found BFloat16"),
    (torch.float32, "cpu", simdist.UnsupportedOperation, "factor tensor on the CPU"),
])
def test_premul_sum_refusals(dtype, factor, exc, match, torch_2_11_premul):
    """getNcclReduceOp: PREMUL_SUM only for half, float, bfloat16, double (TypeError); a factor tensor is read
    through const_data_ptr<T>() (RuntimeError for another dtype), from device memory (a CPU factor is an illegal
    memory access on an H200: refused by name). simdist computed all of these."""
    def prog():
        x = torch.ones(2, dtype=dtype, device="cuda")
        if factor == "cpu":
            f = torch.tensor([0.5])
        elif isinstance(factor, str):
            f = torch.tensor([0.5], dtype=getattr(torch, factor), device="cuda")
        else:
            f = factor
        dist.all_reduce(x, op=dist._make_nccl_premul_sum(f))
    with pytest.raises(exc, match=match):
        simdist.run(prog, world_size=2)


# --- zd2: the dtypes NCCL has ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, call, exc, match", [
    (torch.int16, "all_reduce", TypeError, "not supported for NCCL process group: Short"),
    (torch.int16, "all_gather_into_tensor", TypeError, "not supported for NCCL process group: Short"),
    (torch.uint16, "broadcast", TypeError, "not supported for NCCL process group: UInt16"),
    (torch.uint32, "send", TypeError, "not supported for NCCL process group: UInt32"),
    (torch.uint64, "all_to_all_single", RuntimeError, "Unconvertible NCCL type UInt64"),
    (torch.float8_e8m0fnu, "all_reduce", RuntimeError, "Unsupported Float8 type for NCCL reduction"),
    (torch.float8_e4m3fnuz, "all_reduce", RuntimeError, "Unsupported Float8 type for NCCL reduction"),
    (torch.float8_e4m3fn, "all_reduce_avg", dist.DistBackendError, "invalid argument"),
])
def test_dtypes_nccl_does_not_map_are_refused_as_torch_refuses_them(dtype, call, exc, match):
    """NCCLUtils.hpp's ncclDataType has no int16, uint16/32/64 or float8_e8m0fnu: getNcclDataType raises TypeError
    ('Input tensor data type is not supported for NCCL process group: Short') for every collective and P2P,
    all_to_all's torch/csrc/cuda/nccl.cpp a RuntimeError ('Unconvertible NCCL type'); fnuz and e8m0 float8 have no
    NCCL reduction; ncclAvg of e4m3fn is an NCCL invalid argument (all measured on an H200). simdist moved them."""
    def prog():
        x = torch.zeros(4, device="cuda").to(dtype)
        if call == "all_reduce":
            dist.all_reduce(x)
        elif call == "all_reduce_avg":
            dist.all_reduce(x, op=dist.ReduceOp.AVG)
        elif call == "all_gather_into_tensor":
            dist.all_gather_into_tensor(torch.empty(8, device="cuda").to(dtype), x)
        elif call == "broadcast":
            dist.broadcast(x, 0)
        elif call == "send":
            if dist.get_rank() == 0:
                dist.send(x, 1)
            else:
                dist.recv(x, 0)
        else:
            dist.all_to_all_single(torch.empty_like(x), x)
    with pytest.raises(exc, match=match):
        simdist.run(prog, world_size=2)


# --- zd3: list collectives that NCCL checks, or cannot convert ----------------------------------------------
def test_gather_scatter_list_size_mismatch_is_torchs_value_error():
    """ProcessGroupNCCL::gather / scatter check every list tensor against the single one (assertTypeAndSizesMatch
    through invalidArgument: ValueError 'ProcessGroupNCCL::gather: invalid tensor size at index 0 (expected (3),
    got (4))', measured); simdist raised a reshape's RuntimeError from inside the collective."""
    def gather():
        outs = [torch.empty(4, device="cuda") for _ in range(2)] if dist.get_rank() == 0 else None
        dist.gather(torch.ones(3, device="cuda"), outs, dst=0)

    def scatter():
        ins = [torch.ones(4, device="cuda") for _ in range(2)] if dist.get_rank() == 0 else None
        dist.scatter(torch.empty(3, device="cuda"), ins, src=0)
    with pytest.raises(ValueError, match=r"ProcessGroupNCCL::gather: invalid tensor size at index 0 \(expected \(3\)"):
        simdist.run(gather, world_size=2)
    with pytest.raises(ValueError, match=r"ProcessGroupNCCL::scatter: invalid tensor size at index 0"):
        simdist.run(scatter, world_size=2)


def test_all_to_all_list_of_other_dtypes_or_counts_across_ranks_is_a_mismatch():
    """torch::cuda::nccl::all2all sends ins[j] with its own count and datatype and receives outs[j] likewise: NCCL
    moves bytes, so a rank sending int32 to one receiving float32 gets the bits, not a conversion; simdist matched
    all_to_all by its list length only and copy_ converted the values (a silent difference from a GPU), and sizes
    that disagree died in a reshape. Now the dtype is part of the signature and counts are checked pairwise."""
    def dtypes():
        dt = torch.int32 if dist.get_rank() == 0 else torch.float32
        outs = [torch.zeros(2, device="cuda", dtype=dt) for _ in range(2)]
        dist.all_to_all(outs, [torch.full((2,), 7, device="cuda", dtype=dt) for _ in range(2)])

    def counts():
        outs = [torch.zeros(2, device="cuda") for _ in range(2)]
        dist.all_to_all(outs, [torch.ones(2 + dist.get_rank(), device="cuda") for _ in range(2)])

    def uneven_ok():  # uneven but matching pairs are legal
        r = dist.get_rank()
        ins = [torch.full((1 + j,), 10.0 * r + j, device="cuda") for j in range(2)]  # to rank j: 1 + j elements
        outs = [torch.zeros(1 + r, device="cuda") for _ in range(2)]                 # from rank k: 1 + me
        dist.all_to_all(outs, ins)
        return [o.tolist() for o in outs]
    with pytest.raises(simdist.CollectiveMismatch, match="all_to_all"):
        simdist.run(dtypes, world_size=2)
    with pytest.raises(simdist.CollectiveMismatch, match="sends 3 elements to rank 0, which receives 2"):
        simdist.run(counts, world_size=2)
    assert simdist.run(uneven_ok, world_size=2).returns == [[[0.0], [10.0]], [[1.0, 1.0], [11.0, 11.0]]]


def test_broadcast_from_a_root_outside_the_group_is_an_nccl_error():
    """ProcessGroupNCCL::broadcast has no assertRootRank: ncclBroadcast refuses the root (DistBackendError 'NCCL
    error ... invalid argument', measured at world size 1); simdist raised a ValueError."""
    def prog():
        dist.broadcast(torch.ones(2, device="cuda"), src=5)
    with pytest.raises(dist.DistBackendError, match="invalid argument"):
        simdist.run(prog, world_size=2)


# --- zd4: the Work of a list all_gather ------------------------------------------------------------------------
def test_list_all_gather_future_value_is_the_flat_output():
    """ProcessGroupNCCL::allgather with outputs of one size gathers into outputFlattened = newLikeFlat(outputs)
    ([world, *shape]) and copies its rows out; the Work's outputs, so result() and the future's value, are
    [outputFlattened] (measured: shape [1, 4] at world size 1). torch's quantization comm hooks index it
    (ddp_comm_hooks/quantization_hooks.py: `all_ranks_s_and_z = fut.wait()[0]` then `[rank][0]`); simdist gave the
    list of outputs, so the hook read rank 0's tensor as everyone's and died on a 0-dim len()."""
    def prog():
        r = dist.get_rank()
        outs = [torch.zeros(3, device="cuda") for _ in range(2)]
        fut = dist.all_gather(outs, torch.full((3,), float(r + 1), device="cuda"), async_op=True).get_future()
        v = fut.wait()
        return len(v), tuple(v[0].shape), v[0].tolist(), [o.tolist() for o in outs]
    for r in simdist.run(prog, world_size=2).returns:
        assert r == (1, (2, 3), [[1.0] * 3, [2.0] * 3], [[1.0] * 3, [2.0] * 3])


def test_list_all_gather_copies_its_rows_on_the_collectives_stream():
    """The rows of outputFlattened reach the outputs by copy_ kernels in ProcessGroupNCCL's post-processing, on the
    collective's stream under a CUDAStreamGuard, before the Work's end event: outputs of any layout of one size are
    taken (column slices of a larger buffer), with async_op=True too, and only wait() orders the caller after the
    copies (reading before it is a race, its stale bytes observed). simdist refused the async case by name and
    staged synchronous ones through stand-ins of its own."""
    def prog(wait):
        n, r = dist.get_world_size(), dist.get_rank()
        big = torch.zeros(4, 2 * n, device="cuda")
        work = dist.all_gather([big[:, 2 * j:2 * j + 2] for j in range(n)], torch.full((4, 2), float(r + 1),
                                                                                      device="cuda"), async_op=True)
        if wait:
            work.wait()
        return big[0].tolist(), [tuple(x.shape) for x in work.result()]
    for nccl in ("2.7", "2.8"):
        res = simdist.run(prog, world_size=2, nccl=nccl, args=(True,))
        assert res.returns == [([1.0, 1.0, 2.0, 2.0], [(2, 4, 2)])] * 2 and not res.hazards
    res = simdist.run(prog, world_size=2, args=(False,))
    assert {h.kind for h in res.hazards} == {"host-read"} and all(h.observed for h in res.hazards)


def test_work_is_success_is_deprecated_on_nccl():
    """WorkNCCL::isSuccess raises NotImplementedError('WorkNCCL::isSuccess() is deprecated'), measured."""
    def prog():
        w = dist.all_reduce(torch.ones(1, device="cuda"), async_op=True)
        w.wait()
        w.is_success()
    with pytest.raises(NotImplementedError, match="isSuccess"):
        simdist.run(prog, world_size=2)


# --- the fact table against the H200 ----------------------------------------------------------------------------
# (fact, why simdist differs from the world-size-1 GPU run)
KNOWN_DIFFERENCES = {
    "all_gather/list_size_mismatch": "a misuse NCCL runs into garbage at world 1; simdist names it (ValueError)",
    "all_gather/list_wrong_len": "a misuse NCCL runs into garbage at world 1; simdist names it (ValueError)",
    "all_to_all/list_size_mismatch": "send/recv counts that disagree: NCCL leaves bytes unwritten, simdist names it",
    "all_reduce/float32/PREMUL_SUM(tensor cpu)": "an illegal memory access on the GPU; simdist refuses it by name",
    "all_reduce/sparse": "sparse CUDA tensors are refused by name when made",
    "work": "Work.exception() on the GPU is pybind's TypeError ('Unable to convert function return value')",
    "all_reduce/cpu_tensor": "same error and type; simdist's message says more",
    "all_to_all_single/bad_splits": "same error and type; simdist's message says more",
}
# world-size-1 shortcuts of ProcessGroupNCCL (reduce_scatter_tensor, reduce, scatter copy before NCCL's checks)
# and float8 reductions that simdist refuses by name (UnsupportedOperation) rather than model their rounding
SHORTCUT_OR_FP8 = ("reduce_scatter_tensor/", "reduce/float8", "scatter/strided_out", "all_reduce/float8_e4m3fn/",
                   "all_reduce/float8_e5m2/")


def test_nccl_fact_table_matches_the_h200(tmp_path, torch_2_11_premul):
    # (the table was measured under torch 2.11: simdist models that torch's bf16 PREMUL_SUM here; in threads, where
    # the fixture's setting reaches the rank)
    out = tmp_path / "sim.json"
    script = os.path.join(HERE, "..", "ci", "gpu_z_nccl_facts.py")
    os.environ["FACTS_OUT"] = str(out)
    try:
        simdist.run_script(script, world_size=1, transport="threads")
    finally:
        del os.environ["FACTS_OUT"]
    sim = json.loads(out.read_text())["facts"]
    gpu = json.load(open(GPU_FACTS))["facts"]
    bad = []
    for k, g in gpu.items():
        s = sim.get(k)
        if s is None or k in KNOWN_DIFFERENCES:
            continue
        if k.startswith(SHORTCUT_OR_FP8) and g["ok"] != s["ok"]:
            continue
        if g["ok"] != s["ok"] or (g["ok"] and g["value"] != s["value"]) or (
                not g["ok"] and (g["type"] != s["type"] or g["msg"][:40] != s["msg"][:40])):
            bad.append((k, g, s))
    assert not bad, "\n".join(f"{k}: GPU {g} / simdist {s}" for k, g, s in bad)


def test_a_premul_sum_op_without_a_readable_factor_is_remembered_by_the_rank(monkeypatch, torch_2_11_premul):
    """torch 2.11's ReduceOp (a CUDA build, measured on an H200) has no `.factor` (2.13's has): simdist could not
    read the factor there and refused every PREMUL_SUM ("needs a factor"). dist._make_nccl_premul_sum is wrapped
    so the rank remembers the factor of the op it made. Modelled here with an op that has no `.factor`."""
    import types
    from simdist.faces import c10d
    monkeypatch.setattr(c10d, "_orig_make_premul", lambda f: types.SimpleNamespace(op=dist.ReduceOp.PREMUL_SUM))

    def prog():
        x = torch.full((2,), 2.0, device="cuda")
        dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.5))
        return x.tolist()

    assert simdist.run(prog, world_size=2).returns == [[2.0, 2.0]] * 2
