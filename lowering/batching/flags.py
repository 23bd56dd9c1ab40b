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


# The dg ops whose results have the first axis of a ragged operand (rows of every example laid end to
# end): rows computed one by one (lowering/batching/ragged.py).
ROW_WISE = ("getitem", "take", "setitem", "matmul")


def batched_values(body: Block, batched: set, ragged: set = frozenset()) -> tuple[set, set]:
    """(the values of `body` (and of the regions inside) that differ by example, `batched` and
    `ragged` included; those of them whose first axis differs by example too: ragged, their rows
    laid end to end)."""
    out, rows = set(batched) | set(ragged), set(ragged)
    while _block(body, out, rows):
        pass
    return out, rows


def _block(block: Block, out: set, rows: set) -> bool:
    changed = False
    for op in block.ops:
        changed |= _op(op, out, rows)
    return changed


def _ragged_results(op: Op, rows: set) -> bool:
    """Whether a dg op's results are ragged: rows of a ragged operand, or an array made with a
    first axis per example."""
    return bool(rows) and any(o in rows for o in op.operands) and op.dg not in ("dim",) and \
        not (op.dg in ("getitem", "setitem") and _picks_a_row(op))


def _picks_a_row(op: Op) -> bool:
    """A getitem whose first index is one integer (a row of each example: not ragged any more)."""
    spec = op.py.get("spec", ())
    return op.dg == "getitem" and bool(spec) and spec[0].startswith("i:")


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


def _op(op: Op, out: set, rows: set) -> bool:
    changed = False
    for r in op.regions:
        changed |= _block(r, out, rows)
    if op.name in ("scf.while", "scf.for"):  # a carried value ragged from the start stays so
        inits = op.operands[3:] if op.name == "scf.for" else op.operands
        args = op.regions[0].args[1:] if op.name == "scf.for" else op.regions[0].args
        slots = [i for i, v in enumerate(inits) if v in rows]
        changed |= _mark([args[i] for i in slots] + [op.results[i] for i in slots], rows)
        if op.name == "scf.while":
            changed |= _mark([a for a, v in zip(op.regions[1].args, op.regions[0].ops[-1].operands[1:]) if v in rows],
                             rows)
    if op.name.startswith("dg."):
        ragged_dim = op.dg == "dim" and op.operands[0] in rows and op.py.get("axis") == 0
        if (op.dg not in SHARED_RESULTS or ragged_dim) and any(o in out for o in op.operands):
            changed |= _mark(op.results, out)
        if _ragged_results(op, rows):
            changed |= _mark(op.results, rows)
        if op.dg == "full" and len(op.operands) > 1 and op.operands[1] in out and op.py["shape"][0] == -2:
            changed |= _mark(op.results, rows)  # an array whose first size differs by example
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
