"""Reverse-mode autodiff: a pass on dg IR (`dg opt --passes autodiff`).

Expects: a verified dg module in which gradient requests are function
declarations carrying `dg.kind` ("grad", "value_and_grad", "vjp", "jvp" or
"checkpoint", which carries `dg.slots` too),
`dg.of` (the function differentiated) and `dg.wrt` (argument indices);
the emitter makes these for `grad(f)(...)` and friends, and calls them with
`func.call`. Guarantees: every such declaration gets a body, and the module
comes back as dg IR (text) that both the interpreter and the compiled
backends run; no other function changes.

How a function f is differentiated (`f__vjp_<mask>(args, cotangents) ->
(results, gradients)`):
- A forward sweep copies f's body. Each `scf.for` at the level being swept
  also pushes its loop-carried values to tapes (`dg.tape_alloc`/`dg.tape_push`,
  one row per iteration). A `scf.while` runs as it is, counting its
  iterations, then again as an `scf.for` that tapes them (MLIR copies what a
  while loop carries on every iteration: a tape carried so would cost time
  and memory quadratic in the trip count).
- A reverse sweep walks the ops backwards and calls each op's `vjp` facet
  (dg IR builders in its registry entry); the pass sums broadcast axes
  away ("unbroadcasting") and adds up fan-out, once for all ops.
- `scf.if`: the reverse is an `scf.if` on the same condition (the branch
  taken); each branch recomputes its forward, then runs its reverse.
- Loops: the reverse is an `scf.for` counting down the iterations; each
  iteration reads its carried values back (`dg.tape_read`), recomputes the
  body forward (taping the loops nested in it), and runs the body's reverse.
  What the body yields is the next row of the tape (a `for` tapes its final
  values too), so the reverse reads it there and the ops that made it are
  not recomputed (canonicalize removes them once unused).
  Adjoints of values from outside the loop are carried through it.
  `break`/`continue`/early `return` are flags in the carried values, so
  they need nothing of their own.
- `func.call g`: the reverse calls `g__vjp_<mask>`, which recomputes g's
  forward; recursion works because the callee's gradient function is named
  before it is made.
- Only active values get adjoints: floats that depend on a differentiated
  argument. Integers, bools and `stop_gradient` results are inactive.
- Higher orders: a gradient function is dg IR like any other and is
  differentiated in turn. Its tapes are appended to, a row per iteration, so
  its loops need no tape of their own for them: the reverse sweep takes the
  tape's final value, which holds every row (`slot_appends`).
Every backward op carries the location of the forward op it differentiates, marked as a
gradient's (`core.locations.backward_loc`).
Forward mode (`jvp` declarations) is lowering/forward_mode.py, and `checkpoint(f, slots=c)`'s
loops lowering/checkpointing.py: both are mixed into the `Autodiff` class of this pass.
"""
from __future__ import annotations

import itertools

import numpy as np

from dg.core.attrs import attr_text
from dg.core.errors import DgError, DgTypeError
from dg.core.locations import backward_loc, loc_of
from dg.core.types import TensorType, is_float
from dg.core.writer import Value, Writer, module_text
from dg.dialects.dialect import parse
from dg.dialects.registry import OPS

from .checkpointing import Checkpointing
from .forward_mode import ForwardMode
from .irmodel import Block, Func, Op, read_module

TERMINATORS = ("scf.yield", "scf.condition", "func.return")
EFFECTS = ("print", "breakpoint", "assert", "check")  # not repeated when a forward is recomputed
INACTIVE = ("stop_gradient", "zeros_like", "tape_alloc")


def _float(v: Value) -> bool:
    return v.tt.dtype not in ("index", "i1") and is_float(v.tt.dtype)


def _ints(text: str) -> tuple:
    """`array<i64: 0, 2>` -> (0, 2)."""
    body = text.split(":", 1)[1].rstrip(">") if ":" in text else ""
    return tuple(int(x) for x in body.split(",") if x.strip())


def _str(text: str) -> str:
    return text.strip().strip('"')


# ---------------------------------------------------------------- activity
def _walk_ops(block: Block):
    for op in block.ops:
        yield op
        for r in op.regions:
            yield from _walk_ops(r)


def free_values(blocks: list) -> list:
    """Values used inside `blocks` (nested regions included) but defined outside them, in first-use order."""
    defined, used = set(), {}
    for b in blocks:
        defined.update(b.args)
        for op in _walk_ops(b):
            defined.update(op.results)
            for r in op.regions:
                defined.update(r.args)
    for b in blocks:
        for op in _walk_ops(b):
            for o in op.operands:
                if o not in defined:
                    used.setdefault(o, None)
    return list(used)


def passed_on(v: Value, block: Block, exits: set) -> bool:
    """Whether `block` only hands `v` on: as an operand of its terminator at an index in `exits`,
    or through an scf.if that yields it and whose result is handed on the same way. No op reads
    it."""
    for op in block.ops:
        if op.name in TERMINATORS:
            if any(o is v and i not in exits for i, o in enumerate(op.operands)):
                return False
        elif op.name == "scf.if":
            if op.operands[0] is v:
                return False
            for r in op.regions:
                yielded = {j for j, o in enumerate(r.ops[-1].operands) if o is v}
                if not passed_on(v, r, yielded):
                    return False
                if not all(passed_on(op.results[j], block, exits) for j in yielded):
                    return False
        elif op.name in ("scf.for", "scf.while") and v in op.operands:
            first = 3 if op.name == "scf.for" else 0
            slots = [p - first for p, o in enumerate(op.operands) if o is v]
            if any(i < 0 or not slot_passed_on(op, i) or not passed_on(op.results[i], block, exits) for i in slots):
                return False
            if v in free_values(op.regions):
                return False
        elif v in op.operands or (op.regions and v in free_values(op.regions)):
            return False
    return True


def _pushed_on(a: Value, block: Block, exit_at: int) -> bool:
    """Whether `block` uses `a` only as the tape of one dg.tape_push whose result only goes to
    its terminator's operand `exit_at`."""
    users = [op for op in block.ops if a in op.operands or (op.regions and a in free_values(op.regions))]
    if len(users) != 1 or users[0].dg != "tape_push" or users[0].operands[0] is not a or a in users[0].operands[1:]:
        return False
    r = users[0].results[0]
    t = block.ops[-1]
    return all(u is t for u in (op for op in block.ops if r in op.operands
                                 or (op.regions and r in free_values(op.regions)))) \
        and [j for j, o in enumerate(t.operands) if o is r] == [exit_at]


def slot_appends(op: Op, i: int) -> bool:
    """Whether a loop's carried value `i` is a tape the loop only appends to (a gradient's forward
    loop, differentiated again): one dg.tape_push per iteration, of the row the iteration counts.
    Its final value holds every row each iteration saw, so it needs no tape of its own."""
    if op.name == "scf.for":
        body = op.regions[0]
        return _pushed_on(body.args[1 + i], body, i)
    before, after = op.regions
    return _pushed_on(before.args[i], before, i + 1) and passed_on(after.args[i], after, {i})


def slot_passed_on(op: Op, i: int) -> bool:
    """Whether a loop's body only hands its carried value `i` on, from iteration to iteration."""
    if op.name == "scf.for":
        body = op.regions[0]
        return passed_on(body.args[1 + i], body, {i})
    before, after = op.regions
    return passed_on(before.args[i], before, {i + 1}) and passed_on(after.args[i], after, {i})


def activity(body: Block, seeds: set) -> set:
    """Floats that depend on the seeds (a fixpoint over loops)."""
    active = set(seeds)

    def mark(vals, flags):
        changed = False
        for v, f in zip(vals, flags):
            if f and _float(v) and v not in active:
                active.add(v)
                changed = True
        return changed

    def block(b: Block) -> bool:
        changed = False
        for op in b.ops:
            changed |= one(op)
        return changed

    def terminator(b: Block) -> Op:
        return b.ops[-1]

    def one(op: Op) -> bool:
        changed = False
        if op.name == "scf.if":
            for r in op.regions:
                changed |= block(r)
            for r in op.regions:
                changed |= mark(op.results, [o in active for o in terminator(r).operands])
            return changed
        if op.name == "scf.for":
            body_ = op.regions[0]
            while True:
                c = mark(body_.args[1:], [o in active for o in op.operands[3:]])
                c |= block(body_)
                c |= mark(body_.args[1:], [o in active for o in terminator(body_).operands])
                changed |= c
                if not c:
                    break
            changed |= mark(op.results, [a in active for a in body_.args[1:]])
            return changed
        if op.name == "scf.while":
            before, after = op.regions
            while True:
                c = mark(before.args, [o in active for o in op.operands])
                c |= block(before)
                cond = terminator(before).operands[1:]
                c |= mark(after.args, [o in active for o in cond])
                c |= block(after)
                c |= mark(before.args, [o in active for o in terminator(after).operands])
                changed |= c
                if not c:
                    break
            changed |= mark(op.results, [o in active for o in terminator(before).operands[1:]])
            return changed
        if op.dg in INACTIVE:
            return False
        if any(o in active for o in op.operands):
            changed |= mark(op.results, [True] * len(op.results))
        return changed

    while block(body):
        pass
    return active


# ---------------------------------------------------------------- the pass
class OpView:
    """What a VJP or JVP rule sees: the forward op's name, values (in the function being
    written), types and attributes."""

    def __init__(self, op: Op, env: dict):
        self.name = op.dg
        self.operands = [env[o] for o in op.operands]
        self.results = [env[r] for r in op.results]
        self.types = [o.tt for o in op.operands]
        self.result_types = [r.tt for r in op.results]
        self.attrs = op.py
        self.where = loc_of(op.location)


class VjpBuilder(Writer):
    """The writer VJP rules build with: dg ops (their result types from the registry's rules),
    constants, zeros, and the pieces of unbroadcasting."""

    def __init__(self, counter=None, indent: int = 4):
        super().__init__(counter, indent)
        self.rows: dict = {}  # one_row's adjoints: (row index, row), for Autodiff.accumulate

    def one_row(self, tape: Value, k: Value, row: Value) -> Value:
        """An adjoint shaped as `tape` that is zero but for row k (an index), which is `row`.
        Added to an adjoint the tape already has (Autodiff.accumulate), only that row is added:
        a tape read in a loop's body would else add a whole tape of zeros per iteration."""
        d = self.dg_op("tape_push", [self.zeros_like(tape), k, row])
        self.rows[d] = (k, row)
        return d

    def dg_op(self, opname: str, operands: list, attrs: dict | None = None, result_types: list | None = None):
        """A dg op; its result types from the registry's rule unless given. One result -> a Value."""
        opdef = OPS[opname]
        attrs = dict(attrs or {})
        if result_types is None:
            rt = opdef.infer([o.tt for o in operands], **attrs)
            result_types = rt if isinstance(rt, list) else [rt]
        text = {k: attr_text(opdef.attrs[k], v) for k, v in attrs.items()}
        res = self.op(f"dg.{opname}", operands, result_types, text)
        return res[0] if len(res) == 1 else res

    def const(self, value, like: Value | TensorType) -> Value:
        t = like.tt if isinstance(like, Value) else like
        t = TensorType(t.dtype, ())
        return self.dg_op("constant", [], {"value": (np.asarray(value), t)}, result_types=[t])

    def zeros_like(self, v: Value) -> Value:
        return self.dg_op("zeros_like", [v])

    def add(self, a, b):
        return self.dg_op("add", [a, b])

    def sub(self, a, b):
        return self.dg_op("sub", [a, b])

    def mul(self, a, b):
        return self.dg_op("mul", [a, b])

    def div(self, a, b):
        return self.dg_op("div", [a, b])

    def neg(self, a):
        return self.dg_op("neg", [a])

    def where(self, c, a, b):
        return self.dg_op("where", [c, a, b])

    def dim(self, x: Value, axis: int) -> Value:
        return self.dg_op("dim", [x], {"axis": axis})

    def bcast(self, d: Value, x: Value) -> Value:
        """d broadcast to x's shape (sizes taken from x at run time)."""
        if d.tt.shape == x.tt.shape and all(isinstance(s, int) for s in x.tt.shape):
            return d
        return self.add(self.zeros_like(x), d)

    def unreduce(self, d: Value, x: Value, axes, keepdims: bool) -> Value:
        """The adjoint of a reduction of x over `axes`, broadcast back to x's shape."""
        axes = tuple(axes)
        if not keepdims and axes:
            d = self.dg_op("expand_dims", [d], {"axes": axes})
        return self.bcast(d, x)

    def count(self, x: Value, axes) -> Value:
        """How many elements a reduction over `axes` combines, as a scalar of x's dtype."""
        n = self.const(1.0, x)
        for a in axes:
            n = self.mul(n, self.dg_op("cast", [self.dim(x, a)], {"dtype": x.tt.dtype}))
        return n

    def transpose_last(self, x: Value) -> Value:
        r = x.tt.rank
        return self.dg_op("transpose", [x], {"perm": tuple(range(r - 2)) + (r - 1, r - 2)})

    def onehot(self, labels: Value, like: Value, axis: int) -> Value:
        """A float tensor shaped like `like`: 1 where the index along `axis` equals the label."""
        n = like.tt.shape[axis]
        zero, one = (self.const(v, labels) for v in (0, 1))
        stop = self.dg_op("cast", [self.dim(like, axis)], {"dtype": labels.tt.dtype})
        ar = self.dg_op("arange", [zero, stop, one], {"size": n if isinstance(n, int) else -2,
                                                    "dtype": labels.tt.dtype})
        hit = self.dg_op("eq", [self.dg_op("expand_dims", [labels], {"axes": (labels.tt.rank,)}), ar])
        return self.dg_op("cast", [hit], {"dtype": like.tt.dtype})

    def sum_to(self, d: Value, t: TensorType) -> Value:
        """Undo broadcasting: sum d over the axes that broadcasting added or stretched, to type t."""
        ds = d.tt.shape
        lead = len(ds) - len(t.shape)
        if lead > 0:
            d = self.dg_op("sum", [d], {"axes": tuple(range(lead)), "keepdims": False})
        stretched = tuple(i for i, (a, b) in enumerate(zip(d.tt.shape, t.shape))
                          if isinstance(b, int) and b == 1 and not (isinstance(a, int) and a == 1))
        if stretched:
            d = self.dg_op("sum", [d], {"axes": stretched, "keepdims": True})
        if d.tt.dtype != t.dtype:
            d = self.dg_op("cast", [d], {"dtype": t.dtype})
        return d


class Autodiff(ForwardMode, Checkpointing):
    activity_of = staticmethod(activity)
    is_float = staticmethod(_float)
    free_values = staticmethod(free_values)
    op_view = OpView

    def __init__(self, funcs: list[Func]):
        self.funcs = {f.sym: f for f in funcs}
        self.order = [f.sym for f in funcs]
        self.counter = itertools.count()
        self.vjps: dict = {}  # (symbol, mask) or ("jvp", symbol, mask) -> gradient function name
        self.texts: dict = {}  # symbol -> function text, for every function written
        self.defining: set = set()
        self.placeholders: set = set()  # results of dg.undef: the slot of a value not given yet
        self.untaped_slots: dict = {}  # loop op -> untaped(op)
        self.appended_slots: dict = {}  # loop op -> the untaped slots that are tapes it appends to
        self.tapes: set = set()  # results of dg.tape_alloc
        self.note_placeholders(funcs)
        self.checkpoints = {f.sym: (_str(f.attrs["dg.of"]).lstrip("@"), int(f.attrs["dg.slots"].split(":")[0]))
                            for f in funcs if _str(f.attrs.get("dg.kind", "")) == "checkpoint"}

    def note_placeholders(self, funcs) -> None:
        """The placeholders and tapes in `funcs`, whose loop slots `untaped` looks for."""
        for f in funcs:
            if f.body is not None:
                for op in _walk_ops(f.body):
                    if op.dg in ("undef", "tape_alloc"):
                        (self.placeholders if op.dg == "undef" else self.tapes).update(op.results)

    def untaped(self, op: Op) -> set:
        """The positions of a loop's carried values that need no tape: an early return's slot,
        which starts as a placeholder (dg.undef) and which the body only hands on (or replaces
        as it returns; a loop inside may hand it on in turn). Until the loop's last step it holds
        the placeholder, which the reverse sweep uses in its place; a tape would see it change
        size when the value comes (a returned value whose size no parameter gives). And a tape
        the loop appends to (`slot_appends`): the reverse sweep uses its final value, which
        holds every row an iteration reads. Taping it would keep a copy per iteration, and see it
        change size as it grows. Worked out once per loop (the reverse sweep records a loop again
        for each step around it)."""
        skip = self.untaped_slots.get(op)
        if skip is None:
            inits = op.operands[3:] if op.name == "scf.for" else op.operands
            appended = self.appended_slots[op] = {i for i, o in enumerate(inits)
                                                  if o in self.tapes and slot_appends(op, i)}
            skip = self.untaped_slots[op] = appended | {i for i, o in enumerate(inits)
                                                        if o in self.placeholders and slot_passed_on(op, i)}
            for i in skip - appended:  # a loop inside gets the slot as its placeholder in turn
                for r in op.regions:
                    self.placeholders.add(r.args[1 + i if op.name == "scf.for" else i])
        return skip

    def untaped_value(self, op: Op, i: int, env: dict) -> Value:
        """What the reverse sweep takes for a loop's untaped slot i in every iteration: the tape's
        final value, or the placeholder."""
        if i in self.appended_slots[op]:
            return env[op.results[i]]
        return env[(op.operands[3:] if op.name == "scf.for" else op.operands)[i]]

    @staticmethod
    def by_slot(skip: set, n: int, tapes: list) -> list:
        """The tapes of a loop's n carried values, None at the untaped ones."""
        taped = iter(tapes)
        return [None if i in skip else next(taped) for i in range(n)]

    # ------------------------------------------------------------ module level
    def run(self) -> str:
        for sym in list(self.order):
            f = self.funcs[sym]
            if f.body is None and "dg.kind" in f.attrs:
                self.define(sym)
        return self.module_text()

    def module_text(self) -> str:
        """The whole module as it stands: originals not written yet are copied, declarations kept."""
        for sym in self.order:
            if sym not in self.texts and self.funcs[sym].body is not None:
                self.texts[sym] = self.copy_function(self.funcs[sym])
        decls = [self.declaration(self.funcs[s]) for s in self.order
                 if self.funcs[s].body is None and s not in self.texts]
        return module_text(decls + list(self.texts.values()))

    def declaration(self, f: Func) -> str:
        attrs = ", ".join(f"{k} = {v}" for k, v in f.attrs.items())
        return (f"  func.func private @{f.sym}({', '.join(a.type for a in f.args)}) -> "
                f"({', '.join(f.result_types)}){' attributes {' + attrs + '}' if attrs else ''} {f.loc}")

    def new_writer(self) -> VjpBuilder:
        return VjpBuilder(self.counter)

    @staticmethod
    def function_text(sym: str, args: list, result_types: list, loc: str, w: VjpBuilder, sizes: str | None = None) -> str:
        """`sizes`: the copied function's `dg.sizes` attribute text (dsl/emit.py), if it has one."""
        extra = f" attributes {{dg.sizes = {sizes}}}" if sizes else ""
        head = (f"  func.func @{sym}({', '.join(f'{a.name}: {a.type} {loc}' for a in args)}) -> "
                f"({', '.join(result_types)}){extra} {{")
        return "\n".join([head] + w.lines + [f"  }} {loc}"])

    def start(self, f: Func):
        """A writer for a new function with f's parameters: (writer, env mapping f's args, new args)."""
        w = self.new_writer()
        args = [w.value(a.type, "arg") for a in f.args]
        return w, dict(zip(f.args, args)), args

    def copy_function(self, f: Func) -> str:
        w, env, args = self.start(f)
        self.forward(f.body, env, w, record=False, effects=True)
        ret = f.body.ops[-1]
        w.loc = ret.loc
        w.op("func.return", [env[o] for o in ret.operands], [])
        return self.function_text(f.sym, args, f.result_types, f.loc, w, f.attrs.get("dg.sizes"))

    def define(self, sym: str) -> None:
        """Give a gradient declaration its body: a call of the callee's gradient function."""
        if sym in self.texts or sym in self.defining:
            return
        self.defining.add(sym)
        f = self.funcs[sym]
        kind, of, wrt = _str(f.attrs["dg.kind"]), _str(f.attrs["dg.of"]).lstrip("@"), _ints(f.attrs["dg.wrt"])
        target = self.funcs.get(of)
        if target is None:
            raise DgError(f"{sym}: the function '{of}' to differentiate is not in the module")
        if target.body is None:
            self.define(of)
        w, _, args = self.start(f)
        w.loc = f.loc
        if kind == "checkpoint":  # outside gradients, the function itself
            w.op("func.return", w.op("func.call", args, list(target.result_types), {"callee": f"@{of}"}), [])
            self.texts[sym] = self.function_text(sym, args, f.result_types, f.loc, w)
            return
        n = len(target.args)
        primals = args[:n]
        float_results = [i for i, t in enumerate(target.result_types) if _float(Value(t))]
        if kind == "jvp":
            core = self.jvp_function(of, tuple(wrt))
            out_types = list(target.result_types) + [target.result_types[i] for i in float_results]
            outs = w.op("func.call", args, out_types, {"callee": f"@{core}"})
            w.op("func.return", outs, [])
            self.texts[sym] = self.function_text(sym, args, f.result_types, f.loc, w)
            return
        if kind == "vjp":
            cts = args[n:]
        else:
            if len(target.result_types) != 1 or not float_results or Value(target.result_types[0]).tt.rank:
                raise DgTypeError(f"{kind}() needs a function that returns one float scalar; "
                                  f"'{of}' returns ({', '.join(target.result_types)})", loc_of(f.location))
            cts = [w.const(1.0, Value(target.result_types[0]).tt)]
        core = self.vjp_function(of, tuple(wrt))
        out_types = list(target.result_types) + [target.args[i].type for i in wrt]
        outs = w.op("func.call", primals + cts, out_types, {"callee": f"@{core}"})
        values, grads = outs[:len(target.result_types)], outs[len(target.result_types):]
        ret = grads if kind in ("grad", "vjp") else values + grads
        w.op("func.return", ret, [])
        self.texts[sym] = self.function_text(sym, args, f.result_types, f.loc, w)

    # ------------------------------------------------------------ gradient functions
    def checkpointed(self, sym: str):
        """(the function, its slot count) when `sym` is a `checkpoint(f, slots=c)` declaration."""
        return self.checkpoints.get(sym)

    def derived(self, key, sym: str, tag: str, mask: tuple, what: str) -> tuple:
        """(name, function) for a function derived from `sym` (`sym__TAG_<mask>`, with `_ck<c>` when
        its loops are checkpointed), named before it is made (so that recursion finds it); `sym`
        defined and read back first when it is a declaration (a gradient differentiated again)."""
        name = f"{sym}__{tag}_{'_'.join(map(str, mask)) if mask else 'none'}"
        name += f"_ck{self.slots}" if self.slots and tag == "vjp" else ""
        while name in self.funcs or name in self.texts:
            name += "_"
        self.vjps[key] = name
        f = self.funcs[sym]
        if f.body is None:
            self.define(sym)
            f = self.funcs[sym] = self.reread(sym)
        for i in mask:
            if not _float(f.args[i]):
                raise DgTypeError(f"cannot {what} argument {i} of '{sym}': it is {f.args[i].type}, not a float",
                                  loc_of(f.location))
        return name, f

    def vjp_function(self, sym: str, mask: tuple) -> str:
        ck = self.checkpointed(sym)
        if ck is not None:  # the function's gradient, its loops checkpointed
            saved, self.slots = self.slots, ck[1] or self.slots
            try:
                return self.vjp_function(ck[0], mask)
            finally:
                self.slots = saved
        key = (sym, mask, self.slots)
        if key in self.vjps:
            return self.vjps[key]
        name, f = self.derived(key, sym, "vjp", mask, "differentiate with respect to")
        w, env, args = self.start(f)
        ret = f.body.ops[-1]
        float_results = [i for i, o in enumerate(ret.operands) if _float(o)]
        cts = [w.value(ret.operands[i].type, "ct") for i in float_results]
        self.active = activity(f.body, {f.args[i] for i in mask})
        info = self.forward(f.body, env, w, record=True, effects=True)
        results = [env[o] for o in ret.operands]
        adj: dict = {}
        for i, ct in zip(float_results, cts):
            if ret.operands[i] in self.active:
                self.accumulate(w, adj, ret.operands[i], ct, env[ret.operands[i]])
        self.reverse(f.body, env, adj, w, info)
        w.loc = f.loc
        grads = [adj[f.args[i]] if f.args[i] in adj else w.zeros_like(env[f.args[i]]) for i in mask]
        w.op("func.return", results + grads, [])
        out_types = f.result_types + [f.args[i].type for i in mask]
        self.texts[name] = self.function_text(name, args + cts, out_types, f.loc, w)
        return name

    def reread(self, sym: str) -> Func:
        """A function the pass wrote (a gradient), read back so that it can be differentiated in turn."""
        m = parse(self.module_text())
        for f in read_module(m):
            if f.sym not in self.funcs or self.funcs[f.sym].body is None:
                self.funcs[f.sym] = f  # gradient functions, so that they can be differentiated in turn
                self.note_placeholders([f])
        return self.funcs[sym]

    def accumulate(self, w: VjpBuilder, adj: dict, v: Value, d: Value, like: Value) -> None:
        """Add the adjoint d to v's; `like` is v's value in the gradient function. A d broadcast
        from v is summed to v's shape; one whose type still fixes a size that v's leaves open (or
        the other way round: `f32[?] * f32[2]` gives the first operand an adjoint of f32[2]) takes
        v's type through dg.sum_to, which checks the sizes at run time."""
        if d.tt.shape != v.tt.shape or d.tt.dtype != v.tt.dtype:
            d = w.sum_to(d, v.tt)
            if d.tt.mlir() != v.tt.mlir():
                d = w.dg_op("sum_to", [d, like])
        row = w.rows.get(d)
        if v in adj and row is not None and d.type == adj[v].type:  # (the zeros and the push made for d go unused)
            k, r = row
            adj[v] = w.dg_op("tape_push", [adj[v], k, w.add(w.dg_op("tape_read", [adj[v], k]), r)])
            return
        adj[v] = w.add(adj[v], d) if v in adj else d

    # ------------------------------------------------------------ forward sweep
    def forward(self, block: Block, env: dict, w: VjpBuilder, record: bool, effects: bool) -> dict:
        """Copy the ops of `block` (its terminator excepted); with `record`, loops at this level are taped."""
        info = {}
        for op in block.ops:
            if op.name in TERMINATORS:
                continue
            w.loc = op.loc
            if op.dg in EFFECTS and not effects:
                continue
            if op.name == "scf.for" and record:
                info[op] = (self.forward_for_checkpointed if self.slots else self.forward_for)(op, env, w)
            elif op.name == "scf.while" and record:
                info[op] = self.forward_while(op, env, w)
            elif op.regions:
                self.copy_region_op(op, env, w, effects)
            else:
                res = w.op(op.name, [env[o] for o in op.operands], [r.type for r in op.results], op.attrs)
                env.update(zip(op.results, res))
        return info

    def copy_region_op(self, op: Op, env: dict, w: VjpBuilder, effects: bool) -> None:
        def region(b: Block):
            def write(w2):
                args = []
                for a in b.args:
                    env[a] = w2.value(a.type, "a")
                    args.append(env[a])
                if op.name != "scf.if":
                    w2.block_header(args)
                self.forward(b, env, w2, record=False, effects=effects)
                t = b.ops[-1]
                w2.loc = t.loc
                w2.op(t.name, [env[o] for o in t.operands], [], t.attrs)
            return write

        w.loc = op.loc
        res = w.op(op.name, [env[o] for o in op.operands], [r.type for r in op.results], op.attrs,
                   regions=[region(b) for b in op.regions])
        env.update(zip(op.results, res))

    @staticmethod
    def tape_value(w: VjpBuilder, v: Value) -> Value:
        """What a tape row holds for v: v itself, an index (a loop counter of a gradient) as an i64,
        or an i1 (a flag a checkpointed loop of a gradient carries) as a bool."""
        if v.tt.dtype in ("index", "i1"):
            return w.dg_op("from_index" if v.tt.dtype == "index" else "from_i1", [v])
        return v

    @staticmethod
    def read_tape(w: VjpBuilder, tape: Value, k: Value, like: Value) -> Value:
        r = w.dg_op("tape_read", [tape, k])
        if like.tt.dtype in ("index", "i1"):
            return w.dg_op("to_index" if like.tt.dtype == "index" else "to_i1", [r])
        return r

    def index(self, w: VjpBuilder, value: int) -> Value:
        return w.op("arith.constant", [], ["index"], {"value": f"{value} : index"})[0]

    def arith(self, w: VjpBuilder, name: str, a: Value, b: Value) -> Value:
        return w.op(f"arith.{name}", [a, b], ["index"])[0]

    def trip_count(self, w: VjpBuilder, lb: Value, ub: Value, st: Value) -> Value:
        """How many iterations an scf.for from lb to ub by st runs (0 when ub <= lb)."""
        return self.arith(w, "maxsi", self.arith(w, "ceildivsi", self.arith(w, "subi", ub, lb), st), self.index(w, 0))

    def forward_for(self, op: Op, env: dict, w: VjpBuilder) -> dict:
        lb, ub, st = (env[o] for o in op.operands[:3])
        inits = [env[o] for o in op.operands[3:]]
        n = self.trip_count(w, lb, ub, st)
        rows = self.arith(w, "addi", n, self.index(w, 1))  # one row per iteration, then the final values
        skip = self.untaped(op)
        taped = [i for i in range(len(inits)) if i not in skip]
        tapes = [w.dg_op("tape_alloc", [self.tape_value(w, inits[i]), rows]) for i in taped]
        body = op.regions[0]

        def write(w2):
            iv = w2.value("index", "iv")
            carried = [w2.value(a.type, "a") for a in body.args[1:]]
            tin = [w2.value(t.type, "tape") for t in tapes]
            w2.block_header([iv] + carried + tin)
            env[body.args[0]] = iv
            env.update(zip(body.args[1:], carried))
            k = self.arith(w2, "divsi", self.arith(w2, "subi", iv, lb), st)
            tout = [w2.dg_op("tape_push", [t, k, self.tape_value(w2, carried[i])]) for t, i in zip(tin, taped)]
            self.forward(body, env, w2, record=False, effects=True)
            t = body.ops[-1]
            w2.loc = t.loc
            w2.op("scf.yield", [env[o] for o in t.operands] + tout, [])

        w.loc = op.loc
        res = w.op("scf.for", [lb, ub, st] + inits + tapes, [r.type for r in op.results] + [t.type for t in tapes],
                   regions=[write])
        m = len(op.results)
        env.update(zip(op.results, res[:m]))
        pushed = [w.dg_op("tape_push", [t, n, self.tape_value(w, res[i])]) for t, i in zip(res[m:], taped)]
        return {"tapes": self.by_slot(skip, m, pushed), "n": n, "lb": lb, "st": st}

    def count_while(self, op: Op, env: dict, w: VjpBuilder) -> Value:
        """The loop copied, counting how many times its condition is evaluated (the result)."""
        before, after = op.regions
        cond_t = before.ops[-1]

        def write_before(w2):
            carried = [w2.value(a.type, "a") for a in before.args]
            k = w2.value("index", "k")
            w2.block_header(carried + [k])
            env.update(zip(before.args, carried))
            k1 = self.arith(w2, "addi", k, self.index(w2, 1))
            self.forward(before, env, w2, record=False, effects=True)
            w2.loc = cond_t.loc
            w2.op("scf.condition", [env[o] for o in cond_t.operands] + [k1], [])

        def write_after(w2):
            carried = [w2.value(a.type, "a") for a in after.args]
            k = w2.value("index", "k")
            w2.block_header(carried + [k])
            env.update(zip(after.args, carried))
            self.forward(after, env, w2, record=False, effects=True)
            t = after.ops[-1]
            w2.loc = t.loc
            w2.op("scf.yield", [env[o] for o in t.operands] + [k], [])

        w.loc = op.loc
        res = w.op("scf.while", [env[o] for o in op.operands] + [self.index(w, 0)],
                   [r.type for r in op.results] + ["index"], regions=[write_before, write_after])
        env.update(zip(op.results, res[:-1]))
        return res[-1]

    def forward_while(self, op: Op, env: dict, w: VjpBuilder) -> dict:
        """A `while` loop of the forward sweep: run once as it is, counting its iterations n, then
        again as an scf.for of n iterations that tapes its carried values (n + 1 rows) or, in a
        checkpointed gradient, keeps their snapshots. An scf.while copies every tensor it carries
        on each iteration (MLIR's bufferization), so a tape carried by it would cost time and
        memory quadratic in n (snapshots, c states per iteration); the second run costs one
        forward."""
        if self.slots and self.chunkable(op):
            return self.forward_while_checkpointed(op, env, w)
        total = self.count_while(op, env, w)
        skip = self.untaped(op)
        xs = [None if i in skip else env[o] for i, o in enumerate(op.operands)]
        n = self.arith(w, "subi", total, self.index(w, 1))
        kept, last = self.replay_loop(w, op, env, xs, self.index(w, 0), n, not self.slots)
        if not self.slots:
            return {"tapes": kept, "total": total}
        snaps, m, s = kept
        return {"snaps": snaps, "m": m, "s": s, "total": total, "last": last}

    # ------------------------------------------------------------ reverse sweep
    def reverse(self, block: Block, env: dict, adj: dict, w: VjpBuilder, info: dict) -> None:
        for op in reversed(block.ops):
            if op.name in TERMINATORS:
                continue
            w.loc = backward_loc(op.loc)
            if op.name == "scf.if":
                self.reverse_if(op, env, adj, w)
            elif op.name in ("scf.for", "scf.while"):
                if any(r in adj for r in op.results):  # else nothing flows back through the loop
                    (self.reverse_for if op.name == "scf.for" else self.reverse_while)(op, env, adj, w, info[op])
            elif op.name == "func.call":
                self.reverse_call(op, env, adj, w)
            elif op.dg is not None:
                self.reverse_dg(op, env, adj, w)

    def free_active(self, blocks: list) -> list:
        return [v for v in free_values(blocks) if v in self.active]

    def reverse_dg(self, op: Op, env: dict, adj: dict, w: VjpBuilder) -> None:
        douts = [adj.get(r) for r in op.results]
        if all(d is None for d in douts) or not any(o in self.active for o in op.operands) \
                or not any(r in self.active for r in op.results):
            return
        opdef = OPS[op.dg]
        if opdef.vjp is None:
            raise DgError(f"dg.{op.dg} has no gradient rule", loc_of(op.location))
        view = OpView(op, env)
        if len(douts) > 1:
            douts = [d if d is not None else w.zeros_like(env[r]) for d, r in zip(douts, op.results)]
        dins = opdef.vjp(w, view, douts if len(douts) > 1 else douts[0])
        for o, d in zip(op.operands, dins):
            if d is not None and o in self.active:
                self.accumulate(w, adj, o, d, env[o])

    def reverse_call(self, op: Op, env: dict, adj: dict, w: VjpBuilder) -> None:
        mask = tuple(i for i, o in enumerate(op.operands) if o in self.active)
        douts = [adj.get(r) for r in op.results if _float(r)]
        if not mask or all(d is None for d in douts):
            return
        callee = _str(op.attrs["callee"]).lstrip("@")
        saved = self.active
        core = self.vjp_function(callee, mask)
        self.active = saved
        fl = [r for r in op.results if _float(r)]
        cts = [d if d is not None else w.zeros_like(env[r]) for d, r in zip(douts, fl)]
        w.loc = backward_loc(op.loc)
        outs = w.op("func.call", [env[o] for o in op.operands] + cts,
                    [r.type for r in op.results] + [op.operands[i].type for i in mask], {"callee": f"@{core}"})
        for i, g in zip(mask, outs[len(op.results):]):
            self.accumulate(w, adj, op.operands[i], g, env[op.operands[i]])

    def reverse_if(self, op: Op, env: dict, adj: dict, w: VjpBuilder) -> None:
        seeds = [(r, adj[r]) for r in op.results if r in adj]
        free = self.free_active(op.regions)
        if not seeds or not free:
            return
        outs_t = [v.type for v in free]

        def branch(b: Block):
            def write(w2):
                inner = dict(adj)
                info = self.forward(b, env, w2, record=True, effects=False)
                t = b.ops[-1]
                for r, d in seeds:
                    self.accumulate(w2, inner, t.operands[op.results.index(r)], d, env[t.operands[op.results.index(r)]])
                self.reverse(b, env, inner, w2, info)
                w2.loc = backward_loc(op.loc)
                w2.op("scf.yield", [inner[v] if v in inner else w2.zeros_like(env[v]) for v in free], [])
            return write

        w.loc = backward_loc(op.loc)
        res = w.op("scf.if", [env[op.operands[0]]], outs_t, regions=[branch(b) for b in op.regions])
        for v, r in zip(free, res):
            adj[v] = r

    def countdown(self, w: VjpBuilder, loc: str, trips: Value, one: Value, d_init: list, free: list, f_init: list,
                  step) -> tuple:
        """The reverse of a loop: an scf.for over k = trips-1 .. 0 carrying the adjoints of the loop-carried
        values (d_init) and of the free values (f_init). `step(w2, k, d_in, inner)` writes one iteration:
        `inner` starts as the free values' adjoints and is updated in place; it returns the carried adjoints.
        Returns (carried results, free results)."""
        zero = self.index(w, 0)

        def write(w2):
            j = w2.value("index", "j")
            d_in = [w2.value(v.type, "d") for v in d_init]
            f_in = [w2.value(v.type, "d") for v in f_init]
            w2.block_header([j] + d_in + f_in)
            k = self.arith(w2, "subi", self.arith(w2, "subi", trips, one), j)
            inner = dict(zip(free, f_in))
            outs = step(w2, k, d_in, inner)
            w2.loc = loc
            w2.op("scf.yield", outs + [inner[v] for v in free], [])

        w.loc = loc
        res = w.op("scf.for", [zero, trips, one] + d_init + f_init, [v.type for v in d_init + f_init],
                   regions=[write])
        return res[:len(d_init)], res[len(d_init):]

    def settle(self, w: VjpBuilder, adj: dict, free: list, f_res: list, inits: list, d_res: list, env: dict) -> None:
        """After a reverse loop: the free values' adjoints (which started from adj) replace adj's; then the
        initial values get their share (an initial value may also be free in the body)."""
        for v, d in zip(free, f_res):
            adj[v] = d
        for v, d in zip(inits, d_res):
            self.accumulate(w, adj, v, d, env[v])

    def reuse_taped(self, w: VjpBuilder, op: Op, body: Block, y: list, tapes: list, nxt: Value, env: dict,
                    outer: dict) -> None:
        """Inside a reverse loop step: the values the body yields are the next iteration's carried
        values, which the tape holds (row `nxt`). The reverse reads them from there, so that the
        recomputed ops that made them (a step's matmuls, say) are left unused and are removed.
        A tape the loop appends to is its final value (`outer` maps the loop's results)."""
        made = {r for o in body.ops for r in o.results}
        for i, (v, t) in enumerate(zip(y, tapes)):
            if v in made and t is not None:
                env[v] = self.read_tape(w, t, nxt, v)
            elif v in made and i in self.appended_slots[op]:
                env[v] = outer[op.results[i]]

    def for_step(self, op: Op, env: dict, tapes: list, base: Value | None, carried: list):
        """One iteration of a `for` loop's reverse, as `countdown` writes it: the carried values
        read from row k of `tapes` (None at an untaped slot), the body recomputed and reversed.
        The iteration is base + k of the loop (k itself without a base)."""
        body = op.regions[0]
        lb, st = env[op.operands[0]], env[op.operands[2]]

        def step(w2, k, d_in, inner):
            inner_env = dict(env)
            g = k if base is None else self.arith(w2, "addi", base, k)
            inner_env[body.args[0]] = self.arith(w2, "addi", lb, self.arith(w2, "muli", g, st))
            for i, (a, t) in enumerate(zip(body.args[1:], tapes)):
                inner_env[a] = self.read_tape(w2, t, k, a) if t is not None else self.untaped_value(op, i, env)
            info2 = self.forward(body, inner_env, w2, record=True, effects=False)
            y = body.ops[-1].operands
            self.reuse_taped(w2, op, body, y, tapes, self.arith(w2, "addi", k, self.index(w2, 1)), inner_env, env)
            for i, d in zip(carried, d_in):
                self.accumulate(w2, inner, y[i], d, inner_env[y[i]])
            self.reverse(body, inner_env, inner, w2, info2)
            return [inner[body.args[1 + i]] if body.args[1 + i] in inner else w2.zeros_like(d)
                    for i, d in zip(carried, d_in)]
        return step

    def reverse_for(self, op: Op, env: dict, adj: dict, w: VjpBuilder, info: dict) -> None:
        body = op.regions[0]
        carried = [i for i, a in enumerate(body.args[1:]) if a in self.active]
        free = self.free_active([body])
        d_init = [adj[op.results[i]] if op.results[i] in adj else w.zeros_like(env[op.results[i]]) for i in carried]
        f_init = [adj[v] if v in adj else w.zeros_like(env[v]) for v in free]
        loc = backward_loc(op.loc)
        if "snaps" in info:
            d_res, f_res = self.reverse_segments(w, op, env, info, d_init, free, f_init, loc,
                                                 lambda tapes, base: self.for_step(op, env, tapes, base, carried))
        else:
            d_res, f_res = self.countdown(w, loc, info["n"], self.index(w, 1), d_init, free, f_init,
                                          self.for_step(op, env, info["tapes"], None, carried))
        self.settle(w, adj, free, f_res, [op.operands[3 + i] for i in carried], d_res, env)

    def while_step(self, op: Op, env: dict, tapes: list, carried_b: list, carried_a: list):
        """One iteration of a `while` loop's reverse, as `countdown` writes it: the carried values
        read from row k of `tapes` (None at an untaped slot), the condition's region and the
        body recomputed, then both reversed."""
        before, after = op.regions
        cond = before.ops[-1].operands[1:]

        def step(w2, k, d_in, inner2):
            inner_env = dict(env)
            for i, (a, t) in enumerate(zip(before.args, tapes)):
                inner_env[a] = self.read_tape(w2, t, k, a) if t is not None else self.untaped_value(op, i, env)
            info_b2 = self.forward(before, inner_env, w2, record=True, effects=False)
            for a, c in zip(after.args, cond):
                inner_env[a] = inner_env[c]
            info_a2 = self.forward(after, inner_env, w2, record=True, effects=False)
            y = after.ops[-1].operands
            self.reuse_taped(w2, op, after, y, tapes, self.arith(w2, "addi", k, self.index(w2, 1)), inner_env, env)
            for i, d in zip(carried_b, d_in):
                self.accumulate(w2, inner2, y[i], d, inner_env[y[i]])
            self.reverse(after, inner_env, inner2, w2, info_a2)
            for i in carried_a:
                if after.args[i] in inner2:
                    self.accumulate(w2, inner2, cond[i], inner2[after.args[i]], inner_env[cond[i]])
            self.reverse(before, inner_env, inner2, w2, info_b2)
            return [inner2[before.args[i]] if before.args[i] in inner2 else w2.zeros_like(d)
                    for i, d in zip(carried_b, d_in)]
        return step

    def reverse_while(self, op: Op, env: dict, adj: dict, w: VjpBuilder, info: dict) -> None:
        before, after = op.regions
        cond = before.ops[-1].operands[1:]
        carried_b = [i for i, a in enumerate(before.args) if a in self.active]
        carried_a = [i for i, a in enumerate(after.args) if a in self.active]
        free = self.free_active([before, after])
        one = self.index(w, 1)
        last = self.arith(w, "subi", info["total"], one)

        # The final evaluation of the condition (the one that ended the loop): its carried values
        # are the tape's last row, or kept apart by a checkpointed loop. An untaped slot: its
        # final value.
        env1 = dict(env)
        final = info.get("last")
        for i, (a, r) in enumerate(zip(before.args, op.results)):
            if final is not None:
                env1[a] = final[i] if final[i] is not None else env[r]
            else:
                t = info["tapes"][i]
                env1[a] = self.read_tape(w, t, last, a) if t is not None else env[r]
        info_b = self.forward(before, env1, w, record=True, effects=False)
        inner = {v: adj[v] for v in free if v in adj}
        for j, r in enumerate(op.results):
            if r in adj:
                self.accumulate(w, inner, cond[j], adj[r], env1[cond[j]])
        self.reverse(before, env1, inner, w, info_b)
        loc = backward_loc(op.loc)
        w.loc = loc
        d_init = [inner[before.args[i]] if before.args[i] in inner else w.zeros_like(env1[before.args[i]])
                  for i in carried_b]
        f_init = [inner[v] if v in inner else w.zeros_like(env[v]) for v in free]
        if "snaps" in info:
            d_res, f_res = self.reverse_segments(
                w, op, env, dict(info, n=last), d_init, free, f_init, loc,
                lambda tapes, base: self.while_step(op, env, tapes, carried_b, carried_a))
        else:
            d_res, f_res = self.countdown(w, loc, last, one, d_init, free, f_init,
                                          self.while_step(op, env, info["tapes"], carried_b, carried_a))
        self.settle(w, adj, free, f_res, [op.operands[i] for i in carried_b], d_res, env)


def differentiate(module) -> str:
    """The module's text with every gradient declaration defined."""
    return Autodiff(read_module(module)).run()


def needs_autodiff(text: str) -> bool:
    return "dg.kind" in text


def run(module):
    """The `autodiff` pass: a new module with every gradient declaration defined (the module
    itself when it declares none)."""
    if not any("dg.kind" in op.operation.attributes for op in module.body.operations):
        return module
    return parse(differentiate(module))
