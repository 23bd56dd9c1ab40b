"""The GPU lowering: gpu dialect kernels, NVVM, PTX that ptxas assembles, on any machine.

(tests/e2e runs every end-to-end program through the same path: its `ptx` parameter.)
"""
import re

import numpy as np
import pytest

import dg
from dg.lowering import gpu
from dg.runtime.cuda import driver_status

SRC = """
def chain(a: f32[N], b: f32[N]) -> f32[N]:
    return tanh(exp(a) * b + 1.0) / (1.0 + a * a)

def mm(a: f32[M, K], b: f32[K, N]) -> f32[M, N]:
    return a @ b

def gather(x: f32[N], i: i64[K]) -> f32[K]:
    return x[i]

def loop(x: f32[N]) -> f32[N]:
    y = x
    while sum(y) < 100.0:
        y = y * 2.0 + 1.0
    return y
"""


@pytest.fixture(scope="module")
def m():
    return dg.loads(SRC, mode="interp")


@pytest.mark.parametrize("arch", gpu.ARCHS)
def test_ptx_for_each_arch_assembles(m, arch):
    from dg.runtime.modes import parse_verified

    x = np.ones(4, np.float32)
    text = gpu.ptx(parse_verified(m.chain.ir("dg", args=(x, x))), arch)
    assert f".target {arch}" in text
    assert ".entry chain_kernel" in text
    # math functions come from libdevice, linked in and internalized: no external calls remain
    assert ".extern" not in text
    assert gpu.assemble(text, arch)


def test_gpu_stage_maps_loops_to_blocks_and_threads(m):
    x = np.ones((3, 4), np.float32)
    text = m.mm.ir("gpu", args=(x, x.T.copy()))
    assert "gpu.launch_func" in text and "gpu.module" in text
    assert "gpu.block_id" in text and "gpu.thread_id" in text
    threads = re.findall(r"threads in \(([^)]*)\)", text)
    assert threads and all("%c16" in t for t in threads)  # tiled: 16 x 16 threads per block


def test_sequential_control_flow_stays_on_the_host(m):
    x = np.ones(4, np.float32)
    text = m.loop.ir("gpu", args=(x,))
    host = text.split("gpu.module")[0]
    assert "scf.while" in host  # the data-dependent loop drives kernel launches from the host
    assert "gpu.launch_func" in host


def test_checks_in_kernels_set_a_device_flag(m):
    x = np.ones(4, np.float32)
    i = np.zeros(2, np.int64)
    text = m.gather.ir("ptx", args=(x, i))
    assert f".visible .global .align 8 .u64 {gpu.FAIL_FLAG}" in text
    assert re.search(r"atom\.[\w.]*cas", text)  # the first failure wins
    assert gpu.assemble(text, "sm_90")


def test_unknown_arch_is_a_clear_error(m):
    with pytest.raises(dg.DgError, match="unknown GPU architecture"):
        gpu.llvm_to_ptx("", "sm_10")


def test_ptxas_refusal_is_a_clear_error():
    with pytest.raises(dg.DgError, match="ptxas -arch=sm_90 rejected"):
        gpu.assemble(".version 8.0\n.target sm_90\n.address_size 64\nnot ptx\n")


def test_cuda_device_without_a_driver_says_why():
    ok, reason = driver_status()
    f = dg.loads("def f(x: f32[N]) -> f32[N]:\n    return x + 1.0\n", mode="compiled", device="cuda")
    with pytest.raises(dg.DgError) as e:
        f.f(np.ones(3, np.float32))
    if ok:
        assert "not built yet" in str(e.value)
    else:
        assert "device 'cuda' needs" in str(e.value)
