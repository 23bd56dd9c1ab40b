"""The `inline-and-simplify` pass: calls inlined where that does not multiply code, then folded.

Expects: a module after `only-entry` (linalg on tensors, func.call between dg functions).
Guarantees: MLIR's inliner (no cost model of its own) and canonicalize have run, except on the
calls `keep_shared_calls` marks `no_inline`: those of a function called from more than one place
whose body, with what inlining puts into it, has more than INLINE_LIMIT ops, or whose copies
would make the module grow past its budget (INLINE_GROWTH). Inlining such a function copies it
at every call; a gradient's reverse function calls both its callee's forward and its callee's
reverse, so a chain of d functions inlined in full grows like d^2, and a module's size (and
LLVM's time) no longer follows the program's. With the budget, the module after inlining is at
most INLINE_GROWTH times its size before (or INLINE_FLOOR ops larger, for a small one): callees
first, the copies of the small functions deep in a chain are made, and the larger functions
above them, which would exceed the budget, keep their calls. A step and its gradient functions,
each called once, still become one body, where fusion and dead-code removal see them.
"""
from __future__ import annotations

from collections import Counter

from dg.core.mlir import ir, run_pipeline

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
INLINE_GROWTH = 2.0  # the module after inlining: at most this many times its ops before ...
INLINE_FLOOR = 3000  # ... or this many ops more, whichever is larger
# One-shot bufferization's analysis (which writes may happen in place) takes time exponential in
# how deeply loops and branches nest: 0.03 s at 16 levels of scf ops, 0.75 s at 22, 3 s at 24
# (a gradient through 22 nested `while`s). Deeper than this, a write copies its buffer first
# instead (`copy-before-write`, pipeline.BUFFERIZE_DEEP): no analysis, more copies. Inlining
# nests no deeper than this: a chain of functions whose reverse functions each loop over the
# next keeps its calls from there on.
MAX_ANALYZED_NESTING = 16


def _survey(block, depth: int, calls: list) -> tuple[int, int]:
    """(ops under the block, how deeply scf ops nest there: an scf op, its terminators too, one
    level, as `scf_nesting` gives it to bufferization); `calls` gets each func.call under it with
    the number of scf ops around it (`depth` around the block)."""
    ops = nesting = 0
    for op in block.operations:
        op = op.operation
        ops += 1
        if op.name == "func.call":
            calls.append((op, depth))
        level = int(op.name.startswith("scf."))
        inner = 0
        for region in op.regions:
            for b in region.blocks:
                n, nest = _survey(b, depth + level, calls)
                ops += n
                inner = max(inner, nest)
        nesting = max(nesting, inner + level)
    return ops, nesting


def scf_nesting(block) -> int:
    """How deeply scf ops nest under the block (an scf op, its terminators too, one level)."""
    return _survey(block, 0, [])[1]


def keep_shared_calls(m) -> int:
    """Mark `no_inline` the calls of functions called from more than one place whose size, with
    what inlining puts into them, exceeds INLINE_LIMIT ops, or whose copies would take the module
    past its budget, and the calls where the callee's scf ops would nest deeper than
    MAX_ANALYZED_NESTING (callees first); how many."""
    bodies, nests, calls = {}, {}, {}
    for op in m.body.operations:
        op = op.operation
        if op.name == "func.func" and op.regions[0].blocks:
            name = ir.StringAttr(op.attributes["sym_name"]).value
            calls[name] = []
            bodies[name], nests[name] = _survey(op.regions[0].blocks[0], 0, calls[name])
    callee = lambda c: ir.FlatSymbolRefAttr(c.attributes["callee"]).value  # noqa: E731
    sites = Counter(callee(c) for cs in calls.values() for c, _ in cs)
    before = sum(bodies.values())
    budget = max(INLINE_GROWTH * before, before + INLINE_FLOOR)
    grown = before  # the module's ops once the copies decided so far are made
    inclusive: dict = {}  # function -> (ops, nesting) with what is inlined into it
    copied: dict = {}  # function -> whether its calls may be inlined
    kept = 0

    def shared(g: str, s: int) -> bool:
        """Whether g's calls may be inlined: g has one call, or its `s` ops fit the limit and its
        further copies the budget (decided once, when its first call is reached)."""
        nonlocal grown
        if g not in copied:
            more = (sites[g] - 1) * s
            copied[g] = sites[g] <= 1 or (s <= INLINE_LIMIT and grown + more <= budget)
            if copied[g]:
                grown += more
        return copied[g]

    def size(name: str, open_: set) -> tuple[int, int]:
        nonlocal kept
        if name in inclusive or name in open_:  # (recursion: MLIR does not inline it)
            return inclusive.get(name, (bodies[name], nests[name]))
        open_.add(name)
        total, nesting = bodies[name], nests[name]
        for c, depth in calls[name]:
            g = callee(c)
            if g not in bodies:
                continue
            s, nest = size(g, open_)
            if depth + nest <= MAX_ANALYZED_NESTING and shared(g, s):
                total += s
                nesting = max(nesting, depth + nest)
            else:
                c.attributes["no_inline"] = ir.UnitAttr.get()
                kept += 1
        open_.discard(name)
        inclusive[name] = total, nesting
        return total, nesting

    for name in bodies:
        size(name, set())
    return kept


def inline_and_simplify(m) -> None:
    keep_shared_calls(m)
    run_pipeline(m, SIMPLIFY)
