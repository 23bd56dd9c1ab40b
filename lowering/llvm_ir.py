"""A module in MLIR's LLVM dialect as LLVM IR text that llvmlite's LLVM reads.

Expects: a module whose ops are all in the LLVM dialect (or NVVM, for kernels). Guarantees:
`llvm_ir(module)` is MLIR's translation of it, the module verified first (dg's pipelines run
without MLIR's verifier after each pass, core.mlir.pass_manager, and the translation of invalid
IR crashes rather than fails: here it is an MLIRError), with its float literals rewritten (`portable_floats`)
where the LLVM inside MLIR's bindings prints them in a form llvmlite's parser does not read. The
CPU target optimizes and compiles that text with llvmlite (lowering.codegen.objects), the GPU
path makes PTX from it.
"""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np

from dg.core.mlir import llvm_dialect, threaded


def llvm_ir(module) -> str:
    """The module (LLVM dialect), verified, translated to LLVM IR text, its float literals portable."""
    with threaded(module.context):  # (the functions verified on several threads)
        module.operation.verify()
    return portable_floats(str(llvm_dialect.translate_module_to_llvmir(module.operation)))


# Float literals as the LLVM of MLIR's bindings prints them (`f0x3F800000`, `-inf`, a shortest
# decimal such as `1.000100e+00` for a float that is not exactly 1.0001) and as an older LLVM's
# parser (llvmlite's) reads them: `0x` and the 16 hex digits of the value as a double (for half
# and bfloat, `0xH`/`0xR` and their own bits). The type is the last floating-point type named
# before the literal on its line (the operand type of an instruction, or of a constant).

_LITERAL = re.compile(r"(?<![\w%@.$\"])(?:f0x[0-9A-Fa-f]+|[-+]?[qs]?nan(?:\(0x[0-9A-Fa-f]+\))?|[-+]?inf\b"
                      r"|[-+]?\d+\.\d+(?:[eE][-+]?\d+)?)")
_TYPE = re.compile(r"\b(half|bfloat|float|double)\b")


def portable_floats(text: str) -> str:
    """The LLVM IR text with its float literals in the form every LLVM reads (see above). (Lines
    that name no float type are passed over with substring tests: regular expressions over every
    line of a large module took a tenth of a second and more.)"""
    out = []
    for line in text.splitlines(keepends=True):
        if ("float" in line or "double" in line or "half" in line) and _TYPE.search(line) and \
                not line.lstrip().startswith(("define", "declare", ";", "!", "attributes", "source_filename", "target")):
            line = _LITERAL.sub(lambda m: _old_literal(m, line), line)
        out.append(line)
    return "".join(out)


def _old_literal(m, line: str) -> str:
    types = _TYPE.findall(line[:m.start()])
    if not types:
        return m.group(0)
    kind = types[-1]
    token = m.group(0)
    if token.startswith("f0x"):
        bits = int(token[3:], 16)
        if kind == "bfloat":
            return f"0xR{bits:04X}"
        if kind == "half":
            return f"0xH{bits:04X}"
        wide = kind == "double"
        value = np.array(bits, np.uint64 if wide else np.uint32).view(np.float64 if wide else np.float32)
    elif "nan" in token:  # [+-][qs]nan[(0x payload)]: a quiet NaN keeps its sign (payloads are not kept)
        value = -np.nan if token.startswith("-") else np.nan
    else:
        value = float(token)
    if kind == "bfloat":
        return f"0xR{int(np.array(value, ml_dtypes.bfloat16).view(np.uint16)):04X}"
    if kind == "half":
        return f"0xH{int(np.array(value, np.float16).view(np.uint16)):04X}"
    exact = np.float32(value) if kind == "float" else np.float64(value)  # (a float literal names a float)
    return f"0x{int(np.array(np.float64(exact)).view(np.uint64)):016X}"
