"""Registry-driven JVP tests: for every differentiable op with a sample, the
autodiff pass's forward mode (the op's `jvp` facet) agrees with central
differences of the op's forward, J v, and with its reverse mode: the
inner-product identity <u, J v> == <J^T u, v>, J^T u from the op's `vjp`.
In float64, in the interpreter, and for a few ops in compiled code too.

Each case is a one-op function `@f` plus a `jvp` declaration `@f_jvp`."""
import numpy as np
import pytest

from dg.dialects import OPS
from dg.dialects.dialect import parse
from dg.runtime import interp

from .test_vjp_registry import EPS, PIECEWISE_CONSTANT, _as_tuple, _differentiated, _sample, translated

RTOL = 1e-5


def _eligible():
    """Ops with a vjp and a sample with a float operand and a float result (as the VJP tests)."""
    from .test_vjp_registry import _eligible as vjp_cases

    return vjp_cases()


def _pushed(name, arrays, attrs):
    return _differentiated(name, arrays, attrs, "jvp")


def test_every_differentiable_op_has_a_jvp_rule():
    missing = sorted(n for n, op in OPS.items() if op.vjp is not None and op.jvp is None)
    assert not missing, f"ops with a VJP but no JVP rule: {missing}"


@pytest.mark.parametrize("name", _eligible())
def test_jvp_matches_central_differences_and_the_vjp(name):
    arrays, attrs, tr, f, wrt = translated(name, "jvp")
    rng = np.random.default_rng(3)
    vs = {i: rng.standard_normal(arrays[i].shape) for i in wrt}
    y, jv = _as_tuple(interp.run(tr, "f_jvp", arrays + [vs[i] for i in wrt]))
    y, jv = np.asarray(y), np.asarray(jv)
    np.testing.assert_allclose(y, f(arrays), rtol=1e-12, err_msg=f"{name}: the primal result differs")
    assert jv.shape == y.shape and jv.dtype == np.float64, f"{name}: tangent {jv.shape} {jv.dtype}"
    if name in PIECEWISE_CONSTANT:
        assert np.all(jv == 0), f"{name}: the tangent should be zero, got {jv}"
        return
    plus = [a + EPS * vs[i] if i in vs else a for i, a in enumerate(arrays)]
    minus = [a - EPS * vs[i] if i in vs else a for i, a in enumerate(arrays)]
    fd = (f(plus) - f(minus)) / (2 * EPS)
    scale = max(float(np.max(np.abs(fd))), 1e-8)
    assert float(np.max(np.abs(jv - fd))) <= 1e-5 * scale + 1e-7, f"{name}: J v {jv} but differences give {fd}"

    vout, vwrt = _differentiated(name, arrays, attrs)
    u = rng.standard_normal(y.shape)
    grads = _as_tuple(interp.run(interp.Translation(parse(vout, f"<vjp:{name}:out>")), "f_vjp", arrays + [u]))
    lhs = float(np.sum(u * jv))
    terms = [float(np.sum(np.asarray(g) * vs[i])) for i, g in zip(vwrt, grads)]
    scale = max(float(np.sum(np.abs(u * jv))), sum(abs(t) for t in terms), 1e-8)
    assert abs(lhs - sum(terms)) <= 1e-9 * scale, f"{name}: <u, J v> = {lhs} but <J^T u, v> = {sum(terms)}"


COMPILED_OPS = ["add", "mul", "tanh", "matmul", "softmax", "max", "broadcast_to", "where"]


@pytest.mark.parametrize("name", COMPILED_OPS)
def test_jvp_compiled_agrees_with_interpreter(name):
    from dg.lowering.codegen.units import Unit
    from dg.runtime import targets
    from dg.runtime.cpu import CPU

    arrays, attrs = _sample(name)
    out, wrt = _pushed(name, arrays, attrs)
    rng = np.random.default_rng(5)
    ts = [rng.standard_normal(arrays[i].shape) for i in wrt]
    want = _as_tuple(interp.run(interp.Translation(parse(out, f"<jvp:{name}:out>")), "f_jvp", arrays + ts))
    got = _as_tuple(targets.build(CPU, Unit(out)).call("f_jvp", arrays + ts))
    for w_, g_ in zip(want, got):
        np.testing.assert_allclose(np.asarray(g_), np.asarray(w_), rtol=1e-12, atol=1e-12)
