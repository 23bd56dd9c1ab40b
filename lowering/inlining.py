"""The `inline-and-simplify` pass: calls inlined where that does not multiply code, then folded.

Expects: a module after `only-entry` (linalg on tensors, func.call between dg functions).
Guarantees: MLIR's inliner (no cost model of its own) and canonicalize have run, except on the
calls `keep_shared_calls` marks `no_inline`: those of a function called from more than one place
whose body, with what inlining puts into it, has more than INLINE_LIMIT ops. Inlining such a
function copies it at every call; a gradient's reverse function calls both its callee's forward
and its callee's reverse, so a chain of d functions inlined in full grows like d^2, and a
module's size (and LLVM's time) no longer follows the program's. A step and its gradient
functions, each called once, still become one body, where fusion and dead-code removal see them.
"""
from __future__ import annotations

from collections import Counter

from dg.core.mlir import ir, operations_under, run_pipeline

# Canonicalization leaves out one MLIR pattern, ForOpTensorCastFolder: it moves a cast to a more
# static type from a loop's initial value into the loop, which then claims that every iteration
# yields that static shape. A loop that starts from an empty placeholder and yields an argument
# (an early `return a` inside a loop) came out as an empty result. A pattern's name is the one
# LLVM's getTypeName gives it, which differs between GCC and Clang builds: both are listed (MLIR
# ignores a name it does not know; tests check that the pattern stays off).
CANONICALIZE = ('canonicalize{disable-patterns="(anonymous namespace)::ForOpTensorCastFolder",'
                '{anonymous}::ForOpTensorCastFolder}')
# Inlining, so that fusion and dead-code removal see a step and its gradient functions as one
# body. The inliner simplifies nothing itself (its default pipeline would be the full
# canonicalize). No cse: it would merge the zero-filled outputs of different matmuls into one
# buffer that bufferization then copies for each of them (LLVM's GVN removes what cse would).
SIMPLIFY = f'builtin.module(inline{{default-pipeline=""}}, {CANONICALIZE})'
INLINE_LIMIT = 1500  # ops: a function called from several places and larger than this keeps its calls


def keep_shared_calls(m) -> int:
    """Mark `no_inline` the calls of functions called from more than one place whose size, with
    what inlining puts into them, exceeds INLINE_LIMIT ops (callees first); how many."""
    bodies, calls = {}, {}
    for op in m.body.operations:
        op = op.operation
        if op.name == "func.func" and op.regions[0].blocks:
            name = ir.StringAttr(op.attributes["sym_name"]).value
            ops = list(operations_under(op.regions[0].blocks[0]))
            bodies[name] = len(ops)
            calls[name] = [c for c in ops if c.name == "func.call"]
    callee = lambda c: ir.FlatSymbolRefAttr(c.attributes["callee"]).value  # noqa: E731
    sites = Counter(callee(c) for cs in calls.values() for c in cs)
    inclusive: dict = {}
    kept = 0

    def size(name: str, open_: set) -> int:
        nonlocal kept
        if name in inclusive or name in open_:  # (recursion: MLIR does not inline it)
            return inclusive.get(name, bodies[name])
        open_.add(name)
        total = bodies[name]
        for c in calls[name]:
            g = callee(c)
            if g not in bodies:
                continue
            s = size(g, open_)
            if sites[g] > 1 and s > INLINE_LIMIT:
                c.attributes["no_inline"] = ir.UnitAttr.get()
                kept += 1
            else:
                total += s
        open_.discard(name)
        inclusive[name] = total
        return total

    for name in bodies:
        size(name, set())
    return kept


def inline_and_simplify(m) -> None:
    keep_shared_calls(m)
    run_pipeline(m, SIMPLIFY)
