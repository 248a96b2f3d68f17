"""The op rules: one registered function per aten op whose simulation the generic paths of
simdist/faces/dispatch.py (view, in-place, functional, host-reading) do not give right, in the spirit of
FakeTensor's `register_op_impl`. Registering an op twice is refused: an op is simulated in exactly one place.

A rule is called as rule(rank, func, args, kwargs) inside a simulated rank and returns what the op returns.
The rules live in simdist/faces/rules/ (copies, factories, metadata-only ops, refusals).
"""
from __future__ import annotations

RULES: dict = {}
NAMESPACE_RULES: dict = {}  # "c10d" -> rule for every op of that namespace without a rule of its own


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
