"""Forward mode: the JVP function of a dg function, as dg IR.

Expects: a `Derivatives` module (lowering/ad/module.py) holding the function;
a `jvp` declaration (`dg.kind = "jvp"`, `dg.of`, `dg.wrt`: the float
arguments that get tangents) takes `(primals..., tangents of the wrt
arguments...)` and gives `(f's results..., tangents of f's float
results...)`; lowering/ad/__init__.py defines it as a call of the function
this module writes.
Guarantees: `jvp_function(mod, f, mask)` writes `f__tangent_<mask>`, a dg
function that runs f's ops once, each followed by its tangent: dg ops
built by the `jvp` facet of the op's registry entry (dialects/rules.py's
builder). Both modes run it.

How a function f is pushed forward (`f__tangent_<mask>(args, tangents) ->
(results, tangents of the float results)`):
- Only active values carry a tangent: floats that depend on an argument
  in the mask (the reverse sweep's activity analysis). A tangent nobody
  made yet is zero, and is written as `dg.zeros_like` only where a value
  must exist: a branch's or a loop's yield, a call's argument, the return.
- `scf.if`: one more result per active result, yielded by each branch.
- `scf.for` and `scf.while`: one more carried value per active carried
  value; `break`/`continue`/early `return` are flags among the carried
  values, so they need nothing of their own. Nothing is taped: forward
  mode keeps no more than the loop it runs.
- `func.call g`: a call of `g__tangent_<mask>` (mask: the active operands),
  named before it is made, so recursion works.
- Gradient declarations get their bodies first, so `jvp` of `grad` (a
  Hessian-vector product) differentiates the reverse sweep forward; and a
  jvp function is ordinary dg IR, so `grad` of `jvp` differentiates it
  backward.
"""
from __future__ import annotations

from dg.core.errors import DgError
from dg.core.locations import loc_of
from dg.dialects.registry import OPS
from dg.dialects.rules import RuleBuilder

from ..irmodel import Block, Op
from .activity import ALWAYS_ACTIVE, TERMINATORS, activity, callee, free_values, is_float
from .module import Derivatives, copy_op
from .sweep import Sweep, op_view


def jvp_function(mod: Derivatives, sym: str, mask: tuple) -> str:
    """The name of `sym`'s JVP function for tangents of the arguments in `mask`; written first
    if it is not yet."""
    ck = mod.checkpointed(sym)
    if ck is not None:  # forward mode keeps nothing: checkpointing changes nothing
        return jvp_function(mod, ck[0], mask)
    key = ("jvp", sym, mask)
    if key in mod.names:
        return mod.names[key]
    name, f = mod.derive(key, sym, "tangent", mask, "push a tangent through")
    w, env, args = mod.start(f)
    tangents = [w.value(f.args[i].type, "t") for i in mask]
    s = Sweep(mod, activity(f.body, {f.args[i] for i in mask}, mod.messages))
    tan = {f.args[i]: t for i, t in zip(mask, tangents)}
    push_block(s, f.body, env, tan, w)
    ret = f.body.ops[-1]
    w.loc = ret.loc
    floats = [o for o in ret.operands if is_float(o)]
    outs = [env[o] for o in ret.operands] + [tangent_of(w, o, env, tan) for o in floats]
    w.op("func.return", outs, [])
    mod.write(name, args + tangents, f.result_types + [o.type for o in floats], f.loc, w)
    return name


def tangent_of(w: RuleBuilder, v, env: dict, tan: dict):
    """v's tangent, as a value of v's type: zeros where none was made."""
    t = tan.get(v)
    return w.zeros_like(env[v]) if t is None else t


# ---------------------------------------------------------------- blocks
def push_block(s: Sweep, block: Block, env: dict, tan: dict, w: RuleBuilder) -> None:
    """Copy `block`'s ops (its terminator excepted), each followed by its tangent."""
    for op in block.ops:
        if op.name in TERMINATORS:
            continue
        w.loc = op.loc
        # (a message's tangent travels with it, whether or not anything active reaches it)
        active_in = any(o in tan or o in s.active for o in op.operands) or (
            op.regions and any(v in s.active for v in free_values(op.regions))) or s.mod.messages_in([Block([], [op])])
        if not active_in:
            copy_op(op, env, w, effects=True)
        elif op.name == "scf.if":
            push_if(s, op, env, tan, w)
        elif op.name == "scf.for":
            push_for(s, op, env, tan, w)
        elif op.name == "scf.while":
            push_while(s, op, env, tan, w)
        elif op.name == "func.call":
            push_call(s, op, env, tan, w)
        else:
            copy_op(op, env, w, effects=True)
            if op.dg is not None:
                push_dg(s, op, env, tan, w)


def push_dg(s: Sweep, op: Op, env: dict, tan: dict, w: RuleBuilder) -> None:
    outs = [r for r in op.results if r in s.active]
    ts = [tan.get(o) if o in s.active else None for o in op.operands]
    if not outs or all(t is None for t in ts) and op.dg not in ALWAYS_ACTIVE:
        return
    opdef = OPS[op.dg]
    if opdef.jvp is None:
        raise DgError(f"dg.{op.dg} has no forward-mode (jvp) rule", loc_of(op.location))
    got = opdef.jvp(w, op_view(op, env), ts)
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    for r, t in zip(op.results, got):
        if t is not None and r in s.active:
            tan[r] = w.conform(t, env[r])


def push_call(s: Sweep, op: Op, env: dict, tan: dict, w: RuleBuilder) -> None:
    mask = tuple(i for i, o in enumerate(op.operands) if o in s.active)
    name = callee(op)
    if not mask and not s.mod.messages(name):
        return copy_op(op, env, w, effects=True)
    core = jvp_function(s.mod, name, mask)
    floats = [r for r in op.results if is_float(r)]
    w.loc = op.loc
    outs = w.op("func.call", [env[o] for o in op.operands] + [tangent_of(w, op.operands[i], env, tan) for i in mask],
                [r.type for r in op.results] + [r.type for r in floats], {"callee": f"@{core}"})
    env.update(zip(op.results, outs))
    for r, t in zip(floats, outs[len(op.results):]):
        tan[r] = t


def push_if(s: Sweep, op: Op, env: dict, tan: dict, w: RuleBuilder) -> None:
    act = [i for i, r in enumerate(op.results) if r in s.active]
    pushed_op(op, env, tan, w, [], act, [pushed_region(s, b, [], act, 0, env, tan) for b in op.regions])


def push_for(s: Sweep, op: Op, env: dict, tan: dict, w: RuleBuilder) -> None:
    body = op.regions[0]
    act = [i for i, a in enumerate(body.args[1:]) if a in s.active]
    t_inits = [tangent_of(w, op.operands[3 + i], env, tan) for i in act]
    pushed_op(op, env, tan, w, t_inits, act,
              [pushed_region(s, body, [1 + i for i in act], act, 0, env, tan)])  # (body.args[0]: the iv)


def push_while(s: Sweep, op: Op, env: dict, tan: dict, w: RuleBuilder) -> None:
    before, after = op.regions
    act_b = [i for i, a in enumerate(before.args) if a in s.active]
    act_a = [i for i, a in enumerate(after.args) if a in s.active]
    t_inits = [tangent_of(w, op.operands[i], env, tan) for i in act_b]
    pushed_op(op, env, tan, w, t_inits, act_a, [pushed_region(s, before, act_b, act_a, 1, env, tan),
                                                pushed_region(s, after, act_a, act_b, 0, env, tan)])


def pushed_op(op: Op, env: dict, tan: dict, w: RuleBuilder, t_inits: list, act: list, regions: list) -> None:
    """The region op written again: its operands, then `t_inits` (tangents of carried values);
    its results, then the tangents of the results at `act`."""
    w.loc = op.loc
    res = w.op(op.name, [env[o] for o in op.operands] + t_inits,
               [r.type for r in op.results] + [op.results[i].type for i in act], op.attrs, regions=regions)
    m = len(op.results)
    env.update(zip(op.results, res[:m]))
    tan.update((op.results[i], t) for i, t in zip(act, res[m:]))


def pushed_region(s: Sweep, b: Block, args_active: list, out_active: list, first: int, env: dict, tan: dict):
    """A writer of block b pushed forward: its arguments, then a tangent argument per index of
    `args_active`; its terminator's operands, then the tangents of those at `out_active`
    (counted from operand `first`: scf.condition's flag comes before its values)."""
    def write(w2):
        carried = [w2.value(a.type, "a") for a in b.args]
        t_in = [w2.value(b.args[i].type, "t") for i in args_active]
        if carried or t_in:  # (an scf.if's branches take none)
            w2.block_header(carried + t_in)
        env.update(zip(b.args, carried))
        tan.update((b.args[i], t) for i, t in zip(args_active, t_in))
        push_block(s, b, env, tan, w2)
        t = b.ops[-1]
        w2.loc = t.loc
        outs = t.operands[first:]
        w2.op(t.name, [env[o] for o in t.operands] + [tangent_of(w2, outs[i], env, tan) for i in out_active], [])
    return write
