"""What every part of the emitter uses: the function being written, its errors, dg ops, literals,
casts, and values made to fit a type."""
from __future__ import annotations

import numpy as np

from dg.core.errors import DgTypeError, Loc
from dg.core.types import ShapeError, TensorType, annotation_type, is_int, np_dtype, py_cast, scalar
from dg.core.writer import Writer
from dg.dialects.registry import OPS
from dg.dialects.rules import write_op

from .. import ast as A
from .. import controlflow
from ..values import POISON, ListVal, Record, TypedValue, flatten, map_leaves

INDEX = TensorType("index", ())


def show(name) -> str:
    """A variable's name for messages; the control-flow rewrite's own names read as what they stand for."""
    if name is None:
        return "the value"
    if name == controlflow.RETVAL:
        return "the returned value"
    if name.startswith("$"):
        return "a loop flag"
    return f"'{name}'"


def all_values(x) -> bool:
    if not isinstance(x, (TypedValue, tuple)):
        return False
    return all(isinstance(v, TypedValue) for v in flatten(x))


class EmitterCore(Writer):
    """The emitter's writer (core.writer: its lines, SSA names, the ops it writes)."""

    def fresh(self, prefix: str = "") -> str:
        """A new SSA name: all digits, which no parameter's name (an identifier) can be."""
        return f"%{next(self.counter)}"

    def error(self, msg, loc, cls=DgTypeError):
        return self.mod.error(msg, loc, cls)

    @property
    def file(self):
        return self.source.file

    # ------------------------------------------------------------ types from annotations
    def type_from_annotation(self, te, loc) -> TensorType | None:
        try:
            return annotation_type(te, self.dim_syms)
        except ShapeError as e:
            self.error(str(e), te.loc)
            return None

    def declared_returns(self, te=None):
        """The declared result structure (a TypedValue or nested tuples of them), or None if a type is
        unknown."""
        te = self.spec.fd.returns if te is None else te
        if isinstance(te, (A.TupleTypeExpr, A.RecordTypeExpr)):
            parts = [self.declared_returns(e) for e in te.elts]
            if any(p is None for p in parts):
                return None
            return Record(zip(te.keys, parts)) if isinstance(te, A.RecordTypeExpr) else tuple(parts)
        t = self.type_from_annotation(te, te.loc)
        return None if t is None else TypedValue(None, t)

    # ------------------------------------------------------------ emission of ops
    def materialize(self, v, dtype: str | None = None, loc: Loc | None = None) -> TypedValue:
        """A weak literal becomes a `dg.constant` of `dtype` (its own default if None)."""
        if isinstance(v, TypedValue) and v.name is None and not v.poison:
            dt = dtype or v.type.dtype
            val = v.const
            if is_int(dt) and isinstance(val, int) and not isinstance(val, bool):
                info = np.iinfo(np_dtype(dt))
                if not info.min <= val <= info.max:
                    return self.error(f"the integer {val} does not fit in {dt}", loc)
            t = TensorType(dt, v.type.shape if v.type else ())
            return TypedValue(self.constant(np.asarray(val), t, loc), t, const=val)
        if isinstance(v, TypedValue) and dtype and not v.poison and v.dtype != dtype:
            return self.cast(v, dtype, loc)
        return v

    def loc_text(self, loc: Loc | None, name: str | None = None) -> str:
        if loc is None:
            return ""
        return loc.mlir(name)

    def op(self, opname: str, operands: list, attrs: dict | None = None, loc: Loc | None = None,
           name: str | None = None, result_types=None):
        """Emit `dg.<opname>`; returns a TypedValue, a list of them (several results), or None (no
        result)."""
        opdef = OPS[opname]
        attrs = {k: v for k, v in (attrs or {}).items()}
        if any(isinstance(o, TypedValue) and o.poison for o in operands):
            n = opdef.nresults
            return POISON if n == 1 else ([POISON] * (n or 0) if n else None)
        operands = [self.materialize(o, loc=loc) for o in operands]
        try:
            res, rts = write_op(self, opname, operands, [o.type for o in operands], attrs, result_types,
                           loc=self.loc_text(loc, name))
        except ShapeError as e:
            n = opdef.nresults
            msg = str(e)
            self.error(msg if msg.startswith(opname) else f"{opname}: {msg}", loc)
            return POISON if n == 1 else ([POISON] * (n or 0) if n else None)
        if not res:
            return None
        if len(res) == 1:
            self.last_def = (self.lines, len(self.lines) - 1, res[0].name, loc)
            return TypedValue(res[0].name, rts[0])
        return [TypedValue(r.name, t) for r, t in zip(res, rts)]

    def constant(self, value: np.ndarray, t: TensorType, loc) -> str:
        """A `dg.constant` of type t; its SSA name."""
        return write_op(self, "constant", [], [], {"value": (value, t)}, [t], loc=self.loc_text(loc))[0][0].name

    def cast(self, v: TypedValue, dtype: str, loc) -> TypedValue:
        if v.poison or v.dtype == dtype:
            return v
        if v.name is None:
            return self.materialize(TypedValue(None, v.type.with_dtype(dtype), const=py_cast(v.const, dtype)), dtype, loc)
        return self.op("cast", [v], {"dtype": dtype}, loc)

    def const(self, value, dtype: str, loc) -> TypedValue:
        return self.materialize(TypedValue(None, scalar(dtype), const=value), dtype, loc)

    def weak(self, value) -> TypedValue:
        if isinstance(value, bool) or isinstance(value, np.bool_):
            return TypedValue(None, scalar("bool"), const=bool(value), weak=True)
        if isinstance(value, (int, np.integer)):
            return TypedValue(None, scalar("i64"), const=int(value), weak=True)
        return TypedValue(None, scalar("f32"), const=float(value), weak=True)

    def index_const(self, n: int, loc: Loc | None = None) -> TypedValue:
        name = self.fresh()
        self.line(f"{name} = arith.constant {int(n)} : index {self.loc_text(loc or self.cur_loc)}")
        return TypedValue(name, INDEX, const=int(n))

    def conform(self, v, t: TensorType, loc) -> TypedValue:
        """Make a value of exactly type `t` (same dtype, dims generalized to `?` as needed)."""
        if isinstance(v, tuple) and v and v[0] == "undef":
            shape = [d if isinstance(d, int) else -2 for d in t.shape]
            known = [self.sym_sources.get(d.id) or (self.sizes.get(d.name) if d.name else None)
                     for d in t.shape if not isinstance(d, int)]
            if known and all(known):
                # Sizes the parameters give (N of x: f32[N], or x's `?`): the placeholder has
                # them, so that a loop carrying it (an early return's value) keeps its sizes, as
                # gradients need.
                dims = [self.dim(*k, loc) for k in known]
                zero = self.const(0, t.dtype, loc)
                return self.op("full", [zero] + dims, {"shape": shape}, loc, result_types=[t])
            return self.op("undef", [], {"shape": shape, "dtype": t.dtype}, loc,
                           result_types=[t])
        if v.name is None:
            v = self.materialize(v, t.dtype, loc)
        elif v.dtype != t.dtype:
            v = self.cast(v, t.dtype, loc)
        if v.type.mlir() != t.mlir():
            # Static -> dynamic dims: dg.reshape to the same sizes, the ones t leaves open given at run time.
            dims = [self.dim(v, i, loc) for i, d in enumerate(t.shape) if not isinstance(d, int)]
            shape = [d if isinstance(d, int) else -2 for d in t.shape]
            v = self.op("reshape", [v] + dims, {"shape": shape}, loc, result_types=[t])
        return v

    def dim(self, v: TypedValue, axis: int, loc) -> TypedValue:
        d = v.type.shape[axis]
        if isinstance(d, int):
            return self.const(d, "i64", loc)
        return self.op("dim", [v], {"axis": axis}, loc)

    def as_value(self, v, loc):
        """ListVal displays become tensors; everything else passes."""
        if isinstance(v, ListVal):
            return self.list_to_tensor(v, loc)
        if isinstance(v, tuple):
            return map_leaves(lambda x: self.as_value(x, loc), v)
        return v

    def name_location(self, v: TypedValue, name: str) -> None:
        """The op that just defined `v` gets a name location: loc("x"(file:line:col))."""
        if self.last_def is None:
            return
        lines, idx, res, loc = self.last_def
        if res != v.name or loc is None or idx >= len(lines):
            return
        plain = self.loc_text(loc)
        if lines[idx].endswith(plain):
            lines[idx] = lines[idx][: -len(plain)] + self.loc_text(loc, name)
        self.last_def = None
