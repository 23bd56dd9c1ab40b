"""Reductions over `axes` (normalized, sorted, non-negative) with `keepdims`.

The emitter turns `axis=None` into every axis, so an empty `axes` reduces
nothing. `argmax`/`argmin` reduce over at most one axis (all axes means the
flattened index) and give `i64`.
"""
from __future__ import annotations

import numpy as np

from dg.dsl.types import ShapeError, TensorType, is_float
from .registry import OpDef, register


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
