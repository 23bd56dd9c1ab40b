"""The built-in functions of LANGUAGE.md §2, as emitters of dg ops.

Each entry takes the emitter, the call node and its bound arguments, and
emits one op or a small composition of ops. Arguments that must be known at
compile time (axes, dtypes, keepdims) are read here; sizes may be run-time
values and travel as operands.
"""
from __future__ import annotations

import numpy as np

from dg.core.mpi import GROUPS
from dg.core.types import DTYPES, ShapeError, is_bool, is_float, is_int, promote, py_cast, scalar
from dg.dialects import OPS
from dg.dialects.helpers import DYN

from . import ast as A
from .values import (POISON, CheckpointRef, FuncRef, GradRef, PackedList, VmapRef, ListVal, Pullback, Str, TypedValue, describe_structure,
                     flatten, is_tuple, same_structure, unflatten_like)

_MISSING = object()


class _Args:
    def __init__(self, em, call, name, params, defaults, static=()):
        self.ok = True
        self.vals = {}
        self.ast = {}
        self.loc = call.loc
        self.em = em
        given = {}
        if len(call.args) > len(params):
            em.error(f"{name}() takes at most {len(params)} arguments ({len(call.args)} given)", call.loc)
            self.ok = False
            return
        for p, a in zip(params, call.args):
            given[p] = a
        for k in call.kwargs:
            if k.name not in params:
                em.error(f"{name}() has no argument '{k.name}'", k.loc)
                self.ok = False
                return
            if k.name in given:
                em.error(f"{name}() got two values for '{k.name}'", k.loc)
                self.ok = False
                return
            given[k.name] = k.value
        for p in params:
            if p in given:
                self.ast[p] = given[p]
                if p in static:
                    self.vals[p] = given[p]
                else:
                    self.vals[p] = em.expr(given[p])
            elif p in defaults:
                self.vals[p] = defaults[p]
            else:
                em.error(f"{name}() is missing the argument '{p}'", call.loc)
                self.ok = False
        for p in static:
            node = self.vals.get(p)
            if isinstance(node, A.Const) and node.value is None:
                self.vals[p] = None  # an explicit None means the default behaviour (e.g. axis=None)
        if self.ok:
            for p in params:
                v = self.vals.get(p)
                if isinstance(v, TypedValue) and v.poison:
                    self.ok = False

    def __getitem__(self, k):
        return self.vals[k]

    def static(self, k):
        """A static argument's value: its expression evaluated where the call wrote one, else its
        default as it is."""
        v = self.vals[k]
        return self.em.expr(v) if isinstance(v, A.Node) else v

    def tensors(self, *keys):
        """The named arguments as tensors; None if any is missing, poison or not a tensor."""
        if not self.ok:
            return None
        out = [tensor(self.em, self.vals[k], self.loc) for k in keys]
        return None if any(v.poison for v in out) else out

    def materialized(self, k):
        """Argument k as a tensor the op can take (materialized); None (an error said) if the call
        or the argument is bad."""
        if not self.ok:
            return None
        x = self.em.materialize(tensor(self.em, self.vals[k], self.loc), loc=self.loc)
        return None if x.poison else x

    def axis_of(self, x):
        """The static `axis` argument as an axis of x (negative ones counted from the end); None
        (an error said) if it is not a constant or x has no such axis."""
        v = self.vals["axis"]
        axis = v if isinstance(v, int) else static_int(self.em, self.em.expr(v), self.loc_of("axis"), "axis")
        if axis is None:
            return None
        if x.rank == 0 or not -x.rank <= axis < x.rank:
            self.em.error(f"axis {axis} is out of range for {x.type}", self.loc_of("axis"))
            return None
        return axis % x.rank

    def loc_of(self, k):
        a = self.ast.get(k)
        return a.loc if a is not None else self.loc


def tensor_arguments(em, call, name, *params):
    """The arguments of a built-in whose parameters are all tensors, as tensors; None (an error
    said) if one is missing, poison or not a tensor."""
    return _Args(em, call, name, list(params), {}).tensors(*params)


def one_tensor(em, call, name, param):
    """The one argument of a built-in of one parameter, as a tensor; None (an error said) if it is
    missing, poison or not a tensor."""
    t = tensor_arguments(em, call, name, param)
    return None if t is None else t[0]


def tensor(em, v, loc, what="argument"):
    v = em.as_value(v, loc)
    if isinstance(v, TypedValue):
        return v
    em.error(f"{what} must be a tensor", loc)
    return POISON


def static_int(em, v, loc, what):
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, TypedValue) and not v.poison and v.name is None and isinstance(v.const, int) and not isinstance(v.const, bool):
        return v.const
    if isinstance(v, TypedValue) and v.poison:
        return None
    em.error(f"{what} must be a constant integer", loc)
    return None


def static_axes(em, v, rank, loc, what="axis"):
    """None -> every axis; int or tuple of ints -> normalized sorted list."""
    if v is None:
        return list(range(rank))
    items = list(v) if is_tuple(v) or isinstance(v, (list, tuple)) else (
        v.items if isinstance(v, ListVal) else [v])
    out = []
    for it in items:
        a = static_int(em, it, loc, what)
        if a is None:
            return None
        if not -rank <= a < max(rank, 1) or (rank == 0):
            if rank == 0 and a in (0, -1):
                continue
            em.error(f"{what} {a} is out of range for a tensor of rank {rank}", loc)
            return None
        a %= rank
        if a in out:
            em.error(f"repeated {what} {a}", loc)
            return None
        out.append(a)
    return sorted(out)


def static_dtype(em, node, loc, default="f32"):
    if node is None:
        return default
    if isinstance(node, str):
        return node
    if isinstance(node, A.Name) and node.id in DTYPES and node.id != "u64":
        return node.id
    if isinstance(node, A.Attribute) and isinstance(node.value, A.Name) and node.attr in DTYPES:
        return node.attr
    if isinstance(node, A.Attribute) and node.attr == "dtype":  # x.dtype: the element type of a tensor
        v = em.as_value(em.expr(node.value), loc)
        if isinstance(v, TypedValue) and not v.poison:
            return v.dtype
        if isinstance(v, TypedValue):
            return None
    if isinstance(node, A.Const) and isinstance(node.value, str) and node.value in DTYPES:
        return node.value
    em.error("dtype must be one of f32, f64, f16, bf16, i32, i64, bool", loc)
    return None


def shape_operands(em, v, loc):
    """A shape ([n, 3], (n, 3), x.shape, or a single int) -> (attr list with -2, dynamic operands)."""
    if isinstance(v, ListVal):
        items = v.items
    elif is_tuple(v):
        items = list(v)
    elif isinstance(v, TypedValue) and not v.poison and v.rank == 0:
        items = [v]
    elif isinstance(v, TypedValue) and not v.poison and v.rank == 1 and v.name is None:
        items = [em.weak(int(x)) for x in np.asarray(v.const)]
    else:
        if not (isinstance(v, TypedValue) and v.poison):
            em.error("a shape must be a list or tuple of integers such as [n, 3]", loc)
        return None, None
    attr, dyn = [], []
    for it in items:
        it = em.as_value(it, loc)
        if not isinstance(it, TypedValue) or it.poison:
            if not isinstance(it, TypedValue):
                em.error("a shape entry must be an integer", loc)
            return None, None
        if it.rank != 0 or not (is_int(it.dtype) or is_bool(it.dtype)):
            em.error(f"a shape entry must be an integer scalar, got {it.type}", loc)
            return None, None
        if it.name is None:
            if int(it.const) < -1:  # (-1: a size to infer, where the op allows one)
                em.error(f"a shape entry cannot be negative, got {int(it.const)}", loc)
                return None, None
            attr.append(int(it.const))
        else:
            attr.append(DYN)
            dyn.append(em.cast(it, "i64", loc))
    return attr, dyn


# ------------------------------------------------------------------ handlers
def _weak_fold(em, opname: str, xs, float_only: bool):
    """A built-in of weak literals only is a weak literal too (as `1.0 + 2.0` is), so that it
    takes the element type of what it meets: in f64 code `sin(0.1)` is an f64, computed once
    here in f64 (Python's floats) and rounded where it lands. None where it does not fold: an
    operand that is not a weak literal, or an integer result i64 cannot hold."""
    if not all(x.name is None and x.weak and x.rank == 0 and not x.poison for x in xs):
        return None
    floats = float_only or any(is_float(x.dtype) for x in xs)
    dtype = np.float64 if floats else (np.int64 if any(is_int(x.dtype) for x in xs) else np.bool_)
    with np.errstate(all="ignore"):
        try:
            r = np.asarray(OPS[opname].impl(*(np.asarray(x.const, dtype) for x in xs)))
        except (ArithmeticError, ValueError, OverflowError):
            return None
    if r.shape != () or r.dtype.kind not in "fib":
        return None
    value = r.item()
    if isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value < 1 << 63:
        return None
    return em.weak(value)


def _float_only(opname) -> bool:
    """Whether a unary op of the registry takes float tensors only."""
    try:
        OPS[opname].infer([scalar("i64")])
        return False
    except ShapeError:
        return True


def _apply_unary(em, opname, x, loc):
    """The unary op `opname` of tensor x: an int or bool x, or a literal, becomes f32 where the
    op's rule takes floats only; weak literals fold (_weak_fold)."""
    float_only = _float_only(opname)
    folded = _weak_fold(em, opname, [x], float_only)
    if folded is not None:
        return folded
    if x.name is None:
        x = em.materialize(x, "f32" if float_only else None, loc)
    if is_bool(x.dtype) or (is_int(x.dtype) and float_only):
        x = em.cast(x, "f32", loc)
    return em.op(opname, [x], loc=loc)


def _unary(opname):
    """A unary op of the registry as a built-in of one argument."""
    def h(em, call, name):
        x = one_tensor(em, call, name, "x")
        return POISON if x is None else _apply_unary(em, opname, x, call.loc)

    return h


_GELU_OPS = {"none": "gelu", "tanh": "gelu_tanh"}


def _gelu(em, call, name):
    """gelu(x, approximate="none"): exact, x * Phi(x) (op `gelu`); approximate="tanh": the tanh
    form (op `gelu_tanh`), as PyTorch's."""
    a = _Args(em, call, name, ["x", "approximate"], {"approximate": "none"}, static=("approximate",))
    if not a.ok:
        return POISON
    v = a.static("approximate")
    mode = v.value if isinstance(v, Str) else v if isinstance(v, str) else None
    if mode not in _GELU_OPS:
        em.error('gelu: approximate must be "none" or "tanh"', a.loc_of("approximate"))
        return POISON
    t = a.tensors("x")
    if t is None:
        return POISON
    return _apply_unary(em, _GELU_OPS[mode], t[0], call.loc)


def _binary(opname):
    def h(em, call, name):
        t = tensor_arguments(em, call, name, "a", "b")
        if t is None:
            return POISON
        x, y = t
        folded = _weak_fold(em, opname, [x, y], False)
        if folded is not None:
            return folded
        dt = em.result_dtype(x, y)
        if opname == "pow" and not is_float(dt):
            return em.binop("**", x, y, call.loc)
        return em.op(opname, [em.materialize(x, dt, call.loc), em.materialize(y, dt, call.loc)], loc=call.loc)

    return h


def _where(em, call, name):
    a = _Args(em, call, name, ["c", "a", "b"], {})
    if not a.ok:
        return POISON
    c, x, y = (tensor(em, a[k], call.loc) for k in ("c", "a", "b"))
    if c.poison or x.poison or y.poison:
        return POISON
    if c.name is None:
        c = em.materialize(c, "bool", call.loc)
    if not is_bool(c.dtype):
        c = em.op("ne", [c, em.const(0, c.dtype, call.loc)], loc=call.loc)
    dt = em.result_dtype(x, y)
    return em.op("where", [c, em.materialize(x, dt, call.loc), em.materialize(y, dt, call.loc)], loc=call.loc)


def _clip(em, call, name):
    a = _Args(em, call, name, ["x", "lo", "hi"], {})
    if not a.ok:
        return POISON
    x = tensor(em, a["x"], call.loc)
    lo, hi = tensor(em, a["lo"], call.loc), tensor(em, a["hi"], call.loc)
    if x.poison or lo.poison or hi.poison:
        return POISON
    r = em.op("maximum", [em.materialize(x, em.result_dtype(x, lo), call.loc),
                          em.materialize(lo, em.result_dtype(x, lo), call.loc)], loc=call.loc)
    if r.poison:
        return r
    dt = em.result_dtype(r, hi)
    return em.op("minimum", [em.materialize(r, dt, call.loc), em.materialize(hi, dt, call.loc)], loc=call.loc)


def _reduction(opname):
    def h(em, call, name):
        a = _Args(em, call, name, ["x", "axis", "keepdims"], {"axis": None, "keepdims": False},
                  static=("axis", "keepdims"))
        if not a.ok:
            return POISON
        x = tensor(em, a["x"], call.loc)
        if x.poison:
            return POISON
        x = em.materialize(x, loc=call.loc)
        axis = a["axis"]
        if isinstance(axis, A.Node):
            axis = em.expr(axis)
            if isinstance(axis, TypedValue) and axis.poison:
                return POISON
            if isinstance(axis, TypedValue) and axis.name is None and axis.const is None:
                axis = None
        if isinstance(a.ast.get("axis"), A.Const) and a.ast["axis"].value is None:
            axis = None
        keep = a["keepdims"]
        if isinstance(keep, A.Node):
            keep = em.expr(keep)
            if not (isinstance(keep, TypedValue) and keep.name is None and isinstance(keep.const, bool)):
                em.error("keepdims must be True or False", a.loc_of("keepdims"))
                return POISON
            keep = keep.const
        axes = static_axes(em, axis, x.rank, a.loc_of("axis"))
        if axes is None:
            return POISON
        if opname in ("argmax", "argmin") and len(axes) > 1 and len(axes) != x.rank:
            em.error(f"{opname} takes a single axis or None", call.loc)
            return POISON
        if opname in ("mean", "var", "logsumexp") and not is_float(x.dtype):
            x = em.cast(x, "f32", call.loc)
        if opname in ("sum", "prod") and is_bool(x.dtype):
            x = em.cast(x, "i64", call.loc)
        if opname in ("any", "all"):  # how many are true, or whether all are (1 for none), then a bool
            x = em.cast(x if is_bool(x.dtype) else em.cast(x, "bool", call.loc), "i64", call.loc)
            r = em.op("sum" if opname == "any" else "prod", [x], {"axes": axes, "keepdims": bool(keep)}, call.loc)
            return r if r.poison else em.cast(r, "bool", call.loc)
        return em.op(opname, [x], {"axes": axes, "keepdims": bool(keep)}, call.loc)

    return h


def _creation(fill):
    def h(em, call, name):
        a = _Args(em, call, name, ["shape", "dtype"], {"dtype": None}, static=("dtype",))
        if not a.ok:
            return POISON
        dt = static_dtype(em, a["dtype"], a.loc_of("dtype"))
        attr, dyn = shape_operands(em, a["shape"], a.loc_of("shape"))
        if attr is None or dt is None:
            return POISON
        return em.op("full", [em.const(fill, dt, call.loc)] + dyn, {"shape": attr}, call.loc)

    return h


def _full(em, call, name):
    a = _Args(em, call, name, ["shape", "value", "dtype"], {"dtype": None}, static=("dtype",))
    t = a.tensors("value")
    if t is None:
        return POISON
    v, = t
    if v.rank != 0:
        em.error(f"full() needs a scalar fill value, got {v.type}", call.loc)
        return POISON
    dt = static_dtype(em, a["dtype"], a.loc_of("dtype"), default=None) if a["dtype"] is not None else None
    v = em.materialize(v, dt, call.loc) if v.name is None else (em.cast(v, dt, call.loc) if dt else v)
    attr, dyn = shape_operands(em, a["shape"], a.loc_of("shape"))
    if attr is None:
        return POISON
    return em.op("full", [v] + dyn, {"shape": attr}, call.loc)


def _like(fill):
    """zeros_like(x) and ones_like(x), of a tensor or, leaf by leaf, of a structure."""
    def h(em, call, name):
        a = _Args(em, call, name, ["x", "dtype"], {"dtype": None}, static=("dtype",))
        if not a.ok:
            return POISON
        x = em.as_value(a["x"], call.loc)
        leaves = [tensor(em, v, call.loc) for v in flatten(x)]
        if any(v.poison for v in leaves):
            return POISON
        out = []
        for v in leaves:
            dt = static_dtype(em, a["dtype"], call.loc, default=v.dtype) if a["dtype"] is not None else v.dtype
            attr, dyn = [], []
            for i, d in enumerate(v.type.shape):
                if isinstance(d, int):
                    attr.append(d)
                else:
                    attr.append(DYN)
                    dyn.append(em.op("dim", [v], {"axis": i}, call.loc))
            out.append(em.op("full", [em.const(fill, dt, call.loc)] + dyn, {"shape": attr}, call.loc))
        return unflatten_like(x, out)

    return h


def _tree_map(em, call, name):
    """tree_map(f, t1, t2, ..., **kwargs): f(leaf of t1, leaf of t2, ..., **kwargs) for each leaf
    position of structures of one shape, in a structure of that shape."""
    fn = _function_arg(em, call, name)
    if fn is None:
        return POISON
    if len(call.args) < 2:
        em.error("tree_map() takes a function and at least one structure", call.loc)
        return POISON
    trees = [em.as_value(em.expr(a), a.loc) for a in call.args[1:]]
    kwargs = {k.name: (em.expr(k.value), k.loc) for k in call.kwargs}
    for t, node in zip(trees[1:], call.args[2:]):
        if not same_structure(t, trees[0]):
            em.error(f"tree_map(): the structures differ: {describe_structure(trees[0])} and "
                     f"{describe_structure(t)}", node.loc)
            return POISON
    columns = list(zip(*[flatten(t) for t in trees]))
    out = []
    for leaves in columns:
        r = em.call_user(fn, list(leaves), kwargs, call.loc)
        if isinstance(r, TypedValue) and r.poison:
            return POISON
        out.append(r)
    return unflatten_like(trees[0], out)


def _tree_leaves(em, call, name):
    """tree_leaves(t): the leaves of a structure, in order (records by sorted key), as a tuple."""
    a = _Args(em, call, name, ["t"], {})
    if not a.ok:
        return POISON
    return tuple(flatten(em.as_value(a["t"], call.loc)))


def _arange(em, call, name):
    a = _Args(em, call, name, ["start", "stop", "step", "dtype"], {"stop": None, "step": None, "dtype": None},
              static=("dtype",))
    if not a.ok:
        return POISON
    vals = [a["start"], a["stop"], a["step"]]
    if vals[1] is None:
        vals = [em.weak(0), vals[0], em.weak(1)]
    elif vals[2] is None:
        vals[2] = em.weak(1)
    vals = [tensor(em, v, call.loc) for v in vals]
    if any(v.poison for v in vals):
        return POISON
    floaty = any(is_float(v.dtype) for v in vals)
    dt = static_dtype(em, a["dtype"], call.loc, default="f32" if floaty else "i64") if a["dtype"] is not None \
        else ("f32" if floaty else "i64")
    if floaty:
        em.error("arange() takes integer arguments in dg", call.loc)
        return POISON
    if all(v.name is None for v in vals):
        if vals[2].const == 0:
            em.error("arange() step must not be zero", call.loc)
            return POISON
        size = len(range(vals[0].const, vals[1].const, vals[2].const))
    else:
        size = DYN
    ops = [em.materialize(v, "i64", call.loc) if v.name is None else em.cast(v, "i64", call.loc) for v in vals]
    return em.op("arange", ops, {"size": size, "dtype": dt}, call.loc)


def _eye(em, call, name):
    a = _Args(em, call, name, ["n", "dtype"], {"dtype": None}, static=("dtype",))
    if not a.ok:
        return POISON
    n = tensor(em, a["n"], call.loc)
    dt = static_dtype(em, a["dtype"], call.loc)
    if n.poison or dt is None:
        return POISON
    if n.rank or not is_int(n.dtype):
        em.error(f"eye() takes an integer size, got {n.type}", call.loc)
        return POISON
    size = n.const if n.name is None else DYN
    return em.op("eye", [em.materialize(n, "i64", call.loc)], {"size": size, "dtype": dt}, call.loc)


def _to_shape(opname):
    """reshape(x, shape) and broadcast_to(x, shape): sizes may be run-time values."""
    def h(em, call, name):
        a = _Args(em, call, name, ["x", "shape"], {})
        if not a.ok:
            return POISON
        x = em.materialize(tensor(em, a["x"], call.loc), loc=call.loc)
        attr, dyn = shape_operands(em, a["shape"], a.loc_of("shape"))
        if attr is None or x.poison:
            return POISON
        return em.op(opname, [x] + dyn, {"shape": attr}, call.loc)

    return h


def _transpose(em, call, name):
    a = _Args(em, call, name, ["x", "perm"], {"perm": None}, static=("perm",))
    x = a.materialized("x")
    perm = None if x is None else _perm(em, a, x)
    return POISON if perm is None else em.op("transpose", [x], {"perm": perm}, call.loc)


def _perm(em, a, x):
    """transpose's `perm` argument as axes of x (reversed when not given); None (an error said)
    where it is not a list of constant axes."""
    if a["perm"] is None:
        return list(range(x.rank))[::-1]
    pv = em.expr(a["perm"])
    items = pv.items if isinstance(pv, ListVal) else (list(pv) if is_tuple(pv) else None)
    if items is None:
        em.error("perm must be a list of axes", a.loc_of("perm"))
        return None
    perm = [static_int(em, i, a.loc_of("perm"), "an axis") for i in items]
    if any(p is None for p in perm):
        return None
    return [p % x.rank if x.rank else p for p in perm]


def _expand_dims(em, call, name):
    a = _Args(em, call, name, ["x", "axis"], {}, static=("axis",))
    x = a.materialized("x")
    if x is None:
        return POISON
    av = em.expr(a["axis"])
    items = av.items if isinstance(av, ListVal) else (list(av) if is_tuple(av) else [av])
    n = x.rank + len(items)
    axes = []
    for it in items:
        k = static_int(em, it, a.loc_of("axis"), "axis")
        if k is None:
            return POISON
        if not -n <= k < n:
            em.error(f"axis {k} is out of range for the rank-{n} result", a.loc_of("axis"))
            return POISON
        axes.append(k % n)
    return em.op("expand_dims", [x], {"axes": sorted(axes)}, call.loc)


def _squeeze(em, call, name):
    a = _Args(em, call, name, ["x", "axis"], {"axis": None}, static=("axis",))
    x = a.materialized("x")
    if x is None:
        return POISON
    if a["axis"] is None:
        axes = [i for i, d in enumerate(x.type.shape) if isinstance(d, int) and d == 1]
    else:
        axes = static_axes(em, em.expr(a["axis"]), x.rank, a.loc_of("axis"))
        if axes is None:
            return POISON
    return em.op("squeeze", [x], {"axes": axes}, call.loc)


def _join(opname):
    def h(em, call, name):
        a = _Args(em, call, name, ["xs", "axis"], {"axis": 0}, static=("axis",))
        if not a.ok:
            return POISON
        xs = a["xs"]
        items = xs.items if isinstance(xs, ListVal) else (list(xs) if is_tuple(xs) else None)
        if not items:
            em.error(f"{name}() needs a non-empty list of tensors", a.loc_of("xs"))
            return POISON
        vals = [tensor(em, v, call.loc) for v in items]
        if any(v.poison for v in vals):
            return POISON
        strong = [v.dtype for v in vals if v.name is not None]
        dt = strong[0] if strong else vals[0].dtype
        for d in strong[1:]:
            dt = promote(dt, d)
        vals = [em.materialize(v, dt, call.loc) if v.name is None else em.cast(v, dt, call.loc) for v in vals]
        axis_v = a["axis"]
        axis = axis_v if isinstance(axis_v, int) else static_int(em, em.expr(axis_v), a.loc_of("axis"), "axis")
        if axis is None:
            return POISON
        rank = vals[0].rank + (1 if opname == "stack" else 0)
        if rank == 0 or not -rank <= axis < rank:
            em.error(f"axis {axis} is out of range for {name}() of rank-{vals[0].rank} tensors", a.loc_of("axis"))
            return POISON
        axis %= rank
        if opname == "stack":
            return em.stack(vals, axis, call.loc)
        # A chain of two-operand concats (IRDL variadics hold one type; shapes differ here).
        out = vals[0]
        for v in vals[1:]:
            out = em.op("concat", [out, v], {"axis": axis}, call.loc)
        return out

    return h


def _take(em, call, name):
    a = _Args(em, call, name, ["x", "idx", "axis"], {"axis": 0}, static=("axis",))
    if not a.ok:
        return POISON
    x = em.materialize(tensor(em, a["x"], call.loc), loc=call.loc)
    idx = em.materialize(tensor(em, a["idx"], call.loc), loc=call.loc)
    if x.poison or idx.poison:
        return POISON
    axis = a.axis_of(x)
    if axis is None:
        return POISON
    return em.op("take", [x, idx], {"axis": axis}, call.loc)


def _len(em, call, name):
    a = _Args(em, call, name, ["x"], {})
    if not a.ok:
        return POISON
    x = a["x"]
    if isinstance(x, PackedList):
        return em.list_len(x, call.loc)
    if is_tuple(x):
        return em.weak(len(x))
    if isinstance(x, ListVal):
        return em.weak(len(x.items))
    x = tensor(em, x, call.loc)
    if x.poison:
        return POISON
    if x.rank == 0:
        em.error("len() of a scalar", call.loc)
        return POISON
    return em.shape_dim(x, 0, call.loc)


def _matmul(em, call, name):
    a = _Args(em, call, name, ["a", "b"], {})
    if not a.ok:
        return POISON
    return em.binop("@", a["a"], a["b"], call.loc)


def _dot(em, call, name):
    t = tensor_arguments(em, call, name, "a", "b")
    if t is None:
        return POISON
    x, y = t
    if x.rank == 0 or y.rank == 0:
        return em.binop("*", x, y, call.loc)
    if x.rank > 2 or y.rank > 2:
        em.error("dot() takes tensors of rank 1 or 2; use matmul for batches", call.loc)
        return POISON
    return em.binop("@", x, y, call.loc)


def _outer(em, call, name):
    t = tensor_arguments(em, call, name, "a", "b")
    if t is None:
        return POISON
    x, y = t
    dt = em.result_dtype(x, y)
    x, y = em.materialize(x, dt, call.loc), em.materialize(y, dt, call.loc)
    if x.rank != 1 or y.rank != 1:
        em.error(f"outer() takes two vectors, got {x.type} and {y.type}", call.loc)
        return POISON
    return em.op("outer", [x, y], loc=call.loc)


def _axis_op(opname):
    def h(em, call, name):
        a = _Args(em, call, name, ["x", "axis"], {"axis": -1}, static=("axis",))
        t = a.tensors("x")
        if t is None:
            return POISON
        x, = t
        if x.name is None:  # a literal: f32 (a float tensor keeps its dtype)
            x = em.materialize(x, "f32", call.loc)
        if not is_float(x.dtype):
            x = em.cast(x, "f32", call.loc)
        axis = a.axis_of(x)
        if axis is None:
            return POISON
        return em.op(opname, [x], {"axis": axis}, call.loc)

    return h


def _cross_entropy(em, call, name):
    t = tensor_arguments(em, call, name, "logits", "labels")
    if t is None:
        return POISON
    lg, lb = t
    return em.op("cross_entropy", [em.materialize(lg, loc=call.loc), em.materialize(lb, loc=call.loc)], loc=call.loc)


def _mse(em, call, name):
    a = _Args(em, call, name, ["a", "b"], {})
    if not a.ok:
        return POISON
    d = em.binop("-", a["a"], a["b"], call.loc)
    if d.poison:
        return POISON
    sq = em.binop("*", d, d, call.loc)
    if not is_float(sq.dtype):
        sq = em.cast(sq, "f32", call.loc)
    return em.op("mean", [sq], {"axes": list(range(sq.rank)), "keepdims": False}, call.loc)


def _layer_norm(em, call, name):
    a = _Args(em, call, name, ["x", "g", "b", "eps"], {"eps": 1e-5})
    t = a.tensors("x")
    if t is None:
        return POISON
    x, = t
    if x.rank == 0:
        em.error("layer_norm() needs a tensor of rank >= 1", call.loc)
        return POISON
    loc = call.loc
    eps = a["eps"] if isinstance(a["eps"], TypedValue) else em.weak(a["eps"])
    last = [x.rank - 1]
    mu = em.op("mean", [x], {"axes": last, "keepdims": True}, loc)
    var = em.op("var", [x], {"axes": last, "keepdims": True}, loc)
    xc = em.binop("-", x, mu, loc)
    inv = em.op("rsqrt", [em.binop("+", var, eps, loc)], loc=loc)
    y = em.binop("*", xc, inv, loc)
    y = em.binop("*", y, a["g"], loc)
    return em.binop("+", y, a["b"], loc)


def _dropout(em, call, name):
    a = _Args(em, call, name, ["x", "p", "key"], {})
    if not a.ok:
        return POISON
    x, p, k = tensor(em, a["x"], call.loc), tensor(em, a["p"], call.loc), tensor(em, a["key"], call.loc)
    if x.poison or p.poison or k.poison:
        return POISON
    loc = call.loc
    if p.name is None and p.const == 0:
        return x
    attr, dyn = [], []
    for i, d in enumerate(x.type.shape):
        attr.append(d if isinstance(d, int) else DYN)
        if not isinstance(d, int):
            dyn.append(em.op("dim", [x], {"axis": i}, loc))
    u = em.op("uniform", [k] + dyn, {"shape": attr, "dtype": x.dtype}, loc)
    keep = em.binop(">=", u, p, loc)
    scaled = em.binop("/", x, em.binop("-", em.weak(1.0), p, loc), loc)
    return em.op("where", [keep, em.materialize(scaled, x.dtype, loc), em.const(0, x.dtype, loc)], loc=loc)


def _cast_to(dt):
    def h(em, call, name):
        x = one_tensor(em, call, name, "x")
        if x is None:
            return POISON
        if x.name is None:
            if dt in ("f32", "f64", "f16", "bf16", "i32", "i64", "bool") and x.rank == 0:
                return em.materialize(TypedValue(None, scalar(dt), const=py_cast(x.const, dt)), dt, call.loc)
        return em.cast(x, dt, call.loc)

    return h


def _key(em, call, name):
    s = one_tensor(em, call, name, "seed")
    if s is None:
        return POISON
    if not is_int(s.dtype) or s.rank:
        em.error(f"key() takes an integer seed, got {s.type}", call.loc)
        return POISON
    return em.op("key", [em.cast(em.materialize(s, "i64", call.loc), "i64", call.loc)], loc=call.loc)


def _split(em, call, name):
    k = one_tensor(em, call, name, "key")
    if k is None:
        return POISON
    r = em.op("split", [k], loc=call.loc)
    return tuple(r) if isinstance(r, list) else POISON


def _random(opname):
    def h(em, call, name):
        a = _Args(em, call, name, ["key", "shape", "dtype"], {"dtype": None}, static=("dtype",))
        if not a.ok:
            return POISON
        k = tensor(em, a["key"], call.loc)
        dt = static_dtype(em, a["dtype"], a.loc_of("dtype"))
        attr, dyn = shape_operands(em, a["shape"], a.loc_of("shape"))
        if k.poison or attr is None or dt is None:
            return POISON
        if not is_float(dt):
            em.error(f"{name}() draws floats; dtype {dt} is not a float type", call.loc)
            return POISON
        return em.op(opname, [k] + dyn, {"shape": attr, "dtype": dt}, call.loc)

    return h


def _print(em, call, name):
    """One dg.print per value (its literal pieces around it); the last one ends the line."""
    if call.kwargs:
        em.error("print() takes no keyword arguments", call.loc)
    groups = [[[], None]]  # [pieces, value]
    for arg in call.args:
        v = em.expr(arg)
        if isinstance(v, Str):
            groups[-1][0].append(v.value)
            continue
        v = em.as_value(v, arg.loc)
        for x in (list(v) if is_tuple(v) else [v]):
            if not isinstance(x, TypedValue):
                em.error("print() takes tensors, numbers and strings", arg.loc)
                return None
            if x.poison:
                return None
            groups[-1][0].append("\0")
            groups[-1][1] = em.materialize(x, loc=arg.loc)
            groups.append([[], None])
    if not groups[-1][0] and len(groups) > 1:
        groups.pop()
    for i, (pieces, value) in enumerate(groups):
        em.op("print", [value] if value is not None else [],
              {"pieces": pieces, "end": i == len(groups) - 1}, call.loc)
    return None


def _breakpoint(em, call, name):
    """One dg.breakpoint per dg variable in scope; the last one opens the debugger."""
    names, vals = [], []
    for n, v in em.env.items():
        if n.startswith("$") or not isinstance(v, TypedValue) or v.poison:
            continue
        names.append(n)
        vals.append(em.materialize(v, loc=call.loc))
    if not names:
        em.op("breakpoint", [], {"name": "", "last": True}, call.loc)
    for i, (n, v) in enumerate(zip(names, vals)):
        em.op("breakpoint", [v], {"name": n, "last": i == len(names) - 1}, call.loc)
    return None


def _stop_gradient(em, call, name):
    x = one_tensor(em, call, name, "x")
    if x is None:
        return POISON
    return em.op("stop_gradient", [em.materialize(x, loc=call.loc)], loc=call.loc)


def _function_arg(em, call, name):
    if not call.args:
        em.error(f"{name}() needs a function as its first argument", call.loc)
        return None
    fn = em.expr(call.args[0])
    if isinstance(fn, TypedValue) and fn.poison:
        return None
    if not isinstance(fn, (FuncRef, GradRef, CheckpointRef, VmapRef)):
        em.error(f"the first argument of {name}() must be a dg function", call.args[0].loc)
        return None
    return fn


def _grad(em, call, name):
    """grad(f, wrt=0) and value_and_grad(f, wrt=0): function values, called like f."""
    fn = _function_arg(em, call, name)
    wrt_node = call.args[1] if len(call.args) > 1 else None
    for k in call.kwargs:
        if k.name != "wrt" or wrt_node is not None:
            em.error(f"{name}() takes a function and wrt=", k.loc)
            return POISON
        wrt_node = k.value
    if len(call.args) > 2:
        em.error(f"{name}() takes a function and wrt=", call.loc)
        return POISON
    if fn is None:
        return POISON
    wrt = 0
    if wrt_node is not None:
        v = em.expr(wrt_node)
        if is_tuple(v):
            items = [static_int(em, x, wrt_node.loc, "wrt") for x in v]
            if any(i is None for i in items):
                return POISON
            wrt = tuple(items)
        else:
            wrt = static_int(em, v, wrt_node.loc, "wrt")
            if wrt is None:
                return POISON
    return GradRef(name, fn, wrt)


def _vjp(em, call, name):
    """vjp(f, *primals) -> (f(*primals), pullback)."""
    fn = _function_arg(em, call, name)
    if call.kwargs:
        em.error("vjp() takes a function and its arguments, by position", call.kwargs[0].loc)
        return POISON
    if fn is None:
        return POISON
    args = [em.expr(a) for a in call.args[1:]]
    r = em.resolve_call(fn, args, {}, call.loc)
    if r is None:
        return POISON
    sym, vals, res_types, proto, groups = r
    value = em.emit_call(sym, vals, res_types, proto, call.loc)
    return (value, Pullback(sym, vals, res_types, proto, groups))


def _jvp(em, call, name):
    """jvp(f, primals, tangents) -> (f(*primals), tangent of the result): forward mode."""
    fn = _function_arg(em, call, name)
    if call.kwargs or len(call.args) != 3:
        em.error("jvp() takes a function, a tuple of primals and a tuple of tangents", call.loc)
        return POISON
    if fn is None:
        return POISON
    primals, tangents = em.expr(call.args[1]), em.expr(call.args[2])
    return em.call_jvp(fn, primals, tangents, call.loc)


def _static_axis(em, node, what):
    """An axis given in code: an integer constant or None (the argument is not mapped); the
    string "error" after an error (reported)."""
    if isinstance(node, A.Const) and node.value is None:
        return None
    v = static_int(em, em.expr(node), node.loc, what)
    return "error" if v is None else v


def _vmap(em, call, name):
    """vmap(f, in_axes=0, out_axes=0): f mapped over a batch (§3.1), a function value called like
    f; in_axes an int or None for every argument, or a tuple of them, one per argument."""
    fn = _function_arg(em, call, name)
    given = dict(zip(["in_axes", "out_axes"], call.args[1:]))
    if len(call.args) > 3:
        em.error("vmap() takes a function, in_axes and out_axes", call.loc)
        return POISON
    for k in call.kwargs:
        if k.name not in ("in_axes", "out_axes") or k.name in given:
            em.error("vmap() takes a function, in_axes and out_axes", k.loc)
            return POISON
        given[k.name] = k.value
    if fn is None:
        return POISON
    in_axes = 0
    node = given.get("in_axes")
    if node is not None:
        if isinstance(node, (A.Tuple, A.List)):
            in_axes = tuple(_static_axis(em, e, "an entry of in_axes") for e in node.elts)
            if "error" in in_axes:
                return POISON
        else:
            in_axes = _static_axis(em, node, "in_axes")
            if in_axes == "error":
                return POISON
    out_axes = 0
    if "out_axes" in given:
        out_axes = static_int(em, em.expr(given["out_axes"]), given["out_axes"].loc, "out_axes")
        if out_axes is None:
            return POISON
    return VmapRef(fn, in_axes, out_axes)


def _checkpoint(em, call, name):
    """checkpoint(f): f, whose forward the reverse sweep recomputes from its arguments (as it does
    for every call); checkpoint(f, slots=c): besides, every loop in f's gradient keeps at most c
    snapshots of its carried values and recomputes the rest (lowering/ad/checkpoint.py)."""
    fn = _function_arg(em, call, name)
    slots_node = None
    for k in call.kwargs:
        if k.name != "slots" or slots_node is not None:
            em.error("checkpoint() takes a function and slots=", k.loc)
            return POISON
        slots_node = k.value
    if len(call.args) != 1:
        em.error("checkpoint() takes a function and slots=", call.loc)
        return POISON
    if fn is None:
        return POISON
    if slots_node is None:
        return fn
    slots = static_int(em, em.expr(slots_node), slots_node.loc, "slots")
    if slots is None:
        return POISON
    if slots < 2:
        em.error(f"checkpoint(): slots must be at least 2, got {slots}", slots_node.loc)
        return POISON
    return CheckpointRef(fn, slots - slots % 2)


def static_pair(em, v, loc, what):
    """An int or a pair of ints known at compile time (`2`, `(2, 1)`, `[2, 1]`) as a pair; None
    after an error."""
    if isinstance(v, A.Node):
        v = em.expr(v)
    if isinstance(v, TypedValue) and v.poison:
        return None
    items = list(v) if is_tuple(v) or isinstance(v, (list, tuple)) else (v.items if isinstance(v, ListVal) else [v, v])
    if len(items) != 2:
        em.error(f"{what} must be an integer or a pair of integers", loc)
        return None
    pair = [static_int(em, it, loc, what) for it in items]
    return None if any(p is None for p in pair) else tuple(pair)


def _image_operands(em, vals, loc):
    """Tensors of one float element type (f32 where they are integers or literals)."""
    if any(v.poison for v in vals):
        return None
    dt = vals[0].dtype if len(vals) == 1 else em.result_dtype(vals[0], vals[1])
    if not is_float(dt):
        dt = "f32"
    return [em.cast(em.materialize(v, dt, loc), dt, loc) for v in vals]


def _conv2d(em, call, name):
    """conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1): dg.conv2d, plus the bias
    [O] broadcast over N, H, W."""
    a = _Args(em, call, name, ["x", "w", "b", "stride", "padding", "dilation", "groups"],
              {"b": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1},
              static=("b", "stride", "padding", "dilation", "groups"))
    t = a.tensors("x", "w")
    if t is None:
        return POISON
    opts = {k: static_pair(em, a[k], a.loc_of(k), k) for k in ("stride", "padding", "dilation")}
    g = a["groups"]
    groups = g if isinstance(g, int) else static_int(em, em.expr(g), a.loc_of("groups"), "groups")
    bias = a["b"]  # (static: an explicit None is no bias)
    if bias is not None:
        bias = tensor(em, em.expr(bias), a.loc_of("b"))
        if bias.poison:
            return POISON
    if any(v is None for v in opts.values()) or groups is None:
        return POISON
    vals = _image_operands(em, t + ([bias] if bias is not None else []), call.loc)
    if vals is None:
        return POISON
    y = em.op("conv2d", vals[:2], {**opts, "groups": groups}, call.loc)
    if bias is None or y.poison:
        return y
    b = vals[2]
    o = y.type.shape[1]
    if b.rank != 1 or (isinstance(o, int) and isinstance(b.type.shape[0], int) and o != b.type.shape[0]):
        em.error(f"conv2d: the bias must be a vector of the {o} output channels, got {b.type}", a.loc_of("b"))
        return POISON
    return em.binop("+", y, em.op("expand_dims", [b], {"axes": [1, 2]}, call.loc), call.loc)


def _pool(opname):
    """max_pool2d(x, k, stride=k, padding=0) and avg_pool2d(...)."""
    def h(em, call, name):
        a = _Args(em, call, name, ["x", "k", "stride", "padding"], {"stride": None, "padding": 0},
                  static=("k", "stride", "padding"))
        t = a.tensors("x")
        if t is None:
            return POISON
        kernel = static_pair(em, a["k"], a.loc_of("k"), "the kernel size")
        stride = kernel if a["stride"] is None else static_pair(em, a["stride"], a.loc_of("stride"), "stride")
        padding = static_pair(em, a["padding"], a.loc_of("padding"), "padding")
        vals = _image_operands(em, t, call.loc)
        if kernel is None or stride is None or padding is None or vals is None:
            return POISON
        return em.op(opname, vals, {"kernel": kernel, "stride": stride, "padding": padding}, call.loc)

    return h


def _range(em, call, name):
    em.error("range() can only be used as the iterable of a for loop", call.loc)
    return POISON


def _world(opname):
    """rank(group="world") and world_size(group="world")."""
    def h(em, call, name):
        a = _Args(em, call, name, ["group"], {"group": "world"}, static=("group",))
        if not a.ok:
            return POISON
        group = _group_name(em, a, name)
        if group is None:
            return POISON
        return em.op(opname, [], {"group": group}, loc=call.loc)

    return h


def _group_name(em, a, name):
    """The `group` argument of a collective: one of core.mpi.GROUPS (None: an error said)."""
    v = a.static("group")
    group = v.value if isinstance(v, Str) else v if isinstance(v, str) else None
    if group not in GROUPS:
        em.error(f"{name}: group must be one of {', '.join(repr(g) for g in GROUPS)}", a.loc_of("group"))
        return None
    return group


def _tensor_leaves(em, x, loc) -> list | None:
    """The leaves of x (a tensor, or a tuple or record of them) as tensors, materialized; None
    where one is poison (an error said)."""
    vals = [em.materialize(tensor(em, v, loc), loc=loc) for v in (flatten(x) if is_tuple(x) else [x])]
    return None if any(v.poison for v in vals) else vals


def _collective(opname, param, default, check):
    """allreduce(x, op="sum") and broadcast(x, root=0) of an array or a structure of arrays: the
    leaves of each element type travel as one flat buffer (one collective per type, not per leaf)."""
    def h(em, call, name):
        a = _Args(em, call, name, ["x", param, "group"], {param: default, "group": "world"}, static=(param, "group"))
        if not a.ok:
            return POISON
        pv = a.static(param)
        value = check(em, pv, a.loc_of(param))
        group = _group_name(em, a, name)
        if value is None or group is None:
            return POISON
        attrs = {"op" if param == "op" else "root": value, "group": group}
        x = a["x"]
        vals = _tensor_leaves(em, x, call.loc)
        if vals is None:
            return POISON
        if not is_tuple(x):
            return em.op(opname, vals, attrs, call.loc)
        out = list(vals)
        for dt in dict.fromkeys(v.dtype for v in vals):
            group = [i for i, v in enumerate(vals) if v.dtype == dt]
            for i, r in zip(group, _as_one_buffer(em, [vals[i] for i in group], opname, attrs, call.loc)):
                out[i] = r
        return unflatten_like(x, out)

    return h


def _as_one_buffer(em, vals, opname, attrs, loc):
    """The collective of several arrays of one element type as one: flattened, joined, then cut
    and shaped back."""
    if len(vals) == 1:
        return [em.op(opname, vals, attrs, loc)]
    flat = [em.op("reshape", [v], {"shape": [-1]}, loc) if v.rank != 1 else v for v in vals]
    joined = flat[0]
    for f in flat[1:]:
        joined = em.op("concat", [joined, f], {"axis": 0}, loc)
    done = em.op(opname, [joined], attrs, loc)
    out, start = [], em.weak(0)
    for v, f in zip(vals, flat):
        n = em.op("dim", [f], {"axis": 0}, loc)
        stop = em.binop("+", start, n, loc)
        spec = ["s:$:$:"]
        part = em.op("getitem", [done, em.materialize(start, "i64", loc), stop], {"spec": spec}, loc)
        if v.rank != 1:
            shape, dyn = [], []
            for i, d in enumerate(v.type.shape):
                shape.append(d if isinstance(d, int) else DYN)
                if not isinstance(d, int):
                    dyn.append(em.op("dim", [v], {"axis": i}, loc))
            part = em.op("reshape", [part] + dyn, {"shape": shape}, loc)
        out.append(part)
        start = stop
    return out


def _blocks(opname):
    """allgather(x, axis=0) and reduce_scatter(x, axis=0, op="sum") of an array or a structure of
    arrays (leaf by leaf): the op along axis 0, with `axis` moved to the front and back."""
    scatter = opname == "reduce_scatter"

    def h(em, call, name):
        params = ["x", "axis"] + (["op"] if scatter else []) + ["group"]
        a = _Args(em, call, name, params, {"axis": 0, "group": "world", **({"op": "sum"} if scatter else {})},
                  static=tuple(params[1:]))
        if not a.ok:
            return POISON
        given = {p: a.static(p) for p in params[1:-1]}
        axis = static_int(em, given["axis"], a.loc_of("axis"), "axis")
        group = _group_name(em, a, name)
        if group is None:
            return POISON
        attrs = {"group": group}
        if scatter:
            attrs["op"] = _reduction_name(em, given["op"], a.loc_of("op"), name)
            if attrs["op"] is None:
                return POISON
        if axis is None:
            return POISON
        x = a["x"]
        vals = _tensor_leaves(em, x, call.loc)
        if vals is None:
            return POISON
        out = []
        for v in vals:
            if not -v.rank <= axis < v.rank:
                em.error(f"{name}: axis {axis} is out of range for an array of rank {v.rank}", a.loc_of("axis"))
                return POISON
            ax = axis % v.rank
            perm = [ax] + [i for i in range(v.rank) if i != ax]
            front = em.op("transpose", [v], {"perm": perm}, call.loc) if ax else v
            y = em.op(opname, [front], attrs, call.loc)
            out.append(em.op("transpose", [y], {"perm": [perm.index(i) for i in range(v.rank)]}, call.loc) if ax else y)
        return unflatten_like(x, out) if is_tuple(x) else out[0]

    return h


def _all_to_all(em, call, name):
    """all_to_all(x, split_axis=0, concat_axis=0): x cut along split_axis into one block per
    process, block k sent to process k, the blocks received joined along concat_axis in rank
    order. Built on the all_to_all op (axis 0 to axis 0) with transposes and reshapes."""
    a = _Args(em, call, name, ["x", "split_axis", "concat_axis", "group"],
              {"split_axis": 0, "concat_axis": 0, "group": "world"}, static=("split_axis", "concat_axis", "group"))
    if not a.ok:
        return POISON
    x = a.materialized("x")
    group = _group_name(em, a, name)
    if x is None or x.poison or group is None:
        return POISON
    attrs = {"group": group}
    axes = []
    for p in ("split_axis", "concat_axis"):
        v = static_int(em, a.static(p), a.loc_of(p), p)
        if v is None:
            return POISON
        if not -x.rank <= v < max(x.rank, 1) or not x.rank:
            em.error(f"all_to_all: {p} {v} is out of range for an array of rank {x.rank}", a.loc_of(p))
            return POISON
        axes.append(v % x.rank)
    sa, ca = axes
    loc = call.loc
    perm = [sa] + [i for i in range(x.rank) if i != sa]
    front = em.op("transpose", [x], {"perm": perm}, loc) if sa else x
    z = em.op("all_to_all", [front], attrs, loc)
    if sa == ca:
        return em.op("transpose", [z], {"perm": [perm.index(i) for i in range(x.rank)]}, loc) if sa else z
    n = em.op("world_size", [], attrs, loc=loc)
    block = em.binop("//", em.op("dim", [z], {"axis": 0}, loc), n, loc)
    rest = [(d, None if isinstance(d, int) else em.op("dim", [z], {"axis": k}, loc))
            for k, d in enumerate(z.type.shape) if k]
    w = em.op("reshape", [z, n, block] + [v for _, v in rest if v is not None],
              {"shape": [DYN, DYN] + [d if isinstance(d, int) else DYN for d, _ in rest]}, loc)
    labels = ["n", sa] + perm[1:]
    order = [k for i in range(x.rank) for k in (["n", i] if i == ca else [i])]
    v = em.op("transpose", [w], {"perm": [labels.index(k) for k in order]}, loc)
    shape, dyn = [], []
    for i in range(x.rank):
        if i == sa:
            shape.append(DYN)
            dyn.append(block)
            continue
        d = x.type.shape[i]
        if i == ca:
            shape.append(DYN)
            dyn.append(em.binop("*", em.op("dim", [x], {"axis": i}, loc), n, loc))
        elif isinstance(d, int):
            shape.append(d)
        else:
            shape.append(DYN)
            dyn.append(em.op("dim", [x], {"axis": i}, loc))
    return em.op("reshape", [v] + dyn, {"shape": shape}, loc)


def _started(opname):
    """allreduce_start(x, op="sum", group="world") and allreduce_wait(p, op=, group=): leaf by leaf
    (a wait finds its reduction by the buffer the start made, so leaves are not joined)."""
    def h(em, call, name):
        a = _Args(em, call, name, ["x", "op", "group"], {"op": "sum", "group": "world"}, static=("op", "group"))
        if not a.ok:
            return POISON
        reduce = _reduction_name(em, a.static("op"), a.loc_of("op"), name)
        group = _group_name(em, a, name)
        if reduce is None or group is None:
            return POISON
        x = a["x"]
        vals = _tensor_leaves(em, x, call.loc)
        if vals is None:
            return POISON
        out = [em.op(opname, [v], {"op": reduce, "group": group}, call.loc) for v in vals]
        return unflatten_like(x, out) if is_tuple(x) else out[0]

    return h


def _point_to_point(opname, peer):
    """send(x, to=, group="world") and recv(like, frm=, group="world"): `to` and `frm` ranks in the
    group (i64, run-time values)."""
    first = "x" if opname == "send" else "like"

    def h(em, call, name):
        a = _Args(em, call, name, [first, peer, "group"], {"group": "world"}, static=("group",))
        if not a.ok:
            return POISON
        x = a.materialized(first)
        rank = a.materialized(peer)
        group = _group_name(em, a, name)
        if x is None or rank is None or group is None:
            return POISON
        if rank.dtype not in ("i64", "i32") or rank.rank:
            em.error(f"{name}: {peer} must be a rank (an integer scalar), got {rank.type}", a.loc_of(peer))
            return POISON
        return em.op(opname, [x, em.cast(rank, "i64", call.loc)], {"group": group}, call.loc)

    return h


def _reduction_name(em, v, loc, name="allreduce"):
    op = v.value if isinstance(v, Str) else v if isinstance(v, str) else None
    if op not in ("sum", "mean", "max"):
        em.error(f'{name}: op must be "sum", "mean" or "max"', loc)
        return None
    return op


def _root(em, v, loc):
    root = static_int(em, v, loc, "root")
    if root is not None and root < 0:
        em.error(f"broadcast: root must be a rank (0 or more), got {root}", loc)
        return None
    return root


BUILTINS = {
    "zeros": _creation(0), "ones": _creation(1), "full": _full,
    "zeros_like": _like(0), "ones_like": _like(1), "arange": _arange, "eye": _eye,
    "clip": _clip, "where": _where,
    "maximum": _binary("maximum"), "minimum": _binary("minimum"), "pow": _binary("pow"),
    "reshape": _to_shape("reshape"), "transpose": _transpose, "expand_dims": _expand_dims, "squeeze": _squeeze,
    "broadcast_to": _to_shape("broadcast_to"), "concat": _join("concat"), "stack": _join("stack"), "take": _take,
    "len": _len, "tree_map": _tree_map, "tree_leaves": _tree_leaves,
    "matmul": _matmul, "dot": _dot, "outer": _outer,
    "softmax": _axis_op("softmax"), "log_softmax": _axis_op("log_softmax"),
    "cross_entropy": _cross_entropy, "mse": _mse, "layer_norm": _layer_norm, "dropout": _dropout,
    "float": _cast_to("f32"), "int": _cast_to("i64"),
    "key": _key, "split": _split, "normal": _random("normal"), "uniform": _random("uniform"),
    "print": _print, "breakpoint": _breakpoint, "stop_gradient": _stop_gradient, "range": _range,
    "conv2d": _conv2d, "max_pool2d": _pool("max_pool2d"), "avg_pool2d": _pool("avg_pool2d"),
    "grad": _grad, "value_and_grad": _grad, "vjp": _vjp, "checkpoint": _checkpoint, "vmap": _vmap,
    "rank": _world("world_rank"), "world_size": _world("world_size"),
    "allreduce": _collective("allreduce", "op", "sum", _reduction_name),
    "broadcast": _collective("broadcast_from", "root", 0, _root),
    "allgather": _blocks("allgather"), "reduce_scatter": _blocks("reduce_scatter"), "all_to_all": _all_to_all,
    "send": _point_to_point("send", "to"), "recv": _point_to_point("recv", "frm"),
    "allreduce_start": _started("allreduce_start"), "allreduce_wait": _started("allreduce_wait"),
    "jvp": _jvp,
}
for _n, _op in OPS.items():
    if _op.builtin:
        BUILTINS[_n] = _unary(_n)
BUILTINS["gelu"] = _gelu
for _n in ("sum", "mean", "max", "min", "prod", "argmax", "argmin", "logsumexp", "var", "any", "all"):
    BUILTINS[_n] = _reduction(_n)
for _dt in ("f32", "f64", "f16", "bf16", "i32", "i64", "bool"):
    BUILTINS[_dt] = _cast_to(_dt)


def call_builtin(em, name, call):
    return BUILTINS[name](em, call, name)


# The NumPy methods that mirror built-ins (LANGUAGE.md 1.2): x.sum(axis=0) is sum(x, axis=0).
METHODS = {"sum": "sum", "mean": "mean", "max": "max", "min": "min", "prod": "prod", "any": "any", "all": "all",
           "argmax": "argmax",
           "argmin": "argmin", "var": "var", "reshape": "reshape", "transpose": "transpose", "astype": "astype",
           "clip": "clip", "squeeze": "squeeze"}


def call_method(em, call: A.Call, method: str):
    """x.method(args) as the built-in of its name called with x first. `x.reshape(2, 3)` and
    `x.transpose(1, 0)` take their sizes or axes as separate arguments too, as in NumPy."""
    f = call.func
    args = list(call.args)
    if method in ("reshape", "transpose") and len(args) > 1:
        args = [A.Tuple(args[0].loc, args)]
    if method == "astype":
        if len(args) != 1 or call.kwargs:
            return em.error("x.astype(dtype) takes one element type, such as f32", call.loc)
        dt = static_dtype(em, args[0], args[0].loc, default=None)
        if dt is None:
            return POISON
        return BUILTINS[dt](em, A.Call(call.loc, A.Name(f.loc, dt), [f.value], []), dt)
    name = METHODS[method]
    return BUILTINS[name](em, A.Call(call.loc, A.Name(f.loc, name), [f.value] + args, list(call.kwargs)), name)
