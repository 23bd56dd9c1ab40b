"""Elementwise ops: unary math, binary arithmetic with broadcasting, comparisons.

Operands of a binary op share one element type (the emitter casts), shapes
broadcast as in NumPy. Comparisons and logical ops give `bool`.
"""
from __future__ import annotations

import numpy as np

from dg.dsl.types import ShapeError, TensorType, broadcast_shapes, is_float
from .registry import OpDef, register


def _same(types, **_):
    return types[0]


def _float_only(name):
    def rule(types, **_):
        if not is_float(types[0].dtype):
            raise ShapeError(f"{name} needs a float tensor, got {types[0]}")
        return types[0]

    return rule


def _unary_sample(dtype=np.float32, positive=False):
    def sample(rng):
        x = rng.standard_normal((3, 4)).astype(dtype)
        if positive:
            x = np.abs(x) + 0.5
        return [x], {}

    return sample


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-x))).astype(x.dtype)


def _gelu(x):
    # tanh approximation (as JAX's default).
    c = np.asarray(np.sqrt(2.0 / np.pi), dtype=x.dtype)
    return (0.5 * x * (1.0 + np.tanh(c * (x + np.asarray(0.044715, x.dtype) * x * x * x)))).astype(x.dtype)


def _rsqrt(x):
    return (1.0 / np.sqrt(x)).astype(x.dtype)


def _relu(x):
    return np.maximum(x, np.zeros((), x.dtype))


def _softplus(x):
    return np.logaddexp(np.zeros((), x.dtype), x)


def _round(x):
    return np.round(x)  # half to even, as NumPy and Python 3


def _sign(x):
    return np.sign(x)


# name -> (impl, float only?, positive inputs in samples?, doc)
UNARY = {
    "neg": (np.negative, False, False, "-x"),
    "exp": (np.exp, True, False, "e**x"),
    "log": (np.log, True, True, "natural logarithm"),
    "log1p": (np.log1p, True, True, "log(1 + x)"),
    "sqrt": (np.sqrt, True, True, "square root"),
    "rsqrt": (_rsqrt, True, True, "1 / sqrt(x)"),
    "abs": (np.abs, False, False, "absolute value"),
    "sign": (_sign, False, False, "-1, 0 or 1"),
    "sin": (np.sin, True, False, "sine"),
    "cos": (np.cos, True, False, "cosine"),
    "tanh": (np.tanh, True, False, "hyperbolic tangent"),
    "sigmoid": (_sigmoid, True, False, "1 / (1 + exp(-x))"),
    "relu": (_relu, False, False, "max(x, 0)"),
    "gelu": (_gelu, True, False, "GELU, tanh approximation"),
    "softplus": (_softplus, True, False, "log(1 + exp(x))"),
    "floor": (np.floor, True, False, "round down"),
    "ceil": (np.ceil, True, False, "round up"),
    "round": (_round, True, False, "round half to even"),
}

for _name, (_impl, _fonly, _pos, _doc) in UNARY.items():
    register(OpDef(
        name=_name, impl=_impl, nargs=1,
        infer=_float_only(_name) if _fonly else _same,
        sample=_unary_sample(positive=_pos), doc=_doc,
    ))


def _lnot(x):
    return np.logical_not(x)


register(OpDef(
    name="not", impl=_lnot, nargs=1,
    infer=lambda types, **_: types[0].with_dtype("bool"),
    sample=lambda rng: ([rng.standard_normal((3,)) > 0], {}),
    doc="logical not of a bool tensor",
))


def _bcast(types, **_):
    return TensorType(types[0].dtype, broadcast_shapes(*(t.shape for t in types)))


def _bcast_bool(types, **_):
    return TensorType("bool", broadcast_shapes(*(t.shape for t in types)))


def _bin_sample(positive_rhs=False, dtype=np.float32):
    def sample(rng):
        a = rng.standard_normal((3, 1, 4)).astype(dtype)
        b = rng.standard_normal((2, 4)).astype(dtype)
        if positive_rhs:
            b = np.abs(b) + 0.5
            a = np.abs(a) + 0.5
        return [a, b], {}

    return sample


def _div(a, b):
    return np.true_divide(a, b).astype(a.dtype, copy=False)


def _pow(a, b):
    return np.power(a, b)


BINARY = {
    "add": (np.add, False, "a + b"),
    "sub": (np.subtract, False, "a - b"),
    "mul": (np.multiply, False, "a * b"),
    "div": (_div, True, "a / b (float)"),
    "floordiv": (np.floor_divide, True, "a // b (floor)"),
    "mod": (np.mod, True, "a % b (sign of b, as Python)"),
    "pow": (_pow, True, "a ** b"),
    "maximum": (np.maximum, False, "elementwise max"),
    "minimum": (np.minimum, False, "elementwise min"),
}
for _name, (_impl, _pos, _doc) in BINARY.items():
    register(OpDef(name=_name, impl=_impl, nargs=2, infer=_bcast,
                   sample=_bin_sample(positive_rhs=_pos), doc=_doc))

COMPARE = {
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal,
}
for _name, _impl in COMPARE.items():
    register(OpDef(name=_name, impl=_impl, nargs=2, infer=_bcast_bool,
                   sample=_bin_sample(), doc=f"comparison ({_name})"))

for _name, _impl in {"and": np.logical_and, "or": np.logical_or}.items():
    register(OpDef(
        name=_name, impl=_impl, nargs=2, infer=_bcast_bool,
        sample=lambda rng: ([rng.standard_normal((3, 1)) > 0, rng.standard_normal((4,)) > 0], {}),
        doc=f"logical {_name}",
    ))


def _where_rule(types, **_):
    c, a, b = types
    if c.dtype != "bool":
        raise ShapeError(f"where needs a bool condition, got {c}")
    return TensorType(a.dtype, broadcast_shapes(c.shape, a.shape, b.shape))


def _where(c, a, b):
    return np.where(c, a, b)


register(OpDef(
    name="where", impl=_where, nargs=3, infer=_where_rule,
    sample=lambda rng: ([rng.standard_normal((3, 1)) > 0,
                         rng.standard_normal((3, 4)).astype(np.float32),
                         rng.standard_normal((4,)).astype(np.float32)], {}),
    doc="c ? a : b, elementwise with broadcasting",
))
