"""LLVM IR text to object code for this CPU, with llvmlite.

Expects: LLVM IR text (lowering.llvm_ir's translation of a module in the LLVM dialect).
Guarantees: `object_code(text, level)` is position-independent object code for the host CPU,
which the CPU executor's JIT links (runtime.cpu); levels 1 to 3 are LLVM's default pipelines,
level 0 the quick one of a program's first calls (runtime.optimizer).
"""
from __future__ import annotations


def object_code(text: str, level: int) -> bytes:
    """Object code for this CPU (position independent) of LLVM IR text, optimized at `level`:
    1 to 3, LLVM's default pipelines (the SLP vectorizer off) and code generation at that level;
    0, quick (QUICK_PASSES and LLVM's fast code generation: a tenth of -O2's time on a large
    program, for code about three times slower). The module is parsed into an LLVM context of
    its own, so that threads may compile at once; LLVM's work runs without the GIL (llvmlite
    calls it through ctypes)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(text, context=llvm.create_context())
    machine = _target_machine(level)
    mod.triple = machine.triple
    tuning = llvm.create_pipeline_tuning_options(speed_level=max(level, 1))
    tuning.slp_vectorization = False  # (see below)
    passes = llvm.create_pass_builder(machine, tuning)
    if level:
        passes.getModulePassManager().run(mod, passes)
    else:
        quick = llvm.create_new_module_pass_manager()
        for name in QUICK_PASSES:
            getattr(quick, f"add_{name}_pass")()
        quick.run(mod, passes)
    return machine.emit_object(mod)


# The SLP vectorizer is off at every level: on some functions its cost model ran for minutes (a
# loop with an early return of a 10-tuple: 35 to 200 s against about 1 s without it), and the
# benchmarks gained nothing from it; the loop vectorizer stays on.

# What the quick level runs before code generation: the loop functions inlined into the pool's
# entries, memref descriptors taken apart into scalars, and the arithmetic on them folded.
# Measured on the 2-layer GPT loss gradient: 0.25 s, and code 1.3 times as fast as without.
QUICK_PASSES = ("always_inliner", "sroa", "instruction_combine", "simplify_cfg")


def _target_machine(level: int):
    import llvmlite.binding as llvm

    return llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=level, reloc="pic",
        codemodel="jitdefault")
