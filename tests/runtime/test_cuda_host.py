"""The host half of the CUDA executor, on any machine: a stand-in device (tests/runtime/cuda_fake)
takes the launches and records their parameters, so these check what compiled host code hands
the driver: the kernel's parameter words as NVVM declares them, the device copies of constants,
no launch for an empty grid, waits before the host reads kernels' data, and the pool getting its
buffers back. What the kernels compute is the end-to-end suite's `cuda` mode, on a GPU."""
from __future__ import annotations

import struct

import numpy as np
import pytest

import dg
from dg.lowering import cuda_host, pipeline
from dg.runtime import cuda, cuda_program, modes

from .cuda_fake import FakeDevice

SRC = """
def scale(x: f32[N, K], w: f32[N, K]) -> f32[N, K]:
    c = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    return x * w * c + 1.5

def shift(x: f32[N], s: f32) -> f32[N]:
    return x + s

def pick(x: f32[N], i: i64) -> f32:
    y = x * 2.0
    return y[i]

def loop(x: f32[N], n: i64) -> f32:
    s = 0.0
    for i in range(n):
        x = x * 0.5
        s = s + x.sum()
    return s
"""


@pytest.fixture
def fake(monkeypatch, tmp_path):
    device = FakeDevice()
    monkeypatch.setattr(cuda, "device", lambda: device)
    monkeypatch.setattr(modes, "require_driver", lambda: None)
    monkeypatch.setenv("DG_CACHE_DIR", str(tmp_path))
    return device


def _f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def test_a_launch_gets_the_kernels_parameter_words(fake):
    m = dg.loads(SRC, mode="compiled", device="cuda")
    x = np.ones((4, 8), np.float32)
    m.scale(x, x)
    (constant, nbytes), *made = fake.pool.made
    assert nbytes == 32  # the list's 8 float32s, copied to the device when the program loads
    assert np.array_equal(np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * 8).from_address(constant)),
                          np.arange(1, 9, dtype=np.float32))
    kernels = fake.modules[0].kernels
    assert [launch[0] for launch in fake.launches] == kernels  # x * w, then * c + 1.5
    for kernel, grid, block, words in fake.launches:
        assert len(words) == fake.modules[0].params[kernel]
        assert grid[0] * block[0] >= 8 and grid[1] * block[1] >= 4
    first, second = (launch[3] for launch in fake.launches)
    xs, ws = made[0][0], made[1][0]  # the arguments' device buffers, in order
    for p in (xs, ws):  # a 4 x 8 memref: allocated and aligned pointer, offset, sizes, strides
        at = first.index(p)
        assert first[at:at + 7] == [p, p, 0, 4, 8, 8, 1]
    at = second.index(constant)
    assert second[at:at + 5] == [constant, constant, 0, 8, 1]
    before = len(fake.pool.made)
    m.shift(np.ones(5, np.float32), np.float32(1.5))  # a scalar argument: a 0-d buffer of its own
    (p, nbytes), = [(p, n) for p, n in fake.pool.made[before:] if n == 4]
    words = fake.launches[-1][3]
    at = words.index(p)
    assert words[at:at + 3] == [p, p, 0]  # a 0-d memref: pointers and offset


def test_an_empty_grid_launches_nothing(fake):
    m = dg.loads(SRC, mode="compiled", device="cuda")
    out = m.scale(np.ones((0, 8), np.float32), np.ones((0, 8), np.float32))
    assert out.shape == (0, 8) and fake.launches == []


def test_the_host_waits_for_kernels_before_reading_their_data(fake):
    m = dg.loads(SRC, mode="compiled", device="cuda")
    m.loop(np.ones(16, np.float32), np.int64(5))
    assert len(fake.launches) >= 5
    assert fake.syncs >= 5  # each iteration's sum reads what its kernel wrote


def test_buffers_go_back_to_the_pool(fake):
    m = dg.loads(SRC, mode="compiled", device="cuda")
    x = np.ones((4, 8), np.float32)
    m.scale(x, x)
    m.loop(np.ones(16, np.float32), np.int64(3))
    constants = set(m.scale._last.runner._constants) | set(m.loop._last.runner._constants)
    assert constants and set(fake.pool.live) == constants  # (the constants' device copies stay)


def test_waits_and_launches_in_the_ir():
    """In the `cuda` stage's first passes: a wait right before each host load of a buffer kernels
    may write and before the return, none before reads of host globals; no gpu op left."""
    f = dg.loads(SRC, mode="compiled").loop
    comp, _ = f.specialize((np.ones(16, np.float32), np.int64(3)), run=False)
    m = pipeline.run_passes(pipeline.run_stage(modes.stage_module(comp, "gpu"), "gpu", start="gpu"),
                            ["wait-for-kernels"])
    checked = 0
    for block in _blocks(m.body):
        prev = None
        for op in block.operations:
            op = op.operation
            if op.name in ("memref.load", "func.return") and _in_public_function(op):
                host_only = op.name == "memref.load" and cuda_host._host_only(op.operands[0])
                waited = prev is not None and prev.name == "func.call" and "dg.cuda.wait" in str(prev)
                assert waited != host_only, str(op)
                checked += 1
            prev = op
    assert checked >= 3
    text = str(pipeline.run_passes(m, ["launches-to-calls"]))
    assert "gpu." not in text and "func.call @dg.cuda.launch" in text


def _blocks(block):
    yield block
    for op in block.operations:
        for region in op.operation.regions:
            for b in region.blocks:
                yield from _blocks(b)


def _in_public_function(op):
    p = op.parent
    while p is not None and p.name != "func.func":
        p = p.parent
    return p is not None and "sym_visibility" not in p.attributes


def test_pool_reuses_and_stays_within_the_free_memory():
    class Driver:
        def __init__(self):
            self.allocs, self.frees, self.free_bytes = 0, 0, 1 << 20

        def cuMemAllocManaged(self, n, flags):
            self.allocs += 1
            self.free_bytes -= n
            return 0, 4096 * self.allocs

        def cuMemFree(self, p):
            self.frees += 1
            self.free_bytes += 512

        def cuCtxSynchronize(self):
            return (0,)

    d = Driver()
    pool = cuda.Pool(d, lambda: d.free_bytes)
    assert [pool.size_class(n) for n in (1, 512, 513, 4000, 5000, 1 << 20)] == [512, 512, 1024, 4096, 5120, 1 << 20]
    p = pool.allocate(100)
    pool.release(p)
    assert pool.allocate(200) == p and d.allocs == 1  # the same size class comes back
    pool.release(p)
    assert pool.allocate((1 << 20) + 1) == 0  # no room even after the kept buffer went back
    assert d.frees == 1
    pool.release(12345)  # not the pool's: left alone


def test_the_executor_is_the_cuda_program(fake):
    m = dg.loads(SRC, mode="compiled", device="cuda")
    x = np.ones((4, 8), np.float32)
    m.scale(x, x)
    assert isinstance(m.scale._last.runner, cuda_program.CudaProgram)


MATMUL = """
def mm(a: f32[M, K], b: f32[K, N]) -> f32[M, N]:
    return a @ b

def mmt(a: f32[M, K], b: f32[N, K]) -> f32[M, N]:
    return a @ b.T

def mm64(a: f64[M, K], b: f64[K, N]) -> f64[M, N]:
    return a @ b + 1.0

def by_constant(a: f32[M, 2]) -> f32[M, 2]:
    return a @ [[1.0, 2.0], [3.0, 4.0]]
"""


@pytest.mark.slow
def test_products_go_to_cublas_when_it_is_there(monkeypatch, tmp_path):
    """cuBLAS is column-major: a row-major C = A @ B is its C^T = B^T A^T, transposed operands
    passed as views with the transpose flag (the stand-in computes what cuBLAS would)."""
    device = FakeDevice(cublas=True)
    monkeypatch.setattr(cuda, "device", lambda: device)
    monkeypatch.setattr(modes, "require_driver", lambda: None)
    monkeypatch.setenv("DG_CACHE_DIR", str(tmp_path))
    m = dg.loads(MATMUL, mode="compiled", device="cuda")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 7), dtype=np.float32), rng.standard_normal((7, 3), dtype=np.float32)
    np.testing.assert_allclose(m.mm(a, b), a @ b, rtol=1e-5, atol=1e-5)
    assert device.gemms == [(0, 0, 3, 5, 7)] and device.launches == []
    np.testing.assert_allclose(m.mmt(a, b.T.copy()), a @ b, rtol=1e-5, atol=1e-5)
    assert device.gemms[-1] == (1, 0, 3, 5, 7)  # B^T read transposed, no copy
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    out = m.mm64(a64, b64)
    assert device.gemms[-1] == (0, 0, 3, 5, 7)
    assert len(device.launches) == 1  # (+ 1.0: a kernel, which the stand-in does not run)
    assert out.shape == (5, 3)
    # a constant operand is its device copy (here handed through the helper function)
    np.testing.assert_allclose(m.by_constant(a[:, :2].copy()), a[:, :2] @ [[1.0, 2.0], [3.0, 4.0]], rtol=1e-6)
    constant, _, _ = device.gemm_operands[-1]  # (cuBLAS's X is dg's B)
    assert constant in m.by_constant._last.runner._constants


def test_without_cublas_products_are_the_tiled_kernel(fake):
    m = dg.loads(MATMUL, mode="compiled", device="cuda")
    a, b = np.ones((5, 7), np.float32), np.ones((7, 3), np.float32)
    m.mm(a, b)
    assert fake.gemms == [] and len(fake.launches) == 1
    (kernel, grid, block, _), = fake.launches
    assert block == (16, 16, 1)  # the tiled kernel's block


def test_a_kernels_failed_check_is_raised_once(fake):
    """The device's check flag is read (and cleared) after every call, also one the host's own
    failed check ended (the kernel's failure is the one raised): the next call does not report
    it again."""
    m = dg.loads(SRC, mode="compiled", device="cuda")
    x = np.ones((4, 8), np.float32)
    m.scale(x, x)
    module = fake.modules[0]
    module.flag = (1, 7, 8)  # check 0 failed in a kernel, with values 7 and 8
    with pytest.raises(dg.DgRuntimeError, match="sizes 7 and 8 differ"):
        m.scale(x, x)
    m.scale(x, x)  # nothing stale
    v = np.ones(4, np.float32)
    m.pick(v, np.int64(1))
    picking = fake.modules[-1]  # (the program's kernel: y = x * 2; the index is checked on the host)
    assert picking is not module
    with pytest.raises(dg.DgRuntimeError, match="index 9 is out of bounds"):  # the host's own check
        m.pick(v, np.int64(9))
    picking.flag = (1, 7, 8)
    with pytest.raises(dg.DgRuntimeError, match="index 7 is out of bounds for axis 0 with size 8"):
        m.pick(v, np.int64(9))  # both failed: the kernel's (its values 7, 8) comes first, not the host's (9, 4)
    m.pick(v, np.int64(1))  # nothing stale (the stand-in's kernel does not run: no value to check)
