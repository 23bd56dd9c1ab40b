"""Ops the autodiff pass writes: zeros of a value's shape, and the tape.

A tape is an ordinary tensor whose first axis counts iterations: a forward
loop pushes each iteration's loop-carried values (`tape_push` at row k; the
autodiff pass sizes each tape to its loop's iterations before the loop, so a
push never outruns it), and the reverse loop reads them back (`tape_read`).
A tape value is used once, by the next push or by reads, so both modes update
it in place. The adjoint of a push clears the pushed row of the adjoint tape
(`tape_clear`), in place too. A carried value whose size changes from one
iteration to the next cannot be taped: that is a located runtime error.
(A tape whose push may be past its end would be a buffer that is either the
old one or a new one: bufferization then tracks whether each loop owns the
tape it carries, and a fourth-order gradient of a loop compiled to 2.5 times
the LLVM IR.)
"""
from __future__ import annotations

import numpy as np

from dg.core.types import ShapeError, Sym, TensorType

from . import batch_shape
from .batch_rules import elementwise
from .builder import any_of, cast, fail_if, if_else, stand_in_if
from .helpers import reduce_generic
from .jvp_rules import linear
from .registry import OpDef, register


# ---------------------------------------------------------------- slices of tapes, in lowerings
def _dims(b, v, t):
    return [b.dim(v, t, i) for i in range(t.rank)]


def _sizes(b, v, t, first=0):
    """Slice sizes of v's axes from `first` on: literals where static (so the slice keeps its static type)."""
    return [str(d) if isinstance(d, int) else b.dim(v, t, i) for i, d in enumerate(t.shape) if i >= first]


def _slice_text(k, sizes):
    offs = ", ".join([k] + ["0"] * len(sizes))
    szs = ", ".join(["1"] + sizes)
    ones = ", ".join(["1"] * (len(sizes) + 1))
    return f"[{offs}] [{szs}] [{ones}]"


# ---------------------------------------------------------------- the ops
def _tape_type(types):
    v = types[0]
    return TensorType(v.dtype, (Sym(),) + tuple(v.shape))


def _tape_alloc(v, cap):
    return np.empty((max(int(cap), 1),) + np.shape(v), dtype=np.asarray(v).dtype)


def _tape_push(tape, k, v):
    v = np.asarray(v)
    if v.shape != tape.shape[1:]:
        raise ValueError(f"a loop-carried value changed shape from {tape.shape[1:]} to {v.shape}: "
                         "gradients need the carried values of a loop to keep their sizes")
    tape[int(k)] = v  # in place: a tape value is used once, by the next push or by reads
    return tape


def _tape_read(tape, k):
    r = tape[int(k)].copy()
    return r if r.ndim else r[()]


def _lower_zeros_like(b, op):
    t = op.result_types[0]
    zero = b.const(0, t.element) if t.dtype != "bool" else b.const(False, "i1")
    return b.fill(t, _dims(b, op.operands[0], op.types[0]), zero)


register(OpDef(
    name="zeros_like", impl=lambda x: np.zeros_like(x), infer=lambda types: types[0], batch=elementwise,
    sample=lambda rng: ([rng.standard_normal((2, 3)).astype(np.float32)], {}),
    doc="""Zeros of x's type and shape (adjoints that are zero).

        %z = "dg.zeros_like"(%x) : (tensor<?x3xf32>) -> tensor<?x3xf32>""",
    lower=_lower_zeros_like,
))


def _sum_to_rule(types):
    d, like = types
    if d.rank < like.rank:
        raise ShapeError(f"cannot sum {d} to the rank-{like.rank} shape of {like}")
    return TensorType(d.dtype, like.shape)


def _sum_to(d, like):
    d, like = np.asarray(d), np.asarray(like)
    lead = d.ndim - like.ndim
    if lead:
        d = np.sum(d, axis=tuple(range(lead)), dtype=d.dtype)
    axes = tuple(i for i, (a, n) in enumerate(zip(d.shape, like.shape)) if a != n)
    if any(like.shape[i] != 1 for i in axes):
        raise ValueError(f"cannot sum an adjoint of shape {d.shape} to shape {like.shape}")
    return np.sum(d, axis=axes, keepdims=True, dtype=d.dtype) if axes else d


def _lower_sum_to(b, op):
    """Leading axes and axes like declares 1 are summed always; an axis like has of unknown size is
    summed (under scf.if) when d's size there differs from like's at run time, i.e. like's is 1."""
    (d, dt), (like, lt) = zip(op.operands, op.types)
    out_t = op.result_types[0]
    ety = dt.element
    isf = ety.startswith("f") or ety == "bf16"

    def summed(bb, v, vt, axes, keep):
        st = TensorType(vt.dtype, tuple(1 if i in axes else n for i, n in enumerate(vt.shape)) if keep
                        else tuple(n for i, n in enumerate(vt.shape) if i not in axes))
        zero = bb.const(0.0 if isf else 0, ety)
        add = lambda b2, a, o: b2.binary("arith.addf" if isf else "arith.addi", a, o, ety)
        return reduce_generic(bb, v, vt, axes, keep, st, zero, add), st

    cur, ct = d, dt
    lead = dt.rank - lt.rank
    if lead:
        cur, ct = summed(b, cur, ct, tuple(range(lead)), False)
    for i, (a, n) in enumerate(zip(ct.shape, lt.shape)):
        if a == 1 or isinstance(n, int) and n != 1:
            continue  # nothing was stretched here
        if n == 1:
            cur, ct = summed(b, cur, ct, (i,), True)
            continue
        yt = ct.with_shape(ct.shape[:i] + (Sym(),) + ct.shape[i + 1:])
        stretched = b.cmp("ne", b.dim(cur, ct, i), b.dim(like, lt, i), "index")

        def sum_axis(bb, v=cur, vt=ct, axis=i, yt=yt):
            return cast(bb, *summed(bb, v, vt, (axis,), True), yt)

        cur, ct = if_else(b, stretched, yt.mlir(), sum_axis, lambda bb, v=cur, vt=ct, yt=yt: cast(bb, v, vt, yt)), yt
    unknown = [i for i, (a, n) in enumerate(zip(ct.shape, lt.shape)) if not (isinstance(a, int) and a == n)]
    if not unknown:
        return cast(b, cur, ct, out_t)
    # d's sizes are like's in a program whose checks passed. After a failed one (the call winds
    # down, then raises) they may not be: an uninitialised tensor of like's sizes stands in, so
    # that nothing reads past cur's end. The result is a slice of like's sizes (all of cur), so
    # that its sizes are like's SSA values and checks between them and like's fold.
    sizes = [b.dim(like, lt, i) for i in range(lt.rank)]
    bad = any_of(b, [b.cmp("ne", b.dim(cur, ct, i), sizes[i], "index") for i in unknown])
    dyn = ct.with_shape([Sym() for _ in ct.shape])
    cur = stand_in_if(b, bad, cast(b, cur, ct, dyn), dyn, dict(enumerate(sizes)))
    parts = [str(n) if isinstance(n, int) else s for n, s in zip(lt.shape, sizes)]
    r = b.fresh("sl")
    b.emit(f"{r} = tensor.extract_slice {cur}[{', '.join('0' for _ in parts)}] [{', '.join(parts)}] "
           f"[{', '.join('1' for _ in parts)}] : {dyn.mlir()} to {out_t.mlir()}")
    return r


def _vjp_sum_to(g, op, d):
    """The adjoint of a sum to like's shape is that adjoint broadcast back to the summed one's
    shape (like's sizes may be 1 only at run time: broadcast_to stretches those)."""
    x = op.operands[0]
    dims = [g.dim(x, i) for i, n in enumerate(x.tt.shape) if not isinstance(n, int)]
    shape = tuple(n if isinstance(n, int) else -2 for n in x.tt.shape)
    return [g.dg_op("broadcast_to", [d] + dims, {"shape": shape}), None]


register(OpDef(
    name="sum_to", impl=_sum_to, nargs=2, infer=_sum_to_rule, batch=batch_shape.sum_to,
    sample=lambda rng: ([rng.standard_normal((4, 2, 3)).astype(np.float32),
                         rng.standard_normal((2, 1)).astype(np.float32)], {}),
    doc="""d summed over the axes that broadcasting added or stretched (where `like` has size 1 at run
    time), to like's shape: the adjoint of an operand that was broadcast.

        %y = "dg.sum_to"(%d, %like) : (tensor<4x2x3xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>""",
    lower=_lower_sum_to,
    vjp=_vjp_sum_to, jvp=linear(0),
))


def _lower_tape_alloc(b, op):
    v, cap = op.operands
    one = b.const(1, "index")
    c = b.binary("arith.maxui", cap, one, "index")
    t = op.result_types[0]
    dyn = [s for d, s in zip(t.shape, [c] + _dims(b, v, op.types[0])) if not isinstance(d, int)]
    # (an allocation of its own, not a tensor.empty: two tapes of one shape must not become one
    # value, which CSE makes of equal tensor.empty ops, and share a buffer)
    return b.assign(f"bufferization.alloc_tensor({', '.join(dyn)}) : {t.mlir()}", "tape")


register(OpDef(
    name="tape_alloc", impl=_tape_alloc, nargs=2, infer=_tape_type,
    doc="""An empty tape of `capacity` rows (an index) for values shaped like v.

        %t = "dg.tape_alloc"(%v, %n) : (tensor<3xf32>, index) -> tensor<?x3xf32>""",
    lower=_lower_tape_alloc,
))


def _last_row(b, k, n):
    """k, or the tape's last row where k is past it (never, in the tapes the autodiff pass sizes:
    a bound on what a write may touch, not a semantics)."""
    return b.binary("arith.minui", k, b.binary("arith.subi", n, b.const(1, "index"), "index"), "index")


def _lower_tape_push(b, op):
    """Row k set to v, in place. A v of other sizes than the tape's rows is a located error;
    until it is raised, an uninitialised row stands in for v, so that nothing is written past a
    row's end."""
    tape, k, v = op.operands
    tt, vt = op.types[0], op.types[2]
    if 0 in vt.shape:  # empty rows: nothing to keep (and a slice at offset 0 of a size-0 axis does not verify)
        return tape
    rows = [b.dim(tape, tt, i + 1) for i in range(vt.rank)]  # the tape's row sizes
    bad = any_of(b, [b.cmp("ne", b.dim(v, vt, i), rows[i], "index")
                     for i, d in enumerate(vt.shape) if not isinstance(d, int)])
    if bad is not None:
        fail_if(b, bad, "a loop-carried value changed shape: gradients need the carried values "
                        "of a loop to keep their sizes")
        v = stand_in_if(b, bad, v, vt, dict(enumerate(rows)))
    row = [str(d) if isinstance(d, int) else r for d, r in zip(vt.shape, rows)]  # as slice sizes
    k = _last_row(b, k, b.dim(tape, tt, 0))
    t = tt.mlir()
    if vt.rank == 0 and b.target == "cpu":  # a scalar: stored, not copied from a buffer of its own
        e = b.assign(f"tensor.extract {v}[] : {vt.mlir()}", "e")
        return b.assign(f"tensor.insert {e} into {tape}[{k}] : {t}", "pushed")
    return b.assign(f"tensor.insert_slice {v} into {tape}{_slice_text(k, row)} : {vt.mlir()} into {t}", "pushed")


def _vjp_tape_push(g, op, d):
    """Row k of d flows to v; the rest of d to the tape (row k was overwritten: nothing flows to
    the old row). Row k is read first, so that tape_clear may clear it in place."""
    tape, k, v = op.operands
    dv = g.dg_op("tape_read", [d, k])
    return [g.dg_op("tape_clear", [d, k]), None, dv]


register(OpDef(
    name="tape_push", impl=_tape_push, nargs=3, infer=lambda types: types[0],
    doc="""The tape with row k (an index, below the tape's rows) set to v.

        %t2 = "dg.tape_push"(%t, %k, %v) : (tensor<?x3xf32>, index, tensor<3xf32>) -> tensor<?x3xf32>""",
    lower=_lower_tape_push,
    vjp=_vjp_tape_push, jvp=linear(0, 2),
))


def _tape_clear(d, k):
    d = np.array(d, copy=True)
    d[int(k)] = 0
    return d


def _lower_tape_clear(b, op):
    """d with row k zeroed, in place where d has no later use (its row k is read before)."""
    (d, dt), (k, _) = zip(op.operands, op.types)
    if 0 in dt.shape[1:]:  # empty rows: nothing to clear (and a slice at offset 0 of a size-0 axis does not verify)
        return d
    row = _sizes(b, d, dt, 1)  # a row's sizes (what the fill of zeros takes too)
    zero = b.const(0, dt.element) if dt.dtype != "bool" else b.const(False, "i1")
    k = _last_row(b, k, b.dim(d, dt, 0))
    if dt.rank == 1 and b.target == "cpu":  # a row of one element: stored
        return b.assign(f"tensor.insert {zero} into {d}[{k}] : {dt.mlir()}", "cleared")
    rt = TensorType(dt.dtype, tuple(dt.shape[1:]))
    zeros = b.fill(rt, row, zero)
    return b.assign(f"tensor.insert_slice {zeros} into {d}{_slice_text(k, row)} : {rt.mlir()} into {dt.mlir()}",
                    "cleared")


register(OpDef(
    name="tape_clear", impl=_tape_clear, nargs=2, infer=lambda types: types[0],
    sample=lambda rng: ([rng.standard_normal((4, 3)).astype(np.float32), np.int64(1)], {}),
    doc="""d with row k (an index, below d's rows) zero: the adjoint of a tape before a push at row k,
    from the adjoint d of the tape after it.

        %t = "dg.tape_clear"(%d, %k) : (tensor<?x3xf32>, index) -> tensor<?x3xf32>""",
    lower=_lower_tape_clear,
    vjp=lambda g, op, d: [g.dg_op("tape_clear", [d, op.operands[1]]), None], jvp=linear(0),
))


def _lower_tape_read(b, op):
    tape, k = op.operands
    tt, rt = op.types[0], op.result_types[0]
    if 0 in rt.shape:  # empty rows, never written (tape_push)
        return b.empty(rt, [b.dim(tape, tt, i + 1) for i in range(rt.rank)])
    if rt.rank == 0 and b.target == "cpu":  # a scalar: loaded (a rank-0 tensor that ops take, folded away)
        e = b.assign(f"tensor.extract {tape}[{k}] : {tt.mlir()}", "e")
        return b.assign(f"tensor.from_elements {e} : {rt.mlir()}", "row")
    sizes = _sizes(b, tape, tt, 1)
    return b.assign(f"tensor.extract_slice {tape}{_slice_text(k, sizes)} : {tt.mlir()} to {rt.mlir()}", "row")


def _vjp_tape_read(g, op, d):
    tape, k = op.operands
    return [g.one_row(tape, k, d), None]


register(OpDef(
    name="tape_read", impl=_tape_read, nargs=2,
    infer=lambda types: TensorType(types[0].dtype, tuple(types[0].shape[1:])),
    doc="""Row k (an index) of the tape.

        %v = "dg.tape_read"(%t, %k) : (tensor<?x3xf32>, index) -> tensor<3xf32>""",
    lower=_lower_tape_read,
    vjp=_vjp_tape_read, jvp=linear(0),
))
