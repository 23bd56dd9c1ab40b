"""Prepare and run a specialization in a mode, and show it at a stage of the pipeline.

The interpreter runs the `grad` stage, translated to Python (`runtime.interp`); compiled CPU
code is the pipeline down to `llvm`, then machine code (`runtime.cpu`). `.ir(stage)` shows any
stage of `lowering.pipeline`, made from the specialization's own modules (each stage once). A
mode or device that is not built says so with a `DgError`: nothing falls back silently.
"""
from __future__ import annotations

from dg.core.errors import DgError
from dg.dialects.dialect import asm, parse
from dg.lowering import gpu, pipeline
from dg.lowering.autodiff import needs_autodiff

from . import interp
from .cpu import CpuProgram
from .cuda import require_driver


def stage_module(comp, stage: str):
    """The specialization's module at `stage`, made once (from the stage it starts from)."""
    m = comp.stages.get(stage)
    if m is None:
        parent = pipeline.STAGES[stage][0]
        if parent is None:
            m = pipeline.run_stage(parse(comp.ir_text), stage, start=None)
        else:
            m = pipeline.run_stage(stage_module(comp, parent), stage, start=parent, entry=comp.symbol)
        comp.stages[stage] = m
    return m


def grad_text(comp) -> str:
    """The IR that runs: the `grad` stage's text (the emitted text itself when it asks for no
    gradients: then it is parsed only where a mode needs the module)."""
    if not needs_autodiff(comp.ir_text):
        return comp.ir_text
    return asm(stage_module(comp, "grad"))


def prepare(comp, mode: str, device: str) -> None:
    if mode == "interp":
        if device != "cpu":
            raise DgError(f"the interpreter runs on the CPU only (device '{device}' was asked for)")
        comp.runner = interp.Translation(stage_module(comp, "grad"))
        return
    if mode == "compiled" and device == "cpu":
        comp.runner = CpuProgram.build(grad_text(comp), comp.stages.get("grad"), comp.symbol)
        return
    if mode == "compiled" and device == "cuda":
        require_driver()  # a located reason when there is no GPU, driver or cuda-python
        raise DgError("running compiled code on device 'cuda' is not built yet: PTX is "
                      "(`.ir('ptx')`); run with device='cpu'")
    raise DgError(f"mode '{mode}' on device '{device}' is not built yet: use mode='interp' (or DG_MODE=interp)")


def execute(comp, mode: str, device: str, arrays):
    if mode == "interp":
        return interp.run(comp.runner, comp.symbol, arrays)
    return comp.runner.call(comp.symbol, arrays)


def stage_text(comp, stage: str) -> str:
    """The text of a stage: the dg stages and their lowering with locations, what bufferization
    and the upstream lowerings make without them."""
    if stage == "ptx":
        return gpu.ptx(stage_module(comp, "gpu"))
    m = stage_module(comp, stage)
    return asm(m) if stage in ("dg", "grad", "opt", "linalg") else str(m)
