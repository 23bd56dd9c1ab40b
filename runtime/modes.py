"""Prepare and run a specialization in a mode, and show it at a stage.

`interp` parses and verifies the emitted dg IR once and translates it to
Python (`runtime.interp`). Modes and stages that are not built yet say so
with a `DgError`; nothing falls back silently to another mode.
"""
from __future__ import annotations

from dg.dialects.dialect import shared_context
from dg.dialects.mlir import ir, passmanager
from dg.errors import DgError

from . import interp


def parse_verified(text: str):
    ctx = shared_context()
    with ctx:
        try:
            module = ir.Module.parse(text)
        except Exception as e:  # an emitter bug, not a user error
            raise RuntimeError(f"dg emitted IR that does not parse: {e}\n{text}") from None
        if not module.operation.verify():
            raise RuntimeError(f"dg emitted IR that does not verify:\n{text}")
    return module


def run_text(comp) -> str:
    """The IR that runs: the dg stage, with gradients made by the autodiff pass when it asks for any."""
    from dg.lowering.autodiff import differentiate, needs_autodiff

    if comp.grad_text is None:
        if needs_autodiff(comp.ir_text):
            if comp.module is None:
                comp.module = parse_verified(comp.ir_text)
            comp.grad_module = parse_verified(differentiate(comp.module))
            comp.grad_text = asm(comp.grad_module)
        else:
            comp.grad_text = comp.ir_text
            comp.grad_module = comp.module
    return comp.grad_text


def run_module(comp):
    """The IR that runs, parsed (once)."""
    text = run_text(comp)
    if comp.grad_module is None:
        comp.grad_module = parse_verified(text)
        if text is comp.ir_text:
            comp.module = comp.grad_module
    return comp.grad_module


def prepare(comp, mode: str, device: str) -> None:
    if mode == "interp":
        if device != "cpu":
            raise DgError(f"the interpreter runs on the CPU only (device '{device}' was asked for)")
        comp.runner = interp.Translation(run_module(comp))
        return
    if mode == "compiled" and device == "cpu":
        from .cpu import CpuProgram

        comp.runner = CpuProgram.build(run_text(comp), comp.grad_module, comp.symbol)  # parsed only on a cache miss
        return
    if mode == "compiled" and device == "cuda":
        from .cuda import require_driver

        require_driver()  # a located reason when there is no GPU, driver or cuda-python
        raise DgError("running compiled code on device 'cuda' is not built yet: PTX is "
                      "(`.ir('ptx')`); run with device='cpu'")
    raise DgError(f"mode '{mode}' on device '{device}' is not built yet: use mode='interp' (or DG_MODE=interp)")


def execute(comp, mode: str, device: str, arrays):
    if mode == "interp":
        return interp.run(comp.runner, comp.symbol, arrays)
    return comp.runner.call(comp.symbol, arrays)


def asm(module) -> str:
    return module.operation.get_asm(enable_debug_info=True, assume_verified=True)


def optimized(module):
    """The dg IR after MLIR's canonicalize and cse (dg ops are pure where the registry says so)."""
    with module.context:
        m = ir.Module.parse(asm(module))
        pm = passmanager.PassManager.parse("builtin.module(canonicalize,cse)")
        pm.run(m.operation)
    return m


def stage_text(comp, stage: str, device: str) -> str:
    if comp.module is None:
        comp.module = parse_verified(comp.ir_text)
    if stage == "dg":
        return asm(comp.module)
    if stage == "grad":
        return asm(run_module(comp))
    if stage == "opt":
        return asm(optimized(comp.module))
    if stage in ("linalg", "llvm"):
        from .cpu import CpuProgram

        if comp.cpu is None:  # compiled mode already has it; the interpreter builds it on demand
            comp.cpu = comp.runner if isinstance(comp.runner, CpuProgram) else CpuProgram.build(run_text(comp), comp.grad_module, comp.symbol)
        return comp.cpu.linalg_text if stage == "linalg" else comp.cpu.llvm_text
    if stage in ("gpu", "ptx"):
        from dg.lowering import gpu

        if stage == "gpu":
            return str(gpu.to_gpu(run_module(comp))[1])
        return gpu.ptx(run_module(comp))
    raise DgError(f"stage '{stage}' is not built yet (available: dg, grad, opt, linalg, llvm, gpu, ptx)")
