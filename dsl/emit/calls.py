"""Calls of dg functions and of gradients (`grad(f)(x)`, `vjp(f, x)[1](ct)`): each callee
specialized for the arguments' types, a gradient a declaration the autodiff pass defines."""
from __future__ import annotations

from dg.core.types import ShapeError, Sym, TensorType, annotation_type, is_float

from .. import ast as A
from ..builtins import METHODS, call_builtin, call_method
from ..values import POISON, FuncRef, GradRef, ModuleRef, Pullback, TypedValue, flatten, unflatten_like


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
            out[i] = em.weak(p.default.value)
    return out


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
        if isinstance(target, (FuncRef, GradRef, Pullback)):
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
        r = self.resolve_call(ref, args, kwargs, loc)
        if r is None:
            return POISON
        return self.emit_call(*r, loc)

    def emit_call(self, symbol, vals, res_types, proto, loc):
        head, names = self.results(len(res_types))
        self.line(f"{head}func.call @{symbol}({', '.join(v.name for v in vals)}) : "
                  f"({', '.join(v.type.mlir() for v in vals)}) -> ({', '.join(t.mlir() for t in res_types)}) {self.loc_text(loc)}")
        outs = [TypedValue(n, t) for n, t in zip(names, res_types)]
        if proto is None:
            return None
        return unflatten_like(proto, outs)

    def resolve_call(self, ref, args, kwargs, loc):
        """(symbol, argument values, result types, result structure) of a call, or None after an error."""
        if isinstance(ref, GradRef):
            return self.resolve_grad(ref, args, kwargs, loc)
        return self.resolve_user(ref, args, kwargs, loc)

    def resolve_grad(self, ref: GradRef, args, kwargs, loc):
        base = self.resolve_call(ref.fn, args, kwargs, loc)
        if base is None:
            return None
        sym, vals, res_types, _ = base
        single = not isinstance(ref.wrt, tuple)
        wrt = (ref.wrt,) if single else ref.wrt
        for i in wrt:
            if not 0 <= i < len(vals):
                self.error(f"{ref.kind}(): wrt={i} is out of range for a function of {len(vals)} arguments", loc)
                return None
            if not is_float(vals[i].dtype):
                self.error(f"{ref.kind}(): cannot differentiate with respect to argument {i}: "
                           f"it is {vals[i].type}, not a float tensor", loc)
                return None
        if len(res_types) != 1 or res_types[0].rank or not is_float(res_types[0].dtype):
            shown = ", ".join(str(t) for t in res_types) or "nothing"
            self.error(f"{ref.kind}() needs a function that returns one float scalar; it returns {shown}", loc)
            return None
        gtypes = [vals[i].type for i in wrt]
        gproto = TypedValue(None, gtypes[0]) if single else tuple(TypedValue(None, t) for t in gtypes)
        if ref.kind == "grad":
            out_types, proto = gtypes, gproto
        else:
            out_types, proto = res_types + gtypes, (TypedValue(None, res_types[0]), gproto)
        dsym = self.mod.grad_decl(ref.kind, sym, tuple(wrt), [v.type for v in vals], out_types, loc)
        return dsym, vals, out_types, proto

    def call_pullback(self, pb: Pullback, args, kwargs, loc):
        if kwargs or len(args) != 1:
            return self.error("a vjp pullback takes one argument: the cotangent of the function's result", loc)
        cts = flatten(args[0])
        if len(cts) != len(pb.result_types):
            return self.error(f"the cotangent has {len(cts)} parts; the function returns {len(pb.result_types)}", loc)
        floats = [i for i, t in enumerate(pb.result_types) if is_float(t.dtype)]
        ct_vals = []
        for i in floats:
            c = self.as_value(cts[i], loc)
            if not isinstance(c, TypedValue) or c.poison:
                return self.error("a cotangent must be a tensor", loc) if not isinstance(c, TypedValue) else POISON
            c = self.coerce(c, pb.result_types[i], loc, "the cotangent")
            if c.poison:
                return POISON
            ct_vals.append(self.conform(c, pb.result_types[i], loc))
        wrt = tuple(i for i, v in enumerate(pb.vals) if is_float(v.dtype))
        types = [pb.vals[i].type for i in wrt]
        dsym = self.mod.grad_decl("vjp", pb.symbol, wrt, [v.type for v in pb.vals] +
                                  [pb.result_types[i] for i in floats], types, loc)
        grads = self.emit_call(dsym, list(pb.vals) + ct_vals, types, tuple(TypedValue(None, t) for t in types), loc)
        it = iter(grads)
        return tuple(next(it) if is_float(v.dtype) else self.op("zeros_like", [v], loc=loc) for v in pb.vals)

    def resolve_user(self, ref: FuncRef, args, kwargs, loc):
        fd = ref.module.funcs[ref.name]
        bound = bind_arguments(self, fd, args, kwargs, loc)
        if bound is None:
            return None
        values, types = [], []
        names: dict = {}  # the callee's named dims, shared across its parameters
        recursive = self.mod.in_progress_fn(ref.module, fd)
        for p, v in zip(fd.params, bound):
            v = self.as_value(v, loc)
            if not isinstance(v, TypedValue):
                self.error(f"argument '{p.name}' must be a tensor", loc)
                return None
            if v.poison:
                return None
            try:
                declared = annotation_type(p.annotation, names)
            except ShapeError as e:
                return self.error(str(e), p.annotation.loc)
            if declared is not None:
                v = self.coerce(v, declared, loc, f"argument '{p.name}' of {fd.name}()")
                if v.poison:
                    return None
                t = declared
            else:
                v = self.materialize(v, loc=loc)
                t = v.type
            values.append(v)
            # A recursive call gets all-dynamic sizes, so recursion needs one specialization.
            types.append(_dynamic(t) if recursive else t)
        spec = self.mod.specialize(ref.module, fd, types, loc)
        if spec.result_types is None:
            return None
        if any(t is None for t in spec.result_types):
            return None
        vals = [self.conform(v, t, loc) for v, t in zip(values, spec.param_types)]
        return spec.symbol, vals, spec.result_types, spec.result_proto
