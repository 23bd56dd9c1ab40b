"""Instrumenting passes for debugging: numerics checks and shadow taps.

Expects: a module at the `grad` stage (dg ops, gradients made). Guarantees:
- `check_numerics`: after each dg op that makes floats, a `dg.check_finite` of each float
  result (its uses then take the checked value): the first op that makes a NaN or an infinity
  raises at its `.dg` place, in both modes; an op of a gradient says so ("in the gradient of
  this line", its place being the forward op's).
- `shadow_taps`: after each dg op that makes tensors, a `dg.tap` of each result, numbered in
  the table the module's `dg.taps` attribute holds ([place, op name, in a gradient] per tap):
  shadow mode compares what the interpreter and compiled code show at each.
Constants and the effects and bookkeeping ops (print, assert, tapes) are left alone. Normal
runs never see these ops: the runtime applies the passes only when asked.
"""
from __future__ import annotations

from dg.core.attrs import set_table
from dg.core.locations import in_gradient, loc_of, loc_row
from dg.core.mlir import ir, operations_under
from dg.core.types import is_float, parse_mlir_type

_LEFT_ALONE = ("dg.constant", "dg.tap", "dg.check_finite", "dg.print", "dg.breakpoint", "dg.assert", "dg.check")


def _instrumented(m):
    """The module's dg ops that make values worth watching, with their tensor results."""
    for op in list(operations_under(m.body)):
        if op.name.startswith("dg.") and op.name not in _LEFT_ALONE and not op.name.startswith("dg.tape_"):
            results = [r for r in op.results if isinstance(r.type, ir.RankedTensorType)]
            if results:
                yield op, results


def _after(op, name: str, value, attributes: dict) -> None:
    """`name`(value) right after `op`, taking the place of `value` in every later use."""
    with ir.InsertionPoint(op):
        new = ir.Operation.create(name, results=[value.type], operands=[value], attributes=attributes,
                                  loc=op.location)
    new.move_after(op)
    value.replace_all_uses_except(new.results[0], new)


def check_numerics(m) -> None:
    with m.context:
        for op, results in _instrumented(m):
            what = op.name[3:]
            msg = (f"in the gradient of this line, {what} made {{0}} (check_numerics)" if in_gradient(op.location)
                   else f"{what} made {{0}} (check_numerics)")
            for r in results:
                if is_float(parse_mlir_type(str(r.type)).dtype):
                    _after(op, "dg.check_finite", r, {"msg": ir.StringAttr.get(msg)})


def shadow_taps(m) -> None:
    with m.context:
        taps = []
        i64 = ir.IntegerType.get_signless(64)
        for op, results in _instrumented(m):
            for r in results:
                _after(op, "dg.tap", r, {"id": ir.IntegerAttr.get(i64, len(taps))})
                taps.append([loc_row(loc_of(op.location)), op.name[3:], in_gradient(op.location)])
        set_table(m, "dg.taps", taps)
