"""Calls of dg functions and of gradients (`grad(f)(x)`, `vjp(f, x)[1](ct)`): each callee
specialized for the arguments' types, a gradient a declaration the autodiff pass defines."""
from __future__ import annotations

from dataclasses import dataclass

from dg.core.types import ShapeError, Sym, TensorType, is_float

from .. import ast as A
from ..builtins import METHODS, call_builtin, call_method
from ..values import (POISON, CheckpointRef, FuncRef, GradRef, ModuleRef, PackedList, VmapRef, Pullback, Static, TypedValue,
                      describe_structure, flatten, is_tuple, leaf_paths, map_leaves, same_structure, unflatten_like)
from .core import all_values
from .types import annotation_tree


def bind_arguments(em, fd: A.FuncDef, args, kwargs, loc):
    """Positional, keyword and default arguments -> one value per parameter."""
    params = fd.params
    if len(args) > len(params):
        em.error(f"{fd.name}() takes {len(params)} arguments but {len(args)} were given", loc)
        return None
    out = list(args) + [None] * (len(params) - len(args))
    for name, (v, kloc) in kwargs.items():
        idx = next((i for i, p in enumerate(params) if p.name == name), None)
        if idx is None:
            em.error(f"{fd.name}() has no parameter '{name}'", kloc)
            return None
        if out[idx] is not None:
            em.error(f"{fd.name}() got two values for '{name}'", kloc)
            return None
        out[idx] = v
    for i, p in enumerate(params):
        if out[i] is None:
            if p.default is None:
                em.error(f"{fd.name}() is missing the argument '{p.name}'", loc)
                return None
            out[i] = _default_value(em, p.default.value)
    return out


def _default_value(em, value):
    """A parameter's default as weak literals (a tuple default as a tuple of them)."""
    if isinstance(value, tuple):
        return tuple(_default_value(em, v) for v in value)
    return em.weak(value)


def _static(v) -> bool:
    """An integer or bool literal: a call specializes its callee for the value (values.Static)."""
    return isinstance(v, TypedValue) and v.name is None and not v.poison and v.weak and v.rank == 0 \
        and isinstance(v.const, (bool, int))


def _dynamic(t: TensorType) -> TensorType:
    return TensorType(t.dtype, tuple(Sym() for _ in t.shape))


class Calls:
    def e_Call(self, e):
        f = e.func
        if isinstance(f, A.Name):
            target = self.lookup(f)
        elif isinstance(f, A.Attribute):
            if f.attr in METHODS and not self.names_a_module(f.value):
                return call_method(self, e, f.attr)
            target = self.e_Attribute(f)
        elif isinstance(f, (A.Call, A.Subscript)):
            target = self.expr(f)  # grad(f)(x), vjp(f, x)[1](ct)
        else:
            return self.error("only named functions can be called", e.loc)
        if isinstance(target, TypedValue) and target.poison:
            for a in e.args:
                self.expr(a)
            return POISON
        if isinstance(target, tuple) and len(target) == 2 and target[0] == "builtin":
            return call_builtin(self, target[1], e)
        if isinstance(target, (FuncRef, GradRef, CheckpointRef, VmapRef, Pullback)):
            args = [self.expr(a) for a in e.args]
            kwargs = {k.name: (self.expr(k.value), k.loc) for k in e.kwargs}
            if isinstance(target, Pullback):
                return self.call_pullback(target, args, kwargs, e.loc)
            return self.call_user(target, args, kwargs, e.loc)
        return self.error("this value is not callable", e.loc)

    def names_a_module(self, node) -> bool:
        """Whether `node` is the name of an imported module (`layers.dense(...)` is its function)."""
        return isinstance(node, A.Name) and node.id not in self.env and isinstance(self.lookup(node), ModuleRef)

    def call_user(self, ref, args, kwargs, loc):
        r = self.resolve_call(ref, args, kwargs, loc, out_axes=True)
        if r is None:
            return POISON
        out = self.emit_call(*r[:4], loc)
        if isinstance(ref, VmapRef) and ref.out_axes != 0 and out is not None:
            out = map_leaves(lambda v: self.batch_axis_to(v, ref.out_axes, loc), out)
        return out

    def batch_axis_to(self, v, axis: int, loc):
        """A batched result with its batch axis (0) moved to `axis` (vmap's out_axes)."""
        r = v.type.rank
        if not -r <= axis < r:
            return self.error(f"vmap(): out_axes={axis} is out of range for a result of rank {r - 1}", loc)
        axis %= r
        perm = list(range(1, r))
        perm.insert(axis, 0)
        return self.op("transpose", [v], {"perm": tuple(perm)}, loc)

    def emit_call(self, symbol, vals, res_types, proto, loc):
        head, names = self.results(len(res_types))
        self.line(f"{head}func.call @{symbol}({', '.join(v.name for v in vals)}) : "
                  f"({', '.join(v.type.mlir() for v in vals)}) -> ({', '.join(t.mlir() for t in res_types)}) {self.loc_text(loc)}")
        outs = iter([TypedValue(n, t) for n, t in zip(names, res_types)])
        if proto is None:
            return None
        # (a Given leaf, a list's offsets in its gradient, is no result: the value it holds)
        return unflatten_like(proto, [x.value if isinstance(x, Given) else next(outs) for x in flatten(proto)])

    def resolve_call(self, ref, args, kwargs, loc, out_axes: bool = False):
        """(symbol, argument values, result types, result structure) of a call, or None after an
        error. `out_axes`: the caller moves a vmap's batch axis to its out_axes (else it must be 0)."""
        if isinstance(ref, VmapRef):
            if ref.out_axes != 0 and not out_axes:
                self.error("vmap(): out_axes other than 0 only where the mapped function is called", loc)
                return None
            return self.resolve_vmap(ref, args, kwargs, loc)
        if isinstance(ref, GradRef):
            return self.resolve_grad(ref, args, kwargs, loc)
        if isinstance(ref, CheckpointRef):
            base = self.resolve_call(ref.fn, args, kwargs, loc)
            if base is None:
                return None
            sym, vals, res_types, proto, groups = base
            dsym = self.mod.grad_decl("checkpoint", sym, (), [v.type for v in vals], res_types, loc, slots=ref.slots)
            return dsym, vals, res_types, proto, groups
        return self.resolve_user(ref, args, kwargs, loc)

    def resolve_vmap(self, ref: VmapRef, args, kwargs, loc):
        """vmap(f, in_axes)(args): f specialized for one example's arguments (each mapped axis taken
        away), and a `vmap` declaration the batch pass defines, called with the mapped arguments'
        batch axes moved to the front."""
        if kwargs:
            self.error("a vmap()-ed function takes its arguments by position", loc)
            return None
        n = len(args)
        axes = list(ref.in_axes) if isinstance(ref.in_axes, tuple) else [ref.in_axes] * n
        if len(axes) != n:
            self.error(f"vmap(): in_axes has {len(axes)} entries for {n} arguments", loc)
            return None
        leaves, ghosts, mapped, owners = [], [], [], []  # owners: per leaf, (argument, its structure)
        for i, (a, axis) in enumerate(zip(args, axes)):
            v = self.as_value(a, loc)
            if not all_values(v) or any(x.poison for x in flatten(v)):
                return None if any(x.poison for x in flatten(v) if isinstance(x, TypedValue)) else \
                    self.error(f"vmap(): argument {i} must be a tensor or a structure of tensors", loc)
            if isinstance(v, PackedList) and axis is not None:  # a list: mapped over its items
                if axis != 0:
                    self.error(f"vmap(): a list maps over its items: in_axes {axis} for argument {i} must be 0 or None", loc)
                    return None
                own = []
                for (data, offsets), t in zip(v.parts(), flatten(v.item)):
                    if t.rank == 0:  # scalar items: the packed leaf is their batch
                        leaves.append(data)
                        mapped.append(True)
                    elif isinstance(t.shape[0], int) or t.shape[0].name:  # items of one declared size: a batch
                        n_items = self.list_len(v, loc)
                        shape = (-2, t.shape[0] if isinstance(t.shape[0], int) else -1) + tuple(
                            d if isinstance(d, int) else -2 for d in t.shape[1:])
                        dims = [self.shape_dim(data, 1 + k, loc) for k, d in enumerate(t.shape[1:]) if not isinstance(d, int)]
                        leaves.append(self.op("reshape", [data, n_items] + dims, {"shape": shape}, loc))
                        mapped.append(True)
                    else:  # rows of each item, laid end to end
                        leaves.append((data, offsets))
                        mapped.append("ragged")
                    own.append(TypedValue(data.name, t if mapped[-1] is True else data.type))
                    owners.append((i, None))
                ghosts.append(unflatten_like(v.item, own))
                continue
            own = []
            for x in flatten(v):
                x = self.materialize(x, loc=loc)
                if axis is None:
                    own.append(x)
                    leaves.append(x)
                    mapped.append(False)
                    continue
                r = x.type.rank
                if not -r <= axis < r:
                    self.error(f"vmap(): in_axes={axis} is out of range for argument {i}, of rank {r}", loc)
                    return None
                a0 = axis % r
                if a0:
                    x = self.op("transpose", [x], {"perm": (a0,) + tuple(k for k in range(r) if k != a0)}, loc)
                leaves.append(x)
                mapped.append(True)
                own.append(TypedValue(x.name, TensorType(x.dtype, x.type.shape[1:])))
            owners += [(i, v)] * len(own)
            ghosts.append(unflatten_like(v, own))
        if not any(mapped):
            self.error("vmap() needs at least one mapped argument (in_axes not all None)", loc)
            return None
        # One example's call, resolved on stand-ins of one example's arguments: what it writes
        # for them (casts, sizes made generic) is dropped and done again below on the batches.
        start = len(self.lines)
        r = self.resolve_call(ref.fn, ghosts, {}, loc)
        del self.lines[start:]
        self.last_def = None
        if r is None:
            return None
        sym, vals, res_types, proto, groups = r
        if len(vals) != len(leaves):
            self.error("vmap(): an argument of a literal value cannot be mapped", loc)
            return None
        ins, types, parts = [], [], {}  # parts: argument -> its values among `ins`
        for x, one, m, (i, _) in zip(leaves, vals, mapped, owners):
            parts.setdefault(i, len(ins))
            if m == "ragged":
                data, offsets = x
                if data.dtype != one.type.dtype:
                    self.error(f"vmap(): the items of a list are {data.dtype}; the function takes {one.type}", loc)
                    return None
                ins += [self.conform(data, one.type, loc), offsets]
                types += [one.type, offsets.type]
                continue
            t = TensorType(one.type.dtype, (Sym(),) + tuple(one.type.shape)) if m else one.type
            x = self.conform(self.cast(x, t.dtype, loc), t, loc)
            ins.append(x)
            types.append(t)
        out_types = [TensorType(t.dtype, (Sym(),) + tuple(t.shape)) for t in res_types]
        where = tuple(i for i, m in enumerate(mapped) if m is True)
        ragged = tuple(i for i, m in enumerate(mapped) if m == "ragged")
        dsym = self.mod.grad_decl("vmap", sym, where, types, out_types, loc, ragged=ragged)
        groups = []  # per argument: where its values start, and their structure (a list's: a tuple)
        for i in range(n):
            end = min([parts[j] for j in parts if j > i] + [len(ins)])
            tree = next((v for j, v in owners if j == i and v is not None), None)
            own = ins[parts[i]:end]
            groups.append((parts[i], unflatten_like(tree, own) if tree is not None and not _static_free(tree, own)
                           else tuple(own)))
        return dsym, ins, out_types, proto, groups

    def resolve_grad(self, ref: GradRef, args, kwargs, loc):
        base = self.resolve_call(ref.fn, args, kwargs, loc)
        if base is None:
            return None
        sym, vals, res_types, _, groups = base
        single = not isinstance(ref.wrt, tuple)
        wrt = (ref.wrt,) if single else ref.wrt
        flat_wrt, gtrees = [], []
        for i in wrt:
            if not 0 <= i < len(groups):
                self.error(f"{ref.kind}(): wrt={i} is out of range for a function of {len(groups)} arguments", loc)
                return None
            start, tree = groups[i]
            leaves = flatten(tree)
            offsets = _list_offsets(tree)
            for j, (v, path) in enumerate(zip(leaves, leaf_paths(tree))):
                if j in offsets:  # a list's offsets: its gradient's are its own
                    continue
                if not is_float(v.dtype):
                    what = f"argument {i}" + (f" at {path}" if path else "")
                    self.error(f"{ref.kind}(): cannot differentiate with respect to {what}: "
                               f"it is {v.type}, not a float tensor", loc)
                    return None
                flat_wrt.append(start + j)
            gtrees.append(unflatten_like(tree, [Given(v) if j in offsets else TypedValue(None, v.type)
                                                for j, v in enumerate(leaves)]))
        if len(res_types) != 1 or res_types[0].rank or not is_float(res_types[0].dtype):
            shown = ", ".join(str(t) for t in res_types) or "nothing"
            self.error(f"{ref.kind}() needs a function that returns one float scalar; it returns {shown}", loc)
            return None
        gtypes = [vals[i].type for i in flat_wrt]
        gproto = gtrees[0] if single else tuple(gtrees)
        if ref.kind == "grad":
            out_types, proto = gtypes, gproto
        else:
            out_types, proto = res_types + gtypes, (TypedValue(None, res_types[0]), gproto)
        dsym = self.mod.grad_decl(ref.kind, sym, tuple(flat_wrt), [v.type for v in vals], out_types, loc)
        return dsym, vals, out_types, proto, groups

    def linear_inputs(self, given: list, types: list, loc, what: str):
        """Cotangents or tangents as values of the types they go with (a number takes its type, as
        a weak literal does); None after an error (reported)."""
        out = []
        for c, t in zip(given, types):
            if not isinstance(c, TypedValue):
                self.error(f"a {what} must be a tensor", loc)
                return None
            if c.poison:
                return None
            c = self.coerce(c, t, loc, f"the {what}")
            if c.poison:
                return None
            out.append(self.conform(c, t, loc))
        return out

    def call_pullback(self, pb: Pullback, args, kwargs, loc):
        if kwargs or len(args) != 1:
            return self.error("a vjp pullback takes one argument: the cotangent of the function's result", loc)
        ct = self.as_value(args[0], loc)
        if is_tuple(pb.result_proto) and not same_structure(ct, pb.result_proto):
            return self.error(f"the cotangent must have the structure of the function's result "
                              f"({describe_structure(pb.result_proto)}); it is {describe_structure(ct)}", loc)
        cts = flatten(ct)
        if len(cts) != len(pb.result_types):
            return self.error(f"the cotangent has {len(cts)} parts; the function returns {len(pb.result_types)}", loc)
        floats = [i for i, t in enumerate(pb.result_types) if is_float(t.dtype)]
        ct_vals = self.linear_inputs([cts[i] for i in floats], [pb.result_types[i] for i in floats], loc, "cotangent")
        if ct_vals is None:
            return POISON
        wrt = tuple(i for i, v in enumerate(pb.vals) if is_float(v.dtype))
        types = [pb.vals[i].type for i in wrt]
        dsym = self.mod.grad_decl("vjp", pb.symbol, wrt, [v.type for v in pb.vals] +
                                  [pb.result_types[i] for i in floats], types, loc)
        grads = self.emit_call(dsym, list(pb.vals) + ct_vals, types, tuple(TypedValue(None, t) for t in types), loc)
        it = iter(grads)
        flat = [next(it) if is_float(v.dtype) else self.op("zeros_like", [v], loc=loc) for v in pb.vals]
        out = []
        for start, tree in pb.groups:  # a static leaf (an int literal) has no place among the values
            own = iter(flat[start:])
            out.append(unflatten_like(tree, [self.weak(0) if _static(x) else next(own) for x in flatten(tree)]))
        return tuple(out)

    def call_jvp(self, fn, primals, tangents, loc):
        """jvp(f, primals, tangents) -> (f(*primals), the tangent of the result): forward mode.
        `tangents` has the structure of `primals`; the tangents of integer and bool leaves are
        not used, and the result's integer leaves get zero tangents."""
        if not is_tuple(primals) or not is_tuple(tangents):
            return self.error("jvp() takes a function, a tuple of primals and a tuple of tangents", loc)
        if not same_structure(primals, tangents):
            return self.error(f"the tangents must have the structure of the primals "
                              f"({describe_structure(primals)}); they are {describe_structure(tangents)}", loc)
        r = self.resolve_call(fn, list(primals), {}, loc)
        if r is None:
            return POISON
        sym, vals, res_types, proto, groups = r
        leaves = []  # (primal leaf, tangent leaf), as the values are laid out
        for (_, tree), t in zip(groups, tangents):
            t = self.as_value(t, loc)
            leaves += [(p, q) for p, q in zip(flatten(tree), flatten(t)) if not _static(p)]
        wrt = [i for i, v in enumerate(vals) if is_float(v.dtype)]
        t_vals = self.linear_inputs([leaves[i][1] for i in wrt], [vals[i].type for i in wrt], loc, "tangent")
        if t_vals is None:
            return POISON
        floats = [t for t in res_types if is_float(t.dtype)]
        out_types = list(res_types) + floats
        dsym = self.mod.grad_decl("jvp", sym, tuple(wrt), [v.type for v in vals] + [vals[i].type for i in wrt],
                                  out_types, loc)
        outs = self.emit_call(dsym, list(vals) + t_vals, out_types, tuple(TypedValue(None, t) for t in out_types), loc)
        n = len(res_types)
        made = iter(outs[n:])
        tans = [next(made) if is_float(t.dtype) else self.op("zeros_like", [v], loc=loc)
                for t, v in zip(res_types, outs[:n])]
        if proto is None:
            return self.error("jvp() needs a function that returns a value", loc)
        return (unflatten_like(proto, list(outs[:n])), unflatten_like(proto, tans))

    def resolve_user(self, ref: FuncRef, args, kwargs, loc):
        """(symbol, flat argument values, result types, result structure, groups): `groups` has, per
        parameter, where its leaves start among the values and its structure of values."""
        fd = ref.module.funcs[ref.name]
        bound = bind_arguments(self, fd, args, kwargs, loc)
        if bound is None:
            return None
        trees, types = [], []
        names: dict = {}  # the callee's named dims, shared across its parameters
        # A recursive function gets all-dynamic sizes, from its first call on: its recursive calls
        # need them, and one specialization serves both (a first one of static sizes would be
        # a whole copy of the function, made for one call).
        recursive = self.mod.in_progress_fn(ref.module, fd) or self.mod.recurses(ref.module, fd)
        for p, v in zip(fd.params, bound):
            v = self.as_value(v, loc)
            if not all_values(v):
                kind = "a tensor or a structure of tensors"
                self.error(f"argument '{p.name}' must be {kind}", loc)
                return None
            if any(x.poison for x in flatten(v)):
                return None
            try:
                declared = annotation_tree(p.annotation, names)
            except ShapeError as e:
                return self.error(str(e), p.annotation.loc)
            if declared is not None:
                if not same_structure(declared, v):
                    self.error(f"argument '{p.name}' of {fd.name}() must be {describe_structure(declared)}, "
                               f"got {describe_structure(v)}", loc)
                    return None
                leaves = []
                for x, t, path in zip(flatten(v), flatten(declared), leaf_paths(declared)):
                    x = self.coerce(x, t, loc, f"argument '{p.name}{path}' of {fd.name}()")
                    if x.poison:
                        return None
                    leaves.append(x)
                v, t = unflatten_like(declared, leaves), declared
            else:
                v = map_leaves(lambda x: x if _static(x) and not recursive else self.materialize(x, loc=loc), v)
                t = map_leaves(lambda x: Static(x.const, x.dtype) if _static(x) else x.type, v)
            trees.append(v)
            types.append(map_leaves(_dynamic, t) if recursive else t)
        spec = self.mod.specialize(ref.module, fd, types, loc)
        if spec.result_types is None:
            return None
        if any(t is None for t in spec.result_types):
            return None
        vals, groups = [], []
        for v, t in zip(trees, spec.param_types):
            leaves = [x if isinstance(y, Static) else self.conform(x, y, loc) for x, y in zip(flatten(v), flatten(t))]
            groups.append((len(vals), unflatten_like(v, leaves)))
            vals += [x for x, y in zip(leaves, flatten(t)) if not isinstance(y, Static)]
        return spec.symbol, vals, spec.result_types, spec.result_proto, groups


def _static_free(tree, values) -> bool:
    """Whether a structure's leaf count differs from its values' (then the values are a tuple)."""
    return len(flatten(tree)) != len(values)


@dataclass(frozen=True)
class Given:
    """A leaf of a call's result structure that the call does not return: the value it holds."""
    value: object


def _list_offsets(tree) -> set:
    """The positions, among a structure's leaves, of the offsets of the lists in it."""
    out, k = set(), 0

    def walk(t):
        nonlocal k
        if isinstance(t, PackedList):
            out.update(k + j for j in range(1, len(t), 2))
            k += len(t)
        elif isinstance(t, tuple):
            for e in t:
                walk(e)
        else:
            k += 1
    walk(tree)
    return out
