"""Activity analysis, and what the sweeps ask of a loop's carried values.

Expects: functions read by lowering/irmodel.py. Guarantees: `activity` gives
the floats that depend on the seeds (a fixpoint over loops and branches),
which are the values that get adjoints (reverse) or tangents (forward);
`free_values` what a region uses from outside it; `slot_passed_on` and
`slot_appends` which carried values of a loop need no tape (an early
return's placeholder that the body only hands on, and a gradient's tape
the loop only appends to).
"""
from __future__ import annotations

from dg.core.types import is_float as _float_dtype
from dg.core.writer import Value

from ..irmodel import Block, Op

TERMINATORS = ("scf.yield", "scf.condition", "func.return")
INACTIVE = ("stop_gradient", "zeros_like", "tape_alloc")  # ops whose results depend on nothing
# Ops whose float results are active whatever their operands: a message between processes (what
# a recv gives depends on the sender's values; a send's token carries the cotangent of what it
# sent). Their rules run on both sides alike, a zero adjoint or tangent where none reaches them,
# so that every message of the forward pass has its message in the derivative's.
ALWAYS_ACTIVE = ("send", "recv")


def is_float(v: Value) -> bool:
    """Whether v can have an adjoint or a tangent: a float tensor (not an index, not a flag)."""
    return v.tt.dtype not in ("index", "i1") and _float_dtype(v.tt.dtype)


def callee(call: Op) -> str:
    """The name of the function a `func.call` calls."""
    return call.attrs["callee"].strip().strip('"').lstrip("@")


def walk_ops(block: Block):
    for op in block.ops:
        yield op
        for r in op.regions:
            yield from walk_ops(r)


def free_values(blocks: list) -> list:
    """Values used inside `blocks` (nested regions included) but defined outside them, in first-use order."""
    defined, used = set(), {}
    for b in blocks:
        defined.update(b.args)
        for op in walk_ops(b):
            defined.update(op.results)
            for r in op.regions:
                defined.update(r.args)
    for b in blocks:
        for op in walk_ops(b):
            for o in op.operands:
                if o not in defined:
                    used.setdefault(o, None)
    return list(used)


def passed_on(v: Value, block: Block, exits: set) -> bool:
    """Whether `block` only hands `v` on: as an operand of its terminator at an index in `exits`,
    or through an scf.if that yields it and whose result is handed on the same way. No op reads
    it."""
    for op in block.ops:
        if op.name in TERMINATORS:
            if any(o is v and i not in exits for i, o in enumerate(op.operands)):
                return False
        elif op.name == "scf.if":
            if op.operands[0] is v:
                return False
            for r in op.regions:
                yielded = {j for j, o in enumerate(r.ops[-1].operands) if o is v}
                if not passed_on(v, r, yielded):
                    return False
                if not all(passed_on(op.results[j], block, exits) for j in yielded):
                    return False
        elif op.name in ("scf.for", "scf.while") and v in op.operands:
            first = 3 if op.name == "scf.for" else 0
            slots = [p - first for p, o in enumerate(op.operands) if o is v]
            if any(i < 0 or not slot_passed_on(op, i) or not passed_on(op.results[i], block, exits) for i in slots):
                return False
            if v in free_values(op.regions):
                return False
        elif v in op.operands or (op.regions and v in free_values(op.regions)):
            return False
    return True


def _pushed_on(a: Value, block: Block, exit_at: int) -> bool:
    """Whether `block` uses `a` only as the tape of one dg.tape_push whose result only goes to
    its terminator's operand `exit_at`."""
    users = [op for op in block.ops if a in op.operands or (op.regions and a in free_values(op.regions))]
    if len(users) != 1 or users[0].dg != "tape_push" or users[0].operands[0] is not a or a in users[0].operands[1:]:
        return False
    r = users[0].results[0]
    t = block.ops[-1]
    return all(u is t for u in (op for op in block.ops if r in op.operands
                                 or (op.regions and r in free_values(op.regions)))) \
        and [j for j, o in enumerate(t.operands) if o is r] == [exit_at]


def slot_appends(op: Op, i: int) -> bool:
    """Whether a loop's carried value `i` is a tape the loop only appends to (a gradient's forward
    loop, differentiated again): one dg.tape_push per iteration, of the row the iteration counts.
    Its final value holds every row each iteration saw, so it needs no tape of its own."""
    if op.name == "scf.for":
        body = op.regions[0]
        return _pushed_on(body.args[1 + i], body, i)
    before, after = op.regions
    return _pushed_on(before.args[i], before, i + 1) and passed_on(after.args[i], after, {i})


def slot_passed_on(op: Op, i: int) -> bool:
    """Whether a loop's body only hands its carried value `i` on, from iteration to iteration."""
    if op.name == "scf.for":
        body = op.regions[0]
        return passed_on(body.args[1 + i], body, {i})
    before, after = op.regions
    return passed_on(before.args[i], before, {i + 1}) and passed_on(after.args[i], after, {i})


def activity(body: Block, seeds: set, messages=lambda callee: False) -> set:
    """Floats that depend on the seeds (a fixpoint over loops); the float results of a call are
    active too where `messages(callee)` (a function that sends or receives)."""
    active = set(seeds)

    def mark(vals, flags):
        changed = False
        for v, f in zip(vals, flags):
            if f and is_float(v) and v not in active:
                active.add(v)
                changed = True
        return changed

    def block(b: Block) -> bool:
        changed = False
        for op in b.ops:
            changed |= one(op)
        return changed

    def terminator(b: Block) -> Op:
        return b.ops[-1]

    def one(op: Op) -> bool:
        changed = False
        if op.name == "scf.if":
            for r in op.regions:
                changed |= block(r)
            for r in op.regions:
                changed |= mark(op.results, [o in active for o in terminator(r).operands])
            return changed
        if op.name == "scf.for":
            body_ = op.regions[0]
            while True:
                c = mark(body_.args[1:], [o in active for o in op.operands[3:]])
                c |= block(body_)
                c |= mark(body_.args[1:], [o in active for o in terminator(body_).operands])
                changed |= c
                if not c:
                    break
            changed |= mark(op.results, [a in active for a in body_.args[1:]])
            return changed
        if op.name == "scf.while":
            before, after = op.regions
            while True:
                c = mark(before.args, [o in active for o in op.operands])
                c |= block(before)
                cond = terminator(before).operands[1:]
                c |= mark(after.args, [o in active for o in cond])
                c |= block(after)
                c |= mark(before.args, [o in active for o in terminator(after).operands])
                changed |= c
                if not c:
                    break
            changed |= mark(op.results, [o in active for o in terminator(before).operands[1:]])
            return changed
        if op.dg in INACTIVE:
            return False
        if op.dg in ALWAYS_ACTIVE or any(o in active for o in op.operands) or (
                op.name == "func.call" and messages(callee(op))):
            changed |= mark(op.results, [True] * len(op.results))
        return changed

    while block(body):
        pass
    return active
