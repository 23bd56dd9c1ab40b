"""`dg graph` and `fn.graph()`: a function's dataflow graph, drawn for people.

Expects: a function's dg-stage IR (what `fn.ir("dg", args=...)` gives), its
name and its parameters' names; Graphviz's Python package (the `graph`
extra) to build a drawing, and Graphviz's `dot` program to render one.
Guarantees: a `Graph` in which
- each op is a node named by the `.dg` variable it defines (the name the
  emitter writes into its location) and labelled with what it computes and
  its line; parameters are named by their names;
- constants are folded into the labels of the ops that use them, and the
  conversions the emitter adds (`to_i1`, index arithmetic) are looked
  through; ops whose results nothing uses are left out;
- edges carry their value's type (`f64[N, 3]`, sizes named as the
  parameters' annotations name them);
- loops and branches are nested clusters labelled with their `.dg` line; a
  loop's carried values are nodes of their own, fed by their first value and
  (dashed) by what each iteration gives the next.
With `grad`, the drawing is the gradient function the autodiff pass writes
for the function (its forward sweep, then its reverse sweep): every node of
the reverse sweep is red and labelled `∂`, with the forward line it
differentiates (the pass gives it that line's location). Saving picks the
format from the file's extension; every failure (an unknown extension,
Graphviz missing) is a `DgError` that says what to do.
"""
from __future__ import annotations

import contextlib
import html
import itertools
import json
import os
import re
from pathlib import Path

import numpy as np

from dg.core.deep import deeply
from dg.core.errors import DgError, source_line
from dg.core.locations import GRADIENT, in_gradient, loc_of
from dg.core.tracebacks import user_facing
from dg.core.types import is_float
from dg.dialects.dialect import parse
from dg.dialects.registry import OPS
from dg.lowering.transforms import gradient_module
from dg.lowering.irmodel import read_module

try:
    import graphviz
except ImportError:  # the `graph` extra is not installed: drawing says how to install it
    graphviz = None

RENDERED = ("svg", "png", "pdf")  # what `dot` draws
SOURCES = ("dot", "gv")  # the DOT text itself
NO_PACKAGE = "drawing a graph needs the graphviz Python package: pip install dg[graph]"
NO_DOT = ("rendering a graph needs Graphviz's `dot` program, which is not on the PATH: install Graphviz "
          "(apt install graphviz, brew install graphviz, or conda install -c conda-forge graphviz), "
          "or save the graph as .dot")

CONSTANTS = ("dg.constant", "arith.constant", "dg.undef")
LOOKED_THROUGH = ("dg.to_i1", "dg.to_index", "dg.from_index")  # and every arith op: index arithmetic
INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "matmul": "@", "pow": "**", "mod": "%",
         "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
GRADIENTS = re.compile(r"(.+?)__(grad|value_and_grad|vjp)(?:_\d+|_none)*(?:_ck\d+)?(?:_sh)?_*")

FORWARD = {"shape": "box", "style": "rounded,filled", "fillcolor": "#e8f0fe", "color": "#3b6fb6"}
BACKWARD = {"shape": "box", "style": "rounded,filled", "fillcolor": "#fde8e4", "color": "#c0392b"}
VALUE = {"shape": "ellipse", "style": "filled", "fillcolor": "#fff8dc", "color": "#8a6d00"}
BACK_VALUE = {**VALUE, "fillcolor": "#fde8e4", "color": "#c0392b"}
TEST = {"shape": "diamond", "style": "filled", "fillcolor": "#f0f0f0", "color": "#666666", "fontsize": "9"}
CLUSTER = {"style": "rounded,filled", "fillcolor": "#f6f8fa", "color": "#9aa5b1", "labeljust": "l", "fontsize": "10"}
BACK_CLUSTER = {**CLUSTER, "fillcolor": "#fff4f1", "color": "#c0392b"}


class Graph:
    """A drawn dataflow graph: `.source` (DOT text), `.save(path)`, and SVG inline in notebooks."""

    def __init__(self, digraph, title: str, nodes: int, clusters: int):
        self._digraph = digraph
        self.title = title
        self.nodes = nodes
        self.clusters = clusters

    @property
    def source(self) -> str:
        return self._digraph.source

    @user_facing
    def render(self, fmt: str) -> bytes:
        """The drawing as `dot` renders it in `fmt` ("svg", "png" or "pdf")."""
        try:
            return self._digraph.pipe(format=fmt)
        except graphviz.ExecutableNotFound:
            raise DgError(NO_DOT) from None
        except graphviz.CalledProcessError as e:
            detail = (e.stderr or b"").decode(errors="replace").strip()
            raise DgError(f"Graphviz's dot could not draw the graph{': ' + detail if detail else ''}") from None

    @user_facing
    def save(self, path) -> Path:
        """Write the graph to `path` in the format its extension names (.svg, .png, .pdf, .dot, .gv)."""
        path = Path(path)
        fmt = output_format(path)
        data = self.source.encode() if fmt in SOURCES else self.render(fmt)
        try:
            path.write_bytes(data)
        except OSError as e:
            raise DgError(f"cannot write {path}: {e.strerror}") from None
        return path

    def _repr_svg_(self):
        """The SVG a notebook shows; None (the text repr instead) where Graphviz cannot render."""
        try:
            return self.render("svg").decode()
        except DgError:
            return None

    def __repr__(self) -> str:
        def count(n: int, what: str) -> str:
            return f"{n} {what}{'' if n == 1 else 's'}"

        return (f"<dg graph of {self.title}: {count(self.nodes, 'node')}, {count(self.clusters, 'cluster')}; "
                f".save('g.svg' | .png | .pdf | .dot), .source>")


def output_format(path) -> str:
    """The format a file's extension names; anything else is a DgError naming those there are."""
    ext = Path(path).suffix.lower().lstrip(".")
    if ext not in RENDERED + SOURCES:
        raise DgError(f"cannot draw a graph to '{path}': its extension must be one of "
                      f"{', '.join('.' + e for e in RENDERED + SOURCES)}")
    return ext


def draw(ir_text: str, name: str, params: list, grad=False) -> Graph:
    """The graph of function `name` of a dg module (its text), whose parameters are `params`;
    with `grad` (True: every float parameter; an int or a tuple: those, as `dg.grad`'s `wrt`),
    the graph of its gradient."""
    if graphviz is None:
        raise DgError(NO_PACKAGE)
    return deeply(_draw, ir_text, name, list(params), grad)


def _draw(ir_text: str, name: str, params: list, grad) -> Graph:
    funcs = read_module(parse(ir_text))
    entry = min((f for f in funcs if f.body is not None and _name(f.location) == name), key=lambda f: len(f.sym))
    sizes = _sizes(entry)
    if grad is False or grad is None:
        title = f"{name}({', '.join(params)})"
        return _Drawer(funcs, entry, params, sizes, title).graph()
    mask = _mask(grad, entry, params, name)
    text, sym = gradient_module(funcs, entry.sym, mask)
    funcs = read_module(parse(text))
    vjp = next(f for f in funcs if f.sym == sym)
    seeds = vjp.body.args[len(params):]
    names = params + ["∂ result" if len(seeds) == 1 else f"∂ result {i}" for i in range(len(seeds))]
    title = f"gradient of {name} with respect to {', '.join(params[i] for i in mask)}"
    outputs = [None] * len(entry.result_types) + [f"∂ {params[i]}" for i in mask]
    return _Drawer(funcs, vjp, names, sizes, title, seeds=seeds, outputs=outputs).graph()


def _mask(grad, entry, params: list, name: str) -> tuple:
    """The parameters a gradient is taken with respect to."""
    floats = tuple(i for i, a in enumerate(entry.args) if a.tt.dtype not in ("index", "i1") and is_float(a.tt.dtype))
    if grad is True:
        if not floats:
            raise DgError(f"{name}() has no float parameter to differentiate with respect to", loc_of(entry.location))
        return floats
    wrt = (grad,) if isinstance(grad, int) and not isinstance(grad, bool) else grad
    if not (isinstance(wrt, tuple) and wrt and all(isinstance(i, int) and not isinstance(i, bool) for i in wrt)):
        raise DgError(f"grad must be True, an int or a non-empty tuple of ints, got {grad!r}")
    for i in wrt:
        if not 0 <= i < len(params) or i not in floats:
            raise DgError(f"cannot draw the gradient of {name}() with respect to argument {i}: "
                          f"{'it is not a float' if 0 <= i < len(params) else 'there is none'}")
    return wrt


# ---------------------------------------------------------------- reading the IR
def _ops_under(block):
    for op in block.ops:
        yield op
        for r in op.regions:
            yield from _ops_under(r)


def _name(location) -> str | None:
    """The variable a name location names (the emitter's `loc("h"(...))`, inside the autodiff
    pass's mark on a backward op), else None."""
    name = getattr(location, "name_str", None)
    return _name(location.child_loc) if name == GRADIENT else name


def _sizes(func) -> dict:
    """Parameter position -> the names of its sizes (`dg.sizes`: `[["N", ""], []]`)."""
    try:
        rows = json.loads(func.attrs.get("dg.sizes", "[]"))
    except ValueError:
        return {}
    return {i: row for i, row in enumerate(rows) if isinstance(row, list)}


def _shape_cast(op, defs: dict) -> bool:
    """Whether `op` reshapes a value to the sizes it has (how the emitter gives a value a type
    that leaves sizes open, at a call or a return): it changes no value."""
    if op.dg != "reshape" or len(op.py.get("shape", ())) != op.operands[0].tt.rank:
        return False
    x, sizes = op.operands[0], iter(op.operands[1:])
    for axis, (want, have) in enumerate(zip(op.py["shape"], x.tt.shape)):
        if want != -2:
            if want != have:
                return False
            continue
        made = defs.get(next(sizes, None))
        if made is None or not (made.dg == "dim" and made.operands[0] is x and made.py.get("axis") == axis or
                                made.dg == "constant" and made.py["value"][0].size == 1 and
                                made.py["value"][0].reshape(-1)[0] == have):
            return False
    return next(sizes, None) is None


def _uses(body, casts: set) -> dict:
    """Value -> the ops that use it (a shape cast only its value, not the sizes it restates)."""
    out: dict = {}
    for op in _ops_under(body):
        for o in op.operands[:1] if op in casts else op.operands:
            out.setdefault(o, []).append(op)
    return out


def _dead(body, uses: dict) -> set:
    """The ops left out: the run-time checks of declared sizes (`dg.check`), and the pure ops
    none of whose results is used but by ops left out."""
    dead = {op for op in _ops_under(body) if op.dg == "check"}
    ops = [op for op in _ops_under(body) if op.results and not op.regions and
           (op.name.startswith("arith.") or op.dg is not None and OPS[op.dg].pure)]
    changed = True
    while changed:
        changed = False
        for op in reversed(ops):
            if op not in dead and all(u in dead for r in op.results for u in uses.get(r, ())):
                dead.add(op)
                changed = True
    return dead


def _ranges(body, defs: dict, uses: dict) -> dict:
    """scf.for -> the `range(...)` (dg.range_len) that only it uses, drawn as the loop's head."""
    out = {}
    for op in _ops_under(body):
        made = defs.get(op.operands[1]) if op.name == "scf.for" else None
        if made is not None and made.dg == "range_len" and uses[op.operands[1]] == [op]:
            out[op] = made
    return out


def _flows(op):
    """(to, from) for each value a loop or a branch hands from one value to another."""
    if op.name == "scf.for":
        body = op.regions[0]
        for j, r in enumerate(op.results):
            for into in (body.args[1 + j], r):
                yield into, op.operands[3 + j]
                yield into, body.ops[-1].operands[j]
    elif op.name == "scf.while":
        before, after = op.regions
        cond = before.ops[-1].operands[1:]
        for j, a in enumerate(before.args):
            yield a, op.operands[j]
            yield a, after.ops[-1].operands[j]
        for k, v in enumerate(cond):
            yield after.args[k], v
            yield op.results[k], v
    elif op.name == "scf.if":
        for r in op.regions:
            yield from zip(op.results, r.ops[-1].operands)


def _reverse_sweep(body, seeds: list, uses: dict, dead: set) -> tuple:
    """(the ops of a gradient function's reverse sweep, the values that depend on a cotangent):
    the ops the autodiff pass marks as backward (`core.locations.in_gradient`), those that depend
    on a cotangent (the `seeds`), those only they use (the zeros an adjoint starts from; not the
    forward sweep's tapes), and the loops and branches that hold some of them."""
    every = [op for op in _ops_under(body) if op not in dead]
    ops = {op for op in every if in_gradient(op.location)}
    hot = set(seeds) | {r for op in ops for r in op.results}
    changed = True
    while changed:
        changed = False
        for op in every:
            new = set(op.results) if any(o in hot for o in op.operands) else set()
            if new and op not in ops:
                ops.add(op)
            new.update(into for into, v in _flows(op) if v in hot)
            if new - hot:
                hot |= new
                changed = True
    changed = True
    while changed:
        changed = False
        for op in reversed(every):
            users = [u for r in op.results for u in uses.get(r, ()) if u not in dead]
            if op not in ops and op.results and not (op.dg or "").startswith("tape_") and users and \
                    all(u in ops for u in users):
                ops.add(op)
                changed = True
    for op in every:  # a loop or a branch of the reverse sweep: one that holds some of it
        if op.regions and any(o in ops for r in op.regions for o in _ops_under(r)):
            ops.add(op)
    return ops, hot


# ---------------------------------------------------------------- labels
def _line(location) -> str:
    loc = loc_of(location)
    return f"line {loc.line}" if loc else ""


def _where(location) -> str:
    """`file:line:col  source text`, the tooltip of what was written there."""
    loc = loc_of(location)
    if loc is None:
        return ""
    text = source_line(loc.file, loc.line)
    return f"{loc}  {text.strip()}" if text else str(loc)


def _html(head: str, foot: str = "", bold: str = "") -> str:
    """An HTML-like Graphviz label: `bold` in bold, then `head`, then `foot` small and grey."""
    out = (f"<B>{html.escape(bold)}</B>" if bold else "") + html.escape(head)
    if foot:
        out += f'<BR/><FONT POINT-SIZE="9" COLOR="#555555">{html.escape(foot)}</FONT>'
    return f"<{out}>"


def _number(x) -> str:
    """A number as a dg program writes it: `0.5`, `1.0`, `3`, `True`."""
    return str(x.item() if isinstance(x, np.bool_) else x)


def _constant_text(op) -> str:
    if op.name == "dg.undef":
        return "undef"
    if op.name == "arith.constant":
        return op.attrs["value"].split(":")[0].strip()
    array, t = op.py["value"]
    if array.size == 1:
        return _number(array.reshape(-1)[0])
    if array.size <= 4:
        return "[" + ", ".join(_number(x) for x in array.reshape(-1)) + "]"
    return f"{t} constant"


def _attr_texts(op) -> list:
    out = []
    for k, v in op.py.items():
        if k == "spec" or v is False or v is None:
            continue
        if isinstance(v, tuple) and all(isinstance(x, (int, float)) for x in v):
            v = "(" + ", ".join(map(_number, v)) + ("," if len(v) == 1 else "") + ")"
        elif isinstance(v, (int, float, str)):
            v = _number(v)
        else:
            continue
        out.append(f"{k}={v}")
    return out


def _type_text(v, names=None) -> str:
    """`f64[N, 3]` (the parameters' size names where given), `bool`, `index`."""
    t = v.tt
    if t.dtype in ("index", "i1"):
        return "bool" if t.dtype == "i1" else "index"
    dims = [str(d) if isinstance(d, int) else (names[i] if names and i < len(names) and names[i] else "?")
            for i, d in enumerate(t.shape)]
    return f"{t.dtype}[{', '.join(dims)}]" if dims else t.dtype


def _cluster_title(op, kind: str, reverse: bool) -> str:
    """`for i in range(n)   model.dg:3`: the loop's or branch's line of source, where it is."""
    loc = loc_of(op.location)
    text = source_line(loc.file, loc.line) if loc else None
    text = (text or "").strip().rstrip(":").strip()
    if len(text) > 48:
        text = text[:47] + "…"
    if not text:
        text = kind
    elif text.split()[0] not in ((kind, "elif", "else") if not reverse else ("for", "while", "if", "elif", "else")):
        text = f"{kind}: {text}"
    where = f"   {os.path.basename(loc.file)}:{loc.line}" if loc else ""
    return ("reverse of " if reverse else "") + text + where


def _loop_variable(location) -> str:
    """The variable of the `for VAR in ...` written where a loop is, else "step"."""
    loc = loc_of(location)
    var = re.match(r"\s*for\s+(\w+)\s+in\b", (source_line(loc.file, loc.line) or "") if loc else "")
    return var[1] if var else "step"


# ---------------------------------------------------------------- drawing
class _Drawer:
    """One function's ops as nodes and edges of a graphviz Digraph, its loops and branches as
    clusters. `seeds`: a gradient function's cotangent parameters (its reverse sweep starts
    there); `outputs`: the names its results are drawn under (None: returned values)."""

    def __init__(self, funcs: list, func, params: list, sizes: dict, title: str, seeds=(), outputs=None):
        self.funcs = {f.sym: f for f in funcs}
        self.func = func
        self.params = params
        self.title = title
        self.defs = {r: op for op in _ops_under(func.body) for r in op.results}
        self.casts = {op for op in _ops_under(func.body) if _shape_cast(op, self.defs)}
        uses = _uses(func.body, self.casts)
        self.dead = _dead(func.body, uses)
        self.backward, self.hot = _reverse_sweep(func.body, list(seeds), uses, self.dead) if seeds else (set(), set())
        self.outputs = outputs
        self.ranges = _ranges(func.body, self.defs, uses)
        self.heads = set(self.ranges.values())  # drawn by their loops
        self.sizes = {a: sizes.get(i) for i, a in enumerate(func.body.args)}
        self.src: dict = {}  # value -> the nodes it comes from
        self.shown: dict = {}  # value -> the value whose type its edges show (a shape cast's operand)
        self.const: dict = {}  # value -> its text, for a constant folded into its users' labels
        self.edges: list = []  # (tail, head, attributes), drawn last at the top level
        self.ids = itertools.count(1)
        self.nodes = 0
        self.clusters = 0

    def graph(self) -> Graph:
        g = graphviz.Digraph(name="dg", graph_attr={
            "rankdir": "TB", "label": self.title, "labelloc": "t", "fontname": "Helvetica", "fontsize": "14",
            "nodesep": "0.3", "ranksep": "0.35"},
            node_attr={"fontname": "Helvetica", "fontsize": "11"},
            edge_attr={"fontname": "Helvetica", "fontsize": "9", "fontcolor": "#555555", "color": "#777777"})
        body = self.func.body
        for a, name in zip(body.args, self.params):
            style = BACK_VALUE if a in self.hot else VALUE
            self.src[a] = [self.node(g, _html("", _type_text(a, self.sizes[a]), bold=name), style,
                                     f"parameter {name}")]
        self.block(g, body)
        self.returns(g, body.ops[-1])
        drawn = set()
        for tail, head, attrs in self.edges:  # one edge for a value that an op takes twice (`h * h`)
            key = (tail, head, *sorted(attrs.items()))
            if key not in drawn:
                drawn.add(key)
                g.edge(tail, head, **attrs)
        return Graph(g, self.title, self.nodes, self.clusters)

    # ------------------------------------------------------------ nodes and edges
    def node(self, g, label: str, style: dict, tooltip: str = "") -> str:
        nid = f"n{next(self.ids)}"
        self.nodes += 1
        g.node(nid, label, tooltip=tooltip or None, **style)
        return nid

    def text(self, v) -> str:
        return self.const.get(v, "·")

    def connect(self, values, head: str, backward: bool = False, **extra) -> None:
        for v in values:
            for tail in self.src.get(v, ()):
                shown = self.shown.get(v, v)
                attrs = {"label": _type_text(shown, self.sizes.get(shown)), **extra}
                if backward:
                    attrs.update(color="#c0392b", fontcolor="#c0392b")
                self.edges.append((tail, head, attrs))

    def alias(self, into, v) -> None:
        """`into` is `v` (a value handed on): it comes from where v does."""
        if v in self.const:
            self.const[into] = self.const[v]
        self.src[into] = list(self.src.get(v, ()))

    def label(self, op, texts: list) -> str:
        name = _name(op.location)
        if op.dg in INFIX and len(texts) == 2:
            expr = f"{texts[0]} {INFIX[op.dg]} {texts[1]}"
        elif op.dg == "neg":
            expr = f"-{texts[0]}"
        else:
            what = self.callee(op) if op.name == "func.call" else op.dg or op.name
            expr = f"{what}({', '.join(texts + _attr_texts(op))})"
        if op in self.backward:
            return _html(f"  ({_line(op.location)})", expr, bold=f"∂ {name}" if name else "∂")
        return _html(f" = {expr}" if name else expr, _line(op.location), bold=name or "")

    def callee(self, op) -> str:
        sym = op.attrs.get("callee", "").lstrip("@")
        grad = GRADIENTS.fullmatch(sym)
        if grad:
            f = self.funcs.get(grad[1])
            return f"{grad[2]}({_name(f.location) if f else grad[1]})"
        f = self.funcs.get(sym)
        return (_name(f.location) if f else None) or sym

    # ------------------------------------------------------------ ops
    def block(self, g, block) -> None:
        for op in block.ops:
            if op not in self.dead and op not in self.heads:
                self.op(g, op)

    def op(self, g, op) -> None:
        if op.name in CONSTANTS:
            self.const[op.results[0]] = _constant_text(op)
        elif op in self.casts:  # drawn as the value it casts, with that value's type
            self.alias(op.results[0], op.operands[0])
            self.shown[op.results[0]] = self.shown.get(op.operands[0], op.operands[0])
        elif op.name in LOOKED_THROUGH or op.name.startswith("arith."):
            for r in op.results:
                self.src[r] = list(dict.fromkeys(t for o in op.operands for t in self.src.get(o, ())))
        elif op.name == "scf.for":
            self.loop_for(g, op)
        elif op.name == "scf.while":
            self.loop_while(g, op)
        elif op.name == "scf.if":
            self.branch(g, op)
        elif op.name not in ("scf.yield", "scf.condition", "func.return"):  # their regions' parents draw them
            back = op in self.backward
            tip = f"{op.name}, {'differentiating ' if back else ''}{_where(op.location)}"
            nid = self.node(g, self.label(op, [self.text(o) for o in op.operands]), BACKWARD if back else FORWARD, tip)
            self.connect(op.operands, nid, back)
            for r in op.results:
                self.src[r] = [nid]

    def returns(self, g, ret) -> None:
        outputs = self.outputs or [None] * len(ret.operands)
        plain = [v for v, o in zip(ret.operands, outputs) if o is None]
        if plain or not ret.operands:
            texts = [self.const[v] for v in plain if v in self.const]
            nid = self.node(g, _html(" ".join(["return"] + texts)), {**VALUE, "shape": "oval", "penwidth": "2"},
                            _where(ret.location))
            self.connect(plain, nid)
        for v, name in zip(ret.operands, outputs):
            if name is not None:
                label = _html(f" = {self.const[v]}" if v in self.const else "", bold=name)
                self.connect([v], self.node(g, label, {**BACK_VALUE, "penwidth": "2"}, "gradient"), True)

    @contextlib.contextmanager
    def cluster(self, g, op, kind: str, title: str | None = None):
        self.clusters += 1
        back = op in self.backward
        with g.subgraph(name=f"cluster_{self.clusters}") as c:
            c.attr(label=title if title is not None else _cluster_title(op, kind, back),
                   **(BACK_CLUSTER if back else CLUSTER))
            yield c

    def carried(self, c, op, inits, args, yielded) -> list:
        """A node per carried value of a loop, fed by its first value; each iteration's arguments."""
        nids = []
        for init, arg, y in zip(inits, args, yielded):
            made = self.defs.get(y)
            name = (_name(made.location) if made else None) or ""
            back = arg in self.hot
            first = f"carried, from {self.const[init]}" if init in self.const else "carried"
            if back or name:
                label = _html("", first, bold=f"∂ {name}".strip() if back else name)
            else:
                label = _html(first)
            nid = self.node(c, label, BACK_VALUE if back else VALUE, _where(op.location))
            self.connect([init], nid, back)
            self.src[arg] = [nid]
            nids.append(nid)
        return nids

    def next_edges(self, args, yielded, nids) -> None:
        for arg, y, nid in zip(args, yielded, nids):
            if y is not arg:
                self.connect([y], nid, label="next", style="dashed", constraint="false")

    def loop_for(self, g, op) -> None:
        body = op.regions[0]
        back = op in self.backward
        with self.cluster(g, op, "for") as c:
            if op in self.ranges:
                bounds = self.ranges[op].operands
                head = f"in range({', '.join(map(self.text, bounds))})"
            else:
                bounds = op.operands[:3]
                head = "in reverse" if back else f"in {self.text(bounds[0])} .. {self.text(bounds[1])}"
            hid = self.node(c, _html(" " + head, bold=_loop_variable(op.location)), {**TEST, "shape": "box"},
                            _where(op.location))
            self.connect(bounds, hid, back)
            self.src[body.args[0]] = [hid]
            nids = self.carried(c, op, op.operands[3:], body.args[1:], body.ops[-1].operands)
            self.block(c, body)
            self.next_edges(body.args[1:], body.ops[-1].operands, nids)
        for r, nid in zip(op.results, nids):
            self.src[r] = [nid]

    def loop_while(self, g, op) -> None:
        before, after = op.regions
        cond = before.ops[-1]
        with self.cluster(g, op, "while") as c:
            nids = self.carried(c, op, op.operands, before.args, after.ops[-1].operands)
            self.block(c, before)
            hid = self.node(c, _html("while"), TEST, _where(cond.location))
            self.connect(cond.operands[:1], hid, op in self.backward)
            for a, v in zip(after.args, cond.operands[1:]):
                self.alias(a, v)
            self.block(c, after)
            self.next_edges(before.args, after.ops[-1].operands, nids)
        for r, v in zip(op.results, cond.operands[1:]):
            self.alias(r, v)

    def branch(self, g, op) -> None:
        drawn = [r for r in op.regions if len(r.ops) > 1 or not r.ops]
        with self.cluster(g, op, "if") as c:
            hid = self.node(c, _html("if"), TEST, _where(op.location))
            self.connect(op.operands[:1], hid, op in self.backward)
            for k, region in enumerate(op.regions):
                if region not in drawn:
                    continue
                if len(drawn) == 1:
                    self.block(c, region)
                    continue
                with self.cluster(c, op, "", title="then" if k == 0 else "else") as b:
                    self.block(b, region)
        for j, r in enumerate(op.results):  # from whichever branch ran
            yielded = [region.ops[-1].operands[j] for region in op.regions]
            self.src[r] = list(dict.fromkeys(t for v in yielded for t in self.src.get(v, ())))
