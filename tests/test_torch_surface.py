"""Torch semantics the dispatcher must keep exactly: what a program computes is what eager torch computes.

Each test names the rule; the reference is eager CPU torch on the same program (a simulated GPU must compute
what a real one does, bit for bit on these ops).
"""
import pytest
import torch

import simdist


def test_scalar_type_is_part_of_the_output_signature():
    # Type promotion (docs: torch "Type Promotion"): int tensor + 1 stays int64, + 1.0 is float32, + True
    # stays int64. 1, 1.0 and True are equal Python keys, so a shape cache keyed on the value alone mixes them.
    def fn():
        x = torch.arange(4, device="cuda")
        a, b, c = x + 1, x + 1.0, x + True
        return a.dtype, b.dtype, c.dtype, a.cpu(), b.cpu()

    (da, db, dc, a, b), = simdist.run(fn).returns
    assert (da, db, dc) == (torch.int64, torch.float32, torch.int64)
    assert a.tolist() == [1, 2, 3, 4] and b.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_in_place_view_ops_change_metadata_at_once():
    # t_(), transpose_(), unsqueeze_(), squeeze_(), as_strided_() change sizes/strides of the tensor object
    # itself (docs: "Tensor Views"); no device work is involved, so later ops and .shape see it immediately.
    def prog(dev):
        x = torch.arange(6., device=dev).reshape(2, 3)
        x.unsqueeze_(0)
        s0 = tuple(x.shape)
        x.squeeze_(0)
        x.t_()
        y = x * 2
        x.transpose_(0, 1)
        z = x + 0
        v = torch.arange(6., device=dev)
        v.as_strided_((2, 2), (1, 2), 1)
        w = torch.arange(8., device=dev)
        w.resize_(2, 2)
        return s0, tuple(x.shape), y.cpu(), z.cpu(), v.cpu(), w.cpu()

    got, = simdist.run(prog, args=("cuda",)).returns
    want = prog("cpu")
    assert got[:2] == want[:2]
    for g, w in zip(got[2:], want[2:]):
        assert torch.equal(g, w)


def test_as_strided_offsets_count_from_the_tensors_storage():
    # as_strided's storage_offset counts from the start of the tensor's storage (ATen setStrided; docs of
    # torch.as_strided), wherever the caching allocator placed that storage. torch DDP's reducer makes its bucket
    # views so; simdist once read the offset from the start of the segment and the all-reduce summed stale bytes
    # while the gradients went elsewhere (a silent wrong value). `pad` keeps the bucket off the segment's start.
    def prog(dev):
        pad = torch.zeros(100, device=dev)
        b = torch.arange(15., device=dev)
        v = b.as_strided((3, 4), (4, 1), 2)
        v.mul_(10)  # writes through the view into b
        c = torch.as_strided_copy(b, (2,), (1,), 5)
        s = torch.as_strided_scatter(b, torch.full((2,), -1., device=dev), (2,), (1,), 3)
        w = b[3:].as_strided((2,), (2,), 1)
        u = torch.arange(6., device=dev)[2:]
        u.as_strided_((2,), (1,), 0)  # in place: offset 0 is the storage's first element, not the view's
        try:
            b.as_strided((4, 4), (4, 1), 0)
            refused = None
        except RuntimeError as e:
            refused = str(e).split(" requiring")[0]
        return b.cpu(), c.cpu(), s.cpu(), w.cpu(), u.cpu(), refused, pad.sum().item()

    got, = simdist.run(prog, args=("cuda",)).returns
    want = prog("cpu")
    for g, w in zip(got[:5], want[:5]):
        assert torch.equal(g, w), (g, w)
    assert got[5:] == want[5:]


def test_resize_past_the_allocation_reallocates_and_keeps_the_bytes():
    # ATen's resize_ grows the storage (new memory, the old bytes copied) and every view of it follows;
    # untyped_storage().resize_(0) frees it (using the tensor then fails, as in torch), resize_(n) brings it back
    def fn():
        w = torch.arange(8., device="cuda")
        v = w[2:4]
        w.resize_(100)
        w[8:].fill_(1.0)
        grown = (w[:10].tolist(), v.tolist())
        st = w.untyped_storage()
        st.resize_(0)
        try:
            (w * 2).sum().item()
            used = True
        except RuntimeError as e:
            used = "storage" in str(e) and False
        st.resize_(400)
        w.fill_(3.0)
        return grown, used, v.tolist(), st.size(), torch.cuda.memory_allocated() >= 400

    (grown, used, v_after, size, mem), = simdist.run(fn).returns
    assert grown == ([0., 1., 2., 3., 4., 5., 6., 7., 1., 1.], [2., 3.])
    assert not used and v_after == [3., 3.] and size == 400 and mem


@pytest.mark.parametrize("op", ["add", "mul", "sub", "div", "pow", "maximum"])
def test_repeated_signatures_take_the_fast_path_and_stay_exact(op):
    # The fused fast path (cached output spec, .out overload) must give eager's values and dtypes exactly,
    # including mixed int/float scalars and broadcasting.
    f = getattr(torch, op)

    def prog(dev):
        g = torch.Generator().manual_seed(0)
        a = torch.randn(3, 4, generator=g).to(dev)
        b = torch.randn(4, generator=g).to(dev)
        i = torch.arange(12, device=dev).reshape(3, 4)
        outs = []
        for _ in range(3):
            outs.append(f(a, b).cpu())
            if op == "maximum":  # tensor-tensor only
                outs.append(f(i, i.flip(0)).cpu())
                continue
            outs.append(f(a, 2).cpu())
            outs.append(f(a, 2.5).cpu())
            if op not in ("div", "pow"):
                outs.append(f(i, 3).cpu())
        return outs

    got, = simdist.run(prog, args=("cuda",), policy="none").returns
    want = prog("cpu")
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)  # bit-exact (pow gives NaNs)


def test_like_factories_read_no_bytes():
    # zeros_like / ones_like / empty_like / new_zeros take shape, dtype and device from their argument and never
    # read its data (ATen: they are factories), so using them on a tensor still being written elsewhere is safe.
    def fn():
        side = torch.cuda.Stream()
        x = torch.empty(1 << 12, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            x.fill_(3.0)
        a, b, c = torch.zeros_like(x), torch.ones_like(x), x.new_zeros(8)
        for _ in range(2):  # the repeated signature takes the fast path: still no read
            a = torch.zeros_like(x)
        torch.cuda.current_stream().wait_stream(side)
        return a.sum().item(), b.sum().item(), c.sum().item(), x.sum().item()

    res = simdist.run(fn)
    assert res.hazards == [] and res.returns[0] == (0.0, 4096.0, 0.0, 3.0 * 4096)


def test_torch_save_and_load_of_cuda_tensors():
    # torch.save of a CUDA tensor copies its bytes to the host (synchronously) and torch.load puts them back on
    # the saved device unless map_location says otherwise (torch/serialization.py)
    import io

    def fn():
        x = torch.arange(6., device="cuda").reshape(2, 3) * 2
        buf = io.BytesIO()
        torch.save({"x": x, "step": 3}, buf)
        buf.seek(0)
        on_dev = torch.load(buf)
        buf.seek(0)
        on_cpu = torch.load(buf, map_location="cpu")
        return str(on_dev["x"].device), on_dev["x"].cpu(), str(on_cpu["x"].device), on_cpu["step"], buf.getvalue()

    dev, a, cpu_dev, step, blob = simdist.run(fn).returns[0]
    assert dev == "cuda:0" and cpu_dev == "cpu" and step == 3
    assert torch.equal(a, torch.arange(6.).reshape(2, 3) * 2)
    import io as _io
    outside = torch.load(_io.BytesIO(blob))  # a checkpoint written in a run loads on the host afterwards
    assert torch.equal(outside["x"], a)


def test_module_cuda_keeps_parameter_objects_and_their_attributes():
    # nn.Module._apply moves a parameter with `param.data = fn(param)` (torch/nn/modules/module.py), so on a GPU
    # the Parameter object, and every attribute a library set on it, survive .cuda(): Megatron tags
    # `tensor_model_parallel` before moving the model and reads it in its grad-norm; an optimizer built before
    # .cuda() holds the same objects. simdist once returned new Parameters without the attributes (a grad norm
    # off by 30%, silently).
    def prog(dev):
        torch.manual_seed(0)
        m = torch.nn.Linear(4, 4)
        w = m.weight
        w.tensor_model_parallel = True
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        m.to(dev)
        m.half().float()
        m(torch.ones(2, 4, device=dev)).sum().backward()
        opt.step()
        return (m.weight is w, getattr(m.weight, "tensor_model_parallel", None), m.weight.device.type,
                w.detach().cpu())

    got, = simdist.run(prog, args=("cuda",)).returns
    want = prog("cpu")
    assert got[:2] == (True, True) == want[:2]
    assert got[2] == "cuda"
    assert torch.equal(got[3], want[3])  # the optimizer stepped the object the model uses


def test_data_assignment_makes_a_parameter_view_other_bytes():
    # `p.data = flat[i:j].view_as(p)` (Megatron's distributed optimizer, ZeRO-style flat buffers): p keeps its
    # object and from then on reads and writes the buffer's bytes (torch's set_data shares the storage).
    def prog(dev):
        p = torch.nn.Parameter(torch.zeros(2, 3, device=dev))
        flat = torch.arange(10., device=dev)
        p.data = flat[2:8].view(2, 3)
        flat.mul_(2)
        with torch.no_grad():
            p.add_(1)
        return p.detach().cpu(), flat.cpu()

    got, = simdist.run(prog, args=("cuda",)).returns
    want = prog("cpu")
    for g, w in zip(got, want):
        assert torch.equal(g, w), (g, w)


def test_data_assignment_across_the_host_and_the_device_keeps_the_object():
    # `t.data = t.to(device)` moves t in place on a GPU (torch's set_data: same object, class, attributes,
    # requires_grad; new device and bytes): torch FSDP2 moves a host-built module's parameters so
    # (torch/distributed/fsdp/_fully_shard/_fsdp_init.py _move_states_to_device). simdist once left a host
    # Parameter holding a simulated tensor's metadata, and its next op ran into the CPU build's missing CUDA
    # kernels (NotImplementedError: aten::as_strided ... 'CUDA' backend).
    def prog(dev):
        p = torch.nn.Parameter(torch.arange(6.).view(2, 3))
        p.partition_dim = 1
        buf = torch.ones(3)
        p_id, buf_id = id(p), id(buf)
        p.data = p.to(dev)
        buf.data = buf.to(dev) * 2
        moved = (isinstance(p, torch.nn.Parameter), p.requires_grad, p.partition_dim, p.device.type,
                 buf.device.type)
        y = (p * buf).sum()
        y.backward()
        grad = p.grad.cpu()
        p.grad = None
        p.data = p.data.cpu()  # and back to the host
        back = (isinstance(p, torch.nn.Parameter), p.device.type, p.partition_dim)
        return id(p) == p_id and id(buf) == buf_id, moved, y.item(), grad, back, p.detach().clone()

    got, = simdist.run(prog, args=("cuda",)).returns
    want = prog("cpu")
    assert got[0] and want[0]
    assert got[1] == (True, True, 1, "cuda", "cuda") and want[1][:3] == got[1][:3]
    assert got[2] == want[2] and torch.equal(got[3], want[3])
    assert got[4] == (True, "cpu", 1) and torch.equal(got[5], want[5])


def test_torch_load_with_map_location_cuda_puts_host_tensors_on_the_device():
    # torch.load(f, map_location="cuda") moves every storage to the device (torch/serialization.py
    # default_restore_location), views of one storage stay views of one device storage, and weights_only=True
    # (the default) allows it; a CPU build cannot make a CUDA storage, and simdist once failed there
    # (RuntimeError: Storage device not recognized: cuda), e.g. in ZeroRedundancyOptimizer.consolidate_state_dict
    import io

    def prog():
        buf = io.BytesIO()
        a = torch.arange(6.)
        torch.save({"a": a, "v": a[2:4], "s": torch.tensor(3.0), "i": torch.tensor([1, 2])}, buf)
        out = {}
        for where in ("cuda", {"cpu": "cuda:0"}, "cpu"):
            buf.seek(0)
            d = torch.load(buf, map_location=where)
            d["a"][2] = 100.0  # "v" is a view of "a"'s storage
            out[str(where)] = {k: (v.device.type, v.cpu().tolist()) for k, v in d.items()}
        return out

    got, = simdist.run(prog).returns
    want = {"a": [0.0, 1.0, 100.0, 3.0, 4.0, 5.0], "v": [100.0, 3.0], "s": 3.0, "i": [1, 2]}
    for where, device in (("cuda", "cuda"), ("{'cpu': 'cuda:0'}", "cuda"), ("cpu", "cpu")):
        assert got[where] == {k: (device, v) for k, v in want.items()}, (where, got[where])
    import torch._utils as tu
    from torch import _weights_only_unpickler as wo
    assert "simdist" not in tu._rebuild_tensor_v2.__code__.co_filename  # outside a run, torch's own again
    assert wo._get_allowed_globals()["torch._utils._rebuild_tensor_v2"] is tu._rebuild_tensor_v2


def test_torch_load_of_a_checkpoint_saved_on_a_gpu_lands_on_the_device():
    # a checkpoint written on a GPU names its storages' device ('cuda:0'); torch.load without map_location puts
    # them back there (torch/serialization.py default_restore_location), with map_location="cpu" on the host
    import io
    buf = io.BytesIO()
    orig = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: "cuda:0"  # what torch.save writes on a GPU
    try:
        torch.save({"w": torch.arange(4.0)}, buf)
    finally:
        torch.serialization.location_tag = orig
    data = buf.getvalue()

    def prog():
        d, h = torch.load(io.BytesIO(data)), torch.load(io.BytesIO(data), map_location="cpu")
        return d["w"].device.type, d["w"].cpu().tolist(), h["w"].device.type

    assert simdist.run(prog).returns == [("cuda", [0.0, 1.0, 2.0, 3.0], "cpu")]


def test_torchscript_code_imported_inside_a_run_sees_torch_builtins():
    # TorchScript resolves torch.tensor / torch.nonzero by identity as ATen builtins; simdist's replacements are
    # registered as the same builtins while installed (torch.distributed.optim's @torch.jit.script functional
    # optimizers failed to import inside a run: "Compiled functions can't take variable number of arguments")
    def prog(dev):
        import torch.distributed.optim  # noqa: F401

        @torch.jit.script
        def nz(x):
            return torch.nonzero(x)

        return nz(torch.tensor([0.0, 2.0, 0.0, 3.0], device=dev)).cpu()

    import torch.jit._builtins as b
    before = dict(b._get_builtin_table())
    got, = simdist.run(prog, args=("cuda",)).returns
    assert torch.equal(got, prog("cpu"))
    assert b._get_builtin_table() == before  # simdist's entries are gone with its patches


def test_tensor_of_device_scalars_and_cuda_rng_state():
    # torch.tensor([cuda 0-d tensors]) reads each element (a synchronizing copy) and makes a CPU tensor unless a
    # device is given; torch.cuda.random.get_rng_state (the module torch.cuda's own re-exports come from)
    # answers for the rank's current device, a ByteTensor of the Philox seed and offset.
    def prog(dev):
        a, b = torch.tensor(2.0, device=dev), torch.tensor(3.0, device=dev)
        t = torch.tensor([a, b])
        u = torch.tensor([[a], [b]], device=dev)
        out = [t.device.type, t.tolist(), u.device.type, u.tolist()]
        if dev == "cuda":
            s = torch.cuda.random.get_rng_state()
            torch.cuda.random.set_rng_state(s)
            out.append((s.dtype, s.device.type))
        return out

    got, = simdist.run(prog, args=("cuda",)).returns
    want = prog("cpu")
    assert got[0] == "cpu" and got[1:2] == want[1:2] and got[2] == "cuda" and got[3] == want[3]
    assert got[4] == (torch.uint8, "cpu")


def test_a_script_that_consumes_sys_argv_sees_its_own_arguments_on_every_rank(tmp_path):
    # each torchrun process has its own sys.argv; a launcher that does `sys.argv = sys.argv[1:]` changes only
    # its own
    script = tmp_path / "consume.py"
    script.write_text("import sys, torch.distributed as dist\n"
                      "args = sys.argv[1:]\n"
                      "sys.argv = sys.argv[:1]\n"
                      "dist.init_process_group('nccl')\n"
                      "import os, torch\n"
                      "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"
                      "dist.barrier()\n"
                      "assert args == ['--x', '1'], args\n")
    res = simdist.run_script(str(script), world_size=2, argv=["--x", "1"])
    assert res.hazards == []


def test_cuda_surface_not_modelled_is_refused_by_name():
    """What simdist does not model raises UnsupportedOperation naming it (was torch's raw AttributeError or
    RuntimeError of a CPU build): external streams, IPC events, allocator snapshots and raw pointers, memory
    fractions; what libraries merely ask answers as on a GPU
    (is_current_stream_capturing() outside a capture, nvtx ranges, accelerator memory figures), and pinning a
    device tensor raises torch's own error."""
    from simdist import UnsupportedOperation

    def fn():
        refused = []
        calls = {
            "ExternalStream": lambda: torch.cuda.ExternalStream(1234),
            "ipc_handle": lambda: torch.cuda.Event(interprocess=True).ipc_handle(),
            "_record_memory_history": lambda: torch.cuda.memory._record_memory_history(),
            "_snapshot": lambda: torch.cuda.memory._snapshot(),
            "memory_snapshot": lambda: torch.cuda.memory_snapshot(),
            "caching_allocator_alloc": lambda: torch.cuda.caching_allocator_alloc(64),
            "MemPool": lambda: torch.cuda.MemPool(),
            "use_mem_pool": lambda: torch.cuda.use_mem_pool(None).__enter__(),
            "graph_pool_handle": lambda: torch.cuda.graph_pool_handle(),
        }
        for name, call in calls.items():
            try:
                call()
            except UnsupportedOperation:
                refused.append(name)
        torch.cuda.set_sync_debug_mode(0)
        h = torch.cuda.nvtx.range_start("r")
        torch.cuda.nvtx.range_end(h)
        x = torch.ones(256, device="cuda")
        try:
            x.pin_memory()
            pinned_error = None
        except RuntimeError as e:
            pinned_error = str(e)
        return (refused, torch.cuda.is_current_stream_capturing(), torch.cuda.get_sync_debug_mode(),
                torch.accelerator.memory_allocated() == torch.cuda.memory_allocated() > 0, pinned_error)
    refused, capturing, mode, same, pinned_error = simdist.run(fn).returns[0]
    assert refused == ["ExternalStream", "ipc_handle", "_record_memory_history", "_snapshot", "memory_snapshot",
                       "caching_allocator_alloc", "MemPool", "use_mem_pool", "graph_pool_handle"]
    assert capturing is False and mode == 0 and same
    assert "only dense CPU tensors can be pinned" in pinned_error


def test_stream_rebuilt_from_its_id_triple_is_the_same_stream():
    """torch.cuda.Stream(stream_id=..., device_index=..., device_type=...) wraps the existing stream of that id
    instead of making a new one (torch/cuda/streams.py Stream.__new__: `if device is None or ("stream_id" in kwargs
    and "device_index" in kwargs): return super().__new__(cls, priority=priority, **kwargs)`); it is equal to the
    original and hashes alike, so waiting on it orders the original's work; stream id 0 is the default stream
    (c10/cuda/CUDAStream.cpp). simdist made a fresh stream: a wait on the rebuilt handle ordered nothing."""
    def fn():
        side = torch.cuda.Stream()
        again = torch.cuda.Stream(stream_id=side.stream_id, device_index=side.device_index,
                                  device_type=side.device_type)
        assert again == side and hash(again) == hash(side)
        assert torch.cuda.Stream(stream_id=0, device_index=0, device_type=1) == torch.cuda.default_stream()
        x = torch.ones(1 << 12, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = x * 2
        torch.cuda.current_stream().wait_stream(again)
        y.record_stream(torch.cuda.current_stream())
        return y.sum().item()

    r = simdist.run(fn)
    assert r.returns == [2.0 * (1 << 12)] and not r.hazards


def test_allocation_past_the_device_or_the_memory_fraction_is_out_of_memory_after_one_retry():
    """A segment the device cannot hold, or past set_per_process_memory_fraction's limit (fraction * total memory,
    counted over reserved segments), raises torch.OutOfMemoryError ("CUDA out of memory. Tried to allocate ...")
    after the allocator released every cached free segment and retried once (c10/cuda/CUDACachingAllocator.cpp
    malloc -> alloc_block: `set_fraction && total_allocated_memory + size > allowed_memory_maximum`, then
    release_cached_blocks and alloc_block(isRetry: num_alloc_retries += 1), then num_ooms += 1 and
    TORCH_CHECK_WITH(OutOfMemoryError, ...)); the retry lets an allocation fit once the cache is released.
    simdist raised a CPU RuntimeError from its backing store (4 TiB) and refused the fraction."""
    MiB = 1 << 20

    def fn():
        out = {}
        try:
            torch.empty(1 << 40, device="cuda")
        except torch.OutOfMemoryError as e:
            out["huge"] = str(e).split(".")[0]
        assert torch.cuda.get_per_process_memory_fraction() == 1.0
        torch.cuda.set_per_process_memory_fraction(64 * MiB / torch.cuda.get_device_properties(0).total_memory)
        a = torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")     # a 30 MiB segment
        del a                                                              # cached, still reserved
        b = torch.empty(40 * MiB, dtype=torch.uint8, device="cuda")     # 30 + 40 > 64: retry frees the 30
        out["reserved_after_retry"] = torch.cuda.memory_reserved() // MiB
        try:
            torch.empty(40 * MiB, dtype=torch.uint8, device="cuda")    # 40 + 40 > 64 even after a retry
        except torch.cuda.OutOfMemoryError as e:
            out["limited"] = "64.00 MiB allowed" in str(e)
        st = torch.cuda.memory_stats()
        out["retries"], out["ooms"] = st["num_alloc_retries"], st["num_ooms"]
        torch.cuda.set_per_process_memory_fraction(1.0)
        out["after"] = torch.empty(40 * MiB, dtype=torch.uint8, device="cuda").numel() == 40 * MiB
        del b
        return out

    r = simdist.run(fn)
    assert r.returns[0] == {"huge": "CUDA out of memory", "reserved_after_retry": 40, "limited": True,
                            "retries": 3, "ooms": 2, "after": True}, r.returns[0]


def test_cuda_comm_broadcast_scatter_gather_across_simulated_devices():
    """torch.cuda.comm's C++ half on simulated devices (torch/csrc/cuda/comm.cpp): broadcast gives the source tensor
    itself for its own device and copies elsewhere, scatter keeps the source device's chunk a view, gather fills a
    new tensor on the destination (CPU for -1), broadcast_coalesced returns the inputs for devices[0]; each copy
    is a device-to-device copy (the destination's current stream waits for it). A CPU build has none of
    torch._C._broadcast/_scatter/_gather/_broadcast_coalesced: simdist raised torch's raw AttributeError."""
    import torch.cuda.comm as comm

    def fn():
        x = torch.arange(8.0, device="cuda:0")
        b = comm.broadcast(x, devices=[0, 1])
        p = comm.scatter(x, devices=[0, 1], chunk_sizes=[3, 5])
        g = comm.gather([p[1], p[0]], destination=-1)
        c = comm.broadcast_coalesced([x, x[:2] * 3], devices=[0, 1])
        return (b[0].data_ptr() == x.data_ptr(), b[1].device.index, b[1].sum().item(),
                p[0].data_ptr() == x.data_ptr(), p[1].device.index, g.device.type, g.tolist(),
                c[0][0].data_ptr() == x.data_ptr(), c[1][1].device.index, c[1][1].tolist())

    r = simdist.run(fn, device_count=2)
    assert r.returns[0] == (True, 1, 28.0, True, 1, "cpu", [3.0, 4.0, 5.0, 6.0, 7.0, 0.0, 1.0, 2.0], True, 1,
                            [0.0, 3.0]) and not r.hazards


def test_data_parallel_runs_each_replica_on_its_device():
    """nn.DataParallel: parallel_apply runs one host thread per replica (torch/nn/parallel/parallel_apply.py), each
    inside `torch.accelerator.device_index(device)` and its device's current stream; simdist runs the workers one
    after the other in the rank's thread (one interleaving of those threads), so each replica's kernels go to its
    own device and the gathered output and the reduced gradients equal the CPU module's. The worker threads had no
    simulated rank: torch.cuda raised SimulationError inside them."""
    def fn():
        torch.manual_seed(0)
        ref = torch.nn.Linear(4, 3)
        m = torch.nn.Linear(4, 3).cuda()
        m.load_state_dict(ref.state_dict())
        x = torch.randn(6, 4)
        out = torch.nn.DataParallel(m, device_ids=[0, 1])(x.cuda())
        out.sum().backward()
        ref(x).sum().backward()
        return (out.device.index, torch.allclose(out.detach().cpu(), ref(x).detach(), atol=1e-6),
                torch.allclose(m.weight.grad.cpu(), ref.weight.grad, atol=1e-6))

    r = simdist.run(fn, device_count=2)
    assert r.returns[0] == (0, True, True) and not r.hazards


def test_accelerator_streams_and_devices_are_torch_cudas():
    """torch.accelerator.current_stream(i) names device i's current CUDA stream (a side stream inside its context):
    a generic torch.Stream with that stream's id triple, equal to another such torch.Stream but not to the
    torch.cuda.Stream object, either way round (measured on an H200, torch 2.11: `acc == side` and `side == acc`
    are False, and so are `acc != side` and `side != acc`; hashes differ); set_stream takes a torch.cuda.Stream, device_index / set_device_index switch
    torch.cuda's current device, and torch.Event records on and waits into those streams (torch/accelerator/
    __init__.py over torch/csrc/DeviceAccelerator.cpp, the CUDA backend's VirtualGuardImpl). The fake guard's
    answers were a torch.Stream of id 0 that wait_stream rejected ("Unknown device: 104"), and device_index(1)
    left torch.cuda on device 0."""
    def fn(wait):
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            acc = torch.accelerator.current_stream()
            same = (acc.stream_id == side.stream_id and not acc == side and not side == acc
                    and not acc != side and not side != acc  # != compares the id triple (torch.Stream's C++)
                    and acc == torch.accelerator.current_stream() and isinstance(acc, torch.Stream))
        with torch.accelerator.device_index(1):
            dev = torch.empty(1, device="cuda").device.index
        x = torch.ones(1 << 12, device="cuda")
        side.wait_stream(torch.accelerator.current_stream())
        ev = torch.Event(device="cuda")
        with torch.cuda.stream(side):
            y = x * 2
            ev.record()
        if wait:
            ev.wait(torch.accelerator.current_stream())
        y.record_stream(torch.cuda.current_stream())
        return same, dev, torch.cuda.current_device(), (y + 1).sum().item()

    for wait in (True, False):
        r = simdist.run(fn, args=(wait,), device_count=2)
        assert r.returns[0] == (True, 1, 0, 3.0 * (1 << 12))
        assert bool(r.hazards) == (not wait), r.report()


def test_dcp_async_save_staging_of_device_tensors_is_refused_by_name(tmp_path):
    """torch.distributed.checkpoint.async_save stages a state dict by making host storages from each tensor's
    storage type (`type(storage)(n, device="cpu")`, then `copy_(storage, non_blocking=...)`:
    torch/distributed/checkpoint/_state_dict_stager.py _stage_untyped_storage), which simdist models (notes e1: it
    raised a raw TypeError from SimStorage.__init__, u12, then refused the staging by name); the save itself runs
    in a thread of its own (AsyncCheckpointExecutor) that uses torch.distributed, which simdist does not model:
    UnsupportedOperation naming the thread (notes e3)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    def prog():
        dist.init_process_group("cpu:gloo,cuda:nccl")
        sd = {"w": torch.arange(8, dtype=torch.float32, device="cuda")}
        dcp.async_save(sd, checkpoint_id=str(tmp_path)).result()

    with pytest.raises(simdist.UnsupportedOperation, match="torch.distributed in a host thread the program started "
                                                           r"\(AsyncCheckpointExecutor"):
        simdist.run(prog, world_size=2, torchrun=True)


def test_dataloader_pin_memory_thread_pins_for_the_process_rank():
    """DataLoader(pin_memory=True, num_workers>0) pins each batch in a thread of its own
    (torch/utils/data/_utils/pin_memory.py _pin_memory_loop: torch.accelerator.set_device_index(device_id), then
    data.pin_memory()); the batches it hands over are pinned, and async copies from them behave as from any pinned
    buffer. That thread is no simulated rank's: it acts for the process's one rank, and with several rank threads
    in one process it is refused by name. It raised torch's raw "Cannot initialize CUDA without ATen_cuda library"
    (and SimulationError at set_device_index), so the loader died ("Pin memory thread exited unexpectedly")."""
    from simdist import UnsupportedOperation

    def fn():
        ds = torch.utils.data.TensorDataset(torch.arange(32.0).view(16, 2))
        tot, pinned = 0.0, True
        for (b,) in torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True, num_workers=1):
            pinned &= b.is_pinned()
            tot += b.to("cuda", non_blocking=True).sum().item()
        return tot, pinned

    assert simdist.run(fn).returns == [(496.0, True)]
    with pytest.raises(UnsupportedOperation, match="host thread the program started"):
        simdist.run(fn, world_size=2)


def test_share_memory_of_a_cuda_tensor_is_a_no_op_and_it_is_shared():
    """Tensor.share_memory_() / Module.share_memory() of CUDA tensors do nothing and return the tensor
    (torch/storage.py _StorageBase.share_memory_: "only CPU uses POSIX shared memory"), and is_shared() is True
    for a CUDA storage (torch/csrc/StorageMethods.cpp THPStorage_isShared); pytorch/examples mnist_hogwild calls
    model.share_memory() on a CUDA model. simdist refused both by name (a refusal of what works on a GPU)."""
    def fn():
        x = torch.ones(4, device="cuda")
        m = torch.nn.Linear(2, 2).cuda().share_memory()
        return (x.share_memory_() is x, x.is_shared(), x.untyped_storage().is_shared(),
                all(p.is_shared() for p in m.parameters()), torch.ones(2).is_shared())

    assert simdist.run(fn).returns == [(True, True, True, True, False)]


def test_allocator_settings_whose_figures_are_not_modelled_refuse_those_figures(monkeypatch):
    """Under allocator settings that change the caching allocator's figures (c10/cuda/CUDAAllocatorConfig.cpp:
    expandable_segments:True maps pages of one growing segment per stream, so reserved figures differ;
    max_split_size_mb, roundup_power2_divisions and backend:cudaMallocAsync change block sizes, so allocated
    figures differ too), the figures simdist would give are the default allocator's: reading them is refused by
    name, from PYTORCH_CUDA_ALLOC_CONF or torch._C._accelerator_setAllocatorSettings at run time; switching a
    setting off again gives them back, and get_allocator_backend names cudaMallocAsync when it is chosen.
    simdist ignored the settings and returned the default figures (a silent wrong value)."""
    from simdist import UnsupportedOperation

    def fn():
        out = []
        x = torch.empty(1000, device="cuda")
        torch._C._accelerator_setAllocatorSettings("expandable_segments:True")
        out.append(torch.cuda.memory_allocated())
        for f in (torch.cuda.memory_reserved, torch.cuda.memory_stats, torch.cuda.mem_get_info):
            try:
                f()
            except UnsupportedOperation as e:
                out.append("expandable_segments:True" in str(e))
        torch._C._accelerator_setAllocatorSettings("expandable_segments:False")
        out.append(torch.cuda.memory_reserved())
        return out, x.numel()

    assert simdist.run(fn).returns == [([4096, True, True, True, 2 << 20], 1000)]
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "roundup_power2_divisions:[256:1,512:2],backend:cudaMallocAsync")

    def fig():
        torch.empty(10, device="cuda")
        backend = torch.cuda.get_allocator_backend()
        try:
            torch.cuda.memory_allocated()
        except UnsupportedOperation as e:
            return backend, "roundup_power2_divisions:[256:1,512:2]" in str(e)
    assert simdist.run(fig).returns == [("cudaMallocAsync", True)]


def test_cuda_ipc_handle_of_a_simulated_tensor_is_refused_by_name():
    """torch.multiprocessing.reductions.reduce_tensor of a CUDA tensor asks its storage for a CUDA IPC handle
    (`storage._share_cuda_()`, torch/multiprocessing/reductions.py reduce_tensor -> reduce_storage); colocated RL
    refit (NeMo-RL, vLLM) hands packed weights to the inference engine this way. simdist has no second process to
    map the memory into: UnsupportedOperation naming the IPC hand-off."""
    from torch.multiprocessing.reductions import reduce_tensor

    def prog():
        packed = torch.ones(16, device="cuda")
        torch.cuda.current_stream().synchronize()
        reduce_tensor(packed)

    with pytest.raises(simdist.UnsupportedOperation, match="CUDA IPC handle"):
        simdist.run(prog)


def test_device_properties_and_nested_memory_stats_answer_as_on_an_h200():
    """torch.cuda.get_device_properties has the fields of torch._C._CudaDeviceProperties (torch/csrc/cuda/Module.cpp
    registerCudaDeviceProperties: warp_size, max_threads_per_block, max_threads_per_multi_processor,
    regs_per_multiprocessor, shared_memory_per_block(_optin), shared_memory_per_multiprocessor, clock and bus
    figures, pci ids) with an H200's values; memory_stats_as_nested_dict is memory_stats nested at '.'
    (torch/cuda/memory.py); the pinned host allocator's statistics are refused by name. These raised
    AttributeError (a SimpleNamespace without the field; torch._C without _cuda_memoryStats/_cuda_hostMemoryStats)."""
    from simdist import UnsupportedOperation

    def fn():
        p = torch.cuda.get_device_properties(0)
        try:
            torch.cuda.host_memory_stats()
            host = None
        except UnsupportedOperation:
            host = "refused"
        t = torch.empty(10, device="cuda")
        nested = torch.cuda.memory_stats_as_nested_dict()
        return ((p.warp_size, p.max_threads_per_block, p.max_threads_per_multi_processor, p.regs_per_multiprocessor,
                 p.shared_memory_per_block_optin, p.multi_processor_count), host,
                nested["allocated_bytes"]["all"]["current"] == torch.cuda.memory_allocated() == 512, t.numel())

    assert simdist.run(fn).returns == [((32, 1024, 2048, 65536, 227 * 1024, 132), "refused", True, 10)]


def test_a_cuda_factory_with_pin_memory_raises_as_empty_cuda_does():
    """torch.empty/zeros/randn(..., device="cuda", pin_memory=True) raise RuntimeError "Only dense CPU tensors can be
    pinned" (aten/src/ATen/cuda/EmptyTensor.cpp empty_cuda: TORCH_CHECK(!pin_memory.has_value() || !*pin_memory)),
    and pin_memory=False is accepted. simdist made an unpinned device tensor (a missed error)."""
    def fn():
        out = []
        for f in (torch.empty, torch.zeros, torch.randn):
            try:
                f(4, device="cuda", pin_memory=True)
                out.append("made")
            except RuntimeError as e:
                out.append(str(e))
        return out, torch.zeros(2, device="cuda", pin_memory=False).sum().item()

    assert simdist.run(fn).returns == [(["Only dense CPU tensors can be pinned"] * 3, 0.0)]


def test_sparse_and_strided_nested_tensors_on_a_simulated_device_are_refused_by_name():
    """simdist simulates dense (strided) tensors only. A sparse tensor (COO: torch.sparse_coo_tensor, to_sparse,
    .cuda() of a host one; CSR: to_sparse_csr) and a strided nested tensor (NestedTensorImpl, torch.nested's
    default layout) on CUDA exist on a GPU (torch/sparse, aten/src/ATen/native/sparse/cuda, NestedTensorImpl.cpp:
    "NestedTensorImpl storage must be either CUDA, CPU...") and are refused with UnsupportedOperation naming the
    layout; they raised raw NotImplementedError / RuntimeError ("Cannot access storage of SparseTensorImpl",
    "Could not run 'aten::empty_strided' with arguments from the 'CUDA' backend"). A torch.jagged nested tensor
    (a Python subclass over dense values) runs and computes what the CPU does."""
    from simdist.engine.errors import UnsupportedOperation

    def fn():
        out = []
        cases = [
            lambda: torch.randn(4, 4).to_sparse().cuda(),
            lambda: torch.randn(4, 4, device="cuda").to_sparse(),
            lambda: torch.randn(4, 4, device="cuda").to_sparse_csr(),
            lambda: torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]], device="cuda"),
                                            torch.tensor([1., 2.], device="cuda"), (2, 2)),
            lambda: torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)], device="cuda"),
            lambda: torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)]).cuda(),
            # (built from simulated CUDA tensors: the device reaches _nested_tensor_from_tensor_list positionally)
            lambda: torch.nested.nested_tensor([torch.randn(2, 3, device="cuda"), torch.randn(4, 3, device="cuda")]),
        ]
        for case in cases:
            try:
                case()
                out.append("ran")
            except UnsupportedOperation as e:
                out.append("sparse" in str(e) or "nested" in str(e) or "CUDA backend" in str(e))
        a, b = torch.arange(6.).reshape(2, 3), torch.arange(12.).reshape(4, 3)
        nt = torch.nested.nested_tensor([a.cuda(), b.cuda()], layout=torch.jagged)
        out.append(torch.equal((nt * 2 + 1).values().cpu(), torch.cat([a, b]) * 2 + 1))
        return out

    assert simdist.run(fn).returns == [[True] * 7 + [True]]


def test_stream_priorities_are_clamped_to_the_pools_and_priority_range_answers():
    """torch.cuda.Stream(priority=p) takes a stream of the pool of level min(max(-p, 0), 3) (c10/cuda/CUDAStream.h:
    max_compile_time_stream_priorities = 4), and Stream.priority_range() is (0, -3). Measured on an H200 with torch
    2.11 (x-series GPU run, 2026-12-02): priorities 1, 0, -1, -2, -3, -4, -10 read back 0, 0, -1, -2, -3, -3, -3.
    simdist kept any priority as given and had no priority_range (AttributeError)."""
    def fn():
        return (torch.cuda.Stream.priority_range(),
                [torch.cuda.Stream(priority=p).priority for p in (1, 0, -1, -2, -3, -4, -10)])

    assert simdist.run(fn).returns == [((0, -3), [0, 0, -1, -2, -3, -3, -3])]


def test_sync_debug_mode_warns_or_raises_where_c10_synchronizes():
    """torch.cuda.set_sync_debug_mode("warn"/"error") (c10/cuda/CUDAFunctions.h: memcpy_and_sync and
    stream_synchronize call warn_or_error_on_sync): a UserWarning / RuntimeError "called a synchronizing CUDA
    operation" at .item(), .cpu(), .tolist(), blocking host-to-device copies (pageable or pinned), nonzero /
    boolean indexing / masked_select / unique and Stream.synchronize(); none at torch.cuda.synchronize(),
    Event.synchronize() or non_blocking copies (to pinned or pageable memory). Measured call by call on an H200,
    torch 2.11 (x-series GPU run, 2026-12-02). simdist refused the mode (UnsupportedOperation)."""
    import warnings

    def fn():
        t = torch.randn(64, device="cuda")
        pinned, pageable = torch.empty(64).pin_memory(), torch.randn(64)
        ev = torch.cuda.Event()
        cases = {
            "item": lambda: t.sum().item(), "cpu": lambda: t.cpu(), "tolist": lambda: t.tolist(),
            "h2d_pageable": lambda: pageable.cuda(), "h2d_pinned": lambda: pinned.cuda(),
            "nonzero": lambda: t.nonzero(), "bool_index": lambda: t[t > 0], "unique": lambda: torch.unique(t),
            "stream_sync": lambda: torch.cuda.current_stream().synchronize(),
            "device_sync": lambda: torch.cuda.synchronize(), "event_sync": lambda: (ev.record(), ev.synchronize()),
            "d2h_pinned_nb": lambda: pinned.copy_(t, non_blocking=True),
            "d2h_pageable_nb": lambda: pageable.copy_(t, non_blocking=True),
            "h2d_pinned_nb": lambda: pinned.to("cuda", non_blocking=True),
        }
        out = {}
        for k, f in cases.items():
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("warn")
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                f()
            torch.cuda.set_sync_debug_mode(0)
            out[k] = any("called a synchronizing CUDA operation" in str(m.message) for m in w)
        torch.cuda.set_sync_debug_mode("error")
        mode = torch.cuda.get_sync_debug_mode()
        try:
            t.sum().item()
            err = None
        except RuntimeError as e:
            err = str(e)
        torch.cuda.set_sync_debug_mode("default")
        return out, mode, err, torch.cuda.get_sync_debug_mode()

    (out, mode, err, after), = simdist.run(fn).returns
    warns = {"item", "cpu", "tolist", "h2d_pageable", "h2d_pinned", "nonzero", "bool_index", "unique", "stream_sync"}
    assert {k for k, v in out.items() if v} == warns, out
    assert (mode, err, after) == (2, "called a synchronizing CUDA operation", 0)


def test_equal_of_the_same_view_or_of_different_sizes_launches_nothing():
    """torch.equal on CUDA (aten/src/ATen/native/cuda/Equal.cpp cuda_equal): different sizes -> False, no elements
    -> True, the same view of the same storage -> True, with no kernel and no host sync; else eq().all().item().
    So equal(c, c) of a tensor a side stream is still writing is no race (and does not order the host after it)."""
    def fn():
        a = torch.arange(6., device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            c = a * 2
        quick = (torch.equal(c, c), torch.equal(c, c[:3]), torch.equal(c[:0], a[:0]))
        torch.cuda.current_stream().wait_stream(side)
        return quick, torch.equal(c, a * 2), torch.equal(c, a)

    res = simdist.run(fn)
    assert not res.hazards, res.report()
    assert res.returns == [((True, False, True), True, False)]


def test_conjugate_and_negative_views_are_resolved_before_ops_that_do_not_handle_them():
    """x.conj() is a lazy view with the conjugate bit set (https://pytorch.org/docs/stable/generated/torch.conj.html),
    and torch._neg_view one with the negative bit; an op that does not handle the bit gets the resolved tensor from
    the Conjugate / Negative fallbacks (aten/src/ATen/ConjugateFallback.cpp, NegateFallback.cpp). Inside a
    __torch_dispatch__ handler those dispatch keys are excluded, so simdist's CPU kernels read the raw bytes:
    `a * b.conj()` gave a * b, and the backward of a complex multiply (grad * other.conj()), Llama's rotary
    embedding's, was wrong. Eager CPU torch is the reference."""
    def prog(dev):
        g = torch.Generator().manual_seed(0)
        a = torch.randn(6, dtype=torch.complex64, generator=g).to(dev)
        b = torch.randn(6, dtype=torch.complex64, generator=g).to(dev)
        x = torch.randn(6, 2, generator=g).to(dev).requires_grad_()
        y = torch.view_as_real(torch.view_as_complex(x) * b)
        y.square().sum().backward()
        c = b.conj()
        return [t.cpu() for t in (a * c, a + c, c[1:4] * 2, torch._neg_view(a) * 1, c.imag * 1, x.grad,
                                  (a.conj() @ b.unsqueeze(1)).resolve_conj())] + [c.is_conj()]

    res = simdist.run(lambda: prog("cuda"))
    assert not res.hazards, res.report()
    want = prog("cpu")
    got = res.returns[0]
    assert got[-1] is True
    for w, h in zip(want[:-1], got[:-1]):
        assert torch.allclose(w, h, atol=1e-6), (w, h)


def test_device_work_in_a_host_thread_the_program_started_is_refused_by_name():
    """torch.cuda's current stream is thread-local and a host thread's x.cpu() synchronizes with that thread's
    current stream (c10/cuda/CUDAStream.h "Stream pool note": "the notion of current stream for device is thread
    local"; ATen Copy.cu memcpy_and_sync), so on a GPU a worker thread reads [3, 3, 3, 3] below. simdist runs device
    work only in a rank's own thread (a second host thread's interleaving would depend on OS scheduling): during a
    run, torch.cuda calls and ops on simulated tensors in another thread raise UnsupportedOperation. x.cpu() there
    read the device bytes unordered with the pending kernels and returned the fresh memory's NaN poison."""
    import threading

    from simdist import UnsupportedOperation

    def fn():
        x = torch.ones(4, device="cuda") * 3
        out = {}

        def worker(what):
            try:
                {"stream": torch.cuda.current_stream, "cpu": x.cpu, "mul": lambda: x * 2}[what]()
                out[what] = "ran"
            except UnsupportedOperation as e:
                out[what] = "host thread" in str(e)
        for w in ("stream", "cpu", "mul"):
            t = threading.Thread(target=worker, args=(w,))
            t.start()
            t.join()
        return out, x.cpu().tolist()

    assert simdist.run(fn).returns == [({"stream": True, "cpu": True, "mul": True}, [3.0] * 4)]


def test_an_event_keeps_the_device_of_its_first_record_and_times_only_within_one_device():
    """c10/cuda/CUDAEvent.h record: an event's device is the first recording stream's, and recording it on a stream
    of another device raises "Event device 0 does not match recording stream's device 1."; the CUDA Programming
    Guide ("Stream and Event Behavior"): cudaEventElapsedTime fails for events of two devices, while
    cudaStreamWaitEvent across devices is legal. simdist accepted both and timed across devices."""
    def fn():
        out = []
        s1 = torch.cuda.Stream(device=1)
        e = torch.cuda.Event()
        e.record(torch.cuda.current_stream(0))
        try:
            e.record(s1)
        except RuntimeError as err:
            out.append(str(err))
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(torch.cuda.current_stream(0))
        b.record(s1)
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        try:
            a.elapsed_time(b)
        except RuntimeError as err:
            out.append("different devices" in str(err))
        w = torch.cuda.Event()
        with torch.cuda.stream(s1):
            y = torch.ones(4, device="cuda:1") * 5
            w.record()
        torch.cuda.current_stream(0).wait_event(w)  # legal: a stream of cuda:0 waits for cuda:1's work
        out.append(y.to("cuda:0").sum().item())
        return out

    res = simdist.run(fn, device_count=2)
    assert not res.hazards, res.report()
    assert res.returns == [["Event device 0 does not match recording stream's device 1.", True, 20.0]]


def test_python_list_indices_index_a_simulated_tensor_as_torch_does():
    """A Python list index (v[[1, 2]], v[:, [0, 3]], w[[0, 3]] = -1) is made into an index tensor on the indexed
    tensor's device with the Python dispatch key excluded (torch/csrc/utils/tensor_new.cpp internal_new_from_data,
    via python_variable_indexing.cpp sequenceToVariable); on a CPU build that reached the missing CUDA backend
    ("Could not run 'aten::empty_strided' with arguments from the 'CUDA' backend"). A list holding a sequence,
    slice, None or Ellipsis is a tuple of indices (treatSequenceAsTuple). Eager CPU torch is the reference."""
    def prog(dev):
        v = torch.arange(24., device=dev).reshape(4, 6)
        out = [v[[1, 2]], v[[[0, 1], [2, 3]]], v[[0, 2], [1, 5]], v[:, [0, 3]], v[[True, False, True, False]],
               v[1, [2, 4]], v[[1, 2], ...]]
        w = v.clone()
        w[[0, 3]] = -1.0
        w[:, [1, 2]] = torch.ones(4, 2, device=dev)
        return [t.cpu() for t in out + [w]]

    res = simdist.run(lambda: prog("cuda"))
    assert not res.hazards, res.report()
    assert all(torch.equal(a, b) for a, b in zip(res.returns[0], prog("cpu")))


def test_ops_that_synchronize_on_cuda_order_the_host_after_the_current_stream():
    """torch.linalg.eigh / svd copy the solver's info to the host after the kernel (BatchLinearAlgebra.cpp
    _linalg_check_errors), and `v[mask] = t` with a tensor value turns the mask into indices with nonzero first
    (TensorAdvancedIndexing.cpp), so on a GPU each synchronizes the host with the current stream: a pinned buffer
    filled by a non_blocking D2H copy queued before them may be read after (measured with set_sync_debug_mode on an
    H200: eigh 1, svd 2, v[mask] = t 1 synchronizing calls; v[mask] = 0.0 is a masked_fill_, 0). simdist ran them
    asynchronously: a false host-read hazard, and no sync-debug warning."""
    import warnings

    def fn():
        a = torch.randn(6, 6, device="cuda")
        spd = a @ a.T + 6 * torch.eye(6, device="cuda")
        out, warned = [], []
        for op in (lambda: torch.linalg.eigh(spd), lambda: torch.linalg.svd(a),
                   lambda: a.clone().__setitem__(a > 0, a[:1, :1].reshape(1))):
            host = torch.empty(6, 6).pin_memory()
            host.copy_(a * 2, non_blocking=True)
            torch.cuda.set_sync_debug_mode("warn")
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                op()
            torch.cuda.set_sync_debug_mode(0)
            warned.append(any("synchronizing" in str(m.message) for m in w))
            out.append(host.sum().item())  # ordered: the op synchronized the host with the stream
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            a.clone().__setitem__(a > 0, 0.0)
        torch.cuda.set_sync_debug_mode(0)
        warned.append(any("synchronizing" in str(m.message) for m in w))
        return warned, out, (a * 2).sum().item()

    res = simdist.run(fn)
    assert not res.hazards, res.report()
    (warned, out, want), = res.returns
    assert warned == [True, True, True, False]
    assert all(abs(o - want) < 1e-3 for o in out), (out, want)


def test_a_generic_stream_waiting_a_cuda_event_orders_nothing():
    """Rule (torch/csrc/Stream.cpp THPStream_wait_event: `reinterpret_cast<THPEvent*>(event)`, no type check; a
    torch.cuda.Event is a THCPEvent : THPEvent recording only its own cuda_event, so the torch.Event part waited on
    was never recorded and c10's InlineEvent::block returns at once): `torch.accelerator.current_stream()
    .wait_event(torch.cuda.Event)` orders nothing (an H200, torch 2.11: 19 of 20 delayed runs read early, notes
    L8), while the same wait of a torch.Event, and torch.cuda.Stream.wait_event of either, order."""
    n = 1 << 14

    def prog(event_kind, waiter):
        def fn():
            x = torch.ones(n, device="cuda")
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                y = x * 2
                ev = torch.cuda.Event() if event_kind == "cuda" else torch.Event(device="cuda")
                ev.record()
            stream = torch.accelerator.current_stream() if waiter == "generic" else torch.cuda.current_stream()
            stream.wait_event(ev)
            return (y + 1).sum().item()
        return fn
    assert [h.kind for h in simdist.run(prog("cuda", "generic")).hazards] == ["read-after-write"]
    for kind, waiter in (("generic", "generic"), ("cuda", "cuda"), ("generic", "cuda")):
        res = simdist.run(prog(kind, waiter))
        assert not res.hazards, (kind, waiter, res.report())
        assert res.returns[0] == 3.0 * n


def test_torch_stream_inside_a_run_is_a_simulated_stream():
    """Rule (torch/csrc/Stream.cpp THPStream_pynew: a new stream of the device from getNewStream, or the one the
    (stream_id, device_index, device_type) triple names; torch.cuda.Stream is a torch.Stream subclass): inside a
    run `torch.Stream(device="cuda")` is a new simulated stream whose methods order simulated work, the id triple
    names it again, and isinstance/issubclass accept torch.cuda.Stream. (torch's own C++ torch.Stream took simdist's
    events for torch.Events: `RuntimeError: Unknown device: -96`.)"""
    n = 1 << 14

    def fn():
        s = torch.Stream(device="cuda")
        assert isinstance(s, torch.Stream) and isinstance(torch.cuda.Stream(), torch.Stream)
        assert issubclass(torch.cuda.Stream, torch.Stream)
        same = torch.Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)
        x = torch.ones(n, device="cuda")
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            y = x * 2
        ev = torch.Event(device="cuda")
        ev.record(same)
        torch.cuda.current_stream().wait_event(ev)
        return (y + 1).sum().item(), same == s
    res = simdist.run(fn)
    assert not res.hazards, res.report()
    assert res.returns[0] == (3.0 * n, True)
    assert torch.Stream(device="cpu") is not None  # outside a run: torch's own


def test_generic_record_event_records_the_torch_event_part():
    """Rule (torch/csrc/Stream.cpp THPStream_record_event): a generic stream's record_event() makes a torch.Event;
    given a torch.cuda.Event it records the event's torch.Event part, which a generic stream's wait_event waits and
    torch.cuda.Stream.wait_event (the CUDA part, never recorded) does not."""
    n = 1 << 14

    def prog(given, waiter):
        def fn():
            x = torch.ones(n, device="cuda")
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                y = x * 2
                gen = torch.accelerator.current_stream()
                ev = gen.record_event(torch.cuda.Event()) if given else gen.record_event()
            w = torch.accelerator.current_stream() if waiter == "generic" else torch.cuda.current_stream()
            w.wait_event(ev)
            return (y + 1).sum().item()
        return fn
    for given, waiter in ((False, "generic"), (False, "cuda"), (True, "generic")):
        res = simdist.run(prog(given, waiter))
        assert not res.hazards, (given, waiter, res.report())
        assert res.returns[0] == 3.0 * n
    assert [h.kind for h in simdist.run(prog(True, "cuda")).hazards] == ["read-after-write"]


def test_torch_compile_runs_eagerly_and_refuses_cuda_graphs_by_name_at_the_first_call():
    """A torch.compile'd function or module inside a run executes eagerly (torch's "force_eager" stance: the same
    work on the same streams), also when it was compiled before the run (a decorator at a library's import, which
    used to run real dynamo over simdist's own dispatch code). torch.compile itself is torch's, so a module comes
    back as an OptimizedModule as on a GPU (torch/_dynamo/eval_frame.py: `_orig_mod`, state_dict keys "_orig_mod.";
    before notes x10 simdist returned the module itself) and torch's own errors are raised. What eager execution
    cannot stand for is refused by name at the first call: CUDA graphs, which mode="reduce-overhead" and
    "max-autotune" turn on (torch/_inductor/__init__.py list_mode_options: {"triton.cudagraphs": True}), as do
    options {"triton.cudagraphs": True}, torch._inductor.config.triton.cudagraphs and backend="cudagraphs":
    cudagraph trees replay into static outputs that the next call overwrites (torch/_inductor/cudagraph_trees.py:
    "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run"); and a backend callable,
    the program's own code, which eager execution would never call."""
    import torch._inductor.config as inductor_config

    from simdist import UnsupportedOperation

    @torch.compile(fullgraph=True)
    def before_the_run(x):
        return torch.sin(x) * 2 + 1

    def fn():
        m = torch.nn.Linear(4, 2).cuda()
        x = torch.ones(3, 4, device="cuda")
        cm = torch.compile(m)
        out = {"type": type(cm).__name__, "keys": sorted(cm.state_dict()), "orig": cm._orig_mod is m,
               "value": torch.equal(cm(x).cpu(), m(x).cpu()),
               "no_cg": torch.equal(torch.compile(m, mode="max-autotune-no-cudagraphs")(x).cpu(), m(x).cpu()),
               "eager_backend": torch.equal(torch.compile(m, backend="aot_eager")(x).cpu(), m(x).cpu()),
               "before": before_the_run(torch.zeros(2, device="cuda")).cpu().tolist(),
               "disabled": torch.compile(m, mode="reduce-overhead", disable=True) is m}
        tries = {"reduce-overhead": lambda: torch.compile(m, mode="reduce-overhead")(x),
                 "max-autotune": lambda: torch.compile(m, mode="max-autotune")(x),
                 "options": lambda: torch.compile(m, options={"triton.cudagraphs": True})(x),
                 "backend": lambda: torch.compile(m, backend="cudagraphs")(x),
                 "decorator": lambda: torch.compile(mode="reduce-overhead")(lambda t: t + 1)(x),
                 "callable": lambda: torch.compile(m, backend=lambda gm, example_inputs: gm)(x),
                 "bad_mode": lambda: torch.compile(m, mode="fast"),
                 "both": lambda: torch.compile(m, mode="default", options={})}
        for name, call in tries.items():
            try:
                call()
                out[name] = "ran"
            except UnsupportedOperation as e:
                out[name] = "CUDA graph" in str(e) or "backend callable" in str(e)
            except RuntimeError as e:
                out[name] = str(e)[:22]
        inductor_config.triton.cudagraphs = True
        try:
            torch.compile(lambda t: t * 3)(x)
            out["global"] = "ran"
        except UnsupportedOperation:
            out["global"] = True
        finally:
            inductor_config.triton.cudagraphs = False
        return out

    got, = simdist.run(fn).returns
    assert got == {"type": "OptimizedModule", "keys": ["_orig_mod.bias", "_orig_mod.weight"], "orig": True,
                   "value": True, "no_cg": True, "eager_backend": True, "before": [1.0, 1.0], "disabled": True,
                   "reduce-overhead": True, "max-autotune": True, "options": True, "backend": True,
                   "decorator": True, "callable": True, "bad_mode": "Unrecognized mode=fast",
                   "both": "Either mode or options", "global": True}


def test_cudnn_and_peer_access_answer_as_on_a_cuda_build():
    """A CUDA build of torch has cuDNN: torch.backends.cudnn.is_available() is True and version() its number
    (91900 on the reference H200 with torch 2.11, docs/gpu/sdp-choice-2026-12-02.json); the CPU build's None made
    `cudnn.version() >= 8000` a TypeError. torch.cuda.can_device_access_peer asks cudaDeviceCanAccessPeer, True
    between the NVLinked GPUs of one host and False for a device and itself (torch/cuda/__init__.py checks the
    indices first: AssertionError "Invalid peer device id"); the CPU build had no torch._C function for it.
    torch.cuda.jiterator compiles CUDA C++ at run time: refused by name (was an AttributeError)."""
    def prog():
        out = [torch.backends.cudnn.is_available(), torch.backends.cudnn.version() >= 8000,
               torch.cuda.can_device_access_peer(0, 1), torch.cuda.can_device_access_peer(1, 1)]
        try:
            torch.cuda.can_device_access_peer(0, 2)
        except AssertionError as e:
            out.append(str(e))
        try:
            torch.cuda.jiterator._create_jit_fn("template <typename T> T f(T x) { return x; }")
        except simdist.UnsupportedOperation as e:
            out.append("jiterator" in str(e))
        return out

    assert simdist.run(prog, device_count=2).returns == [[True, True, True, False, "Invalid peer device id", True]]
    assert torch.backends.cudnn.version() is None  # undone after the run


def test_legacy_cuda_tensor_types_work_as_on_a_cuda_build():
    """torch.cuda.FloatTensor & co. (old code: `Tensor = torch.cuda.FloatTensor`, `Tensor(n, 1).fill_(1.0)`,
    `Tensor(np_array)`, `x.type(torch.cuda.DoubleTensor)`, `set_default_tensor_type(torch.cuda.FloatTensor)`):
    the legacy constructor makes an uninitialized tensor of the given sizes, or one holding the data in the type's
    dtype, or returns a tensor of that very type and refuses another ("expected torch.cuda.FloatTensor (got
    torch.cuda.LongTensor)") (torch/csrc/utils/tensor_new.cpp legacy_tensor_generic_ctor_new); isinstance asks
    the tensor's type; Tensor.type(T) converts, to the current device for a CUDA target given without an index,
    and gives the tensor itself for its own type (python_variable_methods.cpp THPVariable_type). The CPU build
    refuses all of it ("Torch not compiled with CUDA enabled"); simdist/faces/legacy_types.py."""
    import numpy as np

    def prog():
        torch.cuda.set_device(1)
        x = torch.ones(2, device="cuda")
        Tensor = torch.cuda.FloatTensor
        out = [x.type(), isinstance(x, torch.cuda.FloatTensor), isinstance(x, torch.cuda.LongTensor),
               isinstance(torch.ones(2), torch.cuda.FloatTensor), Tensor(3, 1).fill_(1.0).sum().item(),
               Tensor(np.arange(4)).dtype, str(torch.cuda.LongTensor([1, 2]).device), Tensor(x) is not None,
               Tensor().shape, x.type(torch.cuda.DoubleTensor).dtype, x.type("torch.cuda.HalfTensor").dtype,
               str(torch.ones(2).type(torch.cuda.FloatTensor).device), str(x.type(torch.FloatTensor).device),
               x.type(torch.cuda.FloatTensor) is x, torch.ones(2).type()]
        try:
            Tensor(x.long())
        except TypeError as e:
            out.append(str(e))
        torch.set_default_tensor_type(torch.cuda.FloatTensor)
        out.append(str(torch.zeros(1).device))
        torch.set_default_tensor_type(torch.FloatTensor)
        out.append(str(torch.zeros(1).device))
        return out

    with pytest.warns(UserWarning):  # torch's own deprecation warning of set_default_tensor_type
        got = simdist.run(prog, device_count=2).returns[0]
    assert got == ["torch.cuda.FloatTensor", True, False, False, 3.0, torch.float32, "cuda:1", True,
                   torch.Size([0]), torch.float64, torch.float16, "cuda:1", "cpu", True, "torch.FloatTensor",
                   "expected torch.cuda.FloatTensor (got torch.cuda.LongTensor)", "cuda:1", "cpu"]
    assert "not available" in str(pytest.raises(TypeError, torch.cuda.FloatTensor, 2).value)  # undone


def test_legacy_cpu_constructors_read_cuda_scalars_as_item_does():
    """torch.FloatTensor([s, z]) / torch.Tensor(...) / torch.LongTensor(...) of CUDA 0-d tensors give a CPU tensor on a
    GPU (H200, torch 2.11: ci/gpu_z_legacy_ctor.py; torch's DDP quantization_pertensor_hook does it with
    MinMaxObserver's qparams): tensor_new.cpp's legacy constructor stores each element through its __float__ /
    __index__, i.e. .item(), a synchronizing read on the current stream, so the element conversions and refusals
    are the CPU's (a float in a LongTensor: 'only integer tensors of a single element can be converted to an
    index'), and torch.cuda.LongTensor builds on the host first, then copies. simdist raised TypeError 'len() of a
    0-d tensor' (a mixed list [1.0, s]: NotImplementedError for _local_scalar_dense on CUDA): the CPU build's
    constructor runs below the dispatch mode. A read not ordered after its producer is a host-read hazard, as with
    .item(). Outside the run torch's own types are back (simdist/faces/legacy_types.py, host_reads.py)."""
    tensortype = type(torch.FloatTensor)

    def prog(wait):
        s, z = torch.tensor(1.5, device="cuda"), torch.tensor(2, device="cuda")
        out = []
        for make in (lambda: torch.FloatTensor([s, z]), lambda: torch.Tensor([s, z]), lambda: torch.LongTensor([z, z]),
                     lambda: torch.DoubleTensor([1.0, s]), lambda: torch.Tensor([[s], [z]]),
                     lambda: torch.cuda.FloatTensor([s, z]), lambda: torch.LongTensor([s, z]),
                     lambda: torch.cuda.LongTensor([s])):
            try:
                x = make()
                out.append((str(x.device), x.dtype, x.tolist()))
            except TypeError as e:
                out.append(str(e))
        out.append((isinstance(torch.ones(1), torch.FloatTensor), isinstance(s, torch.FloatTensor),
                    torch.ones(1).type(torch.DoubleTensor).dtype))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(100000)
            late = torch.full((), 3.0, device="cuda") * 2
        if wait:
            torch.cuda.current_stream().wait_stream(side)
        out.append(torch.FloatTensor([late]).tolist())
        return out

    res = simdist.run(prog, args=(True,))
    index = "only integer tensors of a single element can be converted to an index"
    assert res.returns[0] == [
        ("cpu", torch.float32, [1.5, 2.0]), ("cpu", torch.float32, [1.5, 2.0]), ("cpu", torch.int64, [2, 2]),
        ("cpu", torch.float64, [1.0, 1.5]), ("cpu", torch.float32, [[1.5], [2.0]]),
        ("cuda:0", torch.float32, [1.5, 2.0]), index, index, (True, False, torch.float64), [6.0]]
    assert not res.hazards
    res = simdist.run(prog, args=(False,))
    assert [h.kind for h in res.hazards] == ["host-read"] and res.hazards[0].observed
    assert type(torch.FloatTensor) is tensortype and "__new__" not in torch.Tensor.__dict__  # undone


def _reprs():
    a = torch.ones(3, device="cuda", requires_grad=True)
    loss = (a * 2).sum() / 3
    lin = torch.nn.Linear(2, 1, bias=False).cuda()
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[0.5, -1.0]]))
    return [repr(loss), repr(a), repr(a.detach()), repr(torch.ones(2, dtype=torch.float16, device="cuda")),
            repr(lin.weight), repr(torch.empty(0, 3, device="cuda")), repr(torch.arange(3, device="cuda")),
            repr(a[:2].t() if a.dim() > 1 else a[:2]), repr(torch.zeros(1, 9, device="cuda", dtype=torch.float64)
                                                             .expand(12, 9))]


def test_printing_a_cuda_tensor_writes_what_torch_writes():
    """Rule (torch/_tensor_str.py _str_intern, nn.Parameter.__repr__): a CUDA tensor prints its values, then
    device='cuda:N' first of the suffixes, then dtype (unless a default dtype), size (empty), then the tensor's own
    grad_fn or requires_grad=True, the suffixes wrapped at the line width; a parameter is preceded by
    "Parameter containing:". simdist printed a host copy's repr with the device appended last, so every tensor that
    required grad showed grad_fn=<ToCopyBackward0> (Megatron's run_simple_mcore_train_loop.py printed its loss so;
    notes z1)."""
    got = simdist.run(_reprs).returns[0]
    wide = ("tensor([[0., 0., 0., 0., 0., 0., 0., 0., 0.],\n" + "        [0., 0., 0., 0., 0., 0., 0., 0., 0.],\n" * 10
            + "        [0., 0., 0., 0., 0., 0., 0., 0., 0.]], device='cuda:0',\n       dtype=torch.float64)")  # wrapped at 80
    assert got == [
        "tensor(2., device='cuda:0', grad_fn=<DivBackward0>)",
        "tensor([1., 1., 1.], device='cuda:0', requires_grad=True)",
        "tensor([1., 1., 1.], device='cuda:0')",
        "tensor([1., 1.], device='cuda:0', dtype=torch.float16)",
        "Parameter containing:\ntensor([[ 0.5000, -1.0000]], device='cuda:0', requires_grad=True)",
        "tensor([], device='cuda:0', size=(0, 3))",
        "tensor([0, 1, 2], device='cuda:0')",
        "tensor([1., 1.], device='cuda:0', grad_fn=<SliceBackward0>)",
        wide,
    ]
    # the same texts as torch writes for CPU tensors, less the device suffix
    cpu = [t.replace("device='cuda:0', ", "").replace(", device='cuda:0'", "") for t in got]
    a = torch.ones(3, requires_grad=True)
    assert cpu[0] == repr((a * 2).sum() / 3) and cpu[1] == repr(a) and cpu[7] == repr(a[:2])


def _kernel_names(res):
    return [e["name"] for e in res.trace["traceEvents"] if e.get("ph") == "X"]


def test_ops_with_a_cuda_kernel_run_whole_not_as_the_cpu_builds_decomposition():
    # Rule: an op with backend kernels and a CompositeImplicitAutograd kernel takes the backend kernel where the
    # backend has one; for an autograd key the decomposition is used "only when there's no direct registration to
    # its corresponding backend key" (aten/src/ATen/core/dispatch/OperatorEntry.cpp computeDispatchTableEntry-
    # WithDebug). On a GPU, SiLU's and Mish's backward are one kernel each (silu_backward_out in
    # ActivationSiluKernel.cu, float opmath, rounded once); a CPU build has no CUDA kernel, so they decomposed
    # into math_silu_backward's ops rounded to the dtype (notes b1: bf16 0.03 off the H200 in 2044 of 4096
    # elements). Measured on an H200 (ci/gpu_b_facts.py, docs/gpu/b-series-facts-2026-12-02.json): the GPU's
    # bf16 / fp16 silu_backward and mish_backward equal the CPU kernel's in every element, and autograd issues
    # aten.silu_backward. simdist now runs the op whole: the CPU kernel's values, bit for bit, and one kernel.
    import json
    import os
    import torch.nn.functional as F
    facts = json.load(open(os.path.join(os.path.dirname(__file__), "..", "docs", "gpu",
                                        "b-series-facts-2026-12-02.json")))
    for k in ("silu_backward_torch.bfloat16", "mish_backward_torch.bfloat16", "silu_backward_torch.float16"):
        assert facts[k]["cpu_kernel"]["n_differ"] == 0 and facts[k]["decomposition"]["n_differ"] > 2000
    assert "aten.silu_backward.default" in facts["silu_autograd_ops_torch.bfloat16"]

    def grads(dev, dtype, act):
        g = torch.Generator().manual_seed(0)
        x = (torch.randn(4096, generator=g) * 3).to(dtype).to(dev).requires_grad_()
        gy = torch.randn(4096, generator=g).to(dtype).to(dev)
        act(x).backward(gy)
        return x.grad.cpu()

    cases = [(dt, act) for dt in (torch.float32, torch.bfloat16, torch.float16) for act in (F.silu, F.mish)]

    def prog():
        return [grads("cuda", dt, act) for dt, act in cases]

    res = simdist.run(prog, policy="none")
    for (dt, act), got in zip(cases, res.returns[0]):
        want = grads("cpu", dt, act)
        assert torch.equal(got, want), (dt, act.__name__, (got != want).sum().item())
    names = _kernel_names(res)
    assert names.count("silu_backward") == 3 and names.count("mish_backward") == 3
    assert "sigmoid" not in names and "tanh" not in names and "softplus" not in names
    # and the registration is the run's only: outside a run the CPU build has no CUDA kernel again
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::silu_backward", "CUDA")


def test_the_ops_given_cuda_kernels_are_native_functions_with_a_cuda_kernel_and_a_decomposition():
    # The list in simdist/faces/cuda_keys.py is every op of native_functions.yaml (torchgen's packaged copy, the
    # file this torch was generated from) with a CUDA dispatch entry, its own or its structured_delegate's, and a
    # CompositeImplicitAutograd entry: the ops a CPU build decomposes where a GPU runs one kernel.
    yaml = pytest.importorskip("yaml")
    import os
    import torchgen
    from simdist.faces.cuda_keys import CUDA_KERNEL_OPS, NOT_MODELLED
    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")
    fns = yaml.safe_load(open(path))

    def keys(f):
        return {k.strip() for key in (f.get("dispatch") or {}) for k in key.split(",")}

    by_name = {f["func"].split("(")[0]: f for f in fns}
    found = set()
    for name, f in by_name.items():
        ks = keys(f)
        delegate = f.get("structured_delegate")
        cuda = "CUDA" in ks or (delegate is not None and "CUDA" in keys(by_name[delegate]))
        if cuda and "CompositeImplicitAutograd" in ks:
            found.add(name)
    assert found == set(CUDA_KERNEL_OPS) | set(NOT_MODELLED), found


def test_rms_norm_is_the_two_fused_kernels_a_gpu_runs():
    # Rule: on CUDA, F.rms_norm calls aten._fused_rms_norm and autograd its _fused_rms_norm_backward (measured on an
    # H200: docs/gpu/b-series-facts-2026-12-02.json rms_norm_ops; aten/src/ATen/native/layer_norm.cpp rms_norm
    # takes the fused path when input and weight dtypes agree); the forward is x * rsqrt(mean(x^2) + eps) * w in
    # float opmath rounded once (the CPU's rms_norm_composite computes the same), the backward the standard
    # gradients in float opmath (torch/_decomp/decompositions.py _fused_rms_norm_backward). simdist ran the CPU
    # build's decomposition: ~6 forward and ~15 backward kernels (notes b3).
    import json
    import os
    import torch.nn.functional as F
    facts = json.load(open(os.path.join(os.path.dirname(__file__), "..", "docs", "gpu",
                                        "b-series-facts-2026-12-02.json")))
    assert facts["rms_norm_ops_torch.bfloat16"]["forward"][0] == "aten._fused_rms_norm.default"
    assert "aten._fused_rms_norm_backward.default" in facts["rms_norm_ops_torch.bfloat16"]["backward"]

    def prog(dev):
        out = []
        for dt in (torch.float32, torch.bfloat16):
            for mask in ((True, True), (True, False), (False, True)):
                g = torch.Generator().manual_seed(0)
                x = (torch.randn(6, 2, 32, generator=g) * 2).to(dt).to(dev).requires_grad_(mask[0])
                w = (torch.randn(32, generator=g) * .5 + 1).to(dt).to(dev).requires_grad_(mask[1])
                y = F.rms_norm(x, (32,), w, 1e-6)
                y.backward(torch.randn(6, 2, 32, generator=g).to(dt).to(dev))
                out += [y.detach().cpu(), x.grad.cpu() if mask[0] else None, w.grad.cpu() if mask[1] else None]
        x = torch.randn(3, 4, 8, generator=g).to(dev).requires_grad_()  # two normalized dims, eps None, no weight
        (F.rms_norm(x, (4, 8)) * torch.arange(8., device=dev)).sum().backward()  # (sum of squares: a zero gradient)
        return out + [x.grad.cpu()]

    res = simdist.run(prog, args=("cuda",), policy="none")
    got, = res.returns
    want = prog("cpu")
    for i, (a, b) in enumerate(zip(got, want)):
        if b is None:
            assert a is None
            continue
        if i % 3 == 0 and i < 18:
            assert torch.equal(a, b), i  # the forward: the composite's values
        else:
            tol = 2e-6 if b.dtype == torch.float32 else 1e-2
            assert (a.double() - b.double()).abs().max() <= tol * b.abs().max(), i
    names = _kernel_names(res)
    assert names.count("_fused_rms_norm") == 7 and names.count("_fused_rms_norm_backward") == 7
    assert "rsqrt" not in names and "pow" not in names


def test_a_dlpack_round_trip_shares_the_simulated_memory():
    """torch.from_dlpack(torch.utils.dlpack.to_dlpack(x)) and torch.from_dlpack(x) (the __dlpack__ protocol, on the
    consumer's current stream) give a tensor sharing x's memory with no autograd history (torch/utils/dlpack.py,
    torch/_tensor.py __dlpack__); a capsule is consumed once. The CPU build's exporter made a capsule of the
    wrapper's placeholder and the import a plain CUDA tensor outside the simulation (`.cpu()` then failed an
    internal assert). Export onto another stream is refused by name."""
    def prog():
        x = torch.arange(3.0, device="cuda")
        cap = torch.utils.dlpack.to_dlpack(x)
        y = torch.from_dlpack(cap)
        y.add_(10)
        z = torch.from_dlpack(x)
        try:
            torch.from_dlpack(cap)
            again = None
        except RuntimeError as e:
            again = str(e)
        side = torch.cuda.Stream()
        try:
            x.__dlpack__(stream=side.cuda_stream)
            other = None
        except simdist.UnsupportedOperation as e:
            other = str(e)
        return (type(y) is type(x), y.data_ptr() == x.data_ptr() == z.data_ptr(), x.cpu().tolist(),
                z.requires_grad, again, other)

    same_type, same_ptr, vals, grad, again, other = simdist.run(prog).returns[0]
    assert same_type and same_ptr and vals == [10.0, 11.0, 12.0] and not grad
    assert again and "consumed only once" in again
    assert other and "another stream" in other
