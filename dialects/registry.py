"""The dg op registry: one entry per op, every facet side by side.

An `OpDef` is one op's whole definition: its signature (operand count,
attribute names and kinds, result count), its shape/type rule (on
`TensorType`s), its NumPy implementation (run by the interpreter), its
vector-Jacobian product (`vjp`, dg IR builders the autodiff pass calls), its
Jacobian-vector product (`jvp`, for forward mode), its batching rule
(`batch`, what the batch pass writes for it mapped over examples), its
lowering (`lower`, linalg-level IR the compiled backends take) and the
lowerings of targets that differ (`lower_for`), and a description with an IR
example. The ops_*.py files define them, an op's facets in one block, and
the IRDL definition of the `dg` dialect is generated from this table
(`dialects.dialect`).

Operands are tensors (or `index`/`i1` for the few conversion ops). Every
op's operands share one element type unless its rule says otherwise: the
emitter inserts explicit casts, so the NumPy implementations never promote.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass
class OpDef:
    name: str
    infer: Callable  # (in_types: list[TensorType], **attrs) -> TensorType | list[TensorType]
    impl: Callable  # (*np_arrays, **attrs) -> array | tuple of arrays
    doc: str  # what it computes, then an example of it in IR (generic form)
    nargs: Optional[int] = 1  # None: `nfixed` operands, then a variadic tail of one type
    nfixed: int = 1
    attrs: dict = field(default_factory=dict)  # name -> kind (core.attrs)
    nresults: Optional[int] = 1  # None: variadic (tuple-returning)
    pure: bool = True
    builtin: bool = False  # dg programs call it as a one-argument built-in of its name (`exp(x)`)
    # (g: dialects.rules.RuleBuilder, op: the forward op's OpView, d: the result's adjoint, or a
    # list of them) -> one adjoint per operand (None: nothing flows to it)
    vjp: Optional[Callable] = None
    jvp: Optional[Callable] = None  # forward mode's rule, in the same form
    # (g: dialects.batch_rules.BatchBuilder, op: OpView, batched: a flag per operand) -> its results
    # mapped over a batch (dialects/batch_rules.py; None: a loop over the examples, `per_example`)
    batch: Optional[Callable] = None
    lower: Optional[Callable] = None  # (b: dialects.builder.Builder, op: LowerOp) -> result names
    lower_for: dict = field(default_factory=dict)  # target ("cuda") -> its lowering, where it differs
    # Sizes NumPy would broadcast that the types do not declare 1 must agree at run time, in both
    # modes: (operand types, result type) -> (groups of (operand, axis) of one size, message).
    agree: Optional[Callable] = None
    # For registry tests: a function(rng) -> (list of arrays, attrs).
    sample: Optional[Callable] = None


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op dg.{op.name} registered twice")
    OPS[op.name] = op
    return op


def example(name: str, ins: str, out: str, attrs: str = "") -> str:
    """The IR example of an op of a family: `%y = "dg.NAME"(%a, ...) {attrs} : (INS) -> OUT`."""
    args = ", ".join(f"%{chr(97 + i)}" for i in range(len(ins.split(", ")))) if ins else ""
    return f'%y = "dg.{name}"({args}){" {" + attrs + "}" if attrs else ""} : ({ins}) -> {out}'
