"""Expressions: literals and their folding, operators, attributes, indexing."""
from __future__ import annotations

import numpy as np

from dg.core.types import DTYPES, ShapeError, TensorType, is_bool, is_float, is_int, promote, scalar
from dg.dialects.helpers import expand_spec

from .. import ast as A
from ..builtins import BUILTINS, METHODS
from ..values import (POISON, ConstRef, ListVal, ModuleRef, PackedList, Record, Str, TypedValue, Undefined, flatten,
                      is_record, is_tuple, unflatten_like)

BINOPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod", "**": "pow"}
CMPOPS = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}


def _weak_join(weak_dt: str, strong_dt: str) -> str:
    if is_float(weak_dt) and not is_float(strong_dt):
        return "f32"
    if is_int(weak_dt) and is_bool(strong_dt):
        return "i64"
    return strong_dt


def _const_nested(lv: ListVal):
    """A list display of literals (nested to any depth) -> (array, dtype), else None."""
    def leaves(x):
        if isinstance(x, ListVal):
            sub = [leaves(i) for i in x.items]
            if any(s is None for s in sub):
                return None
            return sub
        if isinstance(x, TypedValue) and x.name is None and x.weak and not x.poison:
            return x.const
        return None

    vals = leaves(lv)
    if vals is None:
        return None
    try:
        arr = np.array(vals)
    except ValueError:
        return None
    if arr.dtype == object or arr.size == 0:
        return None
    if arr.dtype.kind == "f":
        return arr.astype(np.float32), "f32"
    if arr.dtype.kind == "b":
        return arr, "bool"
    return arr.astype(np.int64), "i64"


_NOFOLD = object()


def _int_in_reach(v) -> bool:
    """Whether a Python value is no int, or an int that i64 holds, or its negation does (2**63, of
    the literal -2**63; materialize checks the dtype a constant finally gets)."""
    return not isinstance(v, int) or isinstance(v, bool) or -(1 << 63) <= v <= 1 << 63


def _fold(op, a, b):
    try:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return a / b if b != 0 else _NOFOLD
        if op == "//":
            return a // b if b != 0 else _NOFOLD
        if op == "%":
            return a % b if b != 0 else _NOFOLD
        if op == "**":
            if isinstance(a, int) and isinstance(b, int) and b < 0:
                return _NOFOLD
            r = a ** b
            return r if not isinstance(r, complex) else _NOFOLD
        if op in CMPOPS:
            return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]
    except (OverflowError, ZeroDivisionError, TypeError):
        return _NOFOLD
    return _NOFOLD


class Expressions:
    # ------------------------------------------------------------ expressions
    def expr(self, e):
        m = getattr(self, "e_" + type(e).__name__, None)
        if m is None:
            return self.error(f"unsupported expression {type(e).__name__}", e.loc)
        return m(e)

    def e_Const(self, e):
        if isinstance(e.value, str):
            return Str(e.value)
        if e.value is None:
            return self.error("None is only allowed as an index (a new axis)", e.loc)
        if not _int_in_reach(e.value):
            return self.error(f"the integer {e.value} does not fit in i64", e.loc)
        return self.weak(e.value)

    def lookup(self, e: A.Name):
        v = self.env.get(e.id)
        if v is None:
            ref = self.source.resolve(e.id)
            if isinstance(ref, ConstRef):
                return self.top_level_constant(ref, e.loc)
            if ref is not None:
                return ref
            if e.id in BUILTINS:
                return ("builtin", e.id)
            if e.id in DTYPES and e.id != "u64":
                return ("builtin", e.id)
            return self.error(f"name '{e.id}' is not defined", e.loc)
        if isinstance(v, Undefined):
            if v.value is not None:  # bound on some paths: checked at run time (control.py)
                return self.read_maybe_bound(e, v)
            return self.error(v.why, e.loc)
        return v

    def top_level_constant(self, ref: ConstRef, loc):
        """A top-level constant's value, its expression emitted where it is read, in its own
        module's names (other constants, functions) and none of the function's."""
        key = (id(ref.module), ref.name)
        reading = self.__dict__.setdefault("reading_constants", [])
        if key in reading:
            return self.error(f"the constant '{ref.name}' is defined in terms of itself", loc)
        reading.append(key)
        saved = self.source, self.env
        self.source, self.env = ref.module, {}
        try:
            return self.expr(ref.module.consts[ref.name])
        finally:
            self.source, self.env = saved
            reading.pop()

    def e_Name(self, e):
        v = self.lookup(e)
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "builtin":
            return self.error(f"'{e.id}' is a built-in function; call it", e.loc)
        return v

    def e_Tuple(self, e):
        return tuple(self.expr(x) for x in e.elts)

    def e_List(self, e):
        return ListVal([self.expr(x) for x in e.elts], e.loc)

    def e_Dict(self, e):
        return Record(zip(e.keys, [self.expr(x) for x in e.values]))

    def record_key(self, rec, sub: A.Subscript, must_exist: bool = True):
        """The key `p["w"]` names in the record `rec`, or None after an error."""
        if len(sub.items) != 1 or not isinstance(sub.items[0], A.Const) or not isinstance(sub.items[0].value, str):
            self.error(f'a record is indexed by one of its keys as a string literal (p["w"]); its keys are '
                       f'{", ".join(repr(k) for k in rec.keys) or "none"}', sub.loc)
            return None
        key = sub.items[0].value
        if must_exist and key not in rec.keys:
            self.error(f"the record has no key '{key}' (its keys: {', '.join(repr(k) for k in rec.keys) or 'none'})",
                       sub.items[0].loc)
            return None
        return key

    def list_to_tensor(self, lv: ListVal, loc) -> TypedValue:
        const = _const_nested(lv)
        if const is not None:
            arr, dt = const
            t = TensorType(dt, tuple(arr.shape))
            return TypedValue(self.constant(arr, t, lv.loc), t)
        items = [self.as_value(x, lv.loc) for x in lv.items]
        if not items:
            return self.error("an empty list has no element type; use zeros([0])", lv.loc)
        if any(not isinstance(x, TypedValue) for x in items):
            return self.error("a list display must hold tensors or numbers", lv.loc)
        if any(x.poison for x in items):
            return POISON
        strong = [x.dtype for x in items if x.name is not None and not x.weak]
        dt = strong[0] if strong else items[0].dtype
        for d in strong[1:]:
            dt = promote(dt, d)
        if any(x.name is None and is_float(x.dtype) for x in items) and not is_float(dt):
            dt = "f32"
        vals = [self.materialize(x, dt, loc) if x.name is None else self.cast(x, dt, loc) for x in items]
        return self.stack(vals, 0, lv.loc)

    def stack(self, vals: list, axis: int, loc) -> TypedValue:
        """np.stack: expand_dims each, then a chain of two-operand concats."""
        for v in vals[1:]:
            if v.rank != vals[0].rank:
                return self.error(f"cannot stack {vals[0].type} and {v.type}", loc)
        parts = [self.op("expand_dims", [v], {"axes": [axis]}, loc) for v in vals]
        out = parts[0]
        for p in parts[1:]:
            out = self.op("concat", [out, p], {"axis": axis}, loc)
        return out

    def e_BinOp(self, e):
        return self.binop(e.op, self.expr(e.left), self.expr(e.right), e.loc)

    def binop(self, op, a, b, loc):
        a, b = self.as_value(a, loc), self.as_value(b, loc)
        if is_tuple(a) or is_tuple(b):
            if op == "+" and is_tuple(a) and is_tuple(b):
                return a + b
            return self.error(f"unsupported operand types for {op}: tuple", loc)
        if not isinstance(a, TypedValue) or not isinstance(b, TypedValue):
            return self.error(f"unsupported operands for {op}", loc)
        if a.poison or b.poison:
            return POISON
        if op == "@":
            dt = self.result_dtype(a, b)
            if not is_float(dt) and not is_int(dt):
                return self.error(f"matmul of {a.type} and {b.type}", loc)
            return self.op("matmul", [self.materialize(a, dt, loc), self.materialize(b, dt, loc)], loc=loc)
        if a.name is None and b.name is None and a.rank == 0 and b.rank == 0:
            folded = _fold(op, a.const, b.const)
            if not _int_in_reach(folded):
                return self.error(f"the integer {folded} this computes does not fit in i64", loc)
            if folded is not _NOFOLD:
                v = self.weak(folded)
                if not (a.weak and b.weak):
                    v = TypedValue(None, scalar(self.result_dtype(a, b) if op in BINOPS else "bool"), const=folded,
                          weak=False)
                return v
        dt = self.result_dtype(a, b)
        if op in CMPOPS:
            return self.op(CMPOPS[op], [self.materialize(a, dt, loc), self.materialize(b, dt, loc)], loc=loc)
        if op not in BINOPS:
            return self.error(f"unknown operator {op}", loc)
        if op == "/" and not is_float(dt):
            dt = "f32"
        if op in ("//", "%", "**") and is_bool(dt):
            dt = "i64"
        if op in ("+", "-", "*") and is_bool(dt):
            dt = "i64"
        return self.op(BINOPS[op], [self.materialize(a, dt, loc), self.materialize(b, dt, loc)], loc=loc)

    def result_dtype(self, a: TypedValue, b: TypedValue) -> str:
        wa, wb = a.weak and a.name is None, b.weak and b.name is None
        if wa and not wb:
            return _weak_join(a.dtype, b.dtype)
        if wb and not wa:
            return _weak_join(b.dtype, a.dtype)
        return promote(a.dtype, b.dtype)

    def e_UnaryOp(self, e):
        v = self.as_value(self.expr(e.operand), e.loc)
        if not isinstance(v, TypedValue) or v.poison:
            return POISON if isinstance(v, TypedValue) else self.error(f"bad operand for unary {e.op}", e.loc)
        if e.op == "+":
            return v
        if e.op == "-":
            if v.name is None:
                if isinstance(v.const, bool):
                    return self.weak(-int(v.const))
                return TypedValue(None, v.type, const=-v.const, weak=v.weak)
            if is_bool(v.dtype):
                return self.error("cannot negate a bool tensor (use not)", e.loc)
            return self.op("neg", [v], loc=e.loc)
        if e.op == "not":
            if v.rank == 0:
                c = self.truth(v, e.loc)
                if c.name is None:
                    return self.weak(not c.const)
                return self.op("not", [c], loc=e.loc)
            if not is_bool(v.dtype):
                return self.error(f"'not' of a {v.type} tensor is ambiguous", e.loc)
            return self.op("not", [v], loc=e.loc)
        return self.error(f"unknown unary operator {e.op}", e.loc)

    def e_BoolOp(self, e):
        vals = e.values
        acc = self.as_value(self.expr(vals[0]), e.loc)
        for rhs_e in vals[1:]:
            acc = self.boolop(e.op, acc, rhs_e, e.loc)
        return acc

    def boolop(self, op, a, rhs_e, loc):
        if not isinstance(a, TypedValue) or a.poison:
            self.expr(rhs_e)
            return POISON
        if a.rank == 0:
            ca = self.truth(a, loc)
            if ca.name is None:  # static: Python short-circuit
                if (op == "and" and not ca.const) or (op == "or" and ca.const):
                    return ca
                return self.truth(self.as_value(self.expr(rhs_e), loc), loc)
            if isinstance(rhs_e, (A.Name, A.Const)) or (isinstance(rhs_e, A.UnaryOp) and isinstance(rhs_e.operand, A.Name)):
                cb = self.truth(self.as_value(self.expr(rhs_e), loc), loc)
                if cb.poison:
                    return POISON
                if cb.name is None:
                    cb = self.materialize(cb, "bool", loc)
                return self.op(op, [ca, cb], loc=loc)
            # Short-circuit: the right side runs only when it decides the value.
            if op == "and":
                return self.emit_if(ca, lambda: self.truth(self.as_value(self.expr(rhs_e), loc), loc),
                                    lambda: self.weak(False), loc, result_fn=True)
            return self.emit_if(ca, lambda: self.weak(True),
                                lambda: self.truth(self.as_value(self.expr(rhs_e), loc), loc), loc, result_fn=True)
        b = self.as_value(self.expr(rhs_e), loc)
        if not isinstance(b, TypedValue) or b.poison:
            return POISON
        if not is_bool(a.dtype) or not is_bool(b.dtype):
            return self.error(f"'{op}' of tensors needs bool tensors, got {a.type} and {b.type}", loc)
        return self.op(op, [a, self.materialize(b, "bool", loc)], loc=loc)

    def e_Compare(self, e):
        left = self.expr(e.left)
        result = None
        for op, comp in zip(e.ops, e.comparators):
            right = self.expr(comp)
            r = self.binop(op, left, right, e.loc)
            if result is None:
                result = r
            else:
                result = self.binop_logical("and", result, r, e.loc)
            left = right
        return result

    def binop_logical(self, op, a, b, loc):
        if not isinstance(a, TypedValue) or not isinstance(b, TypedValue) or a.poison or b.poison:
            return POISON
        if a.name is None and b.name is None:
            return self.weak(bool(a.const) and bool(b.const)) if op == "and" else self.weak(bool(a.const) or bool(b.const))
        return self.op(op, [self.materialize(a, "bool", loc), self.materialize(b, "bool", loc)], loc=loc)

    def e_IfExp(self, e):
        c = self.cond_value(e.test, e.loc)
        if c.poison:
            self.expr(e.body)
            self.expr(e.orelse)
            return POISON
        if c.name is None:
            return self.expr(e.body if c.const else e.orelse)
        return self.emit_if(c, lambda: self.as_value(self.expr(e.body), e.loc),
                            lambda: self.as_value(self.expr(e.orelse), e.loc), e.loc, result_fn=True)

    def e_Attribute(self, e):
        if isinstance(e.value, A.Name) and e.value.id not in self.env:
            base = self.lookup(e.value)
            if isinstance(base, ModuleRef):
                ref = base.module.resolve(e.attr, exported_only=True)
                if ref is None:
                    return self.error(f"module '{e.value.id}' has no function or constant '{e.attr}'", e.loc)
                return self.top_level_constant(ref, e.loc) if isinstance(ref, ConstRef) else ref
        v = self.as_value(self.expr(e.value), e.loc)
        if not isinstance(v, TypedValue):
            return self.error(f"no attribute '{e.attr}' here", e.loc)
        if v.poison:
            return POISON
        if e.attr == "shape":
            return tuple(self.shape_dim(v, i, e.loc) for i in range(v.rank))
        if e.attr == "ndim":
            return self.weak(v.rank)
        if e.attr == "T":
            return self.op("transpose", [v], {"perm": list(range(v.rank))[::-1]}, e.loc)
        if e.attr == "dtype":
            return self.error("x.dtype names an element type where one is expected (dtype=x.dtype, "
                              "y.astype(x.dtype)); it is not a value", e.loc)
        return self.error(f"tensors have no attribute '{e.attr}' (shape, ndim, T, dtype, and the methods "
                          f"{', '.join(sorted(METHODS))})", e.loc)

    def shape_dim(self, v: TypedValue, i: int, loc) -> TypedValue:
        d = v.type.shape[i]
        if isinstance(d, int):
            return self.weak(d)
        return self.op("dim", [v], {"axis": i}, loc)

    def e_Subscript(self, e):
        base = self.as_value(self.expr(e.value), e.loc)
        if isinstance(base, PackedList):
            if len(e.items) != 1 or isinstance(e.items[0], (A.Slice, A.EllipsisLit)):
                return self.error("a list takes a single integer index", e.loc)
            i = self.as_value(self.expr(e.items[0]), e.loc)
            if not isinstance(i, TypedValue) or i.poison or i.rank or not is_int(i.dtype):
                return POISON if isinstance(i, TypedValue) and i.poison else \
                    self.error("a list index must be an integer scalar", e.loc)
            return self.list_item(base, i, e.loc)
        if is_record(base):
            key = self.record_key(base, e)
            return POISON if key is None else base.get(key)
        if is_tuple(base):
            if len(e.items) != 1:
                return self.error("a tuple takes a single index", e.loc)
            idx = self.as_value(self.expr(e.items[0]), e.loc) if not isinstance(e.items[0], A.Slice) else None
            if isinstance(e.items[0], A.Slice):
                sl = e.items[0]
                parts = [None if p is None else self.as_value(self.expr(p), e.loc) for p in (sl.lower, sl.upper, sl.step)]
                if any(p is not None and (not isinstance(p, TypedValue) or p.name is not None) for p in parts):
                    return self.error("a tuple slice needs constant bounds", e.loc)
                return base[slice(*(p.const if p is not None else None for p in parts))]
            if not isinstance(idx, TypedValue) or idx.name is not None or not isinstance(idx.const, int):
                return self.error("a tuple index must be a constant integer", e.loc)
            if not -len(base) <= idx.const < len(base):
                return self.error(f"tuple index {idx.const} is out of range for a tuple of {len(base)}", e.loc)
            return base[idx.const]
        if not isinstance(base, TypedValue):
            return self.error("this value cannot be indexed", e.loc)
        if base.poison:
            return POISON
        if base.name is None:
            base = self.materialize(base, loc=e.loc)
        return self.getitem_items(base, e.items, e.loc)

    # ------------------------------------------------------------ lists
    def list_len(self, xs: PackedList, loc) -> TypedValue:
        """The number of items: the first leaf's offsets, less one."""
        return self.binop("-", self.shape_dim(xs[1], 0, loc), self.weak(1), loc)

    def list_item(self, xs: PackedList, i: TypedValue, loc):
        """xs[i] (a negative i counts from the end): each leaf's rows from its offset at i to the
        next, an item of the list's item structure with its own sizes."""
        n = self.list_len(xs, loc)
        i = self.cast(self.materialize(i, "i64", loc), "i64", loc)
        i = self.op("where", [self.binop("<", i, self.weak(0), loc), self.binop("+", i, n, loc), i], loc=loc)
        ok = self.binop_logical("and", self.binop(">=", i, self.weak(0), loc), self.binop("<", i, n, loc), loc)
        self.op("check", [ok], {"msg": "IndexError: list index out of range"}, loc=loc)
        nxt = self.binop("+", i, self.weak(1), loc)
        leaves = []
        for (data, offsets), t in zip(xs.parts(), flatten(xs.item)):
            start = self.op("getitem", [offsets, i], {"spec": ("i:$",)}, loc=loc)
            if t.rank == 0:
                leaves.append(self.op("getitem", [data, start], {"spec": ("i:$",)}, loc=loc))
                continue
            stop = self.op("getitem", [offsets, nxt], {"spec": ("i:$",)}, loc=loc)
            leaves.append(self.op("getitem", [data, start, stop], {"spec": ("s:$:$:",)}, loc=loc))
        return unflatten_like(xs.item, leaves)

    def getitem(self, x: TypedValue, idx_values: list, loc) -> TypedValue:
        """x[i] for an int TypedValue (used by `for row in x` and unpacking)."""
        spec, dyn = [], []
        for v in idx_values:
            if v.name is None:
                spec.append(f"i:{int(v.const)}")
            else:
                spec.append("i:$")
                dyn.append(v)
        return self.op("getitem", [x] + dyn, {"spec": spec}, loc)

    def getitem_items(self, x: TypedValue, items, loc):
        """x[items]: basic indexing (dg.getitem); with integer index tensors, NumPy's advanced
        indexing (dg.take for one 1-d tensor among slices, else dg.gather after the slices)."""
        spec, dyn = self.index_spec(items, x, loc)
        if spec is None:
            return POISON
        if "t:$" not in spec:
            return self.op("getitem", [x] + dyn, {"spec": spec}, loc)
        plan = self.advanced_plan(spec, dyn, x, loc)
        if plan is None:
            return POISON
        basic, basic_dyn, idx, axes, at = plan
        base = x if all(s == "s:::" for s in basic) else self.op("getitem", [x] + basic_dyn, {"spec": basic}, loc)
        if len(idx) == 1 and idx[0].rank == 1:
            return self.op("take", [base, idx[0]], {"axis": axes[0]}, loc)
        return self.op("gather", [base] + self.broadcast_indices(idx, loc), {"axes": axes, "at": at}, loc)

    def advanced_plan(self, spec, dyn, x: TypedValue, loc):
        """NumPy advanced indexing of x by (spec, dyn) with index tensors, as basic indexing then a
        gather: (basic spec, its operands, the index values (i64: integers among index tensors
        index too), the axes of the basic result they index, where their dims go (`at`)); None
        after an error."""
        parts, k = [], 0
        for s in spec:
            n = s.count("$")
            parts.append((s, dyn[k:k + n]))
            k += n
        adv = [i for i, (s, _) in enumerate(parts) if s[0] in "it"]
        adjacent = adv == list(range(adv[0], adv[-1] + 1))
        try:
            expand_spec(spec, x.rank)
        except ShapeError as e:
            self.error(str(e), loc)
            return None
        consumed = sum(1 for s, _ in parts if s[0] in "ist")
        fill = [("s:::", [])] * (x.rank - consumed)
        if "e" in spec:
            e = spec.index("e")
            parts[e:e + 1] = fill
        else:
            parts += fill
        basic, basic_dyn, idx, axes = [], [], [], []
        for i, (s, d) in enumerate(parts):
            if s[0] in "it":
                basic.append("s:::")
                axes.append(i)
                idx.append(self.const(int(s[2:]), "i64", loc) if s[2:] != "$" else self.cast(d[0], "i64", loc))
            else:
                basic.append(s)
                basic_dyn += d
        at = axes[0] if adjacent else 0
        return basic, basic_dyn, idx, tuple(axes), at

    def broadcast_indices(self, idx: list, loc) -> list:
        """The index tensors broadcast together (NumPy's rules, checked at run time): each plus
        the zeros of their broadcast shape."""
        if len({v.type.mlir() for v in idx}) == 1:
            return idx
        zero = self.const(0, "i64", loc)
        z = None
        for v in idx:
            m = self.op("mul", [v, zero], None, loc)
            z = m if z is None else self.op("add", [z, m], None, loc)
        return [self.op("add", [v, z], None, loc) for v in idx]

    def index_spec(self, items, x: TypedValue, loc):
        spec, dyn = [], []
        ok = True
        for it in items:
            if isinstance(it, A.EllipsisLit):
                spec.append("e")
            elif isinstance(it, A.Const) and it.value is None:
                spec.append("n")
            elif isinstance(it, A.Slice):
                parts = []
                for p in (it.lower, it.upper, it.step):
                    if p is None:
                        parts.append("")
                        continue
                    v = self.as_value(self.expr(p), loc)
                    if not isinstance(v, TypedValue) or v.poison:
                        ok = False
                        parts.append("")
                        continue
                    if v.rank != 0 or not (is_int(v.dtype) or is_bool(v.dtype)):
                        self.error(f"slice bounds must be integer scalars, got {v.type}", p.loc)
                        ok = False
                        parts.append("")
                        continue
                    if v.name is None:
                        parts.append(str(int(v.const)))
                    else:
                        parts.append("$")
                        dyn.append(self.cast(v, "i64", loc))
                spec.append("s:" + ":".join(parts))
            else:
                v = self.as_value(self.expr(it), loc)
                if is_tuple(v):
                    self.error("a tuple cannot be an index", it.loc)
                    ok = False
                    continue
                if not isinstance(v, TypedValue) or v.poison:
                    ok = False
                    continue
                if not (is_int(v.dtype) or (is_bool(v.dtype) and v.rank == 0)):
                    self.error(f"an index must be an integer, got {v.type}", it.loc)
                    ok = False
                    continue
                if v.rank == 0:
                    if v.name is None:
                        spec.append(f"i:{int(v.const)}")
                    else:
                        spec.append("i:$")
                        dyn.append(self.cast(v, "i64", loc))
                else:
                    spec.append("t:$")
                    dyn.append(v)
        return (spec, dyn) if ok else (None, None)

    def e_Slice(self, e):
        return self.error("a slice is only allowed inside [...]", e.loc)

    def e_EllipsisLit(self, e):
        return self.error("... is only allowed inside [...]", e.loc)
