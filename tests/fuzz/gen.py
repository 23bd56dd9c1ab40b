"""Random well-typed dg programs, one per seed, with the inputs to call them with.

A program is a few functions over one float element type: helpers (some
return a pair), perhaps a recursive helper (a depth argument that decreases),
a scalar `loss`, perhaps a `loss2` that differentiates `loss` itself, and an
entry `main` that asks for gradients of them (perhaps in a few steps of
gradient descent) and returns a tuple. Every float value has one of four
kinds: `s` (a scalar), `v` ([N]), `w` ([M]) and `m` ([N, M]); the generator
combines only kinds that broadcast, feeds smooth functions bounded values
(loop updates are squashed through tanh and the like), and makes every loop
terminate (a counter with a bound, or a value that grows by at least 0.3 a
trip). Names first bound inside a block are read only inside it.

Besides, a program takes up some of the language's newer parts, each drawn
per program with the probability in `DRAWN` (so that one check stays short):
records and tuples (`Rec`, `Tup`: arguments, results, loop-carried values,
fields read and updated, `tree_map`), the standard library (`import nn`:
dense layers, the MLP, recurrent cells, layer norm, convolution blocks;
`import optim`: an optimizer's steps over the parameters in `main`, or one
inside a differentiated `loss2`), convolution and pooling (two more kinds:
images `x` [B, C, N, M] and kernels `k` [O, C / G, KH, KW] of static height
and width; the "same" forms turn matrices into images and back), integer
index arrays (literals of indices in range, `argmax`, an `i64[N]` input `ix`;
reads, `take`, updates), `jvp` (of helpers inside `loss`, so that gradients
differentiate it again; of `loss` and of `grad(loss)` in `main`; the checker
also compares `dg.jvp` with the gradients) and `checkpoint(f, slots=k)`
around a helper whose loop runs 5 to 14 times, and around `loss` in `main`.

`generate(seed)` is deterministic: the same seed gives the same source and
inputs. The features in `OFF` are known to the generator but left out unless
asked for (`features=`), because dg rejects them today.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import numpy as np

FEATURES = frozenset({
    "if", "for", "while", "break", "continue", "return", "call", "recursion", "grad", "grad2",
    "update", "rows", "cast", "weak_builtin", "ternary", "softplus", "log1p", "tuple", "descent",
    "records", "tuples", "nn", "optim", "conv", "index", "jvp", "checkpoint", "for_unpack", "methods",
})
# Features dg rejects today, left out unless asked for: none at present. (`for i, x in
# enumerate(...)` and tensor methods such as `x.sum()`, once here, are in the language now.)
OFF = frozenset()

# The newer parts, each taken up by a program with this probability (when on).
DRAWN = {"records": 0.3, "tuples": 0.25, "nn": 0.25, "optim": 0.2, "conv": 0.25, "index": 0.3, "jvp": 0.3,
         "checkpoint": 0.25}

SHAPES = {"s": (), "v": ("N",), "w": ("M",), "m": ("N", "M"), "x": ("B", "C", "N", "M"), "k": ("O", "CG", "KH", "KW")}
BROADCAST = {  # (left kind, right kind) -> kind of the result
    ("s", "s"): "s", ("v", "v"): "v", ("w", "w"): "w", ("m", "m"): "m",
    ("v", "s"): "v", ("s", "v"): "v", ("w", "s"): "w", ("s", "w"): "w",
    ("m", "s"): "m", ("s", "m"): "m", ("m", "w"): "m", ("w", "m"): "m",
    ("x", "x"): "x", ("x", "s"): "x", ("s", "x"): "x", ("x", "m"): "x", ("m", "x"): "x", ("x", "w"): "x",
    ("w", "x"): "x", ("k", "k"): "k", ("k", "s"): "k", ("s", "k"): "k",
}
UNARY = ["tanh", "sin", "cos", "sigmoid", "erf", "gelu", "relu", "abs"]
REDUCE = ["sum", "mean", "max", "min", "logsumexp", "var"]
LINES = 30  # about how long a program gets
KEYS = ["a", "b", "w", "bias", "h", "scale"]  # a record's field names


@dataclass
class Program:
    """A generated program: its source, its entry and the inputs to call it with, and
    the scalar functions whose gradients the checker takes: (name, wrt)."""
    seed: int
    src: str
    dtype: str
    entry: str
    args: tuple
    grads: list = field(default_factory=list)
    jvps: list = field(default_factory=list)  # functions whose dg.jvp the checker compares with their gradients
    tangents: tuple = ()  # the tangents of `args` for those

    @property
    def filename(self) -> str:
        return f"fuzz_{self.seed}.dg"


@dataclass(frozen=True)
class Rec:
    """The kind of a record: its fields (key, kind) in the order of their sorted keys."""
    fields: tuple


@dataclass(frozen=True)
class Tup:
    """The kind of a tuple: its items' kinds."""
    items: tuple


def is_struct(kind):
    return isinstance(kind, (Rec, Tup))


def paths(kind, fixed=False):
    """(accessor, leaf kind, read-only) of each leaf of `kind`: `["a"]`, `[0]["w"]`, ... ("" for a
    tensor). A tuple's items are read-only: a tuple cannot be updated by index."""
    if isinstance(kind, Rec):
        for key, k in kind.fields:
            for suffix, leaf, ro in paths(k, fixed):
                yield f'["{key}"]' + suffix, leaf, ro
    elif isinstance(kind, Tup):
        for i, k in enumerate(kind.items):
            for suffix, leaf, ro in paths(k, True):
                yield f"[{i}]" + suffix, leaf, ro
    else:
        yield "", kind, fixed


def rets(ret):
    """The values a function of result kind `ret` returns: one structure, or one or two tensors."""
    return [ret] if is_struct(ret) else list(ret)


def display(kind, leaf, shuffle=None):
    """A record or tuple display of `kind` whose leaves are `leaf(accessor, leaf kind)` (keys in
    the order `shuffle` leaves them: the order of a display does not matter)."""
    def build(k, acc):
        if isinstance(k, Rec):
            fields = list(k.fields)
            if shuffle:
                shuffle(fields)
            return "{" + ", ".join(f'"{key}": ' + build(v, acc + f'["{key}"]') for key, v in fields) + "}"
        if isinstance(k, Tup):
            items = [build(v, acc + f"[{i}]") for i, v in enumerate(k.items)]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return leaf(acc, k)
    return build(kind, "")


@dataclass
class Fn:
    name: str
    params: list  # (name, kind); kind "i" is an i64, "j" an i64[N] of indices below M
    ret: object  # a kind, two for a pair, or a structure (Rec, Tup)


class Scope:
    """The names a point of a function can read: floats by kind, ints with the axis
    ("N", "M" or None) they index safely (ints are never assigned)."""

    def __init__(self, params=()):
        self.floats, self.ints = {}, {}
        self.fixed = set()  # floats a `while` counts on, and tuple items: not to be assigned
        self.structs = {}  # records and tuples by name (their leaves are in floats, as `p["a"]`)
        self.idx = {}  # i64[N] index arrays of values below M
        for n, k in params:
            self.bind(n, k)

    def bind(self, name, kind):
        if kind == "i":
            self.ints[name] = None
        elif kind == "j":
            self.idx[name] = kind
        elif is_struct(kind):
            self.structs[name] = kind
            for suffix, k, ro in paths(kind):
                self.floats[name + suffix] = k
                if ro:
                    self.fixed.add(name + suffix)
        else:
            self.floats[name] = kind

    def copy(self):
        s = Scope()
        s.floats, s.ints, s.fixed = dict(self.floats), dict(self.ints), set(self.fixed)
        s.structs, s.idx = dict(self.structs), dict(self.idx)
        return s

    def writable(self):
        return [n for n in self.floats if n not in self.fixed]

    def of(self, kind):
        return [n for n, k in self.floats.items() if k == kind]

    def has(self, kind):
        """Whether an expression of `kind` can be made of names in scope."""
        if is_struct(kind):
            return all(self.has(k) for _, k, _ in paths(kind))
        if kind in ("i", "j"):
            return True
        kinds = set(self.floats.values())
        return {"s": True, "v": bool(kinds & {"v", "m"}), "w": bool(kinds & {"w", "m"}),
                "m": "m" in kinds or {"v", "w"} <= kinds, "x": "x" in kinds, "k": "k" in kinds}[kind]


class Generator:
    def __init__(self, seed: int, features=FEATURES, lines=LINES):
        self.r = random.Random(seed)
        self.max_lines = lines
        self.seed = seed
        self.on = set(features)
        self.dt = self.r.choice(["f32", "f64"])
        self.sizes = {"N": self.r.randint(1, 4), "M": self.r.randint(1, 4)}
        self.fns: list[Fn] = []
        self.ends: dict[str, int] = {}  # the line after each function
        self.lines: list[str] = []
        self.after: list[str] = []  # functions that go after main
        self.counter = 0
        draws = {f: self.r.random() for f in sorted(DRAWN)}
        self.use = {f for f in sorted(DRAWN) if f in self.on and draws[f] < DRAWN[f]}
        self.ckpt: set[str] = set()  # helpers called through checkpoint(...)
        self.alias, self.used = {}, {}  # module -> how it is imported ("" for `from m import ...`), names used
        for mod in ("nn", "optim"):
            if mod in self.use:
                self.alias[mod] = self.r.choice([mod, mod, mod[0].upper(), ""])
                self.used[mod] = []
        if "conv" in self.use:
            g = self.r.choice([1, 1, 2])
            c = g if g > 1 else self.r.randint(1, 2)
            o = g * self.r.randint(1, 2) if g > 1 else self.r.randint(1, 2)
            self.sizes.update(B=self.r.randint(1, 2), C=c, O=o, G=g, CG=c // g,
                              KH=self.r.randint(1, 3), KW=self.r.randint(1, 3))

    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def lit(self, lo=-1.0, hi=1.0):
        return repr(round(self.r.uniform(lo, hi), 2))

    @property
    def room(self):
        return self.max_lines - len(self.lines)

    def lib(self, mod, name):
        """`name` of the standard library's module `mod`, as the program imported it."""
        if name not in self.used[mod]:
            self.used[mod].append(name)
        return f"{self.alias[mod]}.{name}" if self.alias[mod] else name

    def imports(self):
        out = []
        for mod, a in self.alias.items():
            if a == mod or (not a and not self.used[mod]):
                out.append(f"import {mod}")
            elif a:
                out.append(f"import {mod} as {a}")
            else:
                out.append(f"from {mod} import {', '.join(self.used[mod])}")
        return out + [""] if out else []

    # ------------------------------------------------------------------ expressions
    def leaf(self, kind, scope, plain=False):
        """A name of `kind`, or a short expression of one (`plain`: none of the newer parts')."""
        r = self.r
        names = scope.of(kind)
        if names and r.random() < 0.75:
            return r.choice(names)
        if not plain and self.use:
            new = self.new_leaves(kind, scope)
            if new and r.random() < 0.4:
                return r.choice(new)()
        ms, vs, ws = scope.of("m"), scope.of("v"), scope.of("w")
        if kind == "s":
            opts = [self.lit]
            opts += [lambda n=n: f"{r.choice(['sum', 'mean'])}({n})" for n in ms + vs + ws + scope.of("x") + scope.of("k")]
            opts += [lambda n=n: f"{n}[{r.choice(['0', '-1'])}]" for n in vs + ws]
            opts += [lambda n=n, i=i: f"{n}[{i}]" for n in vs for i, ax in scope.ints.items() if ax == "N"]
            opts += [lambda i=i: f"0.25 * {self.dt}({i})" for i in scope.ints]
            if "weak_builtin" in self.on and r.random() < 0.1:
                opts.append(lambda: f"{r.choice(['sin', 'tanh', 'exp'])}({self.lit(0.1, 0.9)})")
        elif kind == "v":
            opts = [lambda m=m: f"{r.choice(['sum', 'mean', 'max'])}({m}, axis=1)" for m in ms]
            opts += [lambda m=m: f"{m}[:, {r.choice(['0', '-1'])}]" for m in ms]
            opts += [lambda m=m, w=w: f"({m} @ {w})" for m in ms for w in ws]
        elif kind == "w":
            opts = [lambda m=m: f"{r.choice(['sum', 'mean', 'min'])}({m}, axis=0)" for m in ms]
            opts += [lambda m=m: f"{m}[{r.choice(['0', '-1'])}]" for m in ms]
            opts += [lambda m=m, v=v: f"({v} @ {m})" for m in ms for v in vs]
            opts += [lambda m=m, v=v: f"({m}.T @ {v})" for m in ms for v in vs]
            opts += [lambda m=m, i=i: f"{m}[{i}]" for m in ms for i, ax in scope.ints.items() if ax == "N"]
        elif kind == "m":
            opts = [lambda v=v, w=w: f"outer({v}, {w})" for v in vs for w in ws]
            opts += [lambda v=v, w=w: f"({v}[:, None] * {w})" for v in vs for w in ws]
        else:
            opts = []
        if "methods" in self.on and kind == "s":
            opts += [lambda n=n: f"{n}.{r.choice(['sum', 'mean', 'max'])}()" for n in ms + vs + ws]
        return r.choice(opts)() if opts else r.choice(names)

    def ixs(self, count, hi):
        """A literal index array: `count` indices (an int, or a size's name) below size `hi`."""
        n = self.sizes[count] if isinstance(count, str) else count
        return "[" + ", ".join(str(self.r.randrange(self.sizes[hi])) for _ in range(n)) + "]"

    def new_leaves(self, kind, scope):
        """Short expressions of `kind` made with the newer parts this program takes up."""
        r, S, out = self.r, self.sizes, []
        a = lambda k: self.leaf(k, scope, plain=True)  # noqa: E731
        ms, vs, ws, xs = scope.of("m"), scope.of("v"), scope.of("w"), scope.of("x")
        has = scope.has
        if "index" in self.use:
            if kind == "s":
                out += [lambda v=v: f"sum({v}[{self.ixs(r.randint(1, 3), 'N')}])" for v in vs]
            elif kind == "v":
                out += [lambda w=w: f"{w}[{self.ixs('N', 'M')}]" for w in ws]
                out += [lambda w=w: f"take({w}, {self.ixs('N', 'M')})" for w in ws]
                out += [lambda v=v: f"{v}[{self.ixs('N', 'N')}]" for v in vs]
                out += [lambda m=m: f"{m}[{self.ixs('N', 'N')}, {self.ixs('N', 'M')}]" for m in ms]
                out += [lambda m=m: f"{a('w')}[argmax({m}, axis=1)]" for m in ms]
                out += [lambda m=m: f"{m}[arange({m}.shape[0]), argmin({m}, axis=1)]" for m in ms]
                out += [lambda j=j: f"{a('w')}[{j}]" for j in scope.idx if has("w")]
                out += [lambda j=j: f"take({a('w')}, {j}, axis=0)" for j in scope.idx if has("w")]
                out += [lambda j=j, m=m: f"{m}[arange({m}.shape[0]), {j}]" for j in scope.idx for m in ms]
            elif kind == "w":
                out += [lambda v=v: f"{v}[{self.ixs('M', 'N')}]" for v in vs]
                out += [lambda v=v: f"take({v}, {self.ixs('M', 'N')}, axis=0)" for v in vs]
                out += [lambda m=m: f"{m}[{self.ixs('M', 'N')}, {self.ixs('M', 'M')}]" for m in ms]
                out += [lambda m=m: f"{a('v')}[argmax({m}, axis=0)]" for m in ms]
            elif kind == "m":
                out += [lambda m=m: f"{m}[{self.ixs('N', 'N')}]" for m in ms]
                out += [lambda m=m: f"{m}[:, {self.ixs('M', 'M')}]" for m in ms]
                out += [lambda m=m: f"take({m}, {self.ixs('M', 'M')}, axis=1)" for m in ms]
                ix2 = lambda hi: "[" + ", ".join(self.ixs("M", hi) for _ in range(S["N"])) + "]"  # noqa: E731
                out += [lambda w=w: f"{w}[{ix2('M')}]" for w in ws]
                out += [lambda v=v: f"{v}[{ix2('N')}]" for v in vs]
                if "nn" in self.use:
                    out += [lambda m=m: f"{self.lib('nn', 'embedding')}({m}, {self.ixs('N', 'N')})" for m in ms]
        if "nn" in self.use:
            nn = lambda f: self.lib("nn", f)  # noqa: E731
            eps = lambda: r.choice(["", "", ", eps=0.1", ", eps=0.01"])  # noqa: E731
            ln = lambda: nn("layer_norm") if self.alias["nn"] else "layer_norm"  # noqa: E731
            cat = lambda e, n: f"concat([{', '.join([e] * n)}])"  # noqa: E731
            if kind == "w" and has("v") and has("m"):
                out += [lambda: f"{nn(r.choice(['dense', 'dense_relu']))}({a('v')}, {a('m')}, {a('w')})"]
            elif kind == "v" and has("w") and has("m"):
                out += [lambda: f"{nn(r.choice(['dense', 'dense_relu']))}({a('w')}, {a('m')}.T, {a('v')})",
                        lambda: f"{nn('mlp')}({a('v')}, {a('m')}, {a('w')}, {a('m')}.T, {a('v')})",
                        lambda: f"{nn('rnn_cell')}({a('w')}, {a('v')}, {a('m')}, outer({a('v')}, {a('v')}), {a('v')}, {a('v')})"]
                out += [lambda: (lambda m, o, b: f"{nn('lstm_cell')}({a('w')}, {a('v')}, {a('v')}, {cat(m, 4)}, {cat(o, 4)}, "
                                 f"{cat(b, 4)}, {cat(b, 4)})[{r.randint(0, 1)}]")(a("m"), f"outer({a('v')}, {a('v')})", a("v")),
                        lambda: (lambda m, o, b: f"{nn('gru_cell')}({a('w')}, {a('v')}, {cat(m, 3)}, {cat(o, 3)}, "
                                 f"{cat(b, 3)}, {cat(b, 3)})")(a("m"), f"outer({a('v')}, {a('v')})", a("v"))]
            if kind == "v":
                out += [lambda: f"{ln()}({a('v')}, {a('v')}, {a('v')}{eps()})"]
            elif kind == "m" and has("w"):
                out += [lambda: f"{ln()}({a('m')}, {a('w')}, {a('w')}{eps()})",
                        lambda: f"{nn('dense')}({a('m')}, outer({a('w')}, {a('w')}), {a('w')})"]
            elif kind == "s" and "conv" in self.use and S["G"] == 1 and has("x") and has("k"):
                out += [lambda: self.conv_block(a("x"), a("k"))]
        if "conv" in self.use:
            if kind == "s" and has("x"):
                out += [lambda: f"{r.choice(['mean', 'sum'])}({r.choice(['max_pool2d', 'avg_pool2d'])}({a('x')}{self.pool_args()}))"]
                if has("k"):
                    out += [lambda: (lambda k: f"{r.choice(['mean', 'sum'])}(conv2d({a('x')}, {k}{self.conv_args(k)}))")(a("k"))] * 2
            elif kind == "v" and has("x"):
                out += [lambda: f"mean({a('x')}, axis=(0, 1, 3))"]
            elif kind == "w" and has("x"):
                out += [lambda: f"sum({a('x')}, axis=(0, 1, 2))"]
            elif kind == "m":
                if has("m"):
                    out += [lambda: f"{r.choice(['max_pool2d', 'avg_pool2d'])}({a('m')}[None, None], 3, stride=1, padding=1)[0, 0]"]
                if has("m") and has("k") and S["KH"] % 2 and S["KW"] % 2:
                    out += [lambda: (lambda d: f"conv2d({a('m')}[None, None], sum({a('k')}, axis=1, keepdims=True), "
                                     f"padding=({d * (S['KH'] // 2)}, {d * (S['KW'] // 2)}){'' if d == 1 else ', dilation=2'})"
                                     f"[0, {r.randrange(S['O'])}]")(r.choice([1, 1, 2]))]
                out += [lambda x=x: f"mean({x}, axis=(0, 1))" for x in xs]
                out += [lambda x=x: f"{x}[{r.randrange(S['B'])}, {r.randrange(S['C'])}]" for x in xs]
            elif kind == "x":
                if has("m"):
                    out += [lambda: f"broadcast_to({a('m')}[None, None], [{S['B']}, {S['C']}, {S['N']}, {S['M']}])"]
                out += [lambda: f"{r.choice(['max_pool2d', 'avg_pool2d'])}({a('x')}, 3, stride=1, padding=1)"]
                if S["O"] == S["C"] and S["KH"] % 2 and S["KW"] % 2 and has("k"):
                    g = f", groups={S['G']}" if S["G"] > 1 else ""
                    out += [lambda: f"conv2d({a('x')}, {a('k')}, padding=({S['KH'] // 2}, {S['KW'] // 2}){g})"]
        return out

    def conv_args(self, k):
        """The arguments after kernel `k` of a conv2d of an image [.., N, M] that gives at least one row."""
        r, S = self.r, self.sizes
        cands = [(st, ph, pw, d) for st in (1, 2) for ph in (0, 1, 2) for pw in (0, 1, 2) for d in (1, 2)
                 if S["N"] + 2 * ph - d * (S["KH"] - 1) - 1 >= 0 and S["M"] + 2 * pw - d * (S["KW"] - 1) - 1 >= 0]
        st, ph, pw, d = r.choice(cands)
        bias = r.choice([f"sum({k}, axis=(1, 2, 3))", f"{k}[:, 0, 0, 0]"])
        parts = []
        c = r.random()
        if c < 0.3:
            parts.append(bias)
        elif c < 0.45:
            parts.append("b=" + bias)
        if st != 1 or r.random() < 0.2:
            parts.append(f"stride={st if r.random() < 0.7 else (st, st)}")
        if ph or pw:
            parts.append(f"padding={ph}" if ph == pw and r.random() < 0.7 else f"padding=({ph}, {pw})")
        if d != 1:
            parts.append(f"dilation={d}")
        if S["G"] > 1:
            parts.append(f"groups={S['G']}")
        return "".join(", " + part for part in parts)

    def pool_args(self):
        """The arguments after the image of a pooling of [.., N, M] that gives at least one row."""
        r, S = self.r, self.sizes
        cands = [(k, st, p) for k in (1, 2, 3) for st in (None, 1, 2) for p in range(k // 2 + 1)
                 if S["N"] + 2 * p - k >= 0 and S["M"] + 2 * p - k >= 0]
        k, st, p = r.choice(cands)
        out = f", {k}"
        if st is not None:
            out += f", {st}" if r.random() < 0.3 else f", stride={st}"
        if p:
            out += f", padding={p}"
        return out

    def conv_block(self, x, k):
        """nn.conv_block (or nn.conv2d_padded) of image `x`, kernel `k`, with run-time stride and padding
        that give at least two rows (one, for conv2d_padded)."""
        r, S = self.r, self.sizes
        block = r.random() < 0.5
        least = 2 if block else 1
        cands = [(st, p) for st in (1, 2) for p in (0, 1)
                 if min((S["N"] + 2 * p - S["KH"]) // st + 1, (S["M"] + 2 * p - S["KW"]) // st + 1) >= least
                 and S["N"] + 2 * p - S["KH"] >= 0 and S["M"] + 2 * p - S["KW"] >= 0]
        if not cands:
            return f"mean(conv2d({x}, {k}))" if S["N"] >= S["KH"] and S["M"] >= S["KW"] else f"mean({x})"
        st, p = r.choice(cands)
        f = self.lib("nn", "conv_block" if block else "conv2d_padded")
        return f"mean({f}({x}, {k}, {k}[:, 0, 0, 0], {st}, {p}))"

    def expr(self, kind, scope, depth=2):
        """An expression of `kind` that reads names of `scope`."""
        r = self.r
        if depth <= 0 or r.random() < 0.25:
            return self.leaf(kind, scope)
        d = depth - 1
        choices = ["bin", "bin", "unary", "unary", "special", "leaf"]
        choices += {"s": ["reduce", "reduce", "dot"], "v": ["softmax"], "m": ["mplus"], "w": [], "x": [], "k": []}[kind]
        if "call" in self.on and self.callable(kind, scope):
            choices += ["call"] * 3
        choices += [c for c in ("cast", "ternary") if c in self.on]
        c = r.choice(choices)
        e = lambda k=kind, dd=d: self.expr(k, scope, dd)  # noqa: E731
        if c == "bin":
            a, b = r.choice([p for p, k in BROADCAST.items() if k == kind and scope.has(p[0]) and scope.has(p[1])])
            op = r.choice(["+", "-", "*", "*", "/"])
            if op == "/":
                return f"({e(a)} / (1.0 + {square(e(b))}))"
            return f"({e(a)} {op} {e(b)})"
        if c == "unary":
            return f"{r.choice(UNARY + (['softplus'] if 'softplus' in self.on else []))}({self.operand(kind, scope, d)})"
        if c == "special":
            x = self.operand(kind, scope, d)
            forms = [f"exp(tanh({x}))", f"sqrt(1.0 + {square(x)})", f"log(1.0 + {square(x)})", f"({x}) ** 2",
                     f"clip({x}, -0.5, 0.5)", f"maximum({x}, {e()})", f"minimum({x}, {e()})",
                     f"where({x} > {e(kind, 0)}, {x}, {e()})"]
            if "log1p" in self.on:
                forms.append(f"log1p({square(x)})")
            return r.choice(forms)
        if c == "reduce":
            k = r.choice([k for k in "vwmxk" if scope.has(k)] or ["s"])
            if k == "s":
                return self.leaf("s", scope)
            if k == "v" and r.random() < 0.2:
                return f"mse({e('v')}, {e('v', 0)})"
            return f"{r.choice(REDUCE)}({e(k)})"
        if c == "dot":
            k = r.choice([k for k in "vw" if scope.has(k)] or ["s"])
            return f"dot({e(k)}, {e(k, 0)})" if k != "s" else self.leaf("s", scope)
        if c == "mplus" and scope.has("v"):
            return f"({e()} + ({e('v')})[:, None])"
        if c == "softmax":
            return f"{r.choice(['softmax', 'log_softmax'])}({e()})"
        if c == "call":
            return self.call(self.r.choice(self.callable(kind, scope)), scope)
        if c == "cast":  # through f64: exact for f32 values, and f64 programs stay f64 for the fd check
            return f"{self.dt}(f64({e()}) * 0.5)"
        if c == "ternary":
            return f"({e()} if {self.cond(scope)} else {e()})"
        return self.leaf(kind, scope)

    def operand(self, kind, scope, depth):
        """The argument of a built-in: without "weak_builtin", one that reads a name, so that
        no built-in gets only literals (`sin(0.5)`)."""
        x = self.expr(kind, scope, depth)
        names = {re.match(r"\w+", n).group() for n in list(scope.floats) + list(scope.ints)}
        if "weak_builtin" in self.on or any(re.search(rf"\b{n}\b", x) for n in names):
            return x
        names = scope.of(kind) or [f"mean({n})" for n in scope.floats]
        return self.r.choice(names) if names else x

    def cond(self, scope, ints=True, top=True):
        """A scalar bool, in parentheses where it is compound."""
        r = self.r
        c = r.random()
        if ints and scope.ints and c < 0.25:
            i = r.choice(list(scope.ints))
            return r.choice([f"{i} % 2 == 0", f"{i} >= {r.randint(1, 3)}", f"{i} == {r.randint(0, 2)}"])
        if top and c < 0.35:
            return f"({self.cond(scope, ints, False)} {r.choice(['and', 'or'])} {self.cond(scope, ints, False)})"
        if top and c < 0.4:
            return f"(not {self.cond(scope, ints, False)})"
        return f"{self.expr('s', scope, 1)} {r.choice(['>', '<'])} {self.lit(-0.5, 0.5)}"

    def callable(self, ret, scope):
        return [f for f in self.fns if f.ret == ret and self.can_call(f, scope)]

    @staticmethod
    def can_call(f, scope):
        return all(k == "i" or scope.has(k) for _, k in f.params)

    def call(self, f, scope):
        name = f.name
        if "checkpoint" in self.use and (f.name in self.ckpt and self.r.random() < 0.85 or self.r.random() < 0.08):
            name = f"checkpoint({f.name}{self.r.choice(['', ', slots=2', ', slots=3', ', slots=4', ', slots=8'])})"
        return f"{name}({', '.join(self.args(f, scope))})"

    def args(self, f, scope):
        """The arguments of a call of `f`."""
        out = []
        for _, k in f.params:
            if k == "i":
                ns = [i for i in scope.ints if i == "n"]
                out.append("n" if ns and self.r.random() < 0.5 else str(self.r.randint(0, 3)))
            elif k == "j":
                out.append(self.r.choice(list(scope.idx)) if scope.idx and self.r.random() < 0.7 else self.ixs("N", "M"))
            else:
                out.append(self.sexpr(k, scope, 1))
        return out

    def sexpr(self, kind, scope, depth=1):
        """An expression of `kind`, a structure's kind too, as a value of the program's element type."""
        if not is_struct(kind):
            return self.strong(kind, self.expr(kind, scope, depth))
        names = [n for n, k in scope.structs.items() if k == kind]
        if names and self.r.random() < 0.5:
            return self.r.choice(names)
        return display(kind, lambda acc, k: self.strong(k, self.expr(k, scope, depth)), self.r.shuffle)

    def strong(self, kind, e):
        """`e` as a value of the program's element type where it starts a name or an argument.
        A scalar of literals only is weak, and by dg's rules a weak value a loop carries, or a
        call's argument, is an f32 (the default for float literals): f64 code writes f64(...)."""
        return f"f64({e})" if kind == "s" and self.dt == "f64" else e

    # ------------------------------------------------------------------ statements
    def squash(self, target, e):
        return self.r.choice([f"tanh({e})", f"sin({e})", f"0.5 * {target} + 0.5 * tanh({e})",
                              f"{target} * 0.5 + sigmoid({e}) * 0.25"])

    def block(self, scope, ind, fn, budget, loop=None, nest=0):
        """At least one statement at indentation `ind`, binding new names in `scope`
        (a nested block gets a copy); `loop` is None outside loops."""
        out = []
        for j in range(budget):
            if j and self.room - len(out) < 0:
                break
            out += self.stmt(scope, ind, fn, loop, nest)
        return out

    def stmt(self, scope, ind, fn, loop, nest, force=None):
        """A statement (`force`: of that choice; "long_for", "long_while": a loop of 5 to 14 trips
        whose body updates a value it carries)."""
        r = self.r
        p = " " * ind
        options = ["assign", "assign", "reassign", "reassign"]
        if nest < 2 and self.room > 8:
            options += [f for f in ("if", "for", "while") if f in self.on]
            options += ["rows"] if "rows" in self.on and scope.of("m") else []
            options += ["tuple_for"] if "tuples" in self.use and "for" in self.on else []
        if loop is not None:
            options += [f for f in ("break", "continue") if f in self.on]
        if "return" in self.on and (loop is not None or r.random() < 0.3):
            options.append("return")
        if "update" in self.on and any(scope.ints.values()):
            options.append("update")
        pairs = [f for f in self.fns if isinstance(f.ret, str) and len(f.ret) == 2 and self.can_call(f, scope)]
        if pairs:
            options.append("unpack")
            options += ["bind_pair"] if "tuples" in self.use else []
        structs = [f for f in self.fns if is_struct(f.ret) and self.can_call(f, scope)]
        options += ["bind_struct"] * 2 if structs else []
        options += ["restruct"] * 2 if scope.structs else []
        if "index" in self.use:
            options.append("index_update")
        jvps = [f for f in self.fns if self.can_call(f, scope)] if "jvp" in self.use else []
        options += ["jvp"] if jvps else []
        c = force or r.choice(options)
        long = c in ("long_for", "long_while")
        c = c[5:] if long else c
        if c == "unpack":
            return [p + self.unpack(r.choice(pairs), scope)]
        if c in ("bind_pair", "bind_struct"):
            f = r.choice(pairs if c == "bind_pair" else structs)
            name, call = self.fresh("r"), self.call(f, scope)
            scope.bind(name, Tup(tuple(f.ret)) if c == "bind_pair" else f.ret)
            return [f"{p}{name} = {call}"]
        if c == "restruct":
            name = r.choice(list(scope.structs))

            def leaf(acc, k):
                if r.random() < 0.3:
                    return name + acc
                e = self.expr(k, scope, 1)
                return self.strong(k, self.squash(name + acc, e) if loop else e)
            return [f"{p}{name} = {display(scope.structs[name], leaf, r.shuffle)}"]
        if c == "jvp":
            return [p + self.jvp(r.choice(jvps), scope)]
        if c == "update":
            out = self.update(scope, p, loop)
            if out:
                return out
            c = "assign"
        if c == "index_update":
            out = self.index_update(scope, p, loop)
            if out:
                return out
            c = "assign"
        if c == "reassign" and scope.writable():
            name = r.choice(scope.writable())
            e = self.expr(scope.floats[name], scope)
            field = "[" in name  # a structure's leaf: of the element type, so that the structure's type stays
            if loop:
                return [f"{p}{name} = {self.squash(name, e) if not field else self.strong(scope.floats[name], self.squash(name, e))}"]
            if r.random() < 0.3:
                return [f"{p}{name} {r.choice(['+=', '-=', '*='])} {e}"]
            return [f"{p}{name} = {e if not field else self.strong(scope.floats[name], e)}"]
        if c in ("assign", "reassign"):
            k = r.choice([k for k in "svwm" if scope.has(k)])
            name, e = self.fresh("t"), self.expr(k, scope)
            scope.floats[name] = k
            return [f"{p}{name} = {self.strong(k, e)}"]
        sub = lambda s, n, lp=loop: self.block(s, ind + 4, fn, n, lp, nest + 1)  # noqa: E731
        if c == "if":
            out = [f"{p}if {self.cond(scope)}:"] + sub(scope.copy(), r.randint(1, 2))
            if r.random() < 0.3:
                out += [f"{p}elif {self.cond(scope)}:"] + sub(scope.copy(), 1)
            if r.random() < 0.6:
                out += [f"{p}else:"] + sub(scope.copy(), r.randint(1, 2))
            return out
        if c == "for":
            i, inner = self.fresh("i"), scope.copy()
            forms = [(f"range({r.randint(0, 4)})", None), (f"range(1, {r.randint(1, 4)})", None),
                     (f"range(0, {r.randint(1, 5)}, 2)", None)]
            forms += [(f"range({x}.shape[0])", "N") for x in scope.of("v") + scope.of("m")]
            forms += [("range(n)", None)] if "n" in scope.ints else []
            if long:
                forms = [(f"range({r.randint(5, 12)})", None), (f"range(2, {r.randint(7, 14)})", None)]
            head, inner.ints[i] = r.choice(forms)
            body = sub(inner, r.randint(1, 3), "for")
            if long:
                body += self.stmt(inner, ind + 4, fn, "for", nest + 1, force="reassign")
            return [f"{p}for {i} in {head}:"] + body
        if c == "tuple_for":
            it, inner = self.fresh("it"), scope.copy()
            k = r.choice([k for k in "svwm" if scope.has(k)])
            inner.floats[it] = k
            items = ", ".join(self.strong(k, self.expr(k, scope, 1)) for _ in range(r.randint(2, 3)))
            return [f"{p}for {it} in ({items}):"] + sub(inner, r.randint(1, 2), "for")
        if c == "rows":
            m, row, inner = r.choice(scope.of("m")), self.fresh("row"), scope.copy()
            inner.floats[row] = "w"
            if "for_unpack" in self.on and r.random() < 0.5:
                i = self.fresh("i")
                inner.ints[i] = "N"
                return [f"{p}for {i}, {row} in enumerate({m}):"] + sub(inner, r.randint(1, 2), "for")
            return [f"{p}for {row} in {m}:"] + sub(inner, r.randint(1, 2), "for")
        if c == "while":
            if long or r.random() < 0.5 or not scope.floats:  # a counter with a bound
                k = self.fresh("k")
                scope.ints[k] = None
                head = f"{k} < {r.randint(5, 12) if long else r.randint(1, 4)}"
                if r.random() < 0.6:
                    head += f" and ({self.cond(scope, ints=False)})"
                inner = scope.copy()
                body = sub(inner, r.randint(1, 2), "while")
                if long:
                    body += self.stmt(inner, ind + 4, fn, "while", nest + 1, force="reassign")
                return [f"{p}{k} = 0", f"{p}while {head}:", f"{p}    {k} += 1"] + body
            g = self.fresh("g")  # from at most 1, up by at least 0.3 a trip
            init = f"{p}{g} = {self.strong('s', 'tanh(' + self.expr('s', scope, 1) + ')')}"
            scope.floats[g] = "s"
            step = f"{p}    {g} = {g} + 0.3 + 0.2 * sigmoid({self.expr('s', scope, 1)})"
            inner = scope.copy()
            inner.fixed.add(g)
            return [init, f"{p}while {g} < {self.lit(0.5, 1.5)}:", step] + sub(inner, r.randint(0, 2), "while")
        if c in ("break", "continue"):
            return [f"{p}if {self.cond(scope)}:", f"{p}    {c}"]
        if c == "return":
            values = ", ".join(self.expr(k, scope) if not is_struct(k) else self.sexpr(k, scope) for k in rets(fn.ret))
            return [f"{p}if {self.cond(scope)}:", f"{p}    return {values}"]
        raise AssertionError(c)

    def jvp(self, f, scope):
        """`y, t = jvp(f, (...), (...))` (a pair: `(y1, y2), (t1, t2) = ...`), binding y and t."""
        prims = self.args(f, scope)
        tans = ["0" if k == "i" else a if k == "j" else self.sexpr(k, scope, 0) for (_, k), a in zip(f.params, prims)]
        tup = lambda xs: "(" + ", ".join(xs) + ("," if len(xs) == 1 else "") + ")"  # noqa: E731
        name = f.name
        if f.name in self.ckpt and self.r.random() < 0.5:
            name = f"checkpoint({f.name}, slots={self.r.choice([2, 3])})"
        call = f"jvp({name}, {tup(prims)}, {tup(tans)})"
        if isinstance(f.ret, str) and len(f.ret) == 2:
            ys, ts = [self.fresh("y") for _ in f.ret], [self.fresh("dy") for _ in f.ret]
            for n, k in zip(ys + ts, list(f.ret) * 2):
                scope.bind(n, k)
            return f"({', '.join(ys)}), ({', '.join(ts)}) = {call}"
        y, t = self.fresh("y"), self.fresh("dy")
        scope.bind(y, f.ret)
        scope.bind(t, f.ret)
        return f"{y}, {t} = {call}"

    def index_update(self, scope, p, loop):
        """`x[[i, j]] = e` (or `+=`, outside loops) through literal index arrays."""
        r = self.r
        targets = [(n, k) for n, k in scope.floats.items() if k in ("v", "w", "m") and n not in scope.fixed]
        if not targets:
            return []
        t, k = r.choice(targets)
        n = r.randint(1, 3)
        if k != "m":
            lhs, ek = f"{t}[{self.ixs(n, 'N' if k == 'v' else 'M')}]", "s"
        else:
            lhs, ek = r.choice([(f"{t}[{self.ixs(n, 'N')}]", "w"), (f"{t}[{self.ixs(n, 'N')}, {self.ixs(n, 'M')}]", "s"),
                                (f"{t}[:, {self.ixs(n, 'M')}]", "v")])
        e = self.expr(ek, scope, 1)
        if ek == "v":
            e = f"({e})[:, None]"
        if loop:
            e = self.squash(lhs, e)
        return [f"{p}{lhs} {'=' if loop or r.random() < 0.6 else r.choice(['+=', '-='])} {e}"]

    def unpack(self, f, scope):
        """`a, b = f(...)` for a function `f` that returns a pair."""
        names = [self.fresh("t") for _ in f.ret]
        line = f"{', '.join(names)} = {self.call(f, scope)}"
        for n, k in zip(names, f.ret):
            scope.bind(n, k)
        return line

    def update(self, scope, p, loop):
        """`x[i] = e` for an index `i` known to be in range."""
        r = self.r
        i, ax = r.choice([(i, ax) for i, ax in scope.ints.items() if ax])
        targets = [n for n, k in scope.floats.items() if (k == ("v" if ax == "N" else "w") or (k == "m" and ax == "N"))
                   and n not in scope.fixed]
        if not targets:
            return []
        t = r.choice(targets)
        e = self.expr("w" if scope.floats[t] == "m" else "s", scope, 1)
        return [f"{p}{t}[{i}] = {self.squash(f'{t}[{i}]', e) if loop else e}"]

    # ------------------------------------------------------------------ functions
    def kinds(self, count):
        kinds = [self.r.choice("svwm" + ("xk" if "conv" in self.use else "")) for _ in range(count)]
        if self.use & {"records", "tuples"}:
            kinds = [self.struct_kind() if self.r.random() < 0.3 else k for k in kinds]
        if all(leaf == "s" for k in kinds for _, leaf, _ in paths(k)):
            kinds[0] = self.r.choice("vm")
        return kinds

    def struct_kind(self, depth=0, leaves="svwm"):
        """A record or a tuple of 1 to 3 items of kinds `leaves` (at the top, perhaps one a structure itself)."""
        r = self.r
        rec = "records" in self.use and ("tuples" not in self.use or r.random() < 0.6)
        n = r.randint(1, 3) if rec else r.randint(2, 3)
        items = [self.struct_kind(1, leaves) if depth == 0 and r.random() < 0.15 else r.choice(leaves) for _ in range(n)]
        if rec:
            return Rec(tuple(sorted(zip(r.sample(KEYS, n), items), key=lambda f: f[0])))
        if all(leaf == "s" for k in items for _, leaf, _ in paths(k)) and set(leaves) - {"s"} and r.random() < 0.8:
            items[-1] = r.choice([k for k in leaves if k != "s"])  # tuples of numbers only: a known issue, kept rare
        return Tup(tuple(items))

    def tensor_type(self, kind, style):
        """`f32[...]` of `kind` with named, static or `?` sizes (a kernel's height and width static)."""
        dims = SHAPES[kind]
        if not dims:
            return self.dt
        size = {"named": lambda d: d, "static": lambda d: str(self.sizes[d]), "any": lambda d: "?"}[style]
        return f"{self.dt}[{', '.join(str(self.sizes[d]) if d in ('KH', 'KW') else size(d) for d in dims)}]"

    def struct_type(self, kind, style=None):
        """The type of a structure kind, each tensor's sizes in `style` (or one drawn for each)."""
        return display(kind, lambda acc, k: self.tensor_type(k, style or self.r.choice(["named", "static", "any"])))

    def ann(self, kind):
        """A parameter's annotation: named, static or `?` sizes, or none."""
        if kind == "i":
            return "i64"
        if kind == "j":
            return self.r.choice(["i64[N]", "i64[?]", None])
        if is_struct(kind):
            return self.struct_type(kind) if self.r.random() < 0.65 else None
        dims = SHAPES[kind]
        if not dims:
            return self.r.choice([self.dt, self.dt, None])
        style = self.r.choice(["named", "static", "any", "none"])
        if style == "none":
            return None
        return self.tensor_type(kind, style)

    def signature(self, fn):
        parts = []
        for name, k in fn.params:
            a = self.ann(k)
            parts.append(f"{name}: {a}" if a else name)
        ret = ""
        if is_struct(fn.ret):
            if self.r.random() < 0.4:
                ret = f" -> {self.struct_type(fn.ret, 'any')}"
        elif fn.ret == "s" and self.r.random() < 0.7:
            ret = f" -> {self.dt}"
        elif fn.ret not in ("s", "tuple") and self.r.random() < 0.4:
            types = [self.tensor_type(k, "any") for k in fn.ret]
            ret = f" -> ({', '.join(types)})" if len(types) == 2 else f" -> {types[0]}"
        return f"def {fn.name}({', '.join(parts)}){ret}:"

    def result(self, kind, scope):
        """A return value that mixes in what the body computed."""
        if is_struct(kind):
            return display(kind, lambda acc, k: self.strong(k, self.result(k, scope)), self.r.shuffle)
        terms = [self.expr(kind, scope, 2)]
        for n in self.r.sample(sorted(scope.floats), min(2, len(scope.floats))):
            k = scope.floats[n]
            if k == kind or k == "s" or (kind == "m" and k == "w"):
                terms.append(n)
            elif kind == "s":
                terms.append(f"mean({n})")
            elif kind == "v" and k == "m":
                terms.append(f"sum({n}, axis=1)")
        return " + ".join(terms)

    def function(self, fn, budget, use_all=False, long=False):
        """`fn` with a random body; with `use_all`, it calls every function not called yet; `long`:
        the body starts with a loop of 5 to 14 trips."""
        head = len(self.lines)
        self.lines.append("")  # the signature, once the body is known
        scope = Scope(fn.params)
        if long:
            self.lines += self.stmt(scope, 4, fn, None, 0, force=self.r.choice(["long_for", "long_while"]))
        self.lines += self.block(scope, 4, fn, budget)
        if use_all:
            for f in self.fns:
                # not called yet (a call in an expression the generator dropped does not count)
                called = any(re.search(rf"\b{f.name}\b", line) for line in self.lines[self.ends[f.name]:])
                if not called and self.can_call(f, scope):
                    if isinstance(f.ret, str) and len(f.ret) == 2:
                        self.lines.append("    " + self.unpack(f, scope))
                        continue
                    t = self.fresh("t")
                    self.lines.append(f"    {t} = {self.call(f, scope)}")
                    scope.bind(t, f.ret)
        self.lines[head] = self.signature(fn)
        self.lines += [f"    return {', '.join(self.result(k, scope) for k in rets(fn.ret))}", ""]
        self.fns.append(fn)
        self.ends[fn.name] = len(self.lines)

    def recursive(self, kind):
        """A function of `x` and a depth `d` that calls itself with `d - 1` (or `d - 2`) down to 0."""
        fn = Fn(self.fresh("rec"), [("x", kind), ("d", "i")], kind)
        scope = Scope(fn.params)
        step = f"{fn.name}({self.r.choice(['tanh(x)', 'x * 0.5', 'sin(x)'])}, d - 1)"
        if self.r.random() < 0.3:
            step += f" + {fn.name}(x * 0.25, d - 2)"
        self.lines += [self.signature(fn), "    if d <= 0:", f"        return {self.expr(kind, scope, 1)}",
                       f"    y = {step}", f"    return tanh(y) * 0.5 + {self.expr(kind, scope, 1)} * 0.5", ""]
        self.fns.append(fn)
        self.ends[fn.name] = len(self.lines)

    def optimizer(self, names=("sgd", "momentum", "adam", "adamw")):
        """An optimizer of the optim module, and keyword arguments for its step."""
        r = self.r
        name = r.choice(names)
        kw = [f"lr={r.choice([0.1, 0.05, 0.01])}"]
        if name == "momentum":
            kw += r.sample(["momentum=0.5", "dampening=0.1", "weight_decay=0.01"], r.randint(0, 2))
            if "dampening=0.1" not in kw and r.random() < 0.4:
                kw.append("nesterov=True")
        elif name in ("adam", "adamw"):
            # an eps well above the rounding of a gradient that is zero but for rounding (f32)
            kw.append(f"eps={r.choice([1e-3, 0.1])}" if self.dt == "f32" or r.random() < 0.5 else "eps=1e-8")
            kw += r.sample(["betas=(0.8, 0.99)", "weight_decay=0.01"], r.randint(0, 1))
        elif r.random() < 0.3:
            kw.append("weight_decay=0.01")
        return name, "".join(", " + k for k in kw)

    def main(self, ps, targets):
        """The entry: gradients of `targets` (or their values), and a little more."""
        r = self.r
        names = ", ".join(n for n, _ in ps)
        floats = [j for j, (_, k) in enumerate(ps) if k not in ("i", "j")]
        scope = Scope(ps)
        body, outs = [], []
        tup = lambda xs: "(" + ", ".join(xs) + ("," if len(xs) == 1 else "") + ")"  # noqa: E731
        for target in targets:
            if "grad" not in self.on:
                v = self.fresh("v")
                body.append(f"    {v} = {target}({names})")
                scope.floats[v] = "s"
                outs.append(v)
                continue
            wrt = r.sample(floats, r.randint(1, len(floats)))
            gs = [self.fresh("g") for _ in wrt]
            if len(wrt) == 1 and r.random() < 0.5:
                spec, lhs = str(wrt[0]), gs[0]
            else:
                spec, lhs = f"({', '.join(map(str, wrt))}{',' if len(wrt) == 1 else ''})", f"({', '.join(gs)}{',' if len(gs) == 1 else ''})"
            fn = target
            if "checkpoint" in self.use and r.random() < 0.4 and target == "loss":  # (loss2's: slow to compile)
                fn = f"checkpoint({target}, slots={r.choice([2, 3, 4])})"
            if r.random() < 0.5:
                v = self.fresh("v")
                body.append(f"    {v}, {lhs} = value_and_grad({fn}, wrt={spec})({names})")
                scope.floats[v] = "s"
                outs.append(v)
            else:
                body.append(f"    {lhs.strip('()') if len(gs) > 1 else lhs} = grad({fn}, wrt={spec})({names})")
            for gname, j in zip(gs, wrt):
                scope.bind(gname, ps[j][1])
                outs.append(gname)
        if "descent" in self.on and "grad" in self.on and r.random() < (0.8 if "optim" in self.use else 0.25):
            j = r.choice(floats)
            q, i = self.fresh("q"), self.fresh("i")
            args = ", ".join(q if n == ps[j][0] else n for n, _ in ps)
            g = f"grad({targets[0]}, wrt={j})({args})"
            body += [f"    {q} = {ps[j][0]}"]
            loop = f"    for {i} in range({r.randint(1, 3)}):"
            if "optim" in self.use:
                opt, kw = self.optimizer()
                st = self.fresh("st")
                body += [f"    {st} = {self.lib('optim', opt + '_init')}({q})", loop,
                         f"        {q}, {st} = {self.lib('optim', opt)}({q}, {g}, {st}{kw})"]
                if r.random() < 0.5:
                    outs.append(st)
            elif is_struct(ps[j][1]):
                step = self.fresh("step")
                self.after += [f"def {step}(p, g):", f"    return p - {self.r.choice(['0.1', '0.05'])} * g", ""]
                body += [loop, f"        {q} = tree_map({step}, {q}, {g})"]
            else:
                body += [loop, f"        {q} = {q} - 0.1 * {g}"]
            scope.bind(q, ps[j][1])
            outs.append(q)
        if "jvp" in self.use:
            tans = ["0" if k == "i" else n if k == "j" else self.sexpr(k, scope, 0) for n, k in ps]
            y, t = self.fresh("y"), self.fresh("dy")
            body.append(f"    {y}, {t} = jvp({targets[0]}, {tup([n for n, _ in ps])}, {tup(tans)})")
            scope.floats[y], scope.floats[t] = "s", "s"
            outs += [y, t]
            if "grad" in self.on and r.random() < 0.3:  # a Hessian-vector product
                j = r.choice(floats)
                tans = ["0" if k == "i" else n if k == "j" else self.sexpr(k, scope, 0) for n, k in ps]
                y, t = self.fresh("y"), self.fresh("dy")
                body.append(f"    {y}, {t} = jvp(grad({r.choice(targets)}, wrt={j}), {tup([n for n, _ in ps])}, {tup(tans)})")
                scope.bind(y, ps[j][1])
                scope.bind(t, ps[j][1])
                outs += [y, t]
        for _ in range(r.randint(0, 2)):
            k = r.choice([k for k in "svwm" if scope.has(k)])
            t = self.fresh("t")
            body.append(f"    {t} = {self.expr(k, scope, 2)}")
            scope.floats[t] = k
            outs.append(t)
        self.lines += [self.signature(Fn("main", ps, "tuple"))] + body + [f"    return {', '.join(outs)}", ""]

    def value(self, kind):
        """An input of `kind`: uniform in [-1, 1] in the program's element type; i64s in 0..4;
        index arrays i64[N] below M; a dict or a tuple of them for a structure."""
        if kind == "i":
            return self.r.randint(0, 4)
        if kind == "j":
            return np.random.default_rng(self.r.getrandbits(32)).integers(0, self.sizes["M"], size=self.sizes["N"])
        if isinstance(kind, Rec):
            fields = list(kind.fields)
            self.r.shuffle(fields)
            return {key: self.value(k) for key, k in fields}
        if isinstance(kind, Tup):
            return tuple(self.value(k) for k in kind.items)
        shape = tuple(self.sizes[d] for d in SHAPES[kind])
        a = np.random.default_rng(self.r.getrandbits(32)).uniform(-1.0, 1.0, size=shape)
        a = a.astype(np.float32 if self.dt == "f32" else np.float64)
        return a[()] if not shape else a

    def program(self) -> Program:
        r = self.r
        for _ in range(r.randint(0, 2)):
            ps = [(f"a{j}", k) for j, k in enumerate(self.kinds(r.randint(1, 2)))]
            ps += [("n", "i")] if r.random() < 0.3 else []
            ret = r.choice([k for k in "svwm" + ("x" if "conv" in self.use else "") if Scope(ps).has(k)])
            if "tuple" in self.on and r.random() < 0.3:
                ret = r.choice([ret + "s", "s" + ret])
            if self.use & {"records", "tuples"} and r.random() < 0.35:
                ret = self.struct_kind(leaves=[k for k in "svwm" if Scope(ps).has(k)])
            self.function(Fn(self.fresh("h"), ps, ret), r.randint(1, 3))
        if "recursion" in self.on and r.random() < 0.5:
            self.recursive(r.choice("svm"))
        ps = [(f"p{j}", k) for j, k in enumerate(self.kinds(r.randint(1, 3)))]
        ps += [("n", "i")] if r.random() < 0.5 else []
        if "checkpoint" in self.use:  # a helper with a long loop, called through checkpoint(...) by loss
            kinds = sorted({leaf for _, k in ps if k != "i" for _, leaf, _ in paths(k)})
            cps = [(f"a{j}", k) for j, k in enumerate(r.sample(kinds, min(len(kinds), r.randint(1, 2))))]
            cps += [("n", "i")] if ("n", "i") in ps and r.random() < 0.5 else []
            fn = Fn(self.fresh("ck"), cps, r.choice([k for k in "svwm" if Scope(cps).has(k)]))
            self.ckpt.add(fn.name)
            self.function(fn, r.randint(0, 1), long=True)
        ps += [("ix", "j")] if "index" in self.use and r.random() < 0.4 else []
        floats = tuple(j for j, (_, k) in enumerate(ps) if k not in ("i", "j"))
        self.function(Fn("loss", ps, "s"), r.randint(2, 4), use_all=True)
        grads, targets = [("loss", floats)], ["loss"]
        names = ", ".join(n for n, _ in ps)
        # no loss2 where loss may call jvp: its gradients would be of the third order, minutes to compile
        third = "jvp" in self.use
        if "grad2" in self.on and r.random() < 0.1 and not third:
            j = r.choice(floats)
            norm = " + ".join(f"sum(g{acc} * g{acc})" for acc, _, _ in paths(ps[j][1]))
            self.lines += [self.signature(Fn("loss2", ps, "s")),
                           f"    g = grad(loss, wrt={j})({names})",
                           f"    return {norm} + loss({names})", ""]
            grads.append(("loss2", floats))
            targets.append("loss2")
        elif "optim" in self.use and "grad" in self.on and r.random() < 0.35 and not third:  # loss after an optimizer's step
            j = r.choice(floats)
            # not adam: differentiated, sqrt(v) of a gradient that is zero (relu) has no derivative (NaN)
            opt, kw = self.optimizer(("sgd", "momentum"))
            moved = ", ".join("q" if n == ps[j][0] else n for n, _ in ps)
            self.lines += [self.signature(Fn("loss2", ps, "s")),
                           f"    g = grad(loss, wrt={j})({names})",
                           f"    q, st = {self.lib('optim', opt)}({ps[j][0]}, g, {self.lib('optim', opt + '_init')}({ps[j][0]}){kw})",
                           f"    return loss({moved})", ""]
            grads.append(("loss2", floats))
            targets.append("loss2")
        self.main(ps, targets)
        args = tuple(self.value(k) for _, k in ps)
        jvps, tangents = [], ()
        if "jvp" in self.use and "grad" in self.on and r.random() < 0.6:
            jvps = ["loss"]
            tangents = tuple(0 if k == "i" else a if k == "j" else self.value(k) for (_, k), a in zip(ps, args))
        lines = self.imports() + self.lines + self.after
        return Program(self.seed, "\n".join(lines).rstrip() + "\n", self.dt, "main", args, grads, jvps, tangents)


def square(e):
    return f"{e} * {e}" if e.isidentifier() else f"({e}) * ({e})"


def generate(seed: int, features=None, lines=LINES) -> Program:
    """The program for `seed`, with `features` (default FEATURES), of about `lines` lines."""
    return Generator(seed, FEATURES if features is None else features, lines).program()
