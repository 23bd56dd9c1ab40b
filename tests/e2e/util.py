"""Helpers for the dg end-to-end conformance tests (see conftest.py)."""
from __future__ import annotations

import hashlib
import re
import signal
import textwrap
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import dg

PROGRAMS = Path(__file__).resolve().parent / "programs"

_CACHE: dict = {}


def dg_mode(mode: str) -> str:
    """The dg mode a test mode runs in (`ptx` is compiled mode, with PTX made as well; `cuda` is
    compiled mode on the GPU)."""
    return "compiled" if mode in ("ptx", "cuda") else mode


def assemble_ptx(ptx: str, name: str) -> None:
    """`ptxas -arch=sm_90` must assemble this PTX (ptxas comes with nvidia-cuda-nvcc, a dev extra)."""
    from dg.lowering import gpu

    assert ".target sm_90" in ptx
    try:
        cubin = gpu.assemble(ptx, "sm_90")
    except dg.DgError as e:
        raise AssertionError(f"{name}: {e}\n{ptx[:4000]}") from None
    assert cubin


def load_src(src: str, mode: str, filename: str | None = None):
    """dg.loads(src) once per (src, mode, filename); failures are not cached.

    Without a filename each distinct source gets its own, so that
    diagnostics quote the right source line.
    """
    if filename is None:
        filename = "e2e_" + hashlib.sha1(src.encode()).hexdigest()[:10] + ".dg"
    key = ("src", src, mode, filename)
    m = _CACHE.get(key)
    if m is None:
        m = dg.loads(src, mode=dg_mode(mode), filename=filename)
        _CACHE[key] = m
    return m


def load_prog(name: str, mode: str):
    """dg.load(tests/e2e/programs/NAME) once per (name, mode)."""
    key = ("file", name, mode)
    m = _CACHE.get(key)
    if m is None:
        m = dg.load(str(PROGRAMS / name), mode=dg_mode(mode))
        _CACHE[key] = m
    return m


def check(got, want, dtype=None, rtol=1e-5, atol=1e-6):
    """Compare a dg result with a NumPy reference: type, dtype, shape, values.

    `dtype` defaults to the reference's dtype. Integer and bool results must
    match exactly; floating results to `rtol`/`atol`.
    """
    assert isinstance(got, (np.ndarray, np.generic)), f"expected a NumPy array or scalar, got {type(got).__name__}: {got!r}"
    want_arr = np.asarray(want)
    got_arr = np.asarray(got)
    exp_dtype = np.dtype(dtype) if dtype is not None else want_arr.dtype
    assert got_arr.dtype == exp_dtype, f"dtype {got_arr.dtype}, expected {exp_dtype}"
    assert got_arr.shape == want_arr.shape, f"shape {got_arr.shape}, expected {want_arr.shape}"
    if exp_dtype.kind in "biu":
        np.testing.assert_array_equal(got_arr, want_arr)
    else:
        np.testing.assert_allclose(got_arr.astype(np.float64), want_arr.astype(np.float64), rtol=rtol, atol=atol)


def randn(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


_GUARDED: list = []  # the mappings behind at_page_end's arrays (kept while the process runs)


def at_page_end(a: np.ndarray) -> np.ndarray:
    """A copy of `a` whose memory ends where an inaccessible page begins: compiled code that reads
    or writes past its end faults (the test process crashes) instead of going unnoticed."""
    import ctypes
    import mmap

    a = np.ascontiguousarray(a)
    page = mmap.PAGESIZE
    pages = -(-a.nbytes // page) + 1
    buf = mmap.mmap(-1, (pages + 1) * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    start = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(start + pages * page, page, 0) == 0  # PROT_NONE
    out = np.frombuffer(buf, dtype=a.dtype, count=a.size, offset=pages * page - a.nbytes).reshape(a.shape)
    out[...] = a
    _GUARDED.append(buf)
    return out


# ---------------------------------------------------------------- programs checked by hand
# (a program, its Python re-implementation or the located error it must give, in every mode)
F = "x.dg"


def load(src: str, mode: str):
    """The program (dedented) loaded in a test mode as `x.dg`, once per program and mode."""
    return load_src(textwrap.dedent(src).lstrip("\n"), mode, filename=F)


def f32(*xs):
    return np.array(xs, dtype=np.float32)


def assert_same(got, want, rtol=1e-5, atol=1e-6):
    """Structural comparison: tuples element-wise, arrays by value and shape."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple), f"expected a tuple, got {got!r}"
        assert len(got) == len(want), f"{got!r} vs {want!r}"
        for g, w in zip(got, want):
            assert_same(g, w, rtol, atol)
        return
    assert got is not None, "dg returned None"
    g, w = np.asarray(got), np.asarray(want)
    assert g.shape == w.shape, f"shape {g.shape} != {w.shape}: {g!r} vs {w!r}"
    if w.dtype == bool:
        np.testing.assert_array_equal(g, w)
    else:
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


def assert_located(exc, line, cls=dg.DgError):
    assert isinstance(exc, cls), f"{type(exc).__name__}: {exc}"
    msg = str(exc)
    assert re.match(rf"{re.escape(F)}:{line}:\d+: error:", msg), msg


def assert_located_type_error(call, match):
    """dg's documented restriction: a located DgTypeError whose message matches."""
    with pytest.raises(dg.DgTypeError) as e:
        call()
    assert re.match(rf"{re.escape(F)}:\d+:\d+: error:", str(e.value)), str(e.value)
    assert re.search(match, str(e.value)), str(e.value)


class _Hung(BaseException):
    """Raised by the alarm; a BaseException so the interpreter does not wrap it."""


@contextmanager
def time_limit(seconds):
    def handler(*_):
        raise _Hung(f"did not finish within {seconds} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------- errors of the front end
# An error that the parser or the emitter's type and shape checks find is raised before any mode
# makes code (`runtime.modes.prepare`): such a test runs once, in this mode, under
# `made_no_code()`, which fails it where code was made after all (a run-time check: that one
# belongs in every mode).
FRONT_END_MODE = "compiled"


@contextmanager
def made_no_code():
    """Raises AssertionError where a mode made code (runtime.modes.prepare) inside the block,
    whether or not the block raised."""
    from dg.runtime import modes

    made, prepare = [], modes.prepare

    def counted(comp, mode, device, **options):
        made.append(f"{comp.symbol} ({mode}, {device})")
        return prepare(comp, mode, device, **options)

    modes.prepare = counted
    try:
        yield
    finally:  # (an error raised in the block as well: an AssertionError in its place)
        modes.prepare = prepare
        if made:
            raise AssertionError(f"code was made for {made}: not an error of the front end alone")
