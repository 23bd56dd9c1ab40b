"""The CPU's passes that are not a rewrite of their own module: from a bufferized module to the
LLVM dialect.

Expects: a module after the `bufferized` stage (lowering.pipeline). Guarantees: passes that
give dg functions symbols no C library has, define the runtime functions the lowering declared,
keep only an entry function callable, give private functions internal linkage, set the host's
data layout, lower to the LLVM dialect and set LLVM's function attributes. The rewrites in
between (BLAS calls, threads, allocation guards) have modules of their own.
"""
from __future__ import annotations

import functools

from dg.core.abi import FAIL, FRAME, INNER_FRAMES, LINKED, MAX_FRAMES, STACK_POINTER, STATE, STATE_DECL, STATE_TYPE
from dg.core.mlir import append_parsed, ir, is_private, operations_under, run_pipeline

# bf16 arithmetic is done in f32, rounded to bf16 after each operation, and f32-bf16 conversions
# are integer operations (arith-expand): LLVM would call runtime functions the JIT does not have.
# Math functions of f16 and bf16 are computed in f32, as NumPy does. The conversions that work
# on one function at a time are nested in `func.func(…)`: the `to-llvm` pass runs them on MLIR's
# threads, several functions at once (a parallel loop's outlined functions are many); the others
# add declarations to the module or change signatures, and run on the whole module. First, cse:
# what bufferization and outlining repeat (sizes read again, the launches' conversions) is a
# quarter of the ops, which every conversion would convert on its own. Last, each
# function's canonicalization and cse: a memref descriptor's fields are read from the struct
# they were just put in (the lowering's extractvalue of an insertvalue, and the same field read
# again at every access), which made a quarter of the LLVM IR that LLVM parses and compiles.
# The arith, cf, func and index dialects go to LLVM in one conversion (convert-to-llvm), not a
# pass each: the same LLVM dialect, a sixth less time (the 2-layer GPT gradient: 0.27 s against
# 0.34, medians of 8). Memrefs and math go first on their own: convert-to-llvm would leave
# `memref.reshape` unconverted, and make libm calls of what convert-math-to-llvm makes intrinsics.
# bf16 arithmetic and math run in f32 (the emulation), rounded to bf16 after each op, as the
# interpreter rounds: `rounding_each_op` runs between the two pipelines (see it).
TO_LLVM_FLOATS = (
    "builtin.module("
    "func.func(cse, convert-linalg-to-loops, arith-emulate-unsupported-floats{source-types=bf16 target-type=f32},"
    "math-extend-to-supported-types{target-type=f32}))"
)
TO_LLVM = (
    "builtin.module("
    "func.func(arith-expand{include-bf16=true}),"
    "convert-math-to-funcs, func.func(convert-scf-to-cf, expand-strided-metadata, lower-affine),"
    "finalize-memref-to-llvm, func.func(convert-math-to-llvm), convert-math-to-libm, convert-to-llvm,"
    "reconcile-unrealized-casts, llvm.func(canonicalize, cse))"
)

# Loops vectorize with 512-bit registers where the CPU has them (LLVM prefers 256 on its own): f32
# exp/tanh chains run half again as fast. A CPU without AVX-512 ignores the preference. No call
# becomes a jump (tail-recursion elimination, sibling calls): each call takes stack, so that the
# entry guard's stack budget ends a recursion that would never return (`return f(x)`), which as
# a loop would spin forever.
FUNCTION_ATTRIBUTES = '[["prefer-vector-width", "512"], ["disable-tail-calls", "true"]]'

# A failed check's id plus one goes into word 0 of the state and its values into words 3 and 4,
# and the count of calls it unwinds (word 5) starts at 0, the first failure winning: on the
# CPU, `dg_rt_fail` (declared by the lowering) gets this body after bufferization, so that no
# check calls back into Python (deep in a recursion there may be no stack left for that).
FAIL_DEF = (f"{STATE_DECL}\n"  # for the text to parse on its own; the module has it already
            f"func.func private @{FAIL}(%id: i64, %a: i64, %b: i64) {{\n"
            f"  %g = memref.get_global @{STATE} : {STATE_TYPE}\n"
            "  %c0 = arith.constant 0 : index\n"
            "  %c3 = arith.constant 3 : index\n"
            "  %c4 = arith.constant 4 : index\n"
            "  %z = arith.constant 0 : i64\n"
            "  %one = arith.constant 1 : i64\n"
            f"  %cur = memref.load %g[%c0] : {STATE_TYPE}\n"
            "  %first = arith.cmpi eq, %cur, %z : i64\n"
            "  %c5 = arith.constant 5 : index\n"
            "  scf.if %first {\n"
            "    %v = arith.addi %id, %one : i64\n"
            f"    memref.store %v, %g[%c0] : {STATE_TYPE}\n"
            f"    memref.store %z, %g[%c5] : {STATE_TYPE}\n"
            f"    memref.store %a, %g[%c3] : {STATE_TYPE}\n"
            f"    memref.store %b, %g[%c4] : {STATE_TYPE}\n"
            "  }\n"
            "  return\n}\n")
# The call stack of a failure: each dg call that returns with the first failure inside it counts
# itself in word 5 and writes its site's id where core.abi's layout puts call k.
FRAME_DEF = (f"{STATE_DECL}\n"
             f"func.func private @{FRAME}(%site: i64) {{\n"
             f"  %g = memref.get_global @{STATE} : {STATE_TYPE}\n"
             "  %c5 = arith.constant 5 : index\n"
             "  %c6 = arith.constant 6 : i64\n"
             "  %one = arith.constant 1 : i64\n"
             f"  %inner = arith.constant {INNER_FRAMES} : i64\n"
             f"  %ring = arith.constant {MAX_FRAMES - INNER_FRAMES} : i64\n"
             f"  %n = memref.load %g[%c5] : {STATE_TYPE}\n"
             "  %in = arith.cmpi slt, %n, %inner : i64\n"
             "  %k = arith.subi %n, %inner : i64\n"
             "  %r = arith.remsi %k, %ring : i64\n"
             "  %o = arith.addi %r, %inner : i64\n"
             "  %slot = arith.select %in, %n, %o : i64\n"
             "  %w = arith.addi %slot, %c6 : i64\n"
             "  %at = arith.index_cast %w : i64 to index\n"
             f"  memref.store %site, %g[%at] : {STATE_TYPE}\n"
             "  %n1 = arith.addi %n, %one : i64\n"
             f"  memref.store %n1, %g[%c5] : {STATE_TYPE}\n"
             "  return\n}\n")
# The stack pointer: declared by the lowering, defined after bufferization (which rejects the
# LLVM intrinsic).
STACK_POINTER_DEF = (f"func.func private @{STACK_POINTER}() -> i64 {{\n"
                     "  %sp = llvm.intr.stacksave : !llvm.ptr\n"
                     "  %i = llvm.ptrtoint %sp : !llvm.ptr to i64\n"
                     "  return %i : i64\n}\n")


def rounding_each_op(m) -> None:
    """The f32 <-> bf16 conversions that the emulation of bf16 puts around each op, without
    `fastmath<contract>`: with it, the folding of the passes after (arith-expand's) takes
    extf(truncf(v)) for v, and a chain of bf16 ops (`x * x + x`) was rounded once, at its end,
    not after each op as in the interpreter."""
    for op in operations_under(m.body):
        if op.name in ("arith.extf", "arith.truncf") and "fastmath" in op.attributes:
            del op.attributes["fastmath"]


def to_llvm(m) -> None:
    """The `to-llvm` pass: TO_LLVM_FLOATS, rounding_each_op, then TO_LLVM (on MLIR's threads)."""
    run_pipeline(m, TO_LLVM_FLOATS, True)
    rounding_each_op(m)
    run_pipeline(m, TO_LLVM, True)


def _functions(m):
    """The module's functions that have a body, with their symbols."""
    for op in m.body.operations:
        op = op.operation
        if op.name == "func.func" and len(op.regions[0].blocks):
            yield op, ir.StringAttr(op.attributes["sym_name"]).value


def only_entry(m, entry: str | None = None) -> None:
    """Make every function but `entry` private (no C interface) and drop those it does not reach
    (the inliner then drops the functions it inlined everywhere); without an entry, nothing."""
    if entry is None:
        return
    for op, name in _functions(m):
        if name != entry:
            op.attributes["sym_visibility"] = ir.StringAttr.get("private")
            if "llvm.emit_c_interface" in op.attributes:
                del op.attributes["llvm.emit_c_interface"]
    run_pipeline(m, "builtin.module(symbol-dce)")


def link_names(m) -> None:
    """Give the module's dg functions (those with bodies, before the runtime's get theirs) dotted
    symbols, which no C library, MLIR or runtime function can have: a dg function named `memcpy`,
    `sinf` or `malloc` would otherwise be what LLVM's and MLIR's own calls of those reach."""
    for op, old in list(_functions(m)):
        ir.SymbolTable.replace_all_symbol_uses(old, LINKED + old, m.operation)
        op.attributes["sym_name"] = ir.StringAttr.get(LINKED + old)


def define_runtime_functions(m) -> None:
    """Give the functions the lowering declared for the CPU their bodies: the stack pointer, and
    `dg_rt_fail`, which records a failed check in the state word the executor reads, and
    `dg_rt_frame`, which records the calls a failure unwinds."""
    bodies = {STACK_POINTER: STACK_POINTER_DEF, FAIL: FAIL_DEF, FRAME: FRAME_DEF}
    for op in list(m.body.operations):
        op = op.operation
        name = ir.StringAttr(op.attributes["sym_name"]).value if op.name == "func.func" else None
        if name in bodies and not len(op.regions[0].blocks):
            op.erase()
            append_parsed(m, bodies[name])


def internal_linkage(m) -> None:
    """Give the private functions internal linkage: LLVM may then inline a function into its
    callers and drop it, and no wrapper or symbol is made for what nothing outside calls."""
    internal = ir.Attribute.parse("#llvm.linkage<internal>")
    for op, _ in _functions(m):
        if is_private(op):
            op.attributes["llvm.linkage"] = internal


def host_data_layout(m) -> None:
    """The host's LLVM data layout, which the module is lowered with: MLIR folds constant
    addresses with it (without it, with LLVM's default layout, where an i64 is 4-aligned)."""
    m.operation.attributes["llvm.data_layout"] = ir.StringAttr.get(_host_data_layout())


@functools.cache
def _host_data_layout() -> str:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    return str(llvm.Target.from_default_triple().create_target_machine().target_data)


def function_attributes(m) -> None:
    """LLVM's function attributes (`passthrough`) of FUNCTION_ATTRIBUTES on every function with a
    body, besides a function's own."""
    common = list(ir.ArrayAttr(ir.Attribute.parse(FUNCTION_ATTRIBUTES)))
    for op in m.body.operations:
        if op.operation.name == "llvm.func" and len(op.operation.regions[0].blocks):
            attrs = op.operation.attributes
            own = list(ir.ArrayAttr(attrs["passthrough"])) if "passthrough" in attrs else []  # noinline
            attrs["passthrough"] = ir.ArrayAttr.get(common + own)
