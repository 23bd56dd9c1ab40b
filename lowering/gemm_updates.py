"""An update `w ± s * (A @ B)` becomes one BLAS call: copy w, then gemm with alpha = ±s, beta = 1.

Expects: a module after bufferization whose matmuls `blas.route_matmuls` made
into calls of the overwriting BLAS helper (`C = A @ B`). Guarantees:
`fuse_gemm_updates(module)` rewrites each such call whose result buffer G
is read only by one element-wise `linalg.generic` computing `w - s * G`,
`w + s * G`, `w - G` or `w + G` into: G = copy of w, then G += alpha * A @ B
by the scaled helper; the generic's output buffer is replaced by G. s is a
0-d argument or a constant; w is an argument of the function of the same
static shape as G (dynamic sizes of w and G are not checked against each
other at run time, and the copy must not overrun G); w and s are read at
the call now, so no op in between may write them (or a view of them). An SGD step's parameter update so costs no
pass of its own: the BLAS kernel reads and writes C anyway, and copying w
is cheaper than zeroing C was (NumPy's OpenBLAS: copy + gemm with beta = 1
takes as long as gemm with beta = 0).
"""
from __future__ import annotations

from dg.core.mlir import append_parsed, create, defining_op, ir, one_use, operations_under, user

from .blas import _ELTS, helper_name, helper_text, ops_between, routed

_IDENTITY = "affine_map<(d0, d1) -> (d0, d1)>"
_SCALAR = "affine_map<(d0, d1) -> ()>"


def fuse_gemm_updates(module) -> int:
    """Rewrite the matching gemm + update pairs of a bufferized module; how many."""
    lib = routed()
    if lib is None:
        return 0
    overwriting = {helper_name(elt, True): elt for elt in _ELTS}
    found = []
    for op in operations_under(module.body):
        if op.name == "func.call" and ir.FlatSymbolRefAttr(op.attributes["callee"]).value in overwriting:
            match = _update_of(op)
            if match is not None:
                found.append((op, overwriting[ir.FlatSymbolRefAttr(op.attributes["callee"]).value], match))
    if not found:
        return 0
    with module.context:
        for elt in sorted({elt for _, elt, _ in found}):
            fn, decl = helper_text(elt, lib.int_type, overwrite=False, scaled=True)
            append_parsed(module, decl + fn)
        for call, elt, match in found:
            _rewrite(call, elt, *match)
    return len(found)


def _is_arg_of(v, block) -> bool:
    o = v.owner
    return isinstance(o, ir.Block) and o == block


def _update_of(call):
    """(G, the update generic, w, scale, negate) when the call's output feeds only an update; else None.
    `scale` is ("argument", a 0-d memref argument), ("constant", an `arith.constant` op) or None (1)."""
    c = call.operands[2]
    cast = defining_op(c)
    if getattr(cast, "name", None) != "memref.cast" or not one_use(c):
        return None
    g = cast.operands[0]
    # Static shapes only: w is copied into G, and dg does not check at run time that dynamic
    # sizes of w and of the product agree.
    if getattr(defining_op(g), "name", None) != "memref.alloc" or not ir.MemRefType(g.type).has_static_shape:
        return None
    block = call.block
    func = block.owner
    if getattr(getattr(func, "operation", func), "name", None) != "func.func":
        return None
    users = [user(u) for u in g.uses]
    generics = []
    for u in users:  # (a generic written over G, in place, uses it twice)
        if u.name == "linalg.generic" and not any(u == x for x in generics):
            generics.append(u)
    rest = [u for u in users if u.name not in ("linalg.generic", "memref.dealloc") and u != cast]
    if len(generics) != 1 or rest and not all(_after(u, generics[0]) for u in rest):
        return None  # (G may be used after the update only where the update was written over it)
    gen = generics[0]
    if gen.block != block or ops_between(call, gen) is None:
        return None
    view = gen.opview
    ins, outs = list(view.inputs), list(view.outputs)
    maps = [str(m) for m in gen.attributes["indexing_maps"]]
    iters = [str(t) for t in gen.attributes["iterator_types"]]
    if len(outs) != 1 or len(ins) not in (2, 3) or any("parallel" not in t for t in iters):
        return None
    out = outs[0]
    if maps[-1] != _IDENTITY or out.type != g.type or getattr(defining_op(out), "name", None) != "memref.alloc":
        return None
    if out != g and (rest or not all(_after(user(u), gen) for u in out.uses if user(u) != gen)):
        return None
    body = gen.regions[0].blocks[0]

    def operand(v):
        """(input value, its map) when v is the body's argument for an input, else None."""
        if not _is_arg_of(v, body):
            return None
        n = v.maybe_downcast().arg_number
        return (ins[n], maps[n]) if n < len(ins) else None

    def is_g(v):
        o = operand(v)
        return o is not None and o[0] == g and o[1] == _IDENTITY

    ops = [o.operation for o in body.operations]
    if len(ops) not in (2, 3) or ops[-1].name != "linalg.yield" or not ops[-2].results:
        return None
    r = ops[-2]
    if r.name not in ("arith.subf", "arith.addf") or ops[-1].operands[0] != r.results[0]:
        return None

    def g_term(v):
        """The scale of G in v (None for 1), or False when v is neither G nor a scaled G."""
        if is_g(v):
            return None
        mul = defining_op(v)
        if len(ops) != 3 or getattr(mul, "name", None) != "arith.mulf" or mul != ops[0]:
            return False
        a, b = mul.operands
        for gv, sv in ((a, b), (b, a)):
            if is_g(gv):
                o = operand(sv)
                if o is not None and o[1] == _SCALAR and _is_arg_of(o[0], block):
                    return "argument", o[0]  # a 0-d memref
                const = defining_op(sv)
                if not _is_arg_of(sv, body) and getattr(const, "name", None) == "arith.constant":
                    return "constant", const
        return False

    def w_of(v):
        o = operand(v)
        if o is not None and o[1] == _IDENTITY and o[0] != g and _is_arg_of(o[0], block):
            return o[0]
        return None

    lhs, rhs = r.operands
    candidates = [(lhs, rhs, r.name == "arith.subf")] + ([(rhs, lhs, False)] if r.name == "arith.addf" else [])
    for wv, gv, negate in candidates:
        w, scale = w_of(wv), g_term(gv)
        if w is None or scale is False or w.type != g.type:
            continue
        # w, G and the scale's 0-d argument: nothing else is read
        if len(ins) != 2 + (scale is not None and scale[0] == "argument"):
            continue
        # w and the scale are read at the call now, not at the update: nothing in between may write them
        read_early = [w] + ([scale[1]] if scale is not None and scale[0] == "argument" else [])
        if _written_between(call, gen, read_early):
            return None
        return g, gen, w, scale, negate
    return None


_VIEWS = ("memref.cast", "memref.transpose", "memref.subview", "memref.reinterpret_cast",
          "memref.collapse_shape", "memref.expand_shape", "memref.view")


def _views_of(roots) -> list:
    """The values that are `roots` or views of them (through view-like ops, transitively)."""
    out, todo = [], list(roots)
    while todo:
        v = todo.pop()
        if any(v == o for o in out):
            continue
        out.append(v)
        for u in v.uses:
            o = user(u)
            if o.name in _VIEWS:
                todo.extend(o.results)
    return out


def _written_operands(op) -> list:
    """The memref operands `op` may write: a BLAS helper's C, linalg outputs, store and copy
    targets; every operand of another call or an unknown op with memref operands."""
    name = op.name
    if name == "func.call":
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        return [op.operands[2]] if callee.startswith("dg_gemm_") else list(op.operands)
    if name.startswith("linalg."):
        outputs = getattr(op.opview, "outputs", None)
        return list(outputs) if outputs is not None else list(op.operands)
    if name in ("memref.store", "memref.copy"):
        return [op.operands[1]]
    if name.startswith(("arith.", "math.", "memref.")) or name in _VIEWS:
        return []
    return list(op.operands)


def _written_between(first, last, roots) -> bool:
    """True when an op strictly between `first` and `last` (one block; nested regions included)
    may write one of `roots` or a view of it."""
    watched = _views_of(roots)
    for o in ops_between(first, last) or []:
        for op in [o, *(x for r in o.regions for b in r.blocks for x in operations_under(b))]:
            if any(v == w for v in _written_operands(op) for w in watched):
                return True
    return False


def _after(op, anchor) -> bool:
    """True when `op` (or the op holding it, in anchor's block) comes after `anchor`."""
    while op is not None and op.block != anchor.block:
        parent = op.parent
        op = getattr(parent, "operation", parent)
        if getattr(op, "name", None) in ("func.func", "builtin.module"):
            return False
    return op is not None and ops_between(anchor, op) is not None


def _rewrite(call, elt, g, gen, w, scale, negate) -> None:
    et = ir.MemRefType(g.type).element_type
    with ir.InsertionPoint(call), call.location:
        create("memref.copy", [], [w, g])
        if scale is None or scale[0] == "constant":  # a constant outside the generic: made again here
            value = ir.FloatAttr.get(et, 1.0) if scale is None else scale[1].attributes["value"]
            alpha = create("arith.constant", [et], value=value).result
        else:  # a 0-d argument
            alpha = create("memref.load", [et], [scale[1]]).result
        if negate:
            alpha = create("arith.negf", [et], [alpha]).result
        create("func.call", [], [*call.operands, alpha], callee=ir.FlatSymbolRefAttr.get(helper_name(elt, False, scaled=True)))
    call.erase()
    out = gen.opview.outputs[0]
    out_alloc = defining_op(out)
    g_deallocs = [user(u) for u in g.uses if user(u).name == "memref.dealloc"]
    gen.erase()
    if out == g:  # (the update was written over G: G holds it now)
        return
    for d in g_deallocs:
        d.erase()
    out.replace_all_uses_with(g)
    out_alloc.erase()
