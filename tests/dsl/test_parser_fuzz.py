"""Fuzzing the parser: on any input it returns a Module or raises DgSyntaxError.

Generators: arbitrary text, soups of dg tokens, mutations of a valid program
(most inputs are rejected; the mutations keep a good share valid), and random
expressions.  For text it accepts, more properties: every node's Loc lies in
the text, Python accepts the text too (dg is a strict subset of Python), and
Python's own AST has the same shape and the same positions as dg's.
"""
from __future__ import annotations

import ast as py
import io
import tokenize
import warnings
from dataclasses import fields

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dg.core.errors import DgSyntaxError
from dg.dsl import ast as A
from dg.dsl.parser import parse, parse_expr

FILE = "fuzz.dg"

FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SAMPLE = '''\
import layers
from nn import dense, relu

# A small model exercising most of the syntax.
def mlp(x: f32[B, 784], w: f32[784, H], b: f32[H], n: i64 = 2, eps=-1e-5) -> (f32[B, H], f32):
    """Docstring."""
    h = x @ w + b  # affine
    a, (c, d) = 1, (2.5, .5)
    y: f32[B, H] = relu(h) * 2.0 ** -1
    for i in range(0, n, 1):
        if i % 2 == 0 and not y.shape[0] < 1 <= n:
            y = y[:, ::2, ..., None] if i else -y
        elif i == 1: y[0, 1:3] += 1; continue
        else:
            break
    while sum(y, axis=-1,) > 0.0:
        y = (y - [[1.0, 2.0], [3.0, 4.0]]) * (2)
    assert y.ndim == 2, "rank \\"2\\""
    print(y, 'done'); breakpoint()
    return y, mean(
        y,  # continuation inside brackets
    )
'''

TOKENS = [
    # keywords (dg's and some Python-only ones)
    "def", "if", "elif", "else", "for", "in", "while", "break", "continue", "return",
    "pass", "assert", "import", "from", "as", "and", "or", "not", "True", "False", "None",
    "lambda", "class", "with", "is", "yield",
    # names, numbers, strings
    "x", "y", "f", "f32", "i64", "B", "range", "print", "_", "é",
    "0", "1", "42", "007", "1_000", "0.5", "1.", ".5", "1e-3", "2.5E+4",
    "'s'", '"t"', "'\\n'", '"""doc"""', "r'\\d'", "f'x'", "'open", "#c",
    # punctuation and operators
    "(", ")", "[", "]", "{", "}", ",", ":", ";", ".", "...", "?", "->", "=", "@",
    "+", "-", "*", "/", "//", "%", "**", "<", "<=", ">", ">=", "==", "!=", "!",
    "+=", "-=", "*=", "/=", "@=", "//=", "%=", "**=", ":=",
    # layout
    "\n", "\n    ", "\n        ", "\n\t", "\r\n", "\\\n", "\f", "\x00",
]
SEPARATORS = ["", " ", " ", "  ", "\n", "\n    "]


def walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        for v in vars(n).values():
            if isinstance(v, A.Node):
                stack.append(v)
            elif isinstance(v, list):
                stack.extend(x for x in v if isinstance(x, A.Node))


def python_accepts(text: str, mode: str = "exec") -> bool:
    # Python skips a leading BOM when it reads a file, not in a str given to compile().
    text = text.removeprefix("\ufeff")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(text, "<fuzz>", mode, dont_inherit=True)
        except SyntaxError:
            return False
    return True


# ------------------------------------------------------------------ dg AST vs Python AST
# Both ASTs become nested tuples (dg class name, line, col, fields in dg's
# order...), with every literal tagged by its type, so that 1, 1.0 and True differ.
def leaf(v):
    return (type(v).__name__, v)


def dg_shape(x):
    if isinstance(x, list):
        return [dg_shape(e) for e in x]
    if isinstance(x, A.Node):
        rest = tuple(dg_shape(getattr(x, f.name)) for f in fields(x) if f.name != "loc" and not f.metadata.get("rewrite"))
        return (type(x).__name__, x.loc.line, x.loc.col) + rest
    return leaf(x)


_PY_OPS = {
    py.Add: "+", py.Sub: "-", py.Mult: "*", py.Div: "/", py.FloorDiv: "//", py.Mod: "%",
    py.Pow: "**", py.MatMult: "@", py.USub: "-", py.UAdd: "+", py.Not: "not",
    py.And: "and", py.Or: "or", py.Lt: "<", py.LtE: "<=", py.Gt: ">", py.GtE: ">=",
    py.Eq: "==", py.NotEq: "!=",
}


class PyShape:
    """Python's AST of a text dg accepted, in dg's terms (see dg_shape)."""

    def __init__(self, src: str):
        self.src = src

    def pos(self, n, name: str, *rest):
        # Python's col_offset is 0-based (in UTF-8 bytes: only ASCII text is compared).
        return (name, n.lineno, n.col_offset + 1) + rest

    def module(self, m: py.Module):
        imports = [self.stmt(s) for s in m.body if isinstance(s, (py.Import, py.ImportFrom))]
        funcs = [self.stmt(s) for s in m.body if isinstance(s, py.FunctionDef)]
        return imports, funcs

    def body(self, stmts):
        return [self.stmt(s) for s in stmts]

    def stmt(self, s):
        e, P = self.expr, self.pos
        if isinstance(s, py.Import):
            (a,) = s.names
            return P(s, "Import", leaf(a.name), leaf(None), leaf(a.asname))
        if isinstance(s, py.ImportFrom):
            return P(s, "Import", leaf(s.module), [leaf(a.name) for a in s.names], leaf(None))
        if isinstance(s, py.FunctionDef):
            args = s.args.args
            defaults = [None] * (len(args) - len(s.args.defaults)) + list(s.args.defaults)
            params = [
                P(a, "Param", leaf(a.arg), self.type(a.annotation), self.default(d))
                for a, d in zip(args, defaults)
            ]
            return P(s, "FuncDef", leaf(s.name), params, self.type(s.returns), self.body(s.body))
        if isinstance(s, py.Assign):
            return P(s, "Assign", [self.target(t) for t in s.targets], e(s.value))
        if isinstance(s, py.AnnAssign):
            return P(s, "AnnAssign", e(s.target), self.type(s.annotation), e(s.value))
        if isinstance(s, py.AugAssign):
            return P(s, "AugAssign", e(s.target), leaf(_PY_OPS[type(s.op)]), e(s.value))
        if isinstance(s, py.Expr):
            return P(s, "ExprStmt", e(s.value))
        if isinstance(s, py.If):
            return P(s, "If", e(s.test), self.body(s.body), self.body(s.orelse))
        if isinstance(s, py.For):
            return P(s, "For", e(s.target), e(s.iter), self.body(s.body))
        if isinstance(s, py.While):
            return P(s, "While", e(s.test), self.body(s.body))
        if isinstance(s, py.Return):
            return P(s, "Return", e(s.value))
        if isinstance(s, py.Assert):
            return P(s, "Assert", e(s.test), e(s.msg))
        return P(s, {py.Pass: "Pass", py.Break: "Break", py.Continue: "Continue"}[type(s)])

    def target(self, t):
        if isinstance(t, (py.Tuple, py.List)):  # dg turns [a, b] = e into a tuple
            return self.pos(t, "Tuple", [self.target(x) for x in t.elts])
        return self.expr(t)

    def default(self, d):
        # dg folds the sign of a numeric default into the constant.
        if isinstance(d, py.UnaryOp) and isinstance(d.operand, py.Constant):
            v = d.operand.value
            return self.pos(d, "Const", leaf(-v if isinstance(d.op, py.USub) else v))
        return self.expr(d)

    def type(self, t):
        if t is None:
            return leaf(None)
        if isinstance(t, py.Tuple):
            return self.pos(t, "TupleTypeExpr", [self.type(x) for x in t.elts])
        if isinstance(t, py.Name):
            return self.pos(t, "TypeExpr", leaf(t.id), leaf(None))
        dims = [leaf(d.value if isinstance(d, py.Constant) else d.id) for d in self.items(t.slice)]
        return self.pos(t, "TypeExpr", leaf(t.value.id), dims)

    def items(self, s):
        """The items of a subscript: a tuple unless it was written in parentheses."""
        if isinstance(s, py.Tuple) and not self.parenthesized(s):
            return s.elts
        return [s]

    def parenthesized(self, n) -> bool:
        seg = py.get_source_segment(self.src, n)
        if not seg.startswith("("):
            return False
        depth = 0
        toks = tokenize.generate_tokens(io.StringIO(seg).readline)
        for tok in toks:
            if tok.type == tokenize.OP and tok.string in "([":
                depth += 1
            elif tok.type == tokenize.OP and tok.string in ")]":
                depth -= 1
                if depth == 0:  # the "(" that opens the segment closes here
                    return tok.end == (seg.count("\n") + 1, len(seg.rsplit("\n", 1)[-1]))
        return False

    def expr(self, n):
        if n is None:
            return leaf(None)
        e, P = self.expr, self.pos
        k = type(n)
        if k is py.Constant:
            return P(n, "EllipsisLit") if n.value is Ellipsis else P(n, "Const", leaf(n.value))
        if k is py.Name:
            return P(n, "Name", leaf(n.id))
        if k in (py.Tuple, py.List):
            return P(n, k.__name__, [e(x) for x in n.elts])
        if k is py.BinOp:
            return P(n, "BinOp", leaf(_PY_OPS[type(n.op)]), e(n.left), e(n.right))
        if k is py.UnaryOp:
            return P(n, "UnaryOp", leaf(_PY_OPS[type(n.op)]), e(n.operand))
        if k is py.BoolOp:
            return P(n, "BoolOp", leaf(_PY_OPS[type(n.op)]), [e(x) for x in n.values])
        if k is py.Compare:
            ops = [leaf(_PY_OPS[type(o)]) for o in n.ops]
            return P(n, "Compare", e(n.left), ops, [e(x) for x in n.comparators])
        if k is py.IfExp:
            return P(n, "IfExp", e(n.test), e(n.body), e(n.orelse))
        if k is py.Call:
            kws = [P(kw, "Keyword", leaf(kw.arg), e(kw.value)) for kw in n.keywords]
            return P(n, "Call", e(n.func), [e(x) for x in n.args], kws)
        if k is py.Attribute:
            return P(n, "Attribute", e(n.value), leaf(n.attr))
        if k is py.Subscript:
            return P(n, "Subscript", e(n.value), [e(x) for x in self.items(n.slice)])
        if k is py.Slice:
            return P(n, "Slice", e(n.lower), e(n.upper), e(n.step))
        raise AssertionError(f"dg accepted a Python {k.__name__}")


def same_as_python(text: str, module: A.Module) -> None:
    """dg's AST of `text` has the shape and positions of Python's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = py.parse(text)
    imports, funcs = PyShape(text).module(tree)
    assert dg_shape(module.imports) == imports
    assert dg_shape(module.funcs) == funcs


def check(text: str) -> None:
    """The property every input must satisfy."""
    try:
        module = parse(text, FILE)
    except DgSyntaxError as err:
        assert err.loc is not None and err.loc.file == FILE
        assert err.loc.line >= 1 and err.loc.col >= 1
        assert str(err).startswith(f"{FILE}:{err.loc.line}:{err.loc.col}: error: ")
        return
    assert isinstance(module, A.Module)
    n_lines = text.replace("\r\n", "\n").replace("\r", "\n").count("\n") + 1
    for node in walk(module):
        assert node.loc.file == FILE
        assert 1 <= node.loc.line <= n_lines and node.loc.col >= 1, node
    # dg is a strict subset of Python, but for `?` dims in types.  In accepted
    # text a `?` is such a dim, or is in a string or a comment.
    assert python_accepts(text.replace("?", "_")), text
    if "?" not in text and text.isascii():
        same_as_python(text, module)


@FUZZ
@given(st.text(max_size=300))
def test_random_text(text):
    check(text)


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("def x(y):\n\t #[]=+-*/@.,'\"\\?01e_\r\f")), max_size=200))
def test_random_text_from_dg_characters(text):
    check(text)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(TOKENS), st.sampled_from(SEPARATORS)), max_size=60))
def test_token_soup(pairs):
    check("".join(tok + sep for tok, sep in pairs))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(TOKENS), st.sampled_from(SEPARATORS)), max_size=30))
def test_token_soup_in_a_function_body(pairs):
    # Start inside a def so that statement-level forms are reached often.
    check("def f(x):\n    " + "".join(tok + sep for tok, sep in pairs))


MUTATION_CHARS = list("()[]{}:,.;=+-*/@%<>!?#'\"\\ \t\n\r\fxyz019e_") + ["\x00", "é", "\u2028", "    "]


@st.composite
def mutated_sample(draw):
    text = SAMPLE
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(["delete", "insert", "insert_token", "swap", "replace", "delete_span", "duplicate_line"])
        )
        i = draw(st.integers(0, len(text) - 1))
        if kind == "delete":
            text = text[:i] + text[i + 1:]
        elif kind == "insert":
            text = text[:i] + draw(st.sampled_from(MUTATION_CHARS)) + text[i:]
        elif kind == "insert_token":
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
        elif kind == "swap" and i + 1 < len(text):
            text = text[:i] + text[i + 1] + text[i] + text[i + 2:]
        elif kind == "replace":
            text = text[:i] + draw(st.sampled_from(MUTATION_CHARS)) + text[i + 1:]
        elif kind == "delete_span":
            text = text[:i] + text[i + draw(st.integers(1, 40)):]
        elif kind == "duplicate_line":
            lines = text.split("\n")
            k = i % len(lines)
            lines.insert(k, lines[k])
            text = "\n".join(lines)
        if not text:
            break
    return text


@FUZZ
@given(mutated_sample())
def test_mutations_of_a_valid_program(text):
    check(text)


ATOMS = ["x", "y", "f", "0", "1", "42", "2.5", ".5", "1e-3", "True", "False", "None", "'s'", "'a' \"b\""]
OPERATORS = ["+", "-", "*", "/", "//", "%", "**", "@", "<", "<=", ">", ">=", "==", "!=", "and", "or"]
COMMAS = [", ", ",", ",\n    ", " ,"]  # a newline inside brackets continues the line


def _seq(parts, sep):
    return sep.join(parts)


def _call(t):
    func, args, kwargs, sep = t
    return f"{func}(" + _seq(args + [f"{k}={v}" for k, v in kwargs], sep) + ")"


def _tuple(t):
    elts, sep = t
    return "()" if not elts else "(" + _seq(elts, sep) + ("," if len(elts) == 1 else "") + ")"


def _slice(t):
    lo, hi, step = t
    return f"{lo}:{hi}" + ("" if step is None else f":{step}")


def _extend(sub):
    sep = st.sampled_from(COMMAS)
    opt = st.one_of(st.just(""), sub)
    item = st.one_of(sub, st.tuples(opt, opt, st.one_of(st.none(), opt)).map(_slice), st.just("..."))
    return st.one_of(
        st.tuples(sub, st.sampled_from(OPERATORS), sub).map(" ".join),
        st.tuples(st.sampled_from(["-", "+", "not ", "- "]), sub).map("".join),
        sub.map("({})".format),
        st.tuples(sub, sub, sub).map(lambda t: f"{t[0]} if {t[1]} else {t[2]}"),
        st.tuples(
            sub,
            st.lists(sub, max_size=3),
            st.lists(st.tuples(st.sampled_from(["k", "axis"]), sub), max_size=2, unique_by=lambda kv: kv[0]),
            sep,
        ).map(_call),
        sub.map("{}.T".format),
        st.tuples(sub, st.lists(item, min_size=1, max_size=3), sep, st.booleans()).map(
            lambda t: f"{t[0]}[" + _seq(t[1], t[2]) + ("," if t[3] else "") + "]"
        ),
        st.tuples(st.lists(sub, max_size=3), sep).map(lambda t: "[" + _seq(*t) + "]"),
        st.tuples(st.lists(sub, max_size=3), sep).map(_tuple),
    )


EXPRESSIONS = st.recursive(st.sampled_from(ATOMS), _extend, max_leaves=12)


@FUZZ
@given(EXPRESSIONS)
def test_random_expressions_parse_as_python_does(src):
    # Precedence, associativity and every position, against Python's parser.
    ok = python_accepts(src, "eval")
    try:
        node = parse_expr(src, FILE)
    except DgSyntaxError:
        assert not ok, src
        return
    assert ok, src
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = py.parse(src, mode="eval")
    assert dg_shape(node) == PyShape(src).expr(tree.body), src


def test_the_sample_parses_as_python_does():
    module = parse(SAMPLE, FILE)
    assert [f.name for f in module.funcs] == ["mlp"] and len(module.imports) == 2
    same_as_python(SAMPLE, module)


def test_parser_state_does_not_leak_between_calls():
    # A failure in the middle of one parse (inside brackets, deep in blocks)
    # must not affect the next one.
    for bad in ["def f(x):\n    y = (x +\n", "def f(x):\n  if x:\n     y\n   z\n", "def f(:"]:
        try:
            parse(bad, FILE)
        except DgSyntaxError:
            pass
        assert parse(SAMPLE, FILE).funcs[0].name == "mlp"
