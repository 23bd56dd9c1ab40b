"""The GPU lowering: gpu dialect kernels, NVVM, PTX that ptxas assembles, on any machine.

(tests/e2e runs every end-to-end program through the same path: its `ptx` parameter.)
"""
import re

import numpy as np
import pytest

import dg
from dg.dialects.dialect import parse
from dg.lowering import gpu, gpu_matmul, llvm_ir, pipeline
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
    x = np.ones(4, np.float32)
    text = gpu.ptx(pipeline.run_stage(parse(m.chain.ir("dg", args=(x, x))), "gpu", start=None), arch)
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
    assert f".visible .global .align 8 .b8 {gpu.FAIL_FLAG}[24]" in text  # the id and two values
    assert re.search(r"atom\.[\w.]*cas", text)  # the first failure wins
    assert f"[{gpu.FAIL_FLAG}+8]" in text and f"[{gpu.FAIL_FLAG}+16]" in text  # and keeps its values
    assert gpu.assemble(text, "sm_90")


def test_every_kernel_reaches_the_ptx():
    """Kernels outlined from one function share a name in their own modules; each keeps its module's."""
    m = dg.loads("def two(x: f32[N], i: i64[K]) -> f32[K]:\n    return x[i] * 2.0 + x[i + 1]\n", mode="interp")
    args = (np.ones(4, np.float32), np.zeros(2, np.int64))
    launched = set(re.findall(r"gpu.launch_func\s+@(\w+)::", m.two.ir("gpu", args=args)))
    ptx = m.two.ir("ptx", args=args)
    assert len(launched) >= 2 and sorted(re.findall(r"\.entry (\w+)", ptx)) == sorted(launched)


def test_unknown_arch_is_a_clear_error(m):
    with pytest.raises(dg.DgError, match="unknown GPU architecture"):
        gpu.llvm_to_ptx("", "sm_10")


def test_ptxas_refusal_is_a_clear_error():
    with pytest.raises(dg.DgError, match="ptxas -arch=sm_90 rejected"):
        gpu.assemble(".version 8.0\n.target sm_90\n.address_size 64\nnot ptx\n")


def test_cuda_device_without_a_driver_says_why():
    ok, reason = driver_status()
    f = dg.loads("def f(x: f32[N]) -> f32[N]:\n    return x + 1.0\n", mode="compiled", device="cuda")
    if ok:  # a GPU runs it
        assert (f.f(np.ones(3, np.float32)) == 2.0).all()
        return
    with pytest.raises(dg.DgError) as e:
        f.f(np.ones(3, np.float32))
    assert "device 'cuda' needs" in str(e.value)


MM_SRC = """
def mm(a: f32[M, K], b: f32[K, N]) -> f32[M, N]:
    return a @ b

def mm_acc(a: f64[M, K], b: f64[K, N], c: f64[M, N]) -> f64[M, N]:
    return c + transpose(transpose(b) @ transpose(a)) * 2.0

def mm_t(a: f32[K, M], b: f32[K, N]) -> f32[M, N]:
    return transpose(a) @ b

def ew(x: f32[M, N]) -> f32[M, N]:
    return x * 2.0 + 1.0
"""


@pytest.fixture(scope="module")
def mmod():
    return dg.loads(MM_SRC, mode="interp")


def _ptx(f, args):
    return gpu.ptx(pipeline.run_stage(parse(f.ir("dg", args=args)), "gpu", start=None))


def test_matmul_is_a_shared_memory_tiled_kernel(mmod):
    a = np.ones((70, 33), np.float32)
    b = np.ones((33, 130), np.float32)
    text = mmod.mm.ir("gpu", args=(a, b))
    # the zero fill of C is folded into the kernel, which stores instead of adding
    assert text.count("call @dg_gpu_matmul_f32_new(") == 1 and "call @dg_gpu_matmul_f32(" not in text
    assert "#gpu.address_space<workgroup>" in text and "gpu.barrier" in text
    assert set(re.findall(r"threads in \(([^)]*)\)", text)) == {"%c16, %c16, %c1"}
    ptx = _ptx(mmod.mm, (a, b))
    assert ".shared" in ptx and "bar.sync" in ptx and "ld.shared" in ptx
    assert ptx.count("fma.rn.f32") >= gpu_matmul.MICRO ** 2  # a 4 x 4 micro-tile per thread
    assert gpu.assemble(ptx)


def test_transposed_operands_are_views_not_copies(mmod):
    a, b = np.ones((5, 3), np.float32), np.ones((5, 4), np.float32)
    text = mmod.mm_t.ir("gpu", args=(a, b))
    assert "memref.transpose" in text and text.count("call @dg_gpu_matmul_f32_new(") == 1
    assert "affine_map<(d0, d1) -> (d1, d0)>" not in text  # no transpose copy kernel
    c = np.ones((3, 4))
    text = mmod.mm_acc.ir("gpu", args=(np.ones((3, 5)), np.ones((5, 4)), c))
    assert "workgroup" in text and gpu.assemble(_ptx(mmod.mm_acc, (np.ones((3, 5)), np.ones((5, 4)), c)))


def test_thread_x_runs_along_the_contiguous_dimension(mmod):
    """Consecutive threads of a warp touch consecutive elements of a row-major array."""
    from dg.core.mlir import passmanager
    from dg.dialects.dialect import shared_context

    x = np.ones((40, 50), np.float32)
    m = pipeline.run_stage(parse(mmod.ew.ir("dg", args=(x,))), "bufferized", start=None)
    m = pipeline.run_passes(m, ["to-parallel-loops", "flatten-parallel-loops"])  # (rows, 32 iterations in a row)
    upto = gpu.TO_KERNELS.split("func.func(convert-parallel-loops-to-gpu)")[0].rstrip(", ") + ")"
    with shared_context():
        passmanager.PassManager.parse(upto).run(m.operation)
    maps = [re.findall(r"processor = (\w+)", g) for g in re.findall(r"mapping = \[[^\]]*\]", str(m))]
    # dimension 0 (rows) on y, dimension 1 (consecutive iterations) on x, for blocks and for threads
    assert maps and all(mp in (["block_y", "block_x"], ["thread_y", "thread_x"]) for mp in maps)
    assert ["thread_y", "thread_x"] in maps


def test_float_literals_are_ones_every_llvm_reads():
    """MLIR's LLVM prints `f0x...`, `-inf`, `+qnan`, `-nan(0x...)` and shortest decimals for
    floats; llvmlite's LLVM reads the value as a double's 16 hex digits (half and bfloat as
    `0xH`/`0xR` and their bits)."""
    text = ("  %a = fmul double %x, f0xBFE6A09E667F3BCD\n"
            "  store float -inf, ptr %p, align 4\n"
            "  %b = fmul float %y, 1.000100e+00\n"
            "  %c = select i1 %k, float 5.000000e-01, float %z\n"
            "  %d = fmul half %h, f0x3C00\n"
            "  %e = getelementptr i8, ptr %p, i64 8\n"
            "  %f = fadd float %y, +qnan\n"
            "  %g = fadd double %x, -nan(0x8000000000001)\n")
    got = llvm_ir.portable_floats(text).splitlines()
    assert got[0].endswith("0xBFE6A09E667F3BCD")
    assert "float 0xFFF0000000000000," in got[1]
    assert got[2].endswith(f"0x{int(np.array(np.float64(np.float32(1.0001))).view(np.uint64)):016X}")  # rounded to float
    assert "float 0x3FE0000000000000, float %z" in got[3]
    assert got[4].endswith("0xH3C00") and got[5] == "  %e = getelementptr i8, ptr %p, i64 8"
    assert got[6].endswith("float %y, 0x7FF8000000000000") and got[7].endswith("double %x, 0xFFF8000000000000")
    import llvmlite.binding as llvm

    module = ("define void @f(double %x, float %y, float %z, i1 %k, half %h, ptr %p) {\n" + "\n".join(got)
              + "\n  ret void\n}\n")
    llvm.parse_assembly(module).verify()  # (what llvm_to_ptx does with the kernels' text)
