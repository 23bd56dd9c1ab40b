"""Statements: assignments, returns, asserts, and the checks of declared types."""
from __future__ import annotations

from dg.core.types import Sym, TensorType, is_float, is_int, py_cast

from .. import ast as A
from .. import controlflow
from ..values import (POISON, ListVal, Str, TypedValue, Undefined, describe_structure, flatten, is_record, is_tuple,
                      same_structure, unflatten_like)


class Statements:
    # ------------------------------------------------------------ statements
    def block(self, stmts):
        for s in stmts:
            self.stmt(s)
            if "$return" in self.env:
                break

    def stmt(self, s):
        self.cur_loc = s.loc
        m = getattr(self, "s_" + type(s).__name__, None)
        if m is None:
            self.error(f"unsupported statement {type(s).__name__}", s.loc)
            return
        m(s)

    def s_Pass(self, s):
        pass

    def s_ExprStmt(self, s):
        self.expr(s.value)

    def s_Return(self, s):
        if isinstance(s.value, A.Name) and s.value.id == controlflow.RETVAL and \
                isinstance(self.env.get(s.value.id, Undefined("")), Undefined):
            s = A.Return(s.loc, None)  # no path returns a value (the end-of-function assert reports it)
        if s.value is None:
            self.env["$return"] = (None, [])
        else:
            v = self.expr(s.value)
            v = self.coerce_return(v, s.loc)
            flat = [self.materialize(x, loc=s.loc) for x in flatten(v)]
            for x in flat:
                if not isinstance(x, TypedValue):
                    self.error("a function can only return tensors or tuples of tensors", s.loc)
                    flat = [POISON]
            self.env["$return"] = (unflatten_like(v, flat), flat)
        self.env["$return_loc"] = s.loc

    def returned(self, v, loc):
        """The value an early return gives (`$retval = v`, controlflow's rewriting). A weak
        literal in it takes the element type of the result there: the declared one, or the one
        the function's other returns give (`if c: return 1.0` then `return sum(x)` of an f64
        x), which the module emitter finds by emitting the function again (`weak_returns`)."""
        if not (isinstance(v, TypedValue) or is_tuple(v)):
            return v
        flat = flatten(v)
        if self.spec.fd.returns is not None and self.spec.result_types:
            hints = [t.dtype for t in self.spec.result_types]
        else:
            hints = self.spec.return_dtypes or []
        out = []
        for i, x in enumerate(flat):
            if isinstance(x, TypedValue) and not x.poison and x.name is None and x.weak and x.rank == 0:
                dt = hints[i] if i < len(hints) else None
                if dt is not None and (is_float(dt) or (is_int(dt) and is_int(x.dtype))):
                    x = self.materialize(x, dt, loc)
                else:
                    self.weak_returns.add(i)
            elif isinstance(x, TypedValue) and not x.poison and x.name is not None:
                self.strong_returns.setdefault(i, set()).add(x.dtype)
            out.append(x)
        return unflatten_like(v, out) if is_tuple(v) else out[0]

    def coerce_return(self, v, loc):
        declared = self.spec.result_proto if self.spec.fd.returns is not None else None
        if declared is None:
            return self.as_value(v, loc)
        v = self.as_value(v, loc)
        if not same_structure(declared, v):
            self.error(f"the returned value does not match the declared return type ({describe_structure(v)} is "
                       f"returned, {describe_structure(declared)} declared)", loc)
            return POISON
        flat_d, flat_v = flatten(declared), flatten(v)
        if loc == self.fd.loc:  # the return controlflow adds for early returns: point at the type
            loc = getattr(self.spec.fd.returns, "loc", None) or loc
        bound = dict(self.sizes)  # a name only the return type has binds at its first use
        out = [self.coerce(x, d.type, loc, "the return value", bound) for x, d in zip(flat_v, flat_d)]
        return unflatten_like(v, out)

    def coerce(self, v, t: TensorType, loc, what: str, sizes: dict | None = None):
        """Check `v` against a declared type; weak literals take its element type. With `sizes`
        (size name -> (value, axis): this function's parameters', and those bound since), sizes
        not known to match are checked at run time (check_sizes)."""
        if not isinstance(v, TypedValue):
            v = self.as_value(v, loc)
        if v.poison or t is None:
            return v
        if v.name is None and v.weak:
            if is_float(v.dtype) and not is_float(t.dtype):
                return self.error(f"{what} is the float {v.const!r}, but {t} was declared", loc)
            if v.rank == 0 and t.rank == 0:
                return self.materialize(TypedValue(None, t, const=py_cast(v.const, t.dtype)), t.dtype, loc)
        if v.dtype != t.dtype:
            return self.error(f"{what} has type {v.type}, but {t} was declared", loc)
        if v.rank != t.rank:
            return self.error(f"{what} has type {v.type}, but {t} was declared (rank differs)", loc)
        for a, b in zip(v.type.shape, t.shape):
            if isinstance(a, int) and isinstance(b, int) and a != b:
                return self.error(f"{what} has type {v.type}, but {t} was declared", loc)
        if sizes is not None:
            self.check_sizes(v, t, loc, what, sizes)
        return v

    def check_sizes(self, v: TypedValue, t: TensorType, loc, what: str, sizes: dict) -> None:
        """Run-time checks that v's sizes are the declared ones where that is not known: a
        static size, or a name in `sizes`; a name not there yet binds to v's size."""
        for axis, (a, b) in enumerate(zip(v.type.shape, t.shape)):
            if isinstance(b, Sym) and b.name:
                src = sizes.get(b.name)
                if src is None:
                    sizes[b.name] = (v, axis)
                    continue
                if a is src[0].type.shape[src[1]]:  # that very size (a name alone can be a callee's)
                    continue
                want, shown = self.dim(src[0], src[1], loc), f"'{b.name}'"
            elif isinstance(b, int) and not isinstance(a, int):
                want, shown = self.const(b, "i64", loc), str(b)
            else:
                continue
            same = self.op("eq", [self.dim(v, axis, loc), want], {}, loc)
            self.op("check", [same], {"msg": f"{what} has the wrong size in axis {axis}: "
                                              f"{t} was declared, so it must be {shown}"}, loc)

    def s_Assert(self, s):
        c = self.cond_value(s.test, s.loc)
        msg = ""
        if s.msg is not None:
            m = self.expr(s.msg)
            if isinstance(m, Str):
                msg = m.value
            else:
                self.error("an assert message must be a string literal", s.msg.loc)
        self.op("assert", [c], {"msg": msg}, s.loc)

    def s_AnnAssign(self, s):
        t = self.type_from_annotation(s.annotation, s.annotation.loc)
        v = self.expr(s.value)
        v = self.coerce(v, t, s.loc, f"'{s.target.id}'", dict(self.sizes))
        self.bind(s.target, v, s.loc)

    def s_Assign(self, s):
        v = self.expr(s.value)
        if any(isinstance(t, A.Name) and t.id == controlflow.RETVAL for t in s.targets):
            v = self.returned(v, s.loc)
        for t in s.targets:
            self.assign_target(t, v, s.loc)

    def assign_target(self, target, v, loc):
        if isinstance(target, A.Name):
            self.bind(target, v, loc)
        elif isinstance(target, (A.Tuple, A.List)):
            if isinstance(v, ListVal):
                v = tuple(v.items)
            if isinstance(v, TypedValue) and not v.poison and v.rank >= 1 and isinstance(v.type.shape[0], int):
                v = tuple(self.getitem(v, [self.weak(i)], loc) for i in range(v.type.shape[0]))
            if isinstance(v, TypedValue) and v.poison:
                v = (POISON,) * len(target.elts)
            if not is_tuple(v):
                self.error("cannot unpack a non-tuple value", loc)
                v = (POISON,) * len(target.elts)
            if len(v) != len(target.elts):
                self.error(f"cannot unpack {len(v)} values into {len(target.elts)} names", loc)
                v = (POISON,) * len(target.elts)
            for t, x in zip(target.elts, v):
                self.assign_target(t, x, loc)
        elif isinstance(target, A.Subscript):
            self.assign_subscript(target, v, loc)
        else:
            self.error("cannot assign to this expression", target.loc)

    def bind(self, target: A.Name, v, loc):
        name = target.id
        if isinstance(v, TypedValue) and v.name is not None and not v.poison and not name.startswith("$"):
            self.name_location(v, name)
        self.env[name] = v  # a ListVal stays a list display until used as a value

    def assign_subscript(self, target: A.Subscript, v, loc):
        """`x[i] = e` on an array, `p["w"] = e` on a record (nested: `p["l1"]["w"][0] = e`): rebinds
        the variable to a copy with that part replaced."""
        chain, base = [], target
        while isinstance(base, A.Subscript):
            chain.insert(0, base)
            base = base.value
        if not isinstance(base, A.Name):
            self.error("only a variable can be updated by index (x[i] = e)", target.loc)
            return
        x = self.lookup(base)
        r = self.updated(x, chain, v, loc, base.id)
        if r is not None:
            self.env[base.id] = r

    def updated(self, x, chain: list, v, loc, name: str):
        """x with the part that the subscripts `chain` select replaced by v; None after an error."""
        sub = chain[0]
        if isinstance(x, ListVal):  # a list display: updated as the array it stands for
            x = self.as_value(x, loc)
        if is_record(x):
            key = self.record_key(x, sub, must_exist=len(chain) > 1)
            if key is None:
                return None
            new = v if len(chain) == 1 else self.updated(x.get(key), chain[1:], v, loc, name)
            return None if new is None else x.replaced(key, self.as_value(new, loc))
        if is_tuple(x):
            self.error(f"'{name}' is a tuple, which cannot be updated by index (as in Python); build a new one",
                       sub.loc)
            return None
        if not isinstance(x, TypedValue):
            self.error(f"'{name}' cannot be updated by index: it is not an array", sub.loc)
            return None
        if x.poison:
            return None
        if len(chain) > 1:
            self.error("an array is updated by one subscript (x[i, j] = e, not x[i][j] = e)", sub.loc)
            return None
        v = self.as_value(v, loc)
        if isinstance(v, TypedValue) and not v.poison:
            v = self.materialize(v, x.dtype, loc) if v.name is None else self.cast(v, x.dtype, loc)
        spec, dyn = self.index_spec(sub.items, x, loc)
        if spec is None:
            return None
        if "t:$" in spec:
            return self.assign_indexed(x, v, spec, dyn, loc, name)
        return self.op("setitem", [x, v] + dyn, {"spec": spec}, loc, name=name)

    def assign_indexed(self, x, v, spec, dyn, loc, name):
        """x with x[spec] = v through integer index tensors (dg.index_put: NumPy's semantics, the last
        write winning where indices repeat); POISON after an error."""
        plan = self.advanced_plan(spec, dyn, x, loc)
        if plan is None:
            return POISON
        basic, _, idx, axes, at = plan
        if any(s != "s:::" for s in basic):
            self.error("assignment through index tensors takes only integers, index tensors, full slices (:) and "
                       "... in its subscript; use where()", loc)
            return POISON
        return self.op("index_put", [x, v] + self.broadcast_indices(idx, loc), {"axes": axes, "at": at}, loc, name=name)

    def s_AugAssign(self, s):
        if isinstance(s.target, A.Name):
            cur = self.lookup(s.target)
            rhs = self.expr(s.value)
            self.env[s.target.id] = self.binop(s.op, cur, rhs, s.loc)  # as `x = x op e`, like Python
        elif isinstance(s.target, A.Subscript):
            cur = self.expr(s.target)
            rhs = self.expr(s.value)
            r = self.binop(s.op, cur, rhs, s.loc)
            self.assign_subscript(s.target, r, s.loc)
        else:
            self.error("cannot assign to this expression", s.loc)
