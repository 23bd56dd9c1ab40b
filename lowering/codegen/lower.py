"""A program at the `grad` stage down the pipeline to LLVM IR, for the CPU or for CUDA's host.

Expects: a `Unit` (lowering.codegen.units). Guarantees: `to_llvm(unit, to)` is its `LlvmUnit`:
the pipeline run from `grad` by `to` (`cpu`: to the `llvm` stage; `cuda(arch)`: the kernels' PTX of
the `gpu` stage and the host code of the `cuda` stage), translated to LLVM IR text, with the
level LLVM is to optimize it at (`opt_level`) and the tables the executor needs. With the
unit's entry, only that function is callable and only what it reaches is compiled.
"""
from __future__ import annotations

import time

from dg.core.attrs import table
from dg.core.mlir import ir
from dg.dialects.dialect import shared_context

from .. import cuda_host, gpu, pipeline
from ..llvm_ir import llvm_ir
from .units import LlvmUnit, Unit

# Programs whose LLVM IR has more lines than this are optimized at -O2 instead of -O3. The
# pipeline inlines a program into one function; on a big one (a transformer's training step:
# 20,000 lines and more) -O3 takes minutes where -O2 takes seconds, and the code it makes was
# no faster in our measurements (samples/gpt.dg: loss 34 s at -O3, 6 s at -O2).
LARGE_PROGRAM_LINES = 8000


def cpu(module: "ir.Module", entry: str | None) -> tuple["ir.Module", dict]:
    """The CPU's lowering: the module at the `llvm` stage, and nothing to add to the tables."""
    return pipeline.run_stage(module, "llvm", start="grad", entry=entry), {}


def cuda(arch: str):
    """CUDA's lowering for a device of `arch` (sm_80, sm_90): the module at the `cuda` stage
    (host code), and the kernels' PTX with the tables of kernels and device globals."""
    def lower(module, entry):
        g = pipeline.run_stage(module, "gpu", start="grad", entry=entry)
        kernels_ptx = gpu.ptx(g, arch)
        m = pipeline.run_stage(g, "cuda", start="gpu")
        return m, {"ptx": kernels_ptx, "arch": arch, "kernels": table(m, cuda_host.KERNELS),
                   "globals": table(m, cuda_host.GLOBALS)}
    return lower


def signatures(dg_module: "ir.Module") -> dict:
    """symbol -> ([argument MLIR types], [result MLIR types]) of the defined functions (lowering keeps them)."""
    sigs = {}
    with dg_module.context:
        for op in dg_module.body.operations:
            op = op.operation
            if op.name == "func.func" and len(op.regions[0].blocks):  # not the runtime's declarations
                sym = ir.StringAttr(op.attributes["sym_name"]).value
                ft = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
                sigs[sym] = ([str(t) for t in ft.inputs], [str(t) for t in ft.results])
    return sigs


def opt_level(m: "ir.Module") -> int:
    """LLVM's optimization level for a module in the LLVM dialect: 3, or 2 for a large one."""
    lines = 0
    for op in m.body.operations:
        for region in op.operation.regions:
            for block in region.blocks:
                lines += len(block.operations)
                if lines > LARGE_PROGRAM_LINES:
                    return 2
    return 3


def to_llvm(unit: Unit, to=cpu) -> LlvmUnit:
    """The unit's LLVM IR, its optimization level (3, or 2 for a large program) and tables."""
    module, entry = unit.module, unit.entry
    sigs = signatures(module)
    if entry is not None:
        sigs = {entry: sigs[entry]}
    t0 = time.perf_counter()
    m, extra = to(module, entry)
    meta = {**extra, "signatures": sigs, "checks": table(m, "dg.checks"), "alloc_sites": table(m, "dg.alloc_sites"),
            "host_calls": table(m, "dg.host_calls"), "call_sites": table(m, "dg.call_sites")}
    level = opt_level(m)
    t1 = time.perf_counter()
    with shared_context():
        text = llvm_ir(m)
    pipeline.note_time("LLVM IR", time.perf_counter() - t1)
    meta["seconds"] = {"passes": time.perf_counter() - t0}
    return LlvmUnit(text, level, meta)
