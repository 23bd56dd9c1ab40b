"""A sweep of calls with wrong dtypes, ranks, sizes and named dims, in both modes.

Every call either runs (and agrees with NumPy) or raises a `DgTypeError`
naming a parameter: never another exception, never a crash of the process.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dg

SRC = """
def mix(a: f32[N, 3], b: f32[3, M], c: f32[M]) -> f32[N, M]:
    return a @ b + c

def pick(x: f64[K], i: i64) -> f64:
    return x[i % len(x)] * 2.0

def count(m: bool[R, R], w: i32[R]) -> i32:
    return sum(where(m, w, 0))
"""

DECLS = {
    "mix": [("a", "float32", ("N", 3)), ("b", "float32", (3, "M")), ("c", "float32", ("M",))],
    "pick": [("x", "float64", ("K",)), ("i", "int64", ())],
    "count": [("m", "bool", ("R", "R")), ("w", "int32", ("R",))],
}


def _reference(name, args):
    if name == "mix":
        a, b, c = args
        return a @ b + c
    if name == "pick":
        x, i = args
        return x[int(i) % len(x)] * 2.0
    m, w = args
    return np.where(m, w, 0).astype(np.int32).sum()


def _valid(name, args):
    dims = {}
    for (_, dtype, shape), a in zip(DECLS[name], args):
        if a.dtype != np.dtype(dtype) or a.ndim != len(shape):
            return False
        for want, got in zip(shape, a.shape):
            if isinstance(want, int):
                if want != got:
                    return False
            elif dims.setdefault(want, got) != got:
                return False
    if name == "pick" and args[0].shape[0] == 0:
        return None  # i % 0: a runtime error, not a type error
    return True


DTYPES = ["float32", "float64", "int32", "int64", "bool"]


@st.composite
def calls(draw):
    name = draw(st.sampled_from(sorted(DECLS)))
    sizes = {n: draw(st.integers(0, 4)) for n in "NMKR"}
    args = []
    for _, dtype, shape in DECLS[name]:
        if draw(st.integers(0, 2)):  # mostly near the declaration, so valid calls happen too
            dt = dtype if draw(st.integers(0, 5)) else draw(st.sampled_from(DTYPES))
            shp = [(d if isinstance(d, int) else sizes[d]) if draw(st.integers(0, 5)) else draw(st.integers(0, 4))
                   for d in shape]
            if not draw(st.integers(0, 5)):
                shp = shp + [2] if draw(st.booleans()) else shp[:-1]
        else:
            dt = draw(st.sampled_from(DTYPES))
            shp = draw(st.lists(st.integers(0, 4), max_size=3))
        a = np.asarray(draw(st.integers(0, 5)) + np.arange(int(np.prod(shp)) if shp else 1).reshape(shp) % 3)
        args.append(a.astype(dt))
    return name, args


MODULES = {}


def _module(mode):
    if mode not in MODULES:
        MODULES[mode] = dg.loads(SRC, mode=mode, filename="sweep.dg")
    return MODULES[mode]


@pytest.mark.parametrize("mode", ["interp", "compiled"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call=calls())
def test_bad_calls_raise_type_errors(mode, call):
    name, args = call
    fn = getattr(_module(mode), name)
    ok = _valid(name, args)
    if ok:
        np.testing.assert_allclose(fn(*args), _reference(name, args), rtol=1e-5)
    elif ok is False:
        with pytest.raises(dg.DgTypeError) as ei:
            fn(*args)
        msg = str(ei.value)
        assert msg.startswith("sweep.dg:") and any(f"'{p}'" in msg for p, _, _ in DECLS[name]), msg


@pytest.mark.parametrize("mode", ["interp", "compiled"])
@pytest.mark.parametrize("bad", [None, "text", object(), [[1.0, 2.0], [3.0]], np.zeros((2, 3), np.complex64),
                                 {"a": 1}, np.zeros((2, 3), object)])
def test_values_that_are_not_arrays(mode, bad):
    m = _module(mode)
    with pytest.raises(dg.DgTypeError) as ei:
        m.mix(bad, np.zeros((3, 2), np.float32), np.zeros(2, np.float32))
    assert "'a'" in str(ei.value)
    with pytest.raises(dg.DgTypeError):
        m.pick(np.zeros(3), bad)


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_remembered_signatures_still_check_each_call(mode):
    """A call with the dtypes and shapes of an earlier one reuses its signature; anything else is
    checked again, and a rejected call is not remembered."""
    m = _module(mode)
    a, b, c = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), np.arange(4, dtype=np.float32)
    for _ in range(2):
        np.testing.assert_allclose(m.mix(a, b, c), a @ b + c)
    for bad in [(a, b, np.ones(3, np.float32)), (a.astype(np.float64), b, c), (a[None], b, c)]:
        for _ in range(2):
            with pytest.raises(dg.DgTypeError):
                m.mix(*bad)
    x = np.arange(3.0)
    assert m.pick(x, np.int64(4)) == 2.0
    with pytest.raises(dg.DgTypeError) as ei:
        m.pick(x, np.float64(4.0))
    assert "'i'" in str(ei.value)
    np.testing.assert_allclose(m.mix(a, b, c), a @ b + c)


@pytest.mark.parametrize("mode", ["interp", "compiled"])
@pytest.mark.parametrize("call", [lambda m: m.pick(np.ones(3), 2 ** 70), lambda m: m.count(np.ones((2, 2), bool), [1, 2 ** 40])])
def test_python_integers_that_do_not_fit(mode, call):
    """A Python int (or a list of them) too large for the declared dtype is a DgTypeError naming the
    parameter (NumPy raised OverflowError for the int; the list wrapped around)."""
    with pytest.raises(dg.DgTypeError) as ei:
        call(_module(mode))
    msg = str(ei.value)
    assert msg.startswith("sweep.dg:") and ("'i'" in msg or "'w'" in msg) and "do" in msg, msg


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_a_negative_size_in_a_shape_is_an_error(mode):
    with pytest.raises(dg.DgTypeError, match="cannot be negative, got -2") as ei:
        dg.loads("def f(x: f32[N]):\n    return reshape(x, [-2, 12])\n", mode=mode, filename="neg.dg").f(np.ones(24, np.float32))
    assert str(ei.value).startswith("neg.dg:2:")


LITERALS = """
def lit() -> i64:
    return 99999999999999999999

def folded() -> i64:
    return 2 ** 70

def index(x: f64[N]) -> f64:
    return x[99999999999999999999]

def trips() -> i64:
    k = 0
    for i in range(99999999999999999999):
        k += 1
    return k

def wraps() -> i64:
    return 9223372036854775808

def narrow(x: i32) -> i32:
    return x + 3000000000

def smallest() -> i64:
    return -9223372036854775808
"""


@pytest.mark.parametrize("mode", ["interp", "compiled"])
@pytest.mark.parametrize("name, args, where", [
    ("lit", (), "3:12"), ("folded", (), "6:12"), ("index", (np.ones(2),), "9:14"), ("trips", (), "13:20"),
    ("wraps", (), "18:5"), ("narrow", (np.int32(1),), "21:12")])
def test_integer_literals_that_do_not_fit(mode, name, args, where):
    """An integer literal (or one folded from literals) outside its dtype is a located DgTypeError
    in both modes: it was IR that does not parse (a RuntimeError), an OverflowError, or it wrapped
    around (2**63 returned -2**63)."""
    m = dg.loads(LITERALS, mode=mode, filename="lit.dg")
    with pytest.raises(dg.DgTypeError, match="does not fit in i(64|32)") as ei:
        getattr(m, name)(*args)
    assert str(ei.value).startswith(f"lit.dg:{where}: error: the integer"), str(ei.value)
    assert int(m.smallest()) == -(2 ** 63)


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_a_huge_view_is_read_in_place_or_refused_with_a_located_error(mode):
    """A zero-stride view of 2**40 elements: the interpreter reads it as the view it is; compiled
    code needs one contiguous array, which does not fit, so the call is a located DgRuntimeError
    (it was a bare MemoryError) and the function is still callable after it."""
    m = _module(mode)
    x = np.broadcast_to(np.float64(3.0), (2 ** 40,))
    if mode == "interp":
        assert m.pick(x, np.int64(5)) == 6.0
    else:
        with pytest.raises(dg.DgRuntimeError) as ei:
            m.pick(x, np.int64(5))
        assert str(ei.value).startswith("sweep.dg:5:10: error: argument 'x' of pick()"), str(ei.value)
        assert "do not fit in memory" in str(ei.value)
    assert m.pick(np.arange(3.0), np.int64(4)) == 2.0


class _TorchLike:
    """What a torch tensor that requires grad does: `__array__` refuses, `detach()` gives one
    that does not."""

    def __init__(self, values, requires_grad=True):
        self.values, self.requires_grad = np.asarray(values), requires_grad

    def __array__(self, dtype=None, copy=None):
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad.")
        return self.values if dtype is None else self.values.astype(dtype)

    def detach(self):
        return _TorchLike(self.values, requires_grad=False)


class _Refuses:
    def __array__(self, dtype=None, copy=None):
        raise ValueError("no values here")


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_tensors_of_other_libraries_are_read_by_value(mode):
    m = _module(mode)
    assert m.pick(_TorchLike(np.arange(3.0)), np.int64(4)) == 2.0
    with pytest.raises(dg.DgTypeError) as ei:
        m.pick(_Refuses(), np.int64(4))
    assert "'x' of pick() (_Refuses) cannot be read as an array: ValueError: no values here" in str(ei.value)
    torch = pytest.importorskip("torch")
    assert m.pick(torch.arange(3.0, dtype=torch.float64, requires_grad=True), np.int64(4)) == 2.0
