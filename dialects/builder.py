"""The builder the lowering rules of dg ops write with, and the pieces they share.

A registry entry's `lower(b, op)` facet receives a `Builder` (the core
writer, with `tensor`, `linalg`, `arith` and `math` ops at hand) and a
`LowerOp` (operand names and types, result types, attributes, location)
and returns the SSA names of its results. Checks that fail at run time
(`fail_if`) and calls into the executor (`host_call`) are numbered here;
the to-linalg pass puts their tables into the module.
"""
from __future__ import annotations

from dataclasses import dataclass

from dg.core.abi import FAIL, FAIL_VALUES, HOST, STATE_DECL
from dg.core.attrs import mlir_float
from dg.core.locations import Loc, loc_row
from dg.core.types import Sym, TensorType
from dg.core.writer import Writer

from .approx import APPROX


@dataclass
class LowerOp:
    name: str
    operands: list  # SSA names
    types: list  # TensorType per operand
    result_types: list
    attrs: dict
    loc: str  # MLIR location text, e.g. loc("f.dg":3:5)
    where: Loc | None  # the `.dg` place it stands for
    raw: dict  # attribute name -> MLIR text


class Builder(Writer):
    def __init__(self):
        super().__init__()
        self.where: Loc | None = None  # the `.dg` place of what is being written (loc's)
        # Runtime checks: [place (a loc_row), message] per check id; a failing check calls
        # @dg_rt_fail(id), and the executor raises a located DgRuntimeError.
        self.checks: list = []
        # Host calls (print, breakpoint): [kind, what the executor needs] per call id; a call
        # passes its id and at most one value to the executor.
        self.host_calls: list = []
        self.runtime_decls: set = set()  # the declarations of the runtime functions called
        self.target = "cpu"  # what the code is for: "cpu" or "cuda" (lowering.to_linalg sets it)

    # ------------------------------------------------------------ scalars and sizes
    def const(self, value, mlir_elt: str) -> str:
        r = self.fresh("c")
        if mlir_elt == "index":
            self.emit(f"{r} = arith.constant {int(value)} : index")
        elif mlir_elt == "i1":
            self.emit(f"{r} = arith.constant {'true' if value else 'false'}")
        elif mlir_elt.startswith("i"):
            self.emit(f"{r} = arith.constant {int(value)} : {mlir_elt}")
        else:
            self.emit(f"{r} = arith.constant {mlir_float(value, mlir_elt)} : {mlir_elt}")
        return r

    def dim(self, v: str, t: TensorType, axis: int) -> str:
        d = t.shape[axis]
        if isinstance(d, int):
            return self.const(d, "index")
        i = self.const(axis, "index")
        return self.assign(f"tensor.dim {v}, {i} : {t.mlir()}", "d")

    def extract(self, v: str, t: TensorType) -> str:
        """The element of a 0-d tensor."""
        return self.assign(f"tensor.extract {v}[] : {t.mlir()}", "s")

    def scalar_tensor(self, s: str, t: TensorType) -> str:
        return self.assign(f"tensor.from_elements {s} : {t.mlir()}")

    def empty(self, t: TensorType, sizes: list) -> str:
        """tensor.empty with `sizes` (index SSA names) for the dynamic dims of t, in order."""
        dyn = [s for d, s in zip(t.shape, sizes) if not isinstance(d, int)]
        return self.assign(f"tensor.empty({', '.join(dyn)}) : {t.mlir()}", "e")

    def slice(self, v: str, t: TensorType, sizes: list) -> str:
        """The leading part of v (a view): `sizes` (index SSA names, None to keep an axis whole)."""
        parts = [str(d) if s is None and isinstance(d, int) else (s or self.dim(v, t, j))
                 for j, (d, s) in enumerate(zip(t.shape, sizes))]
        ones = ", ".join("1" for _ in parts)
        zeros = ", ".join("0" for _ in parts)
        return self.assign(f"tensor.extract_slice {v}[{zeros}] [{', '.join(parts)}] [{ones}] : {t.mlir()} to {t.mlir()}", "sl")

    def fill(self, t: TensorType, sizes: list, scalar: str) -> str:
        e = self.empty(t, sizes)
        return self.assign(f"linalg.fill ins({scalar} : {t.element}) outs({e} : {t.mlir()}) -> {t.mlir()}", "f")

    def generic(self, out_t: TensorType, out_init: str, inputs: list, in_maps: list, out_map: str,
                iterators: list, body) -> str:
        """linalg.generic; `body(b, args)` returns the yielded scalar (args: input scalars then the output's)."""
        n = len(out_t.shape) if not iterators else len(iterators)
        dims = ", ".join(f"d{i}" for i in range(n))
        maps = ", ".join(f"affine_map<({dims}) -> ({m})>" for m in in_maps + [out_map])
        its = ", ".join(f'"{x}"' for x in iterators)
        r = self.fresh("g")
        ins = ", ".join(v for v, _ in inputs)
        ins_t = ", ".join(t.mlir() for _, t in inputs)
        ins_s = f"ins({ins} : {ins_t}) " if inputs else ""
        self.emit(f"{r} = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{its}]}} "
                  f"{ins_s}outs({out_init} : {out_t.mlir()}) {{")
        args = [self.fresh("a") for _ in inputs] + [self.fresh("o")]
        arg_ts = [t.element for _, t in inputs] + [out_t.element]
        self.line("^bb0(" + ", ".join(f"{a}: {t}" for a, t in zip(args, arg_ts)) + "):")
        with self.nested():
            self.emit(f"linalg.yield {body(self, args)} : {out_t.element}")
        self.line(f"}} -> {out_t.mlir()} {self.loc}")
        return r

    def binary(self, opname: str, a: str, b: str, ty: str) -> str:
        return self.assign(f"{opname} {a}, {b} : {ty}", "x")

    def cmp(self, pred: str, a: str, c: str, ty: str) -> str:
        """arith.cmpf for float types (pred like "olt"), else arith.cmpi (pred like "slt")."""
        r = self.fresh("x")
        kind = "cmpf" if ty.startswith("f") or ty == "bf16" else "cmpi"
        self.emit(f"{r} = arith.{kind} {pred}, {a}, {c} : {ty}")
        return r

    def select(self, cond: str, a: str, c: str, ty: str) -> str:
        return self.assign(f"arith.select {cond}, {a}, {c} : {ty}", "x")

    def unary(self, opname: str, a: str, ty: str) -> str:
        if (opname, ty) in APPROX:  # vectorizable float32 exp and tanh instead of libm calls
            return APPROX[opname, ty](self, a)
        return self.assign(f"{opname} {a} : {ty}", "x")


def any_of(b: Builder, conds) -> str | None:
    """The i1 OR of `conds` (None when there are none)."""
    out = None
    for c in conds:
        out = c if out is None else b.binary("arith.ori", out, c, "i1")
    return out


def neither(b: Builder, size: str, want: str) -> str:
    """i1: `size` is neither `want` nor 1 (it cannot be broadcast to `want`)."""
    return b.binary("arith.andi", b.cmp("ne", size, want, "index"), b.cmp("ne", size, b.const(1, "index"), "index"), "i1")


def if_else(b: Builder, cond: str, ty: str, then, other) -> str:
    """An scf.if yielding one value of type `ty`: `then(b)` or `other(b)`, each writing its
    branch and returning the value it yields."""
    r = b.fresh("if")
    b.line(f"{r} = scf.if {cond} -> ({ty}) {{")
    for k, branch in enumerate((then, other)):
        if k:
            b.line("} else {")
        with b.nested():
            b.emit(f"scf.yield {branch(b)} : {ty}")
    b.line("}")
    return r


def fail_if(b: Builder, cond: str, message: str, values: tuple = ()) -> None:
    """When the i1 `cond` holds at run time, report `message` at the current location. `values`
    (at most FAIL_VALUES `index` or integer SSA values) are what the message reports: it names
    them `{0}` and `{1}`, filled in by str.format when the check fails (so `message` has no other
    braces)."""
    assert len(values) <= FAIL_VALUES
    cid = len(b.checks)
    b.checks.append([loc_row(b.where), message, len(values)])
    b.runtime_decls.add(STATE_DECL)  # where the CPU's dg_rt_fail records it
    b.runtime_decls.add(f"func.func private @{FAIL}(i64, i64, i64) attributes {{llvm.emit_c_interface}}")
    c = b.const(cid, "i64")
    b.line(f"scf.if {cond} {{")
    with b.nested():
        words = [_as_i64(b, v) for v in values] + [b.const(0, "i64")] * (FAIL_VALUES - len(values))
        b.emit(f"func.call @{FAIL}({c}, {', '.join(words)}) : (i64, i64, i64) -> ()")
    b.line("}")


def _as_i64(b: Builder, v: tuple) -> str:
    """An (SSA value, type) pair of index or integer type as an i64."""
    v, t = v
    if t == "index":
        return b.assign(f"arith.index_cast {v} : index to i64", "i")
    if t != "i64":
        return b.unary("arith.extsi", v, f"{t} to i64")
    return v


def stand_in_if(b: Builder, bad: str, v: str, t: TensorType, sizes: dict) -> str:
    """v, or where the i1 `bad` holds (a failed check: the call winds down, then raises) an
    uninitialised tensor of type t, with `sizes` ({axis: index SSA value}) on those axes and v's
    own elsewhere, so that no loop over those sizes reads past v's end."""
    dims = [sizes.get(j) or (None if isinstance(d, int) else b.dim(v, t, j)) for j, d in enumerate(t.shape)]
    return b.select(bad, b.empty(t, dims), v, t.mlir())


def index_in_range(b: Builder, i: str, n: str, what: str, wrap: bool = True) -> str:
    """An i64 index (negative counts from the end, with `wrap`; else it is out of range) checked
    against size n (index); clamped when bad. The message `what` names the index `{0}` and the
    size `{1}`."""
    zero = b.const(0, "index")
    ii = b.assign(f"arith.index_cast {i} : i64 to index", "i")
    j = ii
    if wrap:
        neg = b.cmp("slt", ii, zero, "index")
        wrapped = b.binary("arith.addi", ii, n, "index")
        j = b.select(neg, wrapped, ii, "index")
    lo = b.cmp("slt", j, zero, "index")
    hi = b.cmp("sge", j, n, "index")
    bad = b.binary("arith.ori", lo, hi, "i1")
    fail_if(b, bad, what, ((i, "i64"), (n, "index")))
    # Keep memory safe after a failed check: clamp into [0, n-1] (n may be 0).
    top = b.binary("arith.subi", n, b.const(1, "index"), "index")
    c1 = b.binary("arith.minsi", j, top, "index")
    return b.binary("arith.maxsi", c1, zero, "index")


def readable(b: Builder, x: str, t: TensorType, axes) -> tuple:
    """(value, type) to read from with indices clamped by index_in_range on `axes`: x, or, where x
    has size 0 on one of them (then every index there failed its check, and a clamped one is
    still past the end), an uninitialised tensor with size 1 there. The read value is not used:
    the call raises. The tensor is made only then (under scf.if), and its type has those axes
    dynamic."""
    zero = b.const(0, "index")
    empty = any_of(b, [b.const(True, "i1") if isinstance(t.shape[a], int) else b.cmp("eq", b.dim(x, t, a), zero, "index")
                       for a in axes if not (isinstance(t.shape[a], int) and t.shape[a] > 0)])
    if empty is None:
        return x, t
    dyn = t.with_shape([Sym() if i in axes else d for i, d in enumerate(t.shape)])

    def stand_in(bb):
        one = bb.const(1, "index")
        return bb.empty(dyn, [one if i in axes else (None if isinstance(d, int) else bb.dim(x, t, i))
                              for i, d in enumerate(t.shape)])

    return if_else(b, empty, dyn.mlir(), stand_in, lambda bb: cast(bb, x, t, dyn)), dyn


def cast(b: Builder, v: str, t: TensorType, to: TensorType) -> str:
    """v as type `to` (tensor.cast between static and dynamic sizes), or v if the types agree."""
    if t.mlir() == to.mlir():
        return v
    return b.assign(f"tensor.cast {v} : {t.mlir()} to {to.mlir()}", "cast")


def host_call(b: "Builder", op: "LowerOp", kind: str, *payload) -> None:
    """A call into the executor with this op's id and its value (as an unranked tensor), if it has
    one; `kind` and `payload` (literals) tell the executor what to do with it."""
    hid = len(b.host_calls)
    b.host_calls.append([kind, *payload])
    i = b.const(hid, "i64")
    if not op.operands:
        b.runtime_decls.add(f"func.func private @{HOST}none(i64) attributes {{llvm.emit_c_interface}}")
        b.emit(f"func.call @{HOST}none({i}) : (i64) -> ()")
        return
    v, t = op.operands[0], op.types[0]
    e = t.element
    u = b.assign(f"tensor.cast {v} : {t.mlir()} to tensor<*x{e}>", "u")
    b.runtime_decls.add(f"func.func private @{HOST}{e}(i64, tensor<*x{e}> {{bufferization.access = \"read\"}}) "
                        "attributes {llvm.emit_c_interface}")
    b.emit(f"func.call @{HOST}{e}({i}, {u}) : (i64, tensor<*x{e}>) -> ()")
