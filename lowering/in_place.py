"""Element-wise ops and whole copies written over a buffer that dies there, where bufferization made a new one.

Expects: a module just bufferized by One-Shot Bufferize (function boundaries included), before
call_copies and the deallocations. Guarantees: `outputs_in_place(module)` gives an element-wise
`linalg.generic` whose output is a buffer allocated for it (`memref.alloc`, its values never
read by the body, used only from the op on) one of its inputs instead, and drops a
`memref.copy` of a whole buffer into one allocated for it (not for a call: call_copies decides
those) where what uses the copy may use the buffer copied from, where that input (or source):
- has the output's type and is read through the output's (identity) map;
- is a buffer the function may write (call_copies.dies_at): its own allocation, a call's result,
  a value a loop carries that is the loop's own (call_copies._loop_owned), or an argument that
  every caller hands over (`dg.donated`, with each call passed a buffer that nothing reads
  after it, or a copy made for it);
- is not used once the op has run (nor anything that may be it), with no loop between.
The output buffer goes, and what used it uses the input. The values are the same: each element
is read, then written, by the same iteration (and a copy's source held what the copy would).

Why: One-Shot Bufferize joins the alias sets of everything a call of a function it has not
analyzed is passed and gives back, and a recursive function's call of itself is one. In the
gradient of a recursion (lowering/ad/reverse.py's shadows) every shadow then looked like every
other, no write could be in place, and each level added its share into a new full-size buffer,
which the calls then copied. Written over the shadow handed down, the gradient is one buffer
for the whole recursion, and call_copies drops the copies made at the calls.
"""
from __future__ import annotations

from dg.core.mlir import defining_op, functions, identity_map, ir, is_private, operations_under, user

from .call_copies import dies_at, handed_arguments, handed_only, may_run_after, ordered
from .deallocs import returned_arguments

def outputs_in_place(m) -> int:
    """Write element-wise ops over their dying inputs (see the module's doc); how many."""
    with ordered():
        return _outputs_in_place(m)


def _outputs_in_place(m) -> int:
    returns = returned_arguments(m)
    handed = handed_arguments(m, returns)
    done = 0
    for name, f, body in functions(m):
        own, mine = is_private(f), handed.get(name, frozenset())
        for op in operations_under(body):
            if op.name == "linalg.generic":
                done += _in_place(op, returns, own, mine)
            elif op.name == "memref.copy":
                done += _copy_not_needed(op, returns, own, mine)
    return done


def _in_place(op, returns: dict, own: bool, handed: set) -> int:
    segments = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])
    ins, outs = segments[0], segments[1]
    if outs != 1 or op.results or any("parallel" not in str(t) for t in op.attributes["iterator_types"]):
        return 0
    out = op.operands[ins]
    alloc = _made_for(out, op)
    if alloc is None or len(list(op.regions[0].blocks[0].arguments[ins].uses)):
        return 0
    maps = [str(a) for a in op.attributes["indexing_maps"]]
    if maps[ins] != identity_map(len(list(op.attributes["iterator_types"]))):
        return 0
    for i in range(ins):
        x = op.operands[i]
        if x.type != out.type or maps[i] != maps[ins] or not _dies_here(x, op, returns, own, handed):
            continue
        out.replace_all_uses_with(x)
        alloc.erase()
        return 1
    return 0


def _copy_not_needed(copy, returns: dict, own: bool, handed: set) -> int:
    """A whole buffer copied into one allocated for it, where the buffer copied from dies at the
    copy: what used the copy uses that buffer, and the copy and its allocation go. 1 or 0."""
    x, out = copy.operands
    alloc = _made_for(out, copy)
    if alloc is None or x.type != out.type:
        return 0
    if any(user(u).name == "func.call" for u in out.uses):
        return 0  # (a copy made for a call: call_copies decides, knowing what the callee does)
    if not _dies_here(x, copy, returns, own, handed):
        return 0
    out.replace_all_uses_with(x)
    copy.erase()
    alloc.erase()
    return 1


def _made_for(out, op):
    """The `memref.alloc` that made `out` where nothing uses out before `op` (its sizes
    excepted): a buffer made for op, which may be another; else None."""
    alloc = defining_op(out)
    if getattr(alloc, "name", None) != "memref.alloc":
        return None
    if any(user(u) != op and user(u).name != "memref.dim" and not may_run_after(user(u), op) for u in out.uses):
        return None
    return alloc


def _dies_here(x, op, returns: dict, own: bool, handed: set) -> bool:
    """Whether the op may write `x`'s buffer: see the module's doc."""
    found = dies_at(x, op, returns, own, spare=(op,))
    return found is not None and handed_only(found[0], handed)
