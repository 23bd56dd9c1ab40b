"""The rule API: what an op's `vjp` and `jvp` facets build with, and the one way dg ops are written.

`write_op(w, name, operands, types, attrs)` writes one `dg.<name>` op through a
`core.writer.Writer`: its result types from the registry's type rule (unless
given), its attributes as text from their registered kinds. The emitter
(dsl/emit) and the rules below both write dg ops with it.

A rule receives an `OpView` (the forward op: its values in the function being
written, their types, its Python attributes, its `.dg` place) and a
`RuleBuilder`: a writer with dg ops at hand (`dg_op`, arithmetic, constants,
zeros) and the pieces of unbroadcasting that gradients share. The autodiff
pass (lowering/ad) makes both; the facets use nothing else of it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dg.core.attrs import attr_text
from dg.core.locations import Loc
from dg.core.types import TensorType
from dg.core.writer import Value, Writer

from .registry import OPS

DYN = -2  # a dynamic size in a `shape` attribute


def write_op(w: Writer, opname: str, operands: list, types: list, attrs: dict | None = None,
             result_types: list | None = None, loc: str | None = None) -> tuple[list[Value], list]:
    """Write `dg.<opname>` of `operands` (whose TensorTypes are `types`) with Python attribute
    values `attrs`; its result types from the registry's rule unless given (a rule that rejects
    the types raises core.types.ShapeError). -> (its results as Values, their types as the rule
    gave them: with the named sizes and unsigned dtypes that MLIR's text does not carry)."""
    opdef = OPS[opname]
    attrs = attrs or {}
    rt = opdef.infer(list(types), **attrs) if result_types is None else result_types
    result_types = rt if isinstance(rt, list) else [rt]
    texts = {k: attr_text(opdef.attrs[k], v) for k, v in attrs.items()}
    return Writer.op(w, f"dg.{opname}", operands, result_types, texts, loc=loc), list(result_types)


@dataclass
class OpView:
    """What a VJP or JVP rule sees of the forward op."""
    name: str  # the dg op's name, without `dg.`
    operands: list  # Values, in the function being written
    results: list
    types: list  # TensorType per operand
    result_types: list
    attrs: dict  # attribute name -> Python value
    where: Loc | None  # the `.dg` place of the op


class RuleBuilder(Writer):
    """The writer VJP and JVP rules build with: dg ops (their result types from the registry's
    rules), constants, zeros, and the pieces of unbroadcasting."""

    def __init__(self, counter=None, indent: int = 4):
        super().__init__(counter, indent)
        # Adjoints that are zero but for a part (a row of a tape, the part of an array a subscript
        # read): value -> add(g, acc), which adds that part into another adjoint, acc, of the same
        # type, in place of a whole array of zeros added (lowering/ad/sweep.py's `accumulate`).
        self.parts: dict = {}

    def dg_op(self, opname: str, operands: list, attrs: dict | None = None, result_types: list | None = None):
        """A dg op; its result types from the registry's rule unless given. One result -> a Value."""
        res, _ = write_op(self, opname, operands, [o.tt for o in operands], attrs, result_types)
        return res[0] if len(res) == 1 else res

    def one_row(self, tape: Value, k: Value, row: Value) -> Value:
        """An adjoint shaped as `tape` that is zero but for row k (an index), which is `row`.
        Added to an adjoint the tape already has, only that row is added: a tape read in a loop's
        body would else add a whole tape of zeros per iteration."""
        d = self.dg_op("tape_push", [self.zeros_like(tape), k, row])
        self.parts[d] = lambda g, acc: g.dg_op("tape_push", [acc, k, g.add(g.dg_op("tape_read", [acc, k]), row)])
        return d

    def part(self, x: Value, d: Value, spec: tuple, dyn: list) -> Value:
        """The adjoint of a read `x[spec]` (basic indexing; `dyn`: the values of spec's `$`s): zero
        but for the part read, which is d. Added to an adjoint x already has, only that part is
        added (a row read in a loop costs its row, not a pass over x)."""
        def add(g, acc):
            old = g.dg_op("getitem", [acc] + dyn, {"spec": spec})
            return g.dg_op("setitem", [acc, g.add(old, d)] + dyn, {"spec": spec})

        dx = self.dg_op("setitem", [self.zeros_like(x), d] + dyn, {"spec": spec})
        self.parts[dx] = add
        return dx

    def rows_added(self, x: Value, d: Value, rows: Value) -> Value:
        """The adjoint of rows of x read at `rows` (an i64 vector; d: what they got): zero but for
        those rows, to which d's add up; added to an adjoint x already has, only those rows."""
        dx = self.dg_op("add_rows", [self.zeros_like(x), d, rows])
        self.parts[dx] = lambda g, acc: g.dg_op("add_rows", [acc, d, rows])
        return dx

    def const(self, value, like: Value | TensorType) -> Value:
        t = like.tt if isinstance(like, Value) else like
        t = TensorType(t.dtype, ())
        return self.dg_op("constant", [], {"value": (np.asarray(value), t)}, result_types=[t])

    def zeros_like(self, v: Value) -> Value:
        return self.dg_op("zeros_like", [v])

    def add(self, a, b):
        return self.dg_op("add", [a, b])

    def sub(self, a, b):
        return self.dg_op("sub", [a, b])

    def mul(self, a, b):
        return self.dg_op("mul", [a, b])

    def div(self, a, b):
        return self.dg_op("div", [a, b])

    def neg(self, a):
        return self.dg_op("neg", [a])

    def where(self, c, a, b):
        return self.dg_op("where", [c, a, b])

    def dim(self, x: Value, axis: int) -> Value:
        return self.dg_op("dim", [x], {"axis": axis})

    def bcast(self, d: Value, x: Value) -> Value:
        """d broadcast to x's shape (sizes taken from x at run time)."""
        if d.tt.shape == x.tt.shape and all(isinstance(s, int) for s in x.tt.shape):
            return d
        return self.add(self.zeros_like(x), d)

    def unreduce(self, d: Value, x: Value, axes, keepdims: bool) -> Value:
        """The adjoint of a reduction of x over `axes`, broadcast back to x's shape."""
        axes = tuple(axes)
        if not keepdims and axes:
            d = self.dg_op("expand_dims", [d], {"axes": axes})
        return self.bcast(d, x)

    def count(self, x: Value, axes) -> Value:
        """How many elements a reduction over `axes` combines, as a scalar of x's dtype."""
        n = self.const(1.0, x)
        for a in axes:
            n = self.mul(n, self.dg_op("cast", [self.dim(x, a)], {"dtype": x.tt.dtype}))
        return n

    def transpose_last(self, x: Value) -> Value:
        r = x.tt.rank
        return self.dg_op("transpose", [x], {"perm": tuple(range(r - 2)) + (r - 1, r - 2)})

    def onehot(self, labels: Value, like: Value, axis: int) -> Value:
        """A float tensor shaped like `like`: 1 where the index along `axis` equals the label."""
        n = like.tt.shape[axis]
        zero, one = (self.const(v, labels) for v in (0, 1))
        stop = self.dg_op("cast", [self.dim(like, axis)], {"dtype": labels.tt.dtype})
        ar = self.dg_op("arange", [zero, stop, one], {"size": n if isinstance(n, int) else -2,
                                                    "dtype": labels.tt.dtype})
        hit = self.dg_op("eq", [self.dg_op("expand_dims", [labels], {"axes": (labels.tt.rank,)}), ar])
        return self.dg_op("cast", [hit], {"dtype": like.tt.dtype})

    def sum_to(self, d: Value, t: TensorType) -> Value:
        """Undo broadcasting: sum d over the axes that broadcasting added or stretched, to type t."""
        ds = d.tt.shape
        lead = len(ds) - len(t.shape)
        if lead > 0:
            d = self.dg_op("sum", [d], {"axes": tuple(range(lead)), "keepdims": False})
        stretched = tuple(i for i, (a, b) in enumerate(zip(d.tt.shape, t.shape))
                          if isinstance(b, int) and b == 1 and not (isinstance(a, int) and a == 1))
        if stretched:
            d = self.dg_op("sum", [d], {"axes": stretched, "keepdims": True})
        if d.tt.dtype != t.dtype:
            d = self.dg_op("cast", [d], {"dtype": t.dtype})
        return d

    def conform(self, t: Value, like: Value) -> Value:
        """A tangent as a value of exactly `like`'s type: cast, broadcast to its shape (a rule may
        give a tangent of an operand's shape where the op broadcasts), and sizes the types fix
        alike (dg.sum_to checks them at run time)."""
        if t.type == like.type:
            return t
        if t.tt.dtype != like.tt.dtype:
            t = self.dg_op("cast", [t], {"dtype": like.tt.dtype})
        if t.tt.shape != like.tt.shape:
            t = self.bcast(t, like)
        if t.type != like.type:
            t = self.dg_op("sum_to", [t, like])
        return t


@dataclass
class Shared:
    """A rule's result that is the same for every example."""
    value: Value


class BatchBuilder(RuleBuilder):
    """The writer batching rules build with: a RuleBuilder that knows the batch size and mask."""

    def __init__(self, counter=None, indent: int = 4):
        super().__init__(counter, indent)
        self.size: Value | None = None  # B, an i64 scalar
        self.mask: Value | None = None  # bool [B]: the examples active here

    # ------------------------------------------------------------ shapes
    def lift(self, v: Value, rank: int) -> Value:
        """A batched value made of rank `rank` + 1 by new axes after the batch axis (so that it
        broadcasts, example by example, against per-example values of rank `rank`)."""
        extra = rank + 1 - v.tt.rank
        if extra <= 0:
            return v
        return self.dg_op("expand_dims", [v], {"axes": tuple(range(1, 1 + extra))})

    def stacked(self, v: Value) -> Value:
        """A shared value as a batched one: the same for every example, B times."""
        t = v.tt
        dims = [self.dim(v, i) for i, d in enumerate(t.shape) if not isinstance(d, int)]
        shape = (DYN,) + tuple(d if isinstance(d, int) else DYN for d in t.shape)
        e = self.dg_op("expand_dims", [v], {"axes": (0,)})
        return self.dg_op("broadcast_to", [e, self.size] + dims, {"shape": shape})

    def any(self, m: Value) -> Value:
        """Whether any of a bool [B] is true: an i1."""
        n = self.dg_op("cast", [m], {"dtype": "i64"})
        s = self.dg_op("sum", [n], {"axes": (0,), "keepdims": False})
        return self.dg_op("to_i1", [self.dg_op("gt", [s, self.const(0, s)])])

    def active(self, v: Value, fill) -> Value:
        """A batched scalar value (an index, say) where the example is active, `fill` elsewhere."""
        if self.mask is None:
            return v
        return self.where(self.lift(self.mask, v.tt.rank - 1), v, self.const(fill, v))
