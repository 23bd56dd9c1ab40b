"""One function mapped over a batch: the batched function the batch pass writes.

Expects: a function of dg IR and which of its arguments are mapped (batched
along a leading axis). Guarantees: a function `SYM__batch_<flags>` taking
the mapped arguments batched, the others as they were, and last the mask of
the examples active (a bool [B]), and giving every result batched. Its ops:
- an op with no batched operand, copied;
- a dg op with one, its registry entry's `batch` facet
  (dialects/batch_rules.py; without one, a loop over the examples);
- a call with one, a call of the callee's batched function (written in turn,
  so recursion calls itself batched); a call of `grad(f)` or
  `value_and_grad(f)`, the pullback of `f` batched with its differentiated
  arguments batched too (per-example gradients: examples are independent, so
  the gradient of their sum with respect to example b's copy is example b's);
- an `if` whose condition differs by example runs each side only where some
  example takes it (so that recursion stops where every example's does),
  under that side's mask, and picks each example's results with `where`;
- a `while` or `for` whose condition or trip count differs by example runs
  while any example is active; an iteration updates only the active
  examples' carried values;
- `assert` and `check` fail for the first active example whose condition is
  false, and say which example (its index in the batch).
"""
from __future__ import annotations

from dg.core.errors import DgError
from dg.core.locations import loc_of
from dg.core.types import Sym, TensorType
from dg.core.writer import Value
from dg.dialects.batch_rules import per_example
from dg.dialects.registry import OPS
from dg.dialects.rules import DYN, BatchBuilder, OpView, Shared

from ..ad.activity import TERMINATORS
from . import ragged as rg
from .flags import batched_values, loop_condition
from .ragged import I64, RAGGED, Ragged


class _Unplaced(DgError):
    """A batching failure that the op being written gives its place to."""

CHECKS = ("assert", "check")


def batched_type(t: str) -> str:
    """The MLIR type of a batched value of type `t` (a tensor, an i1 or an index): a leading
    dynamic axis; an i1 is a bool [B], an index an i64 [B]."""
    if t == "i1":
        return "tensor<?xi1>"
    if t == "index":
        return "tensor<?xi64>"
    tt = Value(t).tt
    return TensorType(tt.dtype, (Sym(),) + tuple(tt.shape)).mlir()


def conform(g: BatchBuilder, v: Value, t: str) -> Value:
    """v as a value of type t (of the same element type and rank; sizes made static or dynamic)."""
    if v.type == t:
        return v
    target = Value(t).tt
    dims = [g.dim(v, i) for i, d in enumerate(target.shape) if not isinstance(d, int)]
    shape = tuple(d if isinstance(d, int) else DYN for d in target.shape)
    return g.dg_op("reshape", [v] + dims, {"shape": shape}, result_types=[target])


class FunctionBatcher:
    """Writes the batched function of `f` for the mapped arguments `mapped` (one flag each)."""

    def __init__(self, batcher, f, name: str, mapped: tuple):
        self.batcher = batcher
        self.f = f
        self.name = name
        self.mapped = mapped

    def write(self) -> None:
        f, mod = self.f, self.batcher.mod
        g = BatchBuilder(mod.counter)
        args, env = [], {}
        for a, m in zip(f.args, self.mapped):
            if m == RAGGED:  # the rows of every example, where each starts and stops
                r = Ragged(g.value(a.type, "arg"), g.value("tensor<?xi64>", "start"), g.value("tensor<?xi64>", "stop"))
                args += [r.data, r.start, r.stop]
                env[a] = (r, RAGGED)
                continue
            v = g.value(batched_type(a.type) if m else a.type, "arg")
            args.append(v)
            env[a] = (v, m)
        mask = g.value("tensor<?xi1>", "mask")
        g.loc = f.loc
        g.mask = mask
        g.size = g.dim(mask, 0)
        self.flags, self.rows = batched_values(f.body, {a for a, m in zip(f.args, self.mapped) if m is True},
                                               {a for a, m in zip(f.args, self.mapped) if m == RAGGED})
        self.block(f.body, env, g)
        ret = f.body.ops[-1]
        g.loc = ret.loc
        outs = [self.as_batched(g, env[o], t) for o, t in zip(ret.operands, f.result_types)]
        g.op("func.return", outs, [])
        mod.write(self.name, args + [mask], [batched_type(t) for t in f.result_types], f.loc, g)

    # ------------------------------------------------------------ values
    def as_batched(self, g: BatchBuilder, entry, t: str) -> Value:
        """A value of the original type `t`, batched (stacked where it is shared), of exactly
        `t`'s batched type."""
        v, b = entry
        if b == RAGGED:
            raise _Unplaced("vmap: a value whose first axis differs by example cannot be stacked here "
                            "(returned, or chosen by a condition per example)")
        if not b:
            v = g.stacked(v)
        return conform(g, v, batched_type(t))

    def as_flagged(self, g: BatchBuilder, entry, t: str, batched: bool) -> Value:
        """A value as the slot it goes to needs it: batched (of `t`'s batched type) or as it is."""
        return self.as_batched(g, entry, t) if batched else entry[0]

    # ------------------------------------------------------------ ops
    def block(self, block, env: dict, g: BatchBuilder) -> None:
        for op in block.ops:
            if op.name not in TERMINATORS:
                g.loc = op.loc
                try:
                    self.op(op, env, g)
                except _Unplaced as e:
                    raise DgError(e.raw_message, loc_of(op.location)) from None

    def op(self, op, env: dict, g: BatchBuilder) -> None:
        ins = [env[o] for o in op.operands]
        flags = [b for _, b in ins]
        if op.dg in CHECKS:
            return self.check(op, ins, g)
        if op.dg is not None and (RAGGED in flags or op.dg == "full" and op.results[0] in self.rows):
            outs = rg.rule(self, g, op, ins, lambda bad, msg: self.fail(g, bad, msg)) if RAGGED in flags else \
                rg.made(g, op, ins)
            env.update(zip(op.results, outs))
            return None
        if not any(flags) and not op.regions:
            outs = g.op(op.name, [v for v, _ in ins], [r.type for r in op.results], op.attrs)
            env.update({r: (v, False) for r, v in zip(op.results, outs)})
            return None
        if op.name.startswith("dg."):
            return self.dg_op(op, ins, env, g)
        if op.name == "func.call":
            return self.call(op, ins, env, g)
        if op.name == "scf.if":
            return self.branch(op, ins, env, g)
        if op.name == "scf.while":
            return self.while_loop(op, ins, env, g)
        if op.name == "scf.for":
            return self.for_loop(op, ins, env, g)
        raise DgError(f"vmap cannot batch '{op.name}' of values that differ by example", loc_of(op.location))

    def dense_op(self, op, ins, g) -> list:
        """The op's own batching rule: [(value, kind)] per result."""
        env: dict = {}
        self.dg_op(op, ins, env, g)
        return [env[r] for r in op.results]

    def dg_op(self, op, ins, env, g) -> None:
        opdef = OPS[op.dg]
        rule = opdef.batch or per_example
        view = OpView(op.dg, [v for v, _ in ins], [], [o.tt for o in op.operands], [r.tt for r in op.results],
                      dict(op.py), loc_of(op.location))
        try:
            outs = rule(g, view, [b for _, b in ins])
        except DgError:
            raise
        except Exception as e:  # a shape a rule cannot take: the op's place, not a traceback
            raise DgError(f"vmap cannot batch dg.{op.dg} here: {e}", loc_of(op.location)) from None
        if not isinstance(outs, list):
            outs = [outs]
        for r, o in zip(op.results, outs):
            if isinstance(o, Shared):
                env[r] = (o.value, False) if r not in self.flags else (g.stacked(o.value), True)
            else:
                env[r] = (o, True)

    def check(self, op, ins, g) -> None:
        """`assert`/`check`: fails where an active example's condition is false, naming the first."""
        c = ins[0][0]  # a bool [B], or one bool for every example
        self.fail(g, g.dg_op("and", [g.mask, g.dg_op("not", [c])]), None, op)

    def fail(self, g, bad: Value, msg: str | None, op=None) -> None:
        """A check that fails where `bad` (a bool [B]) holds, naming the first such example: `op`'s
        own (an assert's), or a `check` saying `msg`."""
        # (one more, false, entry: an empty batch's argmax)
        flags = g.dg_op("concat", [g.dg_op("cast", [bad], {"dtype": "i64"}), _one_more(g, g.const(0, I64))], {"axis": 0})
        first = g.dg_op("argmax", [flags], {"axes": (0,), "keepdims": False})
        fine = g.dg_op("not", [g.dg_op("from_i1", [g.any(bad)])])
        if op is not None:
            g.op(op.name, [fine, first], [], {k: v for k, v in op.attrs.items()})
        else:
            g.dg_op("check", [fine, first], {"msg": msg})

    def call(self, op, ins, env, g) -> None:
        callee = op.attrs["callee"].strip().strip('"').lstrip("@")
        flags = tuple(b for _, b in ins)
        name = self.batcher.batched(callee, flags, op)
        args = []
        for e, o, b in zip(ins, op.operands, flags):
            args += [e[0].data, e[0].start, e[0].stop] if b == RAGGED else [self.as_flagged(g, e, o.type, b)]
        outs = g.op("func.call", args + [g.mask], [batched_type(r.type) for r in op.results], {"callee": f"@{name}"})
        for r, v in zip(op.results, outs):
            env[r] = (v, True)

    # ------------------------------------------------------------ control flow
    def region(self, block, env: dict, header: list | None = None, mask=None, after=None):
        """A region writer: `header` (block arguments' values, written as its header) or none (an
        if's), its ops under `mask` (the enclosing one when None; a function of the writer: the mask
        it writes after the header), then `after(w, values)` giving the terminator's operands from
        those of the original terminator."""
        def write(w: BatchBuilder):
            saved = w.mask
            if header is not None:
                w.block_header(header)
            if mask is not None:
                w.mask = mask(w) if callable(mask) else mask
            self.block(block, env, w)
            t = block.ops[-1]
            w.loc = t.loc
            vals = after(w, [env[o] for o in t.operands])
            w.op(t.name, vals, [])
            w.mask = saved
        return write

    def branch(self, op, ins, env, g) -> None:
        (c, cb), = ins
        then_b, else_b = op.regions
        types = [r.type for r in op.results]
        if not cb:
            flags = [r in self.flags for r in op.results]
            rtypes = [batched_type(t) if f else t for t, f in zip(types, flags)]

            def yields(w, vals):
                return [self.as_flagged(w, v, t, f) for v, t, f in zip(vals, types, flags)]
            outs = g.op("scf.if", [c], rtypes, regions=[self.region(then_b, env, after=yields),
                                                        self.region(else_b, env, after=yields)])
            for r, v, f in zip(op.results, outs, flags):
                env[r] = (v, f)
            return
        # A condition that differs by example: each side where some example takes it.
        mask = g.mask
        m_then = g.dg_op("and", [mask, c])
        m_else = g.dg_op("and", [mask, g.dg_op("not", [c])])
        btypes = [batched_type(t) for t in types]

        def yields(w, vals):
            return [self.as_batched(w, v, t) for v, t in zip(vals, types)]

        def placeholders(values):
            def write(w):
                w.op("scf.yield", values(w), [])
            return write

        def undefs(w):
            out = []
            for t in btypes:
                tt = Value(t).tt
                out.append(w.dg_op("undef", [], {"shape": tuple(d if isinstance(d, int) else DYN for d in tt.shape),
                                                 "dtype": tt.dtype}, result_types=[tt]))
            return out

        if all(_cheap(b) for b in op.regions):  # both sides for every example, then a select
            picked = []
            for b, m in ((then_b, m_then), (else_b, m_else)):
                g.mask = m
                self.block(b, env, g)
                picked.append([self.as_batched(g, env[o], t) for o, t in zip(b.ops[-1].operands, types)])
            g.mask = mask
            g.loc = op.loc
            for r, t, a, b in zip(op.results, types, *picked):
                env[r] = (g.where(g.lift(m_then, Value(t).tt.rank), a, b), True)
            return
        took_then = g.any(m_then)
        t_vals = g.op("scf.if", [took_then], btypes,
                      regions=[self.region(then_b, env, mask=m_then, after=yields), placeholders(undefs)])
        took_else = g.any(m_else)
        e_vals = g.op("scf.if", [took_else], btypes,
                      regions=[self.region(else_b, env, mask=m_else, after=yields), placeholders(lambda w: t_vals)])
        if not types:
            return

        def picked(w):
            return [w.where(w.lift(m_then, Value(t).tt.rank), a, b) for t, a, b in zip(types, t_vals, e_vals)]
        outs = g.op("scf.if", [took_then], btypes, regions=[placeholders(picked), placeholders(lambda w: e_vals)])
        for r, v in zip(op.results, outs):
            env[r] = (v, True)

    def while_loop(self, op, ins, env, g) -> None:
        before, after = op.regions
        masked = loop_condition(op, self.flags)
        carried = _Slots(self, g, ins, [o.type for o in op.operands], before.args, masked)
        fwd = _Slots(self, g, [None] * len(after.args), [a.type for a in after.args], after.args, masked,
                     like=carried)
        if not masked:
            bargs, aargs = carried.values(g, "a"), fwd.values(g, "a")
            carried.bind(env, before.args, bargs)
            fwd.bind(env, after.args, aargs)

            def forward(w, vals):
                return [vals[0][0]] + fwd.outs(w, vals[1:])
            outs = g.op("scf.while", carried.inits(g), [a.type for a in aargs],
                        regions=[self.region(before, env, header=bargs, after=forward),
                                 self.region(after, env, header=aargs, after=carried.outs)])
            fwd.bind(env, op.results, outs)
            return
        # Each example runs its own number of times: while any is active.
        act, act2 = g.value("tensor<?xi1>", "act"), g.value("tensor<?xi1>", "act")
        bargs, olds, aargs = carried.values(g, "a"), carried.values(g, "a"), fwd.values(g, "a")
        carried.bind(env, before.args, bargs)
        fwd.bind(env, after.args, aargs)
        n = len(bargs)

        def forward(w, vals):
            c = self.as_batched(w, vals[0], "i1")
            live = w.dg_op("and", [act, c])
            return [w.any(live), live] + bargs + fwd.outs(w, vals[1:])

        def carry(w, vals):
            return [act2] + carried.merged(w, act2, carried.outs(w, vals), olds)
        outs = g.op("scf.while", [g.mask] + carried.inits(g), ["tensor<?xi1>"] + [v.type for v in bargs + aargs],
                    regions=[self.region(before, env, header=[act] + bargs, mask=act, after=forward),
                             self.region(after, env, header=[act2] + olds + aargs, mask=act2, after=carry)])
        fwd.bind(env, op.results, outs[1 + n:])

    def for_loop(self, op, ins, env, g) -> None:
        body = op.regions[0]
        (lb, lbb), (ub, ubb), (step, stb) = ins[:3]
        masked = loop_condition(op, self.flags)
        carried = _Slots(self, g, ins[3:], [o.type for o in op.operands[3:]], body.args[1:], masked)
        if not masked:
            iv = g.value("index", "i")
            args = carried.values(g, "a")
            env[body.args[0]] = (iv, False)
            carried.bind(env, body.args[1:], args)
            outs = g.op("scf.for", [lb, ub, step] + carried.inits(g), [a.type for a in args],
                        regions=[self.region(body, env, header=[iv] + args, after=carried.outs)])
            carried.bind(env, op.results, outs)
            return
        if lbb or stb:
            raise DgError("vmap: a loop whose start or step differs by example", loc_of(op.location))
        # A trip count per example: one counter up to the largest active example's bound (a
        # `for` still, which gradients tape directly), each iteration masked to the examples whose
        # bound it is below.
        first = g.dg_op("from_index", [lb])
        bounds = g.where(g.mask, ub, g.add(g.dg_op("zeros_like", [ub]), first))
        top = g.dg_op("max", [g.dg_op("concat", [bounds, _one_more(g, first)], {"axis": 0})],
                      {"axes": (0,), "keepdims": False})  # (with the start: an empty batch's loop runs no step)
        iv = g.value("index", "i")
        olds = carried.values(g, "a")
        env[body.args[0]] = (iv, False)
        carried.bind(env, body.args[1:], olds)
        act = None

        def header(w):
            nonlocal act
            act = w.dg_op("and", [w.mask, w.dg_op("lt", [w.dg_op("from_index", [iv]), ub])])
            return act

        def carry(w, vals):
            return carried.merged(w, act, carried.outs(w, vals), olds)
        outs = g.op("scf.for", [lb, g.dg_op("to_index", [top]), step] + carried.inits(g), [v.type for v in olds],
                    regions=[self.region(body, env, header=[iv] + olds, mask=header, after=carry)])
        carried.bind(env, op.results, outs)


class _Slots:
    """The values a loop carries (or forwards), each shared, batched or ragged (its rows carried,
    where they start and stop fixed). In a loop whose trip count differs by example every slot is
    batched or ragged, and `merged` keeps an inactive example's values."""

    def __init__(self, fb, g, ins: list, types: list, args: list, masked: bool, like: "_Slots" = None):
        self.fb, self.types = fb, types
        self.ins = ins
        self.rag = {i: e[0] for i, e in enumerate(ins) if e is not None and e[1] == RAGGED}
        if like is not None:  # forwarded values: ragged where the carried value at their place is
            self.rag = {i: r for i, r in like.rag.items() if i < len(args) and args[i] in fb.rows}
        self.kinds = [RAGGED if i in self.rag else (masked or a in fb.flags) for i, a in enumerate(args)]
        if masked and any(t in ("index", "i1") for t in types):
            raise _Unplaced("vmap cannot batch a loop that carries an index or an i1 (a gradient's counter) "
                            "and whose trip count differs by example")
        self.segs = {i: rg.segments(g, r) for i, r in self.rag.items()} if masked and like is None else {}
        self.kept: set = set()  # the ragged slots whose inactive rows the body does not touch

    def values(self, g, prefix: str) -> list:
        return [g.value(self.rag[i].data.type if k == RAGGED else batched_type(t) if k else t, prefix)
                for i, (t, k) in enumerate(zip(self.types, self.kinds))]

    def inits(self, g) -> list:
        return [e[0].data if k == RAGGED else self.fb.as_flagged(g, e, t, k)
                for e, t, k in zip(self.ins, self.types, self.kinds)]

    def bind(self, env: dict, originals: list, values: list) -> None:
        for i, (o, v, k) in enumerate(zip(originals, values, self.kinds)):
            env[o] = (self.rag[i].like(v, kept=True), RAGGED) if k == RAGGED else (v, k)

    def outs(self, w, vals: list) -> list:
        out = []
        for i, (e, t, k) in enumerate(zip(vals, self.types, self.kinds)):
            if k == RAGGED:
                r = self.rag[i]
                if e[1] != RAGGED or e[0].start is not r.start or e[0].stop is not r.stop:
                    raise _Unplaced("vmap: a loop changes the rows of a value whose first axis differs by example")
                if e[0].kept:
                    self.kept.add(i)
                out.append(e[0].data)
            else:
                out.append(self.fb.as_flagged(w, e, t, k))
        return out

    def merged(self, w, act: Value, new: list, old: list) -> list:
        """Each slot's new value for the active examples, its old one for the others."""
        out = []
        for i, (t, a, b) in enumerate(zip(self.types, new, old)):
            if i in self.kept:
                out.append(a)
            elif i in self.rag:
                rows = w.dg_op("take", [act, self.segs[i]], {"axis": 0})
                out.append(w.where(w.lift(rows, a.tt.rank - 1), a, b))
            elif any(not isinstance(d, int) for d in Value(t).tt.shape):
                out.append(_merged_sized(w, act, a, b, t))
            else:
                out.append(w.where(w.lift(act, Value(t).tt.rank), a, b))
        return out

def _cheap(block) -> bool:
    """Whether a branch is cheap to run for every example: pure dg ops only (no call, loop or
    check), whose results for the examples that did not take it are dropped."""
    return all(op.name == "scf.yield" or op.dg is not None and OPS[op.dg].pure and not op.regions
               for op in block.ops) and len(block.ops) <= 16


def _one_more(g: BatchBuilder, v: Value) -> Value:
    """A 0-d value as a vector of one element."""
    return g.dg_op("expand_dims", [v], {"axes": (0,)})


def _merged_sized(w, act: Value, new: Value, old: Value, t: str) -> Value:
    """where(act, new, old) for a slot whose sizes are not all static: where the old value is
    empty and the new one not (an early return's placeholder, given its value by the active
    examples), the new value as it is."""
    zero = w.const(0, I64)
    sizes = [w.dim(v, 1 + k) for v in (old, new) for k, d in enumerate(Value(t).tt.shape) if not isinstance(d, int)]
    half = len(sizes) // 2
    empty = w.dg_op("eq", [sizes[0], zero])
    for s in sizes[1:half]:
        empty = w.dg_op("or", [empty, w.dg_op("eq", [s, zero])])
    filled = w.dg_op("ne", [sizes[half], zero])
    for s in sizes[half + 1:]:
        filled = w.dg_op("and", [filled, w.dg_op("ne", [s, zero])])
    fresh = w.dg_op("to_i1", [w.dg_op("and", [empty, filled])])

    def pick(v):
        def write(w2):
            w2.op("scf.yield", [v(w2)], [])
        return write
    return w.op("scf.if", [fresh], [new.type], regions=[pick(lambda w2: new), pick(
        lambda w2: w2.where(w2.lift(act, Value(t).tt.rank), new, old))])[0]
