"""Sums made cheaper: zeros added are dropped, and a matrix product added to a value accumulates into it.

Expects: a module of linalg on tensors as to-linalg writes it, before MLIR's element-wise fusion.
Guarantees: `simplify_sums(module)` rewrites each element-wise `linalg.generic` that only adds
two values of one type (either maybe behind the stand-in of a failed size check):
- where one is a zero fill, into the other (as the add had it);
- where one is a 2-D `linalg.matmul` of a zero fill (each used only there), into that matmul with
the other value as its output (`linalg.matmul` adds into its output): the sum is the same, and
the fill, the add and the product's own buffer go. Where the add checked sizes at run time, the matmul
writes into an uninitialised tensor of the product's sizes instead once a check has failed (the
call winds down and raises: the value is not used), so that it never writes past the end of a
smaller value.

Why: a gradient adds each call's share into what it holds so far, and a call's share of a
weight it does not use is zeros (a Tree-LSTM leaf's share of the inner nodes' weights): a fill
and an add over the weight's memory for nothing. And it adds each product's share (`g + outer(d, x)`, a
Tree-LSTM's weight gradients at every node). Made apart, the product zeroed and wrote a buffer of
the weight's size and the add read it back with the gradient and wrote a third: three passes over
the weight's memory where the BLAS, told to add into the gradient (beta = 1), makes one.
"""
from __future__ import annotations

from dg.core.mlir import create, defining_op, function_bodies, identity_map, ir, one_use, operations_under


def simplify_sums(m) -> int:
    """Rewrite the sums of zeros and of products (see the module's doc); how many."""
    done = 0
    for body in function_bodies(m):
        for op in list(operations_under(body)):
            if op.name == "linalg.generic":
                done += _rewrite(op)
    return done


def _stand_in(v):
    """(the value, the i1 it is stood in for on) where v is a failed check's stand-in for it
    (`arith.select %bad, <tensor.empty>, %value` used once); else (v, None)."""
    op = defining_op(v)
    if getattr(op, "name", None) == "arith.select" and one_use(v) and \
            getattr(defining_op(op.operands[1]), "name", None) == "tensor.empty":
        return op.operands[2], op.operands[0]
    return v, None


def _zeros(v) -> bool:
    """Whether v is a zero fill of a `tensor.empty`."""
    fill = defining_op(v)
    if getattr(fill, "name", None) != "linalg.fill":
        return False
    zero = defining_op(fill.operands[0])
    return getattr(zero, "name", None) == "arith.constant" and ir.FloatAttr(zero.attributes["value"]).value == 0.0 \
        and getattr(defining_op(fill.operands[1]), "name", None) == "tensor.empty"


def _product(v):
    """(the matmul, its zero fill) where v is a 2-D `linalg.matmul` of a zero fill, each used once; else None."""
    mm = defining_op(v)
    if getattr(mm, "name", None) != "linalg.matmul" or not one_use(v) or len(mm.operands) != 3:
        return None
    if not _zeros(mm.operands[2]) or not one_use(mm.operands[2]):
        return None
    return mm, defining_op(mm.operands[2])


def _adds_two(op) -> bool:
    """Whether `op` is an element-wise generic of identity maps giving in0 + in1 (f32 or f64)."""
    segments = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])
    if segments[0] != 2 or segments[1] != 1 or len(op.results) != 1:
        return False
    if any("parallel" not in str(t) for t in op.attributes["iterator_types"]):
        return False
    maps = [str(a) for a in op.attributes["indexing_maps"]]
    if len(set(maps)) != 1 or maps[0] != identity_map(len(list(op.attributes["iterator_types"]))):
        return False
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if len(ops) != 2 or ops[0].name != "arith.addf" or ops[1].name != "linalg.yield":
        return False
    args = list(block.arguments)
    return {ops[0].operands[0], ops[0].operands[1]} == {args[0], args[1]} and ops[1].operands[0] == ops[0].results[0]


def _rewrite(op) -> int:
    if not _adds_two(op):
        return 0
    _stand_in_on_the_sum(op)
    ins = [op.operands[0], op.operands[1]]
    for k in (1, 0):
        if _zeros(_stand_in(ins[k])[0]) and ins[1 - k].type == op.results[0].type:
            op.results[0].replace_all_uses_with(ins[1 - k])
            op.erase()
            _erase_unused(ins[k])
            return 1
    for k in (1, 0):
        g, bad_g = _stand_in(ins[k])
        found = _product(g)
        if found is None:
            continue
        w, bad_w = _stand_in(ins[1 - k])
        if not (g.type == w.type == op.results[0].type):
            continue
        mm, fill = found
        empty = fill.operands[1]
        with op.location, ir.InsertionPoint(op):
            bad = [b for b in (bad_g, bad_w) if b is not None]
            acc = w
            if bad:
                either = bad[0] if len(bad) == 1 else create("arith.ori", [bad[0].type], bad).result
                acc = create("arith.select", [w.type], [either, empty, w]).result
        mm.move_before(op)
        mm.operands[2] = acc
        op.results[0].replace_all_uses_with(mm.results[0])
        stand_ins = [defining_op(ins[j]) for j, b in ((k, bad_g), (1 - k, bad_w)) if b is not None]
        op.erase()
        fill.erase()
        unused = [s.operands[1] for s in stand_ins]
        for s in stand_ins:
            s.erase()
        _erase_unused(*unused, empty)
        return 1
    return 0


def _stand_in_on_the_sum(op) -> None:
    """Where a sum's operand made by a linalg op just for it (`g`, its output a `tensor.empty`)
    has a stand-in and the other (`w`) has none, stand in for w instead, with an uninitialised
    tensor of g's sizes (made under an `scf.if` on the failure), which the op iterates over then:
    MLIR's fusion then makes g's loop and the sum one (a stand-in between them kept them two),
    and a product accumulates into w."""
    for k in (0, 1):
        g, bad = _stand_in(op.operands[k])
        made = defining_op(g)
        if bad is None or _stand_in(op.operands[1 - k])[1] is not None or not one_use(g) or \
                not getattr(made, "name", "").startswith("linalg.") or g.type != op.operands[1 - k].type:
            continue
        init = defining_op(made.operands[len(made.operands) - 1])
        if getattr(init, "name", None) != "tensor.empty" or init.results[0].type != g.type:
            continue  # (g's sizes are its output's: read from g, g would have two uses)
        old, out = defining_op(op.operands[k]), op.operands[2]
        with op.location, ir.InsertionPoint(op):
            empty = create("tensor.empty", [g.type], list(init.operands)).result
            branch = create("scf.if", [g.type], [bad], regions=2)
            then, other = (ir.Block.create_at_start(r, []) for r in branch.regions)
            with ir.InsertionPoint(then):  # (made only once a check failed: no buffer otherwise)
                create("scf.yield", [], [create("tensor.empty", [g.type], list(init.operands)).result])
            with ir.InsertionPoint(other):
                create("scf.yield", [], [op.operands[1 - k]])
        op.operands[k], op.operands[1 - k], op.operands[2] = g, branch.results[0], empty
        stood = old.operands[1]
        old.erase()
        _erase_unused(stood, out)
        return


def _erase_unused(*values) -> None:
    """Erase the ops of those of `values` nothing uses, and so on up through a stand-in and a
    fill (one value may come twice, or be another's operand: each goes once)."""
    gone: list = []

    def visit(v):
        op = defining_op(v)
        if op is None or any(v == g for g in gone) or any(True for _ in v.uses):
            return
        operands, name = list(op.operands), op.name
        gone.append(v)
        op.erase()
        if name in ("arith.select", "linalg.fill"):
            for x in operands:
                if "tensor" in str(x.type):
                    visit(x)

    for v in values:
        visit(v)
