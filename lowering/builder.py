"""A small text builder for the linalg-level IR that dg ops lower to.

A registry entry's `lower(b, op)` facet receives a `Builder` and a
`LowerOp` (operand names and types, result types, attributes, location)
and returns the SSA names of its results. The builder writes `tensor`,
`linalg`, `arith` and `math` ops as text, so a lowering rule reads like
the IR it makes.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from dg.dsl.types import DTYPES, TensorType


def elt(t: TensorType) -> str:
    return DTYPES[t.dtype][0] if t.dtype not in ("index", "i1") else t.dtype


def signless(mlir_elt: str) -> str:
    """Scalars inside linalg bodies and arith ops are signless: ui64 -> i64."""
    return "i64" if mlir_elt == "ui64" else mlir_elt


def ttype(t: TensorType) -> str:
    if t.dtype in ("index", "i1"):
        return t.dtype
    return t.mlir()


@dataclass
class LowerOp:
    name: str
    operands: list  # SSA names
    types: list  # TensorType per operand
    result_types: list
    attrs: dict
    loc: str  # MLIR location text, e.g. loc("f.dg":3:5)
    loc_id: int = 0  # index of the location in the runtime's table (for checks)
    raw: dict = field(default_factory=dict)  # attribute name -> MLIR text


@dataclass
class Builder:
    lines: list = field(default_factory=list)
    indent: int = 4
    counter: itertools.count = field(default_factory=lambda: itertools.count())
    loc: str = ""
    # Runtime checks: (location text, message) per check id; a failing check
    # calls @dg_rt_fail(id), and the executor raises a located DgRuntimeError.
    checks: list = field(default_factory=list)
    # Host calls (print, breakpoint): (kind, payload) per call id; a call passes
    # its id and at most one value to the executor. Runtime functions declared.
    host_calls: list = field(default_factory=list)
    runtime_decls: set = field(default_factory=set)

    def fresh(self, prefix: str = "t") -> str:
        return f"%{prefix}{next(self.counter)}"

    def emit(self, text: str) -> None:
        self.lines.append(" " * self.indent + text + (f" {self.loc}" if self.loc and not text.endswith("{") else ""))

    # ------------------------------------------------------------ scalars and sizes
    def const(self, value, mlir_elt: str) -> str:
        r = self.fresh("c")
        mlir_elt = signless(mlir_elt)
        if mlir_elt == "index":
            self.emit(f"{r} = arith.constant {int(value)} : index")
        elif mlir_elt == "i1":
            self.emit(f"{r} = arith.constant {'true' if value else 'false'}")
        elif mlir_elt.startswith("i"):
            self.emit(f"{r} = arith.constant {int(value)} : {mlir_elt}")
        else:
            from dg.dialects.registry import _mlir_float

            self.emit(f"{r} = arith.constant {_mlir_float(value, mlir_elt)} : {mlir_elt}")
        return r

    def dim(self, v: str, t: TensorType, axis: int) -> str:
        d = t.shape[axis]
        if isinstance(d, int):
            return self.const(d, "index")
        i = self.const(axis, "index")
        r = self.fresh("d")
        self.emit(f"{r} = tensor.dim {v}, {i} : {ttype(t)}")
        return r

    def extract(self, v: str, t: TensorType) -> str:
        """The element of a 0-d tensor."""
        r = self.fresh("s")
        self.emit(f"{r} = tensor.extract {v}[] : {ttype(t)}")
        return r

    def scalar_tensor(self, s: str, t: TensorType) -> str:
        r = self.fresh()
        self.emit(f"{r} = tensor.from_elements {s} : {ttype(t)}")
        return r

    def empty(self, t: TensorType, sizes: list) -> str:
        """tensor.empty with `sizes` (index SSA names) for the dynamic dims of t, in order."""
        dyn = [s for d, s in zip(t.shape, sizes) if not isinstance(d, int)]
        r = self.fresh("e")
        self.emit(f"{r} = tensor.empty({', '.join(dyn)}) : {ttype(t)}")
        return r

    def slice(self, v: str, t: TensorType, sizes: list) -> str:
        """The leading part of v (a view): `sizes` (index SSA names, None to keep an axis whole)."""
        parts = [str(d) if s is None and isinstance(d, int) else (s or self.dim(v, t, j))
                 for j, (d, s) in enumerate(zip(t.shape, sizes))]
        ones = ", ".join("1" for _ in parts)
        zeros = ", ".join("0" for _ in parts)
        r = self.fresh("sl")
        self.emit(f"{r} = tensor.extract_slice {v}[{zeros}] [{', '.join(parts)}] [{ones}] : {ttype(t)} to {ttype(t)}")
        return r

    def fill(self, t: TensorType, sizes: list, scalar: str) -> str:
        e = self.empty(t, sizes)
        r = self.fresh("f")
        self.emit(f"{r} = linalg.fill ins({scalar} : {signless(elt(t))}) outs({e} : {ttype(t)}) -> {ttype(t)}")
        return r

    def generic(self, out_t: TensorType, out_init: str, inputs: list, in_maps: list, out_map: str,
                iterators: list, body) -> str:
        """linalg.generic; `body(b, args)` returns the yielded scalar (args: input scalars then the output's)."""
        n = len(out_t.shape) if not iterators else len(iterators)
        dims = ", ".join(f"d{i}" for i in range(n))
        maps = ", ".join(f"affine_map<({dims}) -> ({m})>" for m in in_maps + [out_map])
        its = ", ".join(f'"{x}"' for x in iterators)
        r = self.fresh("g")
        ins = ", ".join(v for v, _ in inputs)
        ins_t = ", ".join(ttype(t) for _, t in inputs)
        ins_s = f"ins({ins} : {ins_t}) " if inputs else ""
        self.emit(f"{r} = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{its}]}} "
                  f"{ins_s}outs({out_init} : {ttype(out_t)}) {{")
        args = [self.fresh("a") for _ in inputs] + [self.fresh("o")]
        arg_ts = [signless(elt(t)) for _, t in inputs] + [signless(elt(out_t))]
        self.lines.append(" " * self.indent + "^bb0(" + ", ".join(f"{a}: {t}" for a, t in zip(args, arg_ts)) + "):")
        self.indent += 2
        y = body(self, args)
        self.emit(f"linalg.yield {y} : {signless(elt(out_t))}")
        self.indent -= 2
        self.lines.append(" " * self.indent + f"}} -> {ttype(out_t)} {self.loc}")
        return r

    def binary(self, opname: str, a: str, b: str, ty: str) -> str:
        r = self.fresh("x")
        self.emit(f"{r} = {opname} {a}, {b} : {ty}")
        return r

    def cmp(self, pred: str, a: str, c: str, ty: str) -> str:
        """arith.cmpf for float types (pred like "olt"), else arith.cmpi (pred like "slt")."""
        r = self.fresh("x")
        kind = "cmpf" if ty.startswith("f") or ty == "bf16" else "cmpi"
        self.emit(f"{r} = arith.{kind} {pred}, {a}, {c} : {ty}")
        return r

    def select(self, cond: str, a: str, c: str, ty: str) -> str:
        r = self.fresh("x")
        self.emit(f"{r} = arith.select {cond}, {a}, {c} : {ty}")
        return r

    def unary(self, opname: str, a: str, ty: str) -> str:
        from .approx import APPROX

        if (opname, ty) in APPROX:  # vectorizable float32 exp and tanh instead of libm calls
            return APPROX[opname, ty](self, a)
        r = self.fresh("x")
        self.emit(f"{r} = {opname} {a} : {ty}")
        return r


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
    b.lines.append(" " * b.indent + f"{r} = scf.if {cond} -> ({ty}) {{")
    for k, branch in enumerate((then, other)):
        if k:
            b.lines.append(" " * b.indent + "} else {")
        b.indent += 2
        b.emit(f"scf.yield {branch(b)} : {ty}")
        b.indent -= 2
    b.lines.append(" " * b.indent + "}")
    return r


def fail_if(b: Builder, cond: str, message: str) -> None:
    """When the i1 `cond` holds at run time, report `message` at the current location."""
    cid = len(b.checks)
    b.checks.append((b.loc, message))
    b.runtime_decls.add(STATE_DECL)  # where the CPU's dg_rt_fail records it
    c = b.const(cid, "i64")
    b.lines.append(" " * b.indent + f"scf.if {cond} {{")
    b.indent += 2
    b.emit(f"func.call @dg_rt_fail({c}) : (i64) -> ()")
    b.indent -= 2
    b.lines.append(" " * b.indent + "}")


def stand_in_if(b: Builder, bad: str, v: str, t: TensorType, sizes: dict) -> str:
    """v, or where the i1 `bad` holds (a failed check: the call winds down, then raises) an
    uninitialised tensor of type t, with `sizes` ({axis: index SSA value}) on those axes and v's
    own elsewhere, so that no loop over those sizes reads past v's end."""
    dims = [sizes.get(j) or (None if isinstance(d, int) else b.dim(v, t, j)) for j, d in enumerate(t.shape)]
    return b.select(bad, b.empty(t, dims), v, ttype(t))


def index_in_range(b: Builder, i: str, n: str, what: str, wrap: bool = True) -> str:
    """An i64 index (negative counts from the end, with `wrap`; else it is out of range) checked
    against size n (index); clamped when bad."""
    zero = b.const(0, "index")
    ii = b.fresh("i")
    b.emit(f"{ii} = arith.index_cast {i} : i64 to index")
    j = ii
    if wrap:
        neg = b.cmp("slt", ii, zero, "index")
        wrapped = b.binary("arith.addi", ii, n, "index")
        j = b.select(neg, wrapped, ii, "index")
    lo = b.cmp("slt", j, zero, "index")
    hi = b.cmp("sge", j, n, "index")
    bad = b.binary("arith.ori", lo, hi, "i1")
    fail_if(b, bad, what)
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
    from dg.dsl.types import Sym

    dyn = t.with_shape([Sym() if i in axes else d for i, d in enumerate(t.shape)])

    def stand_in(bb):
        one = bb.const(1, "index")
        return bb.empty(dyn, [one if i in axes else (None if isinstance(d, int) else bb.dim(x, t, i))
                              for i, d in enumerate(t.shape)])

    return if_else(b, empty, ttype(dyn), stand_in, lambda bb: cast(bb, x, t, dyn)), dyn


def cast(b: Builder, v: str, t: TensorType, to: TensorType) -> str:
    """v as type `to` (tensor.cast between static and dynamic sizes), or v if the types agree."""
    if ttype(t) == ttype(to):
        return v
    r = b.fresh("cast")
    b.emit(f"{r} = tensor.cast {v} : {ttype(t)} to {ttype(to)}")
    return r


def host_call(b: "Builder", op: "LowerOp", kind: str, payload) -> None:
    """A call into the executor with this op's id and its value (as an unranked tensor), if it has one."""
    hid = len(b.host_calls)
    b.host_calls.append((kind, payload))
    i = b.const(hid, "i64")
    if not op.operands:
        b.runtime_decls.add("func.func private @dg_rt_host_none(i64) attributes {llvm.emit_c_interface}")
        b.emit(f"func.call @dg_rt_host_none({i}) : (i64) -> ()")
        return
    v, t = op.operands[0], op.types[0]
    e = elt(t)
    u = b.fresh("u")
    b.emit(f"{u} = tensor.cast {v} : {t.mlir()} to tensor<*x{e}>")
    b.runtime_decls.add(f"func.func private @dg_rt_host_{e}(i64, tensor<*x{e}> {{bufferization.access = \"read\"}}) "
                        "attributes {llvm.emit_c_interface}")
    b.emit(f"func.call @dg_rt_host_{e}({i}, {u}) : (i64, tensor<*x{e}>) -> ()")


# The state compiled code shares with its executor, a global of three i64:
# [0] nonzero once a check failed (loops and calls then wind down),
# [1] the stack pointer at the outermost dg call (0 before it),
# [2] how many bytes of stack dg calls may use (set by the executor per call).
STATE = "dg_state"
STATE_DECL = f"memref.global @{STATE} : memref<3xi64> = dense<0>"
# A failed check's id plus one goes into word 0 of the state, the first failure winning: on the
# CPU, `dg_rt_fail` (declared by the lowering) gets this body after bufferization, so that no
# check calls back into Python (deep in a recursion there may be no stack left for that).
FAIL_DEF = (f"{STATE_DECL}\n"  # for the text to parse on its own; the module has it already
            f"func.func private @dg_rt_fail(%id: i64) {{\n"
            f"  %g = memref.get_global @{STATE} : memref<3xi64>\n"
            "  %c0 = arith.constant 0 : index\n"
            "  %z = arith.constant 0 : i64\n"
            "  %one = arith.constant 1 : i64\n"
            "  %cur = memref.load %g[%c0] : memref<3xi64>\n"
            "  %first = arith.cmpi eq, %cur, %z : i64\n"
            "  scf.if %first {\n"
            "    %v = arith.addi %id, %one : i64\n"
            "    memref.store %v, %g[%c0] : memref<3xi64>\n"
            "  }\n"
            "  return\n}\n")
# The stack pointer: declared here, defined after bufferization (which rejects the LLVM intrinsic).
STACK_POINTER = "dg_stack_pointer"
STACK_POINTER_DEF = (f"func.func private @{STACK_POINTER}() -> i64 {{\n"
                     "  %sp = llvm.intr.stacksave : !llvm.ptr\n"
                     "  %i = llvm.ptrtoint %sp : !llvm.ptr to i64\n"
                     "  return %i : i64\n}\n")


def state(b: Builder) -> str:
    b.runtime_decls.add(STATE_DECL)
    g = b.fresh("g")
    b.emit(f"{g} = memref.get_global @{STATE} : memref<3xi64>")
    return g


def _state_word(b: Builder, g: str, i: int) -> str:
    v = b.fresh("w")
    b.emit(f"{v} = memref.load {g}[{b.const(i, 'index')}] : memref<3xi64>")
    return v


def not_failed(b: Builder) -> str:
    """An i1: no check has failed in this call so far."""
    return b.cmp("eq", _state_word(b, state(b), 0), b.const(0, "i64"), "i64")


def entry_guard(b: Builder) -> str:
    """At a function's entry: an i1 telling it to return at once, because a check failed already or
    because the dg calls in progress used up their stack (a located error, not a crash)."""
    g = state(b)
    failed = b.cmp("ne", _state_word(b, g, 0), b.const(0, "i64"), "i64")
    base, budget = _state_word(b, g, 1), _state_word(b, g, 2)
    b.runtime_decls.add(f"func.func private @{STACK_POINTER}() -> i64")
    spi = b.fresh("sp")
    b.emit(f"{spi} = func.call @{STACK_POINTER}() : () -> i64")
    first = b.cmp("eq", base, b.const(0, "i64"), "i64")
    b.lines.append(" " * b.indent + f"scf.if {first} {{")
    b.emit(f"memref.store {spi}, {g}[{b.const(1, 'index')}] : memref<3xi64>")
    b.lines.append(" " * b.indent + "}")
    top = b.select(first, spi, base, "i64")
    deep = b.cmp("sgt", b.binary("arith.subi", top, spi, "i64"), budget, "i64")
    fail_if(b, deep, "recursion too deep (the calls in progress used up the stack dg allows them)")
    return b.binary("arith.ori", failed, deep, "i1")


def placeholder(b: Builder, t: TensorType) -> str:
    """A value of type t (dynamic sizes 1, zeros) returned by a call that stops early."""
    one = b.const(1, "index")
    return b.fill(t, [one] * t.rank, b.const(0, signless(elt(t))))
