"""Reductions over `axes` (normalized, sorted, non-negative) with `keepdims`.

The emitter turns `axis=None` into every axis, so an empty `axes` reduces
nothing. `argmax`/`argmin` reduce over at most one axis (all axes means the
flattened index) and give `i64`.
"""
from __future__ import annotations

import numpy as np

from dg.dsl.types import ShapeError, TensorType, is_float
from .registry import OPS, OpDef, register


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


def _logsumexp(x, axis, keepdims):
    if x.size == 0:
        return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros((), x.dtype))
    s = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return s if keepdims else np.squeeze(s, axis=axis)


def _var(x, axis, keepdims):
    return np.var(x, axis=axis, keepdims=keepdims)


def _sum(x, axis, keepdims):
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _prod(x, axis, keepdims):
    return np.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


REDUCTIONS = {
    "sum": (_sum, False),
    "mean": (np.mean, True),
    "max": (np.max, False),
    "min": (np.min, False),
    "prod": (_prod, False),
    "logsumexp": (_logsumexp, True),
    "var": (_var, True),
}
for _name, (_fn, _fonly) in REDUCTIONS.items():
    register(OpDef(
        name=_name, impl=_red(_fn), nargs=1,
        attrs={"axes": "ints", "keepdims": "bool"}, defaults={"keepdims": False},
        infer=_rule(float_only=_fonly), sample=_sample, doc=f"{_name} over axes",
    ))


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


for _name, _fn in {"argmax": np.argmax, "argmin": np.argmin}.items():
    register(OpDef(
        name=_name, impl=_arg(_fn), nargs=1,
        attrs={"axes": "ints", "keepdims": "bool"}, defaults={"keepdims": False},
        infer=_arg_rule,
        sample=lambda rng: ([rng.standard_normal((3, 4)).astype(np.float32)], {"axes": (1,), "keepdims": False}),
        doc=f"{_name} over one axis, or over the flattened tensor",
    ))


# ---------------------------------------------------------------- lowering facets
def reduce_generic(b, x, xt, axes, keepdims, out_t, init_scalar, combine):
    """A linalg.generic reducing `axes` of x into out_t (filled with init_scalar first)."""
    R = xt.rank
    sizes = []
    for i in range(R):
        if i in axes:
            continue
        sizes.append(b.dim(x, xt, i))
    if keepdims:
        full, it = [], iter(sizes)
        for i in range(R):
            full.append(None if i in axes else next(it))
        sizes = full
    init = b.fill(out_t, sizes, init_scalar)
    in_map = ", ".join(f"d{i}" for i in range(R))
    if keepdims:
        out_map = ", ".join("0" if i in axes else f"d{i}" for i in range(R))
    else:
        out_map = ", ".join(f"d{i}" for i in range(R) if i not in axes)
    its = ["reduction" if i in axes else "parallel" for i in range(R)]
    return b.generic(out_t, init, [(x, xt)], [in_map], out_map, its, lambda bb, a: combine(bb, a[0], a[1]))


def count_of(b, x, xt, axes, ety):
    """The number of reduced elements, as a float scalar of type ety."""
    n = b.const(1, "index")
    for i in axes:
        n = b.binary("arith.muli", n, b.dim(x, xt, i), "index")
    i64 = b.fresh("x")
    b.emit(f"{i64} = arith.index_cast {n} : index to i64")
    return b.unary("arith.sitofp", i64, f"i64 to {ety}")


def _lower_reduce(kind):
    def lower(b, op):
        from dg.lowering.builder import elt, signless

        x, xt = op.operands[0], op.types[0]
        out_t = op.result_types[0]
        axes, keep = tuple(op.attrs.get("axes", ())), op.attrs.get("keepdims", False)
        ety = signless(elt(xt))
        isf = ety.startswith("f") or ety == "bf16"
        if kind in ("sum", "mean"):
            init = b.const(0.0 if isf else 0, ety)
            comb = lambda bb, a, o: bb.binary("arith.addf" if isf else "arith.addi", a, o, ety)
        elif kind == "prod":
            init = b.const(1.0 if isf else 1, ety)
            comb = lambda bb, a, o: bb.binary("arith.mulf" if isf else "arith.muli", a, o, ety)
        elif kind == "max":
            init = b.const(float("-inf"), ety) if isf else b.const(-(2 ** 63) if ety == "i64" else -(2 ** 31), ety)
            comb = lambda bb, a, o: bb.binary("arith.maximumf" if isf else "arith.maxsi", a, o, ety)
        else:
            init = b.const(float("inf"), ety) if isf else b.const(2 ** 63 - 1 if ety == "i64" else 2 ** 31 - 1, ety)
            comb = lambda bb, a, o: bb.binary("arith.minimumf" if isf else "arith.minsi", a, o, ety)
        r = reduce_generic(b, x, xt, axes, keep, out_t, init, comb)
        if kind != "mean":
            return r
        n = count_of(b, x, xt, axes, ety)
        from .ops_elementwise import out_sizes

        sizes = out_sizes(b, [r], [out_t], out_t)
        e = b.empty(out_t, sizes)
        omap = ", ".join(f"d{i}" for i in range(out_t.rank))
        return b.generic(out_t, e, [(r, out_t)], [omap], omap, ["parallel"] * out_t.rank,
                         lambda bb, a: bb.binary("arith.divf", a[0], n, ety))

    return lower


for _k in ("sum", "mean", "prod", "max", "min"):
    OPS[_k].lower = _lower_reduce(_k)
