"""Collectives (LANGUAGE.md §7): rank, world size, allreduce, broadcast, allgather, reduce_scatter.

The interpreter runs them through mpi4py (`core.mpi`); compiled code calls the MPI library
itself. A collective lowers to a copy of its operand into a fresh buffer (`linalg.copy`, marked
with what to do), which the `mpi-collectives` pass turns, after bufferization, into a call that
reduces, broadcasts or gathers into that buffer in place (`runtime.collectives` defines the
calls): an allgather's buffer is the world's size times its operand, the operand already at
this rank's block; a reduce_scatter's buffer is its operand, whose first block is the result.
Under a world of one every collective gives back its operand.

Gradients are transposes, as for allreduce: the gradient of the sum of every process's
result. allgather's is the reduce_scatter (sum) of its cotangent, reduce_scatter's the
allgather of its cotangent (divided by the world's size for "mean"; "max" passes none).
"""
from __future__ import annotations

import numpy as np

from dg.core.abi import MPI_RANK, MPI_SIZE
from dg.core.errors import DgError
from dg.core.mpi import DTYPES, GROUPS, NOT_DIVISIBLE, NOT_SPLIT, OPS, world
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


def _through_f32(lower):
    """A lowering of f16 and bf16 values through f32 (MPI has no type for them), exactly."""
    def lowered(b, op):
        x, xt = op.operands[0], op.types[0]
        if xt.dtype not in HALF:
            return lower(b, x, xt, op)
        x32, t32 = _as(b, x, xt, "f32")
        out = lower(b, x32, t32, op)
        return _as(b, out, TensorType("f32", (Sym(),) + tuple(t32.shape[1:])), xt.dtype)[0]
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


def _same_shape_through_f32(lower):
    """A lowering of f16 and bf16 values through f32 for a collective that keeps its shape."""
    def lowered(b, op):
        x, xt = op.operands[0], op.types[0]
        if xt.dtype not in HALF:
            return lower(b, x, xt, op)
        x32, t32 = _as(b, x, xt, "f32")
        return _as(b, lower(b, x32, t32, op), t32, xt.dtype)[0]
    return lowered


register(OpDef(
    name="all_to_all", impl=_all_to_all, attrs={"group": "str"}, batch=per_example, infer=_all_to_all_rule,
    sample=lambda rng: ([rng.standard_normal((2, 3)).astype(np.float32)], {"group": "world"}),
    doc="""x's axis 0 cut into as many blocks as processes: block k goes to process k, and block k of
    the result is what process k sent this one (axis 0's size must be a multiple of the world's;
    `all_to_all(x, split_axis=, concat_axis=)` in dg code is built on it). Its gradient is the
    all_to_all of the cotangent.

        %y = "dg.all_to_all"(%x) {group = "world"} : (tensor<4x3xf32>) -> tensor<4x3xf32>""",
    lower=_same_shape_through_f32(_lower_all_to_all),
    vjp=lambda g, op, d: [g.dg_op("all_to_all", [d], {"group": _group(op)})],
    jvp=_linear_in_x, lower_for={"cuda": _cpu_only},
))
