"""Batching: the `batch` pass on dg IR (`dg opt --passes batch`, `.ir("batch")`).

Expects: a verified dg module in which `vmap` requests are function
declarations carrying `dg.kind = "vmap"`, `dg.of` (the function mapped) and
`dg.wrt` (the positions of its mapped arguments, which come batched along
axis 0; the emitter moves other axes there), and whose results are every
result of the function batched along axis 0. Guarantees: every such
declaration gets a body: a check that the mapped arguments agree on the
batch size, then a call of the function's batched version
(function.py), for all examples active. The module comes back as dg IR that
both the interpreter and the compiled backends run, and that the autodiff
pass differentiates as any other (`grad` of a `vmap`: a minibatch's
gradient).

The pieces: flags.py (which values differ by example), function.py (a
function written batched), and the ops' own `batch` facets
(dialects/batch_rules.py).
"""
from __future__ import annotations

from dg.core.errors import DgError
from dg.core.locations import loc_of
from dg.core.types import TensorType
from dg.core.writer import Value
from dg.dialects.rules import DYN, BatchBuilder

from ..ad.module import Derivatives, ints, unquoted
from ..ad.reverse import vjp_function
from .function import FunctionBatcher, batched_type, conform

GRADIENTS = ("grad", "value_and_grad")


class Batcher:
    """The batched functions of one module (a `Derivatives`, which the autodiff pass writes too)."""

    def __init__(self, mod: Derivatives):
        self.mod = mod

    def batched(self, sym: str, mapped: tuple, where=None) -> str:
        """The name of `sym`'s batched function for the mapped arguments (a flag each), written
        the first time it is asked for (named first: a recursive function calls itself)."""
        mod = self.mod
        key = ("batch", sym, mapped)
        if key in mod.names:
            return mod.names[key]
        f = mod.funcs.get(sym)
        if f is None:
            raise DgError(f"vmap: the function '{sym}' is not in the module", loc_of(where.location) if where else None)
        name = f"{sym}__batch_{''.join('1' if m else '0' for m in mapped)}"
        while name in mod.funcs or name in mod.texts:
            name += "_"
        mod.names[key] = name
        kind = unquoted(f.attrs.get("dg.kind", ""))
        if kind in GRADIENTS:
            self.batched_gradient(f, kind, name, mapped)
            return name
        if f.body is None:
            if sym not in mod.texts:
                raise DgError(f"'{sym}' is batched before it is defined", loc_of(f.location))
            f = mod.reread(sym)
        FunctionBatcher(self, f, name, mapped).write()
        return name

    def batched_gradient(self, f, kind: str, name: str, mapped: tuple) -> None:
        """`grad(g)` or `value_and_grad(g)` batched: the pullback of g batched, with the
        differentiated arguments batched too (stacked where they are shared), of a cotangent of
        ones. Examples are independent, so the gradient of the batch's sum with respect to
        example b's copy of an argument is example b's gradient."""
        mod = self.mod
        of = unquoted(f.attrs["dg.of"]).lstrip("@")
        wrt = ints(f.attrs["dg.wrt"])
        target = mod.funcs[of]
        if target.body is None and of in mod.texts:
            target = mod.reread(of)
        g = BatchBuilder(mod.counter)
        args = [g.value(batched_type(a.type) if m else a.type, "arg") for a, m in zip(f.args, mapped)]
        mask = g.value("tensor<?xi1>", "mask")
        g.loc = f.loc
        g.mask = mask
        g.size = g.dim(mask, 0)
        inner = tuple(m or i in wrt for i, m in enumerate(mapped))
        fwd = self.batched(of, inner)
        mod.reread(fwd)
        ins = [conform(g, a if m else g.stacked(a), batched_type(t.type)) if i in wrt else a
               for i, (a, m, t) in enumerate(zip(args, mapped, f.args))]
        pull = vjp_function(mod, fwd, tuple(wrt))
        one = g.const(1.0, Value(target.result_types[0]).tt)
        ones = g.dg_op("broadcast_to", [g.dg_op("expand_dims", [one], {"axes": (0,)}), g.size], {"shape": (DYN,)})
        vt = batched_type(target.result_types[0])
        out_types = [vt] + [batched_type(f.args[i].type) for i in wrt]
        outs = g.op("func.call", ins + [mask, conform(g, ones, vt)], out_types, {"callee": f"@{pull}"})
        outs = outs if kind == "value_and_grad" else outs[1:]
        g.op("func.return", outs, [])
        mod.write(name, args + [mask], [batched_type(t) for t in f.result_types], f.loc, g)


def define_vmap(mod: Derivatives, sym: str) -> None:
    """Give a `vmap` declaration its body: the batch size checked, then the batched function
    called for every example."""
    f = mod.funcs[sym]
    of = unquoted(f.attrs["dg.of"]).lstrip("@")
    mapped_at = ints(f.attrs["dg.wrt"])
    mapped = tuple(i in mapped_at for i in range(len(f.args)))
    if not mapped_at:
        raise DgError("vmap needs at least one mapped argument (in_axes not all None)", loc_of(f.location))
    g = BatchBuilder(mod.counter)
    args = [g.value(a.type, "arg") for a in f.args]
    g.loc = f.loc
    first = args[mapped_at[0]]
    g.size = g.dim(first, 0)
    for i in mapped_at[1:]:
        same = g.dg_op("eq", [g.dim(args[i], 0), g.size])
        g.dg_op("check", [same], {"msg": f"vmap: mapped argument {i} has a batch size different from "
                                         f"argument {mapped_at[0]}'s"})
    g.mask = g.dg_op("full", [g.const(True, TensorType("bool", ())), g.size], {"shape": (DYN,)})
    name = Batcher(mod).batched(of, mapped, f)
    callee = mod.funcs[of]
    ins = [conform(g, a, batched_type(t.type)) if m else a for a, m, t in zip(args, mapped, callee.args)]
    outs = g.op("func.call", ins + [g.mask], [batched_type(t) for t in callee.result_types], {"callee": f"@{name}"})
    g.op("func.return", [conform(g, v, t) for v, t in zip(outs, f.result_types)], [])
    mod.write(sym, args, f.result_types, f.loc, g)
