"""Instrumenting passes for debugging: numerics checks and shadow taps.

Expects: a module at the `grad` stage (dg ops, gradients made). Guarantees:
- `check_numerics`: after each dg op that makes floats, a `dg.check_finite` of each float
  result (its uses then take the checked value): the first op that makes a NaN or an infinity
  raises at its `.dg` place, in both modes; an op of a gradient says so ("in the gradient of
  this line", its place being the forward op's).
- `shadow_taps`: after each dg op that makes tensors, a `dg.tap` of each result, numbered in
  the table the module's `dg.taps` attribute holds ([place, op name, in a gradient] per tap):
  shadow mode compares what the interpreter and compiled code show at each.
- `residual_taps`: taps on what the gradient functions keep for their reverse sweeps (values and
  tapes) and on loop bodies, whose table `dg.saved_residuals` reads after an interpreter run.
Constants and the effects and bookkeeping ops (print, assert, tapes) are left alone. Normal
runs never see these ops: the runtime applies the passes only when asked.
"""
from __future__ import annotations

from dg.core.attrs import set_table
from dg.core.locations import in_gradient, loc_of, loc_row
from dg.core.mlir import ir, operations_under
from dg.core.types import is_float, parse_mlir_type

from .ad.checkpoint import CHUNKED_BODY

_LEFT_ALONE = ("dg.constant", "dg.tap", "dg.check_finite", "dg.print", "dg.breakpoint", "dg.assert", "dg.check")


def _watched(op) -> list:
    """The tensor results of a dg op that makes values worth watching ([] for the others:
    constants, effects, the instruments themselves and the tapes, the gradients' bookkeeping)."""
    if not op.name.startswith("dg.") or op.name in _LEFT_ALONE or op.name.startswith("dg.tape_"):
        return []
    return [r for r in op.results if isinstance(r.type, ir.RankedTensorType)]


def _instrumented(m):
    """The module's dg ops that make values worth watching, with their tensor results."""
    for op in list(operations_under(m.body)):
        results = _watched(op)
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


def _body_block(loop):
    """The block holding a forward loop's body: a `while` loop's after its condition, or in a
    chunked loop (lowering/ad/checkpoint.py), the branch its mark names."""
    for op in operations_under(loop.regions[-1].blocks[0]):
        if CHUNKED_BODY in op.attributes:
            return op.regions[0].blocks[0]
    return loop.regions[-1].blocks[0]


def _first_made(block):
    """The first dg op of a block that makes a value worth watching."""
    for op in block.operations:
        op = op.operation
        if _watched(op):
            return op
    return None


def residual_taps(m) -> list:
    """Taps for `dg.saved_residuals`, in each gradient function (`*__vjp_*`): one on each value of
    the forward sweep that the reverse sweep reads, one on each tape (`dg.tape_alloc`), and one on
    every copy of each loop body's first op, to count the iterations the forward sweep runs (its
    first copy of the loop) and those the gradient runs again. Returns the taps' table:
    [place, kind ("value", "tape", "snapshots", "step"), op, flag]: for a tape, whether it is made
    inside the reverse sweep's loops (one at a time); for a step, whether it is the forward's."""
    rows = []
    with m.context:
        i64 = ir.IntegerType.get_signless(64)

        def tap(op, value, row):
            _after(op, "dg.tap", value, {"id": ir.IntegerAttr.get(i64, len(rows))})
            rows.append(row)

        for fn in list(m.body.operations):
            fn = fn.operation
            if fn.name != "func.func" or "__vjp_" not in fn.attributes["sym_name"].value or not fn.regions[0].blocks:
                continue
            body = fn.regions[0].blocks[0]
            top = [op.operation for op in body.operations]
            start = next((i for i, op in enumerate(top) if in_gradient(op.location)), len(top))
            reverse_ops = set(top[start:])
            steps, firsts, places = {}, set(), set()  # a loop body's first op (name, location) -> the loop's place
            for op in list(operations_under(body)):  # the first loop of each place: the forward's own
                place = loc_row(loc_of(op.location))
                if op.name in ("scf.for", "scf.while") and not in_gradient(op.location) and str(place) not in places:
                    places.add(str(place))
                    first = _first_made(_body_block(op))
                    if first is not None:
                        steps[(first.name, str(first.location))] = place
                        firsts.add(first)
            for op in top[:start]:
                for r in _watched(op):
                    if any(_top_level(u.owner) in reverse_ops for u in r.uses):
                        tap(op, r, [loc_row(loc_of(op.location)), "value", op.name[3:], False])
            for op in list(operations_under(body)):
                if op.name == "dg.tape_alloc":
                    fixed = getattr(op.operands[1].owner, "name", "") == "arith.constant"
                    tap(op, op.results[0], [loc_row(loc_of(op.location)), "snapshots" if fixed else "tape", "",
                                            _top_level(op) != op])
                elif (op.name, str(op.location)) in steps and op.results:
                    tap(op, op.results[0], [steps[(op.name, str(op.location))], "step", op.name[3:], op in firsts])
    return rows


def _top_level(op):
    """The op of its function's body that holds `op` (op itself at the top level)."""
    while op.parent is not None and op.parent.name != "func.func":
        op = op.parent
    return op.operation
