"""Prepare and run a specialization in a mode, and show it at a stage of the pipeline.

The interpreter runs the `grad` stage, translated to Python (`runtime.interp`); compiled code
is that stage as a `Unit` (lowering.codegen.units) built for a target (`runtime.targets`): on
the CPU, the pipeline down to `llvm`, then machine code (`runtime.cpu`); on the GPU, kernels
from `gpu` and host code from `cuda` (`runtime.cuda_program`); shadow mode runs both on
the stage with taps (`runtime.shadow`). With numerics checks, each runs the stage with them
(`lowering.instrument`). `.ir(stage)` shows any
stage of `lowering.pipeline`, made from the specialization's own modules (each stage once). A
mode or device that is not built says so with a `DgError`: nothing falls back silently.
"""
from __future__ import annotations

from dg.core.errors import DgError
from dg.dialects.dialect import asm, parse
from dg.lowering import gpu, instrument, pipeline
from dg.lowering.ad import needs_autodiff
from dg.lowering.codegen.units import Unit

from . import interp, targets, tiered
from .cpu import CPU, CpuProgram
from .cuda import require_driver
from .shadow import Shadow


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


def instrumented(comp, numerics: bool, taps: bool = False):
    """The `grad` stage with numerics checks and/or shadow taps (lowering.instrument): a module of
    its own, made from the stage's text; the stage itself when asked for neither."""
    if not numerics and not taps:
        return stage_module(comp, "grad")
    m = parse(grad_text(comp))
    if numerics:
        instrument.check_numerics(m)
    if taps:
        instrument.shadow_taps(m)
    return m


def compiled_unit(comp, numerics: bool = False) -> Unit:
    """What compiled code is made of: the `grad` stage (with numerics checks when asked for), as
    one object whose text and module are each made when first needed."""
    if numerics:
        return Unit(module=instrumented(comp, numerics), entry=comp.symbol)
    return Unit(grad_text(comp), comp.stages.get("grad"), comp.symbol)


def prepare(comp, mode: str, device: str, numerics: bool = False) -> None:
    """Make the specialization's runner for the mode and device (with `numerics`: checking that
    every op makes finite floats)."""
    if mode in ("interp", "shadow") and device != "cpu":
        raise DgError(f"the interpreter{' of shadow mode' if mode == 'shadow' else ''} runs on the CPU only "
                      f"(device '{device}' was asked for)")
    if mode == "interp":
        comp.runner = interp.Translation(instrumented(comp, numerics))
        return
    if mode == "shadow":
        comp.runner = Shadow(instrumented(comp, numerics, taps=True), comp.symbol)
        return
    if mode == "compiled" and device in ("cpu", "cuda"):
        if device == "cuda":
            require_driver()  # a located reason when there is no GPU, driver or cuda-python
        unit = compiled_unit(comp, numerics)
        if device == "cpu" and tiered.enabled():  # the interpreter runs the first calls while a worker compiles
            program = targets.cached(CPU, unit)
            if program is None and not unit.parsed():  # (the interpreter's: the stage as the pipeline made it)
                unit = Unit(unit.text, stage_module(comp, "grad"), unit.entry)
            comp.runner = program or tiered.Tiered(comp, unit)
            return
        comp.runner = targets.build(targets.TARGETS[device], unit)
        return
    raise DgError(f"mode '{mode}' on device '{device}' is not built yet: use mode='interp' (or DG_MODE=interp)")


def execute(comp, mode: str, device: str, arrays):
    if mode == "interp":
        return interp.run(comp.runner, comp.symbol, arrays)
    if mode == "shadow":
        return comp.runner.run(comp.symbol, arrays)
    return comp.runner.call(comp.symbol, arrays)


def quick(comp, mode: str, device: str, args: tuple):
    """The quick call (runtime.fastcall) of a specialization compiled for the CPU, for arguments
    shaped as these (a call's, just run), or None."""
    if mode != "compiled" or device != "cpu" or type(comp.runner) is not CpuProgram:
        return None
    return comp.runner.quick(comp.symbol, args, comp.result_proto)


def stage_text(comp, stage: str) -> str:
    """The text of a stage: the dg stages and their lowering with locations, what bufferization
    and the upstream lowerings make without them."""
    if stage == "ptx":
        return gpu.ptx(stage_module(comp, "gpu"))
    m = stage_module(comp, stage)
    return asm(m) if stage in ("dg", "batch", "grad", "opt", "linalg") else str(m)
