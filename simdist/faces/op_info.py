"""What an aten op does to its arguments, read once from its schema and cached: a view, an in-place op (which
arguments it writes), a functional op (and its `.out` overload, when running into a preallocated output computes
the same), or one that returns host values; whether it draws random numbers; its op rule, if one is registered
(simdist/faces/op_rules.py)."""
from __future__ import annotations

import torch

from .op_rules import CALL_CHECKS, out_rule_for, rule_for

_TensorType = torch._C.TensorType

VIEW, INPLACE, FUNCTIONAL, SCALAR = "view", "inplace", "functional", "scalar"


class OpInfo:
    """How the dispatch mode treats one op overload (simdist/faces/dispatch.py)."""

    __slots__ = ("kind", "mutable_pos", "mutable_names", "ret_alias", "has_generator", "name", "out_variant",
                 "rule", "random", "func", "out_op", "reads_data", "python_kernel", "device_check", "implicit")

    def __init__(self):
        self.rule = None
        self.python_kernel = None
        self.implicit = False
        self.out_variant = None
        self.out_op = None
        self.func = None


_INFO: dict = {}


def _is_tensorish(t):
    if isinstance(t, _TensorType):
        return True
    el = getattr(t, "getElementType", None)
    if el is not None:
        return _is_tensorish(el())
    return False


def _classify(func):
    info = OpInfo()
    schema = func._schema
    info.name = func.__name__ if hasattr(func, "__name__") else str(func)
    info.name = str(func).replace("aten.", "").replace(".default", "")
    args = schema.arguments
    info.mutable_pos = tuple(i for i, a in enumerate(args) if a.alias_info is not None and a.alias_info.is_write)
    info.mutable_names = tuple(args[i].name for i in info.mutable_pos)
    info.has_generator = any(a.name == "generator" for a in args)
    # random: this overload or a sibling takes a generator (randn.default has none, randn.generator has one)
    info.random = (info.has_generator or schema.name in ("aten::native_dropout", "aten::rrelu_with_noise")
                   or _packet_is_random(func))
    rets = schema.returns
    ret_alias = []
    for r in rets:
        ai = r.alias_info
        if ai is None:
            ret_alias.append(None)
            continue
        sets = set(ai.before_set)
        pos = next((i for i in info.mutable_pos if set(args[i].alias_info.before_set) & sets), None)
        ret_alias.append(pos)
    info.ret_alias = tuple(ret_alias)
    if info.mutable_pos:
        info.kind = INPLACE
    elif any(r.alias_info is not None for r in rets) or schema.name == "aten::_unsafe_view":
        info.kind = VIEW
    elif rets and all(_is_tensorish(r.type) for r in rets):
        info.kind = FUNCTIONAL
        # Only core ATen ops (structured kernels) have .out overloads that compute exactly what the functional
        # computes into the given tensor; a composite's (mse_loss.out) may resize `out` on the way, which on a
        # view of a simulated segment would write past the block. Those run functionally and copy.
        core = getattr(torch.Tag, "core", None)
        if core is not None and core in func.tags:
            info.out_variant = _find_out_variant(func)
        if info.out_variant is not None:
            info.out_op = info.out_variant._op  # the C callable under OpOverload.__call__
    else:
        info.kind = SCALAR
    base = schema.name.split("::")[-1]
    info.reads_data = not (base.endswith("_like") or base in ("new_zeros", "new_ones", "new_full", "new_empty",
                                                             "new_empty_strided"))  # metadata only
    info.device_check = _device_checked(func)
    info.rule = rule_for(func)
    if info.rule is None and info.kind == INPLACE:
        info.rule = out_rule_for(func)
    if info.rule is None:
        info.python_kernel = _python_kernel_keyset(func)
        info.implicit = _composite_implicit(func)
    return info


def _composite_implicit(func):
    """Whether the op is CompositeImplicitAutograd (aten.to.dtype, contiguous, reshape, linear, ...). Outside
    inference mode the Autograd key decomposes it before it reaches the dispatch mode; under
    torch.inference_mode() the Autograd keys are excluded and the op itself reaches simdist (dispatch.py dispatch
    decomposes the ones whose result may alias their input, as FakeTensorMode decomposes such ops)."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")
    except Exception:  # noqa: BLE001 - an op torch cannot look up (it then runs as before)
        return False


# --- device checks ---------------------------------------------------------------------------------------------
# The generated CUDA wrapper of an aten op checks that every tensor argument is on the op's device
# (torchgen's device_check, c10 check_and_update_common_device: "Expected all tensors to be on the same device, but
# got min is on cpu, different from other tensors on cuda:0"), a 0-dim CPU tensor included, unless the op is
# declared `device_check: NoCheck` in native_functions.yaml: TensorIterator's elementwise ops, which take 0-dim
# CPU tensors as scalars. Measured on an H200 (torch 2.11): clamp(x, min=cpu_scalar), isin, stack, index_select,
# searchsorted, bucketize, nextafter refuse a 0-dim CPU tensor; maximum, where, lerp's weight,
# masked_fill's value, fill_, addcmul, pow, the _foreach ops take one.
_NO_CHECK = None


def _no_check_ops():
    global _NO_CHECK
    if _NO_CHECK is None:
        names = set()
        try:
            import os

            import torchgen
            path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native",
                                "native_functions.yaml")
            cur = None
            with open(path) as f:
                for line in f:
                    if line.startswith("- func:"):
                        cur = line[7:].strip().split("(")[0]
                    elif cur is not None and line.strip().startswith("device_check: NoCheck"):
                        names.add(cur)
        except Exception:  # noqa: BLE001 - no torchgen: no op is known to check (0-dim CPU tensors pass, as before)
            names = None
        _NO_CHECK = names
    return _NO_CHECK


def _device_checked(func):
    """Whether the op's CUDA wrapper refuses a 0-dim CPU tensor argument (see above)."""
    names = _no_check_ops()
    if names is None or func.namespace != "aten":
        return False
    name = func._schema.name.split("::")[-1]
    ov = func._overloadname
    return (name if ov in ("", "default") else f"{name}.{ov}") not in names


# The dispatch keys whose kernel, when written in Python, is what the op does on a CUDA tensor
_PYTHON_KERNEL_KEYS = ("CUDA", "CompositeExplicitAutograd", "CompositeImplicitAutograd")


def _python_kernel_keyset(func):
    """For an op registered from Python (torch.library: FSDP's fsdp::* ops, custom_op), the key set of its kernel
    for CUDA tensors: running that kernel on simulated tensors simulates every op it issues. None for ops with
    C++ kernels (aten's), which simdist models itself."""
    ns = func.namespace
    if ns in ("aten", "prims", "c10d", "_c10d_functional", "_c10d_functional_autograd", "_dtensor"):
        return None
    try:
        dump = torch._C._dispatch_dump(func._schema.name + (f".{func._overloadname}" if func._overloadname not in (
            "", "default") else ""))
    except Exception:  # noqa: BLE001
        return None
    for key in _PYTHON_KERNEL_KEYS:
        for line in dump.splitlines():
            if line.startswith((key + ":", key + "[alias]:")) and ".py:" in line:
                return torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))
    return None


def _packet_is_random(func):
    packet = getattr(func, "_overloadpacket", None)
    if packet is None:
        return False
    for name in packet.overloads():
        try:
            if any(a.name == "generator" for a in getattr(packet, name)._schema.arguments):
                return True
        except Exception:  # noqa: BLE001 - an overload torch cannot resolve here
            continue
    return False


def _find_out_variant(func):
    """The `.out` overload taking exactly the functional's arguments plus `out` (single output only)."""
    schema = func._schema
    if len(schema.returns) != 1:
        return None
    names = [(a.name, str(a.type)) for a in schema.arguments]
    packet = func._overloadpacket
    for ov_name in packet.overloads():
        ov = getattr(packet, ov_name)
        s = ov._schema
        outs = [a for a in s.arguments if a.alias_info is not None and a.alias_info.is_write]
        if len(outs) != 1 or outs[0].name != "out":
            continue
        if [(a.name, str(a.type)) for a in s.arguments if a.name != "out"] == names:
            return ov
    return None


# id(op) -> OpInfo for functional ops with an .out overload and no randomness: _fast_functional may take them.
# Keyed by id: OpOverload.__hash__ is a Python method. The OpInfo holds the op, so the id stays unique.
_FAST_OPS: dict = {}


def op_info(func):
    i = _INFO.get(func)
    if i is None:
        i = _INFO[func] = _classify(func)
        if (i.kind == FUNCTIONAL and i.out_variant is not None and not i.random and i.rule is None
                and i.reads_data and func not in CALL_CHECKS):
            i.func = func
            _FAST_OPS[id(func)] = i
    return i
