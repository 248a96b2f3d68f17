"""The differential tier (issue 12, deliverable 3): programs of tensor ops run on simulated CUDA and eagerly on
the CPU must give identical values, bit for bit (simdist.properties.differential).

The property draws straight-line programs (views, in-place ops on views, `.data`, storage tricks, dtype casts,
Module.to/cuda, optimizer steps, host <-> device copies...); the fixed tests below are the programs of the bugs
the tier found, each stating the rule it checks and where the rule comes from. Every comparison is exact: the
same CPU kernels run on both sides, on one intra-op thread each.
"""
import pytest
import torch
from hypothesis import event, given, note

import simdist
import simdist.properties as P
from simdist.properties import differential as D
from simdist.properties.differential import snap


def both(prog):
    """prog(dev) under simdist ("cuda") and eagerly ("cpu"): no exception, no hazard, identical outputs."""
    got, want = D.run_both(prog)
    if isinstance(got, BaseException):
        raise got
    assert not got.hazards, got.hazards[0]
    d = D.first_difference(got.returns[0], want)
    assert d is None, f"out{d[0]}: simulated {d[1]!r} vs eager {d[2]!r}"
    return got.returns[0]


# --- the property ---------------------------------------------------------------------------------------------
@P.fuzz(cost=1)
@given(prog=D.programs())
def test_simulated_cuda_computes_what_eager_cpu_computes(prog):
    """Every drawn program gives the same values, metadata and aliasing under simdist as eagerly; a program simdist
    refuses must be refused with UnsupportedOperation naming an API of the step that raised it (recorded as a
    Hypothesis event: `pytest --hypothesis-show-statistics` lists them)."""
    note(prog.source)
    refusal = D.check(prog)
    if refusal is not None:
        event(f"refused: {refusal.op} ({refusal.api})")


# --- the tier itself ------------------------------------------------------------------------------------------
def test_the_tier_fails_on_a_difference_and_on_an_unnamed_refusal():
    """A check that cannot fail proves nothing: a program whose two sides differ fails, and so does a refusal that
    does not name its operation."""
    diverging = D.Program([D.Step("factory", "t1 = torch.zeros(2, device=dev) + (1 if dev == 'cuda' else 0)",
                                  {"t1": "dev"})], "out.append(('final', snap(t1)))")
    with pytest.raises(P.PropertyFailure, match="values differ"):
        D.check(diverging)
    unnamed = D.Program([D.Step("unary", "import simdist\nif dev == 'cuda':\n    raise simdist.UnsupportedOperation("
                                         "'something')", {})], "out.append(1)")
    with pytest.raises(P.PropertyFailure, match="without naming"):
        D.check(unnamed)
    named = D.Program([D.Step("set_", "import simdist\nif dev == 'cuda':\n    raise simdist.UnsupportedOperation("
                                      "'aten.set_ is not modelled')", {})], "out.append(1)")
    assert D.check(named).api == "set_"


def test_programs_are_valid_on_the_cpu_and_replay_identically():
    """What the property compares is a deterministic program: the drawn source runs eagerly twice to the same
    outputs."""
    from hypothesis import find, settings
    prog = find(D.programs(max_steps=8), lambda p: len(p.steps) >= 6, settings=settings(database=None))
    assert D.canon(prog("cpu")) == D.canon(prog("cpu"))
    assert "def prog(dev):" in prog.source and len(prog.steps) >= 6


# --- regressions: each a bug the tier found -----------------------------------------------------------------------
def test_pow_of_a_bool_tensor_by_a_bool_stays_bool():
    # torch.result_type(bool tensor, True) is bool, and the CPU and CUDA kernels return bool (ATen Pow.cpp; measured
    # on an H200 with torch 2.11: ones(3, dtype=bool, device="cuda").pow(True).dtype is torch.bool); torch's meta
    # kernel says int64, and simdist takes output dtypes from meta kernels. Twice: the fast path caches the spec.
    def prog(dev):
        b = torch.tensor([True, False, True], device=dev)
        out = []
        for _ in range(2):
            for r in (b.pow(True), b.pow(False), b ** 2, b.pow(True) ** True):
                out.append((r.dtype, snap(r)))
        return out

    assert [d for d, _ in both(prog)[:4]] == [torch.bool, torch.bool, torch.int64, torch.bool]


def test_nonzero_and_argwhere_are_column_major():
    # ATen nonzero (CPU and CUDA) fills an (ndim, n) buffer and returns its transpose: strides (1, n); measured on an
    # H200 with torch 2.11: ones(6, 2, device="cuda").nonzero().stride() == (1, 12). simdist allocated the result
    # row-major, so `.view(-1)` worked there and raised on a GPU.
    def prog(dev):
        x = torch.tensor([[1., 0.], [2., 3.], [0., 4.]], device=dev)
        n, a = x.nonzero(), torch.argwhere(x)
        try:
            n.view(-1)
            viewed = True
        except RuntimeError:
            viewed = False
        return [n.stride(), a.stride(), snap(n), snap(a), viewed, x[x > 1].stride()]

    out = both(prog)
    assert out[0] == (1, 4) and out[4] is False


def test_set_makes_a_tensor_view_another_storage():
    # Tensor.set_ (docs; ATen set_ / set_storage_*_): x.set_(y) views y's storage with y's layout; x.set_(storage)
    # views the whole storage as 1-D; x.set_(storage, offset, size, stride) views it so, growing the storage when
    # the view reaches past its end (measured on an H200: a 16-byte storage set_ to offset 2, size 5 grows to 28
    # bytes); x.set_() leaves x empty, size (0,). Views of x's old bytes keep them; the version counts each set_.
    # simdist ignored set_() (x kept its shape and bytes: a silent wrong value), refused set_(tensor) and raised
    # TypeError on a simulated storage.
    def prog(dev):
        a = torch.arange(6., device=dev)
        old = torch.arange(4., device=dev) * 10
        keep = old[1:3]
        b = old
        b.set_(a)
        b.add_(1)  # writes a
        c = torch.zeros(2, device=dev)
        c.set_(a.untyped_storage(), 2, (2, 2), (1, 2))
        c.mul_(10)
        d = torch.zeros(3, device=dev)
        d.set_(a.untyped_storage())
        e = torch.empty(0, device=dev).set_(a.untyped_storage(), 4, (5,), (1,))  # past the end: the storage grows
        e[2:].fill_(-1)  # the new bytes, written before anything reads them
        f = torch.ones(3, device=dev)
        f.set_(a, 1, (2,))  # a tensor source with an offset: its storage
        g = torch.arange(3., device=dev)
        g.set_()
        out = [snap(a), snap(keep), snap(c), snap(e), snap(f), a.untyped_storage().nbytes()]
        for t in (a, b, c, d, e, f, g):
            out += [tuple(t.shape), t.stride(), t.storage_offset(), t._version, t.untyped_storage().nbytes()]
        try:
            torch.zeros(2, device=dev).set_(torch.zeros(2, dtype=torch.int32, device=dev))
        except RuntimeError as err:
            out.append(str(err))
        return out

    out = both(prog)
    assert out[5] == 4 * 9 and out[-1] == "Could not set tensor of type int to a tensor of type float"


def test_resize_and_resize_as_take_torchs_sizes_and_strides():
    # ATen resize_ / resize_as_ (Resize.cpp): the sizes asked for (resize_as_: the template's), contiguous strides
    # from the same storage offset, or the memory format's; same sizes keep the strides (measured on an H200:
    # zeros(3, 4).t().resize_(4, 3) keeps (1, 4)). simdist ignored resize_as_ (a silent wrong shape), refused a
    # memory_format, and made every resize_ contiguous.
    def prog(dev):
        x = torch.arange(6., device=dev)
        x.resize_as_(torch.zeros(2, 2, device=dev))
        y = torch.arange(24., device=dev)
        y.resize_(1, 2, 3, 4, memory_format=torch.channels_last)
        z = torch.zeros(3, 4, device=dev).t()
        z.resize_(4, 3)
        w = torch.arange(4., device=dev)[1:]
        w.resize_as_(torch.zeros(1, 2, 2, 1, device=dev).contiguous(memory_format=torch.channels_last),
                     memory_format=torch.preserve_format)
        torch.as_strided(w, (1,), (1,), 4).fill_(7)  # the storage grew by one element: written before it is read
        return [(tuple(t.shape), t.stride(), t.storage_offset(), t._version, snap(t)) for t in (x, y, z, w)]

    out = both(prog)
    assert out[0][0] == (2, 2) and out[2][1] == (1, 4)


def test_typed_storage_and_unmodelled_storage_methods():
    # Tensor.storage() is torch's deprecated TypedStorage (torch/storage.py): size() counts elements of the
    # tensor's dtype, resize_(n) resizes the bytes to n * itemsize. simdist raised TypeError inside torch's
    # TypedStorage constructor; untyped storage methods it does not model raised AttributeError. Now the modelled
    # ones work and the others are refused by name (UnsupportedOperation), as the standard asks.
    def prog(dev):
        a = torch.arange(6., device=dev)
        s = a.storage()
        out = [s.size(), len(s), s.nbytes(), s.dtype, s.element_size(), s.data_ptr() == a.untyped_storage().data_ptr()]
        s.resize_(8)
        out += [a.untyped_storage().nbytes(), snap(a), a.untyped_storage().data_ptr() == a.data_ptr()]
        b = torch.zeros(0, device=dev).set_(a.storage())
        out.append(snap(b[:6]))
        return out

    both(prog)

    def refused():
        torch.arange(3., device="cuda").untyped_storage().fill_(0)
    import pytest
    with pytest.raises(simdist.UnsupportedOperation, match=r"UntypedStorage\.fill_"):
        simdist.run(refused)

    def asks():
        st = torch.arange(3., device="cuda").untyped_storage()
        return hasattr(st, "no_such_method"), hasattr(st, "nbytes")
    assert simdist.run(asks).returns[0] == (False, True)


def test_the_data_pointer_of_an_empty_tensor_is_null():
    # c10 TensorImpl::data_impl: a tensor with no elements has a null data pointer whatever its storage; the
    # caching allocator gives no memory for 0 bytes (measured on an H200: empty(5, device="cuda")[:0].data_ptr(),
    # empty(0, device="cuda").data_ptr() and its untyped_storage().data_ptr() are all 0)
    def prog(dev):
        e = torch.empty(5, device=dev)[:0]
        z = torch.empty(0, device=dev)
        return [e.data_ptr(), z.data_ptr(), z.untyped_storage().data_ptr(), torch.ones(2, 2, device=dev).diagonal(2)
                .data_ptr()]

    assert both(prog) == [0, 0, 0, 0]


def test_an_out_argument_is_resized_as_torch_resizes_it():
    # Docs "out= arguments" and ATen resize_output (Resize.cpp): an `out` whose shape is not the result's is resized
    # to it (a deprecation warning when it had elements), its storage growing when needed, with the strides the
    # kernel gives (TensorIterator follows the inputs' layout: measured on an H200, mul.out of a transposed (3, 4)
    # into an empty out gives strides (1, 4)); an `out` of the right shape keeps its strides; argument errors are
    # raised at the call. simdist let the CPU kernel resize its view of the device bytes: the tensor kept its old
    # shape while its bytes were laid out anew (a silent wrong value), and errors surfaced later, at a sync.
    import warnings

    def prog(dev):
        warnings.simplefilter("ignore")
        t = torch.eye(3, device=dev)
        torch.cat([torch.arange(3., device=dev)], out=t)
        x = torch.zeros(0, device=dev)
        torch.mul(torch.ones(3, 4, device=dev).t(), 2, out=x)
        big = torch.zeros(2, device=dev)
        torch.add(torch.ones(5, device=dev), 1, out=big)
        v, i = torch.zeros(1, device=dev), torch.zeros(1, dtype=torch.long, device=dev)
        torch.sort(torch.tensor([3., 1., 2.], device=dev), out=(v, i))
        o = torch.zeros(2, 2, device=dev)[:, :1]
        torch.add(torch.ones(2, 1, device=dev), 1, out=o)
        out = [(tuple(a.shape), a.stride(), a.untyped_storage().nbytes(), snap(a)) for a in (t, x, big, v, i, o)]
        try:
            torch.add(torch.ones(2, device=dev), 1.5, out=torch.zeros(2, dtype=torch.int64, device=dev))
        except RuntimeError as err:
            out.append(str(err))
        out.append(snap(t + 1))
        return out

    out = both(prog)
    assert out[0][0] == (3,) and out[1][1] == (1, 4) and out[2][2] == 20 and "can't be cast" in out[6]


def test_layer_norm_and_batch_norm_backward_in_reduced_precision():
    # The CUDA kernels keep layer/batch norm statistics in float32 for a bf16/fp16 input (measured on an H200:
    # native_layer_norm of a bf16 input gives float32 mean and rstd), as the meta kernels do; the CPU kernels keep
    # them in the input's dtype unless the parameters are float32 (ATen's is_mixed_type / param_scalar_type,
    # layer_norm.h, batch_norm.h), and their backward refuses float32 statistics: every bf16 LayerNorm or BatchNorm
    # backward failed under simdist ("expected scalar type BFloat16 but found Float"). And an output_mask entry
    # False means no gradient there (None): the batch norm backward's meta kernel returns a tensor, and simdist
    # crashed copying the kernel's None into it (any BatchNorm whose input needs no grad).
    def prog(dev):
        out = []
        for mod, dt, pdt in [(torch.nn.LayerNorm, torch.bfloat16, torch.bfloat16),
                             (torch.nn.LayerNorm, torch.bfloat16, torch.float32),
                             (torch.nn.LayerNorm, torch.float16, torch.float16),
                             (torch.nn.BatchNorm1d, torch.bfloat16, torch.bfloat16),
                             (torch.nn.BatchNorm1d, torch.float32, torch.float32),
                             (torch.nn.BatchNorm1d, torch.float16, torch.float32)]:
            torch.manual_seed(0)
            m = mod(3).to(dev, pdt)
            x = torch.randn(4, 3, generator=torch.Generator().manual_seed(1)).to(dev, dt).requires_grad_(dt != torch.float32)
            m(x).float().square().sum().backward()
            out += [snap(p.grad) for p in m.parameters()] + [None if x.grad is None else snap(x.grad)]
        xb = torch.randn(2, 3, generator=torch.Generator().manual_seed(2)).to(dev, torch.bfloat16)
        _, mean, rstd = torch.ops.aten.native_layer_norm(xb, [3], None, None, 1e-5)
        out.append(snap(mean.to(torch.bfloat16)))  # the statistics' values (their dtype is the device's own)
        return out

    both(prog)


def test_host_copies_keep_layouts_and_version_counters():
    # A non_blocking device-to-host copy returns pinned memory with _to_copy's layout (preserve_format keeps a
    # dense tensor's strides) and version 0; copy_ into pinned memory counts once in the version (measured on an
    # H200: a channels_last (2, 3, 2, 3) tensor .to("cpu", non_blocking=True) has strides (18, 1, 9, 3), version 0;
    # pinned.copy_(cuda, non_blocking=True) leaves version 1). simdist made the first row-major, and the copy's
    # kernel, running at the next sync, counted in the version a second time.
    def prog(dev):
        t = torch.randn(2, 3, 2, 3, generator=torch.Generator().manual_seed(0)).to(dev).contiguous(
            memory_format=torch.channels_last)
        h = t.to("cpu", non_blocking=True)
        p = torch.zeros(2, 3, 2, 3)
        p = p.pin_memory() if dev == "cuda" else p
        p.copy_(t, non_blocking=True)
        if dev == "cuda":
            torch.cuda.synchronize()
        return [h.stride(), h._version, snap(h), p._version, snap(p)]

    out = both(prog)
    assert out[0] == (18, 1, 9, 3) and (out[1], out[3]) == (0, 1)


def test_to_memory_format_aliases_only_when_it_is_the_suggested_format():
    # Tensor.to(memory_format=f) returns the tensor itself only when f is its suggest_memory_format() (ATen
    # to_will_alias), not whenever it is contiguous in f: a (1, 1, 2, 2) tensor can be both row-major and
    # channels_last contiguous (measured on an H200: such a tensor .to(memory_format=torch.channels_last) is a copy).
    def prog(dev):
        t = torch.randn(1, 1, 2, 2, generator=torch.Generator().manual_seed(0)).to(dev)
        c = torch.randn(1, 2, 2, 2, generator=torch.Generator().manual_seed(1)).to(dev).contiguous(
            memory_format=torch.channels_last)
        return [t.to(memory_format=torch.channels_last) is t, c.to(memory_format=torch.channels_last) is c,
                c.to(memory_format=torch.contiguous_format) is c, t.to(memory_format=torch.contiguous_format) is t]

    assert both(prog) == [False, True, False, True]


def test_module_to_device_keeps_parameter_version_counters():
    # Module._apply moves a parameter with `param.data = moved`, which keeps the parameter's version counter (c10
    # TensorImpl::shallow_copy_from copies metadata, not the counter); measured on an H200: LayerNorm(2).cuda()
    # leaves weight._version at 1 (its init's ones_). simdist swaps the tensors to keep the Parameter object and its
    # attributes, which swapped the counters too (0). Buffers are replaced by new tensors (version 0 on a GPU,
    # while on the CPU `.to("cpu")` keeps them): not compared here.
    def prog(dev):
        torch.manual_seed(0)
        m = torch.nn.LayerNorm(2)
        for p in m.parameters():
            p.grad = torch.ones_like(p)
            p.grad.mul_(3)
        m.to(dev)
        return [(p._version, p.grad._version, snap(p), snap(p.grad)) for p in m.parameters()]

    assert [v[:2] for v in both(prog)] == [(1, 1), (1, 1)]  # ones_ / zeros_ at init, mul_ on each grad


def test_a_returned_one_element_tensor_with_a_wide_stride():
    # A returned tensor is hashed into the run's digest as its row-major bytes; a one-element tensor whose stride
    # is not 1 (as_strided, a select of a wide tensor) is "contiguous" to torch, cannot be viewed as bytes as it
    # is, and the run raised after the program had finished (found by the tier: a select of a (1, 4) tensor).
    def prog(dev):
        t = torch.arange(8., device=dev)
        return [t.as_strided((1,), (4,), 1).cpu(), t.reshape(2, 4)[:, 1:2].reshape(-1)[:1].cpu()]

    both(prog)
    a = simdist.run(prog, args=("cuda",)).digest
    assert a == simdist.run(prog, args=("cuda",)).digest


def test_convolution_outputs_take_the_backends_memory_format():
    # ATen ConvUtils.h: a convolution's outputs are channels_last when its input or its weight is (cuDNN's
    # cudnn_conv_suggest_memory_format and oneDNN's mkldnn_conv_use_channels_last alike); torch's meta kernel
    # leaves them row-major ("meta tensors have no device info", torch/_meta_registrations.py meta_conv) and its
    # FakeTensor asks torch._C._conv_determine_backend_memory_format instead (torch/_subclasses/fake_impls.py).
    # simdist took the meta layout: a channels_last Conv2d gave a row-major output and gradients.
    def prog(dev):
        out = []
        for cl_in, cl_w in [(True, False), (False, True), (False, False)]:
            torch.manual_seed(0)
            m = torch.nn.Conv2d(3, 2, 3, padding=1).to(dev)
            if cl_w:
                m = m.to(memory_format=torch.channels_last)
            x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(1)).to(dev)
            x = x.contiguous(memory_format=torch.channels_last) if cl_in else x
            x.requires_grad_()
            y = m(x)
            y.square().sum().backward()
            out += [y.stride(), x.grad.stride(), m.weight.grad.stride(), snap(y), snap(x.grad), snap(m.weight.grad)]
        return out

    out = both(prog)
    assert out[0] == (32, 1, 8, 2) and out[6] == (32, 1, 8, 2) and out[12] == (32, 16, 4, 1)


def test_kernels_run_on_one_intra_op_thread_whatever_the_machine():
    # A run is a pure function of its program and seed on any machine (DESIGN.md, Determinism). OpenMP keeps the
    # intra-op thread count per thread, and a new thread starts from OpenMP's default, the machine's core count:
    # the rank threads ran oneDNN's kernels (a Conv1d's weight gradient) split over every core, so the values
    # differed from one intra-op thread's by an ulp here and depended on the machine. (On a one-core machine this
    # test cannot tell.)
    def prog(dev):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(2, 3, 4, generator=g).to(dev)
        w = torch.randn(2, 3, 3, generator=g).to(dev)
        go = torch.randn(2, 2, 4, generator=g).to(dev)
        return [snap(t) for t in torch.ops.aten.convolution_backward(go, x, w, [2], [1], [1], [1], False, [0], 1,
                                                                      [True, True, True])]

    both(prog)


def test_output_layouts_are_the_kernels_when_the_meta_kernel_differs():
    # CPU and CUDA share TensorIterator, which gives a dim of size 1 the stride of a row-major layout; the meta
    # kernel of an elementwise op keeps the input's (neg of a (1, 1, 2, 2) channels_last tensor: (4, 1, 2, 1), the
    # kernels (4, 4, 2, 1)). That stride decides the suggested memory format, so what is computed from the result
    # was laid out differently (torch.stack of it: strides (12, 1, 4, 2, 1) vs (12, 4, 4, 2, 1)): a `.view()` that
    # works on a GPU could fail under simdist or the reverse. simdist now takes sizes and strides from the real
    # kernel, run once per signature on zeros (simdist/faces/probe.py).
    def prog(dev):
        t = torch.randn(1, 1, 2, 2, generator=torch.Generator().manual_seed(0)).to(dev).to(
            memory_format=torch.channels_last)
        n = torch.neg(t)
        s = torch.stack([n, t, t], 1)
        return [t.stride(), n.stride(), s.stride(), snap(s), snap(s.view(-1)) if s.is_contiguous() else None]

    out = both(prog)
    assert out[1] == (4, 4, 2, 1) and out[2] == (12, 4, 4, 2, 1)


def test_a_dtype_the_kernel_does_not_implement_is_refused_at_the_call():
    # A kernel without an implementation for a dtype refuses it when the op is called, on the host ("add_stub" not
    # implemented for 'Float8_e4m3fn', on CPU and CUDA alike); the meta kernel accepts it, so simdist raised only
    # when the kernel ran, at a later sync, past the program's try/except.
    def prog(dev):
        x = torch.ones(2, device=dev).to(torch.float8_e4m3fn)
        try:
            x + 1
            caught = None
        except NotImplementedError as err:
            caught = str(err).splitlines()[0]  # (simdist adds a line naming the op and where it was launched)
        return [caught, snap(x.float())]

    assert "not implemented for 'Float8_e4m3fn'" in both(prog)[0]


@pytest.mark.parametrize("case", ["inplace_shapes", pytest.param("mm_dtypes", marks=pytest.mark.xfail(
    strict=True, reason="known: errors that only a kernel raises surface when it runs, not at the call"))])
def test_known_deferred_errors(case):
    # On a GPU, an op's argument checks run on the host when it is called, so a program's try/except around the
    # call catches them. simdist checks shapes at the call from meta kernels (functional and view ops, out=
    # arguments, and dtype refusals of small ops through simdist/faces/probe.py) and an in-place op's arguments by
    # running it at the call on zeroed host storages (probe.py check_inplace, d2), but a mixed-dtype mm only by its
    # kernel (torch's meta kernel accepts it): the error surfaces at the next synchronization, naming the op and
    # where it was launched, past the program's try/except. Not a silent value.
    def prog(dev):
        a = torch.zeros(3, device=dev)
        try:
            if case == "inplace_shapes":
                a.add_(torch.ones(4, device=dev))
            else:
                torch.zeros(2, 2, device=dev, dtype=torch.int64) @ torch.zeros(2, 2, device=dev)
            r = "accepted"
        except RuntimeError:
            r = "refused at the call"
        return [r, snap(a)]

    assert both(prog)[0] == "refused at the call"


def test_like_factories_told_to_make_a_host_tensor_make_one():
    # torch.zeros_like(x, device="cpu") / x.new_ones(n, device="cpu"): the device argument wins over the input's
    # (docs of torch.zeros_like: "device: the desired device of returned tensor. Default: if None, defaults to the
    # device of input"). simdist made them on the simulated device: a "cpu" request came back as a CUDA tensor.
    def prog(dev):
        t = torch.randn(3, 2, generator=torch.Generator().manual_seed(0)).to(dev).t()
        made = [torch.zeros_like(t, device="cpu"), t.new_ones(2, device="cpu"), torch.full_like(t, 2., device="cpu"),
                torch.ones_like(t, dtype=torch.int32, device="cpu"), torch.zeros_like(t), t.new_zeros(2)]
        where = [m.device.type for m in made[:4]] + [m.is_cuda == (dev == "cuda") for m in made[4:]]
        return [(w, m.stride(), snap(m)) for w, m in zip(where, made)]

    assert [m[0] for m in both(prog)] == ["cpu"] * 4 + [True] * 2


def test_data_dependent_results_keep_the_kernels_storage():
    # unique_consecutive (ATen Unique.cpp, CPU and CUDA alike) allocates its output for every input element and
    # resizes it down to the unique count: the result's storage keeps the first size (untyped_storage().nbytes(),
    # Tensor.storage().size()). simdist allocated exactly the result's bytes.
    def prog(dev):
        x = torch.tensor([1., 1., 2., 2., 2., 3.], device=dev)
        u = torch.unique_consecutive(x)
        v, counts = torch.unique_consecutive(x, return_counts=True)
        return [u.untyped_storage().nbytes(), u.storage().size(), snap(u), counts.untyped_storage().nbytes(),
                snap(counts), x.nonzero().stride()]

    assert both(prog)[0] == 24


def test_moving_a_module_an_autograd_graph_holds_is_refused_by_name():
    # Module._apply moves a parameter with `param.data = moved` on a GPU, whatever holds it. simdist cannot graft a
    # simulated tensor's data onto a CPU tensor (nor the reverse) and swaps the two instead, which torch refuses for
    # a tensor an autograd graph holds (its AccumulateGrad would feed the other tensor). The tier found this as
    # torch's own RuntimeError ("_apply(): Couldn't swap LayerNorm.weight") where a GPU succeeds: now a named
    # refusal, as the standard asks of what simdist does not model.
    def prog(dev):
        m = torch.nn.LayerNorm(4).to(dev)
        y = m(torch.ones(2, 4).to(dev))
        m.cpu()
        return [snap(y), m.weight.device.type]

    assert prog("cpu")[1] == "cpu"
    with pytest.raises(simdist.UnsupportedOperation, match=r"Module\._apply"):
        simdist.run(prog, args=("cuda",))

    def freed(dev):  # with the graph gone, the move works
        m = torch.nn.LayerNorm(4).to(dev)
        y = m(torch.ones(2, 4).to(dev)).detach()
        m.cpu()
        return [snap(y), snap(m.weight), m.weight.is_cuda]

    both(freed)


@pytest.mark.xfail(strict=True, reason="known: autograd replays a view op on a tensor subclass, as_strided on CUDA")
def test_known_view_replay():
    # Autograd regenerates a view's grad_fn when its base was modified in place since (reading grad_fn or
    # is_leaf). For a CUDA tensor it replays the view as base.as_strided(...); for a tensor subclass, and a
    # simulated tensor is one, it replays the view op itself (ADInplaceOrView: is_python_dispatch() forces the
    # view_func), on the base's current metadata. After an in-place view op on the base (transpose_), the replayed
    # view((16,)) is impossible: simdist raises where a GPU answers. Not a silent value; fixing it needs torch to
    # replay as_strided for the subclass.
    def prog(dev):
        b = torch.ones(4, 4, device=dev, requires_grad=True) * 1
        v = b.view(16)
        b.mul_(2)
        b.transpose_(0, 1)
        return [v.is_leaf, v.grad_fn is not None, snap(v)]

    both(prog)


# --- regressions of the broadened tier (d-series, notes_engine_bugs.md) ------------------------------------------
def test_as_strided_past_the_end_of_the_storage_is_refused():
    # ATen as_strided / setStrided (c10 checkInBoundsForStorage): a view needing more bytes than its storage holds
    # raises "setStorage: ... out of bounds for storage of size N", with or without an explicit storage offset
    # (measured on an H200: zeros(2, device="cuda").as_strided((3,), (1,)) raises). simdist checked only an
    # explicit offset: without one, the view read past the allocation into the caching allocator's block (fresh
    # poison or another tensor's bytes: a silent wrong value). d1.
    def prog(dev):
        a = torch.zeros(2, device=dev)
        out = []
        for f in (lambda: a.as_strided((3,), (1,)), lambda: torch.as_strided(a, (2,), (2,)),
                  lambda: a[1:].as_strided((2,), (1,)), lambda: a.as_strided((1,), (1,), 2),
                  lambda: a.as_strided_((4,), (1,)), lambda: a[1:].as_strided((1,), (1,))):
            try:
                out.append(snap(f()))
            except RuntimeError as e:
                out.append(str(e).split(" requiring")[0])
        return out + [tuple(a.shape)]

    out = both(prog)
    assert all(isinstance(o, str) for o in out[:5]) and out[5].tolist() == [0.0]


def test_an_in_place_write_through_overlapping_memory_is_refused_at_the_call():
    # ATen MemoryOverlap.cpp and TensorIterator's compute_mem_overlaps, on the host before any kernel: a written
    # tensor whose elements share memory (an expand) raises "unsupported operation: more than one element of the
    # written-to tensor refers to a single memory location"; an input that partly overlaps the output raises "some
    # elements of the input tensor and the written-to tensor refer to a single memory location" (copy_, out=, and
    # out= before it is resized: TensorIterator checks first). fill_ / zero_ do not check (set_check_mem_overlap
    # false). Measured on an H200 (.gpudiff facts, torch 2.11): each raises, or not, as eager CPU does. simdist's
    # CPU kernel raised only when it ran, at a later synchronization past the program's try/except; meta kernels
    # never check overlap. Now the real op runs at the call on zeroed host storages aliased as the device's. d2.
    def prog(dev):
        out = []
        x = torch.arange(4., device=dev)
        for f in (lambda: x[:2].expand(2, 2).add_(1), lambda: x[1:].copy_(x[:-1]),
                  lambda: torch.neg(x[:2], out=x[1:3]), lambda: torch.add(torch.ones(2, 2, device=dev), 1,
                                                                         out=x[:2].expand(2, 2)),
                  lambda: torch.mul(x.view(4, 1, 1), 2, out=x.view(4, 1, 1).mT),
                  lambda: x.view(2, 2).mT.copy_(x.view(2, 2)), lambda: x[:2].expand(2, 2).fill_(7),
                  lambda: x.add_(torch.ones(5, device=dev)), lambda: x.long().add_(1.5)):
            try:
                f()
                out.append("no error")
            except RuntimeError as e:
                out.append(str(e)[:60])
            out.append(snap(x))
        return out

    out = both(prog)
    assert out[0].startswith("unsupported operation: more than one") and out[12] == "no error"


def test_softmax_of_float16_in_float32_is_one_cuda_kernel():
    # aten/src/ATen/native/SoftMax.cpp: softmax / log_softmax(x, dim, dtype=torch.float32) of a float16 CUDA tensor
    # is _softmax(x, dim, half_to_float=True), a kernel contract only CUDA implements ("softmax with half to float
    # conversion is not supported on CPU"); its backward _softmax_backward_data(..., input_dtype=Half) returns
    # float16. simdist raised the CPU's refusal at the next synchronization (found by the tier, lowp_reduce). d3.
    def prog(dev):
        x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0)).to(dev, torch.float16).requires_grad_()
        y = x.softmax(-1, dtype=torch.float32)
        z = torch.log_softmax(x, 0, dtype=torch.float32)
        (y.square().sum() + z.sum()).backward()
        return [y.dtype, snap(y), snap(z), x.grad.dtype, snap(x.grad)]

    out = both(prog)
    assert out[0] == torch.float32 and out[3] == torch.float16


def test_an_op_whose_meta_kernel_cannot_size_its_output_reads_the_data_after_its_producers():
    # repeat_interleave of a tensor of repeats has a data-dependent size (its meta kernel refuses: "cannot
    # repeat_interleave a meta tensor without output_size"); on a GPU it synchronizes the host and sizes the output
    # from the repeats (aten/src/ATen/native/Repeat.cpp). simdist then ran the op at the call on the device bytes
    # as they were, before the queued kernels producing them had run (poison read as negative repeats: "repeats
    # can not be negative"). Argument errors are still raised at the call (the op refuses zeros of the arguments'
    # layouts too). d4.
    def prog(dev):
        x = torch.arange(4, device=dev)
        r = (x % 3).clamp(0, 2)  # queued: not yet written when repeat_interleave is called
        out = [snap(torch.repeat_interleave(x, r)), snap(torch.repeat_interleave(r))]
        try:
            torch.repeat_interleave(x, torch.ones(3, dtype=torch.long, device=dev))
        except RuntimeError as e:
            out.append(type(e).__name__)
        return out

    assert both(prog)[2] == "RuntimeError"


def test_a_result_keeps_the_storage_its_kernel_allocated():
    # soft_margin_loss with a reduction computes the unreduced loss into its output and resize_s it to the 0-d
    # result (ATen Loss.cpp soft_margin_loss_out), so the result's storage keeps the input's size (eager CPU and
    # an H200 alike: untyped_storage().nbytes() == 12 for a (1, 3) input). simdist sized every output from its
    # extent (4 bytes). The probe of small signatures now keeps the kernel's storage size. d5.
    def prog(dev):
        z = torch.randn(1, 3, generator=torch.Generator().manual_seed(0)).to(dev)
        r = torch.nn.functional.soft_margin_loss(z, z.sign(), reduction="mean")
        return [r.untyped_storage().nbytes(), snap(r), r.storage_offset()]

    assert both(prog)[0] == 12


def test_as_tensor_of_a_device_tensor_on_its_device_is_the_tensor_itself():
    # docs of torch.as_tensor: "If data is a tensor with the requested dtype and device then data itself is
    # returned"; python_tensor tensor_new.cpp internal_new_from_data: data.to(device, dtype) (measured on an
    # H200: torch.as_tensor(t, device="cuda") is t). simdist made a copy through the host (a device-to-host copy,
    # a host synchronization and a host-to-device copy); torch.tensor(t, device=...) is a detached device copy. d6.
    def prog(dev):
        t = torch.arange(3., device=dev)
        c = torch.tensor(t, device=dev)
        h = torch.as_tensor(t, device=dev, dtype=torch.float16)
        return [torch.as_tensor(t, device=dev) is t, torch.as_tensor(t) is t, c is t, c.data_ptr() == t.data_ptr(),
                h.dtype, snap(h), snap(c)]

    assert both(prog)[:4] == [True, True, False, False]


@pytest.mark.xfail(strict=True, reason="known: autograd accumulates a gradient in place only for plain tensors")
def test_known_gradient_accumulation_versions():
    # torch/csrc/autograd/input_buffer.cpp can_accumulate_inplace: a gradient with several contributions is summed
    # in place into the first (`old_var.add_(var)`) only when it is not a tensor subclass; a simulated tensor is one,
    # so the sum is a new tensor. Values agree; the gradient's version counter does not (measured on an H200:
    # ((z * 2) + (z * 3)).sum().backward() leaves z.grad._version == 1; simdist 0). Not fixable from Python.
    def prog(dev):
        z = torch.ones(3, device=dev).requires_grad_()
        ((z * 2) + (z * 3)).sum().backward()
        return [z.grad._version, snap(z.grad)]

    both(prog)


def test_integer_division_by_zero_gives_the_gpus_values():
    # A CUDA kernel divides integers with C++'s `/` and `%` and raises nothing (BinaryDivTruncKernel.cu,
    # BinaryDivFloorKernel.cu with c10's div_floor_integer, BinaryRemainderKernel.cu); the CPU kernels raise
    # "ZeroDivisionError", so `torch.where(d != 0, n // d, 0)`, valid on a GPU, failed under simdist. Measured on an
    # H200 (torch 2.11, CUDA 13) for int64 / int32 / int16 / int8 / uint8, trunc and floor division, floor_divide,
    # remainder and fmod, tensor and scalar divisors, in place or not: a / 0 and a % 0 have every bit set (-1, 255
    # for uint8), except int64 dividends in [0, 2**32), which give 0xFFFFFFFF; floor division subtracts one for a
    # negative dividend. (Eager CPU refuses, so the values are the GPU's, written here.) d7.
    def prog():
        x = torch.tensor([-7, -3, 0, 5, 2**40, -2**40], device="cuda")
        z = torch.zeros_like(x)
        s = torch.tensor([-7, 0, 5], device="cuda", dtype=torch.int32)
        u = torch.tensor([0, 5, 255], device="cuda", dtype=torch.uint8)
        d = torch.tensor([2, 0, 3, 0, 1, 0], device="cuda")
        y = x.clone()
        y.floor_divide_(d)
        return [torch.div(x, z, rounding_mode="floor").tolist(), torch.div(x, 0, rounding_mode="trunc").tolist(),
                (x % z).tolist(), torch.fmod(x, 0).tolist(), (s // 0).tolist(), torch.remainder(s, 0).tolist(),
                (u // 0).tolist(), y.tolist(), torch.where(d != 0, x // d, 0).tolist(), (x // 2).tolist()]

    M = 0xFFFFFFFF
    assert simdist.run(prog).returns[0] == [
        [-2, -2, M, M, -1, -2], [-1, -1, M, M, -1, -1], [-1, -1, M, M, -1, -1], [-1, -1, M, M, -1, -1],
        [-2, -1, -1], [-1, -1, -1], [255, 255, 255], [-4, -2, 0, M, 2**40, -2], [-4, 0, 0, 0, 2**40, 0],
        [-4, -2, 0, 2, 2**39, -2**39]]


def test_integer_products_are_refused_as_cuda_refuses_them():
    # CUDA's matrix products are cuBLAS's, for floating and complex types only (aten/src/ATen/native/cuda/Blas.cpp):
    # an integer or bool mm / matmul / bmm / mv / dot raises NotImplementedError at the call, '"addmm_cuda" not
    # implemented for 'Long'' (measured on an H200 for int64 / int32 / int8 / uint8 / bool: mm, addmm, addbmm,
    # linear, tensordot "addmm_cuda"; bmm, baddbmm, 3-d matmul, einsum "baddbmm_cuda"; mv, addmv "addmv_impl_cuda";
    # dot, vdot "dot"; torch.outer works). simdist ran the CPU kernels, which compute them. d8.
    def prog():
        a = torch.ones(2, 2, dtype=torch.int64, device="cuda")
        out = []
        for f in (lambda: a @ a, lambda: torch.bmm(a[None], a[None]), lambda: a @ a[0], lambda: torch.dot(a[0], a[0]),
                  lambda: torch.einsum("ij,jk->ik", a.int(), a.int()), lambda: a.bool() @ a.bool(),
                  lambda: torch.outer(a[0], a[0])):
            try:
                out.append(f().tolist())
            except NotImplementedError as e:
                out.append(str(e))
        out.append((a.float() @ a.float()).tolist())
        return out

    assert simdist.run(prog).returns[0] == [
        "\"addmm_cuda\" not implemented for 'Long'", "\"baddbmm_cuda\" not implemented for 'Long'",
        "\"addmv_impl_cuda\" not implemented for 'Long'", "\"dot\" not implemented for 'Long'",
        "\"baddbmm_cuda\" not implemented for 'Int'", "\"addmm_cuda\" not implemented for 'Bool'", [[1, 1], [1, 1]],
        [[2.0, 2.0], [2.0, 2.0]]]


def test_a_data_dependent_result_is_written_where_it_was_placed():
    # A data-dependent op's result (unique, nonzero, masked_select) is written by a kernel launched after the host
    # learned its size; that kernel wrote through the tensor's CPU view as it was when the kernel ran, so a storage
    # resize or set_ queued in between redirected the write (unique's inverse read back as -1, or a crash copying
    # two elements into a tensor set_() to be empty). Every kernel writes the view it was launched with. d9.
    def prog(dev):
        t1 = torch.arange(3., device=dev)
        inv = torch.unique(t1 % 2, return_inverse=True)[1]
        inv.storage().resize_(8)
        tail = torch.empty(0, device=dev, dtype=torch.int64).set_(inv.storage(), 3, (5,))
        tail.fill_(7)
        m = t1[t1 > 0]
        keep = m.view(-1)
        m.set_()
        return [snap(inv), snap(keep), tuple(m.shape)]

    assert both(prog)[0].tolist() == [0, 1, 0]


def test_a_0_dim_host_tensor_is_refused_where_the_cuda_wrapper_checks_devices():
    # torchgen's generated CUDA wrappers check that every tensor argument is on the op's device (c10
    # check_and_update_common_device: "Expected all tensors to be on the same device, but got min is on cpu..."),
    # a 0-dim CPU tensor included, unless native_functions.yaml declares the op `device_check: NoCheck`
    # (TensorIterator's elementwise ops, which take it as a scalar). simdist let every op take a 0-dim CPU tensor.
    # Measured on an H200 (torch 2.11, .gpudiff/facts2.py): clamp(min=), clamp_, clamp_min, isin, stack,
    # index_select, searchsorted, bucketize, nextafter refuse one; maximum, where, lerp's weight, masked_fill's
    # value, index_fill, fill_, addcmul, pow, eq, index_put_'s values, the _foreach ops take one. d10.
    def prog():
        x = torch.arange(4., device="cuda")
        s = torch.tensor(2.)
        out = []
        for f in (lambda: torch.clamp(x, min=s), lambda: torch.isin(x, s), lambda: torch.stack([x[0], s]),
                  lambda: x.index_select(0, torch.tensor(1)), lambda: torch.nextafter(x, s),
                  lambda: torch.maximum(x, s), lambda: torch.where(x > 1, x, s), lambda: x.masked_fill(x > 1, s),
                  lambda: x.clone().fill_(s), lambda: x.pow(s), lambda: torch._foreach_mul([x], s)[0]):
            try:
                out.append(f().tolist())
            except RuntimeError as e:
                out.append(type(e).__name__)
        return out

    out = simdist.run(prog).returns[0]
    assert out[:5] == ["RuntimeError"] * 5 and "RuntimeError" not in out[5:]


def test_an_in_place_op_through_a_self_overlapping_view_reads_before_it_writes():
    # A view whose elements share memory in a way torch's overlap check cannot tell (MemoryOverlap.cpp: TOO_HARD,
    # no error: as_strided with small strides, unfold with a step below its size) can be written in place. A GPU's
    # threads read their elements before any writes them; the CPU kernel's loop reads what earlier iterations
    # wrote. Measured on an H200 (torch 2.11): arange(6.).as_strided((2, 2), (1, 1)).add_(1) gives
    # [1, 2, 3, 3, 4, 5] (CPU: [1, 3, 3, ...]), unfold(0, 3, 1).mul_(2) doubles each element once ([0, 2, 4, ...];
    # CPU [0, 4, 16, 24, ...]), neg_ and exp_ likewise; index_add_ writes only its rows. Where two elements of one
    # location get different values (add_ of a tensor, copy_), which one lands depends on the threads' order
    # (the H200 kept the first): a named refusal. d11.
    def prog():
        out = []
        for f in (lambda z: z.as_strided((2, 2), (1, 1)).add_(1), lambda z: z.unfold(0, 3, 1).mul_(2),
                  lambda z: z.as_strided((2, 2), (1, 1)).neg_(),
                  lambda z: z.as_strided((2, 2), (1, 1)).index_add_(0, torch.tensor([0], device="cuda"),
                                                                    torch.ones(1, 2, device="cuda")),
                  lambda z: z.as_strided((2, 2), (1, 1)).add_(torch.tensor([[10., 20.], [30., 40.]], device="cuda")),
                  lambda z: z.as_strided((2, 2), (1, 1)).copy_(torch.tensor([[1., 2.], [3., 4.]], device="cuda"))):
            z = torch.arange(6., device="cuda")
            try:
                f(z)
                out.append(z.tolist())
            except simdist.UnsupportedOperation as e:
                out.append(str(e)[:9])
        return out

    assert simdist.run(prog).returns[0] == [[1., 2., 3., 3., 4., 5.], [0., 2., 4., 6., 8., 10.], [-0., -1., -2., 3., 4., 5.],
                                            [1., 2., 2., 3., 4., 5.], "add_.Tens", "copy_ wri"]


def test_unique_results_have_cudas_layouts_and_integer_histc_runs():
    # aten/src/ATen/native/cuda/Unique.cu sorts into buffers of the input's size and narrows them: torch.unique's
    # values and counts keep storages of the input's element count, unique_consecutive's counts too; along a dim
    # (unique_dim, unique_consecutive(dim=)) the values are row-major and the counts exactly sized. The CPU kernels
    # simdist runs size them exactly and give unique(x, dim=2) of a (3, 2, 2) tensor strides (2, 1, 6), so a
    # `.view(-1)` that works on a GPU raised. And CUDA's histc implements integer dtypes (SummaryOps.cu), which the
    # CPU kernel refuses. All measured on an H200 (torch 2.11, .gpudiff/facts2.py). d12.
    def prog():
        u = torch.tensor([3, 1, 3, 2, 2, 5], device="cuda")
        u3 = torch.tensor([[[1, 0], [1, 1]], [[0, 0], [1, 1]], [[1, 0], [0, 1]]], device="cuda")
        v, inv, c = torch.unique(u, return_inverse=True, return_counts=True)
        d = torch.unique(u3, dim=2)
        _, cc = torch.unique_consecutive(u, return_counts=True)
        _, cd = torch.unique_consecutive(u3, dim=0, return_counts=True)
        lay = [(tuple(t.shape), t.stride(), t.untyped_storage().nbytes()) for t in (v, inv, c, d, cc, cd)]
        h = torch.histc(torch.tensor([0, 1, 5, 9, 9], dtype=torch.int32, device="cuda"), 4, 0, 9)
        return lay + [d.view(-1).tolist(), h.dtype, h.tolist()]

    out = simdist.run(prog).returns[0]
    assert out[:6] == [((4,), (1,), 48), ((6,), (1,), 48), ((4,), (1,), 48), ((3, 2, 2), (4, 2, 1), 96),
                       ((5,), (1,), 48), ((3,), (1,), 24)]
    assert out[7:] == [torch.int32, [2, 0, 1, 2]]


@P.fuzz(cost=4)
@given(prog=D.random_programs())
def test_simulated_cuda_random_numbers_repeat_where_eager_ones_do(prog):
    """Random values of a GPU and the CPU differ by design (Philox vs mt19937); reproducibility must not: under any
    schedule seed simdist gives the same draws, and the same seed, generator or restored state repeats them exactly
    where eager CPU's repeat (simdist/faces/rng.py: each random op takes (seed, offset) at launch, as Philox does;
    torch.manual_seed seeds every device, torch.cuda.manual_seed the current one, a Generator(device="cuda") its own
    stream, get/set_rng_state and fork_rng save and restore it)."""
    note(prog.source)
    D.check_random(prog)


def test_a_cuda_generator_and_the_default_one_seeded_alike_draw_alike():
    # Two Philox generators with one seed and offset give one stream: on a GPU torch.manual_seed(s) then a draw,
    # and torch.Generator(device="cuda").manual_seed(s) then the same draw with it, are equal (measured on an H200:
    # 400 drawn random programs of seeds, generators, get/set_rng_state, fork_rng and side streams give the same
    # pattern of repeated draws as simdist, .gpudiff/run_random.py). An op called with an explicit generator
    # receives a plain torch._C.Generator, not simdist's SimGenerator, and drew its launch seed from the CPU
    # state underneath, so the two differed (found by test_simulated_cuda_random_numbers_repeat_where_eager_ones_do).
    # simdist/faces/rng.py now keeps that CPU generator seeded with its next launch value and registers it. d13.
    def prog():
        torch.manual_seed(5)
        a = torch.bernoulli(torch.full((64,), 0.5, device="cuda"))
        b = torch.randn(64, device="cuda")
        g = torch.Generator(device="cuda").manual_seed(5)
        c = torch.bernoulli(torch.full((64,), 0.5, device="cuda"), generator=g)
        st = g.get_state()
        d = torch.randn(64, device="cuda", generator=g)
        g.set_state(st)
        e = torch.randn(64, device="cuda", generator=g)
        return [torch.equal(a, c), torch.equal(b, d), torch.equal(d, e), g.initial_seed(), st.view(torch.int64).tolist(),
                torch.equal(a, b.ge(0).float())]

    # the state's offset after one small draw is 4, as on the H200 (Philox offsets step in multiples of 4;
    # simdist steps 4 per op, a GPU by a multiple of 4 that grows with the kernel's launch shape)
    assert simdist.run(prog).returns[0] == [True, True, True, 5, [5, 4], False]


def test_cuda_kernels_without_a_deterministic_implementation_alert_at_the_call():
    # aten/src/ATen/Context.cpp alertNotDeterministic, called by CUDA kernels' host code (cuda/SummaryOps.cu
    # _histc_cuda, cuda/Indexing.cu index_reduce, TensorAdvancedIndexing.cpp put_ `!accumulate || self is CUDA`,
    # EmbeddingBag.cu, NLLLoss2d.cu ...; torch/__init__.py use_deterministic_algorithms lists them): with
    # torch.use_deterministic_algorithms(True) these ops raise RuntimeError "<caller> does not have a deterministic
    # implementation, but you set 'torch.use_deterministic_algorithms(True)'..." at the call; warn_only=True makes
    # it a UserWarning. The CPU kernels simdist runs have no such alert, so simdist computed them. Which op alerts,
    # under which condition and with which caller name is as an H200 (torch 2.11, CUDA 13) does it
    # (ci/gpu_d_facts.py, docs/gpu/d-series-facts-2026-12-02.json): e.g. histc of a float tensor alerts, of an
    # integer one not; median with a dim alerts, without not; scatter_reduce "prod" alerts, "sum" runs (a
    # deterministic path). d14.
    import warnings

    import torch.nn.functional as F

    def prog():
        i4 = torch.tensor([0, 1, 1, 3], device="cuda")
        s = torch.arange(1., 5, device="cuda")
        cases = {
            "histc_f": lambda: torch.histc(s, 4), "histc_i": lambda: torch.histc(s.long(), 4),
            "bincount_w": lambda: torch.bincount(i4, weights=s), "bincount": lambda: torch.bincount(i4),
            "median_dim": lambda: torch.median(s, 0), "median": lambda: torch.median(s), "mode": lambda: torch.mode(s),
            "scatter_reduce_prod": lambda: torch.zeros(5, device="cuda").scatter_reduce_(0, i4, s, "prod"),
            "scatter_reduce_sum": lambda: torch.zeros(5, device="cuda").scatter_reduce_(0, i4, s, "sum"),
            "put_acc": lambda: torch.zeros(5, device="cuda").put_(i4, s, accumulate=True),
            "index_add": lambda: torch.zeros(5, device="cuda").index_add_(0, i4, s),
            "nll2d_mean": lambda: F.nll_loss(torch.zeros(1, 3, 2, 2, device="cuda"),
                                             torch.zeros(1, 2, 2, dtype=torch.long, device="cuda")),
            "nll_mean": lambda: F.nll_loss(torch.zeros(3, 4, device="cuda"), i4[:3]),
            "adaptive_avg2d_bw": lambda: F.adaptive_avg_pool2d(
                torch.ones(1, 1, 4, 4, device="cuda", requires_grad=True), 3).sum().backward(),
        }
        out = {}
        torch.use_deterministic_algorithms(True)
        try:
            for k, fn in cases.items():
                try:
                    fn()
                    torch.cuda.synchronize()
                    out[k] = "ok"
                except RuntimeError as e:
                    out[k] = str(e).split(" does not have")[0]
            torch.use_deterministic_algorithms(True, warn_only=True)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                r = torch.histc(s, 4)
            out["warn"] = ([str(m.message).split(" does not")[0] for m in w if m.category is UserWarning],
                           r.tolist())
        finally:
            torch.use_deterministic_algorithms(False)
        return out

    out = simdist.run(prog).returns[0]
    assert out == {"histc_f": "_histc_cuda with floating point input", "histc_i": "ok",
                   "bincount_w": "_bincount_cuda", "bincount": "ok", "median_dim": "median CUDA with indices output",
                   "median": "ok", "mode": "ok", "scatter_reduce_prod": "scatter_reduce_cuda_prod_",
                   "scatter_reduce_sum": "ok", "put_acc": "put_", "index_add": "ok",
                   "nll2d_mean": "nll_loss2d_forward_out_cuda_template", "nll_mean": "ok",
                   "adaptive_avg2d_bw": "adaptive_avg_pool2d_backward_cuda",
                   "warn": (["_histc_cuda with floating point input"], [1.0, 1.0, 1.0, 1.0])}


def test_deterministic_mode_fills_uninitialized_memory_as_torch_does():
    # TensorFactories.cpp / cuda EmptyTensor (empty, empty_strided, empty_permuted and what calls them: empty_like,
    # new_empty...) and Resize.cpp resize_ (fill_resize_deterministic_: the bytes the storage grew by): with
    # torch.use_deterministic_algorithms(True) and torch.utils.deterministic.fill_uninitialized_memory (default
    # True) new memory holds NaN (floating, complex) or the type's largest value (integers; True for bool).
    # simdist returned the allocator's bytes: a freed block's stale values, a silent wrong value. Measured on an
    # H200 for 14 dtypes and 9 factories (ci/gpu_d_facts.py: the same bytes as eager CPU). d15.
    def prog(dev):
        torch.use_deterministic_algorithms(True)
        try:
            junk = torch.arange(64., device=dev)
            del junk  # a freed block of known values, for the next allocation to reuse
            out = [snap(torch.empty(3, device=dev)), snap(torch.empty(3, dtype=torch.int32, device=dev)),
                   snap(torch.empty(2, dtype=torch.bool, device=dev)), snap(torch.empty(2, dtype=torch.uint64, device=dev)),
                   snap(torch.empty_strided((2, 2), (1, 3), device=dev)), snap(torch.empty_like(torch.ones(2, 3, device=dev))),
                   snap(torch.ones(2, device=dev).new_empty((3,)))]
            t = torch.ones(2, device=dev)
            t.resize_(5)  # the first two elements keep their values, the rest are filled
            out.append(snap(t))
            torch.utils.deterministic.fill_uninitialized_memory = False
            u = torch.ones(2, device=dev)
            u.resize_(3)
            out.append(snap(u[:2]))
        finally:
            torch.utils.deterministic.fill_uninitialized_memory = True
            torch.use_deterministic_algorithms(False)
        return out

    got = both(prog)
    assert torch.isnan(got[0]).all() and got[1].tolist() == [2 ** 31 - 1] * 3 and got[2].tolist() == [True, True]
    assert torch.isnan(got[7][2:]).all() and got[7][:2].tolist() == [1.0, 1.0]


def test_ctc_loss_of_simulated_tensors_runs_atens_native_kernels_or_is_refused():
    # F.ctc_loss asks _use_cudnn_ctc_loss and _use_miopen_ctc_loss, ops with CUDA kernels only
    # (cudnn/LossCTC.cpp, miopen/LossCTC_miopen.cpp); on the CPU build both raised NotImplementedError ("Could not
    # run 'aten::_use_cudnn_ctc_loss.Tensor' with arguments from the 'CPU' backend") for every ctc_loss. With int64
    # targets a GPU takes ATen's native kernels (the same as the CPU's); with int32 targets and float32 log_probs
    # cuDNN's, which simdist does not model: refused by name. And the native backward alerts in deterministic mode
    # ("ctc_loss_backward_gpu", measured on an H200). d16.
    import torch.nn.functional as F

    def prog(dev):
        x = torch.randn(6, 2, 4, generator=torch.Generator().manual_seed(0)).to(dev).requires_grad_()
        loss = F.ctc_loss(x.log_softmax(-1), torch.tensor([[1, 2], [3, 3]], device=dev),
                          torch.tensor([6, 5], device=dev), torch.tensor([2, 2], device=dev))
        loss.backward()
        return [snap(loss), snap(x.grad)]

    both(prog)

    def cudnn(dev="cuda"):
        x = torch.randn(6, 1, 4, device=dev).log_softmax(-1)
        return F.ctc_loss(x, torch.tensor([1, 2], dtype=torch.int32), [6], [2])

    with pytest.raises(simdist.UnsupportedOperation, match="cuDNN's CTC kernel"):
        simdist.run(cudnn)

    def alerts():
        x = torch.randn(6, 1, 4, device="cuda", requires_grad=True)
        loss = F.ctc_loss(x.log_softmax(-1), torch.tensor([[1, 2]], device="cuda"), torch.tensor([6], device="cuda"),
                          torch.tensor([2], device="cuda"))
        torch.use_deterministic_algorithms(True)
        try:
            loss.backward()
        finally:
            torch.use_deterministic_algorithms(False)

    with pytest.raises(RuntimeError, match="ctc_loss_backward_gpu does not have a deterministic implementation"):
        simdist.run(alerts)
