"""`@dg.function`: a Python function whose body is dg syntax.

The body is read with Python's own `ast` module (it is Python syntax) and
converted node by node into the dg AST, with the real `.py` file, line and
column on every node. Annotations are evaluated Python objects such as
`dg.f32["N", 3]`. Constructs outside the dg subset are `DgSyntaxError`s.
"""
from __future__ import annotations

import ast as py
import inspect
import textwrap
import types

from dg.core.errors import DgSyntaxError, Loc

from . import ast as A
from .parser import parse_type

_BINOPS = {py.Add: "+", py.Sub: "-", py.Mult: "*", py.Div: "/", py.FloorDiv: "//", py.Mod: "%",
           py.Pow: "**", py.MatMult: "@"}
_CMP = {py.Lt: "<", py.LtE: "<=", py.Gt: ">", py.GtE: ">=", py.Eq: "==", py.NotEq: "!="}


class TypeAnn:
    """`dg.f32` (a scalar) or `dg.f32["N", 3, None]` (None or "?" for an unknown size)."""

    def __init__(self, dtype: str, dims=None):
        self.dtype = dtype
        self.dims = dims

    def __getitem__(self, dims):
        if not isinstance(dims, tuple):
            dims = (dims,)
        out = []
        for d in dims:
            if d is None or d == "?" or d is Ellipsis:
                out.append(None)
            elif isinstance(d, (int, str)):
                out.append(d)
            else:
                raise TypeError(f"a dg dimension is an int, a name or None, not {d!r}")
        return TypeAnn(self.dtype, out)

    def __repr__(self) -> str:
        if self.dims is None:
            return f"dg.{self.dtype}"
        return f"dg.{self.dtype}[{', '.join('?' if d is None else repr(d) for d in self.dims)}]"


class _Converter:
    def __init__(self, file: str, line_offset: int, col_offset: int, annotations: dict, fn_name: str):
        self.file = file
        self.dl = line_offset
        self.dc = col_offset
        self.annotations = annotations
        self.fn_name = fn_name

    def loc(self, n) -> Loc:
        return Loc(self.file, getattr(n, "lineno", 1) + self.dl, getattr(n, "col_offset", 0) + 1 + self.dc)

    def fail(self, n, what):
        raise DgSyntaxError(f"{what} is not part of dg", self.loc(n))

    # ------------------------------------------------------------ top level
    def function(self, f: py.FunctionDef) -> A.FuncDef:
        a = f.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
            self.fail(f, "*args, **kwargs and keyword-only parameters")
        defaults = [None] * (len(a.args) - len(a.defaults)) + list(a.defaults)
        params = []
        for arg, d in zip(a.args, defaults):
            ann = self.annotation(self.annotations.get(arg.arg), arg)
            default = None
            if d is not None:
                c = self.expr(d)
                if isinstance(c, A.UnaryOp) and c.op == "-" and isinstance(c.operand, A.Const):
                    c = A.Const(c.loc, -c.operand.value)
                if not isinstance(c, A.Const):
                    self.fail(d, "a default value that is not a literal constant")
                default = c
            params.append(A.Param(self.loc(arg), arg.arg, ann, default))
        returns = self.annotation(self.annotations.get("return"), f) if "return" in self.annotations else None
        return A.FuncDef(self.loc(f), f.name, params, returns, self.block(f.body))

    def annotation(self, obj, node):
        if obj is None:
            return None
        if isinstance(obj, tuple):
            return A.TupleTypeExpr(self.loc(node), [self.annotation(o, node) for o in obj])
        if isinstance(obj, dict) and all(isinstance(k, str) for k in obj):
            return A.RecordTypeExpr(self.loc(node), list(obj), [self.annotation(o, node) for o in obj.values()])
        if isinstance(obj, TypeAnn):
            return A.TypeExpr(self.loc(node), obj.dtype, obj.dims)
        if isinstance(obj, str):
            return parse_type(obj, self.file, register=False)
        raise DgSyntaxError(f"annotation {obj!r} is not a dg type (use dg.f32[...], dg.i64, ...)", self.loc(node))

    # ------------------------------------------------------------ statements
    def block(self, stmts) -> list:
        out = []
        for s in stmts:
            if isinstance(s, py.Expr) and isinstance(s.value, py.Constant) and isinstance(s.value.value, str) \
                    and s is stmts[0]:
                continue  # docstring
            out.append(self.stmt(s))
        return out

    def stmt(self, s):
        L = self.loc(s)
        if isinstance(s, py.Return):
            return A.Return(L, self.expr(s.value) if s.value is not None else None)
        if isinstance(s, py.Assign):
            return A.Assign(L, [self.target(t) for t in s.targets], self.expr(s.value))
        if isinstance(s, py.AnnAssign):
            if s.value is None or not isinstance(s.target, py.Name):
                self.fail(s, "an annotation without a value")
            ann = self.annotation(_eval_annotation(s.annotation), s)
            return A.AnnAssign(L, self.target(s.target), ann, self.expr(s.value))
        if isinstance(s, py.AugAssign):
            return A.AugAssign(L, self.target(s.target), _BINOPS[type(s.op)], self.expr(s.value))
        if isinstance(s, py.If):
            return A.If(L, self.expr(s.test), self.block(s.body), self.block(s.orelse))
        if isinstance(s, py.For):
            if s.orelse:
                self.fail(s, "for ... else")
            return A.For(L, self.target(s.target), self.expr(s.iter), self.block(s.body))
        if isinstance(s, py.While):
            if s.orelse:
                self.fail(s, "while ... else")
            return A.While(L, self.expr(s.test), self.block(s.body))
        if isinstance(s, py.Break):
            return A.Break(L)
        if isinstance(s, py.Continue):
            return A.Continue(L)
        if isinstance(s, py.Pass):
            return A.Pass(L)
        if isinstance(s, py.Assert):
            return A.Assert(L, self.expr(s.test), self.expr(s.msg) if s.msg is not None else None)
        if isinstance(s, py.Expr):
            return A.ExprStmt(L, self.expr(s.value))
        self.fail(s, f"the statement '{type(s).__name__}'")

    def target(self, t):
        if isinstance(t, py.Name):
            return A.Name(self.loc(t), t.id)
        if isinstance(t, (py.Tuple, py.List)):
            return A.Tuple(self.loc(t), [self.target(e) for e in t.elts])
        if isinstance(t, py.Subscript):
            return self.expr(t)
        self.fail(t, "this assignment target")

    # ------------------------------------------------------------ expressions
    def expr(self, e):
        L = self.loc(e)
        if isinstance(e, py.Constant):
            if e.value is Ellipsis:
                return A.EllipsisLit(L)
            if not isinstance(e.value, (int, float, bool, str, type(None))):
                self.fail(e, f"the constant {e.value!r}")
            return A.Const(L, e.value)
        if isinstance(e, py.Name):
            return A.Name(L, e.id)
        if isinstance(e, py.Tuple):
            return A.Tuple(L, [self.expr(x) for x in e.elts])
        if isinstance(e, py.List):
            return A.List(L, [self.expr(x) for x in e.elts])
        if isinstance(e, py.Dict):
            keys = []
            for k in e.keys:
                if not (isinstance(k, py.Constant) and isinstance(k.value, str)) or k.value in keys:
                    self.fail(k or e, "a record key that is not a string literal, or a repeated key")
                keys.append(k.value)
            return A.Dict(L, keys, [self.expr(v) for v in e.values])
        if isinstance(e, py.BinOp):
            return A.BinOp(L, _BINOPS[type(e.op)], self.expr(e.left), self.expr(e.right))
        if isinstance(e, py.UnaryOp):
            op = {py.USub: "-", py.UAdd: "+", py.Not: "not"}.get(type(e.op))
            if op is None:
                self.fail(e, "the operator ~")
            return A.UnaryOp(L, op, self.expr(e.operand))
        if isinstance(e, py.BoolOp):
            return A.BoolOp(L, "and" if isinstance(e.op, py.And) else "or", [self.expr(v) for v in e.values])
        if isinstance(e, py.Compare):
            ops = []
            for o in e.ops:
                if type(o) not in _CMP:
                    self.fail(e, f"the comparison '{type(o).__name__}'")
                ops.append(_CMP[type(o)])
            return A.Compare(L, self.expr(e.left), ops, [self.expr(c) for c in e.comparators])
        if isinstance(e, py.IfExp):
            return A.IfExp(L, self.expr(e.test), self.expr(e.body), self.expr(e.orelse))
        if isinstance(e, py.Call):
            for a in e.args:
                if isinstance(a, py.Starred):
                    self.fail(a, "*args")
            kws = []
            for k in e.keywords:
                if k.arg is None:
                    self.fail(k, "**kwargs")
                kws.append(A.Keyword(self.loc(k), k.arg, self.expr(k.value)))
            func = self.expr(e.func)
            if isinstance(func, A.Attribute) and isinstance(func.value, A.Name) and func.value.id == "dg":
                func = A.Name(func.loc, func.attr)  # dg.exp(x) inside a dg function is exp(x)
            return A.Call(L, func, [self.expr(a) for a in e.args], kws)
        if isinstance(e, py.Attribute):
            if isinstance(e.value, py.Name) and e.value.id == "dg":
                return A.Name(L, e.attr)
            return A.Attribute(L, self.expr(e.value), e.attr)
        if isinstance(e, py.Subscript):
            sl = e.slice
            items = sl.elts if isinstance(sl, py.Tuple) else [sl]
            return A.Subscript(L, self.expr(e.value), [self.index_item(i) for i in items])
        if isinstance(e, py.Slice):
            return self.index_item(e)
        self.fail(e, f"the expression '{type(e).__name__}'")

    def index_item(self, i):
        if isinstance(i, py.Slice):
            return A.Slice(self.loc(i), *(self.expr(x) if x is not None else None for x in (i.lower, i.upper, i.step)))
        return self.expr(i)


# What annotations name: `dg.f32[...]` (dg's own types, the same objects as the package's) and `f32`.
TYPES = {n: TypeAnn(n) for n in ("f16", "bf16", "f32", "f64", "i32", "i64", "bool")}
_NAMESPACE = {"dg": types.SimpleNamespace(**TYPES, bool_=TYPES["bool"]), **TYPES}


def _eval_annotation(node):
    try:
        return eval(compile(py.Expression(node), "<annotation>", "eval"), dict(_NAMESPACE))
    except Exception:
        return None


def function_ast(fn) -> A.FuncDef:
    """The dg AST of a Python function's body."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise DgSyntaxError(f"cannot read the source of {fn!r}: {e}") from None
    file = inspect.getsourcefile(fn) or "<python>"
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    col_offset = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    try:
        tree = py.parse(dedented)
    except SyntaxError as e:
        raise DgSyntaxError(e.msg, Loc(file, (e.lineno or 1) + first - 1, (e.offset or 1) + col_offset)) from None
    f = tree.body[0]
    if not isinstance(f, py.FunctionDef):
        raise DgSyntaxError("@dg.function applies to a def", Loc(file, first, 1))
    f.decorator_list = []
    try:
        annotations = dict(getattr(fn, "__annotations__", {}))
    except Exception:
        annotations = {}
    # Strings in annotations (from __future__ import annotations): evaluate them.
    for k, v in list(annotations.items()):
        if isinstance(v, str):
            try:
                annotations[k] = eval(v, {**_NAMESPACE, **fn.__globals__})
            except Exception:
                pass
    conv = _Converter(file, first - 1, col_offset, annotations, f.name)
    return conv.function(f)
