"""Forward-mode autodiff: the JVP half of the autodiff pass (`dg opt --passes autodiff`).

Expects: the `Autodiff` object of lowering/autodiff.py (this class is one of
its bases), and a declaration carrying `dg.kind = "jvp"`, `dg.of` and
`dg.wrt` (the float arguments that get tangents), with the parameters
`(primals..., tangents of the wrt arguments...)` and the results
`(f's results..., tangents of f's float results...)`.
Guarantees: the declaration gets a body calling `f__tangent_<mask>`, a dg
function that runs f's ops once, each followed by its tangent: dg ops
built by the `jvp` facet of the op's registry entry. Both modes run it.

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
- Gradient declarations met on the way get their bodies first, so `jvp`
  of `grad` (a Hessian-vector product) differentiates the reverse sweep
  forward; and a jvp function is ordinary dg IR, so `grad` of `jvp`
  differentiates it backward.
"""
from __future__ import annotations

from dg.core.errors import DgError
from dg.core.locations import loc_of
from dg.dialects.registry import OPS

from .irmodel import Block, Op

TERMINATORS = ("scf.yield", "scf.condition", "func.return")


class ForwardMode:
    """Mixed into `Autodiff`: the JVP functions, sharing its module, names and declarations."""

    def jvp_function(self, sym: str, mask: tuple) -> str:
        ck = self.checkpointed(sym)
        if ck is not None:  # forward mode keeps nothing: checkpointing changes nothing
            return self.jvp_function(ck[0], mask)
        key = ("jvp", sym, mask)
        if key in self.vjps:
            return self.vjps[key]
        name, f = self.derived(key, sym, "tangent", mask, "push a tangent through")
        w, env, args = self.start(f)
        tangents = [w.value(f.args[i].type, "t") for i in mask]
        saved = getattr(self, "fwd_active", None)
        self.fwd_active = self.activity_of(f.body, {f.args[i] for i in mask})
        tan = {f.args[i]: t for i, t in zip(mask, tangents)}
        self.push_block(f.body, env, tan, w)
        ret = f.body.ops[-1]
        w.loc = ret.loc
        floats = [o for o in ret.operands if self.is_float(o)]
        outs = [env[o] for o in ret.operands] + [self.tangent_of(w, o, env, tan) for o in floats]
        w.op("func.return", outs, [])
        self.fwd_active = saved
        out_types = f.result_types + [o.type for o in floats]
        self.texts[name] = self.function_text(name, args + tangents, out_types, f.loc, w)
        return name

    # ------------------------------------------------------------ tangents
    def tangent_of(self, w, v, env: dict, tan: dict):
        """v's tangent, as a value of v's type: zeros where none was made."""
        t = tan.get(v)
        return w.zeros_like(env[v]) if t is None else t

    @staticmethod
    def conform(w, t, like):
        """A rule's tangent as a value of exactly `like`'s type: broadcast to its shape (a rule may
        give a tangent of an operand's shape where the op broadcasts), sizes the types fix alike."""
        if t.type == like.type:
            return t
        if t.tt.dtype != like.tt.dtype:
            t = w.dg_op("cast", [t], {"dtype": like.tt.dtype})
        if t.tt.shape != like.tt.shape:
            t = w.bcast(t, like)
        if t.type != like.type:
            t = w.dg_op("sum_to", [t, like])
        return t

    # ------------------------------------------------------------ blocks
    def push_block(self, block: Block, env: dict, tan: dict, w) -> None:
        """Copy `block`'s ops (its terminator excepted), each followed by its tangent."""
        for op in block.ops:
            if op.name in TERMINATORS:
                continue
            w.loc = op.loc
            active_in = any(o in tan or o in self.fwd_active for o in op.operands) or (
                op.regions and any(v in self.fwd_active for v in self.free_values(op.regions)))
            if not active_in:
                self.copy_op(op, env, w)
            elif op.name == "scf.if":
                self.push_if(op, env, tan, w)
            elif op.name == "scf.for":
                self.push_for(op, env, tan, w)
            elif op.name == "scf.while":
                self.push_while(op, env, tan, w)
            elif op.name == "func.call":
                self.push_call(op, env, tan, w)
            else:
                self.copy_op(op, env, w)
                if op.dg is not None:
                    self.push_dg(op, env, tan, w)

    def copy_op(self, op: Op, env: dict, w) -> None:
        if op.regions:
            self.copy_region_op(op, env, w, effects=True)
        else:
            res = w.op(op.name, [env[o] for o in op.operands], [r.type for r in op.results], op.attrs)
            env.update(zip(op.results, res))

    def push_dg(self, op: Op, env: dict, tan: dict, w) -> None:
        outs = [r for r in op.results if r in self.fwd_active]
        ts = [tan.get(o) if o in self.fwd_active else None for o in op.operands]
        if not outs or all(t is None for t in ts):
            return
        opdef = OPS[op.dg]
        if opdef.jvp is None:
            raise DgError(f"dg.{op.dg} has no forward-mode (jvp) rule", loc_of(op.location))
        got = opdef.jvp(w, self.op_view(op, env), ts)
        got = list(got) if isinstance(got, (list, tuple)) else [got]
        for r, t in zip(op.results, got):
            if t is not None and r in self.fwd_active:
                tan[r] = self.conform(w, t, env[r])

    def push_call(self, op: Op, env: dict, tan: dict, w) -> None:
        mask = tuple(i for i, o in enumerate(op.operands) if o in self.fwd_active)
        if not mask:
            return self.copy_op(op, env, w)
        callee = op.attrs["callee"].strip().strip('"').lstrip("@")
        core = self.jvp_function(callee, mask)
        floats = [r for r in op.results if self.is_float(r)]
        w.loc = op.loc
        outs = w.op("func.call", [env[o] for o in op.operands] + [self.tangent_of(w, op.operands[i], env, tan)
                                                                    for i in mask],
                    [r.type for r in op.results] + [r.type for r in floats], {"callee": f"@{core}"})
        env.update(zip(op.results, outs))
        for r, t in zip(floats, outs[len(op.results):]):
            tan[r] = t

    def push_if(self, op: Op, env: dict, tan: dict, w) -> None:
        act = [i for i, r in enumerate(op.results) if r in self.fwd_active]
        self.pushed_op(op, env, tan, w, [], act, [self.pushed_region(b, [], act, 0, env, tan) for b in op.regions])

    def push_for(self, op: Op, env: dict, tan: dict, w) -> None:
        body = op.regions[0]
        act = [i for i, a in enumerate(body.args[1:]) if a in self.fwd_active]
        t_inits = [self.tangent_of(w, op.operands[3 + i], env, tan) for i in act]
        self.pushed_op(op, env, tan, w, t_inits, act,
                       [self.pushed_region(body, [1 + i for i in act], act, 0, env, tan)])  # (body.args[0]: the iv)

    def push_while(self, op: Op, env: dict, tan: dict, w) -> None:
        before, after = op.regions
        act_b = [i for i, a in enumerate(before.args) if a in self.fwd_active]
        act_a = [i for i, a in enumerate(after.args) if a in self.fwd_active]
        t_inits = [self.tangent_of(w, op.operands[i], env, tan) for i in act_b]
        self.pushed_op(op, env, tan, w, t_inits, act_a, [self.pushed_region(before, act_b, act_a, 1, env, tan),
                                                         self.pushed_region(after, act_a, act_b, 0, env, tan)])

    def pushed_op(self, op: Op, env: dict, tan: dict, w, t_inits: list, act: list, regions: list) -> None:
        """The region op written again: its operands, then `t_inits` (tangents of carried values);
        its results, then the tangents of the results at `act`."""
        w.loc = op.loc
        res = w.op(op.name, [env[o] for o in op.operands] + t_inits,
                   [r.type for r in op.results] + [op.results[i].type for i in act], op.attrs, regions=regions)
        m = len(op.results)
        env.update(zip(op.results, res[:m]))
        tan.update((op.results[i], t) for i, t in zip(act, res[m:]))

    def pushed_region(self, b: Block, args_active: list, out_active: list, first: int, env: dict, tan: dict):
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
            self.push_block(b, env, tan, w2)
            t = b.ops[-1]
            w2.loc = t.loc
            outs = t.operands[first:]
            w2.op(t.name, [env[o] for o in t.operands] + [self.tangent_of(w2, outs[i], env, tan) for i in out_active],
                  [])
        return write
