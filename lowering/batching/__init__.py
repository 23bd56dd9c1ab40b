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
from .ragged import RAGGED

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
        name = f"{sym}__batch_{''.join('r' if m == RAGGED else '1' if m else '0' for m in mapped)}"
        while name in mod.funcs or name in mod.texts:
            name += "_"
        mod.names[key] = name
        attrs = mod.declared.get(sym, f.attrs)
        kind = unquoted(attrs.get("dg.kind", ""))
        if kind in GRADIENTS:
            self.batched_gradient(mod.funcs[sym], attrs, kind, name, mapped)
            return name
        if f.body is None:
            if sym not in mod.texts:
                raise DgError(f"'{sym}' is batched before it is defined", loc_of(f.location))
            f = mod.reread(sym)
        FunctionBatcher(self, f, name, mapped).write()
        return name

    def batched_gradient(self, f, attrs: dict, kind: str, name: str, mapped: tuple) -> None:
        """`grad(g)` or `value_and_grad(g)` batched: the pullback of g batched, with the
        differentiated arguments batched too (stacked where they are shared), of a cotangent of
        ones. Examples are independent, so the gradient of the batch's sum with respect to
        example b's copy of an argument is example b's gradient."""
        mod = self.mod
        of = unquoted(attrs["dg.of"]).lstrip("@")
        wrt = ints(attrs["dg.wrt"])
        target = mod.funcs[of]
        if target.body is None and of in mod.texts:
            target = mod.reread(of)
        g = BatchBuilder(mod.counter)
        g.loc = f.loc
        ins, params, at = [], [], []  # the batched forward's arguments, this function's, where each f arg starts
        for i, (a, m) in enumerate(zip(f.args, mapped)):
            at.append(len(ins))
            if m == RAGGED:
                if i in wrt:
                    raise DgError("vmap of a gradient with respect to a list's item is not batched yet",
                                  loc_of(f.location))
                vals = [g.value(a.type, "arg"), g.value("tensor<?xi64>", "start"), g.value("tensor<?xi64>", "stop")]
                params += vals
                ins += vals
                continue
            v = g.value(batched_type(a.type) if m else a.type, "arg")
            params.append(v)
            ins.append(v)
        mask = g.value("tensor<?xi1>", "mask")
        g.mask = mask
        g.size = g.dim(mask, 0)
        for i in wrt:
            if not mapped[i]:
                ins[at[i]] = conform(g, g.stacked(ins[at[i]]), batched_type(f.args[i].type))
        inner = tuple(m if m == RAGGED else bool(m) or i in wrt for i, m in enumerate(mapped))
        fwd = self.batched(of, inner)
        mod.reread(fwd)
        pull = vjp_function(mod, fwd, tuple(at[i] for i in wrt))
        one = g.const(1.0, Value(target.result_types[0]).tt)
        ones = g.dg_op("broadcast_to", [g.dg_op("expand_dims", [one], {"axes": (0,)}), g.size], {"shape": (DYN,)})
        vt = batched_type(target.result_types[0])
        out_types = [vt] + [batched_type(f.args[i].type) for i in wrt]
        outs = g.op("func.call", ins + [mask, conform(g, ones, vt)], out_types, {"callee": f"@{pull}"})
        outs = outs if kind == "value_and_grad" else outs[1:]
        g.op("func.return", outs, [])
        mod.write(name, params + [mask], [batched_type(t) for t in f.result_types], f.loc, g)


def define_vmap(mod: Derivatives, sym: str) -> None:
    """Give a `vmap` declaration its body: the batch size checked, then the batched function
    called for every example."""
    f = mod.funcs[sym]
    of = unquoted(f.attrs["dg.of"]).lstrip("@")
    callee = mod.funcs[of]
    batched_at = ints(f.attrs["dg.wrt"])
    ragged_at = ints(f.attrs["dg.ragged"]) if "dg.ragged" in f.attrs else ()
    mapped = tuple(RAGGED if i in ragged_at else i in batched_at for i in range(len(callee.args)))
    if not any(mapped):
        raise DgError("vmap needs at least one mapped argument (in_axes not all None)", loc_of(f.location))
    g = BatchBuilder(mod.counter)
    args = [g.value(a.type, "arg") for a in f.args]
    g.loc = f.loc
    i64 = TensorType("i64", ())
    # Per argument of the callee: its value, or a list's rows and offsets (two arguments here).
    given, sizes, k = [], [], 0
    for i, m in enumerate(mapped):
        if m == RAGGED:
            data, offsets = args[k], args[k + 1]
            n = g.sub(g.dim(offsets, 0), g.const(1, i64))
            sizes.append((i, n))
            given.append((data, offsets, n))
            k += 2
            continue
        if m:
            sizes.append((i, g.dim(args[k], 0)))
        given.append(args[k])
        k += 1
    first, g.size = sizes[0]
    for i, n in sizes[1:]:
        g.dg_op("check", [g.dg_op("eq", [n, g.size])],
                {"msg": f"vmap: mapped argument {i} has a batch size different from argument {first}'s"})
    g.mask = g.dg_op("full", [g.const(True, TensorType("bool", ())), g.size], {"shape": (DYN,)})
    name = Batcher(mod).batched(of, mapped, f)
    ins = []
    for a, m, t in zip(given, mapped, callee.args):
        if m == RAGGED:
            data, offsets, n = a
            ins += [data, g.dg_op("getitem", [offsets, n], {"spec": ("s::$:",)}),
                    g.dg_op("getitem", [offsets, g.const(1, i64)], {"spec": ("s:$::",)})]
        else:
            ins.append(conform(g, a, batched_type(t.type)) if m else a)
    outs = g.op("func.call", ins + [g.mask], [batched_type(t) for t in callee.result_types], {"callee": f"@{name}"})
    g.op("func.return", [conform(g, v, t) for v, t in zip(outs, f.result_types)], [])
    mod.write(sym, args, f.result_types, f.loc, g)
