"""The op rules: one registered function per aten op whose simulation the generic paths of
simdist/faces/dispatch.py (view, in-place, functional, host-reading) do not give right, in the spirit of
FakeTensor's `register_op_impl`. Registering an op twice is refused: an op is simulated in exactly one place.

A rule is called as rule(rank, func, args, kwargs) inside a simulated rank and returns what the op returns.
The rules live in simdist/faces/rules/ (copies, factories, metadata-only ops, refusals).
"""
from __future__ import annotations

RULES: dict = {}
NAMESPACE_RULES: dict = {}  # "c10d" -> rule for every op of that namespace without a rule of its own
OUT_RULE = None  # the rule of every op with `out=` arguments and no rule of its own (rules/outs.py)
SPEC_FIXES: dict = {}  # op -> fix(args, kwargs, specs) of the output specs its meta kernel gives (rules/meta_fixes.py)
CALL_CHECKS: dict = {}  # op -> check(func, args, kwargs) a CUDA kernel's host code makes at the call (rules/deterministic.py)


def register(*ops):
    def deco(fn):
        for op in ops:
            if op in RULES:
                raise ValueError(f"an op rule for {op} is already registered ({RULES[op].__module__}."
                                 f"{RULES[op].__qualname__}); one op, one rule")
            RULES[op] = fn
        return fn
    return deco


def register_namespace(namespace):
    def deco(fn):
        if namespace in NAMESPACE_RULES:
            raise ValueError(f"a rule for the op namespace {namespace} is already registered")
        NAMESPACE_RULES[namespace] = fn
        return fn
    return deco


def rule_for(op):
    r = RULES.get(op)
    if r is None and NAMESPACE_RULES:
        r = NAMESPACE_RULES.get(op._schema.name.split("::")[0])
    return r


def set_out_rule(fn):
    global OUT_RULE
    if OUT_RULE is not None:
        raise ValueError("the rule of out= ops is already registered")
    OUT_RULE = fn


def out_rule_for(op):
    """The out= rule for an op that writes keyword-only arguments (add.out, sort.values...), else None. Read once
    per op (simdist/faces/op_info.py)."""
    if OUT_RULE is None:
        return None
    for a in op._schema.arguments:
        if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write:
            return OUT_RULE
    return None


def register_spec_fix(*ops):
    """A correction of the output specs (shape, stride, dtype) an op's meta kernel gives, applied where simdist
    reads them (dispatch.py _out_specs, once per signature): for meta kernels that disagree with the CPU and CUDA
    kernels."""
    def deco(fn):
        for op in ops:
            if op in SPEC_FIXES:
                raise ValueError(f"a spec fix for {op} is already registered")
            SPEC_FIXES[op] = fn
        return fn
    return deco


def register_call_check(*ops):
    """A check a CUDA kernel's host code makes at the call, before the op is simulated whatever its rule or path
    (dispatch.py dispatch): it raises or warns as the GPU does (deterministic-mode alerts). Such ops never take the
    fast path."""
    def deco(fn):
        for op in ops:
            if op in CALL_CHECKS:
                raise ValueError(f"a call check for {op} is already registered")
            CALL_CHECKS[op] = fn
        return fn
    return deco
