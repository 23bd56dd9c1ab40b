"""Reductions over `axes` (normalized, sorted, non-negative) with `keepdims`.

The emitter turns `axis=None` into every axis, so an empty `axes` reduces
nothing. `argmax`/`argmin` reduce over at most one axis (all axes means the
flattened index) and give `i64`. The lowering of a reduction is a
`linalg.generic` with reduction iterators (`reduce_generic`, in dialects/helpers.py
with the keepdims pieces that softmax and cross-entropy use too).
"""
from __future__ import annotations

import numpy as np

from dg.core.types import DTYPES, ShapeError, TensorType, is_float

from .batch_rules import over_axes
from .builder import fail_if
from .jvp_rules import linear
from .jvp_rules import reduction as jvp_reduction
from .helpers import count_of, drop_kept, int_limits, int_predicate, keep_type, lse_keep, map_generic, out_sizes, \
    reduce_generic, sum_keep
from .registry import OpDef, example, register


def _fail_if_empty(b, x, xt, axes, message: str) -> None:
    """NumPy's error when the reduced axes hold no element: a max, a min and their indices have
    no value to start from (the output may still be empty: a (0, 0) array reduced along axis 0)."""
    if all(isinstance(xt.shape[i], int) and xt.shape[i] > 0 for i in axes):
        return
    n = b.const(1, "index")
    for i in axes:
        n = b.binary("arith.muli", n, b.dim(x, xt, i), "index")
    empty = b.assign(f"arith.cmpi eq, {n}, {b.const(0, 'index')} : index", "x")
    fail_if(b, empty, message)


# ---------------------------------------------------------------- sum, mean, prod, max, min
def _reduced_shape(t: TensorType, axes, keepdims):
    for a in axes:
        if not 0 <= a < t.rank:
            raise ShapeError(f"axis {a} is out of range for {t}")
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(t.shape))
    return tuple(d for i, d in enumerate(t.shape) if i not in axes)


def _rule(float_only=False, out_dtype=None):
    def rule(types, axes=(), keepdims=False):
        t = types[0]
        if float_only and not is_float(t.dtype):
            raise ShapeError(f"needs a float tensor, got {t}")
        return TensorType(out_dtype or t.dtype, _reduced_shape(t, axes, keepdims))

    return rule


def _sample(rng):
    return [rng.standard_normal((2, 3, 4)).astype(np.float32)], {"axes": (0, 2), "keepdims": False}


def _red(fn):
    def impl(x, axes=(), keepdims=False):
        r = fn(x, axis=tuple(axes), keepdims=keepdims)
        return np.asarray(r, dtype=x.dtype) if not isinstance(r, np.ndarray) or r.dtype != x.dtype else r

    return impl


def _lower_reduce(kind):
    def lower(b, op):
        x, xt, out_t = op.operands[0], op.types[0], op.result_types[0]
        axes, keep = tuple(op.attrs.get("axes", ())), op.attrs.get("keepdims", False)
        if kind in ("sum", "mean") and xt.dtype == "f16":  # as NumPy: added up in f32, rounded once
            wide_in, wide_out = TensorType("f32", xt.shape), TensorType("f32", out_t.shape)
            x = map_generic(b, wide_in, [(x, xt)], lambda bb, a: bb.unary("arith.extf", a[0], "f16 to f32"))
            r = reduce(b, x, wide_in, axes, keep, wide_out)
            return map_generic(b, out_t, [(r, wide_out)], lambda bb, a: bb.unary("arith.truncf", a[0], "f32 to f16"))
        return reduce(b, x, xt, axes, keep, out_t)

    def reduce(b, x, xt, axes, keep, out_t):
        ety = xt.element
        isf = ety.startswith("f") or ety == "bf16"
        if kind in ("max", "min"):
            _fail_if_empty(b, x, xt, axes, "ValueError: zero-size array to reduction operation "
                                          f"{'maximum' if kind == 'max' else 'minimum'} which has no identity")
        if kind in ("sum", "mean"):
            init = b.const(0.0 if isf else 0, ety)
            comb = lambda bb, a, o: bb.binary("arith.addf" if isf else "arith.addi", a, o, ety)
        elif kind == "prod":
            init = b.const(1.0 if isf else 1, ety)
            comb = lambda bb, a, o: bb.binary("arith.mulf" if isf else "arith.muli", a, o, ety)
        elif kind in ("max", "min") and ety == "i1":  # bools: any / all
            init = b.const(kind == "min", "i1")
            comb = lambda bb, a, o: bb.binary("arith.ori" if kind == "max" else "arith.andi", a, o, "i1")
        elif kind == "max":
            init = b.const(float("-inf"), ety) if isf else b.const(int_limits(ety)[0], ety)
            comb = lambda bb, a, o: bb.binary("arith.maximumf" if isf else "arith.maxsi", a, o, ety)
        else:
            init = b.const(float("inf"), ety) if isf else b.const(int_limits(ety)[1], ety)
            comb = lambda bb, a, o: bb.binary("arith.minimumf" if isf else "arith.minsi", a, o, ety)
        if xt.dtype == "u64" and kind in ("max", "min"):  # random keys: unsigned
            init = b.const(0 if kind == "max" else -1, ety)
            comb = lambda bb, a, o: bb.binary("arith.maxui" if kind == "max" else "arith.minui", a, o, ety)
        r = reduce_generic(b, x, xt, axes, keep, out_t, init, comb)
        if kind != "mean":
            return r
        n = count_of(b, x, xt, axes, ety)
        sizes = out_sizes(b, [r], [out_t], out_t)
        e = b.empty(out_t, sizes)
        omap = ", ".join(f"d{i}" for i in range(out_t.rank))
        return b.generic(out_t, e, [(r, out_t)], [omap], omap, ["parallel"] * out_t.rank,
                         lambda bb, a: bb.binary("arith.divf", a[0], n, ety))

    return lower


def _vjp_sum(g, op, d):
    x, = op.operands
    return [g.unreduce(d, x, op.attrs.get("axes", ()), op.attrs.get("keepdims", False))]


def _vjp_mean(g, op, d):
    x, = op.operands
    axes = op.attrs.get("axes", ())
    return [g.div(g.unreduce(d, x, axes, op.attrs.get("keepdims", False)), g.count(x, axes))]


def _vjp_extremum(g, op, d):
    """Split evenly between the elements that attain the max (or min), as JAX does."""
    x, = op.operands
    axes, keep = op.attrs.get("axes", ()), op.attrs.get("keepdims", False)
    y = g.unreduce(op.results[0], x, axes, keep)
    hit = g.dg_op("cast", [g.dg_op("eq", [x, y])], {"dtype": x.tt.dtype})
    ties = g.unreduce(g.dg_op("sum", [hit], {"axes": tuple(axes), "keepdims": True}), x, (), True)
    return [g.div(g.mul(hit, g.unreduce(d, x, axes, keep)), ties)]


def _vjp_prod(g, op, d):
    """d * (product of the others), zeros included: one zero in a slice leaves it the only nonzero gradient."""
    x, = op.operands
    axes, keep = op.attrs.get("axes", ()), op.attrs.get("keepdims", False)
    zero, one = g.const(0.0, x), g.const(1.0, x)
    is0 = g.dg_op("eq", [x, zero])
    safe = g.where(is0, g.add(g.zeros_like(x), one), x)
    p = g.unreduce(g.dg_op("prod", [safe], {"axes": tuple(axes), "keepdims": True}), x, (), True)
    z = g.unreduce(g.dg_op("sum", [g.dg_op("cast", [is0], {"dtype": x.tt.dtype})], {"axes": tuple(axes), "keepdims": True}),
                   x, (), True)
    zeros = g.zeros_like(x)
    at_nonzero = g.where(g.dg_op("eq", [z, zero]), g.div(p, safe), zeros)
    at_zero = g.where(g.dg_op("eq", [z, one]), p, zeros)
    return [g.mul(g.unreduce(d, x, axes, keep), g.where(is0, at_zero, at_nonzero))]


def _wide(fn):
    """A float reduction of NumPy's carried out in float64 and rounded once: NumPy sums float32
    pairwise only along a contiguous axis (else one element after another, which stalls at 2**24
    times the spacing), where compiled code's blocked sums stay close to exact; so the modes agree."""
    def run(x, axis, keepdims):
        if x.dtype.kind == "f" and x.dtype.itemsize < 8:
            return np.asarray(fn(x, axis=axis, keepdims=keepdims, dtype=np.float64)).astype(x.dtype)
        return fn(x, axis=axis, keepdims=keepdims, dtype=x.dtype)
    return run


def _prod(x, axis, keepdims):
    return np.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def reduction(name: str, fn, vjp, summary: str, float_only: bool = False, lower=None) -> None:
    """One reduction: NumPy's `fn(x, axis, keepdims)`, its VJP, its lowering (a generic combining
    with one operation, `_lower_reduce`, unless given). Its JVP: the reduction of the tangent
    where it is linear (sum, mean), else the slice's gradient dotted with the tangent."""
    register(OpDef(
        name=name, impl=_red(fn), nargs=1, attrs={"axes": "ints", "keepdims": "bool"}, batch=over_axes,
        infer=_rule(float_only=float_only), lower=lower or _lower_reduce(name), vjp=vjp,
        jvp=linear(0) if name in ("sum", "mean") else jvp_reduction, sample=_sample,
        doc=f"{summary} over `axes`.\n\n    " + example(name, "tensor<2x3xf32>", "tensor<3xf32>",
                                                        "axes = array<i64: 0>, keepdims = false"),
    ))


reduction("sum", _wide(np.sum), _vjp_sum, "The sum")
reduction("mean", _wide(np.mean), _vjp_mean, "The mean", float_only=True)
def _extreme(fn, negative: bool):
    """NumPy's max/min, but a zero result is the zero IEEE 754's maximum/minimum (compiled code's)
    gives: +0 for max where the slice holds a +0, -0 for min where it holds a -0 (NumPy gives the
    zero it met first)."""
    def run(x, axis, keepdims):
        r = fn(x, axis=axis, keepdims=keepdims)
        if x.dtype.kind != "f" or x.size == 0 or not np.any(r == 0):
            return r
        has = np.any((x == 0) & (np.signbit(x) == negative), axis=axis, keepdims=keepdims)
        signed = np.where(has, -0.0 if negative else 0.0, 0.0 if negative else -0.0).astype(x.dtype)
        return np.where(r == 0, signed, r).astype(x.dtype, copy=False)
    return run


reduction("max", _extreme(np.max, negative=False), _vjp_extremum, "The largest element")
reduction("min", _extreme(np.min, negative=True), _vjp_extremum, "The smallest element")
reduction("prod", _prod, _vjp_prod, "The product")


# ---------------------------------------------------------------- logsumexp, var
def _logsumexp(x, axis, keepdims):
    if x.size == 0:
        return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros((), x.dtype))
    s = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return s if keepdims else np.squeeze(s, axis=axis)


def _lower_logsumexp(b, op):
    x, xt = op.operands[0], op.types[0]
    axes = tuple(op.attrs.get("axes", ()))
    r, kt = lse_keep(b, x, xt, axes)
    return drop_kept(b, r, kt, op.result_types[0], axes)


def _vjp_logsumexp(g, op, d):
    x, = op.operands
    axes, keep = op.attrs.get("axes", ()), op.attrs.get("keepdims", False)
    p = g.dg_op("exp", [g.sub(x, g.unreduce(op.results[0], x, axes, keep))])
    return [g.mul(g.unreduce(d, x, axes, keep), p)]


reduction("logsumexp", _logsumexp, _vjp_logsumexp, "log(sum(exp(x))), without overflow", float_only=True,
          lower=_lower_logsumexp)


def _lower_var(b, op):
    x, xt = op.operands[0], op.types[0]
    axes = tuple(op.attrs.get("axes", ()))
    ety = xt.element
    n = count_of(b, x, xt, axes, ety)
    s, kt = sum_keep(b, x, xt, axes)
    mean = map_generic(b, kt, [(s, kt)], lambda bb, a: bb.binary("arith.divf", a[0], n, ety))

    def sq(bb, a):
        d = bb.binary("arith.subf", a[0], a[1], ety)
        return bb.binary("arith.mulf", d, d, ety)

    d2 = map_generic(b, xt, [(x, xt), (mean, kt)], sq)
    ss, _ = sum_keep(b, d2, xt, axes)
    v = map_generic(b, kt, [(ss, kt)], lambda bb, a: bb.binary("arith.divf", a[0], n, ety))
    return drop_kept(b, v, kt, op.result_types[0], axes)


def _vjp_var(g, op, d):
    x, = op.operands
    axes, keep = op.attrs.get("axes", ()), op.attrs.get("keepdims", False)
    m = g.dg_op("mean", [x], {"axes": tuple(axes), "keepdims": True})
    two_over_n = g.div(g.const(2.0, x), g.count(x, axes))
    return [g.mul(g.unreduce(d, x, axes, keep), g.mul(g.sub(x, m), two_over_n))]


reduction("var", _wide(np.var), _vjp_var, "The variance (population)", float_only=True, lower=_lower_var)


# ---------------------------------------------------------------- argmax, argmin
def _arg(fn):
    def impl(x, axes=(), keepdims=False):
        if len(axes) == x.ndim and x.ndim != 1:
            r = fn(x.reshape(-1))
            if keepdims:
                r = np.reshape(r, (1,) * x.ndim)
            return np.asarray(r, dtype=np.int64)
        return np.asarray(fn(x, axis=axes[0], keepdims=keepdims), dtype=np.int64)

    return impl


def _arg_rule(types, axes=(), keepdims=False):
    t = types[0]
    if len(axes) > 1 and len(axes) != t.rank:
        raise ShapeError("argmax/argmin take one axis or None")
    return TensorType("i64", _reduced_shape(t, axes, keepdims))


def _lower_arg(is_max):
    def lower(b, op):
        """Index of the first max (min) over one axis, or over the flattened tensor."""
        x, xt = op.operands[0], op.types[0]
        out_t = op.result_types[0]
        axes = tuple(op.attrs.get("axes", ()))
        keep = op.attrs.get("keepdims", False)
        ety = xt.element
        isf = ety.startswith("f") or ety == "bf16"
        R = xt.rank
        # Two outputs: the best value so far and its (flat) index.
        kt = keep_type(xt, axes)
        vt = kt
        it = TensorType("i64", kt.shape)
        sizes = [None if i in axes else b.dim(x, xt, i) for i in range(R)]
        _fail_if_empty(b, x, xt, axes, f"ValueError: attempt to get {'argmax' if is_max else 'argmin'} of an empty sequence")
        worst = float("-inf") if is_max else float("inf")
        if not isf:
            worst = int_limits(ety)[0 if is_max else 1]
        vinit = b.fill(vt, sizes, b.const(worst, ety))
        iinit = b.fill(it, sizes, b.const(-1, "i64"))
        in_map = ", ".join(f"d{i}" for i in range(R))
        out_map = ", ".join("0" if i in axes else f"d{i}" for i in range(R))
        dims = ", ".join(f"d{i}" for i in range(R))
        its = ", ".join('"reduction"' if i in axes else '"parallel"' for i in range(R))
        strides = []
        for i in axes:  # row-major flat index over the reduced axes
            s = b.const(1, "index")
            for j in axes:
                if j > i:
                    s = b.binary("arith.muli", s, b.dim(x, xt, j), "index")
            strides.append((i, s))
        r = b.fresh("am")
        b.emit(f"{r}:2 = linalg.generic {{indexing_maps = [affine_map<({dims}) -> ({in_map})>, "
               f"affine_map<({dims}) -> ({out_map})>, affine_map<({dims}) -> ({out_map})>], iterator_types = [{its}]}} "
               f"ins({x} : {xt.mlir()}) outs({vinit}, {iinit} : {vt.mlir()}, {it.mlir()}) {{")
        a, bv, bi = b.fresh("a"), b.fresh("o"), b.fresh("o")
        b.line(f"^bb0({a}: {ety}, {bv}: {ety}, {bi}: i64):")
        with b.nested():
            flat = b.const(0, "index")
            for i, s in strides:
                li = b.assign(f"linalg.index {i} : index", "li")
                flat = b.binary("arith.addi", flat, b.binary("arith.muli", li, s, "index"), "index")
            fi = b.assign(f"arith.index_cast {flat} : index to i64", "x")
            pred = ("ogt" if is_max else "olt") if isf else int_predicate("sgt" if is_max else "slt", DTYPES[xt.dtype][2])
            better = b.cmp(pred, a, bv, ety)
            if isf:  # NaN wins, as in NumPy; the first one is kept
                nan_new = b.cmp("uno", a, a, ety)
                nan_old = b.cmp("uno", bv, bv, ety)
                better = b.binary("arith.andi", b.binary("arith.ori", better, nan_new, "i1"),
                                  b.binary("arith.xori", nan_old, b.const(True, "i1"), "i1"), "i1")
            first = b.cmp("slt", bi, b.const(0, "i64"), "i64")
            take = b.binary("arith.ori", better, first, "i1")
            nv = b.select(take, a, bv, ety)
            ni = b.select(take, fi, bi, "i64")
            b.emit(f"linalg.yield {nv}, {ni} : {ety}, i64")
        b.line(f"}} -> ({vt.mlir()}, {it.mlir()}) {b.loc}")
        return drop_kept(b, f"{r}#1", it, out_t, axes) if not keep else f"{r}#1"

    return lower


for _name, _fn in {"argmax": np.argmax, "argmin": np.argmin}.items():
    register(OpDef(
        name=_name, impl=_arg(_fn), nargs=1, attrs={"axes": "ints", "keepdims": "bool"}, infer=_arg_rule, batch=over_axes,
        lower=_lower_arg(_name == "argmax"),
        sample=lambda rng: ([rng.standard_normal((3, 4)).astype(np.float32)], {"axes": (1,), "keepdims": False}),
        doc=f"The index of the first {_name[3:]}imum over one axis, or over the flattened tensor (i64).\n\n    "
            + example(_name, "tensor<2x3xf32>", "tensor<2xi64>", "axes = array<i64: 1>, keepdims = false"),
    ))
