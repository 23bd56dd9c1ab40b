"""Deallocations that MLIR's simplification would do at run time, done where dg knows more.

Expects: a module after MLIR's ownership-based buffer deallocation, before its simplification:
`bufferization.dealloc` ops (the buffers, the conditions under which each is owned, the values
retained). Guarantees: `split_deallocs(module)` changes a dealloc where it knows that
- a buffer it frees can be none of the others and none of the retained values: that buffer is
  freed by a dealloc of its own, on its own condition (which the simplification lowers to a
  plain, or conditional, free);
- a retained value can be none of the buffers it frees: the value is no longer retained, and is
  not owned by the dealloc's doing (false);
- a retained value is one of the buffers (or views it), and no other value can be that buffer:
  the buffer is not freed, and the value is owned where the buffer was.
What the dealloc does is unchanged; only its run-time comparisons go.

MLIR's alias analysis takes a call's result for a buffer that may be any other. But a callee can
return only what it is passed, what it allocated, or a global, and dg finds which (for every
function, returned_arguments): a buffer of its own (FRESH) for each result, as a layer or a
recursive function's forward returns, or else which of its arguments it may return. Where a
dealloc held both a function's buffers and what its calls returned, MLIR compared every buffer
with every retained value at run time (`dealloc_helper`): on the Tree-LSTM gradient of
benchmarks/compile.py 213 buffers in one dealloc against 15 retained, a fifth of the IR that went
to LLVM (10,801 lines of the LLVM dialect before to-llvm, 8,862 after; 407 run-time comparisons,
130 after).
"""
from __future__ import annotations

from dg.core.mlir import create, defining_op, downcast, function_bodies, ir, is_function_argument, operations_under

# Ops whose memref result views their first operand's buffer (extract_strided_metadata's first
# result is the base buffer).
VIEWS = {"memref.cast", "memref.subview", "memref.reinterpret_cast", "memref.expand_shape", "memref.collapse_shape",
          "memref.reshape", "memref.transpose", "memref.view", "memref.extract_strided_metadata"}
_ALLOCATIONS = ("memref.alloc", "memref.alloca", "bufferization.clone")
_FREED = ("memref.alloc", "bufferization.clone")  # (what a dealloc may free)


def base(v):
    """The buffer that `v` views (itself, if it is no view)."""
    op = defining_op(v)
    while op is not None and op.name in VIEWS:
        v = op.operands[0]
        op = defining_op(v)
    return v


class _Buffers:
    """Which buffers of a function a memref value may be (see `may_be`), remembered."""

    def __init__(self, returns: "Returns"):
        self.returns = returns  # a function's name -> the arguments its results may be (returned_arguments)
        self.known: dict = {}

    def may_be(self, v) -> frozenset | None:
        """The buffers `v` may be, or view: among the results of the function's allocations and its
        arguments; none for a global; for a call's result, those it is passed that the callee may return;
        for an `arith.select`'s or an `scf.if`'s, those of either side; None where it is not known (a loop's result)."""
        if v not in self.known:
            self.known[v] = None  # (while it is worked out: a value that depends on itself is not known)
            self.known[v] = self._may_be(v)
        return self.known[v]

    def _may_be(self, v) -> frozenset | None:
        op = defining_op(v)
        if op is None:  # a block's argument: of the function's entry block, the caller's buffer
            return frozenset([v]) if is_function_argument(v) else None
        if op.name in VIEWS:
            return self.may_be(op.operands[0])
        if op.name in _ALLOCATIONS:
            return frozenset([op.results[0]])
        if op.name == "memref.get_global":
            return frozenset()
        if op.name == "func.call":
            operands = list(op.operands)
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            returned = self.returns.get(callee)
            if returned is None:
                return self.union(v for v in operands if isinstance(downcast(v.type), ir.MemRefType))
            if returned == FRESH:  # (a buffer of its own: the result stands for it)
                return frozenset([v])
            mine = self.returns.of_result(callee, list(op.results).index(v))
            return self.union(operands[i] for i in (returned if mine is None else mine))
        if op.name == "arith.select":
            return self.union(list(op.operands)[1:])
        if op.name == "scf.if":
            at = list(op.results).index(v)
            return self.union(b.operations[len(b.operations) - 1].operands[at] for r in op.regions for b in r.blocks)
        return None

    def exactly(self, v):
        """The buffer `v` is (or views), where it is known to be one: an allocation's result, or
        the result of a call of a FRESH function; else None."""
        v = base(v)
        op = defining_op(v)
        if op is None:
            return None
        if op.name in _FREED:
            return op.results[0]
        if op.name == "func.call" and self.returns.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value) == FRESH:
            return v
        return None

    def union(self, values) -> frozenset | None:
        out: set = set()
        for v in values:
            s = self.may_be(v)
            if s is None:
                return None
            out |= s
        return frozenset(out)


# A function whose results are each a buffer of its own: none of its arguments, none the same as another.
FRESH = "fresh"


class Returns(dict):
    """returned_arguments' answer: a function's name -> FRESH or the positions of the arguments
    its results may be; and, in `by_result`, the positions each result may be (None for a
    result that is no buffer, or that may be any argument)."""

    def __init__(self, functions):
        super().__init__(dict.fromkeys(functions, FRESH))
        self.by_result: dict = {}

    def of_result(self, callee: str, r: int):
        """The positions of the arguments a call of `callee`'s result `r` may be (or view): a
        frozenset, or None where any argument it returns."""
        if self.get(callee) == FRESH:
            return frozenset()
        per = self.by_result.get(callee)
        return None if per is None or per[r] is None else per[r]


def returned_arguments(m) -> Returns:
    """Each function's name -> FRESH, or else the positions of the arguments its results may be
    (or view), and which each result may be. Found again for every function until nothing
    changes, from FRESH for all: a recursive function's results are what its calls of itself
    return, among others, and the least answer is the one that holds (by induction on the depth
    of the calls). A function without a body may return any of its arguments (it is not in the
    dict)."""
    functions = {}
    for body in function_bodies(m):
        functions[ir.StringAttr(body.owner.attributes["sym_name"]).value] = body
    returns = Returns(functions)
    changed = True
    while changed:
        changed = False
        for name, body in functions.items():
            buffers = _Buffers(returns)
            found = _returned(body, buffers)
            per = _returned_by_result(body, buffers)
            if found != returns[name] or per != returns.by_result.get(name):
                returns[name], returns.by_result[name], changed = found, per, True
    return returns


def _returned(body, buffers: _Buffers):
    """FRESH, or the positions of the arguments the function of this body may return."""
    args = list(body.arguments)
    ret = body.operations[len(body.operations) - 1]
    sets = [buffers.may_be(v) for v in ret.operands if isinstance(downcast(v.type), ir.MemRefType)]
    if any(s is None for s in sets):
        return frozenset(range(len(args)))
    passed = frozenset(i for i, a in enumerate(args) if any(a in s for s in sets))
    # (An empty set is a buffer not the function's own: a global, or what a function not FRESH returned.)
    if passed or not all(sets) or sum(len(s) for s in sets) != len(frozenset().union(*sets)):
        return passed
    return FRESH


def _returned_by_result(body, buffers: _Buffers) -> tuple:
    """For each result of the function of this body: the positions of the arguments it may be,
    or None (no buffer, or not known)."""
    args = list(body.arguments)
    ret = body.operations[len(body.operations) - 1]
    out = []
    for v in ret.operands:
        s = buffers.may_be(v) if isinstance(downcast(v.type), ir.MemRefType) else None
        out.append(None if s is None else frozenset(i for i, a in enumerate(args) if a in s))
    return tuple(out)


def split_deallocs(m) -> int:
    """Split each dealloc as the module's doc says; how many buffers were split off."""
    split = 0
    returns = returned_arguments(m)
    for body in function_bodies(m):
        buffers = _Buffers(returns)
        for op in [op for op in operations_under(body) if op.name == "bufferization.dealloc"]:
            split += _split(op, buffers)
    return split


def _split(op, buffers: _Buffers) -> int:
    """Simplify one dealloc (see the module's doc); how many of its buffers and retained values it
    no longer holds."""
    n, _, k = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])
    operands = list(op.operands)
    memrefs, conditions, retained = operands[:n], operands[n:2 * n], operands[2 * n:]
    sets = [buffers.may_be(v) for v in memrefs + retained]
    if any(s is None for s in sets):
        return 0
    count: dict = {}  # a buffer -> how many of the dealloc's values may be it
    for s in sets:
        for a in s:
            count[a] = count.get(a, 0) + 1
    freed = [buffers.exactly(v) for v in memrefs]
    kept = [buffers.exactly(v) for v in retained]
    alone = {i for i, a in enumerate(freed) if a is not None and count[a] == 1}
    where = {a: i for i, a in enumerate(freed) if a is not None}
    owned: dict = {}  # a retained value's position -> whether it is owned once the dealloc has run
    for j, a in enumerate(kept):
        if a is not None and count[a] == 1:
            owned[j] = False
        elif a is not None and count[a] == 2 and a in where:
            owned[j] = where[a]
    if not alone and not owned:
        return 0
    left = [i for i in range(n) if i not in alone and i not in owned.values()]
    with ir.InsertionPoint(op), op.location:
        for i in sorted(alone):
            _dealloc([memrefs[i]], [conditions[i]], [])
        rest = _dealloc([memrefs[i] for i in left], [conditions[i] for i in left],
                        [v for j, v in enumerate(retained) if j not in owned])
        results = iter(rest.results)
        false = None
        for j, old in enumerate(op.results):
            if j not in owned:
                new = next(results)
            elif owned[j] is False:
                false = false or create("arith.constant", [ir.IntegerType.get_signless(1)],
                                        value=ir.BoolAttr.get(False)).result
                new = false
            else:
                new = conditions[owned[j]]
            old.replace_all_uses_with(new)
    op.erase()
    return len(alone) + len(owned)


def _dealloc(memrefs: list, conditions: list, retained: list):
    i1 = ir.IntegerType.get_signless(1)
    return create("bufferization.dealloc", [i1] * len(retained), memrefs + conditions + retained,
                  operandSegmentSizes=ir.DenseI32ArrayAttr.get([len(memrefs), len(conditions), len(retained)]))
