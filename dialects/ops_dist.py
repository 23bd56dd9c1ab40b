"""Collectives of data-parallel training (LANGUAGE.md §7): rank, world size, allreduce, broadcast.

The interpreter runs them through mpi4py (`core.mpi`); compiled code calls the MPI library
itself. A collective lowers to a copy of its operand into a fresh buffer (`linalg.copy`, marked
with what to do), which the `mpi-collectives` pass turns, after bufferization, into a call that
reduces or broadcasts that buffer in place (`runtime.collectives` defines the calls). Under a
world of one every collective gives back its operand.
"""
from __future__ import annotations

import numpy as np

from dg.core.abi import MPI_RANK, MPI_SIZE
from dg.core.errors import DgError
from dg.core.mpi import DTYPES, OPS, world
from dg.core.types import ShapeError, TensorType, is_float

from .batch_rules import same_op
from .builder import fail_if
from .helpers import map_generic
from .jvp_rules import linear
from .registry import OpDef, register

COLLECTIVE = "dg.collective"  # the marker on a collective's copy: "allreduce:<op code>:<type code>" or "bcast:<root>:<type code>"


def _cpu_only(b, op):
    raise DgError(f"{op.name}: collectives run on the CPU only (device='cpu'); NCCL for GPUs is planned", b.where)


def _scalar_rule(types):
    return TensorType("i64", ())


def _call_i64(b, symbol: str) -> str:
    b.runtime_decls.add(f"func.func private @{symbol}() -> i64")
    v = b.assign(f"func.call @{symbol}() : () -> i64", "w")
    return b.scalar_tensor(v, TensorType("i64", ()))


register(OpDef(
    name="world_rank", impl=lambda: np.int64(world().rank), nargs=0, nfixed=0, infer=_scalar_rule,
    sample=lambda rng: ([], {}),
    doc="""This process's rank in the MPI world (0 in a world of one).

        %r = "dg.world_rank"() : () -> tensor<i64>""",
    lower=lambda b, op: _call_i64(b, MPI_RANK), lower_for={"cuda": _cpu_only},
))

register(OpDef(
    name="world_size", impl=lambda: np.int64(world().size), nargs=0, nfixed=0, infer=_scalar_rule,
    sample=lambda rng: ([], {}),
    doc="""How many processes the MPI world has (1 without MPI).

        %n = "dg.world_size"() : () -> tensor<i64>""",
    lower=lambda b, op: _call_i64(b, MPI_SIZE), lower_for={"cuda": _cpu_only},
))


HALF = ("f16", "bf16")  # (MPI has no standard type for them: they travel as f32, exactly)


def _collective_rule(types, **attrs):
    t = types[0]
    if t.dtype not in DTYPES + HALF:
        raise ShapeError(f"collectives take {', '.join(DTYPES + HALF)} values, got {t}")
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
    out = _collective(b, op, lambda dt: f"allreduce:{OPS.index(reduce)}:{DTYPES.index(dt)}")
    if isinstance(out, tuple):  # (f16 or bf16: reduced as f32)
        out, t32 = out
        if reduce == "mean":
            out = _mean(b, out, t32)
        return _as(b, out, t32, xt.dtype)[0]
    return _mean(b, out, xt) if reduce == "mean" else out


def _mean(b, out: str, xt: TensorType) -> str:
    """A sum over the world divided by its size (integers with floor division)."""
    n = b.extract(_call_i64(b, MPI_SIZE), TensorType("i64", ()))
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
    return [g.dg_op("allreduce", [d], {"op": reduce})]


def _jvp_allreduce(g, op, ts):
    """sum and mean are linear: the allreduce of the tangents. max gets none, as its VJP passes
    none (so that <u, J t> = <J^T u, t>)."""
    if op.attrs.get("op", "sum") == "max":
        return None
    return _linear_in_x(g, op, ts)


_linear_in_x = linear(0)


register(OpDef(
    name="allreduce", impl=lambda x, op="sum": world().allreduce(np.asarray(x), op), attrs={"op": "str"}, batch=same_op,
    infer=_collective_rule,
    sample=lambda rng: ([rng.standard_normal((3,)).astype(np.float32)], {"op": "sum"}),
    doc="""The elementwise sum, mean or max of x over every process of the world, on every process.
    Its gradient is the allreduce of the cotangent (sum and mean; max passes none).

        %y = "dg.allreduce"(%x) {op = "sum"} : (tensor<3xf32>) -> tensor<3xf32>""",
    lower=_lower_allreduce, vjp=_vjp_allreduce, jvp=_jvp_allreduce, lower_for={"cuda": _cpu_only},
))


NOT_A_RANK = "ValueError: broadcast: root {0} is not a rank of this world of {1} processes"


def _broadcast(x, root=0):
    w = world()
    if not 0 <= root < w.size:
        raise ValueError(NOT_A_RANK.split(": ", 1)[1].format(root, w.size))
    return w.broadcast(np.asarray(x), root)


def _lower_broadcast(b, op):
    xt = op.types[0]
    root = b.const(int(op.attrs.get("root", 0)), "i64")
    size = b.extract(_call_i64(b, MPI_SIZE), TensorType("i64", ()))
    fail_if(b, b.cmp("sge", root, size, "i64"), NOT_A_RANK, ((root, "i64"), (size, "i64")))
    out = _collective(b, op, lambda dt: f"bcast:{int(op.attrs.get('root', 0))}:{DTYPES.index(dt)}")
    return _as(b, *out, xt.dtype)[0] if isinstance(out, tuple) else out


def _vjp_broadcast(g, op, d):
    """Every process's cotangent flows back to the root's x: their sum there, zero elsewhere."""
    total = g.dg_op("allreduce", [d], {"op": "sum"})
    here = g.dg_op("eq", [g.dg_op("world_rank", []), g.dg_op("constant", [], {"value": (
        np.asarray(int(op.attrs.get("root", 0)), np.int64), TensorType("i64", ()))}, result_types=[TensorType("i64", ())])])
    return [g.where(here, total, g.zeros_like(total))]


register(OpDef(
    name="broadcast_from", impl=_broadcast, attrs={"root": "int"}, batch=same_op,
    infer=_collective_rule,
    sample=lambda rng: ([rng.standard_normal((2, 3)).astype(np.float32)], {"root": 0}),
    doc="""x of the process of rank `root`, on every process (`broadcast(x, root)` in dg code).

        %y = "dg.broadcast_from"(%x) {root = 0 : i64} : (tensor<3xf32>) -> tensor<3xf32>""",
    lower=_lower_broadcast, vjp=_vjp_broadcast, jvp=linear(0), lower_for={"cuda": _cpu_only},
))
