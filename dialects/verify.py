"""dg IR checked against the registry: the `verify` pass.

Expects: a module MLIR parsed and verified (IRDL has checked each dg op's
operand, attribute and result counts). Guarantees: every dg op's operand
types satisfy its registry rule, its attributes have their kinds, and its
result types are the rule's (or less static: a `?` where the rule knows a
size); otherwise a `DgTypeError` at the op's location, all of them
together. IR written by hand (`dg opt`, lit tests) so fails at the op that
is wrong, not later in a pass that trusted it.
"""
from __future__ import annotations

from dg.core.attrs import attr_value
from dg.core.errors import DgErrors, DgTypeError, Loc
from dg.core.locations import loc_of
from dg.core.mlir import operations_under
from dg.core.types import ShapeError, parse_mlir_type

from .registry import OPS


def verify_module(module, source: str | None = None) -> None:
    """Check every dg op (see the module's doc); `source` names the file the IR came from, for
    the locations MLIR's parser gave (file "-")."""
    errors = DgErrors()
    for op in operations_under(module.body):
        if op.name.startswith("dg."):
            problem = _problem(op)
            if problem:
                where = loc_of(op.location)
                if where is not None and where.file == "-" and source:
                    where = Loc(source, where.line, where.col)
                errors.add(DgTypeError(f"{op.name}: {problem}", where))
    errors.raise_if_any()


def _problem(op) -> str | None:
    opdef = OPS[op.name[3:]]
    try:
        types = [parse_mlir_type(str(v.type)) for v in op.operands]
        declared = [parse_mlir_type(str(r.type)) for r in op.results]
        attrs = {}
        for name, kind in opdef.attrs.items():
            if name in op.attributes:
                try:
                    attrs[name] = attr_value(kind, op.attributes[name])
                except (ValueError, TypeError, KeyError):
                    return f"the attribute '{name}' must be of kind {kind}, not {op.attributes[name]}"
        try:
            inferred = opdef.infer(types, **attrs)
        except ShapeError as first:
            # dg's random keys (u64) are i64 in MLIR, which has no unsigned type that arith takes.
            try:
                inferred = opdef.infer([t.with_dtype("u64") if t.dtype == "i64" else t for t in types], **attrs)
            except ShapeError:
                raise first from None
    except ShapeError as e:
        return str(e)
    inferred = inferred if isinstance(inferred, list) else [inferred]
    if len(inferred) != len(declared) or not all(_fits(d, t) for d, t in zip(declared, inferred)):
        shown = ", ".join(t.mlir() for t in inferred)
        return f"its operands give ({shown}), not ({', '.join(d.mlir() for d in declared)})"
    return None


def _fits(declared, inferred) -> bool:
    """Whether a declared result type is the inferred one, or that type with sizes left open."""
    if declared.element != inferred.element or declared.rank != inferred.rank:
        return False
    return all(not isinstance(d, int) or (isinstance(i, int) and d == i) for d, i in zip(declared.shape, inferred.shape))
