"""Effects and glue: print, assert, breakpoint, stop_gradient, and the
conversions between dg tensors and the `index`/`i1` values that `scf` needs.

print/assert/breakpoint are not pure: their NumPy implementations here are
only the pure parts; the interpreter wires them to the runtime (stdout, a
located `DgRuntimeError`, pdb).
"""
from __future__ import annotations

import numpy as np

from dg.core.locations import loc_row
from dg.core.types import ShapeError, TensorType, is_float, is_int

from . import batch_shape
from .batch_rules import same_op
from .builder import fail_if, host_call
from .registry import OpDef, register


def format_value(v) -> str:
    return str(np.asarray(v)) if isinstance(v, np.ndarray) else str(v)


def _print(*vals, pieces=(), end=True):
    """The pure part of print: the text of this op's pieces (the runtime buffers lines)."""
    out = []
    it = iter(vals)
    for p in pieces:
        out.append(format_value(next(it)) if p == "\0" else p)
    return " ".join(out)


def _lower_print(b, op):
    """A host call: the executor's console prints the same text as the interpreter's."""
    host_call(b, op, "print", list(op.attrs.get("pieces", ())), bool(op.attrs.get("end", True)))


register(OpDef(
    name="print", impl=_print, nargs=None, nfixed=0, nresults=0, pure=False,
    attrs={"pieces": "strs", "end": "bool"},
    infer=lambda types, pieces=(), end=True: [],
    doc="""Print: one op per value (at most one operand), its place among `pieces` marked "\\0"; `end`
    closes the line.

        "dg.print"(%x) {pieces = ["x =", "\\00"], end = true} : (tensor<3xf32>) -> ()""",
    lower=_lower_print,
))


def _assert_rule(types, msg=""):
    if types[0].dtype != "bool" or types[0].rank:
        raise ShapeError(f"assert needs a bool scalar, got {types[0]}")
    if len(types) > 2 or len(types) == 2 and (types[1].dtype != "i64" or types[1].rank):
        raise ShapeError("assert takes a bool scalar and, in a batch, the failing example's index (an i64 scalar)")
    return []


def _assert(c, *example, msg=""):
    return bool(c)


EXAMPLE = " (example {0} of the batch)"  # what a check in batched code adds (the failing example)


def failure_message(opname: str, msg: str, batched: bool = False) -> str:
    """What a failed `assert` or `check` says (both modes); `batched`: a template whose `{0}` is
    the failing example's index (its other braces doubled)."""
    text = msg if opname == "check" else f"assertion failed{': ' + msg if msg else ''}"
    return text.replace("{", "{{").replace("}", "}}") + EXAMPLE if batched else text


def _lower_assert(b, op):
    c = b.extract(op.operands[0], op.types[0])
    bad = b.binary("arith.xori", c, b.const(True, "i1"), "i1")
    batched = len(op.operands) > 1
    values = ((b.extract(op.operands[1], op.types[1]), "i64"),) if batched else ()
    fail_if(b, bad, failure_message(op.name, op.attrs.get("msg") or "", batched), values)


register(OpDef(
    name="assert", impl=_assert, nargs=None, nresults=0, pure=False, attrs={"msg": "str"},
    infer=_assert_rule,
    doc="""Fail with `msg` (a located DgRuntimeError) when the condition is false.

        "dg.assert"(%c) {msg = "x must be positive"} : (tensor<i1>) -> ()""",
    lower=_lower_assert,
))

register(OpDef(
    name="check", impl=_assert, nargs=None, nresults=0, pure=False, attrs={"msg": "str"},
    infer=_assert_rule,
    doc="""dg's own run-time check (of a declared size, say): fail with `msg` when the condition is false.

        "dg.check"(%c) {msg = "the argument has the wrong size in axis 0"} : (tensor<i1>) -> ()""",
    lower=_lower_assert,
))


def _lower_breakpoint(b, op):
    """A host call per variable; the last opens pdb with the values gathered so far."""
    host_call(b, op, "breakpoint", op.attrs.get("name", ""), bool(op.attrs.get("last", True)), loc_row(op.where))


register(OpDef(
    name="breakpoint", impl=lambda *vals, name="", last=True: None, nargs=None, nfixed=0, nresults=0,
    pure=False, attrs={"name": "str", "last": "bool"}, infer=lambda types, name="", last=True: [],
    doc="""breakpoint(): one op per dg variable in scope (its name and value); the last opens pdb with them all.

        "dg.breakpoint"(%x) {name = "x", last = true} : (tensor<3xf32>) -> ()""",
    lower=_lower_breakpoint,
))


def _identity(x):
    return x


def _tap_rule(types, id=0):
    return types[0]


def _lower_tap(b, op):
    """A host call with the value (the executor hands it to the shadow run), then the value."""
    host_call(b, op, "tap", int(op.attrs.get("id", 0)))
    return op.operands[0]


register(OpDef(
    name="tap", impl=lambda x, id=0: x, pure=False, attrs={"id": "int"}, infer=_tap_rule, batch=same_op,
    sample=lambda rng: ([rng.standard_normal((3,)).astype(np.float32)], {"id": 0}),
    doc="""x, shown to the executor first: shadow mode (`lowering.instrument`) puts one after each op
    to compare the interpreter's values with compiled code's; `id` names the op in its table.

        %y = "dg.tap"(%x) {id = 3 : i64} : (tensor<3xf32>) -> tensor<3xf32>""",
    lower=_lower_tap,
))

NAN, INFINITY = 2, 1  # what check_finite's reduction finds, the worse winning


def _check_finite_rule(types, msg=""):
    if not is_float(types[0].dtype):
        raise ShapeError(f"check_finite needs floats, got {types[0]}")
    return types[0]


def _check_finite(x, msg=""):
    """The pure part: x (the interpreter raises where x is not all finite)."""
    return x


def _lower_check_finite(b, op):
    """One pass over x finds whether it has a NaN or an infinity (a reduction to the worse of
    the two), then a check for each: `msg` with "{0}" for "a NaN" or "an infinity"."""
    x, xt = op.operands[0], op.types[0]
    ety = xt.element
    zero_t = TensorType("i64", ())
    init = b.fill(zero_t, [], b.const(0, "i64"))
    dims = ", ".join(f"d{i}" for i in range(xt.rank))

    def body(bb, args):
        a, acc = args
        nan = bb.cmp("uno", a, a, ety)
        inf = bb.cmp("oeq", bb.unary("math.absf", a, ety), bb.const(float("inf"), ety), ety)
        code = bb.select(nan, bb.const(NAN, "i64"), bb.select(inf, bb.const(INFINITY, "i64"), bb.const(0, "i64"), "i64"), "i64")
        return bb.binary("arith.maxsi", acc, code, "i64")

    found = b.extract(b.generic(zero_t, init, [(x, xt)], [dims], "", ["reduction"] * xt.rank, body), zero_t)
    msg = op.attrs.get("msg", "")
    fail_if(b, b.cmp("eq", found, b.const(NAN, "i64"), "i64"), msg.replace("{0}", "a NaN"))
    fail_if(b, b.cmp("eq", found, b.const(INFINITY, "i64"), "i64"), msg.replace("{0}", "an infinity"))
    return x


register(OpDef(
    name="check_finite", impl=_check_finite, pure=False, attrs={"msg": "str"}, infer=_check_finite_rule, batch=same_op,
    sample=lambda rng: ([rng.standard_normal((2, 3)).astype(np.float32)], {}),
    doc="""x, checked to hold no NaN and no infinity: where it does, a DgRuntimeError at this op's place
    saying `msg` with "{0}" replaced by "a NaN" or "an infinity". `check_numerics` puts one after
    each float op (`lowering.instrument`).

        %y = "dg.check_finite"(%x) {msg = "exp made {0}"} : (tensor<3xf32>) -> tensor<3xf32>""",
    lower=_lower_check_finite,
))


def _lower_identity(b, op):
    return op.operands[0]


register(OpDef(
    name="stop_gradient", impl=_identity, infer=lambda types: types[0], batch=same_op,
    sample=lambda rng: ([rng.standard_normal((3,)).astype(np.float32)], {}),
    doc="""x, through which no gradient flows.

        %y = "dg.stop_gradient"(%x) : (tensor<3xf32>) -> tensor<3xf32>""",
    lower=_lower_identity,
))


def _scalar_int_rule(types):
    t = types[0]
    if not is_int(t.dtype) or t.rank:
        raise ShapeError(f"expected an integer scalar, got {t}")
    return TensorType("index", ())


def _lower_to_index(b, op):
    s = b.extract(op.operands[0], op.types[0])
    return b.assign(f"arith.index_cast {s} : i64 to index", "i")


register(OpDef(
    name="to_index", impl=int, infer=_scalar_int_rule, batch=batch_shape.as_tensor,
    doc="""An i64 scalar as an index (the bounds of scf.for).

        %n = "dg.to_index"(%x) : (tensor<i64>) -> index""",
    lower=_lower_to_index,
))


def _lower_from_index(b, op):
    s = b.assign(f"arith.index_cast {op.operands[0]} : index to i64", "s")
    return b.scalar_tensor(s, op.result_types[0])


register(OpDef(
    name="from_index", impl=np.int64, infer=lambda types: TensorType("i64", ()), batch=batch_shape.as_tensor,
    doc="""An index as an i64 scalar (scf.for's induction variable as a dg value).

        %x = "dg.from_index"(%i) : (index) -> tensor<i64>""",
    lower=_lower_from_index,
))


def _to_i1_rule(types):
    if types[0].dtype != "bool" or types[0].rank:
        raise ShapeError(f"a condition must be a bool scalar, got {types[0]}")
    return TensorType("i1", ())


def _lower_to_i1(b, op):
    return b.extract(op.operands[0], op.types[0])


register(OpDef(
    name="to_i1", impl=bool, infer=_to_i1_rule, batch=batch_shape.as_tensor,
    doc="""A bool scalar as an i1 (the condition of scf.if and scf.condition).

        %c = "dg.to_i1"(%x) : (tensor<i1>) -> i1""",
    lower=_lower_to_i1,
))


def _lower_from_i1(b, op):
    return b.scalar_tensor(op.operands[0], op.result_types[0])


register(OpDef(
    name="from_i1", impl=np.bool_, infer=lambda types: TensorType("bool", ()), batch=batch_shape.as_tensor,
    doc="""An i1 as a bool scalar (a flag a gradient's loop carries, kept on a tape).

        %x = "dg.from_i1"(%c) : (i1) -> tensor<i1>""",
    lower=_lower_from_i1,
))


def _range_len(a, b, s):
    if s == 0:
        raise ValueError("range() step cannot be zero")
    return max(0, -((a - b) // s)) if s > 0 else max(0, -((b - a) // -s))


def _lower_range_len(b, op):
    """len(range(a, c, s)) as an index, for either sign of s: the distance over the step's size,
    both taken as unsigned so that neither overflows (nor traps: a step of 0 fails the check
    and gives 0 trips)."""
    a, c, s = (b.extract(v, t) for v, t in zip(op.operands, op.types))
    zero, one = b.const(0, "i64"), b.const(1, "i64")
    fail_if(b, b.cmp("eq", s, zero, "i64"), "ValueError: range() step cannot be zero")
    up = b.cmp("sgt", s, zero, "i64")
    ahead = b.select(up, b.cmp("sgt", c, a, "i64"), b.cmp("sgt", a, c, "i64"), "i1")
    any_ = b.binary("arith.andi", ahead, b.cmp("ne", s, zero, "i64"), "i1")
    dist = b.select(up, b.binary("arith.subi", c, a, "i64"), b.binary("arith.subi", a, c, "i64"), "i64")
    size = b.select(up, s, b.binary("arith.subi", zero, s, "i64"), "i64")
    size = b.select(any_, size, one, "i64")
    last = b.binary("arith.subi", dist, one, "i64")
    q = b.binary("arith.addi", b.binary("arith.divui", last, size, "i64"), one, "i64")
    n = b.select(any_, q, zero, "i64")
    return b.assign(f"arith.index_cast {n} : i64 to index", "i")


register(OpDef(
    name="range_len", impl=lambda a, b, s: int(_range_len(int(a), int(b), int(s))), nargs=3, batch=batch_shape.range_len,
    infer=lambda types: TensorType("index", ()),
    doc="""The trip count of range(a, b, s) as an index (either sign of the step; a step of 0 fails).

        %n = "dg.range_len"(%a, %b, %s) : (tensor<i64>, tensor<i64>, tensor<i64>) -> index""",
    lower=_lower_range_len,
))
