"""Compiled matmuls go to the BLAS NumPy ships; any layout BLAS cannot take runs as loops."""
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dg
from dg.core.mlir import ExecutionEngine, ir
from dg.dialects.dialect import shared_context
from dg.lowering import blas
from dg.lowering import cpu as lowering_cpu
from dg.runtime import linking

SRC = """
def mm(a: f32[M, K], b: f32[K, N]) -> f32[M, N]:
    return a @ b

def mmd(a: f64[M, K], b: f64[K, N]) -> f64[M, N]:
    return a @ b

def mm_t(a: f32[K, M], b: f32[N, K]) -> f32[M, N]:
    return transpose(a) @ transpose(b)

def grad_mm(a: f32[M, K], b: f32[K, N]):
    return grad(lambda_loss, wrt=(0, 1))(a, b)

def lambda_loss(a: f32[M, K], b: f32[K, N]) -> f32:
    return sum(tanh(a @ b))
"""


@pytest.fixture(scope="module")
def m():
    return dg.loads(SRC, mode="compiled")


SHAPES = [(1, 1, 1), (3, 5, 2), (64, 33, 17), (1, 40, 7), (9, 1, 4), (0, 3, 2), (2, 0, 3), (2, 3, 0)]


@pytest.mark.parametrize("mkn", SHAPES)
def test_matmul_matches_numpy(m, mkn):
    M, K, N = mkn
    rng = np.random.default_rng(M * 100 + K * 10 + N)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    np.testing.assert_allclose(m.mm(a, b), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.mm_t(np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)), a @ b, rtol=1e-5, atol=1e-5)
    ad, bd = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(m.mmd(ad, bd), ad @ bd, rtol=1e-12, atol=1e-12)


def test_gradients_through_blas_match_interpreter(m):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32)
    got = m.grad_mm(a, b)
    want = dg.loads(SRC, mode="interp").grad_mm(a, b)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_compiled_code_calls_blas_when_found(m):
    a = np.ones((2, 3), np.float32)
    b = np.ones((3, 4), np.float32)
    text = m.mm.ir("llvm", args=(a, b))
    if blas.locate() is None:
        assert "dg_blas_sgemm" not in text
    else:
        assert "llvm.call @dg_blas_sgemm" in text or "@dg_blas_sgemm(" in text
        assert blas.locate().int_type in ("i32", "i64")


@pytest.mark.slow
def test_without_blas_matmul_is_loops():
    code = ("import numpy as np, dg\n"
            "m = dg.loads('def mm(a: f32[M, K], b: f32[K, N]) -> f32[M, N]:\\n    return a @ b\\n', mode='compiled')\n"
            "a = np.arange(6, dtype=np.float32).reshape(2, 3); b = np.arange(12, dtype=np.float32).reshape(3, 4)\n"
            "assert np.array_equal(m.mm(a, b), a @ b)\n"
            "assert 'dg_blas' not in m.mm.ir('llvm', args=(a, b))\n"
            "print('ok')\n")
    env = dict(os.environ, DG_BLAS="0", DG_CACHE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# A bufferized module whose matmuls see a transposed view, a view strided in both dims and a
# transposed output: the helper must send the first to BLAS with a transpose flag and run the
# others as loops, with the same results. A zero fill right before a matmul is folded into the
# call (BLAS overwrites instead of accumulating), on the BLAS path and on the loop path.
LAYOUTS = """
func.func @run(%a: memref<8x6xf32>, %b: memref<8x10xf32>, %c1: memref<6x10xf32>, %c2: memref<6x5xf32>,
               %c3: memref<10x6xf32>, %c4: memref<6x10xf32>) attributes {llvm.emit_c_interface} {
  %zero = arith.constant 0.0 : f32
  %at = memref.transpose %a (i, j) -> (j, i) : memref<8x6xf32> to memref<6x8xf32, strided<[1, 6]>>
  %bs = memref.subview %b[0, 0][8, 5][1, 2] : memref<8x10xf32> to memref<8x5xf32, strided<[10, 2]>>
  %ct = memref.transpose %c3 (i, j) -> (j, i) : memref<10x6xf32> to memref<6x10xf32, strided<[1, 6]>>
  linalg.matmul ins(%at, %b : memref<6x8xf32, strided<[1, 6]>>, memref<8x10xf32>) outs(%c1 : memref<6x10xf32>)
  linalg.fill ins(%zero : f32) outs(%c2 : memref<6x5xf32>)
  linalg.matmul ins(%at, %bs : memref<6x8xf32, strided<[1, 6]>>, memref<8x5xf32, strided<[10, 2]>>) outs(%c2 : memref<6x5xf32>)
  linalg.fill ins(%zero : f32) outs(%c4 : memref<6x10xf32>)
  linalg.matmul ins(%at, %b : memref<6x8xf32, strided<[1, 6]>>, memref<8x10xf32>) outs(%c4 : memref<6x10xf32>)
  linalg.matmul ins(%at, %b : memref<6x8xf32, strided<[1, 6]>>, memref<8x10xf32>) outs(%ct : memref<6x10xf32, strided<[1, 6]>>)
  return
}
"""


def _descriptor(x):
    """What ExecutionEngine.invoke passes for a memref argument: a pointer to a pointer to its descriptor."""
    p = x.ctypes.data
    words = [p, p, 0, *x.shape, *(s // x.itemsize for s in x.strides)]
    return ctypes.pointer(ctypes.pointer((ctypes.c_int64 * len(words))(*words)))


def _engine(mod, symbols=()):
    """The bufferized module lowered to LLVM and JIT-compiled, with the executor's runtime symbols
    (those in `symbols`, (name, address) pairs, in place of the executor's)."""
    lowering_cpu.to_llvm(mod)
    engine = ExecutionEngine(mod, opt_level=2, shared_libs=[])
    for name, addr in {**linking.install(), **dict(symbols)}.items():
        engine.raw_register_runtime(name, ctypes.c_void_p(addr))
    return engine


def _run_layouts(symbols=()):
    """LAYOUTS routed, compiled (with `symbols` for the BLAS's) and run: (matmuls routed, zero fills
    left in @run, [(result, NumPy's) for each output])."""
    with shared_context():
        mod = ir.Module.parse(LAYOUTS)
        routed = blas.route_matmuls(mod)
        fills = str(mod).split("func.func @run")[1].split("func.func")[0].count("linalg.fill")
        engine = _engine(mod, symbols)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal((8, 10)).astype(np.float32)
    c1 = np.full((6, 10), 0.5, np.float32)  # matmul accumulates into its output
    c2 = np.full((6, 5), 7.0, np.float32)  # zero-filled first
    c3 = np.zeros((10, 6), np.float32)
    c4 = np.full((6, 10), 7.0, np.float32)
    engine.invoke("run", *[_descriptor(x) for x in (a, b, c1, c2, c3, c4)])
    return routed, fills, [(c1, 0.5 + a.T @ b), (c2, a.T @ b[:, ::2]), (c3, (a.T @ b).T), (c4, a.T @ b)]


def test_helper_handles_every_layout():
    routed, fills, results = _run_layouts()
    assert routed == (4 if blas.locate() else 0)
    assert fills == (0 if blas.locate() else 2)  # folded into the BLAS calls
    for got, want in results:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# Which BLAS: MKL first when installed, then NumPy's OpenBLAS, then a system one; DG_BLAS narrows
# the choice to one family or to none.

def _mkl():
    """(library, path) of an installed MKL, or (None, None)."""
    for path in blas._mkl_libraries():
        try:
            return ctypes.CDLL(path), path
        except OSError:
            continue
    return None, None


def _numpy_openblas():
    """NumPy's own OpenBLAS candidate (family, path, symbols), or None."""
    return next((c for c in blas._candidates() if c[0] == "openblas" and "numpy.libs" in c[1]), None)


@pytest.mark.skipif(_numpy_openblas() is None, reason="this NumPy does not ship OpenBLAS")
def test_locate_prefers_families_in_order_and_skips_what_does_not_load(monkeypatch):
    _, path, symbols = _numpy_openblas()
    ity = symbols[0][1]
    fake = [("openblas", path, symbols),
            ("mkl", "/nonexistent/libmkl_rt.so.3", (("cblas_{t}gemm_64", "i64"),)),  # does not load
            ("mkl", path, (("no_such_{t}gemm", "i64"), symbols[0]))]  # loads; the first pattern is missing
    monkeypatch.setattr(blas, "_candidates", lambda family=None: iter(fake))
    got = blas._locate.__wrapped__(blas.FAMILIES)
    assert (got.path, got.int_type) == (path, ity)
    assert got is not None and dict(got.addresses)["dg_blas_sgemm"] == ctypes.cast(
        getattr(ctypes.CDLL(path), symbols[0][0].format(t="s")), ctypes.c_void_p).value
    # the "mkl" entry won although listed after the OpenBLAS one: families are tried in order
    monkeypatch.setattr(blas, "_candidates", lambda family=None: iter(fake[:2]))
    assert blas._locate.__wrapped__(blas.FAMILIES).path == path
    assert blas._locate.__wrapped__(("mkl",)) is None
    assert blas._locate.__wrapped__(()) is None


def test_dg_blas_picks_a_family_or_none(monkeypatch):
    def chosen():
        return blas._locate(blas._wanted())

    monkeypatch.setenv("DG_BLAS", "0")
    assert chosen() is None
    monkeypatch.setenv("DG_BLAS", "openblas")
    b = chosen()
    assert b is None or "openblas" in Path(b.path).name
    monkeypatch.setenv("DG_BLAS", "mkl")
    b = chosen()
    assert (b is None) == (_mkl()[0] is None)
    assert b is None or "mkl_rt" in Path(b.path).name
    monkeypatch.setenv("DG_BLAS", "")
    assert chosen() == blas._locate(blas.FAMILIES)
    if _mkl()[0] is not None:
        assert "mkl_rt" in Path(chosen().path).name
    monkeypatch.setenv("DG_BLAS", "atlas")
    with pytest.raises(dg.DgError, match="DG_BLAS='atlas': expected one of 0, 1, mkl, openblas, cblas"):
        chosen()
    assert blas.locate() is blas.locate()  # chosen once per process, whatever DG_BLAS says later


def test_32_bit_sizes_are_checked_before_the_call():
    wide, _ = blas.helper_text("f32", "i64", overwrite=False)
    narrow, _ = blas.helper_text("f32", "i32", overwrite=False)
    assert "2147483647" not in wide
    assert narrow.count("arith.cmpi ule") == wide.count("arith.cmpi ule") + 6 and "2147483647" in narrow
    with shared_context():
        ir.Module.parse(narrow + blas.helper_text("f32", "i32", overwrite=False)[1]).operation.verify()


@pytest.mark.skipif(_mkl()[0] is None, reason="MKL is not installed (pip install -e .[mkl])")
def test_helper_with_32_bit_sizes_runs_on_mkl(monkeypatch):
    lib, path = _mkl()
    addrs = tuple((f"dg_blas_{t}gemm", ctypes.cast(getattr(lib, f"cblas_{t}gemm"), ctypes.c_void_p).value) for t in "sd")
    monkeypatch.setattr(blas, "locate", lambda: blas.Blas(path, "i32", addrs))
    routed, fills, results = _run_layouts(addrs)
    assert (routed, fills) == (4, 0)
    for got, want in results:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(_mkl()[0] is None, reason="MKL is not installed (pip install -e .[mkl])")
def test_programs_on_mkl_match_numpy():
    code = ("import numpy as np, dg\n"
            "from dg.lowering import blas\n"
            "import sys\n"
            "m = dg.loads(sys.argv[1], mode='compiled')\n"
            "rng = np.random.default_rng(0)\n"
            "a = rng.standard_normal((70, 33)).astype(np.float32); b = rng.standard_normal((33, 21)).astype(np.float32)\n"
            "np.testing.assert_allclose(m.mm(a, b), a @ b, rtol=1e-4, atol=1e-4)\n"
            "np.testing.assert_allclose(m.mmd(a.astype(float), b.astype(float)), a.astype(float) @ b, rtol=1e-12)\n"
            "np.testing.assert_allclose(m.mm_t(np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)), a @ b, rtol=1e-4, atol=1e-4)\n"
            "ga, gb = m.grad_mm(a, b); d = 1 - np.tanh(a @ b) ** 2\n"
            "np.testing.assert_allclose(ga, d @ b.T, rtol=1e-3, atol=1e-4)\n"
            "np.testing.assert_allclose(gb, a.T @ d, rtol=1e-3, atol=1e-4)\n"
            "assert 'mkl_rt' in blas.identity() and 'dg_blas_sgemm' in m.mm.ir('llvm', args=(a, b))\n"
            "print('ok')\n")
    env = dict(os.environ, DG_BLAS="mkl", DG_CACHE="0")
    out = subprocess.run([sys.executable, "-c", code, SRC], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# Transposes the autodiff pass writes before matmuls: a copy that only feeds the matmul becomes a
# transposed view (no copy, BLAS gets a transpose flag); a copy whose source is written before
# the matmul, or that feeds two matmuls, stays.
TRANSPOSES = """
#t = affine_map<(d0, d1) -> (d1, d0)>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @views(%a: memref<8x6xf32>, %b: memref<10x8xf32>, %c: memref<6x10xf32>) attributes {llvm.emit_c_interface} {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<6x10xf32>)
  %ta = memref.alloc() : memref<6x8xf32>
  linalg.generic {indexing_maps = [#t, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<8x6xf32>) outs(%ta : memref<6x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  %tb = memref.alloc() : memref<8x10xf32>
  linalg.generic {indexing_maps = [#t, #id], iterator_types = ["parallel", "parallel"]}
      ins(%b : memref<10x8xf32>) outs(%tb : memref<8x10xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  linalg.matmul ins(%ta, %tb : memref<6x8xf32>, memref<8x10xf32>) outs(%c : memref<6x10xf32>)
  memref.dealloc %ta : memref<6x8xf32>
  memref.dealloc %tb : memref<8x10xf32>
  return
}
func.func @hazard(%a: memref<8x6xf32>, %b: memref<8x10xf32>, %c: memref<6x10xf32>, %d: memref<6x10xf32>) attributes {llvm.emit_c_interface} {
  %zero = arith.constant 0.0 : f32
  %two = arith.constant 2.0 : f32
  %ta = memref.alloc() : memref<6x8xf32>
  linalg.generic {indexing_maps = [#t, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<8x6xf32>) outs(%ta : memref<6x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]} outs(%a : memref<8x6xf32>) {
  ^bb0(%out: f32):
    %x = arith.mulf %out, %two : f32
    linalg.yield %x : f32
  }
  linalg.fill ins(%zero : f32) outs(%c : memref<6x10xf32>)
  linalg.matmul ins(%ta, %b : memref<6x8xf32>, memref<8x10xf32>) outs(%c : memref<6x10xf32>)
  %tb = memref.alloc() : memref<6x8xf32>
  linalg.generic {indexing_maps = [#t, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<8x6xf32>) outs(%tb : memref<6x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  linalg.matmul ins(%tb, %b : memref<6x8xf32>, memref<8x10xf32>) outs(%d : memref<6x10xf32>)
  linalg.matmul ins(%tb, %b : memref<6x8xf32>, memref<8x10xf32>) outs(%d : memref<6x10xf32>)
  memref.dealloc %ta : memref<6x8xf32>
  memref.dealloc %tb : memref<6x8xf32>
  return
}
"""


def _function_text(mod, name):
    return str(mod).split(f"func.func @{name}")[1].split("func.func")[0]


@pytest.mark.skipif(blas.locate() is None, reason="no BLAS library found")
def test_transpose_copies_become_views():
    with shared_context():
        mod = ir.Module.parse(TRANSPOSES)
        assert blas.route_matmuls(mod) == 4
        views, hazard = _function_text(mod, "views"), _function_text(mod, "hazard")
        assert views.count("memref.transpose") == 2 and "linalg.generic" not in views
        assert "memref.alloc" not in views and "memref.dealloc" not in views
        assert "memref.transpose" not in hazard and hazard.count("linalg.generic") == 3
        engine = _engine(mod)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal((10, 8)).astype(np.float32)
    c = np.full((6, 10), 7.0, np.float32)
    engine.invoke("views", *[_descriptor(x) for x in (a, b, c)])
    np.testing.assert_allclose(c, a.T @ b.T, rtol=1e-5, atol=1e-5)
    a0, b2 = a.copy(), np.ascontiguousarray(b.T)
    d = np.zeros((6, 10), np.float32)
    engine.invoke("hazard", *[_descriptor(x) for x in (a, b2, c, d)])
    np.testing.assert_allclose(a, 2 * a0)
    np.testing.assert_allclose(c, a0.T @ b2, rtol=1e-5, atol=1e-5)  # the copy before the write
    np.testing.assert_allclose(d, 2 * (2 * a0).T @ b2, rtol=1e-5, atol=1e-5)


# A transpose copy's source allocated before the copy and written between the copy and the
# matmul: the copy must stay (a view would let the matmul see the write).
HAZARD_ALLOC = """
#t = affine_map<(d0, d1) -> (d1, d0)>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @run(%a: memref<8x6xf32>, %b: memref<8x10xf32>, %c: memref<6x10xf32>) attributes {llvm.emit_c_interface} {
  %zero = arith.constant 0.0 : f32
  %two = arith.constant 2.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<6x10xf32>)
  %s = memref.alloc() : memref<8x6xf32>
  memref.copy %a, %s : memref<8x6xf32> to memref<8x6xf32>
  %ts = memref.alloc() : memref<6x8xf32>
  linalg.generic {indexing_maps = [#t, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s : memref<8x6xf32>) outs(%ts : memref<6x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]} outs(%s : memref<8x6xf32>) {
  ^bb0(%out: f32):
    %x = arith.mulf %out, %two : f32
    linalg.yield %x : f32
  }
  linalg.matmul ins(%ts, %b : memref<6x8xf32>, memref<8x10xf32>) outs(%c : memref<6x10xf32>)
  memref.dealloc %ts : memref<6x8xf32>
  memref.dealloc %s : memref<8x6xf32>
  return
}
"""


@pytest.mark.skipif(blas.locate() is None, reason="no BLAS library found")
def test_transpose_copy_stays_when_its_allocated_source_is_written_after():
    with shared_context():
        mod = ir.Module.parse(HAZARD_ALLOC)
        assert blas.route_matmuls(mod) == 1
        assert "memref.transpose" not in _function_text(mod, "run")
        engine = _engine(mod)
    rng = np.random.default_rng(6)
    a = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal((8, 10)).astype(np.float32)
    c = np.zeros((6, 10), np.float32)
    engine.invoke("run", *[_descriptor(x) for x in (a, b, c)])
    np.testing.assert_allclose(c, a.T @ b, rtol=1e-5, atol=1e-5)


# Batched and broadcast products (issue 20): [..., m, k] @ [k, n] is one gemm over the leading
# axes collapsed (and so is its weight gradient, over the batch); equal batch axes are a loop of
# gemm calls on views (a transposed operand a BLAS flag, not a copy); broadcast batch axes stay loops.
BATCHED = """
def mm3(a: f32[B, T, C], w: f32[C, D]) -> f32[B, T, D]:
    return a @ w

def mm4(a: f32[B, H, T, C], w: f32[C, D]) -> f32[B, H, T, D]:
    return a @ w

def mm3s(a: f32[2, 3, 4], w: f32[4, 5]) -> f32[2, 3, 5]:
    return a @ w

def mm3t(a: f32[B, T, C], w: f32[D, C]) -> f32[B, T, D]:
    return a @ transpose(w)

def bmm(q: f32[B, H, T, D], k: f32[B, H, S, D]) -> f32[B, H, T, S]:
    return q @ transpose(k, (0, 1, 3, 2))

def bmms(q: f32[2, 3, 4, 5], k: f32[2, 3, 5, 6]) -> f32[2, 3, 4, 6]:
    return q @ k

def bmm3(q: f32[B, T, D], k: f32[B, D, S]) -> f32[B, T, S]:
    return q @ k

def bcast(q: f32[B, T, D], k: f32[1, D, S]) -> f32[B, T, S]:
    return q @ k

def left2(w: f32[T, D], k: f32[B, D, S]) -> f32[B, T, S]:
    return w @ k

def loss3(a: f32[B, T, C], w: f32[C, D]) -> f32:
    return sum(tanh(a @ w))

def g3(a: f32[B, T, C], w: f32[C, D]):
    return grad(loss3, wrt=(0, 1))(a, w)

def lossb(q: f32[B, H, T, D], k: f32[B, H, S, D]) -> f32:
    return sum(tanh(q @ transpose(k, (0, 1, 3, 2)) * 0.5))

def gb(q: f32[B, H, T, D], k: f32[B, H, S, D]):
    return grad(lossb, wrt=(0, 1))(q, k)
"""


def _r(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def batched():
    return dg.loads(BATCHED, mode="compiled"), dg.loads(BATCHED, mode="interp")


@pytest.mark.parametrize("name, shapes", [
    ("mm3", [(2, 3, 4), (4, 5)]), ("mm3", [(1, 7, 3), (3, 1)]), ("mm3", [(2, 0, 4), (4, 5)]), ("mm3", [(2, 3, 0), (0, 5)]),
    ("mm4", [(2, 3, 4, 5), (5, 6)]), ("mm3s", [(2, 3, 4), (4, 5)]), ("mm3t", [(3, 4, 5), (6, 5)]),
    ("bmm", [(2, 3, 4, 5), (2, 3, 6, 5)]), ("bmm", [(1, 1, 1, 1), (1, 1, 1, 1)]), ("bmms", [(2, 3, 4, 5), (2, 3, 5, 6)]),
    ("bmm3", [(3, 4, 5), (3, 5, 2)]), ("bmm3", [(0, 4, 5), (0, 5, 2)]), ("bcast", [(3, 4, 5), (1, 5, 2)]),
    ("left2", [(4, 5), (3, 5, 2)]), ("g3", [(2, 3, 4), (4, 5)]), ("g3", [(5, 1, 3), (3, 2)]),
    ("gb", [(2, 3, 4, 5), (2, 3, 6, 5)]),
])
def test_batched_products_match_interpreter(batched, name, shapes):
    comp, interp = batched
    rng = np.random.default_rng(len(name) * 10 + len(shapes[0]))
    args = [_r(rng, *s) for s in shapes]
    got, want = getattr(comp, name)(*args), getattr(interp, name)(*args)
    got, want = (list(x) if isinstance(x, tuple) else [x] for x in (got, want))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    if name.startswith(("mm", "bmm", "bcast", "left")):
        np.testing.assert_allclose(got[0], args[0] @ (np.swapaxes(args[1], -1, -2) if name in ("bmm", "mm3t") else args[1]),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(blas.locate() is None, reason="no BLAS")
@pytest.mark.parametrize("name, shapes, gemms", [
    ("mm3", [(2, 3, 4), (4, 5)], 1), ("mm4", [(2, 3, 4, 5), (5, 6)], 1),
    ("g3", [(2, 3, 4), (4, 5)], 3),  # the product, dA = dC @ W^T and dW = A^T @ dC over the collapsed batch
    ("bmm", [(2, 3, 4, 5), (2, 3, 6, 5)], 1), ("gb", [(2, 3, 4, 5), (2, 3, 6, 5)], 3),
])
def test_batched_products_call_the_gemm(batched, name, shapes, gemms):
    from dg.dialects.dialect import parse
    from dg.lowering import pipeline

    f = getattr(batched[0], name)
    args = [np.ones(s, np.float32) for s in shapes]
    bufferized = f.ir("bufferized", args=args)
    routed = str(pipeline.run_passes(parse(bufferized), ["blas-matmuls"]))
    body = routed.split(f"func.func @{name}(")[1].split("\n  }\n")[0]
    calls = body.count("call @dg_gemm_f32") + body.count("call @dg_bgemm_f32")
    assert calls == gemms
    assert '"reduction"' not in body  # no contraction left as loops
    assert "(d0, d1, d3, d2)" not in body  # transposes are views, not copies
    assert "llvm.call @dg_blas_sgemm" in f.ir("llvm", args=args) or "@dg_blas_sgemm(" in f.ir("llvm", args=args)


def test_a_product_with_one_batch_axis_reads_its_operands_in_place(batched):
    """(B, T, D) @ (B, D, S) is one batched product of the operands themselves: no reshape to
    three axes (they have three), which made bufferization copy the second operand, a view
    sliced to the first's inner size."""
    args = [np.ones((3, 4, 5), np.float32), np.ones((3, 5, 2), np.float32)]
    body = batched[0].bmm3.ir("bufferized", args=args).split("func.func @bmm3(")[1]
    assert "linalg.batch_matmul ins(%arg0, " in body
    assert "memref.copy" not in body and "memref.reshape" not in body


@pytest.mark.skipif(_numpy_openblas() is None or _mkl()[0] is not None,
                    reason="needs NumPy's OpenBLAS and no MKL")
def test_locating_numpys_openblas_looks_for_no_other_library(monkeypatch):
    """Each `find_library` runs a program: only MKL, preferred to it, is looked for."""
    import ctypes.util

    asked, real = [], ctypes.util.find_library
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: asked.append(name) or real(name))
    got = blas._locate.__wrapped__(blas.FAMILIES)
    assert got is not None and "numpy.libs" in got.path
    assert asked == ["mkl_rt"], asked
