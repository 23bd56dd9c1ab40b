"""Dead code removed from the gradient functions of recursive functions.

Expects: the functions of a module the autodiff pass wrote (lowering/irmodel.py's `Func`s,
bodies of `func`, `scf`, `arith` and `dg` ops). Guarantees: `prune(body, pure)` removes from a
body, in place, every op whose results nothing uses and that has no effect (a pure dg op, an
`arith` op, a call of a function in `pure`, or an `scf` op whose regions hold only such ops),
and the results of an `scf.if` that nothing uses (with what its branches yield for them), until
nothing more goes. `pure_functions(funcs)` gives the functions whose calls have no effect: no
print, check, breakpoint or message in them or in what they call (a recursion is pure unless
something in it is not).

Why: a gradient function with shadows (lowering/ad/reverse.py) gives back no forward results,
so the forward sweep's copies of the ops that only made them are dead; each branch's reverse
recomputes what it needs. In a recursion those copies are calls of the forward function on the
subtrees, which MLIR's canonicalizer cannot remove (a call may have effects): left in, every
level of a Tree-LSTM's gradient ran its subtrees' forward once more.
"""
from __future__ import annotations

from dg.dialects.registry import OPS

from ..irmodel import Block, Func, Op
from .activity import TERMINATORS, callee, walk_ops


def pure_functions(funcs: list[Func]) -> set:
    """The names of the functions (with bodies) whose calls have no effect."""
    bodies = {f.sym: f.body for f in funcs if f.body is not None}
    pure = set(bodies)
    changed = True
    while changed:
        changed = False
        for sym in list(pure):
            if not all(_pure_op(op, pure) for op in walk_ops(bodies[sym])):
                pure.discard(sym)
                changed = True
    return pure


def _pure_op(op: Op, pure: set) -> bool:
    """Whether `op` itself (not its regions) has no effect."""
    if op.dg is not None:
        return OPS[op.dg].pure
    if op.name == "func.call":
        return callee(op) in pure
    return op.name.startswith(("arith.", "scf.")) or op.name == "func.return"


def _removable(op: Op, pure: set) -> bool:
    return _pure_op(op, pure) and all(_pure_op(o, pure) for r in op.regions for o in walk_ops(r))


def prune(body: Block, pure: set) -> int:
    """Remove the dead ops and `scf.if` results of `body` (see the module's doc); how many ops went."""
    uses: dict = {}
    for op in walk_ops(body):
        for v in op.operands:
            uses[v] = uses.get(v, 0) + 1
    removed = 0
    while True:
        n = _sweep(body, uses, pure)
        if not n:
            return removed
        removed += n


def _drop_uses(op: Op, uses: dict) -> None:
    for o in [op, *(x for r in op.regions for x in walk_ops(r))]:
        for v in o.operands:
            uses[v] -= 1


def _sweep(block: Block, uses: dict, pure: set) -> int:
    """One pass over `block`, last op first (what a removed op used may die in turn); the
    changes made."""
    changed = 0
    for op in reversed(list(block.ops)):
        if op.name in TERMINATORS:
            continue
        if op.name == "scf.if" and op.results:
            keep = [i for i, r in enumerate(op.results) if uses.get(r, 0)]
            if len(keep) < len(op.results):
                for region in op.regions:
                    y = region.ops[-1]
                    for i, v in enumerate(y.operands):
                        if i not in keep:
                            uses[v] -= 1
                    y.operands = [y.operands[i] for i in keep]
                op.results = [op.results[i] for i in keep]
                changed += 1
        for region in op.regions:
            changed += _sweep(region, uses, pure)
        if not any(uses.get(r, 0) for r in op.results) and _removable(op, pure):
            _drop_uses(op, uses)
            block.ops.remove(op)
            changed += 1
    return changed
