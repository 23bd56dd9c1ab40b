"""The dg op registry: one entry per op, every facet side by side.

An `OpDef` holds an op's signature (operand count, attribute names and
kinds, result count), its shape/type rule (on `TensorType`s), its NumPy
implementation (run by the interpreter), and slots for its vector-Jacobian
product (`vjp`, dg IR builders used by the autodiff pass) and its lowering
(`lower`, used by the compiled backends). The IRDL definition of the `dg`
dialect is generated from this table (`dialects.dialect`).

Operands are tensors (or `index`/`i1` for the few conversion ops). Every
op's operands share one element type unless its rule says otherwise: the
emitter inserts explicit casts, so the NumPy implementations never promote.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

# Attribute kinds (`attrs`: name -> kind) are those of core.attrs.


@dataclass
class OpDef:
    name: str
    infer: Callable  # (in_types: list[TensorType], **attrs) -> TensorType | list[TensorType]
    impl: Callable  # (*np_arrays, **attrs) -> array | tuple of arrays
    nargs: Optional[int] = 1  # None: `nfixed` operands, then a variadic tail of one type
    nfixed: int = 1
    attrs: dict = field(default_factory=dict)  # name -> kind
    defaults: dict = field(default_factory=dict)
    nresults: Optional[int] = 1  # None: variadic (tuple-returning)
    pure: bool = True
    doc: str = ""
    vjp: Optional[Callable] = None
    lower: Optional[Callable] = None
    # Sizes NumPy would broadcast that the types do not declare 1 must agree at run time, in both
    # modes: (operand types, result type) -> (groups of (operand, axis) of one size, message).
    agree: Optional[Callable] = None
    # Extra per-target lowering overrides, e.g. {"cuda": fn}.
    lower_for: dict = field(default_factory=dict)
    # For registry tests: a function(rng) -> (list of arrays, attrs) or None.
    sample: Optional[Callable] = None

    @property
    def mlir_name(self) -> str:
        return f"dg.{self.name}"


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op dg.{op.name} registered twice")
    OPS[op.name] = op
    return op


def op(name: str, **kw):
    """Decorator form: the decorated function is the NumPy implementation."""

    def deco(impl):
        register(OpDef(name=name, impl=impl, **kw))
        return impl

    return deco


def get(name: str) -> OpDef:
    return OPS[name]
