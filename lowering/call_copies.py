"""The copies bufferization makes of what a call is passed, gone where the callee only reads it.

Expects: a module just bufferized by MLIR's One-Shot Bufferize (function boundaries included),
before its deallocations are made. Guarantees: `drop_call_copies(module)`: where a call is passed
a buffer that was allocated and copied from another (`%a = memref.alloc`, `memref.copy %src, %a`)
only to be passed, and the callee neither writes that argument nor returns it, the call is passed
`%src` itself, and the allocation and copy go. Between the copy and the call nothing may write
memory (only allocations, copies into them, sizes and arithmetic), so the callee reads what the
copy would have held.

One-Shot Bufferize knows which arguments a function writes once it has analyzed the function,
and it analyzes callees first; but a function that calls itself, or that a cycle of calls
reaches, is called before it is analyzed, and bufferization then takes every buffer the call is
passed for written: it copies them all. A recursive model's parameters were copied so at every
call (the Tree-LSTM gradient of benchmarks/compile.py: 14 copies before each of its calls of
the forward, 172 copies in all). dg finds which arguments each function may write
(`written_arguments`, through the calls it makes, a function that calls itself included).

A copy is also dropped where the callee writes the buffer but the caller hands it over: the
buffer copied from is the caller's to write (made by it, an argument of a private function, or
what a call of such gave back), and nothing reads it, or anything that may be it, once the call
is made (the call's own results, the buffer as the callee left it, excepted), with no loop
between its making and the call. A gradient's shadow passed down a recursion (lowering/ad) is
so written in place at every depth, not copied at each call.
"""
from __future__ import annotations

import contextlib

from dg.core.mlir import defining_op, downcast, function_bodies, functions, ir, is_function_argument, is_private, operations_under, user

from .deallocs import FRESH, VIEWS, base, returned_arguments

# Ops that only read the memref they are given.
_READS = {"memref.load", "memref.dim", "memref.extract_aligned_pointer_as_index", "memref.rank", "vector.load",
          "vector.transfer_read"}
# What may stand between a copy and the call it is made for: nothing that writes memory.
_BETWEEN = {"memref.alloc", "memref.copy", "memref.dim", "arith.constant", "arith.index_cast", "arith.muli",
            "arith.addi", "arith.subi", "arith.maxsi", "arith.minsi", "arith.select", "arith.cmpi"}


def _buffer(v) -> bool:
    """Whether v is a buffer: a memref, ranked or not (a view cast to `memref<*x...>`, as a host
    call takes it, is the buffer still)."""
    t = downcast(v.type)
    return isinstance(t, (ir.MemRefType, ir.UnrankedMemRefType))


def written_arguments(m, returns: dict | None = None) -> dict:
    """Each function's name (those with a body) -> the positions of the memref arguments it may
    write (or pass to a call that may write them, or return: what the caller does with a
    result is the caller's). Found again for every function until none grows, from none: a
    write is an op's, and only an op's."""
    returns = returned_arguments(m) if returns is None else returns
    functions = {ir.StringAttr(body.owner.attributes["sym_name"]).value: body for body in function_bodies(m)}
    written: dict = {name: frozenset() for name in functions}
    changed = True
    while changed:
        changed = False
        for name, body in functions.items():
            found = frozenset(i for i, a in enumerate(body.arguments)
                              if isinstance(downcast(a.type), ir.MemRefType) and _may_write(a, written, returns))
            if found != written[name]:
                written[name], changed = found, True
    return written


def _may_write(value, written: dict, returns: dict) -> bool:
    """Whether the buffer of `value` may be written through it: by an op it is given to, or
    through a view of it (anything not known to read only counts as a write)."""
    for use in value.uses:
        op, at = user(use), use.operand_number
        name = op.name
        if name in _READS or name == "func.return":
            continue
        if name in VIEWS or name == "arith.select" and at > 0:  # (a view's buffer, or what a select may be)
            if any(_may_write(r, written, returns) for r in op.results if _buffer(r)):
                return True
            continue
        parent = op.parent.operation if name == "scf.yield" else None
        if parent is not None and parent.name == "scf.if":  # (the if's result may be this buffer)
            if _may_write(parent.results[at], written, returns):
                return True
            continue
        if name == "memref.copy":
            if at == 1:
                return True
            continue
        if name.startswith("linalg.") and "operandSegmentSizes" in op.attributes:
            ins = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])[0]
            if at >= ins:
                return True
            continue
        if name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee not in written or at in written[callee] or _returns(returns.get(callee), at):
                return True
            continue
        return True
    return False


def _returns(returned, at: int) -> bool:
    """Whether a function that returns `returned` (returned_arguments') may return argument `at`."""
    return returned is None or (returned != FRESH and at in returned)


def drop_call_copies(m) -> int:
    """Pass calls the buffers their copies were made from (see the module's doc); how many."""
    with ordered():
        return _drop_call_copies(m)


def _drop_call_copies(m) -> int:
    returns = returned_arguments(m)
    written = written_arguments(m, returns)
    handed = handed_arguments(m, returns)
    dropped = 0
    for name, f, body in functions(m):
        own, mine = is_private(f), handed.get(name, frozenset())
        for call in [op for op in operations_under(body) if op.name == "func.call"]:
            callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
            if callee in written:
                dropped += _drop(call, written[callee], returns, mine)
                given = frozenset(i for i in range(len(call.operands)) if _returns(returns.get(callee), i))
                dropped += _hand_over(call, written[callee] | given, returns, own)
    return dropped


_LOOPS = ("scf.for", "scf.while", "scf.parallel", "scf.forall")


def _copies_before(call) -> dict:
    """The buffers just allocated and copied into before `call` (nothing that writes memory
    between): buffer -> its copy."""
    ops = [op.operation for op in call.block.operations]
    k = next(i for i, op in enumerate(ops) if op == call) - 1
    copies: dict = {}
    while k >= 0 and ops[k].name in _BETWEEN:
        op = ops[k]
        if op.name == "memref.copy":
            into = defining_op(op.operands[1])
            if into is None or into.name != "memref.alloc":
                break
            copies[op.operands[1]] = op
        k -= 1
    return copies


def _roots(v, returns: dict, own_args: bool, assumed: tuple = ()) -> list | None:
    """The buffers `v` may be, each the caller's to write (None if one may not be): made here
    (memref.alloc), an argument of a private function (`own_args`), a value an `scf.for` carries
    that is the loop's own in every iteration (_loop_owned; those in `assumed` taken to be), given
    back by a call (fresh, or what it was passed at the positions it may return, in turn), or
    what either branch of an scf.if yields."""
    v = base(v)
    op = defining_op(v)
    if op is None:
        if own_args and is_function_argument(v) or any(v == a for a in assumed):
            return [v]
        return [v] if _loop_owned(v, returns, own_args, assumed) else None
    if op.name == "memref.alloc":
        return [v]
    if op.name == "func.call":
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        returned = returns.get(callee)
        if returned is None:
            return None
        mine = returns.of_result(callee, list(op.results).index(v))
        found = [v]
        for p in (() if returned == FRESH else returned if mine is None else mine):
            more = _roots(op.operands[p], returns, own_args, assumed)
            if more is None:
                return None
            found += more
        return found
    if op.name == "arith.select":  # (either of its buffers)
        found = [v]
        for x in list(op.operands)[1:]:
            more = _roots(x, returns, own_args, assumed)
            if more is None:
                return None
            found += more
        return found
    if op.name == "scf.for":  # what it was given, or a buffer an iteration carried on
        k = next(i for i, r in enumerate(op.results) if r == v)
        body = op.regions[0].blocks[0]
        carried = body.arguments[1 + k]
        given = _roots(op.operands[3 + k], returns, own_args, assumed)
        made = _roots(list(body.operations)[-1].operands[k], returns, own_args, assumed + (carried,))
        if given is None or made is None:
            return None
        return [v] + given + [r for r in made if r != carried]
    if op.name == "scf.if":  # what either branch yields
        at = next(i for i, r in enumerate(op.results) if r == v)
        found = [v]
        for region in op.regions:
            block = region.blocks[0]
            ops = list(block.operations)
            more = _roots(ops[-1].operands[at], returns, own_args, assumed) if ops else None
            if more is None:
                return None
            found += more
        return found
    return None


def _loop_owned(x, returns: dict, own_args: bool, assumed: tuple) -> bool:
    """Whether `x`, a value an scf.for carries, is the loop's own buffer in every iteration, which
    an iteration may write once it no longer reads it: the loop is given a buffer that dies
    there (dies_at) and that nothing in the loop reads but through x; and the loop carries on
    what x became or a buffer made in the iteration, and nothing else carries that on."""
    block = x.owner
    loop = block.owner
    loop = getattr(loop, "operation", loop)
    if not isinstance(block, ir.Block) or loop.name != "scf.for" or any(x == a for a in assumed):
        return False
    k = ir.BlockArgument(x).arg_number - 1
    if k < 0:
        return False
    found = dies_at(loop.operands[3 + k], loop, returns, own_args)
    if found is None:
        return False
    for a in found[1]:
        for u in a.uses:
            o = user(u)
            if o != loop and any(c == loop for c in _chain(o)):  # (used inside the loop)
                return False
    yields = list(list(block.operations)[-1].operands)
    y = yields[k]
    if any(base(o) == base(y) for i, o in enumerate(yields) if i != k):
        return False
    roots = _roots(y, returns, own_args, assumed + (x,))
    if roots is None:
        return False
    for r in roots:
        if r == x:
            continue
        made = defining_op(r)
        if made is None or not any(c == loop for c in _chain(made)):
            return False  # (a buffer from outside the loop, or another carried one)
    return True


def _aliases(roots: list, call, returns: dict) -> list | None:
    """Every value that may be one of `roots` (views, selects, what calls give back, branches
    yield and `scf.for` loops carry), not through `call`'s results; None where one may be carried
    by another loop."""
    seen, todo = [], list(roots)
    while todo:
        v = todo.pop()
        if any(v == s for s in seen):
            continue
        seen.append(v)
        for use in v.uses:
            op, at = user(use), use.operand_number
            if op == call:
                continue
            if op.name in VIEWS or op.name == "arith.select":
                todo += [r for r in op.results if _buffer(r)]
            elif op.name == "func.call":
                callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                returned = returns.get(callee)
                if returned is None or returned != FRESH and at in returned:
                    for k, r in enumerate(op.results):
                        mine = returns.of_result(callee, k) if returned is not None else None
                        if _buffer(r) and (mine is None or at in mine):
                            todo.append(r)
            elif op.name in ("scf.yield", "scf.condition"):
                parent = op.parent
                parent = getattr(parent, "operation", parent)
                if parent.name == "scf.for":  # (the next iteration's carried value, and the loop's)
                    todo += [parent.results[at], parent.regions[0].blocks[0].arguments[1 + at]]
                    continue
                if parent.name != "scf.if":
                    return None
                if not _on_the_other_branch(op, parent, call):  # (there the call does not run)
                    todo.append(parent.results[at])
            elif op.name == "scf.for" and at >= 3:  # (the first iteration's carried value, and the loop's)
                todo += [op.results[at - 3], op.regions[0].blocks[0].arguments[at - 2]]
            elif op.name in _LOOPS:
                return None
    return seen


def _on_the_other_branch(yield_op, branch, call) -> bool:
    """Whether `call` is inside the scf.if `branch`, in the other region than `yield_op`."""
    mine = _chain(call)
    if not any(x == branch for x in mine):
        return False
    # the op of the call's chain directly inside the if: its block is the branch the call is in
    in_branch = next(x for x in mine if getattr(x.parent, "operation", x.parent) == branch)
    return in_branch.block != yield_op.block


def _chain(op) -> list:
    """op and the ops it is nested in, innermost first (the function excepted)."""
    out = []
    while op is not None and op.name != "func.func":
        out.append(op)
        parent = op.parent
        op = getattr(parent, "operation", parent)
    return out


_ORDER: dict | None = None  # while `ordered` holds: a block -> its ops' positions, found once


@contextlib.contextmanager
def ordered():
    """While it holds, the ops' positions in their blocks are found once per block: for passes
    that erase ops (which keeps the others' order) but insert none."""
    global _ORDER
    outer = _ORDER
    _ORDER = {} if outer is None else outer
    try:
        yield
    finally:
        _ORDER = outer


def _position(block, op) -> int:
    table = None if _ORDER is None else _ORDER.get(block)
    op = getattr(op, "operation", op)
    if table is None or op not in table:  # (an op made since: the block is read again)
        table = {o.operation: i for i, o in enumerate(block.operations)}
        if _ORDER is not None:
            _ORDER[block] = table
    return table[op]


def may_run_after(u, call) -> bool:
    """Whether op `u` may run after `call` (no loop holds both: see _hand_over)."""
    mine = _chain(call)
    theirs = _chain(u)
    for x in mine:
        for y in theirs:
            if y.block == x.block:
                if y == x:  # u in another region of x than the call's: another branch of an scf.if
                    return x.name in _LOOPS or (x != call and x.name != "scf.if")
                return _position(x.block, y) > _position(x.block, x)
    return False


def _hand_over(call, written: frozenset, returns: dict, own_args: bool) -> int:
    """Drop the copies made before `call` of buffers that the callee writes or may give back
    (`written`) where the caller hands the buffer over (see the module's doc)."""
    copies = _copies_before(call)
    if not copies:
        return 0
    dropped = 0
    for at in sorted(written):
        v = call.operands[at]
        copy = copies.get(v)
        if copy is None:
            continue
        src = copy.operands[0]
        if src.type != v.type or len(list(v.uses)) != 2:
            continue
        found = dies_at(src, call, returns, own_args, spare=(copy,))
        if found is None or not _apart(call, at, src, found[1]):
            continue
        dropped += _pass_instead(call, at, copy)
    return dropped


def _apart(call, at: int, v, aliases: list) -> bool:
    """Whether none of `call`'s operands but the one at `at` may be `v`'s buffer (`aliases`:
    every value that may be it)."""
    others = [o for i, o in enumerate(call.operands) if i != at]
    return not any(any(o == a for a in aliases) or base(o) == base(v) for o in others)


def handed_only(roots: list, handed: frozenset) -> bool:
    """Whether each of `roots` that is an argument of its function is one of the arguments its
    callers hand over (`handed`, handed_arguments'): the function's to write."""
    return all(not is_function_argument(r) or ir.BlockArgument(r).arg_number in handed for r in roots)


def dies_at(v, op, returns: dict, own_args: bool, spare=()) -> tuple | None:
    """(the buffers `v` may be, every value that may be one of them) where each of those buffers
    is the function's to write (`_roots`) and nothing uses them once `op` has run (but the ops
    in `spare`, and sizes read: a buffer's sizes are its descriptor's, not its memory's), with
    no loop between their making and `op`; else None."""
    roots = _roots(v, returns, own_args)
    if roots is None or any(in_loop_below(op, r) for r in roots):
        return None
    aliases = _aliases(roots, op, returns)
    if aliases is None:
        return None
    for a in aliases:
        for u in a.uses:
            x = user(u)
            if x != op and x.name != "memref.dim" and all(x != s for s in spare) and may_run_after(x, op):
                return None
    return roots, aliases


def _pass_instead(call, at: int, copy) -> int:
    """Pass `call` the buffer that `copy` copied from in place of the copy (operand `at`); the
    copy and its buffer go. 1."""
    alloc = defining_op(call.operands[at])
    call.operands[at] = copy.operands[0]
    copy.erase()
    alloc.erase()
    return 1


def in_loop_below(call, root) -> bool:
    """Whether a loop holds `call` but not the making of `root` (a function's argument: made
    before everything; a value a loop carries: made at each of its iterations)."""
    op = defining_op(root)
    # (a value a loop carries is made at each of its iterations: its home is the loop's body)
    home = op.block if op is not None else None if is_function_argument(root) else root.owner
    owner = None if op is not None or home is None else getattr(home.owner, "operation", home.owner)
    for x in _chain(call)[1:]:
        if owner is not None and x == owner:
            return False
        if x.name in _LOOPS:
            return True
        if home is not None and any(o.operation == x for o in home.operations):
            return False
    return False


def _drop(call, written: frozenset, returns: dict, handed: frozenset) -> int:
    """Drop the copies made only to be passed to `call` (of a function that writes the arguments
    `written`) in its block before it, with nothing that writes memory between (only ops of
    _BETWEEN, copies only into buffers just allocated). `handed`: the positions of the calling
    function's arguments its callers hand over (handed_arguments)."""
    callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
    returned = returns.get(callee)
    copies = _copies_before(call)  # the buffer copied into -> the copy
    dropped = 0
    operands = list(call.operands)
    # What the callee writes must not be the buffer a dropped copy was made from: the callee
    # would read what it wrote. It may be only buffers made here (allocations, calls' results)
    # or arguments the function's callers hand over, which they pass apart from every other
    # (handed_arguments), and none the buffer copied from may be.
    writes = [base(operands[i]) for i in written]
    written_roots = []
    for w in writes:
        if getattr(defining_op(w), "name", None) == "memref.alloc":
            continue  # (made here: base(src) is compared with it)
        roots = _roots(w, returns, True)
        if roots is None or not handed_only(roots, handed):
            return 0
        written_roots += roots
    for at, v in enumerate(operands):
        copy = copies.get(v)
        if copy is None or at in written or _returns(returned, at):
            continue
        src = copy.operands[0]
        uses = [user(u) for u in v.uses]
        if src.type != v.type or src in copies or len(uses) != 2 or not any(op == call for op in uses) \
                or base(src) in writes:
            continue
        if written_roots:
            roots = _roots(src, returns, True)
            if roots is None or any(r == w for r in roots for w in written_roots):
                continue
        dropped += _pass_instead(call, at, copy)
    return dropped


def handed_arguments(m, returns: dict) -> dict:
    """Each function with `dg.donated` (its callers hand those arguments over: lowering/ad's
    shadows) -> the positions among them where every call of it is passed a buffer that its
    caller may write and nothing reads once the call is made, and that is none of the call's
    other operands. Such an argument is the function's to write. A caller's own argument
    counts only where it is handed over in turn: found again until nothing changes, from all
    the donated positions."""
    funcs, calls = {}, {}
    for name, f, body in functions(m):
        funcs[name] = f
        for op in operations_under(body):
            if op.name == "func.call":
                calls.setdefault(ir.FlatSymbolRefAttr(op.attributes["callee"]).value, []).append((op, name))
    handed = {name: frozenset(ir.DenseI64ArrayAttr(f.attributes["dg.donated"])) for name, f in funcs.items()
              if "dg.donated" in f.attributes and is_private(f)}
    changed = True
    while changed:
        changed = False
        for name, positions in handed.items():
            kept = frozenset(p for p in positions if all(_hands_over(c, p, returns, handed.get(caller, frozenset()))
                                                       for c, caller in calls.get(name, [])))
            if kept != positions:
                handed[name], changed = kept, True
    return handed


def _hands_over(call, at: int, returns: dict, handed: frozenset) -> bool:
    """Whether `call` is passed at `at` a buffer its caller may write (of its own arguments,
    those it is handed: `handed`), that nothing uses once the call is made, and that none of
    the call's other operands may be."""
    v = call.operands[at]
    found = dies_at(v, call, returns, True)
    return found is not None and handed_only(found[0], handed) and _apart(call, at, v, found[1])

