"""`dg.grad`, `dg.value_and_grad`, `dg.vjp` and `dg.jvp` on loaded dg functions.

Expects: a `DgFunction` (from `dg.load`, `dg.loads` or `@dg.function`) or
another gradient function. Guarantees: the result is callable like the
function it differentiates; each call runs a small dg function, added to
the same source, whose body is the language's own `grad(f, wrt=...)(...)`
expression, so Python and `.dg` code share one path (the emitter's
declaration, the autodiff pass, either mode) and the same argument checks.
"""
from __future__ import annotations

import hashlib

import numpy as np

from dg.core.errors import DgError
from dg.core.tracebacks import user_facing
from dg.core.types import dtype_of_np
from dg.dsl import ast as A
from dg.dsl.parser import parse, parse_type

from . import html
from .program import DgFunction
from .residuals import measure
from .signature import is_structure


def _root(fn):
    while isinstance(fn, _Derived):
        fn = fn.base
    if not isinstance(fn, DgFunction):
        raise DgError(f"dg.grad needs a dg function (from dg.load or @dg.function), got {type(fn).__name__}")
    return fn


def _check_wrt(wrt):
    ok = isinstance(wrt, int) and not isinstance(wrt, bool) or (
        isinstance(wrt, tuple) and wrt and all(isinstance(i, int) and not isinstance(i, bool) for i in wrt))
    if not ok:
        raise DgError(f"wrt must be an int or a non-empty tuple of ints, got {wrt!r}")


def _wrapped(root, name_hint: str, params_text: str, body: str, more: tuple = (), unannotated: tuple = (),
             annotations: dict | None = None):
    """A dg function made from source text in the differentiated function's source, with its
    parameter types; the parameters after those take the annotations `more` (a tangent its
    primal's, a cotangent the result's: structures stay structures). The parameters at
    `unannotated` take the types of their arguments (a batch of what the function declares), and
    those in `annotations` (position -> annotation) the annotation given (a list of items)."""
    # Named after what it is (not a counter), so that a module loaded again finds its compiled
    # code in the disk cache.
    name = f"__dg_{name_hint}_{hashlib.sha1((params_text + body).encode()).hexdigest()[:12]}"
    text = f"def {name}({params_text}):\n    {body}\n"
    fd = parse(text, f"<dg.{name_hint} of {root.name}>", register=True).funcs[0]
    for i, (p, annotation) in enumerate(zip(fd.params, [q.annotation for q in root.fd.params] + list(more))):
        p.annotation = None if i in unannotated else annotation  # the same parameter types, checked the same way
        if annotations and i in annotations:
            p.annotation = annotations[i]
    root.source.funcs[name] = fd
    return DgFunction(root.source, name, root.mode, root.device, root.check_numerics, root.autobatch)


def _params(root):
    out = []
    for p in root.fd.params:
        out.append(p.name if p.default is None else f"{p.name}={p.default.value!r}")
    return ", ".join(out), ", ".join(p.name for p in root.fd.params)


def _expr(fn) -> str:
    """The dg expression of a function value: its name, or grad(...) / checkpoint(...) of one."""
    return fn.expr() if isinstance(fn, _Derived) else _root(fn).name


class _Derived:
    """A function value made from a dg function (`grad(f)`, `checkpoint(f)`), callable from
    Python: it runs a small dg function whose body is the language's own expression."""

    def __init__(self, kind: str, base):
        self.kind = kind
        self.base = base
        self.root = _root(base)
        self.__name__ = f"{kind}({getattr(base, '__name__', 'f')})"
        self._wrapped = None

    def expr(self) -> str:
        raise NotImplementedError

    unannotated: tuple = ()  # the parameters that take their arguments' types (vmap's mapped ones)

    def _fn(self):
        """The dg function that runs it: one per expression and differentiated function, so that
        `dg.value_and_grad(m.loss)(...)` written in a training loop compiles once, not once per
        step."""
        if self._wrapped is None:
            made = self.root.gradients
            expr = self.expr()
            if expr not in made:
                params, names = _params(self.root)
                made[expr] = _wrapped(self.root, self.kind, params, f"return {expr}({names})",
                                      unannotated=self.unannotated)
            self._wrapped = made[expr]
        return self._wrapped

    @user_facing
    def __call__(self, *args, **kwargs):
        return self._fn()(*args, **kwargs)

    @user_facing
    def ir(self, stage: str = "dg", args=None) -> str:
        return self._fn().ir(stage, args)


class GradFunction(_Derived):
    """grad(f, wrt) or value_and_grad(f, wrt) of a dg function, callable from Python."""
    def __init__(self, kind: str, base, wrt=0):
        _check_wrt(wrt)
        super().__init__(kind, base)
        self.wrt = wrt

    def expr(self) -> str:
        return f"{self.kind}({_expr(self.base)}, wrt={self.wrt!r})"

    def _repr_html_(self) -> str:
        """The differentiated function's declaration; specializations once the gradient has run."""
        runs = self._wrapped or self.root.gradients.get(self.expr())
        return html.function_html({**html.declared(self.root, self.expr(), "dg gradient"), **html.specialized(runs)})


class CheckpointFunction(_Derived):
    """checkpoint(f, slots=c) of a dg function, callable from Python like f and usable wherever f is
    (dg.grad, dg.value_and_grad, dg.vjp, dg.jvp): its gradients recompute f's forward from its
    arguments, and with `slots`, every loop in them keeps at most that many snapshots."""
    def __init__(self, base, slots=None):
        if slots is not None and (not isinstance(slots, int) or isinstance(slots, bool) or slots < 2):
            raise DgError(f"dg.checkpoint: slots must be an int of at least 2, got {slots!r}")
        super().__init__("checkpoint", base)
        self.slots = slots

    def expr(self) -> str:
        return f"checkpoint({_expr(self.base)}" + (f", slots={self.slots})" if self.slots else ")")


def _axis_ok(a) -> bool:
    return a is None or isinstance(a, int) and not isinstance(a, bool)


class VmapFunction(_Derived):
    """vmap(f, in_axes, out_axes) of a dg function (or of its gradient), callable from Python: f
    mapped over a batch, run as batched operations (§3.1)."""
    def __init__(self, base, in_axes=0, out_axes=0):
        ok = _axis_ok(in_axes) or isinstance(in_axes, (tuple, list)) and all(_axis_ok(a) for a in in_axes)
        if not ok:
            raise DgError(f"dg.vmap: in_axes must be an int, None or a tuple of them, got {in_axes!r}")
        if not isinstance(out_axes, int) or isinstance(out_axes, bool):
            raise DgError(f"dg.vmap: out_axes must be an int, got {out_axes!r}")
        super().__init__("vmap", base)
        n = len(self.root.fd.params)
        self.in_axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else in_axes
        if isinstance(self.in_axes, tuple) and len(self.in_axes) != n:
            raise DgError(f"dg.vmap: in_axes has {len(self.in_axes)} entries; {self.root.name}() takes {n} arguments")
        axes = self.in_axes if isinstance(self.in_axes, tuple) else (self.in_axes,) * n
        self.unannotated = tuple(i for i, a in enumerate(axes) if a is not None)
        self.out_axes = out_axes

    def expr(self) -> str:
        return f"vmap({_expr(self.base)}, in_axes={self.in_axes!r}, out_axes={self.out_axes!r})"

    @user_facing
    def __call__(self, *args, **kwargs):
        """A Python list at a mapped position is a list (§1.3): its items are the examples."""
        params_ = self.root.fd.params
        lists = tuple(i for i in self.unannotated if i < len(args) and isinstance(args[i], list) and (
            is_structure(args[i]) if args[i] else params_[i].annotation is not None))
        if not lists:
            return self._fn()(*args, **kwargs)
        items = tuple(None if params_[i].annotation is not None else _item_annotation(args[i][0]) for i in lists)
        key = (self.expr(), "lists", lists, items)
        made = self.root.gradients
        if key not in made:
            params, names = _params(self.root)
            anns = {}
            for i, text in zip(lists, items):
                declared = params_[i].annotation
                item = declared if text is None else parse_type(text, "<dg.vmap>", register=False)
                anns[i] = A.ListTypeExpr(item.loc, item)
            made[key] = _wrapped(self.root, self.kind, params, f"return {self.expr()}({names})",
                                 unannotated=self.unannotated, annotations=anns)
        return made[key](*args, **kwargs)


def _item_annotation(x) -> str:
    """The dg type of a list's item, every axis of any size: `f32[?, ?]`."""
    a = np.asarray(x)
    dt = dtype_of_np(a.dtype)
    if dt is None:
        raise DgError(f"dg.vmap: a list item of dtype {a.dtype} is not a dg element type")
    return dt if a.ndim == 0 else f"{dt}[{', '.join('?' * a.ndim)}]"


@user_facing
def vjp(fn, *primals):
    """(fn(*primals), pullback): pullback(cotangent) gives one cotangent per primal, as a tuple."""
    root = _root(fn)
    if isinstance(fn, GradFunction):
        raise DgError("dg.vjp of a gradient function is not supported; use dg.grad for higher orders")
    value = fn(*primals)
    params, names = _params(root)
    w = _wrapped(root, "vjp", f"{params}, __dg_ct", f"return vjp({_expr(fn)}, {names})[1](__dg_ct)",
                 more=(root.fd.returns,))

    def like(c, v):
        """A Python number as a cotangent takes the result's dtype (as a weak literal would)."""
        if isinstance(v, tuple):
            return tuple(like(a, b) for a, b in zip(c, v)) if isinstance(c, (tuple, list)) else c
        if isinstance(c, (int, float)) and not isinstance(c, bool):
            return np.asarray(c, dtype=np.asarray(v).dtype)
        return c

    @user_facing
    def pullback(ct):
        return w(*primals, like(ct, value))

    return value, pullback


@user_facing
def jvp(fn, primals, tangents):
    """(fn(*primals), the tangent of its result): forward mode, along `tangents` (one per primal,
    each of its primal's structure). `fn` may be a gradient function: `jvp(grad(f), (x,), (v,))`
    is a Hessian-vector product."""
    root = _root(fn)
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise DgError("dg.jvp takes a function, a tuple of primals and a tuple of tangents")
    if len(primals) != len(tangents):
        raise DgError(f"dg.jvp: {len(primals)} primals but {len(tangents)} tangents")
    n = len(root.fd.params)
    if len(primals) != n:
        raise DgError(f"dg.jvp: {root.name}() takes {n} arguments; {len(primals)} primals given")
    expr = _expr(fn)
    key = f"jvp({expr})"
    if key not in root.gradients:
        names = [p.name for p in root.fd.params]
        ts = [f"__dg_t{i}" for i in range(n)]
        root.gradients[key] = _wrapped(root, "jvp", ", ".join(names + ts),
                                       f"return jvp({expr}, ({', '.join(names)},), ({', '.join(ts)},))",
                                       more=tuple(p.annotation for p in root.fd.params))

    def like(t, p):
        """A Python number as a tangent takes its primal's dtype (as a weak literal would); the
        tangent of an integer or bool primal, which is not used, is its primal's zeros."""
        if isinstance(p, (np.ndarray, np.generic, int, bool)) and not isinstance(p, float) and \
                np.asarray(p).dtype.kind in "iub":
            return np.zeros_like(p)
        if isinstance(t, (int, float)) and not isinstance(t, bool) and isinstance(p, (np.ndarray, np.generic)):
            return np.asarray(t, dtype=p.dtype)
        return t

    return root.gradients[key](*primals, *(like(t, p) for t, p in zip(tangents, primals)))


def saved_residuals(fn, wrt=0):
    """What the reverse sweep of `fn`'s gradient keeps, measured on the arguments the result is
    called with (runtime/residuals.py): `saved_residuals(m.loss, wrt=0)(params, x, y)`."""
    _check_wrt(wrt)
    _root(fn)

    @user_facing
    def measured(*args, **kwargs):
        return measure(GradFunction("grad", fn, wrt)._fn(), args, kwargs)

    return measured
