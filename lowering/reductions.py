"""Reductions along leading axes are split into chunks that threads can share (compiled CPU code).

Expects: a module after bufferization, its linalg ops still whole. A linalg.generic whose first
loop is a reduction (a sum over the batch, `sum(x, axis=0)`; a reduction to a scalar) lowers to
a loop over the rows with the parallel loop, if any, inside it: a loop inside a loop, which
`lowering.parallel` does not share. Guarantees: `split_leading_reductions(module)` rewrites each
such generic that no loop contains, whose one output is combined with one operation (add,
max, min; an integer multiply) and whose body does not read its indices, as

- `CHUNKS` partial results (at most, or as many as asked for; fewer for few rows), each the
  reduction of its own block of
  rows, in an outer `scf.parallel` that `lowering.parallel` outlines (each block is reduced as
  one thread would, so the results do not depend on the number of threads);
- the partial results combined into the output, in order.

A reduction whose sizes are all known and small stays as it is.
"""
from __future__ import annotations

import re

from dg.core.abi import GRAIN
from dg.core.mlir import downcast, ir, operations_under, static_elements
from dg.dialects.helpers import MAX_ELEMENTS, int_limits

from .parallel import outermost

CHUNKS = 16
ROWS_PER_CHUNK = 64  # at least this many rows per chunk: fewer rows make fewer chunks

_INF = {"f32": ("0x7F800000", "0xFF800000"), "f64": ("0x7FF0000000000000", "0xFFF0000000000000")}


def _identity(op: str, elt: str) -> str | None:
    """The constant `op` leaves a value unchanged with, as IR text, or None."""
    if elt in _INF:
        return {"arith.addf": "0.0",
                "arith.maximumf": _INF[elt][1], "arith.maxnumf": _INF[elt][1],
                "arith.minimumf": _INF[elt][0], "arith.minnumf": _INF[elt][0]}.get(op)
    if elt in ("i32", "i64"):
        smallest, largest = int_limits(elt)
        return {"arith.addi": "0", "arith.muli": "1", "arith.ori": "0", "arith.xori": "0",
                "arith.maxsi": str(smallest), "arith.minsi": str(largest)}.get(op)
    return None


# the ops a reduction may combine into its output with (they have an identity: _identity). Not a
# float product: split in parts, one part's product may overflow to inf where another's underflows
# to 0, and inf * 0 is NaN where the product in order was 0 or inf.
_OPS = {"arith.addf", "arith.maximumf", "arith.maxnumf", "arith.minimumf", "arith.minnumf",
        "arith.addi", "arith.muli", "arith.ori", "arith.xori", "arith.maxsi", "arith.minsi"}


def _combiner(generic) -> str | None:
    """The operation the body combines each element into the output with (the output's block
    argument used once, by the op that makes the yielded value), or None."""
    block = generic.regions[0].blocks[0]
    ops = [op.operation for op in block.operations]
    if any(op.name == "linalg.index" for op in ops) or ops[-1].name != "linalg.yield" or len(ops[-1].operands) != 1:
        return None
    acc = block.arguments[len(block.arguments) - 1]
    made = ops[-1].operands[0].owner
    made = getattr(made, "operation", made)
    if not isinstance(made, ir.Operation) or made.name not in _OPS or len(made.operands) != 2:
        return None
    uses = sum(1 for op in ops for v in op.operands if v == acc)
    return made.name if uses == 1 and acc in list(made.operands) else None


def _axis_of(expr, d: int):
    """The way an indexing map's result uses loop dim d: "is" (it is d), "uses" (an expression
    of d) or None."""
    expr = downcast(expr)
    if isinstance(expr, ir.AffineDimExpr):
        return "is" if expr.position == d else None
    return "uses" if re.search(rf"\bd{d}\b", str(expr)) else None


def _split(generic, chunks: int = CHUNKS) -> bool:
    """Rewrite one generic as the module's doc says; False if it is not one that can be."""
    iterators = [str(a) for a in ir.ArrayAttr(generic.attributes["iterator_types"])]
    if not iterators or "reduction" not in iterators[0]:
        return False
    segments = list(ir.DenseI32ArrayAttr(generic.attributes["operandSegmentSizes"]))
    operands = list(generic.operands)
    if segments[1] != 1 or len(generic.results):
        return False
    combine = _combiner(generic)
    types = [downcast(v.type) for v in operands]
    if combine is None or not all(isinstance(t, ir.MemRefType) for t in types):
        return False
    out_t = types[-1]
    identity = _identity(combine, str(out_t.element_type))
    if identity is None:
        return False
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(generic.attributes["indexing_maps"])]
    axes = []  # per input: the axis loop 0 indexes, or None
    for mp in maps[:-1]:
        where = [_axis_of(e, 0) for e in mp.results]
        if "uses" in where or where.count("is") > 1:
            return False
        axes.append(where.index("is") if "is" in where else None)
    if any(_axis_of(e, 0) for e in maps[-1].results) or all(a is None for a in axes):
        return False
    dynamic = ir.ShapedType.get_dynamic_size()
    if any(static_elements(t) > MAX_ELEMENTS for t in types):  # too large for memory: its allocation fails
        return False
    k = next(i for i, a in enumerate(axes) if a is not None)
    rows = types[k].shape[axes[k]]
    if rows != dynamic and rows < 2 * ROWS_PER_CHUNK:
        return False
    if all(d != dynamic for t in types for d in t.shape):  # all sizes known: is it large enough to share?
        elements = rows
        for d in out_t.shape:
            elements *= d
        for d in range(1, len(iterators)):  # other reduced loops
            if "reduction" in iterators[d]:
                elements *= next((t.shape[[_axis_of(e, d) for e in mp.results].index("is")]
                                  for mp, t in zip(maps, types) if "is" in [_axis_of(e, d) for e in mp.results]), 1)
        if elements * len(operands) * 8 < 2 * GRAIN:
            return False

    lines = ["%c0 = arith.constant 0 : index", "%c1 = arith.constant 1 : index",
             f"%most = arith.constant {chunks} : index", f"%per = arith.constant {ROWS_PER_CHUNK} : index"]
    dims: dict = {}

    def size(i, axis):
        d = types[i].shape[axis]
        if d != dynamic:
            return str(d)
        if (i, axis) not in dims:
            dims[(i, axis)] = f"%s{i}_{axis}"
            lines.append(f"%a{axis}_{i} = arith.constant {axis} : index")
            lines.append(f"%s{i}_{axis} = memref.dim %a{i}, %a{axis}_{i} : {types[i]}")
        return dims[(i, axis)]

    n = size(k, axes[k])
    if not n.startswith("%"):
        lines.append(f"%n = arith.constant {n} : index")
        n = "%n"
    out_sizes = [size(len(operands) - 1, a) for a in range(out_t.rank)]
    # chunks: min(CHUNKS, rows / ROWS_PER_CHUNK), at least 1; each `q` rows, the last what is left
    # (some rows: q >= ROWS_PER_CHUNK > chunks when there are several)
    lines += [f"%want = arith.divui {n}, %per : index",
              "%fewer = arith.minui %want, %most : index",
              "%chunks = arith.maxui %fewer, %c1 : index",
              f"%q = arith.ceildivui {n}, %chunks : index"]
    elt = str(out_t.element_type)
    part_t = ir.MemRefType.get([dynamic] + list(out_t.shape), out_t.element_type)
    dyn_out = [s for s, d in zip(out_sizes, out_t.shape) if d == dynamic]
    lines += [f"%part = memref.alloc({', '.join(['%chunks'] + dyn_out)}) : {part_t}",
              f"%id = arith.constant {identity} : {elt}",
              f"linalg.fill ins(%id : {elt}) outs(%part : {part_t})"]

    chunk_views = []  # the inputs that have rows, on a chunk's rows [lo, lo + sz)
    for i, (t, a) in enumerate(zip(types[:-1], axes)):
        if a is None:
            continue
        offsets = ["%lo" if ax == a else "0" for ax in range(t.rank)]
        sizes = ["%sz" if ax == a else size(i, ax) for ax in range(t.rank)]
        strides, _ = t.get_strides_and_offset()
        view = ir.MemRefType.get([dynamic if ax == a else d for ax, d in enumerate(t.shape)], t.element_type,
                                 ir.StridedLayoutAttr.get(dynamic, strides))
        chunk_views.append(f"%v{i} = memref.subview %a{i}[{', '.join(offsets)}] [{', '.join(sizes)}] "
                           f"[{', '.join(['1'] * t.rank)}] : {t} to {view}")
    part_strides, _ = part_t.get_strides_and_offset()
    row_t = ir.MemRefType.get(list(out_t.shape), out_t.element_type,
                              ir.StridedLayoutAttr.get(dynamic, part_strides[1:]))
    zeros = ", ".join(["0"] * out_t.rank)
    row = (f"%row = memref.subview %part[%c{', ' + zeros if zeros else ''}] "
           f"[1{''.join(', ' + s for s in out_sizes)}] [{', '.join(['1'] * (out_t.rank + 1))}] : {part_t} to {row_t}")
    lines += ["scf.parallel (%c) = (%c0) to (%chunks) step (%c1) {", "  %lo = arith.muli %c, %q : index",
              f"  %rest = arith.subi {n}, %lo : index", "  %sz = arith.minsi %q, %rest : index"]
    lines += ["  " + x for x in chunk_views] + ["  " + row, "  scf.reduce", "}"]
    # the partial results into the output: out = combine(part[c], out), chunk by chunk
    rank = out_t.rank
    ds = ", ".join(f"d{i + 1}" for i in range(rank))
    lines += [f"linalg.generic {{indexing_maps = [affine_map<(d0{', ' + ds if ds else ''}) -> (d0{', ' + ds if ds else ''})>, "
              f"affine_map<(d0{', ' + ds if ds else ''}) -> ({ds})>], iterator_types = [\"reduction\""
              + ", \"parallel\"" * rank + f"]}} ins(%part : {part_t}) outs(%a{len(operands) - 1} : {out_t}) {{",
              f"^bb0(%x: {elt}, %o: {elt}):",
              f"  %y = {combine} %x, %o : {elt}",
              f"  linalg.yield %y : {elt}",
              "}",
              f"memref.dealloc %part : {part_t}",
              "return"]
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    helper = ir.Module.parse(f"func.func @split({params}) {{\n" + "\n".join(lines) + "\n}", generic.context)
    block = helper.body.operations[0].regions[0].blocks[0]
    for arg, v in zip(block.arguments, operands):
        arg.replace_all_uses_with(v)
    loop = next(op.operation for op in block.operations if op.operation.name == "scf.parallel")
    # in the loop, a copy of the reduction on a chunk's rows, into its partial result
    loop_ops = [op.operation for op in loop.regions[0].blocks[0].operations]
    subs = iter([op.results[0] for op in loop_ops if op.name == "memref.subview"])
    chunk = generic.clone(ip=ir.InsertionPoint(loop_ops[-1]))
    for i, a in enumerate(axes):
        if a is not None:
            chunk.operands[i] = next(subs)
    chunk.operands[len(operands) - 1] = next(subs)  # %row
    for op in [op.operation for op in block.operations][:-1]:
        op.move_before(generic)
    generic.erase()
    return True


def reassociate(m) -> int:
    """Let LLVM reorder the float sums of reductions (`fastmath<reassoc>` on the add that combines
    into the output), so that it can vectorize them: one add after the other is bound by the
    add's latency (a float sum of a million elements took four cycles each), and partial sums in
    vector lanes round less than the one running sum did. (Not products: see _OPS.) How many ops."""
    count = 0
    flag = ir.Attribute.parse("#arith.fastmath<reassoc>")
    for op in _generics(m):
        if not any("reduction" in str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])):
            continue
        if _combiner(op) == "arith.addf":
            block = op.regions[0].blocks[0]
            made = list(block.operations)[-1].operands[0].owner
            getattr(made, "operation", made).attributes["fastmath"] = flag
            count += 1
    return count


def _generics(m) -> list:
    return [op for f in m.body.operations if f.operation.name == "func.func" and len(f.operation.regions[0].blocks)
            for op in operations_under(f.operation.regions[0].blocks[0]) if op.name == "linalg.generic"]


def split_leading_reductions(m, chunks=CHUNKS) -> int:
    """Split the reductions along leading axes that no loop contains (see the module's doc) in at
    most `chunks` parts (the GPU's stage asks for thousands: a part is one thread's); how many."""
    count = 0
    for g in outermost(m, "linalg.generic"):
        with g.location:
            count += _split(g, int(chunks))
    return count
