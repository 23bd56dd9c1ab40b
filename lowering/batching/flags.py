"""Which values of a function are batched, given which of its arguments are.

Expects: a function of dg IR (lowering/irmodel.py) and the set of its values
known to be batched (its mapped arguments). Guarantees: `batched_values`
gives every value that differs by example: a dg op's results where an operand
does (but for `dim`: the sizes of a batched array's axes are the same for
every example), a call's results where an argument does, every result of an
`if` whose condition does, and every value a loop carries where its condition
or bounds do (an example's loop runs its own number of times) or where an
iteration makes it so (a loop's carried values are found by a fixpoint).
"""
from __future__ import annotations

from ..irmodel import Block, Op

SHARED_RESULTS = ("dim",)  # dg ops whose results are the same for every example whatever their operands


def batched_values(body: Block, batched: set) -> set:
    """The values of `body` (and of the regions inside) that are batched, `batched` included."""
    out = set(batched)
    while _block(body, out):
        pass
    return out


def _block(block: Block, out: set) -> bool:
    changed = False
    for op in block.ops:
        changed |= _op(op, out)
    return changed


def _mark(values, out: set) -> bool:
    new = [v for v in values if v not in out]
    out.update(new)
    return bool(new)


def loop_condition(op: Op, out: set) -> bool:
    """Whether a loop runs a different number of times for different examples."""
    if op.name == "scf.while":
        return op.regions[0].ops[-1].operands[0] in out
    if op.name == "scf.for":
        return any(o in out for o in op.operands[:3])
    return False


def _op(op: Op, out: set) -> bool:
    changed = False
    for r in op.regions:
        changed |= _block(r, out)
    if op.name.startswith("dg."):
        if op.dg not in SHARED_RESULTS and any(o in out for o in op.operands):
            changed |= _mark(op.results, out)
    elif op.name == "func.call":
        if any(o in out for o in op.operands):
            changed |= _mark(op.results, out)
    elif op.name == "scf.if":
        if op.operands[0] in out:
            changed |= _mark(op.results, out)
        for r in op.regions:
            y = r.ops[-1]
            changed |= _mark([res for res, v in zip(op.results, y.operands) if v in out], out)
    elif op.name == "scf.while":
        before, after = op.regions
        cond = before.ops[-1]  # scf.condition(c, forwarded...)
        carried = list(op.operands)
        if cond.operands[0] in out:  # every carried and forwarded value
            changed |= _mark(before.args + after.args + op.results, out)
        else:
            ys = after.ops[-1].operands
            changed |= _mark([a for a, i, y in zip(before.args, carried, ys) if i in out or y in out], out)
            fwd = cond.operands[1:]
            changed |= _mark([a for a, v in zip(after.args, fwd) if v in out], out)
            changed |= _mark([r for r, v in zip(op.results, fwd) if v in out], out)
    elif op.name == "scf.for":
        body = op.regions[0]
        inits, ys = op.operands[3:], body.ops[-1].operands
        if loop_condition(op, out):
            changed |= _mark(body.args[1:] + op.results, out)
        else:
            slots = [i for i, (a, y) in enumerate(zip(inits, ys)) if a in out or y in out]
            changed |= _mark([body.args[1 + i] for i in slots] + [op.results[i] for i in slots], out)
    else:
        if any(o in out for o in op.operands):
            changed |= _mark(op.results, out)
    return changed
