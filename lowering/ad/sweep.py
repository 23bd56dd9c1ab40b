"""The sweep object, and what every sweep writes with.

A `Sweep` is the state of one derived function being written: the module
(`Derivatives`), the active values (lowering/ad/activity.py), and, for a
reverse sweep, the snapshot slots its loops keep (0: loops are taped in
full; `checkpoint(f, slots=c)` sets c for f's gradient and the gradients of
what f calls). The reverse, forward and checkpoint sweeps are functions of
it (lowering/ad/reverse.py, forward.py, checkpoint.py).

The helpers below write index arithmetic, tape rows, the sum of adjoints
(`accumulate`) and the count-down loop every reverse loop is (`countdown`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dg.core.writer import Value
from dg.core.locations import loc_of
from dg.dialects.rules import OpView, RuleBuilder

from ..irmodel import Op
from .module import Derivatives


@dataclass
class Sweep:
    mod: Derivatives
    active: set = field(default_factory=set)
    slots: int = 0  # a reverse sweep's snapshot slots per loop (0: loops taped in full)


def op_view(op: Op, env: dict) -> OpView:
    """What a rule sees of `op`: its values in the function being written."""
    return OpView(op.dg, [env[o] for o in op.operands], [env[r] for r in op.results], [o.tt for o in op.operands],
                  [r.tt for r in op.results], op.py, loc_of(op.location))


# ---------------------------------------------------------------- indices
def index(w: RuleBuilder, value: int) -> Value:
    return w.op("arith.constant", [], ["index"], {"value": f"{value} : index"})[0]


def arith(w: RuleBuilder, name: str, a: Value, b: Value) -> Value:
    return w.op(f"arith.{name}", [a, b], ["index"])[0]


def trip_count(w: RuleBuilder, lb: Value, ub: Value, st: Value) -> Value:
    """How many iterations an scf.for from lb to ub by st runs (0 when ub <= lb)."""
    return arith(w, "maxsi", arith(w, "ceildivsi", arith(w, "subi", ub, lb), st), index(w, 0))


def compare(w: RuleBuilder, name: str, a: Value, b: Value) -> Value:
    """An i1 comparing two indices (`eq`, `lt`, ...), made with dg ops the interpreter runs."""
    c = w.dg_op(name, [w.dg_op("from_index", [a]), w.dg_op("from_index", [b])])
    return w.dg_op("to_i1", [c])


# ---------------------------------------------------------------- tapes
def tape_value(w: RuleBuilder, v: Value) -> Value:
    """What a tape row holds for v: v itself, an index (a loop counter of a gradient) as an i64,
    or an i1 (a flag a checkpointed loop of a gradient carries) as a bool."""
    if v.tt.dtype in ("index", "i1"):
        return w.dg_op("from_index" if v.tt.dtype == "index" else "from_i1", [v])
    return v


def read_tape(w: RuleBuilder, tape: Value, k: Value, like: Value) -> Value:
    r = w.dg_op("tape_read", [tape, k])
    if like.tt.dtype in ("index", "i1"):
        return w.dg_op("to_index" if like.tt.dtype == "index" else "to_i1", [r])
    return r


def by_slot(skip: set, n: int, tapes: list) -> list:
    """The tapes of a loop's n carried values, None at the untaped ones."""
    taped = iter(tapes)
    return [None if i in skip else next(taped) for i in range(n)]


# ---------------------------------------------------------------- adjoints
def accumulate(w: RuleBuilder, adj: dict, v: Value, d: Value, like: Value) -> None:
    """Add the adjoint d to v's; `like` is v's value in the gradient function. A d broadcast
    from v is summed to v's shape; one whose type still fixes a size that v's leaves open (or
    the other way round: `f32[?] * f32[2]` gives the first operand an adjoint of f32[2]) takes
    v's type through dg.sum_to, which checks the sizes at run time."""
    if d.tt.shape != v.tt.shape or d.tt.dtype != v.tt.dtype:
        d = w.sum_to(d, v.tt)
        if d.tt.mlir() != v.tt.mlir():
            d = w.dg_op("sum_to", [d, like])
    add_part = w.parts.get(d)
    if v in adj and add_part is not None and d.type == adj[v].type:  # (the zeros made for d go unused)
        adj[v] = add_part(w, adj[v])
        return
    adj[v] = w.add(adj[v], d) if v in adj else d


def countdown(w: RuleBuilder, loc: str, trips: Value, one: Value, d_init: list, free: list, f_init: list,
              step, state: list = ()) -> tuple:
    """The reverse of a loop: an scf.for over k = trips-1 .. 0 carrying the adjoints of the loop-carried
    values (d_init) and of the free values (f_init). `step(w2, k, d_in, inner)` writes one iteration:
    `inner` starts as the free values' adjoints and is updated in place; it returns the carried adjoints.
    With `state` (values the reverse carries besides: an undone carried value), the step takes
    them too and returns (carried adjoints, next state). Returns (carried results, free results)."""
    zero = index(w, 0)

    def write(w2):
        j = w2.value("index", "j")
        d_in = [w2.value(v.type, "d") for v in d_init]
        f_in = [w2.value(v.type, "d") for v in f_init]
        s_in = [w2.value(v.type, "s") for v in state]
        w2.block_header([j] + d_in + f_in + s_in)
        k = arith(w2, "subi", arith(w2, "subi", trips, one), j)
        inner = dict(zip(free, f_in))
        outs, s_out = step(w2, k, d_in, inner, s_in) if state else (step(w2, k, d_in, inner), [])
        w2.loc = loc
        w2.op("scf.yield", outs + [inner[v] for v in free] + s_out, [])

    w.loc = loc
    res = w.op("scf.for", [zero, trips, one] + d_init + f_init + list(state),
               [v.type for v in d_init + f_init + list(state)], regions=[write])
    return res[:len(d_init)], res[len(d_init):len(d_init) + len(f_init)]
