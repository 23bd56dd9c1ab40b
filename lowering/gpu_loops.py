"""Parallel loops in the shape that GPU blocks of threads read memory best in.

Expects: a bufferized module whose linalg ops are loops (`convert-linalg-to-parallel-loops`),
on its way to kernels (`lowering/gpu.py`). Guarantees: `flatten_parallel_loops(module)`
rewrites each outermost `scf.parallel` without reductions, of any rank, as a 2-D loop over
its iterations in row-major order, `(r, c) in [0, ceil(N / W)) x [0, W)` with iteration
`r * W + c` (guarded by `< N`), the original indices recovered by division. The kernels'
blocks then take WARP consecutive iterations along x (the innermost, contiguous axis of a
row-major buffer: one warp reads 128 contiguous bytes of float32) and ROWS along y, whatever
the loop's rank: a 1-D loop no longer gets blocks of a tile's width, nor a loop over (N, 4)
threads that are three quarters idle. W is WARP, or a multiple of it when the rows would
be more than the grid's y axis takes (65535 blocks of ROWS).
"""
from __future__ import annotations

from dg.core.mlir import create, int_constant, ir, operations_under

WARP = 32  # iterations per block along x
ROWS = 8  # along y: WARP * ROWS threads per block
MAX_GRID_Y = 65535


def _binary(name: str, a, b):
    return create(name, [ir.IndexType.get()], [a, b]).result


def _outermost(m):
    found = []
    for op in operations_under(m.body):
        if op.name == "scf.parallel" and not len(op.results):
            p, nested = op.parent, False
            while p is not None:
                if p.name == "scf.parallel":
                    nested = True
                    break
                p = p.parent
            if not nested:
                found.append(op)
    return found


def flatten_parallel_loops(m) -> int:
    """Rewrite the outermost parallel loops as the module's doc says; how many."""
    loops = _outermost(m)
    with m.context:
        for op in loops:
            with op.location, ir.InsertionPoint(op):
                _flatten(op)
    return len(loops)


def _flatten(op) -> None:
    body = op.regions[0].blocks[0]
    rank = len(body.arguments)
    lbs, ubs, steps = (list(op.operands[k * rank:(k + 1) * rank]) for k in range(3))
    index, i1 = ir.IndexType.get(), ir.IntegerType.get_signless(1)
    zero, one = int_constant(0), int_constant(1)
    extents = []
    for lb, ub, step in zip(lbs, ubs, steps):  # iterations along each axis: ceil((ub - lb) / step), at least 0
        span = _binary("arith.subi", ub, lb)
        n = _binary("arith.ceildivsi", span, step)
        extents.append(_binary("arith.maxsi", n, zero))
    total = extents[0]
    for n in extents[1:]:
        total = _binary("arith.muli", total, n)
    # W = WARP * max(1, ceil(N / (WARP * ROWS * MAX_GRID_Y))): rows of the grid within its y limit
    per = int_constant(WARP * ROWS * MAX_GRID_Y)
    wide = _binary("arith.maxsi", _binary("arith.ceildivsi", total, per), one)
    width = _binary("arith.muli", wide, int_constant(WARP))
    rows = _binary("arith.ceildivsi", total, width)
    loop = create("scf.parallel", [], [zero, zero, rows, width, one, one], regions=1,
                  operandSegmentSizes=ir.DenseI32ArrayAttr.get([2, 2, 2, 0]))
    block = loop.regions[0].blocks.append(index, index)
    with ir.InsertionPoint(block):
        r, c = block.arguments
        at = _binary("arith.addi", _binary("arith.muli", r, width), c)
        inside = create("arith.cmpi", [i1], [at, total],
                        predicate=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 2)).result  # slt
        guard = create("scf.if", [], [inside], regions=2)
        then = guard.regions[0].blocks.append()
        create("scf.reduce")
    with ir.InsertionPoint(then):
        rest, ivs = at, [None] * rank
        for k in reversed(range(rank)):  # row-major: the last axis varies fastest
            idx = _binary("arith.remsi", rest, extents[k]) if k else rest
            if k:
                rest = _binary("arith.divsi", rest, extents[k])
            ivs[k] = _binary("arith.addi", lbs[k], _binary("arith.muli", idx, steps[k]))
        yield_ = create("scf.yield")
    for old, new in zip(body.arguments, ivs):
        old.replace_all_uses_with(new)
    for inner in list(body.operations)[:-1]:  # (the last is the loop's scf.reduce)
        inner.operation.move_before(yield_)
    op.erase()
