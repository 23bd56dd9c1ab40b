"""Collectives (LANGUAGE.md §7): rank, world size, allreduce, broadcast, allgather, reduce_scatter,
all_to_all, and the point-to-point send and recv.

The interpreter runs them through mpi4py (`core.mpi`); compiled code calls the MPI library
itself. A collective lowers to a copy of its operand into a fresh buffer (`linalg.copy`, marked
with what to do), which the `mpi-collectives` pass turns, after bufferization, into a call that
reduces, broadcasts or gathers into that buffer in place (`runtime.collectives` defines the
calls): an allgather's buffer is the world's size times its operand, the operand already at
this rank's block; a reduce_scatter's buffer is its operand, whose first block is the result.
Under a world of one every collective gives back its operand.

send and recv are calls at the tensor level: send copies its operand (a contiguous buffer) and
calls `core.abi.MPI_SEND` with it as an unranked tensor; recv allocates the result's buffer,
calls `MPI_RECV` to fill it and makes it a tensor (`bufferization.to_tensor ... restrict`).
send gives a token, a 0-d zero of its operand's type: its gradient receives the cotangent of
what it sent from the peer (a send's adjoint is a receive, which the token carries into the
reverse sweep when it is part of what is differentiated); recv's gradient sends the cotangent
of what it received back to the peer. Their tangents travel as the values do.

Gradients are transposes, as for allreduce: the gradient of the sum of every process's
result. allgather's is the reduce_scatter (sum) of its cotangent, reduce_scatter's the
allgather of its cotangent (divided by the world's size for "mean"; "max" passes none).
"""
from __future__ import annotations

import numpy as np

from dg.core.abi import MPI_RANK, MPI_RECV, MPI_SEND, MPI_SIZE
from dg.core.errors import DgError
from dg.core.mpi import DTYPES, GROUPS, NOT_A_PEER, NOT_DIVISIBLE, NOT_SPLIT, OPS, mean_of, world
from dg.core.types import ShapeError, Sym, TensorType, is_float

from .batch_rules import per_example, same_op
from .builder import fail_if
from .helpers import map_generic
from .jvp_rules import linear
from .registry import OpDef, register

COLLECTIVE = "dg.collective"  # the marker on a collective's copy: "<kind>:<op code or root>:<type code>:<group code>"


def _cpu_only(b, op):
    raise DgError(f"{op.name}: collectives run on the CPU only (device='cpu'); NCCL for GPUs is planned", b.where)


def _scalar_rule(types, **attrs):
    return TensorType("i64", ())


def _group(op) -> str:
    """The group a collective runs in (core.mpi.GROUPS): its `group` attribute."""
    return op.attrs["group"]


def _call_i64(b, symbol: str, group: str) -> str:
    """The rank or the size (`symbol`) in `group`, as a 0-d i64 tensor."""
    b.runtime_decls.add(f"func.func private @{symbol}(i32) -> i64")
    g = b.const(GROUPS.index(group), "i32")
    v = b.assign(f"func.call @{symbol}({g}) : (i32) -> i64", "w")
    return b.scalar_tensor(v, TensorType("i64", ()))


register(OpDef(
    name="world_rank", impl=lambda group="world": np.int64(world().group(group).rank), nargs=0, nfixed=0,
    infer=_scalar_rule, attrs={"group": "str"},
    sample=lambda rng: ([], {"group": "world"}),
    doc="""This process's rank in the MPI world, or in its group `group` (0 in a world of one).

        %r = "dg.world_rank"() {group = "world"} : () -> tensor<i64>""",
    lower=lambda b, op: _call_i64(b, MPI_RANK, _group(op)), lower_for={"cuda": _cpu_only},
))

register(OpDef(
    name="world_size", impl=lambda group="world": np.int64(world().group(group).size), nargs=0, nfixed=0,
    infer=_scalar_rule, attrs={"group": "str"},
    sample=lambda rng: ([], {"group": "world"}),
    doc="""How many processes the MPI world has, or its group `group` (1 without MPI).

        %n = "dg.world_size"() {group = "world"} : () -> tensor<i64>""",
    lower=lambda b, op: _call_i64(b, MPI_SIZE, _group(op)), lower_for={"cuda": _cpu_only},
))


HALF = ("f16", "bf16")  # (MPI has no standard type for them: they travel as f32, exactly)


def _collective_rule(types, **attrs):
    t = types[0]
    if t.dtype not in DTYPES + HALF:
        raise ShapeError(f"collectives take {', '.join(DTYPES + HALF)} values, got {t}")
    group = attrs.get("group")
    if group is not None and group not in GROUPS:
        raise ShapeError(f"group must be one of {', '.join(repr(g) for g in GROUPS)}, got {group!r}")
    op = attrs.get("op")
    if op is not None and op not in OPS:
        raise ShapeError(f"allreduce: op must be one of {', '.join(repr(o) for o in OPS)}, got {op!r}")
    return t


def _marked_copy(b, x: str, xt: TensorType, marker: str) -> str:
    """x copied into a fresh buffer, the copy marked for `mpi-collectives`. A 0-d x is copied as a
    one-element 1-d tensor (bufferizing a 0-d copy of a constant crashes MLIR)."""
    if not xt.shape:
        one = xt.with_shape((1,))
        x1 = b.assign(f"tensor.expand_shape {x} [] output_shape [1] : {xt.mlir()} into {one.mlir()}", "x")
        c = _marked_copy(b, x1, one, marker)
        return b.assign(f"tensor.collapse_shape {c} [] : {one.mlir()} into {xt.mlir()}", "x")
    e = b.empty(xt, [None if isinstance(d, int) else b.dim(x, xt, i) for i, d in enumerate(xt.shape)])
    return b.assign(f'linalg.copy {{{COLLECTIVE} = "{marker}"}} ins({x} : {xt.mlir()}) outs({e} : {xt.mlir()}) -> {xt.mlir()}', "cl")


def _as(b, x: str, xt: TensorType, dtype: str) -> tuple:
    """x converted to `dtype` (f16/bf16 to f32 and back, exactly in that direction)."""
    t = xt.with_dtype(dtype)
    conv = "arith.extf" if dtype == "f32" else "arith.truncf"
    return map_generic(b, t, [(x, xt)], lambda bb, a: bb.unary(conv, a[0], f"{xt.element} to {t.element}")), t


def _collective(b, op, marker) -> str:
    """The marked copy of the operand (f16 and bf16 through f32); `marker(type)` its marker."""
    x, xt = op.operands[0], op.types[0]
    if xt.dtype not in HALF:
        return _marked_copy(b, x, xt, marker(xt.dtype))
    x32, t32 = _as(b, x, xt, "f32")
    return _marked_copy(b, x32, t32, marker("f32")), t32


def _lower_allreduce(b, op):
    reduce = op.attrs["op"]
    xt = op.types[0]
    group = _group(op)
    out = _collective(b, op, lambda dt: f"allreduce:{OPS.index(reduce)}:{DTYPES.index(dt)}:{GROUPS.index(group)}")
    if isinstance(out, tuple):  # (f16 or bf16: reduced as f32)
        out, t32 = out
        if reduce == "mean":
            out = _mean(b, out, t32, group)
        return _as(b, out, t32, xt.dtype)[0]
    return _mean(b, out, xt, group) if reduce == "mean" else out


def _mean(b, out: str, xt: TensorType, group: str) -> str:
    """A sum over a group divided by its size (integers with floor division)."""
    n = b.extract(_call_i64(b, MPI_SIZE, group), TensorType("i64", ()))
    ety = xt.element
    if is_float(xt.dtype):
        size = b.unary("arith.sitofp", n, f"i64 to {ety}")
        div = "arith.divf"
    else:
        size = n if ety == "i64" else b.unary("arith.trunci", n, f"i64 to {ety}")
        div = "arith.floordivsi"
    return map_generic(b, xt, [(out, xt)], lambda bb, a: bb.binary(div, a[0], size, ety))


def _vjp_allreduce(g, op, d):
    reduce = op.attrs["op"]
    if reduce == "max":
        return [None]  # (max has no gradient that flows back across processes: a step function's)
    return [g.dg_op("allreduce", [d], {"op": reduce, "group": _group(op)})]


def _jvp_allreduce(g, op, ts):
    """sum and mean are linear: the allreduce of the tangents. max gets none, as its VJP passes
    none (so that <u, J t> = <J^T u, t>)."""
    if op.attrs.get("op", "sum") == "max":
        return None
    return _linear_in_x(g, op, ts)


_linear_in_x = linear(0)


register(OpDef(
    name="allreduce", impl=lambda x, op="sum", group="world": world().group(group).allreduce(np.asarray(x), op),
    attrs={"op": "str", "group": "str"}, batch=same_op,
    infer=_collective_rule,
    sample=lambda rng: ([rng.standard_normal((3,)).astype(np.float32)], {"op": "sum", "group": "world"}),
    doc="""The elementwise sum, mean or max of x over every process of the world (or of its group
    `group`), on every process.
    Its gradient is the allreduce of the cotangent (sum and mean; max passes none).

        %y = "dg.allreduce"(%x) {group = "world", op = "sum"} : (tensor<3xf32>) -> tensor<3xf32>""",
    lower=_lower_allreduce, vjp=_vjp_allreduce, jvp=_jvp_allreduce, lower_for={"cuda": _cpu_only},
))


NOT_A_RANK = "ValueError: broadcast: root {0} is not a rank of this world of {1} processes"


def _broadcast(x, root=0, group="world"):
    w = world().group(group)
    if not 0 <= root < w.size:
        raise ValueError(NOT_A_RANK.split(": ", 1)[1].format(root, w.size))
    return w.broadcast(np.asarray(x), root)


def _lower_broadcast(b, op):
    xt = op.types[0]
    root = b.const(int(op.attrs.get("root", 0)), "i64")
    group = _group(op)
    size = b.extract(_call_i64(b, MPI_SIZE, group), TensorType("i64", ()))
    fail_if(b, b.cmp("sge", root, size, "i64"), NOT_A_RANK, ((root, "i64"), (size, "i64")))
    out = _collective(b, op, lambda dt: f"bcast:{int(op.attrs.get('root', 0))}:{DTYPES.index(dt)}:{GROUPS.index(group)}")
    return _as(b, *out, xt.dtype)[0] if isinstance(out, tuple) else out


def _vjp_broadcast(g, op, d):
    """Every process's cotangent flows back to the root's x: their sum there, zero elsewhere."""
    total = g.dg_op("allreduce", [d], {"op": "sum", "group": _group(op)})
    here = g.dg_op("eq", [g.dg_op("world_rank", [], {"group": _group(op)}), g.dg_op("constant", [], {"value": (
        np.asarray(int(op.attrs.get("root", 0)), np.int64), TensorType("i64", ()))}, result_types=[TensorType("i64", ())])])
    return [g.where(here, total, g.zeros_like(total))]


register(OpDef(
    name="broadcast_from", impl=_broadcast, attrs={"root": "int", "group": "str"}, batch=same_op,
    infer=_collective_rule,
    sample=lambda rng: ([rng.standard_normal((2, 3)).astype(np.float32)], {"root": 0, "group": "world"}),
    doc="""x of the process of rank `root`, on every process (`broadcast(x, root)` in dg code).

        %y = "dg.broadcast_from"(%x) {group = "world", root = 0 : i64} : (tensor<3xf32>) -> tensor<3xf32>""",
    lower=_lower_broadcast, vjp=_vjp_broadcast, jvp=linear(0), lower_for={"cuda": _cpu_only},
))


# ------------------------------------------------------------------ allgather, reduce_scatter (axis 0)
def _blocks_rule(types, **attrs):
    """allgather and reduce_scatter: x's type with a first axis whose size is known at run time."""
    t = _collective_rule(types, **attrs)
    if not t.shape:
        raise ShapeError(f"allgather and reduce_scatter take an array of rank 1 or more, got {t}")
    return TensorType(t.dtype, (Sym(),) + tuple(t.shape[1:]))


def _world_sizes(b, x: str, xt: TensorType, group: str) -> tuple:
    """(the group's size, this process's rank in it, x's first axis), as index values."""
    size = b.unary("arith.index_cast", b.extract(_call_i64(b, MPI_SIZE, group), TensorType("i64", ())), "i64 to index")
    rank = b.unary("arith.index_cast", b.extract(_call_i64(b, MPI_RANK, group), TensorType("i64", ())), "i64 to index")
    return size, rank, b.dim(x, xt, 0)


def _slice_sizes(b, v: str, t: TensorType, first: str) -> list:
    """The sizes of a slice of v that keeps every axis but the first (`first`)."""
    return [first] + [str(d) if isinstance(d, int) else b.dim(v, t, k) for k, d in enumerate(t.shape) if k]


def _through_f32(lower, same_shape: bool = False):
    """A lowering of f16 and bf16 values through f32 (MPI has no type for them), exactly; the
    result's first axis is known at run time, or (`same_shape`) the operand's."""
    def lowered(b, op):
        x, xt = op.operands[0], op.types[0]
        if xt.dtype not in HALF:
            return lower(b, x, xt, op)
        x32, t32 = _as(b, x, xt, "f32")
        out = lower(b, x32, t32, op)
        return _as(b, out, t32 if same_shape else TensorType("f32", (Sym(),) + tuple(t32.shape[1:])), xt.dtype)[0]
    return lowered


def _lower_allgather(b, x, xt, op):
    rt = TensorType(xt.dtype, (Sym(),) + tuple(xt.shape[1:]))
    group = _group(op)
    size, rank, d0 = _world_sizes(b, x, xt, group)
    total = b.binary("arith.muli", d0, size, "index")
    at = b.binary("arith.muli", d0, rank, "index")
    sizes = _slice_sizes(b, x, xt, str(xt.shape[0]) if isinstance(xt.shape[0], int) else d0)
    e = b.empty(rt, [total] + [None if isinstance(d, int) else sizes[k] for k, d in enumerate(xt.shape) if k])
    zeros, ones = ", ".join(["0"] * (len(sizes) - 1)), ", ".join(["1"] * len(sizes))
    mine = b.assign(f"tensor.insert_slice {x} into {e}[{', '.join([at] + ([zeros] if zeros else []))}] "
                    f"[{', '.join(sizes)}] [{ones}] : {xt.mlir()} into {rt.mlir()}", "ag")
    return _marked_copy(b, mine, rt, f"allgather:0:{DTYPES.index(xt.dtype)}:{GROUPS.index(group)}")


NOT_DIVISIBLE_MESSAGE = "ValueError: " + NOT_DIVISIBLE


def _lower_reduce_scatter(b, x, xt, op):
    reduce = op.attrs["op"]
    group = _group(op)
    rt = TensorType(xt.dtype, (Sym(),) + tuple(xt.shape[1:]))
    size, _, d0 = _world_sizes(b, x, xt, group)
    left = b.binary("arith.remsi", d0, size, "index")
    fail_if(b, b.cmp("ne", left, b.const(0, "index"), "index"), NOT_DIVISIBLE_MESSAGE, ((d0, "index"), (size, "index")))
    done = _marked_copy(b, x, xt, f"reduce_scatter:{OPS.index(reduce)}:{DTYPES.index(xt.dtype)}:{GROUPS.index(group)}")
    block = b.binary("arith.divsi", d0, size, "index")
    sizes = _slice_sizes(b, x, xt, block)
    zeros, ones = ", ".join(["0"] * len(sizes)), ", ".join(["1"] * len(sizes))
    out = b.assign(f"tensor.extract_slice {done}[{zeros}] [{', '.join(sizes)}] [{ones}] : {xt.mlir()} to {rt.mlir()}",
                   "rs")
    return _mean(b, out, rt, group) if reduce == "mean" else out


def _reduce_scatter(x, op="sum", group="world"):
    try:
        return world().group(group).reduce_scatter(np.asarray(x), op)
    except ValueError as e:  # (the interpreter's message is compiled code's, as for broadcast)
        raise ValueError(str(e)) from None


def _vjp_reduce_scatter(g, op, d):
    reduce = op.attrs["op"]
    if reduce == "max":
        return [None]
    gathered = g.dg_op("allgather", [d], {"group": _group(op)})
    if reduce == "mean":
        n = g.dg_op("cast", [g.dg_op("world_size", [], {"group": _group(op)})], {"dtype": d.tt.dtype})
        gathered = g.dg_op("div", [gathered, n])
    return [gathered]


def _jvp_reduce_scatter(g, op, ts):
    if op.attrs.get("op", "sum") == "max":
        return None
    return _linear_in_x(g, op, ts)


register(OpDef(
    name="allgather", impl=lambda x, group="world": world().group(group).allgather(np.asarray(x)),
    attrs={"group": "str"}, batch=per_example,
    infer=_blocks_rule,
    sample=lambda rng: ([rng.standard_normal((2, 3)).astype(np.float32)], {"group": "world"}),
    doc="""Every process's x joined along axis 0, in rank order, on every process (`allgather(x,
    axis=)` in dg code moves its axis to the front and back). Its gradient is the reduce_scatter
    (sum) of the cotangent.

        %y = "dg.allgather"(%x) {group = "world"} : (tensor<2x3xf32>) -> tensor<?x3xf32>""",
    lower=_through_f32(_lower_allgather),
    vjp=lambda g, op, d: [g.dg_op("reduce_scatter", [d], {"op": "sum", "group": _group(op)})],
    jvp=_linear_in_x, lower_for={"cuda": _cpu_only},
))

register(OpDef(
    name="reduce_scatter", impl=_reduce_scatter, attrs={"op": "str", "group": "str"}, batch=per_example,
    infer=_blocks_rule,
    sample=lambda rng: ([rng.standard_normal((2, 3)).astype(np.float32)], {"op": "sum", "group": "world"}),
    doc="""The sum, mean or max of x over every process, split along axis 0 into as many blocks as
    processes: process k gets block k (axis 0's size must be a multiple of the world's). Its
    gradient is the allgather of the cotangent (divided by the world's size for mean; max passes
    none).

        %y = "dg.reduce_scatter"(%x) {group = "world", op = "sum"} : (tensor<4x3xf32>) -> tensor<?x3xf32>""",
    lower=_through_f32(_lower_reduce_scatter), vjp=_vjp_reduce_scatter, jvp=_jvp_reduce_scatter,
    lower_for={"cuda": _cpu_only},
))


# ------------------------------------------------------------------ all_to_all (axis 0)
def _all_to_all_rule(types, **attrs):
    t = _collective_rule(types, **attrs)
    if not t.shape:
        raise ShapeError(f"all_to_all takes an array of rank 1 or more, got {t}")
    return t


NOT_SPLIT_MESSAGE = "ValueError: " + NOT_SPLIT


def _lower_all_to_all(b, x, xt, op):
    group = _group(op)
    size, _, d0 = _world_sizes(b, x, xt, group)
    left = b.binary("arith.remsi", d0, size, "index")
    fail_if(b, b.cmp("ne", left, b.const(0, "index"), "index"), NOT_SPLIT_MESSAGE, ((d0, "index"), (size, "index")))
    return _marked_copy(b, x, xt, f"all_to_all:0:{DTYPES.index(xt.dtype)}:{GROUPS.index(group)}")


def _all_to_all(x, group="world"):
    try:
        return world().group(group).all_to_all(np.asarray(x))
    except ValueError as e:
        raise ValueError(str(e)) from None


register(OpDef(
    name="all_to_all", impl=_all_to_all, attrs={"group": "str"}, batch=per_example, infer=_all_to_all_rule,
    sample=lambda rng: ([rng.standard_normal((2, 3)).astype(np.float32)], {"group": "world"}),
    doc="""x's axis 0 cut into as many blocks as processes: block k goes to process k, and block k of
    the result is what process k sent this one (axis 0's size must be a multiple of the world's;
    `all_to_all(x, split_axis=, concat_axis=)` in dg code is built on it). Its gradient is the
    all_to_all of the cotangent.

        %y = "dg.all_to_all"(%x) {group = "world"} : (tensor<4x3xf32>) -> tensor<4x3xf32>""",
    lower=_through_f32(_lower_all_to_all, same_shape=True),
    vjp=lambda g, op, d: [g.dg_op("all_to_all", [d], {"group": _group(op)})],
    jvp=_linear_in_x, lower_for={"cuda": _cpu_only},
))


# ------------------------------------------------------------------ send, recv
def _peer_rule(types, **attrs):
    t = _collective_rule(types[:1], **attrs)
    if types[1].dtype != "i64" or types[1].shape:
        raise ShapeError(f"the peer's rank must be an i64 scalar, got {types[1]}")
    return t


def _send_rule(types, **attrs):
    return TensorType(_peer_rule(types, **attrs).dtype, ())


def _send(x, to, group="world"):
    try:
        world().group(group).send(np.asarray(x), int(to))
    except ValueError as e:  # (the interpreter's message is compiled code's, as for broadcast)
        raise ValueError(str(e)) from None
    return np.zeros((), np.asarray(x).dtype)


def _recv(like, frm, group="world"):
    try:
        return world().group(group).recv(np.asarray(like), int(frm))
    except ValueError as e:
        raise ValueError(str(e)) from None


def _peer_check(b, op, peer: str):
    """The peer's rank as an i64, checked to be a rank of the group (and not this process)."""
    group = _group(op)
    p = b.extract(peer, TensorType("i64", ()))
    size = b.extract(_call_i64(b, MPI_SIZE, group), TensorType("i64", ()))
    me = b.extract(_call_i64(b, MPI_RANK, group), TensorType("i64", ()))
    bad = b.binary("arith.ori", b.cmp("uge", p, size, "i64"), b.cmp("eq", p, me, "i64"), "i1")
    fail_if(b, bad, NOT_A_PEER_MESSAGE, ((p, "i64"), (size, "i64")))
    return p


NOT_A_PEER_MESSAGE = "ValueError: " + NOT_A_PEER


def _p2p_call(b, op, symbol: str, t: TensorType, value: str, peer: str, kind: str) -> None:
    """A call of the runtime's send or recv (`symbol`) on `value` (a tensor, or a memref for
    recv), its element type's code, the peer and the group."""
    e = t.element
    name = f"{symbol}_{t.dtype}"
    code = b.const(DTYPES.index(t.dtype), "i32")
    group = b.const(GROUPS.index(_group(op)), "i32")
    if kind == "send":
        u = b.assign(f"tensor.cast {value} : {t.mlir()} to tensor<*x{e}>", "u")
        b.runtime_decls.add(f'func.func private @{name}(i64, i32, i32, tensor<*x{e}> {{bufferization.access = "read"}})')
        b.emit(f"func.call @{name}({peer}, {code}, {group}, {u}) : (i64, i32, i32, tensor<*x{e}>) -> ()")
        return
    m = f"memref<{'x'.join(['?' if not isinstance(d, int) else str(d) for d in t.shape] + [e])}>"
    u = b.assign(f"memref.cast {value} : {m} to memref<*x{e}>", "u")
    b.runtime_decls.add(f"func.func private @{name}(i64, i32, i32, memref<*x{e}>)")
    b.emit(f"func.call @{name}({peer}, {code}, {group}, {u}) : (i64, i32, i32, memref<*x{e}>) -> ()")


def _lower_send(b, op):
    x, xt = op.operands[0], op.types[0]
    peer = _peer_check(b, op, op.operands[1])
    if xt.dtype in HALF:
        x, xt = _as(b, x, xt, "f32")
    fresh = b.empty(xt, [None if isinstance(d, int) else b.dim(x, xt, k) for k, d in enumerate(xt.shape)])
    c = b.assign(f"linalg.copy ins({x} : {xt.mlir()}) outs({fresh} : {xt.mlir()}) -> {xt.mlir()}", "snd")
    _p2p_call(b, op, MPI_SEND, xt, c, peer, "send")
    token = op.types[0].with_shape(())
    return b.assign(f"arith.constant dense<{'0.0' if is_float(token.dtype) else '0'}> : {token.mlir()}", "tok")


def _lower_recv(b, op):
    like, lt = op.operands[0], op.types[0]
    peer = _peer_check(b, op, op.operands[1])
    t = lt.with_dtype("f32") if lt.dtype in HALF else lt
    dims = [b.dim(like, lt, k) for k, d in enumerate(lt.shape) if not isinstance(d, int)]
    m = f"memref<{'x'.join(['?' if not isinstance(d, int) else str(d) for d in t.shape] + [t.element])}>"
    buf = b.assign(f"memref.alloc({', '.join(dims)}) : {m}", "rbuf")
    _p2p_call(b, op, MPI_RECV, t, buf, peer, "recv")
    out = b.assign(f"bufferization.to_tensor {buf} restrict writable : {m} to {t.mlir()}", "rcv")
    return _as(b, out, t, lt.dtype)[0] if lt.dtype in HALF else out


def _vjp_send(g, op, d):
    """A send's adjoint is a receive: the cotangent of what was sent, from the peer."""
    x, to = op.operands
    return [g.dg_op("recv", [g.zeros_like(x), to], {"group": _group(op)}), None]


def _vjp_recv(g, op, d):
    """A receive's adjoint is a send: the cotangent of what was received, back to the peer."""
    like, frm = op.operands
    g.dg_op("send", [d, frm], {"group": _group(op)})
    return [g.zeros_like(like), None]


def _jvp_send(g, op, ts):
    """The tangent travels as the value does (sent after it); the token's tangent is zero."""
    x, to = op.operands
    t = ts[0] if ts[0] is not None else g.zeros_like(x)
    return g.dg_op("send", [t, to], {"group": _group(op)})


def _jvp_recv(g, op, ts):
    like, frm = op.operands
    return g.dg_op("recv", [like, frm], {"group": _group(op)})


register(OpDef(
    name="send", impl=_send, nargs=2, nfixed=2, attrs={"group": "str"}, pure=False, batch=per_example,
    infer=_send_rule,
    doc="""x sent to process `to` of the group (which receives it with recv); gives a token, a 0-d
    zero of x's type. Its gradient receives the cotangent of x from `to`.

        %t = "dg.send"(%x, %to) {group = "world"} : (tensor<2x3xf32>, tensor<i64>) -> tensor<f32>""",
    lower=_lower_send, vjp=_vjp_send, jvp=_jvp_send, lower_for={"cuda": _cpu_only},
))

register(OpDef(
    name="recv", impl=_recv, nargs=2, nfixed=2, attrs={"group": "str"}, pure=False, batch=per_example,
    infer=_peer_rule,
    doc="""What process `frm` of the group sent (with send), shaped and typed as `like` (whose
    values are not read). Its gradient sends the cotangent back to `frm`.

        %y = "dg.recv"(%like, %frm) {group = "world"} : (tensor<2x3xf32>, tensor<i64>) -> tensor<2x3xf32>""",
    lower=_lower_recv, vjp=_vjp_recv, jvp=_jvp_recv, lower_for={"cuda": _cpu_only},
))


# ------------------------------------------------------------------ a reduction started and waited for apart
def _start_rule(types, **attrs):
    t = _collective_rule(types, **attrs)
    if t.dtype in HALF:
        raise ShapeError(f"allreduce_start takes {', '.join(DTYPES)} values, got {t}")
    return t


class _Started:
    """The interpreter's reductions in flight, by the id of the array they are made into."""

    requests: dict = {}


def _start(x, op="sum", group="world"):
    out, req = world().group(group).iallreduce(np.asarray(x), op)
    _Started.requests[id(out)] = (req, out)
    return out


def _wait(x, op="sum", group="world"):
    req, out = _Started.requests.pop(id(x), (None, x))
    if req is not None:
        req.Wait()
    return mean_of(out, world().group(group).size) if op == "mean" else np.array(out, copy=True)


def _lower_start(b, op):
    x, xt = op.operands[0], op.types[0]
    return _marked_copy(b, x, xt, f"iallreduce:{OPS.index(op.attrs['op'])}:{DTYPES.index(xt.dtype)}:"
                                  f"{GROUPS.index(_group(op))}")


def _lower_wait(b, op):
    x, xt = op.operands[0], op.types[0]
    out = _marked_copy(b, x, xt, f"wait:0:{DTYPES.index(xt.dtype)}:{GROUPS.index(_group(op))}")
    return _mean(b, out, xt, _group(op)) if op.attrs["op"] == "mean" else out


register(OpDef(
    name="allreduce_start", impl=_start, attrs={"op": "str", "group": "str"}, pure=False, batch=per_example,
    infer=_start_rule,
    doc="""Starts the allreduce of x (op, group) and gives the buffer it is made in, whose values are
    the reduction's only once allreduce_wait has taken it: the work between the two runs while
    the processes exchange the buffer (MPI_Iallreduce). The pair's gradient is the pair reversed:
    the wait's adjoint starts the reduction of the cotangent, the start's waits for it.

        %p = "dg.allreduce_start"(%x) {group = "world", op = "sum"} : (tensor<3xf32>) -> tensor<3xf32>""",
    lower=_lower_start, lower_for={"cuda": _cpu_only},
    vjp=lambda g, op, d: [g.dg_op("allreduce_wait", [d], dict(op.attrs))], jvp=_linear_in_x,
))

register(OpDef(
    name="allreduce_wait", impl=_wait, attrs={"op": "str", "group": "str"}, pure=False, batch=per_example,
    infer=_start_rule,
    doc="""The allreduce started on buffer p (allreduce_start's result), waited for (op and group as
    it was started with).

        %y = "dg.allreduce_wait"(%p) {group = "world", op = "sum"} : (tensor<3xf32>) -> tensor<3xf32>""",
    lower=_lower_wait, lower_for={"cuda": _cpu_only},
    vjp=lambda g, op, d: [g.dg_op("allreduce_start", [d], dict(op.attrs))], jvp=_linear_in_x,
))
