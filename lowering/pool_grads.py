"""The `tiled-max-pool-grads` pass: max_pool2d_grad over windows that tile the input (stride =
kernel, no padding, at most TILED_MAX_AREA cells each) becomes one element-wise generic over the
windows' cells, writing dx in place, instead of the plain form's gather.

Expects: a module at the linalg stage (tensors, before bufferization) in which to-linalg wrote
max_pool2d_grad in its plain form (dialects/ops_pool.py): the index of each window's first
largest element (a linalg.generic with two results, the second the index, reading the padded
input), then a gather: a linalg.generic marked `dg.max_pool2d_grad = {kernel, stride, padding}`
that gives dx, whose body reads the window's index and dy with tensor.extract.

Guarantees: each marked gather whose windows tile the input is replaced (with the index's
generic and what only it reads) by: the part of x and of dx the windows cover, [N, C, OH*KH,
OW*KW], viewed as [N, C, OH, KH, OW, KW] (an expand_shape, no copy), and one element-wise
generic over that shape that writes dx in place: each cell reads its window's KH * KW cells
(through maps with constant offsets) and the window's dy, and takes 0 + dy (the interpreter's
sum, -0 becoming +0) where it is the window's first largest (`_first_max_flags`: as np.argmax,
the first NaN where there is one), else 0. No gather, no reduction and no branch: LLVM unrolls the
window loops (i, j) and computes a window's flags once per row of it. (It does not vectorize the
OW loop where OW is a small constant, LeNet's 12 and 4: its cost model declines; still 0.5 ms
against the gather's 0.85 to 1.4 on [64, 6, 24, 24].) The rows and columns past OH*KH and OW*KW,
which no window holds, stay zero. Other gathers stay. Every marker is dropped. Both targets run
it (the CPU's and the GPU's stages).
"""
from __future__ import annotations

from dg.core.mlir import defining_op, erase_unused, ir, operations_under
from dg.core.types import Sym, TensorType, parse_mlir_type
from dg.dialects.builder import cast
from dg.dialects.helpers import PAR, iop, ix, size_product, sizes_text
from dg.dialects.ops_pool import MAX_POOL_GRAD

from .spliced import Spliced

# Windows of up to this many cells: one element-wise generic that reads every cell of its window
# (KH * KW inputs), instead of the gather.
TILED_MAX_AREA = 64


def tiled_max_pool_grads(m) -> int:
    """Rewrite the marked gathers whose windows tile the input (see the module's doc); how many."""
    count = 0
    for op in [o for o in operations_under(m.body) if o.name == "linalg.generic" and MAX_POOL_GRAD in o.attributes]:
        marker = ir.DictAttr(op.attributes[MAX_POOL_GRAD])
        del op.attributes[MAX_POOL_GRAD]
        kernel, stride, padding = (tuple(ir.DenseI64ArrayAttr(marker[k])) for k in ("kernel", "stride", "padding"))
        if stride == kernel and padding == (0, 0) and kernel[0] * kernel[1] <= TILED_MAX_AREA:
            count += _rewrite(op, kernel)
    return count


def _captured(gather) -> list:
    """The ops outside the gather whose results its body reads, in order, each once."""
    found = []
    for op in operations_under(gather.regions[0].blocks[0]):
        for v in op.operands:
            owner = defining_op(v)
            if owner is not None and not _within(owner, gather) and not any(owner == f for f in found):
                found.append(owner)
    return found


def _within(op, ancestor) -> bool:
    while op is not None:
        op = getattr(op, "operation", op)
        if op == ancestor:
            return True
        op = op.parent
    return False


def _rewrite(gather, kernel) -> int:
    """The gather's body reads two tensors of the module with tensor.extract: the index of each
    window's first largest element (i64, the second result of the generic that finds it, whose
    first input is the padded input: x itself, there being no padding) and dy."""
    captured = _captured(gather)
    read = [op.operands[0] for op in operations_under(gather.regions[0].blocks[0]) if op.name == "tensor.extract"]
    index = [v for v in read if ir.RankedTensorType(v.type).element_type == ir.IntegerType.get_signless(64)]
    dy = [v for v in read if ir.RankedTensorType(v.type).element_type != ir.IntegerType.get_signless(64)]
    argmax = defining_op(index[0]) if index else None
    if len(index) != 1 or len(dy) != 1 or argmax is None or argmax.name != "linalg.generic":
        return 0
    x = argmax.operands[0]
    text = Spliced(gather)
    out_t = parse_mlir_type(str(gather.results[0].type))
    r = _tiled(text, x, dy[0], out_t, kernel)
    new = text.splice(gather, r, out_t.mlir())
    gather.results[0].replace_all_uses_with(new)
    producers = [p for p in (defining_op(v) for v in gather.operands) if p is not None]
    gather.erase()
    erase_unused(producers + captured)  # the plain form's ops that only the gather read
    return 1


def _first_max_flags(b, cells, ety) -> list:
    """Per cell (row-major), an i1 that says it is the window's first largest, as np.argmax: the
    first NaN where there is one, else the first cell equal to the largest (ties, -0 and +0
    included, go to the first). The largest is a chain of (v > top ? v : top), which LLVM makes
    a `maxss` (a NaN in it matters not: where there is one, only NaNs match)."""
    true = b.const(True, "i1")
    top, nan = cells[0], None
    for v in cells[1:]:
        top = b.select(b.cmp("ogt", v, top, ety), v, top, ety)
    for p in range(0, len(cells), 2):  # `uno a, b`: either is NaN
        u = b.cmp("uno", cells[p], cells[min(p + 1, len(cells) - 1)], ety)
        nan = u if nan is None else b.binary("arith.ori", nan, u, "i1")
    no_nan = b.binary("arith.xori", nan, true, "i1")
    flags, seen = [], None
    for p, v in enumerate(cells):
        if seen is not None and p == len(cells) - 1:  # some cell matches: the last where none before did
            flags.append(b.binary("arith.xori", seen, true, "i1"))
            break
        match = b.binary("arith.ori", b.binary("arith.andi", b.cmp("oeq", v, top, ety), no_nan, "i1"),
                         b.cmp("uno", v, v, ety), "i1")
        if seen is None:
            flags.append(match)
            seen = match
        else:
            flags.append(b.binary("arith.andi", match, b.binary("arith.xori", seen, true, "i1"), "i1"))
            seen = b.binary("arith.ori", seen, match, "i1")
    return flags


_BITS = {"f16": "i16", "bf16": "i16", "f32": "i32", "f64": "i64"}


def _keep_if(b, flag, v, ety) -> str:
    """v where `flag`, else +0: the bits of v and'ed with the flag widened (no select, which LLVM
    may make a branch, mispredicted half the time on a pool's data)."""
    ity = _BITS.get(ety)
    if ity is None:
        return b.select(flag, v, b.const(0.0, ety), ety)
    mask = b.assign(f"arith.extsi {flag} : i1 to {ity}", "m")
    bits = b.assign(f"arith.bitcast {v} : {ety} to {ity}", "m")
    return b.assign(f"arith.bitcast {b.binary('arith.andi', bits, mask, ity)} : {ity} to {ety}", "m")


def _tiled(text, x_v, d_v, out_t, kernel) -> str:
    """dx (of type out_t) from x and dy by one element-wise generic over the windows' cells."""
    b = text.b
    x, xt, xs = text.tensor(x_v)
    d, dt = text.arg(d_v), parse_mlir_type(str(d_v.type))
    kh, kw = kernel
    ety = out_t.element
    tiles, idx = [], []
    for size, ksize, sz in ((xt.shape[2], kh, xs[2]), (xt.shape[3], kw, xs[3])):
        tiles.append(size // ksize if isinstance(size, int) else Sym())
        idx.append(ix(b, size // ksize) if isinstance(size, int) else iop(b, "divui", sz, ix(b, ksize)))
    oh, ow = idx
    covered = all(isinstance(sz, int) and sz % k == 0 for sz, k in zip(xt.shape[2:], (kh, kw)))
    cov_t = TensorType(out_t.dtype, xt.shape[:2] + tuple(size_product([t, k]) for t, k in zip(tiles, (kh, kw))))
    cov_s = xs[:2] + [iop(b, "muli", oh, ix(b, kh)), iop(b, "muli", ow, ix(b, kw))]
    at = f"[0, 0, 0, 0] [{sizes_text(cov_t, cov_s)}] [1, 1, 1, 1]"
    if covered:
        acc, xc = None, x
    else:
        acc = b.fill(out_t, xs, b.const(0.0, ety))
        xc = b.assign(f"tensor.extract_slice {x}{at} : {xt.mlir()} to {cov_t.mlir()}", "cov")
    t6 = TensorType(out_t.dtype, xt.shape[:2] + (tiles[0], kh, tiles[1], kw))
    s6 = sizes_text(t6, xs[:2] + [oh, ix(b, kh), ow, ix(b, kw)])
    reassoc = "[[0], [1], [2, 3], [4, 5]]"

    def expand(v, vt):
        return b.assign(f"tensor.expand_shape {v} {reassoc} output_shape [{s6}] : {vt.mlir()} into {t6.mlir()}", "win")

    x6 = expand(xc, cov_t)
    if covered:  # every cell is written
        init6 = b.empty(t6, xs[:2] + [oh, None, ow, None])
    else:
        init6 = expand(b.assign(f"tensor.extract_slice {acc}{at} : {out_t.mlir()} to {cov_t.mlir()}", "cov"), cov_t)
    offsets = [(i, j) for i in range(kh) for j in range(kw)]
    maps = [f"d0, d1, d2, {i}, d4, {j}" for i, j in offsets] + ["d0, d1, d2, d4"]

    def body(bb, a):
        cells, dv = a[:len(offsets)], a[len(offsets)]
        flags = _first_max_flags(bb, cells, ety)
        i, j = (bb.assign(f"linalg.index {k} : index", "li") for k in (3, 5))
        here = iop(bb, "addi", iop(bb, "muli", i, ix(bb, kw)), j)
        mine = flags[0]
        for p in range(1, len(flags)):  # this cell's flag (i and j are constants once LLVM unrolls)
            mine = bb.select(bb.cmp("eq", here, ix(bb, p), "index"), flags[p], mine, "i1")
        return _keep_if(bb, mine, bb.binary("arith.addf", bb.const(0.0, ety), dv, ety), ety)

    g6 = b.generic(t6, init6, [(x6, t6)] * len(offsets) + [(d, dt)], maps, "d0, d1, d2, d3, d4, d5",
                   [PAR] * 6, body)
    dxc = b.assign(f"tensor.collapse_shape {g6} {reassoc} : {t6.mlir()} into {cov_t.mlir()}", "dx")
    if covered:
        return cast(b, dxc, cov_t, out_t)
    return b.assign(f"tensor.insert_slice {dxc} into {acc}{at} : {cov_t.mlir()} into {out_t.mlir()}", "dx")
