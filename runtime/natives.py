"""The runtime's native helpers: machine code that runs where Python cannot (a signal handler,
threads that never take the GIL, a call from CPython straight into compiled code).

Expects: an LLVM IR file of runtime/ll/ (shipped as package data), whose `${NAME}` placeholders
stand for the constants that its Python side shares with it (table layouts, core.abi's names).
Guarantees: `native_ir(name, constants)` is that file's text with every placeholder replaced,
and a KeyError for a placeholder that `constants` does not give or a constant that the file
does not use; `compile_native(name, constants, symbols)` is an llvmlite MCJIT engine of it,
verified and finalized, with `symbols` (name -> address) added to LLVM's process-wide table
first; `native_object(name, constants)` its object code for this CPU (an exported library
links it: runtime.export). The helpers: `quick_call` (runtime.fastcall), `interrupt` (runtime.interrupt),
`thread_pool` (runtime.threads).
"""
from __future__ import annotations

import re
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "ll"
_PLACEHOLDER = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")


def native_ir(name: str, constants: dict) -> str:
    """The LLVM IR of helper `name` (runtime/ll/NAME.ll) with its `${NAME}` placeholders replaced
    by `constants` (ints, or symbol names): the one place where anything is written into a
    helper's IR."""
    template = (FOLDER / f"{name}.ll").read_text()
    used = set(_PLACEHOLDER.findall(template))
    if used != set(constants):
        missing, unused = sorted(used - set(constants)), sorted(set(constants) - used)
        raise KeyError(f"{name}.ll: placeholders without a value {missing}, values without a placeholder {unused}")
    return _PLACEHOLDER.sub(lambda m: str(constants[m.group(1)]), template)


def compile_native(name: str, constants: dict, symbols: dict | None = None, opt: int = 2):
    """An MCJIT engine (llvmlite's, finalized) of helper `name`, at LLVM level `opt`, linked
    against `symbols` (name -> address, added to LLVM's table of the process)."""
    import llvmlite.binding as llvm  # (not at import: `import dg` does not load LLVM)

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for symbol, address in (symbols or {}).items():
        llvm.add_symbol(symbol, address)
    module = llvm.parse_assembly(native_ir(name, constants))
    module.verify()
    target = llvm.Target.from_default_triple().create_target_machine(opt=opt)
    engine = llvm.create_mcjit_compiler(module, target)
    engine.finalize_object()
    return engine


def native_object(name: str, constants: dict) -> bytes:
    """Position-independent object code for this CPU of helper `name` (at LLVM level 2)."""
    import llvmlite.binding as llvm  # (not at import: `import dg` does not load LLVM)

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(native_ir(name, constants))
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine(opt=2, reloc="pic", codemodel="small")
    return machine.emit_object(module)
