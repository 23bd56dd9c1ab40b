"""Registry-driven VJP tests: for every differentiable op with a sample, the
autodiff pass's vector-Jacobian product agrees with central differences of the
op's forward (the inner-product identity <u, J v> == <J^T u, v>), in float64.

Each case is a one-op function `@f` plus a `vjp` declaration `@f_vjp`; the
module goes through `differentiate` and runs in the interpreter (and, for a
few ops, the compiled CPU backend too)."""
import numpy as np
import pytest

from dg.core.attrs import attr_text
from dg.core.types import TensorType, dtype_of_np
from dg.dialects import OPS
from dg.dialects.dialect import parse
from dg.lowering.transforms import differentiate
from dg.runtime import interp

EPS = 1e-6
RTOL = 1e-5
# Piecewise-constant ops: their VJP must be exactly zero (away from the jumps).
PIECEWISE_CONSTANT = {"floor", "ceil", "round", "sign", "floordiv"}
# Known-wrong VJPs: name -> reason (kept visible as strict xfails).
KNOWN_BAD: dict = {}


def _is_float(a) -> bool:
    return np.asarray(a).dtype.kind == "f"


def _type_of(a) -> TensorType:
    a = np.asarray(a)
    return TensorType(dtype_of_np(a.dtype), tuple(a.shape))


def _f64(arrays):
    return [np.asarray(a).astype(np.float64) if _is_float(a) else np.asarray(a) for a in arrays]


# ---------------------------------------------------------------- sample points away from kinks
def _dist_to_int(x, offset=0.0):
    x = np.asarray(x, dtype=np.float64) - offset
    return np.abs(x - np.round(x))


def _top_gap(x, axes):
    """Smallest gap between the two largest (or smallest) values of each reduced slice."""
    axes = [a % x.ndim for a in axes]
    keep = [a for a in range(x.ndim) if a not in axes]
    y = np.transpose(x, keep + axes).reshape(int(np.prod([x.shape[a] for a in keep])), -1)
    if y.shape[1] < 2:
        return np.inf
    s = np.sort(y, axis=1)
    return min(np.min(s[:, -1] - s[:, -2]), np.min(s[:, 1] - s[:, 0]))


def _kink_distance(name, arrays, attrs) -> float:
    """How far the sample point is from the op's nearest non-smooth point (inf: smooth op)."""
    x = arrays[0]
    if name in ("relu", "abs", "sign"):
        return float(np.min(np.abs(x)))
    if name in ("floor", "ceil"):
        return float(np.min(_dist_to_int(x)))
    if name == "round":
        return float(np.min(_dist_to_int(x, 0.5)))
    if name in ("maximum", "minimum"):
        return float(np.min(np.abs(x - arrays[1])))
    if name in ("max", "min"):
        return float(_top_gap(x, attrs["axes"]))
    if name in ("mod", "floordiv"):
        b = arrays[1]
        return float(min(np.min(_dist_to_int(x / b) * np.abs(b)), np.min(np.abs(b))))
    return np.inf


def _sample(name, seed=0):
    """The op's sample in float64, resampled until it is at least 1e-3 away from a kink."""
    op = OPS[name]
    for s in range(seed, seed + 100):
        arrays, attrs = op.sample(np.random.default_rng(s))
        arrays = _f64(arrays)
        if _kink_distance(name, arrays, attrs) > 1e-3:
            return arrays, attrs
    raise AssertionError(f"{name}: no sample away from kinks")


def _eligible():
    """Ops with a vjp and a sample that has a float operand and a float result."""
    out = []
    for name, op in sorted(OPS.items()):
        if op.vjp is None or op.sample is None:
            continue
        arrays, attrs = op.sample(np.random.default_rng(0))
        arrays = _f64(arrays)
        if not any(_is_float(a) for a in arrays):
            continue
        rt = op.infer([_type_of(a) for a in arrays], **attrs)
        if isinstance(rt, list) or rt.dtype not in ("f64", "f32", "f16", "bf16"):
            continue
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN_BAD[name])] if name in KNOWN_BAD else []
        out.append(pytest.param(name, marks=marks, id=name))
    return out


# ---------------------------------------------------------------- the module
def one_op_module_text(name, arrays, attrs, kind: str = "vjp") -> tuple:
    """`@f` (the op alone) and `@f_<kind>`, its "vjp" declaration (operands and the result's
    cotangent in, gradients of the float operands out) or its "jvp" declaration (operands and
    the float operands' tangents in, the result and its tangent out); returns (text, float
    operand indices)."""
    op = OPS[name]
    types = [_type_of(a) for a in arrays]
    rt = op.infer(types, **attrs)
    ins = ", ".join(t.mlir() for t in types)
    params = ", ".join(f"%a{i}: {t.mlir()}" for i, t in enumerate(types))
    operands = ", ".join(f"%a{i}" for i in range(len(types)))
    attr = ", ".join(f"{k} = {attr_text(op.attrs[k], v)}" for k, v in attrs.items())
    wrt = [i for i, a in enumerate(arrays) if _is_float(a)]
    floats = ", ".join(types[i].mlir() for i in wrt)
    sig = f"({ins}, {rt.mlir()}) -> ({floats})" if kind == "vjp" else f"({ins}, {floats}) -> ({rt.mlir()}, {rt.mlir()})"
    text = f"""
func.func @f({params}) -> {rt.mlir()} {{
  %r = "dg.{name}"({operands}) {{{attr}}} : ({ins}) -> {rt.mlir()}
  return %r : {rt.mlir()}
}}
func.func private @f_{kind}{sig} attributes {{dg.kind = "{kind}", dg.of = "f", dg.wrt = array<i64: {", ".join(map(str, wrt))}>}}
"""
    return text, wrt



def _differentiated(name, arrays, attrs, kind: str = "vjp"):
    text, wrt = one_op_module_text(name, arrays, attrs, kind)
    out = differentiate(parse(text, f"<{kind}:{name}>"))
    return out, wrt


def translated(name: str, kind: str = "vjp"):
    """The op's sample, its module with the `kind` declaration made (interpreter), the forward as a
    float64 function of the operands, the float operands: (arrays, attrs, translation, f, wrt)."""
    arrays, attrs = _sample(name)
    out, wrt = _differentiated(name, arrays, attrs, kind)
    tr = interp.Translation(parse(out, f"<{kind}:{name}:out>"))
    f = lambda xs: np.asarray(interp.run(tr, "f", xs), dtype=np.float64)  # noqa: E731
    return arrays, attrs, tr, f, wrt


def _as_tuple(r):
    return tuple(r) if isinstance(r, (tuple, list)) else (r,)


@pytest.mark.parametrize("name", _eligible())
def test_vjp_matches_central_differences(name):
    arrays, attrs, tr, f, wrt = translated(name)

    y = f(arrays)
    rng = np.random.default_rng(42)
    u = rng.standard_normal(y.shape)
    grads = _as_tuple(interp.run(tr, "f_vjp", arrays + [u]))
    assert len(grads) == len(wrt)
    for i, g in zip(wrt, grads):
        g = np.asarray(g)
        assert g.shape == arrays[i].shape, f"{name}: gradient {i} has shape {g.shape}, operand {arrays[i].shape}"
        assert g.dtype == np.float64, f"{name}: gradient {i} is {g.dtype}"
        assert np.all(np.isfinite(g)), f"{name}: gradient {i} is not finite: {g}"

    if name in PIECEWISE_CONSTANT:
        for i, g in zip(wrt, grads):
            assert np.all(np.asarray(g) == 0), f"{name}: gradient {i} should be zero, got {g}"
        return

    vs = {i: rng.standard_normal(arrays[i].shape) for i in wrt}
    plus = [a + EPS * vs[i] if i in vs else a for i, a in enumerate(arrays)]
    minus = [a - EPS * vs[i] if i in vs else a for i, a in enumerate(arrays)]
    jv = (f(plus) - f(minus)) / (2 * EPS)
    lhs = float(np.sum(u * jv))
    terms = [float(np.sum(np.asarray(g) * vs[i])) for i, g in zip(wrt, grads)]
    rhs = sum(terms)
    scale = max(float(np.sum(np.abs(u * jv))), sum(abs(t) for t in terms), 1e-8)
    assert abs(lhs - rhs) <= RTOL * scale, (
        f"{name}: <u, Jv> = {lhs!r} (central differences) but <J^T u, v> = {rhs!r} "
        f"(per operand: {terms}); sample {[a.shape for a in arrays]} {attrs}")


COMPILED_OPS = ["add", "mul", "tanh", "matmul", "softmax", "sum", "sum_to", "broadcast_to"]


@pytest.mark.parametrize("name", COMPILED_OPS)
def test_vjp_compiled_agrees_with_interpreter(name):
    from dg.lowering.codegen.units import Unit
    from dg.runtime import targets
    from dg.runtime.cpu import CPU

    arrays, attrs = _sample(name)
    out, wrt = _differentiated(name, arrays, attrs)
    tr = interp.Translation(parse(out, f"<vjp:{name}:out>"))
    y = np.asarray(interp.run(tr, "f", arrays))
    u = np.random.default_rng(7).standard_normal(y.shape)
    want = _as_tuple(interp.run(tr, "f_vjp", arrays + [u]))
    got = _as_tuple(targets.build(CPU, Unit(out)).call("f_vjp", arrays + [u]))
    assert len(got) == len(want) == len(wrt)
    for w, g in zip(want, got):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-12)


def test_prod_vjp_at_zero_elements():
    """The product of the other elements, with no 0/0: one zero, two zeros, none."""
    x = np.array([[1.0, 0.0, 2.0], [3.0, 0.5, 0.25], [0.0, 4.0, 0.0]])
    out, _ = _differentiated("prod", [x], {"axes": (1,), "keepdims": False})
    g = interp.run(interp.Translation(parse(out)), "f_vjp", [x, np.ones(3)])
    np.testing.assert_allclose(np.asarray(g), [[0.0, 2.0, 0.0], [0.125, 0.75, 1.5], [0.0, 0.0, 0.0]])


def test_pow_vjp_at_zero_to_the_zero():
    a, b = np.array([0.0, 2.0]), np.array([0.0, 3.0])
    out, _ = _differentiated("pow", [a, b], {})
    ga, gb = interp.run(interp.Translation(parse(out)), "f_vjp", [a, b, np.ones(2)])
    np.testing.assert_allclose(ga, [0.0, 12.0])
    assert np.all(np.isfinite(gb))


def test_every_op_a_vjp_writes_is_differentiable_again():
    """Second order: each op that a registered VJP writes with a float operand and a float result
    has a VJP and a JVP of its own (or is one the autodiff pass knows carries no derivative), so
    that grad(grad(f)) and jvp(grad(f)) reach no op without a rule. Walks every op with a VJP and
    a sample, the ops its one-op module's reverse function is written with."""
    import re

    from dg.lowering.ad.activity import INACTIVE

    lacking = {}
    for param in _eligible():
        name = param.values[0]
        arrays, attrs = _sample(name)
        out, _ = _differentiated(name, arrays, attrs)
        start = out.index("@f__vjp")
        end = out.find("func.func", start)
        for m in re.finditer(r'"dg\.([\w.]+)"\(.*?:\s*\((.*?)\)\s*->\s*\((.*?)\)', out[start:end if end > 0 else None]):
            op, ins, res = m.groups()
            floats = r"x?(?:f16|f32|f64|bf16)>"
            if op in INACTIVE or not re.search(floats, ins) or not re.search(floats, res):
                continue
            rules = OPS[op]
            if rules.vjp is None or rules.jvp is None:
                lacking.setdefault(op, []).append(name)
    assert not lacking, f"ops written by VJPs with no VJP or JVP of their own (op: whose VJP writes it): {lacking}"
