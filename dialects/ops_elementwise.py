"""Element-wise ops: unary math, binary arithmetic with broadcasting, comparisons, logic.

Operands of a binary op share one element type (the emitter casts), shapes
broadcast as in NumPy. Comparisons and logical ops give `bool`. Each op's
lowering is a `linalg.generic` whose body computes one element (`map_generic`,
`lower_elementwise`: with the pieces of broadcasting that other families share, in
dialects/helpers.py).
"""
from __future__ import annotations

import math

import numpy as np

from dg.core.types import ShapeError, TensorType, broadcast_shapes, is_float

from .batch_rules import elementwise
from .builder import fail_if
from .helpers import broadcast_groups, int_predicate, lower_elementwise
from .jvp_rules import diagonal
from .registry import OpDef, example, register

_CMPF = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}
_CMPI = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}


# ---------------------------------------------------------------- unary ops
def _same(types, **_):
    return types[0]


def _float_only(name):
    def rule(types, **_):
        if not is_float(types[0].dtype):
            raise ShapeError(f"{name} needs a float tensor, got {types[0]}")
        return types[0]

    return rule


def _unary_sample(positive):
    def sample(rng):
        x = rng.standard_normal((3, 4)).astype(np.float32)
        return [np.abs(x) + 0.5 if positive else x], {}

    return sample


def unary(name: str, impl, element, vjp, summary: str, float_only: bool = True, positive: bool = False,
          builtin: bool = True) -> None:
    """One unary op: its NumPy implementation, its element's lowering `element(b, kind, ety, x)`,
    its adjoint `vjp(g, x, y, d)` (x the operand, y the result, d its adjoint; None: zero almost
    everywhere), on float tensors only or on any; a built-in function of its name unless not."""
    register(OpDef(
        name=name, impl=impl, nargs=1, infer=_float_only(name) if float_only else _same, builtin=builtin, batch=elementwise,
        lower=lower_elementwise(lambda b, kind, ety, args, op: element(b, kind, ety, args[0])),
        vjp=lambda g, op, d: [vjp(g, op.operands[0], op.results[0], d)], jvp=diagonal,
        sample=_unary_sample(positive),
        doc=f"{summary}, element by element.\n\n    " + example(name, "tensor<3xf32>", "tensor<3xf32>"),
    ))


def _math(fname):
    return lambda b, kind, ety, x: b.unary(fname, x, ety)


def _none(g, x, y, d):  # piecewise constant: zero almost everywhere
    return None


def _neg(b, kind, ety, x):
    if kind == "f":
        return b.unary("arith.negf", x, ety)
    return b.binary("arith.subi", b.const(0, ety), x, ety)


def _sign(b, kind, ety, x):
    zero, one, mone = b.const(0, ety), b.const(1, ety), b.const(-1, ety)
    pos = b.cmp("ogt" if kind == "f" else "sgt", x, zero, ety)
    neg = b.cmp("olt" if kind == "f" else "slt", x, zero, ety)
    s2 = b.select(pos, one, b.select(neg, mone, zero, ety), ety)
    if kind == "f":  # NaN stays NaN
        return b.select(b.cmp("uno", x, x, ety), x, s2, ety)
    return s2


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-x))).astype(x.dtype)


def _lower_sigmoid(b, kind, ety, x):
    one = b.const(1.0, ety)
    e = b.unary("math.exp", b.unary("arith.negf", x, ety), ety)
    return b.binary("arith.divf", one, b.binary("arith.addf", one, e, ety), ety)


def _in_f64(fn):
    """The NumPy implementation of `fn(float) -> float` (a function of Python's `math`, libm's):
    element by element in float64, rounded to the operand's element type. libm's erf is within an
    ulp, where NumPy has none; fromiter over a list runs 2.3 times as fast as np.vectorize. f16
    and bf16 differ from compiled code (which computes them in f32) by their last rounding only."""
    def run(x):
        x = np.asarray(x)
        flat = np.asarray(x, np.float64).ravel()
        return np.fromiter(map(fn, flat.tolist()), np.float64, flat.size).reshape(x.shape).astype(x.dtype)

    return run


_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

# x * Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2: no cancellation where x is very negative
# (0.5 * x * (1 + erf(x / sqrt 2)), PyTorch's form, loses every digit there in f32).
_gelu_exact = _in_f64(lambda v: 0.5 * v * math.erfc(-v * _SQRT_HALF))


def _lower_gelu_exact(b, kind, ety, x):
    # f16 and bf16 in f32, as the interpreter (in f64) and PyTorch do: erfc's argument rounded to
    # bf16 would change the far tail by half.
    if ety in ("f16", "bf16"):
        return b.unary("arith.truncf", _lower_gelu_exact(b, kind, "f32", b.unary("arith.extf", x, f"{ety} to f32")),
                       f"f32 to {ety}")
    z = b.binary("arith.mulf", x, b.const(-_SQRT_HALF, ety), ety)
    phi = b.binary("arith.mulf", b.const(0.5, ety), b.unary("math.erfc", z, ety), ety)
    return b.binary("arith.mulf", x, phi, ety)


def _gelu_exact_grad(g, x, y, d):
    # d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi); Phi as in PyTorch's
    # backward, 0.5 * (1 + erf(x / sqrt 2)).
    half = g.const(0.5, x)
    big_phi = g.mul(half, g.add(g.const(1.0, x), g.dg_op("erf", [g.mul(x, g.const(_SQRT_HALF, x))])))
    small_phi = g.mul(g.const(_INV_SQRT_2PI, x), g.dg_op("exp", [g.neg(g.mul(half, g.mul(x, x)))]))
    return g.mul(d, g.add(big_phi, g.mul(x, small_phi)))


def _gelu_tanh(x):
    # tanh approximation (PyTorch's approximate="tanh", JAX's default).
    c = np.asarray(np.sqrt(2.0 / np.pi), dtype=x.dtype)
    return (0.5 * x * (1.0 + np.tanh(c * (x + np.asarray(0.044715, x.dtype) * x * x * x)))).astype(x.dtype)


def _lower_gelu_tanh(b, kind, ety, x):
    c = b.const(float(np.sqrt(2.0 / np.pi)), ety)
    k = b.const(0.044715, ety)
    half, one = b.const(0.5, ety), b.const(1.0, ety)
    x3 = b.binary("arith.mulf", b.binary("arith.mulf", x, x, ety), x, ety)
    inner = b.binary("arith.mulf", c, b.binary("arith.addf", x, b.binary("arith.mulf", k, x3, ety), ety), ety)
    t = b.unary("math.tanh", inner, ety)
    return b.binary("arith.mulf", b.binary("arith.mulf", half, x, ety), b.binary("arith.addf", one, t, ety), ety)


def _gelu_tanh_grad(g, x, y, d):
    c = g.const(float(np.sqrt(2.0 / np.pi)), x)
    k = g.const(0.044715, x)
    half, one, three = g.const(0.5, x), g.const(1.0, x), g.const(3.0, x)
    x2 = g.mul(x, x)
    t = g.dg_op("tanh", [g.mul(c, g.add(x, g.mul(k, g.mul(x2, x))))])
    dt = g.mul(g.sub(one, g.mul(t, t)), g.mul(c, g.add(one, g.mul(three, g.mul(k, x2)))))
    return g.mul(d, g.add(g.mul(half, g.add(one, t)), g.mul(half, g.mul(x, dt))))


def _lower_log1p(b, kind, ety, x):
    # log(u) * x / (u - 1), u = 1 + x: the rounding of 1 + x cancels out (Goldberg, "What every
    # computer scientist should know about floating-point arithmetic", theorem 4); x itself where
    # u rounds to 1, and log(u) where u is inf. (MLIR's LLVM lowering is log(1 + x): 0 for 1e-8.)
    one = b.const(1.0, ety)
    u = b.binary("arith.addf", one, x, ety)
    d = b.binary("arith.subf", u, one, ety)
    log_u = b.unary("math.log", u, ety)
    r = b.binary("arith.mulf", log_u, b.binary("arith.divf", x, d, ety), ety)
    r = b.select(b.cmp("oeq", d, b.const(0.0, ety), ety), x, r, ety)
    return b.select(b.cmp("oeq", u, b.const(float("inf"), ety), ety), log_u, r, ety)


def _lower_expm1(b, kind, ety, x):
    # (u - 1) * x / log(u), u = exp(x) (Kahan's): x where u rounds to 1, -1 where u - 1 does,
    # and u where it is inf. (MLIR's LLVM lowering is exp(x) - 1: 0 for 1e-8.)
    one = b.const(1.0, ety)
    u = b.unary("math.exp", x, ety)
    d = b.binary("arith.subf", u, one, ety)
    r = b.binary("arith.mulf", d, b.binary("arith.divf", x, b.unary("math.log", u, ety), ety), ety)
    r = b.select(b.cmp("oeq", d, b.const(-1.0, ety), ety), d, r, ety)
    r = b.select(b.cmp("oeq", u, one, ety), x, r, ety)
    return b.select(b.cmp("oeq", u, b.const(float("inf"), ety), ety), u, r, ety)


def _lower_softplus(b, kind, ety, x):
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), without overflow.
    m = b.binary("arith.maximumf", x, b.const(0.0, ety), ety)
    e = b.unary("math.exp", b.unary("arith.negf", b.unary("math.absf", x, ety), ety), ety)
    return b.binary("arith.addf", m, _lower_log1p(b, kind, ety, e), ety)


unary("neg", np.negative, _neg, lambda g, x, y, d: g.neg(d), "-x", float_only=False, builtin=False)
unary("exp", np.exp, _math("math.exp"), lambda g, x, y, d: g.mul(d, y), "e**x")
unary("log", np.log, _math("math.log"), lambda g, x, y, d: g.div(d, x), "natural logarithm", positive=True)
unary("log1p", np.log1p, _lower_log1p, lambda g, x, y, d: g.div(d, g.add(g.const(1.0, x), x)), "log(1 + x)",
      positive=True)
unary("expm1", np.expm1, _lower_expm1, lambda g, x, y, d: g.mul(d, g.add(y, g.const(1.0, x))), "e**x - 1")
unary("sqrt", np.sqrt, _math("math.sqrt"), lambda g, x, y, d: g.div(g.mul(d, g.const(0.5, x)), y), "square root",
      positive=True)
unary("rsqrt", lambda x: (1.0 / np.sqrt(x)).astype(x.dtype), _math("math.rsqrt"),
      lambda g, x, y, d: g.mul(d, g.div(g.mul(g.const(-0.5, x), y), x)), "1 / sqrt(x)", positive=True)
unary("abs", np.abs, lambda b, kind, ety, x: b.unary("math.absf" if kind == "f" else "math.absi", x, ety),
      lambda g, x, y, d: g.mul(d, g.dg_op("sign", [x])), "absolute value", float_only=False)
unary("sign", np.sign, _sign, _none, "-1, 0 or 1", float_only=False)
unary("sin", np.sin, _math("math.sin"), lambda g, x, y, d: g.mul(d, g.dg_op("cos", [x])), "sine")
unary("cos", np.cos, _math("math.cos"), lambda g, x, y, d: g.neg(g.mul(d, g.dg_op("sin", [x]))), "cosine")
unary("tanh", np.tanh, _math("math.tanh"), lambda g, x, y, d: g.mul(d, g.sub(g.const(1.0, x), g.mul(y, y))),
      "hyperbolic tangent")
unary("sigmoid", _sigmoid, _lower_sigmoid, lambda g, x, y, d: g.mul(d, g.mul(y, g.sub(g.const(1.0, x), y))),
      "1 / (1 + exp(-x))")
unary("relu", lambda x: np.maximum(x, np.zeros((), x.dtype)),
      lambda b, kind, ety, x: b.binary("arith.maximumf" if kind == "f" else "arith.maxsi", x, b.const(0, ety), ety),
      lambda g, x, y, d: g.where(g.dg_op("gt", [x, g.const(0.0, x)]), d, g.zeros_like(d)), "max(x, 0)",
      float_only=False)
unary("gelu", _gelu_exact, _lower_gelu_exact, _gelu_exact_grad, "GELU, exact: x * Phi(x), Phi the normal CDF")
unary("gelu_tanh", _gelu_tanh, _lower_gelu_tanh, _gelu_tanh_grad, "GELU, tanh approximation", builtin=False)
unary("softplus", lambda x: np.logaddexp(np.zeros((), x.dtype), x), _lower_softplus,
      lambda g, x, y, d: g.mul(d, g.dg_op("sigmoid", [x])), "log(1 + exp(x))")
unary("erf", _in_f64(math.erf), _math("math.erf"),
      lambda g, x, y, d: g.mul(d, g.mul(g.const(2 / math.sqrt(math.pi), x), g.dg_op("exp", [g.neg(g.mul(x, x))]))),
      "the error function")
unary("floor", np.floor, _math("math.floor"), _none, "round down")
unary("ceil", np.ceil, _math("math.ceil"), _none, "round up")
unary("round", np.round, _math("math.roundeven"), _none, "round half to even (as NumPy and Python 3)")

register(OpDef(
    name="not", impl=np.logical_not, nargs=1, batch=elementwise,
    infer=lambda types, **_: types[0].with_dtype("bool"),
    lower=lower_elementwise(lambda b, kind, ety, args, op: b.binary("arith.xori", args[0], b.const(True, "i1"), "i1")),
    sample=lambda rng: ([rng.standard_normal((3,)) > 0], {}),
    doc='Logical not of a bool tensor.\n\n    ' + example("not", "tensor<3xi1>", "tensor<3xi1>"),
))


# ---------------------------------------------------------------- binary ops, comparisons, logic
def _bcast(types, **_):
    return TensorType(types[0].dtype, broadcast_shapes(*(t.shape for t in types)))


def _bcast_bool(types, **_):
    return TensorType("bool", broadcast_shapes(*(t.shape for t in types)))


def _bin_sample(positive=False, dtype=np.float32):
    def sample(rng):
        a = rng.standard_normal((3, 1, 4)).astype(dtype)
        b = rng.standard_normal((2, 4)).astype(dtype)
        if positive:
            a, b = np.abs(a) + 0.5, np.abs(b) + 0.5
        return [a, b], {}

    return sample


def binary(name: str, impl, element, vjp, summary: str, infer=_bcast, out_dtype_from=None, sample=None) -> None:
    """One op of two operands that broadcast: its element's lowering `element(b, kind, ety, args,
    op)`, its VJP `vjp(g, op, d)`."""
    out = "tensor<2x4xi1>" if infer is _bcast_bool else "tensor<2x4xf32>"
    register(OpDef(
        name=name, impl=impl, nargs=2, infer=infer, agree=broadcast_groups, batch=elementwise,
        lower=lower_elementwise(element, out_dtype_from), vjp=vjp, jvp=diagonal if vjp else None,
        sample=sample or _bin_sample(),
        doc=f"{summary}, element by element, the operands broadcast.\n\n    "
            + example(name, "tensor<2x1xf32>, tensor<4xf32>", out),
    ))


def _fi(fop, iop):
    def f(b, kind, ety, args, op):
        return b.binary(fop if kind == "f" else iop, args[0], args[1], ety)

    return f


def _safe_divisor(b, kind, ety, c):
    """(divisor, is it 0, is it -1) for an integer division: 0 and -1 (whose quotient of the
    smallest integer does not fit, a hardware trap) are replaced by 1; the caller selects NumPy's
    results for them (x // 0 = x % 0 = 0, x // -1 = -x wrapping, x % -1 = 0)."""
    zero = b.cmp("eq", c, b.const(0, ety), ety)
    if kind in "bu":
        return b.select(zero, b.const(1, ety), c, ety), zero, None
    minus = b.cmp("eq", c, b.const(-1, ety), ety)
    replace = b.binary("arith.ori", zero, minus, "i1")
    return b.select(replace, b.const(1, ety), c, ety), zero, minus


def _float_divmod(b, ety, a, c):
    """(floor quotient, remainder with the divisor's sign) of floats as NumPy computes them (from
    fmod, so that 1 // 0.1 is 9 and an infinite divisor leaves a finite dividend)."""
    zero, half, one = b.const(0.0, ety), b.const(0.5, ety), b.const(1.0, ety)
    fmod = mod = b.binary("arith.remf", a, c, ety)
    div = b.binary("arith.divf", b.binary("arith.subf", a, mod, ety), c, ety)
    signs = b.binary("arith.xori", b.cmp("olt", c, zero, ety), b.cmp("olt", mod, zero, ety), "i1")
    adjust = b.binary("arith.andi", b.cmp("une", mod, zero, ety), signs, "i1")
    mod = b.select(adjust, b.binary("arith.addf", mod, c, ety), mod, ety)
    div = b.select(adjust, b.binary("arith.subf", div, one, ety), div, ety)
    mod = b.select(b.cmp("oeq", mod, zero, ety), b.binary("math.copysign", zero, c, ety), mod, ety)
    fl = b.unary("math.floor", div, ety)
    fl = b.select(b.cmp("ogt", b.binary("arith.subf", div, fl, ety), half, ety), b.binary("arith.addf", fl, one, ety),
                  fl, ety)
    quotient = b.binary("arith.divf", a, c, ety)
    fl = b.select(b.cmp("oeq", div, zero, ety), b.binary("math.copysign", zero, quotient, ety), fl, ety)
    by_zero = b.cmp("oeq", c, zero, ety)  # NumPy's a / 0 and fmod(a, 0)
    return b.select(by_zero, quotient, fl, ety), b.select(by_zero, fmod, mod, ety)


def _sc_floordiv(b, kind, ety, args, op):
    if kind == "f":
        return _float_divmod(b, ety, args[0], args[1])[0]
    a = args[0]
    c, zero, minus = _safe_divisor(b, kind, ety, args[1])
    q = b.binary("arith.divui" if kind in "bu" else "arith.floordivsi", a, c, ety)
    if minus is not None:
        q = b.select(minus, b.binary("arith.subi", b.const(0, ety), a, ety), q, ety)
    return b.select(zero, b.const(0, ety), q, ety)


def _sc_mod(b, kind, ety, args, op):
    a, c = args
    if kind == "f":
        return _float_divmod(b, ety, a, c)[1]
    if kind in "bu":
        return b.binary("arith.remui", a, _safe_divisor(b, kind, ety, c)[0], ety)  # x % 0 = 0: x % 1
    # Python's sign rule: the remainder takes the divisor's sign. (x % 1 = 0 is NumPy's x % 0 and x % -1.)
    r = b.binary("arith.remsi", a, _safe_divisor(b, kind, ety, c)[0], ety)
    zero = b.const(0, ety)
    rn = b.cmp("ne", r, zero, ety)
    sr = b.cmp("slt", r, zero, ety)
    sc = b.cmp("slt", c, zero, ety)
    diff = b.binary("arith.xori", sr, sc, "i1")
    fix = b.binary("arith.andi", rn, diff, "i1")
    adj = b.binary("arith.addi", r, c, ety)
    out = b.select(fix, adj, r, ety)
    return out


def _sc_pow(b, kind, ety, args, op):
    if kind == "f":
        return b.binary("math.powf", args[0], args[1], ety)
    if kind == "i":
        fail_if(b, b.cmp("slt", args[1], b.const(0, ety), ety),
                "ValueError: Integers to negative integer powers are not allowed.")
    return b.binary("math.ipowi", args[0], args[1], ety)


def _vjp_pow(g, op, d):
    a, b = op.operands
    y = op.results[0]
    one = g.const(1.0, a)
    da = g.mul(d, g.mul(b, g.dg_op("pow", [a, g.sub(b, one)])))
    da = g.where(g.dg_op("eq", [b, g.const(0.0, b)]), g.zeros_like(da), da)  # 0 ** 0: no NaN
    pos = g.dg_op("gt", [a, g.const(0.0, a)])
    safe = g.where(pos, a, g.add(g.zeros_like(a), one))
    db = g.mul(d, g.where(pos, g.mul(y, g.dg_op("log", [safe])), g.zeros_like(y)))
    return [da, db]


def _extremum(fop, iop):
    def f(b, kind, ety, args, op):
        return b.binary(fop if kind == "f" else iop.replace("si", "ui") if kind in "bu" else iop, args[0], args[1], ety)

    return f


def _vjp_extremum(pick):
    def vjp(g, op, d):
        a, b = op.operands
        wins = g.dg_op(pick, [a, b])
        tie = g.dg_op("eq", [a, b])
        half = g.mul(d, g.const(0.5, a))
        zero = g.zeros_like(d)
        return [g.where(wins, d, g.where(tie, half, zero)), g.where(wins, zero, g.where(tie, half, d))]
    return vjp


binary("add", np.add, _fi("arith.addf", "arith.addi"), lambda g, op, d: [d, d], "a + b")
binary("sub", np.subtract, _fi("arith.subf", "arith.subi"), lambda g, op, d: [d, g.neg(d)], "a - b")
binary("mul", np.multiply, _fi("arith.mulf", "arith.muli"),
       lambda g, op, d: [g.mul(d, op.operands[1]), g.mul(d, op.operands[0])], "a * b")
binary("div", lambda a, b: np.true_divide(a, b).astype(a.dtype, copy=False), _fi("arith.divf", "arith.divsi"),
       lambda g, op, d: [g.div(d, op.operands[1]), g.neg(g.div(g.mul(d, op.results[0]), op.operands[1]))],
       "a / b (float)", sample=_bin_sample(positive=True))
binary("floordiv", np.floor_divide, _sc_floordiv, lambda g, op, d: [None, None], "a // b (floor)",
       sample=_bin_sample(positive=True))
binary("mod", np.mod, _sc_mod,
       lambda g, op, d: [d, g.neg(g.mul(d, g.dg_op("floor", [g.div(*op.operands)])))],
       "a % b (the sign of b, as Python)", sample=_bin_sample(positive=True))
binary("pow", np.power, _sc_pow, _vjp_pow, "a ** b", sample=_bin_sample(positive=True))
def _signed_zeros(fn, zeros):
    """NumPy's maximum/minimum, but of two zeros the one IEEE 754's maximum/minimum (compiled
    code's arith.maximumf/minimumf) gives, in either order: +0 over -0 (a + b of the two) for
    maximum, -0 for minimum (NumPy gives whichever comes second)."""
    def run(a, b):
        r = fn(a, b)
        if r.dtype.kind != "f":
            return r
        both = (a == 0) & (b == 0)
        return np.where(both, zeros(a, b), r).astype(r.dtype, copy=False) if both.any() else r
    return run


binary("maximum", _signed_zeros(np.maximum, lambda a, b: a + b), _extremum("arith.maximumf", "arith.maxsi"), _vjp_extremum("gt"), "the larger")
binary("minimum", _signed_zeros(np.minimum, lambda a, b: -(-a + -b)), _extremum("arith.minimumf", "arith.minsi"), _vjp_extremum("lt"), "the smaller")

for _name, _impl in {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
                     "eq": np.equal, "ne": np.not_equal}.items():
    binary(_name, _impl, lambda b, kind, ety, args, op, p=_name: b.cmp(
        _CMPF[p] if kind == "f" else int_predicate(_CMPI[p], kind), args[0], args[1], ety),
        None, f"comparison ({_name})", infer=_bcast_bool, out_dtype_from=0)

_bools = lambda rng: ([rng.standard_normal((3, 1)) > 0, rng.standard_normal((4,)) > 0], {})  # noqa: E731
binary("and", np.logical_and, lambda b, k, e, a, op: b.binary("arith.andi", a[0], a[1], "i1"), None, "logical and",
       infer=_bcast_bool, sample=_bools)
binary("or", np.logical_or, lambda b, k, e, a, op: b.binary("arith.ori", a[0], a[1], "i1"), None, "logical or",
       infer=_bcast_bool, sample=_bools)


def _where_rule(types, **_):
    c, a, b = types
    if c.dtype != "bool":
        raise ShapeError(f"where needs a bool condition, got {c}")
    return TensorType(a.dtype, broadcast_shapes(c.shape, a.shape, b.shape))


register(OpDef(
    name="where", impl=np.where, nargs=3, infer=_where_rule, agree=broadcast_groups, batch=elementwise,
    lower=lower_elementwise(lambda b, kind, ety, args, op: b.select(args[0], args[1], args[2], ety)),
    vjp=lambda g, op, d: [None, g.where(op.operands[0], d, g.zeros_like(d)), g.where(op.operands[0], g.zeros_like(d), d)],
    jvp=diagonal,
    sample=lambda rng: ([rng.standard_normal((3, 1)) > 0,
                         rng.standard_normal((3, 4)).astype(np.float32),
                         rng.standard_normal((4,)).astype(np.float32)], {}),
    doc="c ? a : b, element by element, the operands broadcast.\n\n    "
        + example("where", "tensor<2x1xi1>, tensor<2x4xf32>, tensor<4xf32>", "tensor<2x4xf32>"),
))
