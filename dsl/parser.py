"""`.dg` text -> the dataclass AST of `dsl.ast`, every node with a `Loc`.

The grammar (grammar.lark) is LALR(1); `_Indenter` is its post-lexer and
`_ToAst` its inline transformer, so no lark parse tree is ever built.  Every
failure leaves `parse` as a `DgSyntaxError` pointing into the source.
"""
from __future__ import annotations

import ast as _pyast
import contextvars
import os
import sys
import threading
import unicodedata
import warnings
from dataclasses import dataclass, field

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken
from lark.indenter import Indenter

from dg.core.errors import DgSyntaxError, Loc, register_source
from dg.dsl import ast as A

__all__ = ["parse", "parse_expr", "parse_type", "MAX_DEPTH"]

# Deepest AST accepted.  The parser itself never recurses, but every later
# pass walks the AST recursively; refusing absurd nesting here keeps them
# from hitting RecursionError.  Real programs stay far below this.
MAX_DEPTH = 200
# Python's own limits on nested brackets and on indentation levels.
MAX_PARENS = 200
MAX_INDENT_LEVELS = 100

# Python keywords outside the dg subset: a clear message instead of
# "unexpected token" on whatever follows them.
_UNSUPPORTED_KEYWORDS = frozenset(
    "lambda class with try except finally raise global nonlocal yield del "
    "async await is".split()
)


class _Error(Exception):
    """Raised inside the parse (post-lexer, transformer); becomes DgSyntaxError."""

    def __init__(self, message: str, line: int, col: int):
        super().__init__(message)
        self.message, self.line, self.col = message, line, col


@dataclass
class _State:
    """Per-call state shared by the post-lexer, the transformer and error reporting."""

    file: str
    text: str
    last: Token | None = None  # the last token that is not a newline/indent
    line_cont: Token | None = None  # the last backslash continuation
    brackets: list = field(default_factory=list)  # the "(" / "[" tokens still open
    # id(node) -> (node, Loc of the outermost "(" around it).  The node is held
    # so that its id cannot be reused by another node during the parse.
    paren_starts: dict = field(default_factory=dict)


_STATE: contextvars.ContextVar[_State] = contextvars.ContextVar("dg_parse_state")


def _loc(x) -> Loc:
    """The Loc of a token or of an AST node."""
    if isinstance(x, Token):
        return Loc(_STATE.get().file, x.line, x.column)
    return x.loc


def _start(node) -> Loc:
    """Where the text of `node` begins, parentheses around it included.

    A node that begins with a sub-expression is located where that
    sub-expression's text begins, as in Python: `(a + b) * c` is at the `(`,
    while the Name in `(a)` stays at the `a`.
    """
    p = _STATE.get().paren_starts.get(id(node))
    return node.loc if p is None else p[1]


# ----------------------------------------------------------------- lexing
def _indent_width(ws: str) -> tuple[int, int]:
    """(width with tabs to multiples of 8, width with tabs as 1), as Python's
    tokenizer computes them; the two must agree on ordering (else TabError)."""
    col = alt = 0
    for ch in ws:
        if ch == " ":
            col += 1
            alt += 1
        elif ch == "\t":
            col = (col // 8 + 1) * 8
            alt += 1
        elif ch == "\f":
            col = alt = 0
    return col, alt


class _Indenter(Indenter):
    """lark's Indenter with Python's rules and without shared mutable state.

    lark's version keeps its counters on the (cached, shared) instance, counts
    a tab as a fixed width, and asserts on an unbalanced `)`; this one keeps
    everything in the generator, so concurrent parses are safe, and reports
    errors as `_Error`.
    """

    NL_type = "_NEWLINE"
    OPEN_PAREN_types = ["LPAR", "LSQB", "LBRACE"]
    CLOSE_PAREN_types = ["RPAR", "RSQB", "RBRACE"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8

    def process(self, stream):
        state = _STATE.get()
        levels = [(0, 0)]
        parens = state.brackets
        first = True
        tok = None
        for tok in stream:
            if first and tok.type != "_NEWLINE":
                line_start = state.text.rfind("\n", 0, tok.start_pos) + 1
                if _indent_width(state.text[line_start:tok.start_pos])[0] > 0:
                    raise _Error("unexpected indent", tok.line, tok.column)
            first = False
            if tok.type == "_NEWLINE":
                if parens:
                    continue  # implicit line joining inside brackets
                yield tok
                yield from self._indentation(tok, levels)
                continue
            if tok.type == "NAME":
                _check_name(tok)
            state.last = tok
            yield tok
            if tok.type in ("LPAR", "LSQB", "LBRACE"):
                parens.append(tok)
                if len(parens) > MAX_PARENS:
                    raise _Error("too many nested parentheses", tok.line, tok.column)
            elif tok.type in ("RPAR", "RSQB", "RBRACE") and parens:
                parens.pop()
        if parens:
            p = parens[-1]
            raise _Error(f"'{p.value}' was never closed", p.line, p.column)
        cont = state.line_cont
        if cont is not None and cont.end_pos == len(state.text):
            raise _Error("unexpected end of file after line continuation", cont.line, cont.column)
        for _ in levels[1:]:
            yield self._make(self.DEDENT_type, tok)

    def _indentation(self, nl: Token, levels):
        """INDENT/DEDENT tokens for the line that follows newline `nl`."""
        col, alt = _indent_width(nl.value.rsplit("\n", 1)[-1])
        if col > levels[-1][0]:
            if alt <= levels[-1][1]:
                raise self._tab_error(nl)
            levels.append((col, alt))
            if len(levels) > MAX_INDENT_LEVELS:
                raise _Error("too many levels of indentation", nl.end_line, nl.end_column)
            yield self._make(self.INDENT_type, nl)
            return
        while col < levels[-1][0]:
            levels.pop()
            yield self._make(self.DEDENT_type, nl)
        if col != levels[-1][0]:
            raise _Error("unindent does not match any outer indentation level", nl.end_line, nl.end_column)
        if alt != levels[-1][1]:
            raise self._tab_error(nl)

    @staticmethod
    def _tab_error(nl: Token) -> _Error:
        return _Error("inconsistent use of tabs and spaces in indentation", nl.end_line, nl.end_column)

    @staticmethod
    def _make(type_: str, at: Token | None) -> Token:
        """An INDENT/DEDENT positioned at the start of the line it indents."""
        if at is None:
            return Token(type_, "", 0, 1, 1, 1, 1, 0)
        return Token(type_, "", at.end_pos, at.end_line, at.end_column, at.end_line, at.end_column, at.end_pos)


def _line_cont(tok: Token) -> Token:
    """lexer callback for the (ignored) backslash continuations."""
    _STATE.get().line_cont = tok
    return tok


def _check_name(tok: Token) -> None:
    if tok.value in _UNSUPPORTED_KEYWORDS:
        raise _Error(f"'{tok.value}' is not supported in dg", tok.line, tok.column)
    # The lexer's \w is a little wider than Python's identifier rule.
    if not tok.value.isascii() and not tok.value.isidentifier():
        raise _Error(f"invalid identifier '{tok.value}'", tok.line, tok.column)


def _name(tok: Token) -> str:
    """An identifier as Python sees it (non-ASCII names are NFKC-normalised)."""
    s = str(tok)
    return s if s.isascii() else unicodedata.normalize("NFKC", s)


# ----------------------------------------------------------------- the AST
_ATOM_KINDS = {
    A.Const: "literal",
    A.Call: "function call",
    A.BinOp: "expression",
    A.UnaryOp: "expression",
    A.BoolOp: "expression",
    A.Compare: "comparison",
    A.IfExp: "conditional expression",
    A.Attribute: "attribute",
    A.List: "list display",
    A.Tuple: "tuple",
}


def _fail(message: str, at) -> None:
    loc = _loc(at)
    raise _Error(message, loc.line, loc.col)


def _check_target(t, aug: bool = False):
    """An assignment target: a name, a subscript of a name, or (not for `+=`)
    a tuple of targets.  Returns it, a list display turned into a tuple."""
    if isinstance(t, A.Name):
        return t
    if isinstance(t, A.Subscript):
        base = t.value
        while isinstance(base, A.Subscript) and len(base.items) == 1 and isinstance(base.items[0], A.Const) \
                and isinstance(base.items[0].value, str):
            base = base.value  # a field of a record: p["w"][0] = e, p["l1"]["w"] = e
        if not isinstance(base, A.Name):
            _fail("can only assign to a subscript of a name (write x[i, j] = e, not x[i][j] = e)", t)
        return t
    if not aug and isinstance(t, (A.Tuple, A.List)):
        if not t.elts:
            _fail("cannot assign to ()", t)
        return A.Tuple(t.loc, [_check_target(e) for e in t.elts])
    what = _ATOM_KINDS.get(type(t), "expression")
    if aug:
        _fail(f"'{what}' is an illegal expression for augmented assignment", t)
    _fail(f"cannot assign to {what}", t)


def _const_default(e) -> A.Const:
    """A parameter default: a literal constant, a leading minus folded in, or a tuple of them
    (`betas=(0.9, 0.999)`)."""
    if isinstance(e, A.Const) and e.value is not None:
        return e
    if isinstance(e, A.Tuple) and e.elts:
        return A.Const(e.loc, tuple(_const_default(x).value for x in e.elts))
    if (
        isinstance(e, A.UnaryOp)
        and e.op in "+-"
        and isinstance(e.operand, A.Const)
        and type(e.operand.value) in (int, float)
    ):
        v = e.operand.value
        return A.Const(e.loc, -v if e.op == "-" else v)
    _fail("a parameter default must be a literal constant", e)


def _fold_binops(c) -> A.Node:
    """[a, op, b, op, c] -> ((a op b) op c), each where `a`'s text starts."""
    node, start = c[0], _start(c[0])
    for i in range(1, len(c), 2):
        node = A.BinOp(start, str(c[i]), node, c[i + 1])
    return node


class _ToAst(Transformer):
    """lark callbacks, one per rule/alias, building `dsl.ast` nodes bottom-up."""

    # -------------------------------------------------------- top level
    def start(self, c):
        imports, funcs, consts = [], [], []
        for s in _flatten(c):
            if isinstance(s, A.FuncDef):
                funcs.append(s)
            elif isinstance(s, A.Import):
                imports.append(s)
            elif isinstance(s, A.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], A.Name):
                consts.append(s)  # a top-level constant: `EPS = 1e-5`
            else:
                _fail("only 'def', 'import' and constants (NAME = value) are allowed at the top level of a file", s)
        return A.Module(Loc(_STATE.get().file, 1, 1), _STATE.get().file, imports, funcs, consts)

    def expr_input(self, c):
        return c[0]

    def type_input(self, c):
        return c[0]

    def import_name(self, c):
        alias = _name(c[2]) if len(c) > 2 else None
        return A.Import(_loc(c[0]), _name(c[1]), None, alias)

    def import_from(self, c):
        # c: FROM NAME IMPORT NAME... (the `import` keyword is kept)
        return A.Import(_loc(c[0]), _name(c[1]), [_name(t) for t in c[3:]])

    def funcdef(self, c):
        _, name, params, returns, body = c
        params = params or []
        seen, defaulted = set(), None
        for p in params:
            if p.name in seen:
                _fail(f"duplicate parameter '{p.name}' in function definition", p)
            seen.add(p.name)
            if p.default is not None:
                defaulted = p
            elif defaulted is not None:
                _fail("a parameter without a default follows one with a default", p)
        return A.FuncDef(_loc(c[0]), _name(name), params, returns, body)

    def parameters(self, c):
        return c

    def param(self, c):
        name, ann, default = c
        return A.Param(_loc(name), _name(name), ann, None if default is None else _const_default(default))

    # -------------------------------------------------------- statements
    def suite(self, c):
        body = _flatten(c)
        for s in body:
            if isinstance(s, A.FuncDef):
                _fail("nested function definitions are not supported in dg", s)
            if isinstance(s, A.Import):
                _fail("'import' is only allowed at the top level of a file", s)
        return body

    def simple_stmts(self, c):
        return c

    def expr_stmt(self, c):
        return A.ExprStmt(_start(c[0]), c[0])

    def assign_stmt(self, c):
        targets = [_check_target(t) for t in c[:-1]]
        return A.Assign(_start(c[0]), targets, c[-1])

    def annassign(self, c):
        name, ann, value = c
        if isinstance(ann, A.TupleTypeExpr):
            _fail("a variable annotation must be a tensor type, not a tuple type", ann)
        return A.AnnAssign(_loc(name), A.Name(_loc(name), _name(name)), ann, value)

    def augassign(self, c):
        target, op, value = c
        target = _check_target(target, aug=True)
        return A.AugAssign(_start(c[0]), target, str(op)[:-1], value)

    def return_stmt(self, c):
        return A.Return(_loc(c[0]), c[1] if len(c) > 1 else None)

    def pass_stmt(self, c):
        return A.Pass(_loc(c[0]))

    def break_stmt(self, c):
        return A.Break(_loc(c[0]))

    def continue_stmt(self, c):
        return A.Continue(_loc(c[0]))

    def assert_stmt(self, c):
        return A.Assert(_loc(c[0]), c[1], c[2] if len(c) > 2 else None)

    def if_stmt(self, c):
        # IF test suite elif_clause* else_clause?  ->  nested Ifs for the elifs
        orelse = c[-1] if c and isinstance(c[-1], _Else) else None
        elifs = c[3:-1] if orelse is not None else c[3:]
        tail = orelse.body if orelse is not None else []
        for kw, test, body in reversed(elifs):
            tail = [A.If(_loc(kw), test, body, tail)]
        return A.If(_loc(c[0]), c[1], c[2], tail)

    def elif_clause(self, c):
        return tuple(c)

    def else_clause(self, c):
        return _Else(c[0])

    def while_stmt(self, c):
        return A.While(_loc(c[0]), c[1], c[2])

    def for_stmt(self, c):
        kw, target, it, body = c
        if not isinstance(target, A.Tuple):
            target = A.Name(_loc(target), _name(target))
        return A.For(_loc(kw), target, it, body)

    def for_tuple(self, c):
        """The names of `for i, x in ...` (nested in parentheses), as a tuple target."""
        items = [i if isinstance(i, A.Tuple) else A.Name(_loc(i), _name(i)) for i in c]
        return A.Tuple(items[0].loc, items)

    # -------------------------------------------------------- expressions
    def tuple_bare(self, c):
        return A.Tuple(_start(c[0]), c)

    def ifexp(self, c):
        body, test, orelse = c
        return A.IfExp(_start(body), test, body, orelse)

    def or_test(self, c):
        return A.BoolOp(_start(c[0]), "or", c)

    def and_test(self, c):
        return A.BoolOp(_start(c[0]), "and", c)

    def not_op(self, c):
        return A.UnaryOp(_loc(c[0]), "not", c[1])

    def comparison(self, c):
        return A.Compare(_start(c[0]), c[0], [str(t) for t in c[1::2]], c[2::2])

    def arith(self, c):
        return _fold_binops(c)

    def term(self, c):
        return _fold_binops(c)

    def unary(self, c):
        return A.UnaryOp(_loc(c[0]), str(c[0]), c[1])

    def power(self, c):
        return A.BinOp(_start(c[0]), "**", c[0], c[1])

    def call(self, c):
        func, arglist = c
        args, kwargs = [], []
        for a in arglist or []:
            if isinstance(a, A.Keyword):
                if any(k.name == a.name for k in kwargs):
                    _fail(f"keyword argument '{a.name}' repeated", a)
                kwargs.append(a)
            elif kwargs:
                _fail("positional argument follows keyword argument", a)
            else:
                args.append(a)
        return A.Call(_start(func), func, args, kwargs)

    def arguments(self, c):
        return c

    def kwarg(self, c):
        return A.Keyword(_loc(c[0]), _name(c[0]), c[1])

    def subscript(self, c):
        value, items = c
        return A.Subscript(_start(value), value, items)

    def subscripts(self, c):
        return [A.EllipsisLit(_loc(x)) if isinstance(x, Token) else x for x in c]

    def slice(self, c):
        parts: list[list] = [[]]
        for x in c:
            if isinstance(x, Token) and x.type == "COLON":
                parts.append([])
            elif x is not None:
                parts[-1].append(x)
        bound = [p[0] if p else None for p in parts] + [None]
        start = _loc(c[0]) if isinstance(c[0], Token) else _start(c[0])
        return A.Slice(start, bound[0], bound[1], bound[2])

    def attribute(self, c):
        value, name = c
        return A.Attribute(_start(value), value, _name(name))

    # -------------------------------------------------------- atoms
    def name(self, c):
        return A.Name(_loc(c[0]), _name(c[0]))

    def int_lit(self, c):
        s = str(c[0])
        if len(s) > 1 and s[0] == "0" and s.strip("0_"):
            _fail("leading zeros in decimal integer literals are not permitted", c[0])
        try:
            return A.Const(_loc(c[0]), int(s))
        except ValueError:  # longer than sys.get_int_max_str_digits()
            _fail("integer literal too large", c[0])

    def float_lit(self, c):
        return A.Const(_loc(c[0]), float(str(c[0])))

    def string_lit(self, c):
        return A.Const(_loc(c[0]), "".join(_string_value(t) for t in c))

    def const_kw(self, c):
        return A.Const(_loc(c[0]), {"True": True, "False": False, "None": None}[str(c[0])])

    def paren_expr(self, c):
        lpar, node = c
        _STATE.get().paren_starts[id(node)] = (node, _loc(lpar))
        return node

    def tuple_lit(self, c):
        return A.Tuple(_loc(c[0]), c[1:])

    def list_lit(self, c):
        return A.List(_loc(c[0]), c[1:])

    def dict_lit(self, c):
        keys, values = [], []
        for k, v in c[1:]:
            if not (isinstance(k, A.Const) and isinstance(k.value, str)):
                _fail("a record's keys are strings: {\"w\": w, \"b\": b}", k)
            if k.value in keys:
                _fail(f"the key '{k.value}' is repeated in a record", k)
            keys.append(k.value)
            values.append(v)
        return A.Dict(_loc(c[0]), keys, values)

    def dict_item(self, c):
        return (c[0], c[1])

    # -------------------------------------------------------- types
    def tensor_type(self, c):
        dtype = c[0]
        if len(c) == 1:
            return A.TypeExpr(_loc(dtype), _name(dtype), None)
        if _name(dtype) == "list":  # list[T]
            if len(c) != 2 or isinstance(c[1], Token):
                _fail("list[...] takes one type: list[f32[?, 3]]", dtype)
            return A.ListTypeExpr(_loc(dtype), c[1])
        dims = []
        for d in c[1:]:
            if isinstance(d, A.TypeExpr) and d.dims is None:  # a name
                dims.append(d.dtype)
            elif not isinstance(d, Token):
                _fail("a dimension is an integer, a name or ?", dtype)
            elif d.type == "INT":
                dims.append(int(self.int_lit([d]).value))
            else:  # QMARK
                dims.append(None)
        return A.TypeExpr(_loc(dtype), _name(dtype), dims)

    def tuple_type(self, c):
        return A.TupleTypeExpr(_loc(c[0]), c[1:])

    def record_type(self, c):
        keys, elts = [], []
        for tok, te in zip(c[1::2], c[2::2]):
            key = _string_value(tok)
            if key in keys:
                _fail(f"the key '{key}' is repeated in a record type", te)
            keys.append(key)
            elts.append(te)
        return A.RecordTypeExpr(_loc(c[0]), keys, elts)


@dataclass
class _Else:
    """An `else:` clause on its way into `if_stmt`."""

    body: list


def _flatten(items) -> list:
    """Statements, with the lists that `simple_stmts` and `suite` produce spliced in."""
    out = []
    for s in items:
        if isinstance(s, list):
            out.extend(s)
        elif s is not None:
            out.append(s)
    return out


_STRING_PREFIXES = {"", "r", "u"}
_PYTHON_ONLY_PREFIXES = {"f", "fr", "rf", "b", "br", "rb"}


def _string_value(tok: Token) -> str:
    s = str(tok)
    quote = min(i for i in (s.find('"'), s.find("'")) if i >= 0)
    prefix = s[:quote].lower()
    if prefix not in _STRING_PREFIXES:
        if prefix not in _PYTHON_ONLY_PREFIXES:
            _fail(f"invalid string prefix '{s[:quote]}'", tok)
        _fail(("f-strings" if "f" in prefix else "bytes literals") + " are not supported in dg", tok)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes: Python warns, we accept
            value = _pyast.literal_eval(s)
    except Exception as e:  # bad \N{...}, truncated \x escapes, NUL bytes
        _fail(f"invalid string literal: {getattr(e, 'msg', None) or e}", tok)
    if not isinstance(value, str):  # cannot happen for the prefixes above
        _fail("invalid string literal", tok)
    return value


# ----------------------------------------------------------------- checks after parsing
def _children(node):
    for v in node.__dict__.values():
        if isinstance(v, list):
            for x in v:
                if isinstance(x, A.Node):
                    yield x
        elif isinstance(v, A.Node):
            yield v


def _check_depth(root) -> None:
    """Refuse ASTs nested deeper than MAX_DEPTH (iteratively: no recursion here)."""
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            loc = node.loc
            raise _Error("expression too deeply nested", loc.line, loc.col)
        for ch in _children(node):
            stack.append((ch, depth + 1))


def _check_loops(body: list, in_loop: bool) -> None:
    """`break`/`continue` only inside a loop, as Python requires."""
    for s in body:
        if isinstance(s, (A.Break, A.Continue)) and not in_loop:
            kw = "break" if isinstance(s, A.Break) else "continue"
            raise _Error(f"'{kw}' outside loop", s.loc.line, s.loc.col)
        if isinstance(s, (A.For, A.While)):
            _check_loops(s.body, True)
        elif isinstance(s, A.If):
            _check_loops(s.body, in_loop)
            _check_loops(s.orelse, in_loop)


# ----------------------------------------------------------------- the lark parser
_GRAMMAR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grammar.lark")
_lark: Lark | None = None
_lark_lock = threading.Lock()


def _parser() -> Lark:
    """The lark parser, built once per process on first use."""
    global _lark
    if _lark is None:
        with _lark_lock:
            if _lark is None:
                with open(_GRAMMAR, encoding="utf-8") as f:
                    grammar = f.read()
                _lark = Lark(
                    grammar,
                    parser="lalr",
                    lexer="basic",
                    postlex=_Indenter(),
                    transformer=_ToAst(),
                    start=["start", "expr_input", "type_input"],
                    maybe_placeholders=True,
                    lexer_callbacks={"LINE_CONT": _line_cont},
                    cache=_cache_file(),
                )
    return _lark


def _cache_file() -> str | bool:
    """Where lark may keep its analysed tables (~0.2 s to rebuild, ~15 ms to load).

    A per-user directory rather than lark's default shared temp dir, since the
    cache is a pickle.  lark checks a hash of the grammar and options stored in
    the file, and rebuilds (and rewrites) on any mismatch or read failure.
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "dg")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return False
    return os.path.join(folder, f"grammar-py{sys.version_info[0]}{sys.version_info[1]}.lark-cache")


# ----------------------------------------------------------------- errors
_TOKEN_WORDS = {
    "NAME": "a name",
    "INT": "an integer",
    "FLOAT": "a number",
    "STRING": "a string",
    "_NEWLINE": "end of line",
    "_INDENT": "an indented block",
    "_DEDENT": "dedent",
    "$END": "end of file",
}


_EXPR_START = {"NAME", "INT", "FLOAT", "STRING", "TRUE", "FALSE", "NONE", "LPAR", "LSQB", "LBRACE", "NOT"}


def _describe_token(tok: Token) -> str:
    if tok.type == "STRING":
        return "string"
    text = str(tok.value)
    return f"token '{text if len(text) <= 20 else text[:17] + '...'}'"


def _describe_expected(expected) -> str:
    if {"INT", "NAME", "QMARK"} <= set(expected):  # a dimension (or list's item type)
        return " (expected an integer, a name or '?')"
    if "STRING" in expected and "NAME" in expected and "PASS" not in expected:
        return " (expected an expression)"  # rather than a list of all that can start one
    names = []
    for t in sorted(expected):
        if t in _TOKEN_WORDS:
            names.append(_TOKEN_WORDS[t])
            continue
        try:
            pattern = _parser().get_terminal(t).pattern
        except KeyError:
            return ""
        if pattern.type != "str":
            return ""
        names.append(f"'{pattern.value}'")
    if not names or len(names) > 3:
        return ""
    return " (expected " + (names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]) + ")"


def _error_for(e: Exception, state: _State) -> tuple[str, int, int]:
    """Message, line and column for an exception raised while parsing."""
    if isinstance(e, _Error):
        return e.message, e.line, e.col
    if isinstance(e, UnexpectedCharacters):
        ch = state.text[e.pos_in_stream] if 0 <= e.pos_in_stream < len(state.text) else "?"
        if ch in "\"'":
            triple = state.text.startswith(ch * 3, e.pos_in_stream)
            msg = f"unterminated {'triple-quoted ' if triple else ''}string literal"
        elif ch == "\\":
            msg = "unexpected character after line continuation character"
        elif ch.isprintable():
            msg = f"unexpected character '{ch}'"
        else:
            msg = f"invalid non-printable character U+{ord(ch):04X}"
        return msg, e.line, e.column
    if isinstance(e, UnexpectedToken):
        tok = e.token
        expected = set(e.expected or ())
        last = state.last
        end = (last.end_line, last.end_column) if last is not None else (1, 1)
        if "_INDENT" in expected and tok.type != "_INDENT":
            if tok.type in ("$END", "_DEDENT", "_NEWLINE"):
                return "expected an indented block", *end
            return "expected an indented block", tok.line, tok.column
        if tok.type == "$END":
            return "unexpected end of file" + _describe_expected(expected), *end
        if tok.type == "_NEWLINE":
            return "unexpected end of line" + _describe_expected(expected), *end
        if tok.type == "_INDENT":
            return "unexpected indent", tok.line, tok.column
        if tok.type == "_DEDENT":
            return "unexpected dedent", tok.line, tok.column
        if tok.type == "AT" and _starts_line(state.text, tok):
            return "decorators are not supported in dg", tok.line, tok.column
        if tok.type == "COLON" and state.text.startswith("=", tok.end_pos):
            return "the walrus operator ':=' is not supported in dg", tok.line, tok.column
        unclosed = _unclosed_bracket(state)
        if unclosed is not None:
            return unclosed
        if state.brackets and "COMMA" in expected and tok.type in _EXPR_START:
            return f"unexpected {_describe_token(tok)} (perhaps a ',' is missing?)", tok.line, tok.column
        return f"unexpected {_describe_token(tok)}" + _describe_expected(expected), tok.line, tok.column
    if isinstance(e, UnexpectedInput):
        return "invalid syntax", getattr(e, "line", 1) or 1, getattr(e, "column", 1) or 1
    if isinstance(e, RecursionError):
        line, col = (state.last.line, state.last.column) if state.last is not None else (1, 1)
        return "expression too deeply nested", line, col
    # A lark (or parser) bug must still surface as a dg error, never a crash.
    line, col = (state.last.line, state.last.column) if state.last is not None else (1, 1)
    return f"invalid syntax ({type(e).__name__}: {e})", line, col


def _unclosed_bracket(state: _State) -> tuple[str, int, int] | None:
    """The bracket left open at the end of the file, if any.

    As Python does, this replaces a generic "unexpected token" error: a token
    that does not fit is most often the first one after a forgotten ")".
    """
    if not state.brackets:
        return None
    scan = _State(state.file, state.text)
    token = _STATE.set(scan)
    try:
        for _ in _parser().lex(state.text):
            pass
    except _Error as e:
        if e.message.endswith("was never closed"):
            return e.message, e.line, e.col
    except Exception:  # noqa: BLE001 - only looking for a bracket; keep the first error
        pass
    finally:
        _STATE.reset(token)
    return None


def _starts_line(text: str, tok: Token) -> bool:
    line_start = text.rfind("\n", 0, tok.start_pos) + 1
    return text[line_start:tok.start_pos].strip(" \t\f") == ""


# ----------------------------------------------------------------- public API
# Characters that str.splitlines() (used by register_source) treats as line
# breaks but Python's tokenizer and lark do not; shown as spaces in
# diagnostics so that line numbers agree.
_DISPLAY = str.maketrans({c: " " for c in "\v\f\x1c\x1d\x1e\x85\u2028\u2029"})


def _normalize(text, file: str) -> str:
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            msg = f"source is not valid UTF-8 ({e.reason} at byte {e.start})"
            raise DgSyntaxError(msg, Loc(file, 1, 1)) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _run(text, file: str, start: str, register: bool):
    text = _normalize(text, file)
    if register:
        register_source(file, text.translate(_DISPLAY))
    if not text.endswith("\n"):
        text += "\n"
    nul = text.find("\x00")
    if nul >= 0:  # Python refuses them anywhere, comments included
        line = text.count("\n", 0, nul) + 1
        col = nul - (text.rfind("\n", 0, nul) + 1) + 1
        raise DgSyntaxError("source code cannot contain null bytes", Loc(file, line, col))
    parser = _parser()  # outside the try: a broken installation is not a syntax error
    state = _State(file, text)
    token = _STATE.set(state)
    try:
        try:
            result = parser.parse(text, start=start)
            _check_depth(result)  # first: _check_loops recurses
            if isinstance(result, A.Module):
                for f in result.funcs:
                    _check_loops(f.body, False)
            return result
        except Exception as e:  # noqa: BLE001 - every failure becomes a DgSyntaxError
            message, line, col = _error_for(e, state)
    finally:
        _STATE.reset(token)
    raise DgSyntaxError(message, Loc(file, line, col))


# Each function registers `text` as the source of `file` (for the source line
# and caret in diagnostics, this one's and later passes'), unless
# register=False: for a fragment whose `file` names a real file, so that the
# fragment does not replace that file's text.


def parse(text: str, file: str = "<string>", *, register: bool = True) -> A.Module:
    """Parse a whole `.dg` file.  Raises DgSyntaxError (only) on bad input."""
    return _run(text, file, "start", register)


def parse_expr(text: str, file: str = "<string>", *, register: bool = True):
    """Parse one expression (a bare tuple `a, b` included)."""
    return _run(text, file, "expr_input", register)


def parse_type(text: str, file: str = "<string>", *, register: bool = True):
    """Parse a type: `f32`, `f32[B, 784, ?]` or `(f32[N], i64)`."""
    return _run(text, file, "type_input", register)
