"""Rules found by running torch's own distributed libraries under simdist (e-series, notes e1-e4): the storage
operations torch.distributed.checkpoint's stager uses, storage identity, a tensor's attribute dictionary,
torch.cuda.cudart(), and torch.distributed in a host thread the program started."""
import copy
import threading

import pytest
import torch

import simdist
from simdist import UnsupportedOperation


def test_a_storage_made_from_a_cuda_storages_type_and_copied_is_torchs_storage_copy():
    """`type(s)(n, device=...)` is torch.UntypedStorage's constructor on a GPU (torch/csrc/Storage.cpp
    THPStorage_pynew: n bytes on that device) and `dst.copy_(src, non_blocking)` is at::storage_copy
    (aten/src/ATen/StorageUtils.cpp: a uint8 tensor viewing each storage, `dst_t.copy_(src_t, non_blocking)`),
    after THPStorage_copy_'s size check. So a device-to-host storage copy into pinned memory with non_blocking is
    asynchronous (a host read before a synchronize is a host-read hazard) and one without is synchronous.
    simdist refused the constructor (u12) and had no storage copy_ (notes e1)."""
    def fn():
        w = torch.arange(8, dtype=torch.float32, device="cuda") * 3
        s = w.untyped_storage()
        host = type(s)(s.size(), device="cpu")
        assert type(host) is torch.UntypedStorage and host.device.type == "cpu"
        host.copy_(s)                                      # synchronous: the values are there
        first = torch.empty(0).set_(host).tolist()
        dev = type(s)(s.size(), device="cuda")
        assert dev.device == w.device and dev.nbytes() == s.nbytes()
        dev.copy_(host)                                    # host to device, then back through a tensor
        back = torch.empty(0, device="cuda").set_(dev).cpu().tolist()
        try:
            host.copy_(type(s)(4, device="cpu"))
        except RuntimeError as e:
            msg = str(e)
        return first, back, msg

    (first, back, msg), = simdist.run(fn).returns
    assert first == back == [3.0 * i for i in range(8)]
    assert msg == "size does not match, self was 32 bytes but src was 4 bytes"


def test_untyped_storage_constructed_on_the_device_is_a_simulated_storage():
    """torch.UntypedStorage(n, device="cuda") is THPStorage_pynew (torch/csrc/Storage.cpp): n uninitialised bytes from
    the device's caching allocator, which a tensor can view with set_ (vLLM / IPC buffers are made so). The CPU
    build's constructor raised "Storage device not recognized: cuda" (a raw RuntimeError naming no cause); a
    CUDA storage from a sequence of bytes is refused by name; the constructor is torch's again after the run."""
    def fn():
        s = torch.UntypedStorage(16, device="cuda")
        t = torch.empty(0, dtype=torch.float32, device="cuda").set_(s)
        t.fill_(2.5)
        try:
            torch.UntypedStorage([1, 2, 3], device="cuda")
            refused = None
        except UnsupportedOperation as e:
            refused = str(e)
        return s.nbytes(), t.device.type, t.cpu().tolist(), torch.UntypedStorage(8).device.type, refused

    (n, dev, vals, cpu_dev, refused), = simdist.run(fn).returns
    assert (n, dev, vals, cpu_dev) == (16, "cuda", [2.5] * 4, "cpu")
    assert refused and "not modelled by simdist" in refused
    assert "__new__" not in torch.UntypedStorage.__dict__ and torch.UntypedStorage(4).nbytes() == 4


def _pinned_stage(sync):
    def fn():
        w = torch.ones(256, device="cuda")
        w.mul_(2)
        s = w.untyped_storage()
        host = type(s)(s.size(), device="cpu")
        assert int(torch.cuda.cudart().cudaHostRegister(host.data_ptr(), host.nbytes(), 1)) == 0
        t = torch.empty(0).set_(host)
        assert t.is_pinned()
        host.copy_(s, non_blocking=True)                   # into pinned memory: asynchronous
        if sync:
            torch.cuda.synchronize()
        return t.sum().item()
    return fn


def test_a_non_blocking_storage_copy_into_registered_pinned_memory_is_asynchronous():
    """cudaHostRegister page-locks the range (torch/cuda/_pin_memory_utils.py pin_memory, as the DCP stager pins its
    staging storages): a non_blocking device-to-host copy into it returns at once, so reading it before a
    synchronize races the copy; after torch.cuda.synchronize() it is clean and holds the values."""
    bad = simdist.run(_pinned_stage(False), seed=0)
    assert any(h.kind == "host-read" for h in bad.hazards), bad.report()
    good = simdist.run(_pinned_stage(True), seed=0)
    assert not good.hazards and good.returns == [512.0]


def test_one_storage_object_per_allocation_as_torch_preserves_it():
    """torch keeps a storage's Python object while the storage lives (torch/csrc/Storage.cpp THPStorage_Wrap), so
    views of the same bytes give the same object and id() names a storage; torch's DCP stager relies on it
    (_state_dict_stager.py _offload_tensor: memo by `id(untyped_storage)`). simdist made a new object per call,
    whose recycled id() made the stager stage another tensor's bytes in place of a tensor's (silent wrong values,
    notes e2)."""
    from torch.distributed.checkpoint._state_dict_stager import StateDictStager

    def fn():
        ts = [torch.full((4,), float(i), device="cuda") for i in range(6)]
        w = torch.arange(6.0, device="cuda")
        same = w.untyped_storage() is w.untyped_storage() is w[2:].untyped_storage()
        distinct = len({id(t.untyped_storage()) for t in ts}) == len(ts)
        sd = {"flat": ts[:3], "nested": {"a": ts[3], "b": [ts[4], ts[5]]}, "w": w, "v": w[2:5]}
        out = StateDictStager().stage(sd)
        got = [x.tolist() for x in out["flat"]] + [out["nested"]["a"].tolist()] + \
              [x.tolist() for x in out["nested"]["b"]]
        shared = out["v"].untyped_storage().data_ptr() == out["w"].untyped_storage().data_ptr()
        return same, distinct, got, out["v"].tolist(), shared

    same, distinct, got, v, shared = simdist.run(fn).returns[0]
    assert same and distinct
    assert got == [[float(i)] * 4 for i in range(6)]
    assert v == [2.0, 3.0, 4.0] and shared           # a view stays a view of the one staged storage


def test_a_tensors_attribute_dict_holds_only_what_the_program_set():
    """A GPU tensor's `__dict__` is empty until the program (or torch) sets an attribute; code walking it (the DCP
    stager copies `x.__dict__` into the staged tensor) saw simdist's internals and died pickling its TCPStore
    (notes e1). Writes through `t.__dict__` reach the tensor; copies of it are plain dicts."""
    def fn():
        t = torch.ones(2, device="cuda")
        empty = dict(vars(t))
        t.tag = "x"
        t.__dict__["other"] = 3
        d = copy.deepcopy(t.__dict__)
        t.__dict__ = {"tag": "y"}
        return empty, d, type(d) is dict, t.tag, hasattr(t, "other"), (t * 2).tolist()

    assert simdist.run(fn).returns == [({}, {"tag": "x", "other": 3}, True, "y", False, [2.0, 2.0])]


def test_cudart_is_torchs_libcudart_bindings():
    """torch.cuda.cudart() (torch/csrc/cuda/shared/cudart.cpp initCudartBindings) returned None (a CPU build's
    torch.cuda._cudart), so `cudart().cudaProfilerStart()` died with AttributeError (notes e4). Now: the profiler
    calls return success, cudaHostRegister / cudaHostUnregister give CUDA's codes (712 already registered, 713 not
    registered), raw stream handles are refused by name."""
    def fn():
        rt = torch.cuda.cudart()
        buf = torch.empty(64)
        codes = [int(rt.cudaProfilerStart()), int(rt.cudaProfilerStop()),
                 int(rt.cudaHostRegister(buf.data_ptr(), 256, 0)), int(rt.cudaHostRegister(buf.data_ptr(), 256, 0)),
                 buf.is_pinned(), int(rt.cudaHostUnregister(buf.data_ptr())),
                 int(rt.cudaHostUnregister(buf.data_ptr())), buf.is_pinned()]
        assert rt.cudaError.success == 0 and rt.cudaGetErrorString(rt.cudaError.success) == "no error"
        try:
            rt.cudaStreamCreate(0)
        except UnsupportedOperation:
            codes.append("refused")
        return codes

    assert simdist.run(fn).returns == [[0, 0, 0, 712, True, 0, 713, False, "refused"]]


def test_torch_distributed_in_a_host_thread_the_program_started_is_refused_by_name(tmp_path):
    """c10d's registry is a module global: on a GPU a program's own thread sees the process's torch.distributed.
    simdist answered from c10d's own, empty registry there, so torch.distributed.checkpoint.async_save's writer
    thread (_async_thread_executor.py save_wrapper -> save: `no_dist = ... not dist.is_initialized()`) saved as a
    single process (notes e3). Its process groups run only in a rank's thread: refused by name. Staging by
    DefaultStager(use_async_staging=False) in the rank's thread, then dcp.save, is modelled."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    def asked_in_thread():
        dist.init_process_group("cpu:gloo,cuda:nccl")
        out = {}

        def worker():
            try:
                out["init"] = dist.is_initialized()
            except UnsupportedOperation as e:
                out["init"] = "host thread" in str(e)
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        return out["init"], dist.is_initialized()

    assert simdist.run(asked_in_thread, world_size=2, torchrun=True).returns == [(True, True)] * 2

    def async_save():
        dist.init_process_group("cpu:gloo,cuda:nccl")
        sd = {f"w{dist.get_rank()}": torch.arange(8, dtype=torch.float32, device="cuda")}
        dcp.async_save(sd, checkpoint_id=str(tmp_path)).result()

    with pytest.raises(UnsupportedOperation, match="AsyncCheckpointExecutor"):
        simdist.run(async_save, world_size=2, torchrun=True)


def test_a_refusal_that_ends_a_program_thread_ends_the_run():
    """A host thread the program started that dies of a named refusal (device work outside a rank's thread, x6)
    only printed it (threading.excepthook); torch.distributed.checkpoint's FileSystemWriter(thread_count=2) writer
    threads died so and dcp.save then failed with a raw KeyError of the missing write results, or a program ran on
    without the thread's work (notes e6). Now the rank's program ends with the refusal, what it raised afterwards
    noted; a refusal the thread catches itself is the program's business (unchanged)."""
    def died_then_keyerror():
        x = torch.ones(4, device="cuda")
        results = {}
        t = threading.Thread(target=lambda: results.__setitem__("y", x.cpu()))
        t.start()
        t.join()
        return results["y"]                  # KeyError: the thread never stored it

    with pytest.raises(UnsupportedOperation, match="host thread the program started") as info:
        simdist.run(died_then_keyerror)
    assert any("KeyError" in n for n in getattr(info.value, "__notes__", []))

    def died_then_returned():
        x = torch.ones(4, device="cuda")
        t = threading.Thread(target=lambda: x.mul_(2))
        t.start()
        t.join()
        return x.cpu().tolist()              # [1, 1, 1, 1] here; [2, 2, 2, 2] on a GPU

    with pytest.raises(UnsupportedOperation, match="host thread the program started"):
        simdist.run(died_then_returned)

    def caught_in_thread():
        x = torch.ones(4, device="cuda")
        seen = []

        def work():
            try:
                x.mul_(2)
            except UnsupportedOperation:
                seen.append("refused")
        t = threading.Thread(target=work)
        t.start()
        t.join()
        return seen

    assert simdist.run(caught_in_thread).returns == [["refused"]]


def test_deepcopy_of_parameters_and_tensors_is_torchs():
    """nn.Parameter.__deepcopy__ (torch/nn/parameter.py) makes a new Parameter of a clone of the data with its
    requires_grad, without its grad or Python attributes; torch.Tensor.__deepcopy__ (torch/_tensor.py) deep-copies
    the storage once per deepcopy (views copied together stay views of one new storage, strides and offsets kept),
    then the grad and `__dict__`. simdist kept a parameter's grad (a model deep-copied after a backward, an EMA or
    reference model, had stale gradients that a GPU's copy has not), dropped a tensor's attributes and made each
    view a separate contiguous clone (notes e8). Checked against the same code on CPU tensors."""
    def fn():
        out = []
        for dev in ("cpu", "cuda"):
            m = torch.nn.Linear(2, 2).to(dev)
            m(torch.ones(1, 2, device=dev)).sum().backward()
            m.weight.tag = "w"
            m2 = copy.deepcopy(m)
            t = torch.arange(6.0, device=dev)
            t.note = 5
            g = torch.ones(6, device=dev)
            t.requires_grad_(True)
            t.grad = g
            d = copy.deepcopy({"t": t, "v": t.detach()[2:4], "tt": t.detach().view(2, 3).t()})
            with torch.no_grad():
                d["t"].add_(1)
            out.append([m2.weight.grad is None, getattr(m2.weight, "tag", None),
                        isinstance(m2.weight, torch.nn.Parameter), m2.weight.requires_grad,
                        getattr(d["t"], "note", None), d["t"].grad.tolist(), d["v"].tolist(), d["tt"].stride(),
                        d["tt"].tolist()])
        return out

    cpu, cuda = simdist.run(fn).returns[0]
    assert cuda == cpu
    # the copied parameter has no grad; the tensor keeps its attribute and grad; the copied view shares the copied
    # storage (it sees the copy's add_), the transposed view keeps its strides
    assert cpu[0] is True and cpu[4] == 5 and cpu[5] == [1.0] * 6 and cpu[6] == [3.0, 4.0] and cpu[7] == (1, 3)


def test_torch_save_keeps_a_storages_views_and_a_tensors_attributes():
    """torch.save pickles each storage once and every tensor as its view of it (torch/_tensor.py
    _reduce_ex_internal: _rebuild_tensor_v2(storage, offset, size, stride, ...)), with the tensor's Python
    attributes (_rebuild_from_type_v2's state); torch.load rebuilds the views on one storage. simdist copied each
    simulated tensor to the host on its own: after a load the views no longer shared bytes and the attributes were
    gone (notes e9). Checked against the same code on CPU tensors, and map_location='cpu' of the same file."""
    import io

    def fn():
        out = []
        for dev in ("cpu", "cuda"):
            t = torch.arange(6.0, device=dev)
            t.note = 7
            buf = io.BytesIO()
            torch.save({"t": t, "v": t[2:4], "tt": t.view(2, 3).t()}, buf)
            buf.seek(0)
            d = torch.load(buf)
            d["t"].add_(1)
            buf.seek(0)
            h = torch.load(buf, map_location="cpu")
            h["t"].add_(10)
            out.append([d["t"].device.type == dev, d["v"].tolist(), d["tt"].stride(), d["tt"].tolist(),
                        getattr(d["t"], "note", None), h["v"].device.type, h["v"].tolist()])
        return out

    cpu, cuda = simdist.run(fn).returns[0]
    assert cuda == cpu
    assert cpu[1] == [3.0, 4.0] and cpu[2] == (1, 3) and cpu[4] == 7 and cpu[6] == [12.0, 13.0]


def test_a_saved_parameter_loads_as_a_parameter():
    """nn.Parameter.__reduce_ex__ pickles torch._utils._rebuild_parameter(_with_state): torch.load gives an
    nn.Parameter with its requires_grad and Python attributes, so a whole module saved with torch.save loads with
    Parameters. A simulated parameter loaded as a plain tensor (isinstance(p, nn.Parameter) False, in the module's
    _parameters too; notes e10). Checked against the same code on CPU tensors, map_location='cpu' too."""
    import io

    def fn():
        out = []
        for dev in ("cpu", "cuda"):
            m = torch.nn.Linear(2, 2).to(dev)
            m.weight.tp = 1
            buf = io.BytesIO()
            torch.save(m, buf)
            buf.seek(0)
            m2 = torch.load(buf, weights_only=False)
            p = torch.nn.Parameter(torch.ones(3, device=dev), requires_grad=False)
            buf = io.BytesIO()
            torch.save({"p": p}, buf)
            buf.seek(0)
            p2 = torch.load(buf)["p"]
            buf.seek(0)
            p3 = torch.load(buf, map_location="cpu")["p"]
            m2(torch.ones(1, 2, device=dev)).sum().backward()
            out.append([isinstance(m2.weight, torch.nn.Parameter), m2.weight.grad is not None,
                        getattr(m2.weight, "tp", None), isinstance(p2, torch.nn.Parameter), p2.requires_grad,
                        isinstance(p3, torch.nn.Parameter), p3.device.type])
        return out

    cpu, cuda = simdist.run(fn).returns[0]
    assert cuda == cpu == [True, True, 1, True, False, True, "cpu"]


def test_torch_load_of_a_dtensor_state_dict_in_a_rank():
    """torch.load rebuilds a DTensor through torch._utils._rebuild_wrapper_subclass, whose _get_restore_location
    refuses a callable map_location; simdist's torch.load in a rank passes one of its own (it keeps storages bound
    for a device on the host), so loading an FSDP2 / DTensor state dict raised "Callable map_location not supported
    with _rebuild_wrapper_subclass" where a GPU loads it (notes e11). The program's own map_location decides."""
    import io

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    def fn():
        mesh = init_device_mesh("cuda", (2,))
        d = distribute_tensor(torch.arange(8.0, device="cuda"), mesh, [Shard(0)])
        buf = io.BytesIO()
        torch.save({"w": d}, buf)
        buf.seek(0)
        back = torch.load(buf, weights_only=False)["w"]
        buf.seek(0)
        host = torch.load(buf, map_location="cpu", weights_only=False)["w"]
        return (type(back).__name__, str(back.device), back.placements == d.placements, back.to_local().tolist(),
                str(host.to_local().device), back.full_tensor().tolist() == list(map(float, range(8))))

    r = simdist.run(fn, world_size=2, torchrun=True).returns
    assert r == [("DTensor", "cuda:0", True, [0.0, 1.0, 2.0, 3.0], "cpu", True),
                 ("DTensor", "cuda:1", True, [4.0, 5.0, 6.0, 7.0], "cpu", True)]


def test_a_pinned_storage_reads_as_pinned():
    """UntypedStorage.pin_memory() (torch/storage.py: a temporary tensor over the storage is pinned and only the
    storage is returned) gives pinned memory: is_pinned() is True, as on a GPU, and so is a tensor viewing it.
    simdist keyed pinned memory by the temporary tensor, so the storage read as not pinned."""
    def fn():
        s = torch.UntypedStorage(16).pin_memory()
        t = torch.empty(0, dtype=torch.float32).set_(s)
        return s.is_pinned(), t.is_pinned(), torch.UntypedStorage(16).is_pinned()

    assert simdist.run(fn).returns == [(True, True, False)]
