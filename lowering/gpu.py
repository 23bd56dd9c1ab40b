"""dg IR -> gpu dialect -> NVVM -> PTX.

Expects: a module at the `bufferized` stage (lowering.pipeline).
Guarantees:
- the `gpu` stage (`cublas-matmuls`, `gpu-matmuls`, then `to-parallel-loops`,
  `flatten-parallel-loops` and `to-kernels`: TO_KERNELS) is the module with
  its matmuls as calls of cuBLAS where the executor has it, else
  shared-memory tiled kernels (`gpu_matmul`), and its other parallel loops
  flattened (`gpu_loops`), tiled, mapped to blocks and threads and outlined
  as `gpu.func` kernels (`gpu.module`s) launched by `gpu.launch_func` from
  host code; the sequential control flow (`scf.for`/`while`/`if`, calls)
  stays on the host.
- `kernels_llvm(gpu_module)` is the kernels lowered to NVVM and translated
  to one LLVM IR module (text) for `nvptx64-nvidia-cuda`.
- `ptx(module, arch)` is that module linked with libdevice (only what it
  uses), optimized at -O3 and compiled to PTX by llvmlite's NVPTX backend.
All of it runs on any machine: no GPU or driver is needed to make PTX.
"""
from __future__ import annotations

import functools
import glob
import os
import re
from pathlib import Path

from dg.core.config import config
from dg.core.errors import DgError
from dg.core.mlir import ir, operations_under, run_pipeline

from . import gpu_loops
from .llvm_ir import llvm_ir

ARCHS = ("sm_80", "sm_90")
DEFAULT_ARCH = "sm_90"
REDUCTION_PARTS = 4096  # the most parts a reduction along a leading axis is split in (one thread each)

# Bufferized IR -> kernels: linalg ops become loops (TO_PARALLEL_LOOPS), the parallel ones
# flattened to (rows, WARP-wide columns) (`gpu_loops`); then (TO_KERNELS) they are tiled
# (fixed-size inner loops with a guard, so block sizes are constants), the outer loops become
# blocks, the inner ones threads, the columns on x so that a warp's accesses are coalesced.
TO_PARALLEL_LOOPS = "builtin.module(func.func(convert-linalg-to-parallel-loops))"
BLOCK = (gpu_loops.ROWS, gpu_loops.WARP)  # threads per block along y and x
TO_KERNELS = (
    "builtin.module("
    f"func.func(scf-parallel-loop-tiling{{parallel-loop-tile-sizes={','.join(map(str, BLOCK))} no-min-max-bounds=true}}),"
    "func.func(gpu-map-parallel-loops{mapping-policy=innermost-first}), func.func(convert-parallel-loops-to-gpu),"
    "lower-affine, convert-math-to-funcs, gpu-kernel-outlining, canonicalize, cse)"
)
KERNELS_TO_NVVM = (
    "builtin.module("
    "gpu.module(convert-scf-to-cf, expand-strided-metadata, lower-affine),"
    "gpu.module(convert-gpu-to-nvvm{index-bitwidth=64}),"
    "gpu.module(convert-math-to-llvm, convert-arith-to-llvm, convert-index-to-llvm),"
    "reconcile-unrealized-casts)"
)


def kernels_llvm(gpu_module) -> str:
    """The kernels of a `to_gpu` module as one LLVM IR module (text) for NVPTX."""
    with gpu_module.context:
        m = ir.Module.parse(str(gpu_module))
        run_pipeline(m, KERNELS_TO_NVVM)
        dev = ir.Module.create(ir.Location.unknown())
        dev.operation.attributes["llvm.target_triple"] = ir.StringAttr.get("nvptx64-nvidia-cuda")
        seen = set()  # libdevice and runtime declarations repeat across kernel modules
        for gm in m.body.operations:
            if gm.operation.name != "gpu.module":
                continue
            for f in list(gm.regions[0].blocks[0].operations):
                if "gpu.kernel" in f.operation.attributes:  # kernels take their module's (unique) name
                    f.operation.attributes["sym_name"] = gm.operation.attributes["sym_name"]
                name = str(f.operation.attributes["sym_name"])
                if name not in seen:
                    seen.add(name)
                    f.operation.detach_from_parent()
                    dev.body.append(f)
        left = sorted({o.name for o in operations_under(dev.body)
                       if not o.name.startswith(("llvm.", "nvvm.", "builtin."))})
        if left:  # translation would crash on these rather than fail
            raise RuntimeError(f"GPU kernels kept ops with no NVVM lowering: {', '.join(left)}\n{dev}")
        return _device_failures(llvm_ir(dev))


FAIL_FLAG = "dg_failed"
_FAIL_DECL = re.compile(r"^declare void @(_mlir_ciface_dg_rt_fail|dg_rt_fail)\(i64, i64, i64\)[^\n]*$", re.M)


def _device_failures(text: str) -> str:
    """A failed check inside a kernel records its id (plus one) in word 0 of the device global
    `dg_failed` and the two values it reports in words 1 and 2; the first failure wins. The host
    reads it after the call, as the CPU's dg_rt_fail is read."""
    if not _FAIL_DECL.search(text):
        return text
    body = (f"@{FAIL_FLAG} = addrspace(1) externally_initialized global [3 x i64] zeroinitializer, align 8\n"
            "define void @\\1(i64 %id, i64 %a, i64 %b) {\n"
            "  %v = add i64 %id, 1\n"
            f"  %p = addrspacecast ptr addrspace(1) @{FAIL_FLAG} to ptr\n"
            "  %r = cmpxchg ptr %p, i64 0, i64 %v monotonic monotonic\n"
            "  %won = extractvalue { i64, i1 } %r, 1\n"
            "  br i1 %won, label %keep, label %done\n"
            "keep:\n"
            "  %pa = getelementptr i64, ptr %p, i64 1\n"
            "  store volatile i64 %a, ptr %pa\n"
            "  %pb = getelementptr i64, ptr %p, i64 2\n"
            "  store volatile i64 %b, ptr %pb\n"
            "  br label %done\n"
            "done:\n"
            "  ret void\n"
            "}")
    text = _FAIL_DECL.sub(body, text, count=1)
    return _FAIL_DECL.sub("", text)


def find_file(pattern: str) -> str | None:
    """A file of the CUDA wheels (the `nvidia` namespace package) or a CUDA toolkit."""
    roots = []
    try:
        import nvidia

        roots += [str(Path(p)) for p in nvidia.__path__]
    except ImportError:
        pass
    roots += [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    for r in roots:
        if r:
            hits = sorted(glob.glob(os.path.join(r, "**", pattern), recursive=True))
            if hits:
                return hits[0]
    return None


@functools.lru_cache(maxsize=None)
def libdevice_path() -> str | None:
    """libdevice.10.bc: DG_LIBDEVICE, else the nvidia-nvvm wheel or a CUDA toolkit."""
    return config.libdevice or find_file("libdevice.10.bc")


@functools.lru_cache(maxsize=None)
def ptxas_path() -> str | None:
    """ptxas: the nvidia-cuda-nvcc wheel, a CUDA toolkit, or PATH."""
    import shutil

    return find_file("ptxas") or shutil.which("ptxas")


def _nvptx():
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm


def llvm_to_ptx(text: str, arch: str = DEFAULT_ARCH) -> str:
    """PTX for one NVPTX LLVM module: libdevice linked (what is used), internalized, -O3."""
    if arch not in ARCHS:
        raise DgError(f"unknown GPU architecture '{arch}' (expected one of {', '.join(ARCHS)})")
    llvm = _nvptx()
    target = llvm.Target.from_triple("nvptx64-nvidia-cuda")
    tm = target.create_target_machine(cpu=arch, features="+ptx80", opt=3)
    mod = llvm.parse_assembly(text)
    mod.triple = "nvptx64-nvidia-cuda"
    mod.data_layout = str(tm.target_data)
    kernels = set(re.findall(r"define [^@]*ptx_kernel[^@]*@\"?([\w.$]+)", text))
    assert kernels or "define " not in text, "kernels lost their ptx_kernel calling convention"
    if any(f.is_declaration and f.name.startswith("__nv_") for f in mod.functions):
        path = libdevice_path()
        if path is None:
            raise DgError("making PTX needs libdevice.10.bc: pip install nvidia-nvvm (dg's [cuda] extra) "
                          "or set DG_LIBDEVICE")
        with open(path, "rb") as f:
            libdev = llvm.parse_bitcode(f.read())
        libdev.triple = mod.triple
        libdev.data_layout = mod.data_layout
        mod.link_in(libdev)
    for f in mod.functions:
        if not f.is_declaration and f.name not in kernels:
            f.linkage = llvm.Linkage.internal
    for g in mod.global_variables:
        if not g.is_declaration and g.name != FAIL_FLAG:
            g.linkage = llvm.Linkage.internal
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)
    mod.verify()
    return tm.emit_assembly(mod)


def assemble(ptx_text: str, arch: str = DEFAULT_ARCH) -> bytes:
    """The cubin `ptxas -arch=<arch>` makes of this PTX; a DgError when ptxas is missing or refuses."""
    import subprocess
    import tempfile

    ptxas = ptxas_path()
    if ptxas is None:
        raise DgError("assembling PTX needs ptxas: pip install nvidia-cuda-nvcc (dg's [cuda] extra)")
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "kernels.ptx", Path(d) / "kernels.cubin"
        src.write_text(ptx_text)
        r = subprocess.run([ptxas, f"-arch={arch}", str(src), "-o", str(out)], capture_output=True, text=True)
        if r.returncode != 0:
            raise DgError(f"ptxas -arch={arch} rejected the PTX:\n{r.stderr}")
        return out.read_bytes()


def ptx(gpu_module, arch: str = DEFAULT_ARCH) -> str:
    """The PTX of a module at the `gpu` stage."""
    return llvm_to_ptx(kernels_llvm(gpu_module), arch)
