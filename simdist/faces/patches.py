"""Installing and removing simdist's patches to torch; always undone, also on error.

Patches are process-global but thread-aware: a patched function called from a
thread that is not a simulated rank behaves like the original.
"""
from __future__ import annotations

import ctypes
import gc
import importlib
import os
import random
import sys
import threading
import warnings
import weakref
from collections.abc import MutableMapping

import torch

from ..engine.context import current_rank, note_thread_refusal
from ..engine.errors import SimulationError, UnsupportedOperation
from . import cuda_keys, guard, guard_events
from . import rules  # noqa: F401  (registers the op rules)
from .accelerator import accelerator_patches
from .comm import comm_patches, parallel_apply_patches
from .cuda import cuda_patches, sim_stream
from .sdpa import sdpa_patches
from .storage import storage_patches
from .dispatch import RankMode
from .host_memory import location_tag_checked, numpy_checked
from .host_reads import host_elements as _host_elements
from .c10d import RankC10d, c10d_patches
from .rng import SimGenerator
from .tensor import SIM_INTERNALS, TENSOR_DICT, SimTensor, _load_map_location, _parse_to, _pickling, tensor_to

from .world import process_seed
_cpu_gen = torch.default_generator

_lock = threading.Lock()
_active = None  # the list of (owner, name, original) while a run is installed

_orig_to = torch.Tensor.to
_orig_cuda = torch.Tensor.cuda
_orig_record_stream = torch.Tensor.record_stream
_orig_tensor = torch.tensor
_orig_as_tensor = torch.as_tensor


def _wants_cuda(device):
    if device is None:
        return False
    if isinstance(device, int):
        return True
    if isinstance(device, str):
        return device.startswith("cuda")
    return getattr(device, "type", None) == "cuda"


def _tensor_to(self, *args, **kwargs):
    if current_rank() is not None:
        device = _parse_to(*args, **kwargs)[0]
        if device is not None and device.type == "cuda":
            return tensor_to(self if guard.available() else self.detach(), *args, **kwargs)  # see guard.py
    return _orig_to(self, *args, **kwargs)


def _tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
    if current_rank() is not None:
        dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device or "cuda")
        return tensor_to(self if guard.available() else self.detach(), dev, non_blocking=non_blocking,
                         memory_format=memory_format)
    return _orig_cuda(self, device, non_blocking, memory_format)


_orig_pin_memory = torch.Tensor.pin_memory
_orig_is_pinned = torch.Tensor.is_pinned


def _pin_memory(self, device=None):
    me = current_rank() or _program_thread_rank("Tensor.pin_memory")
    if me is not None:
        if self.device.type == "cuda":
            # aten _pin_memory has no CUDA kernel (Tensor.pin_memory of a device tensor raises on a GPU)
            raise RuntimeError(f"cannot pin '{self.type()}' only dense CPU tensors can be pinned")
        # a CPU build cannot page-lock: a copy in plain memory that the run remembers as pinned (async H2D
        # copies from it then read it when they run, as the DMA does)
        hr = me.host_memory
        if hr.is_pinned(self):
            return self
        return hr.pin(self.clone())
    return _orig_pin_memory(self) if device is None else _orig_pin_memory(self, device)


def _reads_host_bytes(orig, what):
    """`orig` (a Tensor method or function of the tensor) read as a host read of a CPU tensor's bytes: checked
    against pending async device-to-host copies into them (a host-read race), since these read out of torch's
    dispatch: Tensor.tolist reads the bytes in C without an aten op, and printing formats with every dispatch mode
    off (torch/_tensor_str.py). Tensor.numpy reads none: its array's reads are checked (numpy_checked)."""
    def read(self, *args, **kwargs):
        me = current_rank()
        if me is not None and self.device.type == "cpu":
            hr = me.host_memory
            if hr.tensors:
                hr.check(me, what, (self,), {})
        return orig(self, *args, **kwargs)
    read.__name__ = read.__qualname__ = getattr(orig, "__name__", what)
    return read


_tolist = _reads_host_bytes(torch.Tensor.tolist, "tolist")
_numpy = numpy_checked(torch.Tensor.numpy)  # the array shares the bytes: its reads are checked
# np.asarray(t) / np.array(t): numpy strips the watched array subclass (or copies the bytes in C), so the
# conversion itself is checked as the read
_array = _reads_host_bytes(torch.Tensor.__array__, "numpy.asarray / numpy.array (Tensor.__array__)")
_tensor_str = _reads_host_bytes(torch._tensor_str._str, "print")


def _program_thread_rank(what):
    """The rank a host thread started by the program acts for (torch.utils.data's pin-memory thread pins each batch
    for the process that iterates the loader): the process's one simulated rank; refused by name when rank threads
    of one process could each own it; None outside a run."""
    from ..engine.context import live_ranks, process_rank
    me = process_rank()
    if me is None and live_ranks() > 1:
        raise UnsupportedOperation(f"{what} in a host thread the program started, with several simulated ranks in "
                                   "this process (rank threads): which rank's host memory it is is not modelled by "
                                   "simdist; run the ranks as processes (transport='processes')")
    return me


def _is_pinned(self, device=None):
    me = current_rank()
    if me is not None:
        return me.host_memory.is_pinned(self)
    return _orig_is_pinned(self) if device is None else _orig_is_pinned(self, device)


def _record_stream(self, stream):
    if isinstance(self, SimTensor):
        # torch.accelerator's torch.Stream names a simulated stream
        return self._alloc.record_stream(sim_stream(self._dev.owner, stream))
    return _orig_record_stream(self, stream)


def _default_is_cuda():
    try:
        return torch.get_default_device().type == "cuda"
    except Exception:  # noqa: BLE001
        return False


def _factory_from_data(orig):
    def make(data, *args, device=None, **kwargs):
        if current_rank() is not None and isinstance(data, (list, tuple)):
            host = _host_elements(data)
            if host is not None:
                data = host
        if current_rank() is not None and (_wants_cuda(device) or (device is None and _default_is_cuda()
                                                                   and not isinstance(data, torch.Tensor))):
            if isinstance(device, int):
                device = torch.device("cuda", device)
            requires_grad = kwargs.pop("requires_grad", False)
            if isinstance(data, torch.Tensor) and not args and set(kwargs) <= {"dtype"}:
                # a tensor's data: `data.to(device, dtype)` (python_tensor tensor_new.cpp internal_new_from_data),
                # which for as_tensor returns data itself when it is there already (docs of torch.as_tensor), and
                # for torch.tensor copies, detached; a device-to-device copy, not a round trip through the host
                if orig is _orig_as_tensor:
                    out = data.to(device or "cuda", kwargs.get("dtype"))
                else:
                    out = data.detach().to(device or "cuda", kwargs.get("dtype"), copy=True)
                    if requires_grad:
                        out.requires_grad_(True)
                return out
            cpu = orig(data, *args, device="cpu", **kwargs)
            out = tensor_to(cpu, device or "cuda")
            if requires_grad:
                out.requires_grad_(True)
            return out
        return orig(data, *args, device=device, **kwargs)
    make.__name__ = orig.__name__
    make.__doc__ = orig.__doc__
    return make


class RankEnviron(MutableMapping):
    """os.environ with torchrun's per-process variables (RANK, LOCAL_RANK...) per rank thread."""

    def __init__(self, real):
        self.real = real

    def _over(self):
        me = current_rank()
        return me.env if me is not None else None

    def __getitem__(self, k):
        o = self._over()
        if o is not None and k in o:
            return o[k]
        return self.real[k]

    def __setitem__(self, k, v):
        o = self._over()
        if o is not None and k in o:
            o[k] = v
        else:
            self.real[k] = v

    def __delitem__(self, k):
        o = self._over()
        if o is not None and k in o:
            del o[k]
        else:
            del self.real[k]

    def __iter__(self):
        o = self._over() or {}
        yield from o
        for k in self.real:
            if k not in o:
                yield k

    def __len__(self):
        return len(set(self.real) | set(self._over() or ()))

    def copy(self):
        return dict(self)

    def __getattr__(self, name):  # putenv, encodekey...: defer to the real mapping
        return getattr(self.real, name)


_orig_nonzero = torch.nonzero
_orig_compat = torch._has_compatible_shallow_copy_type


def _nonzero(input, *, out=None, as_tuple=False):
    if isinstance(input, SimTensor) and out is None:
        return input.nonzero(as_tuple=as_tuple)
    return _orig_nonzero(input, out=out, as_tuple=as_tuple) if out is not None else _orig_nonzero(
        input, as_tuple=as_tuple)


def _compatible_shallow_copy(input: torch.Tensor, from_: torch.Tensor) -> bool:  # dynamo checks this signature
    # Between a CPU and a simulated tensor `.data =` cannot work (different tensor types); nn.Module's _apply
    # then swaps the two tensors instead (_module_apply below). Two simulated tensors: torch's own answer.
    if isinstance(input, SimTensor) != isinstance(from_, SimTensor):
        return False
    return _orig_compat(input, from_)


# nn.Module.cuda()/.to()/.cpu() keep each Parameter object and its attributes on a GPU (Module._apply's
# `param.data = param_applied`): Megatron tags parameters (`tensor_model_parallel`, `partition_dim`) before
# moving the model, and optimizers built before .cuda() hold the same objects. A CPU tensor cannot take a
# simulated tensor's data, so where one side is simulated, _apply takes its swap path (torch.utils.swap_tensors,
# which keeps the object) and the attributes the object had are put back.
import torch.nn.modules.module as _nn_module  # noqa: E402
import torch.jit._builtins as _jit_builtins  # noqa: E402

_JIT_REGISTERED = []  # replacements registered as TorchScript builtins while installed (the table keys by id)

_orig_module_apply = torch.nn.Module._apply
_orig_is_wrapper_subclass = _nn_module.is_traceable_wrapper_subclass
_apply_input = threading.local()


def _module_apply(self, fn, recurse=True):
    if current_rank() is None:
        return _orig_module_apply(self, fn, recurse)
    kept = [(p, dict(p.__dict__), _versions(p)) for p in self._parameters.values() if p is not None]

    def noted(t):
        _apply_input.tensor = t
        return fn(t)

    try:
        out = _orig_module_apply(self, noted, recurse)
    except RuntimeError as e:
        if "Couldn't swap" in str(e) and not torch.__future__.get_swap_module_params_on_conversion():
            # torch itself would set `param.data`, which a CPU tensor cannot take from a simulated one (and the
            # reverse): simdist swaps the two, and torch's swap refuses a tensor an autograd graph still holds
            # (its gradient would be accumulated into the other one). Refused by name, not as torch's error: on a
            # GPU this move works.
            raise UnsupportedOperation(
                f"Module._apply (.cpu() / .to() / .cuda()) between the host and a simulated device of a module whose "
                f"parameters an autograd graph still holds (a forward's outputs alive) is not modelled by simdist "
                f"({e}): free the graph first (backward, or drop the outputs)") from e
        raise
    finally:
        _apply_input.tensor = None
    for p, attrs, versions in kept:
        for k, v in attrs.items():
            if k not in p.__dict__:
                p.__dict__[k] = v
        # `param.data = applied` keeps the parameter's (and its grad's) version counter (c10
        # TensorImpl::shallow_copy_from copies the metadata, not the counter); the swap does not: put it back
        now = _versions(p)
        if now != versions:
            ts = [t for t in (p, p.grad) if t is not None]
            torch._C._autograd._unsafe_set_version_counter(tuple(ts), tuple(v for v in versions if v is not None))
    return out


def _versions(p):
    g = p.grad
    return (p._version, None if g is None else g._version)


_orig_swap_tensors = torch.utils.swap_tensors


def _poisoned_accumulate_grad(grad_outputs):
    raise UnsupportedOperation(
        "a backward reached a tensor through a graph made before simdist moved it between the host and a "
        "simulated device (`t.data = new`, a swap): a GPU's set_data keeps one tensor, simdist swaps two objects "
        "and the old graph's gradient would land on the other one. Move the tensor before building that graph")


def _swappable(t):
    """torch.utils.swap_tensors' rule (torch/utils/__init__.py check_use_count): the only C++ reference to t
    besides its Python object may be its AccumulateGrad node (a leaf that requires grad), which is then poisoned
    so that a graph made before the swap cannot put a gradient on the wrong object. A second reference of any
    other kind (a saved tensor of a leaf that does not require grad) makes t unswappable."""
    n = t._use_count()
    if n == 1:
        return True
    if n != 2 or not t.is_leaf or not t.requires_grad:
        return False
    node = torch.autograd.graph.get_gradient_edge(t).node
    if t._use_count() != 2:  # get_gradient_edge made the node: the second reference was something else
        return False
    node.register_prehook(_poisoned_accumulate_grad)
    return True


_orig_thread_excepthook = threading.excepthook


def _thread_excepthook(args):
    """threading.excepthook during a run: a host thread the program started that died of a named refusal
    (UnsupportedOperation: device work or torch.distributed outside a rank's thread) ends its rank's program with
    it (engine/context.py note_thread_refusal); the hook still prints it, as threading's does."""
    if isinstance(args.exc_value, UnsupportedOperation) and current_rank() is None:
        note_thread_refusal(args.exc_value)
    return _orig_thread_excepthook(args)


def _swap_tensors(t1, t2):
    """torch.utils.swap_tensors where a simulated tensor is involved. torch's refuses tensors with weak
    references, and simdist keeps one to every simulated tensor (its allocation's views, for storage resize):
    the same swap (classes, attributes, the C++ tensors), with those references moved to the object that now
    holds the simulated tensor."""
    if not isinstance(t1, SimTensor) and not isinstance(t2, SimTensor):
        return _orig_swap_tensors(t1, t2)
    for name, t in (("t1", t1), ("t2", t2)):
        if not _swappable(t):
            raise RuntimeError(f"Expected use_count of {name} to be 1 or 2 with an AccumulateGrad node but got "
                               f"{t._use_count()} make sure you are not holding references to the tensor in other "
                               "places.")
    c1, c2 = t1.__class__, t2.__class__
    t1.__class__, t2.__class__ = c2, c1
    d1, d2 = TENSOR_DICT.__get__(t1), TENSOR_DICT.__get__(t2)  # the whole dicts, simdist's attributes too
    TENSOR_DICT.__set__(t1, d2)
    TENSOR_DICT.__set__(t2, d1)
    torch._C._swap_tensor_impl(t1, t2)
    for t in (t1, t2):
        if isinstance(t, SimTensor):
            t._alloc.views.append(weakref.ref(t))  # (the other object's reference is skipped: not simulated now)
            t._span = None


_TENSOR_DATA = torch._C.TensorBase.data  # torch's own `data` descriptor (set_data)
_SIM_INTERNALS = SIM_INTERNALS


def _tensor_data_get(self):
    return _TENSOR_DATA.__get__(self)


def _tensor_data_set(self, new):
    """`t.data = new` where one side is simulated and the other a host tensor: on a GPU set_data moves t to new's
    device and bytes and keeps the object (its Python class, attributes, version counter, `requires_grad`);
    torch's FSDP2 moves a host-built module's parameters so (_fsdp_init.py _move_states_to_device), and a
    user's `p.data = p.data.cpu()` is the reverse. A host tensor cannot take a simulated tensor's data in
    place (different tensor types: its ops would dispatch to a CUDA kernel the CPU build lacks), so the object
    is swapped with an alias of `new` of its own kind, as Module._apply's swap path does (_module_apply)."""
    if isinstance(new, torch.Tensor) and isinstance(new, SimTensor) != isinstance(self, SimTensor) \
            and current_rank() is not None:
        _set_data_by_swap(self, new)
        return
    _TENSOR_DATA.__set__(self, new)


def _set_data_by_swap(self, new):
    was_sim = isinstance(self, SimTensor)
    attrs = {k: v for k, v in self.__dict__.items() if not (was_sim and k in _SIM_INTERNALS)}
    versions = _versions(self)
    grad = self.grad
    requires_grad = self.requires_grad
    with torch.no_grad():
        alias = new.detach()  # the same bytes, a leaf (set_data takes new's data, not its graph)
    if isinstance(self, torch.nn.Parameter):
        alias = torch.nn.Parameter(alias, requires_grad=requires_grad)
    elif requires_grad:
        alias.requires_grad_(True)
    n = self._use_count()
    if not _swappable(self):
        # the C++ references (an autograd Function's unpacked inputs, a saved tensor) would keep the host tensor
        # while a GPU's set_data moves the one tensor they all hold: a named refusal, never torch's swap error
        raise UnsupportedOperation(
            f"`t.data = new` moving t between the host and a simulated device while C++ holds {n} references to "
            "t (an autograd Function's input or saved tensor): simdist moves a tensor there by swapping it with an "
            "alias (torch.utils.swap_tensors), which those references would not follow. Move t to the device "
            "before that call (`t = t.cuda()`)")
    if grad is not None:
        self.grad = None  # (a grad of the old device cannot sit on the moved tensor; set back below)
    _swap_tensors(self, alias)
    for k, v in attrs.items():
        if k not in self.__dict__:
            self.__dict__[k] = v
    if grad is not None:
        try:
            self.grad = grad
        except RuntimeError as e:  # a grad of the other device: set_data keeps it on a GPU, a swap cannot
            raise UnsupportedOperation(f"`t.data = new` across the host and a simulated device while t has a "
                                       f"gradient on the old device is not modelled by simdist ({e}); set "
                                       "t.grad = None first") from e
    if _versions(self) != versions:
        ts = [t for t in (self, self.grad) if t is not None]
        torch._C._autograd._unsafe_set_version_counter(tuple(ts), tuple(v for v in versions if v is not None))


def _swaps_in_module_apply(t):
    src = getattr(_apply_input, "tensor", None)
    if src is not None and isinstance(src, SimTensor) != isinstance(t, SimTensor):
        return True
    return _orig_is_wrapper_subclass(t)


def _storage_reduce(self):
    """Pickling a CPU storage (a tensor inside an object collective's object, a message between rank processes):
    torch's reduce writes the legacy format, which keys each storage by its memory address, so the pickle's
    length (and with it the object collective's device copies and their cost) would depend on ASLR and the
    allocation history. The zip format keys storages 0, 1, ...: the same object always pickles to the same
    bytes, and unpickles the same way (torch.storage._load_from_bytes reads both formats)."""
    import io
    buf = io.BytesIO()
    torch.save(self, buf)
    return (torch.storage._load_from_bytes, (buf.getvalue(),))


_orig_engine_run_backward = getattr(torch.autograd, "_engine_run_backward", None)


def _engine_run_backward(*args, **kwargs):
    """torch.autograd.backward / grad in a rank thread: the engine runs every node on the calling thread.

    With multithreading on, the engine would run nodes of CUDA tensors on its per-device worker threads,
    which are not simulated ranks; off, it runs them on the rank thread, which is blocked in backward()
    anyway, so ops, hooks and collectives in hooks see their rank as usual (and the run stays
    deterministic). The streams are torch's own choice: each node runs on its forward op's stream, joined by
    the engine's events (simdist/faces/guard_events.py, docs/autograd.md).
    """
    me = current_rank()
    if me is None:
        return _orig_engine_run_backward(*args, **kwargs)
    roots = args[0] if args else kwargs.get("t_outputs", ())
    grads = args[1] if len(args) > 1 else kwargs.get("grad_tensors", ())
    given = [t for group in (roots, grads) for t in ((group,) if isinstance(group, torch.Tensor) else group or ())
             if type(t) is SimTensor]
    prev = torch._C._is_multithreading_enabled()
    torch._C._set_multithreading_enabled(False)
    try:
        with guard_events.in_backward(me, given):
            return _orig_engine_run_backward(*args, **kwargs)
    finally:
        torch._C._set_multithreading_enabled(prev)


_orig_load = torch.load


def _torch_load(f, map_location=None, *args, **kwargs):
    # simulated CUDA tensors are pickled as CPU bytes plus their device (SimTensor.__reduce_ex__): their rebuild
    # needs the map_location that torch.load applies to storages
    prev = getattr(_load_map_location, "value", None)
    prev_devices = getattr(_load_map_location, "devices", None)
    prev_moves = getattr(_load_moves, "value", None)
    _load_map_location.value = map_location
    _load_map_location.devices = {}  # saved storage -> its device buffer, for this load (tensor.py _rebuild_on_device)
    inner = map_location
    if current_rank() is not None and not callable(map_location):
        # torch.load(..., map_location="cuda") of host storages (a checkpoint of CPU tensors, an object a
        # collective sent as bytes: ZeroRedundancyOptimizer's _broadcast_object), or a checkpoint saved on a GPU
        # loaded without map_location (its storages say 'cuda:0'), moves each storage to the
        # device, which a CPU build cannot make: the storages stay on the host and each tensor rebuilt on one is
        # put on the device after (_rebuild_tensor_v2 below), the views of one storage on one device buffer
        _load_moves.value = {}
        inner = _StoragesStayOnHost(map_location, _load_moves.value)
    try:
        return _orig_load(f, inner, *args, **kwargs)
    finally:
        _load_map_location.value = prev
        _load_map_location.devices = prev_devices
        _load_moves.value = prev_moves


_orig_save = torch.save


def _torch_save(obj, *args, **kwargs):
    """torch.save: every simulated tensor viewing one storage is pickled as a view of one host copy of it
    (tensor.py _host_copy), as torch saves each storage once."""
    prev = getattr(_pickling, "copies", None)
    _pickling.copies = {}
    try:
        return _orig_save(obj, *args, **kwargs)
    finally:
        _pickling.copies = prev


_load_moves = threading.local()  # storage data_ptr -> [device, its device buffer]: the torch.load in progress


class _StoragesStayOnHost:
    """A map_location callable: where torch.load would put a storage (the user's map_location applied to the
    storage's saved location), noted; a storage bound for a simulated device stays on the host."""

    def __init__(self, map_location, moves):
        self.map_location, self.moves = map_location, moves

    def __call__(self, storage, location):
        m = self.map_location  # None: where it was saved (a checkpoint written on a GPU says 'cuda:0')
        target = torch.device(location if m is None else m.get(location, location) if isinstance(m, dict) else m)
        if target.type == "cuda":
            # [device, its device buffer (made on first use), the storage: kept alive so its address stays its own]
            self.moves[storage.data_ptr()] = [target, None, storage]
            return storage
        return torch.serialization.default_restore_location(storage, str(target))


_orig_get_restore_location = torch._utils._get_restore_location


def _get_restore_location(device):
    """torch._utils._get_restore_location (where torch.load rebuilds a wrapper subclass: DTensor, via
    _rebuild_wrapper_subclass) refuses a callable map_location, which simdist's torch.load passes for a load in a
    rank (_StoragesStayOnHost): answered with the program's own map_location, as torch.load on a GPU answers it
    (a DTensor state dict's torch.load raised "Callable map_location not supported", notes e11)."""
    m = torch.serialization._serialization_tls.map_location
    if isinstance(m, _StoragesStayOnHost):
        user = m.map_location
        if user is None:
            return device
        return user.get(device, device) if isinstance(user, dict) else user
    return _orig_get_restore_location(device)


_orig_rebuild_tensor_v2 = torch._utils._rebuild_tensor_v2


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
    """torch._utils._rebuild_tensor_v2 (what torch.load calls for every tensor), then, for a storage the load in
    progress keeps on the host for a simulated device, the same view of that storage's bytes on the device."""
    moves = getattr(_load_moves, "value", None)
    t = _orig_rebuild_tensor_v2(storage, storage_offset, size, stride, False if moves else requires_grad,
                                backward_hooks, metadata)
    if not moves:
        return t
    host = storage._untyped_storage if isinstance(storage, torch.storage.TypedStorage) else storage
    entry = moves.get(host.data_ptr()) if isinstance(host, torch.UntypedStorage) else None
    if entry is not None:
        target, flat, _ = entry
        if flat is None:
            entry[1] = flat = torch.empty(0, dtype=torch.uint8).set_(host).to(target)
        t = torch.empty(0, dtype=t.dtype, device=target).set_(flat.untyped_storage(), t.storage_offset(), t.size(),
                                                               t.stride())
    if requires_grad:
        t.requires_grad_(True)
    return t


# files a run saves name torch's function (what a pickle of a tensor refers to), which outside a run is torch's own
_rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"


class _Entries:
    """A dict's items as attributes, so that a patch can replace one entry and put it back."""

    def __init__(self, d):
        object.__setattr__(self, "_d", d)

    def __getattr__(self, name):
        try:
            return self._d[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self._d[name] = value

    def __delattr__(self, name):
        del self._d[name]


class _Member:
    """An item's membership of a list as an attribute, so that a patch adds it in place and takes it out after
    (libraries append to such lists themselves: DTensor adds itself to torch.optim's foreach types at import)."""

    def __init__(self, items, item):
        object.__setattr__(self, "_items", items)
        object.__setattr__(self, "_item", item)

    @property
    def present(self):
        return self._item in self._items

    def __setattr__(self, name, value):
        if name != "present":
            raise AttributeError(name)
        if value and self._item not in self._items:
            self._items.append(self._item)
        elif not value:
            while self._item in self._items:
                self._items.remove(self._item)


def _foreach_types_patches():
    """On a GPU, torch.optim's optimizers and clip_grad_norm_ default to their foreach (multi-tensor) kernels
    for CUDA tensors (torch/optim/optimizer.py `_default_to_fused_or_foreach`, torch/utils/_foreach_utils.py
    `_has_foreach_support`), decided by `type(p) in _foreach_supported_types`: a simulated CUDA tensor is one, so
    the same kernels run, in the same order and with the same temporaries, as on a GPU (not the per-parameter loop)."""
    import torch.optim.optimizer as _optimizer
    import torch.utils._foreach_utils as _foreach_utils
    return [(_Member(_optimizer._foreach_supported_types, SimTensor), "present", True),
            (_Member(_foreach_utils._foreach_supported_types, SimTensor), "present", True)]


def _weights_only_allowed():
    # torch.load(weights_only=True), the default, calls only allow-listed rebuild functions, from a dict built
    # once (functools.lru_cache): built here, before the patch, it holds torch's own function, whose entry the
    # patch replaces by simdist's for the run and puts back after
    from torch import _weights_only_unpickler
    return _Entries(_weights_only_unpickler._get_allowed_globals())


def _patch_list():
    import torch._dynamo.eval_frame as _eval_frame  # torch imports it at a run's first op anyway (_warm_lazy_imports)
    items = cuda_patches()
    items += comm_patches() + parallel_apply_patches() + accelerator_patches()
    items += [
        (torch.Tensor, "to", _tensor_to),
        (torch.Tensor, "cuda", _tensor_cuda),
        (torch.Tensor, "record_stream", _record_stream),
        (torch.Tensor, "pin_memory", _pin_memory),
        (torch, "Generator", SimGenerator),
        (torch.Tensor, "is_pinned", _is_pinned),
        (torch.Tensor, "tolist", _tolist),
        (torch.Tensor, "numpy", _numpy),
        (torch.Tensor, "__array__", _array),
        (torch._tensor_str, "_str", _tensor_str),
        (torch, "load", _torch_load),
        (torch, "save", _torch_save),
        (torch._utils, "_rebuild_tensor_v2", _rebuild_tensor_v2),
        (torch._utils, "_get_restore_location", _get_restore_location),
        (_weights_only_allowed(), "torch._utils._rebuild_tensor_v2", _rebuild_tensor_v2),
        (torch.serialization, "location_tag", location_tag_checked(torch.serialization.location_tag)),
        (_eval_frame, "_callback_from_stance", _compile_eagerly),
        (_eval_frame, "_stance", _eager_stance()),
        (torch.cuda, "CUDAGraph", _RefusedCUDAGraph),
        (torch.cuda, "graph", _cuda_graphs_refused),
        (torch.cuda, "make_graphed_callables", _cuda_graphs_refused),
        (torch.cuda.graphs, "CUDAGraph", _RefusedCUDAGraph),  # `from torch.cuda.graphs import CUDAGraph`
        (torch.cuda.graphs, "graph", _cuda_graphs_refused),
        (torch.cuda.graphs, "make_graphed_callables", _cuda_graphs_refused),
        (torch, "tensor", _factory_from_data(_orig_tensor)),
        (torch, "as_tensor", _factory_from_data(_orig_as_tensor)),
        (os, "environ", RankEnviron(os.environ)),
        (torch, "nonzero", _nonzero),
        (torch, "_has_compatible_shallow_copy_type", _compatible_shallow_copy),
        (torch.nn.Module, "_apply", _module_apply),
        (_nn_module, "is_traceable_wrapper_subclass", _swaps_in_module_apply),
        (torch.utils, "swap_tensors", _swap_tensors),
        (torch.Tensor, "data", property(_tensor_data_get, _tensor_data_set)),
        (torch.storage.TypedStorage, "__reduce__", _storage_reduce),
        (torch.UntypedStorage, "__reduce__", _storage_reduce),
        (threading, "excepthook", _thread_excepthook),
        (torch.autograd.profiler.profile, "__init__", _profile_init),
        (torch.autograd.profiler.emit_nvtx, "__enter__", _emit_nvtx_enter),
        *([(_hop_utils, "_from_fun", _hop_from_fun)] if _orig_hop_from_fun is not None else []),
        (torch.Tensor, "__dlpack__", _tensor_dlpack),
        (torch._C, "_from_dlpack", _from_dlpack),
        (torch._C, "_to_dlpack", _to_dlpack),
        (torch.utils.dlpack, "to_dlpack", _to_dlpack),
        (torch, "to_dlpack", _to_dlpack),
        *([(_flex_hop, "create_fw_bw_graph", _flex_fw_bw_graph)] if _orig_flex_fw_bw_graph is not None else []),
        (torch.autograd.profiler.emit_nvtx, "__exit__", _emit_nvtx_exit),
    ]
    items += c10d_patches()
    items += storage_patches()
    items += sdpa_patches()
    items += _foreach_types_patches()
    if guard.available() and _orig_engine_run_backward is not None:
        items.append((torch.autograd, "_engine_run_backward", _engine_run_backward))
    return items


def _compile_eagerly(callback):
    """torch._dynamo.eval_frame._callback_from_stance during a run: every torch.compile'd function and module runs
    eagerly (torch's own "force_eager" stance: the same work on the same streams; inductor cannot run on simulated
    tensors, it would generate CUDA kernels), whether it was compiled inside the run or before it (a decorator at
    a library's import). torch.compile itself is torch's, so what it returns (an OptimizedModule, whose state_dict
    keys say "_orig_mod.") and the errors it raises are a GPU's. What eager execution cannot stand for is refused
    by name at the first call (notes x10): CUDA graphs (cudagraph trees replay the captured kernels into static
    outputs that the next call overwrites) and a backend that is the program's own callable (eager execution would
    never call it)."""
    if callback not in (False, None):
        from torch._dynamo.backends.registry import _COMPILER_FNS
        from torch._dynamo.eval_frame import innermost_backend
        backend = innermost_backend(callback)
        kind = type(backend).__name__
        if kind in ("_TorchCompileInductorWrapper", "_TorchCompileAOTInductorWrapper"):
            import torch._inductor.config as inductor_config
            options = getattr(backend, "config", {}) or {}
            if options.get("triton.cudagraphs", inductor_config.triton.cudagraphs):
                raise UnsupportedOperation(
                    "torch.compile with CUDA graphs (mode 'reduce-overhead' / 'max-autotune', or the inductor option "
                    "triton.cudagraphs) is not modelled by simdist: cudagraph trees replay the captured kernels into "
                    "static output buffers that the next call overwrites, which eager execution would not show")
        else:
            name = getattr(backend, "compiler_name", None)
            fn = getattr(backend, "compiler_fn", backend)
            if name == "cudagraphs":
                raise UnsupportedOperation("torch.compile(backend='cudagraphs') is not modelled by simdist: CUDA graph "
                                           "replay, which eager execution would not show")
            if not (isinstance(name, str) and name in _COMPILER_FNS and _COMPILER_FNS[name] is fn):
                raise UnsupportedOperation(
                    f"torch.compile with a backend callable ({name or type(fn).__name__}) is not modelled by simdist: "
                    "it runs compiled functions eagerly and would never call the backend")
    return None


def _eager_stance():
    from torch._dynamo.eval_frame import DynamoStance
    return DynamoStance("force_eager")


def _cuda_graphs_refused(*args, **kwargs):
    raise UnsupportedOperation("CUDA graphs (torch.cuda.CUDAGraph / torch.cuda.graph / make_graphed_callables) are "
                               "not modelled by simdist: run the captured region eagerly")


class _RefusedCUDAGraph:
    """torch.cuda.CUDAGraph with a CUDA build's methods (code checks them with hasattr: Megatron-Core's
    graph-safe RNG tracker asserts `register_generator_state`), each refused by name."""

    def __init__(self, *args, **kwargs):
        _cuda_graphs_refused()

    capture_begin = capture_end = instantiate = replay = reset = pool = enable_debug_mode = debug_dump = \
        register_generator_state = raw_cuda_graph = raw_cuda_graph_exec = _cuda_graphs_refused


_orig_profile_init = torch.autograd.profiler.profile.__init__
_profile_warned = []


_hop_utils = importlib.import_module("torch._higher_order_ops.utils")  # (imported by torch itself)

_orig_hop_from_fun = getattr(_hop_utils, "_from_fun", None)  # (torch 2.11 and 2.13 have both; guarded all the same)


def _hop_from_fun(t):
    """torch._higher_order_ops.utils._from_fun during a run: autograd through a control-flow operator
    (torch.cond / while_loop / scan with inputs that require grad) first traces its branches into graphs
    (materialize_as_graph: a fresh tensor like each input, made with every mode disabled, then make_fx), which on
    simulated tensors reached the CPU build's CUDA backend (a raw NotImplementedError). Refused by name; without
    autograd these operators run eagerly (simdist/faces/dispatch.py _higher_order)."""
    if isinstance(t, torch.Tensor) and getattr(t, "device", None) is not None and t.device.type == "cuda":
        raise UnsupportedOperation(
            "autograd through a control-flow higher-order operator (torch.cond, while_loop, scan, map with inputs "
            "that require grad) on simulated CUDA tensors is not modelled by simdist: it traces its branches into "
            "graphs first (materialize_as_graph); the same operators without autograd run eagerly")
    return _orig_hop_from_fun(t)


try:
    _flex_hop = importlib.import_module("torch._higher_order_ops.flex_attention")  # (the package's name is the HOP)
except ImportError:  # (a torch without it)
    _flex_hop = None

_orig_flex_fw_bw_graph = getattr(_flex_hop, "create_fw_bw_graph", None)


def _flex_fw_bw_graph(*args, **kwargs):
    """flex_attention's autograd traces score_mod / mask_mod into forward and backward graphs (make_fx over fresh
    example tensors, with simdist's mode disabled): on simulated tensors that failed with a raw TypeError
    ("Multiple dispatch failed for aten.where.self"). Where it fails it is refused by name; flex_attention without
    autograd, or with the default score_mod, runs eagerly through its dense kernels."""
    try:
        return _orig_flex_fw_bw_graph(*args, **kwargs)
    except (TypeError, NotImplementedError, RuntimeError) as e:
        raise UnsupportedOperation(
            "flex_attention's autograd with this score_mod / mask_mod on simulated CUDA tensors is not modelled by "
            "simdist: it traces them into graphs first (create_fw_bw_graph), which failed with "
            f"{type(e).__name__}: {str(e).splitlines()[0][:160]}") from e


class SimDLPack:
    """What DLPack export of a simulated tensor gives (torch.utils.dlpack.to_dlpack, Tensor.__dlpack__): a capsule
    that torch.from_dlpack turns back into a tensor sharing its memory. Only torch in this process can consume
    it (the bytes live in the simulated device); as a DLPack capsule it can be consumed once."""

    __slots__ = ("tensor", "consumed")

    def __init__(self, tensor):
        self.tensor = tensor
        self.consumed = False

    def __repr__(self):
        return f"<simdist DLPack capsule of a {tuple(self.tensor.shape)} {self.tensor.dtype} tensor on {self.tensor.device}>"


_orig_dlpack = torch.Tensor.__dlpack__
_orig_from_dlpack = torch._C._from_dlpack
_orig_to_dlpack = torch._C._to_dlpack


def _to_dlpack(t):
    from .tensor import SimTensor
    if type(t) is SimTensor:
        if t.requires_grad:  # (torch's message, torch/csrc/utils/tensor_new.cpp)
            raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
        return SimDLPack(t)
    return _orig_to_dlpack(t)


def _tensor_dlpack(self, *, stream=-1, max_version=None, dl_device=None, copy=None):
    """Tensor.__dlpack__ of a simulated tensor (torch/_tensor.py): the consumer's stream must be ordered after the
    producer's current stream; simdist models the exchange on the same stream (what torch.from_dlpack between two
    torch tensors asks for: the current stream), and refuses another stream, or another device, by name."""
    from .tensor import SimTensor
    if type(self) is not SimTensor:
        return _orig_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
    if dl_device is not None and tuple(dl_device) != tuple(self.__dlpack_device__()):
        raise UnsupportedOperation(f"a DLPack export of a simulated tensor to device {tuple(dl_device)} is not "
                                   "modelled by simdist (the same device is)")
    cur = torch.cuda.current_stream(self.device).cuda_stream
    if stream not in (None, -1, cur) and not (stream == 1 and cur == 0):
        raise UnsupportedOperation(f"a DLPack export of a simulated tensor onto another stream ({stream}, the current "
                                   f"one is {cur}) is not modelled by simdist (the current stream is)")
    return _to_dlpack(self.clone() if copy else self)


def _from_dlpack(capsule):
    if isinstance(capsule, SimDLPack):
        if capsule.consumed:
            raise RuntimeError("from_dlpack received an invalid capsule. Note that DLTensor capsules can be consumed "
                               "only once, so you might have already constructed a tensor from it once.")
        capsule.consumed = True
        return capsule.tensor.detach()  # the same memory, no autograd history
    return _orig_from_dlpack(capsule)


_nvtx_warned = []


def _emit_nvtx_enter(self):
    """torch.autograd.profiler.emit_nvtx().__enter__ during a run: as torch's (torch/autograd/profiler.py), it
    synchronizes the device and runs the profiler-start callbacks, but emits no NVTX ranges (one warning): the
    CPU build has no NVTX ("Can't use NVTX profiler - PyTorch was compiled without CUDA", a raw RuntimeError), and
    ranges are annotations for a profiler that a simulated device has none of: they order nothing."""
    if not self.enabled:
        return None
    if self.entered:
        raise RuntimeError("NVTX annotation context manager is not reentrant")
    self.entered = True
    torch.cuda.synchronize()
    if not _nvtx_warned:
        _nvtx_warned.append(True)
        warnings.warn("simdist: emit_nvtx emits no NVTX ranges on simulated devices (no profiler reads them); its "
                      "device synchronizations are kept", stacklevel=2)
    torch.autograd.profiler._run_on_profiler_start()
    return self


def _emit_nvtx_exit(self, exc_type, exc_val, exc_tb):
    if not self.enabled:
        return None
    torch.cuda.synchronize()
    torch.autograd.profiler._run_on_profiler_stop()
    return False


def _profile_init(self, enabled=True, **kwargs):
    """torch.autograd.profiler.profile (under torch.profiler.profile too) with its CUDA activity turned off, as
    torch turns it off where CUDA is not available ("CUDA is not available, disabling CUDA profiling"): simulated
    devices have no CUPTI for kineto to read, and a CPU build's profiler asked for CUDA events raised
    ("Legacy CUDA profiling requires use_cpu=True") or printed a warning per op. The host side is profiled as on a
    GPU; device kernels appear in simdist's own trace (`simdist run --trace`)."""
    if enabled and (kwargs.get("use_device") == "cuda" or kwargs.get("use_cuda")):
        if not _profile_warned:
            _profile_warned.append(True)
            warnings.warn("simdist: the profiler's CUDA activity is off (simulated devices have no CUPTI): host "
                          "events only; device kernels are in simdist's trace (simdist run --trace)", stacklevel=2)
        kwargs["use_device"] = None
        kwargs["use_cuda"] = False
        kwargs["use_cpu"] = True  # (a CUDA-only profile would record nothing at all)
    _orig_profile_init(self, enabled, **kwargs)


_warmed = []


def _warm_lazy_imports():
    """Import what torch imports lazily on the first meta kernel of a reference op (torch._dynamo, through
    torch._compile's disable wrapper) before a run pauses gc: an import inside a run leaves reference cycles
    that hold the frames of the op being dispatched, and with them its output tensors, so the first run in a
    process would free (and reuse) memory later than every other run."""
    if _warmed:
        return
    _warmed.append(True)
    try:
        import torch._dynamo  # noqa: F401
        torch.ops.aten.exp.default(torch.empty(2, device="meta"))
    except Exception:  # noqa: BLE001 - only a warm-up
        pass
    gc.collect()


class Installed:
    """Context manager: patches in, gc paused (collection timing would change allocator reuse)."""

    def __enter__(self):
        global _active
        _warm_lazy_imports()
        with _lock:
            if _active is not None:
                raise SimulationError("simdist.run() cannot be nested or run concurrently in one process")
            saved = []
            try:
                for owner, name, new in _patch_list():
                    old = (owner.__dict__.get(name, _MISSING) if isinstance(owner, type)
                           else getattr(owner, name, _MISSING))
                    saved.append((owner, name, old))
                    setattr(owner, name, new)
                    _as_jit_builtin(new, old)
                self.guard = guard.set_enabled(True) if guard.available() else False
                cuda_keys.install()  # ops a CPU build would decompose before the dispatch mode sees them
                # c10d's registry of groups by name: one per rank thread (as torch's threaded test groups do)
                self.isolation = _set_thread_isolation(True)
            except BaseException:
                cuda_keys.uninstall()
                _restore(saved)
                raise
            _active = saved
        # init_process_group wraps sys.excepthook to prefix tracebacks with "[rank0]:"; inside a rank that is
        # the rank's own process state, not the caller's
        self.excepthook = sys.excepthook
        # so is the environment: a program's `os.environ[K] = V` (rank threads write the real one, where C++
        # getenv sees it) must not outlast the run (corpus c08 set PYTORCH_NO_CUDA_MEMORY_CACHING for every
        # later run of the test process)
        self.environ = dict(os.environ)
        self.gc_was = gc.isenabled()
        gc.disable()
        self.collections = _collections()
        # one intra-op thread: simulated ops are small and OpenMP's fork/join per op costs more than it
        # saves (and spins badly on a loaded machine); restored after the run
        self.threads = torch.get_num_threads()
        torch.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        global _active
        if self.guard:
            _collect_run_garbage(self.collections)
        with _lock:
            _restore(_active or [])
            _active = None
            cuda_keys.uninstall()
            if self.guard:
                guard.set_enabled(False)
            if self.isolation:
                _set_thread_isolation(False)
        sys.excepthook = self.excepthook
        _restore_environ(self.environ)
        if self.gc_was:
            gc.enable()
        torch.set_num_threads(self.threads)
        return False


_MISSING = object()


def _restore_environ(saved):
    env = os.environ
    for k in [k for k in env if k not in saved]:
        del env[k]
    for k, v in saved.items():
        if env.get(k) != v:
            env[k] = v


def _collections():
    return [s["collections"] for s in gc.get_stats()]


def _collect_run_garbage(before):
    """Collect the run's cyclic garbage while the fake CUDA guard is still in (notes b2). C++ objects a run made
    can hold simulated CUDA events: a CUDA ivalue::Future (torch DDP's Reducer keeps one per bucket) destroys its
    events under `c10::OptionalDeviceGuard` (ATen/core/ivalue_inl.h ~Future), which asks the registry for the CUDA
    guard; without it the destructor throws and the process aborts (SIGABRT). A model in a reference cycle
    (transformers' modules are) is freed by the collector, which without this ran after the guard was out: a
    torch DDP script on a transformers model killed its rank process, or the caller's, after a clean run. With the
    collector paused for the run, what the run made is still in generation 0 unless the program collected
    explicitly; then the generations that collection promoted to are collected too (a full collection of a
    process with torch costs ~0.1 s, generation 0 after a run ~0.1 ms)."""
    now = _collections()
    gen = 2 if (now[1] != before[1] or now[2] != before[2]) else 1 if now[0] != before[0] else 0
    gc.collect(gen)


def _set_fake_tensor_cache(on):
    """Turn FakeTensorMode's dispatch cache on or off for the calling thread (torch's config is thread-local);
    returns the previous setting, None where this torch has no such switch."""
    import torch._dynamo.config as config
    was = getattr(config, "fake_tensor_cache_enabled", None)
    if was is not None:
        config.fake_tensor_cache_enabled = on
    return was


def _set_thread_isolation(on):
    fn = getattr(torch._C._distributed_c10d, "_set_thread_isolation_mode", None)
    if fn is None:
        return False
    fn(on)
    return True


def _as_jit_builtin(new, old):
    """A replaced function TorchScript knows as an ATen builtin (torch.tensor, torch.nonzero, torch.load) stays that
    builtin while it is replaced: TorchScript looks functions up by identity, and would otherwise try to compile
    simdist's Python wrapper (`@torch.jit.script` code imported inside a run: torch.distributed.optim's functional
    optimizers fail to import). Script code then calls the ATen op, which the dispatch mode sees as usual."""
    op = _jit_builtins._find_builtin(old) if old is not _MISSING else None
    if op is not None:
        _jit_builtins._register_builtin(new, op)
        _JIT_REGISTERED.append(new)


def _forget_jit_builtins():
    table = _jit_builtins._get_builtin_table()
    while _JIT_REGISTERED:
        table.pop(id(_JIT_REGISTERED.pop()), None)


def _restore(saved):
    _forget_jit_builtins()
    for owner, name, old in reversed(saved):
        if old is _MISSING:
            try:
                delattr(owner, name)
            except AttributeError:
                pass
        else:
            setattr(owner, name, old)


def host_rng_states(prev=None):
    """The process-global host generators' states: torch's default CPU generator, Python's random, numpy's.
    `prev`: the states these were set to (a rank's at its resume); numpy's is then reused if it cannot have
    changed (`_numpy_state`)."""
    np = sys.modules.get("numpy")
    npy = _numpy_state(np, prev[2] if prev is not None else None) if np is not None else None
    return (_cpu_gen.get_state(), random.getstate(), npy)


def set_host_rng_states(states):
    cpu, py, npy = states
    _cpu_gen.set_state(cpu)
    random.setstate(py)
    np = sys.modules.get("numpy")
    if np is not None and npy is not None:
        _set_numpy_state(np, npy)


# numpy's global RandomState, swapped at every rank switch of the thread transport, cost ~115 us a switch in
# get_state / set_state (its 624-word key copied into a new array each way), most of a switch for programs that
# never draw from numpy. Its MT19937 bit generator's state (uint32 key[624]; int pos: numpy/random/src/mt19937)
# is read raw instead (2,500 bytes, 0.6 us): a state equal in those bytes is the same state, unless a cached
# Gaussian is pending (RandomState's has_gauss, which a legacy normal draw clears without drawing), so the full
# state is taken only when the bytes differ or a Gaussian is cached, and set as bytes unless one is cached. A numpy state here: (raw | None, get_state()).
_MT_STATE_BYTES = 624 * 4 + 4
_numpy_last = [None]  # the numpy state last read or set: (raw, has_gauss) then; raw alone does not show has_gauss


def _numpy_raw(np):
    try:
        bg = np.random.mtrand._rand._bit_generator
        if type(bg).__name__ != "MT19937":
            return None
        return ctypes.string_at(bg.ctypes.state_address, _MT_STATE_BYTES)
    except (AttributeError, TypeError, ValueError):  # (another numpy layout: always the full state)
        return None


def _unchanged_since(raw, last):
    """Is the global state still `last`: the same bytes, and no cached Gaussian then (none can appear without
    drawing, which changes the bytes)."""
    return raw is not None and last is not None and last[0] == raw and not last[1]


def _numpy_state(np, prev):
    raw = _numpy_raw(np)
    if prev is not None and prev[0] == raw and _unchanged_since(raw, _numpy_last[0]) and not prev[1][3]:
        return prev
    state = (raw, np.random.get_state())
    _numpy_last[0] = (raw, state[1][3])
    return state


def _set_numpy_state(np, state):
    raw = _numpy_raw(np)
    if state[0] is not None and _unchanged_since(raw, _numpy_last[0]) and not state[1][3]:
        # no Gaussian cached now or in the state: the bytes are the whole state (what MT19937's state setter
        # writes: the key and pos)
        if state[0] != raw:
            ctypes.memmove(np.random.mtrand._rand._bit_generator.ctypes.state_address, state[0], _MT_STATE_BYTES)
        _numpy_last[0] = (state[0], False)
        return
    np.random.set_state(state[1])
    _numpy_last[0] = (state[0], state[1][3])


# Module globals of torch that a torchrun process has of its own and rank threads of one process would share:
# (module, attribute, the value a fresh process has). DTensor keeps its RNG tracker in one, made by the first
# random op or distribute_tensor on a mesh (torch/distributed/tensor/_api.py, _dispatch.py: `if not
# random._rng_tracker: random._rng_tracker = OffsetBasedRNGTracker(mesh)`, which broadcasts the seed over the
# mesh): shared, rank 0 drew with rank 1's tracker and device, and a later run in the process skipped the
# broadcast (notes L19: o01's first run gave another digest than the next).
_PROCESS_GLOBALS = (("torch.distributed.tensor._random", "_rng_tracker", lambda: None),)


def process_globals():
    """The values of _PROCESS_GLOBALS now, for the modules imported (a module imported later starts fresh)."""
    out = {}
    for mod, name, _ in _PROCESS_GLOBALS:
        m = sys.modules.get(mod)
        if m is not None:
            out[mod, name] = getattr(m, name)
    return out


def set_process_globals(values):
    """Set _PROCESS_GLOBALS to `values` (process_globals()'s); one not in it gets a fresh process's value."""
    for mod, name, fresh in _PROCESS_GLOBALS:
        m = sys.modules.get(mod)
        if m is not None:
            setattr(m, name, values[mod, name] if (mod, name) in values else fresh())


def seed_host_rngs(rank):
    """A fresh torchrun process's host generators, each seeded otherwise on every rank (world.process_seed)."""
    seed = process_seed(rank)
    _cpu_gen.manual_seed(seed)
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed & 0xFFFFFFFF)


class TorchRankHooks:
    """What each torchrun process has of its own and rank threads of one process share (simdist/ranks/):
    the host random generators (torch's CPU generator, Python's random, numpy's: each process seeds them
    otherwise, world.process_seed), torch's module globals of _PROCESS_GLOBALS, grad mode, the dispatch mode,
    sys.argv (a script may consume its arguments: argparse-free launchers do `sys.argv = sys.argv[2:]`), and
    sys.modules["__main__"] (a script's own module: what pickle finds its classes in)."""

    def __init__(self):
        self.argv = list(sys.argv)
        self.main = sys.modules.get("__main__")

    def enter(self, me):
        sys.argv = list(self.argv)
        if self.main is not None:
            sys.modules["__main__"] = self.main  # (a script's rank makes its own: simdist/session.py script_main)
        seed_host_rngs(me.rank)  # a fresh process's host generators
        set_process_globals({})  # and its torch module globals
        # Autograd on CUDA-typed tensors aborts a CPU build of torch unless simdist's fake CUDA device guard is
        # loaded (simdist/faces/guard.py); with it, grad mode is on as in any fresh thread, without it off.
        torch.set_grad_enabled(guard.available())
        if guard.available():
            torch._C._set_multithreading_enabled(False)  # see _engine_run_backward
        # The kernels run on this thread with one intra-op thread, as Installed sets for the run. OpenMP keeps the
        # count per thread (omp_set_num_threads sets the calling thread's ICV) and a new thread starts from
        # OpenMP's default, the machine's core count: oneDNN's kernels (convolution backward) then split their
        # reductions over every core, and their values depended on the machine the run was on.
        torch.set_num_threads(1)
        guard.set_device(me.current_device)
        guard.streams_changed()  # (a thread may have served another rank before: the guard's cached streams are not ours)
        # FakeTensorMode's dispatch cache is one per process and keys a factory by its arguments as written
        # (device="cuda"), so rank threads would share rank 1's cuda:1 output (DTensor's sharding propagation
        # makes fakes exactly so); torchrun processes each have their own cache
        self_cache = _set_fake_tensor_cache(False)
        me.face = RankMode(me)
        me.face.fake_cache = self_cache
        me.face.c10d = RankC10d()
        me.face.__enter__()

    def leave(self, me):
        if me.face is not None:
            if me.face.fake_cache is not None:
                _set_fake_tensor_cache(me.face.fake_cache)
            me.face.__exit__(None, None, None)
            me.face = None

    def suspend(self, me):
        me.face.cpu_rng_state = host_rng_states(me.face.cpu_rng_state)
        me.face.globals = process_globals()
        me.face.argv = sys.argv
        me.face.main_module = sys.modules.get("__main__")

    def resume(self, me):
        set_host_rng_states(me.face.cpu_rng_state)
        set_process_globals(me.face.globals)
        sys.argv = me.face.argv
        if me.face.main_module is not None:
            sys.modules["__main__"] = me.face.main_module
