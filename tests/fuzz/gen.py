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
})
# `for i, x in enumerate(...)` (spec 1.1) and tensor methods such as `x.sum(axis=0)`
# (spec 1.2): rejected by dg's parser and checker today.
OFF = frozenset({"for_unpack", "methods"})

SHAPES = {"s": (), "v": ("N",), "w": ("M",), "m": ("N", "M")}
BROADCAST = {  # (left kind, right kind) -> kind of the result
    ("s", "s"): "s", ("v", "v"): "v", ("w", "w"): "w", ("m", "m"): "m",
    ("v", "s"): "v", ("s", "v"): "v", ("w", "s"): "w", ("s", "w"): "w",
    ("m", "s"): "m", ("s", "m"): "m", ("m", "w"): "m", ("w", "m"): "m",
}
UNARY = ["tanh", "sin", "cos", "sigmoid", "erf", "gelu", "relu", "abs"]
REDUCE = ["sum", "mean", "max", "min", "logsumexp", "var"]
LINES = 30  # about how long a program gets


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

    @property
    def filename(self) -> str:
        return f"fuzz_{self.seed}.dg"


@dataclass
class Fn:
    name: str
    params: list  # (name, kind); kind "i" is an i64
    ret: str  # a kind, or two for a pair


class Scope:
    """The names a point of a function can read: floats by kind, ints with the axis
    ("N", "M" or None) they index safely (ints are never assigned)."""

    def __init__(self, params=()):
        self.floats = {n: k for n, k in params if k != "i"}
        self.ints = {n: None for n, k in params if k == "i"}
        self.fixed = set()  # floats a `while` counts on: not to be assigned

    def copy(self):
        s = Scope()
        s.floats, s.ints, s.fixed = dict(self.floats), dict(self.ints), set(self.fixed)
        return s

    def writable(self):
        return [n for n in self.floats if n not in self.fixed]

    def of(self, kind):
        return [n for n, k in self.floats.items() if k == kind]

    def has(self, kind):
        kinds = set(self.floats.values())
        return {"s": True, "v": bool(kinds & {"v", "m"}), "w": bool(kinds & {"w", "m"}),
                "m": "m" in kinds or {"v", "w"} <= kinds}[kind]


class Generator:
    def __init__(self, seed: int, features=FEATURES, lines=LINES):
        self.r = random.Random(seed)
        self.max_lines = lines
        self.seed = seed
        self.on = set(features)
        self.dt = self.r.choice(["f32", "f64"])
        self.sizes = {"N": self.r.randint(1, 4), "M": self.r.randint(1, 4)}
        self.fns: list[Fn] = []
        self.called: set[str] = set()
        self.lines: list[str] = []
        self.counter = 0

    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def lit(self, lo=-1.0, hi=1.0):
        return repr(round(self.r.uniform(lo, hi), 2))

    @property
    def room(self):
        return self.max_lines - len(self.lines)

    # ------------------------------------------------------------------ expressions
    def leaf(self, kind, scope):
        """A name of `kind`, or a short expression of one."""
        r = self.r
        names = scope.of(kind)
        if names and r.random() < 0.75:
            return r.choice(names)
        ms, vs, ws = scope.of("m"), scope.of("v"), scope.of("w")
        if kind == "s":
            opts = [self.lit]
            opts += [lambda n=n: f"{r.choice(['sum', 'mean'])}({n})" for n in ms + vs + ws]
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
        else:
            opts = [lambda v=v, w=w: f"outer({v}, {w})" for v in vs for w in ws]
            opts += [lambda v=v, w=w: f"({v}[:, None] * {w})" for v in vs for w in ws]
        if "methods" in self.on and kind == "s":
            opts += [lambda n=n: f"{n}.{r.choice(['sum', 'mean', 'max'])}()" for n in ms + vs + ws]
        return r.choice(opts)() if opts else r.choice(names)

    def expr(self, kind, scope, depth=2):
        """An expression of `kind` that reads names of `scope`."""
        r = self.r
        if depth <= 0 or r.random() < 0.25:
            return self.leaf(kind, scope)
        d = depth - 1
        choices = ["bin", "bin", "unary", "unary", "special", "leaf"]
        choices += {"s": ["reduce", "reduce", "dot"], "v": ["softmax"], "m": ["mplus"], "w": []}[kind]
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
            k = r.choice([k for k in "vwm" if scope.has(k)] or ["s"])
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
        if "weak_builtin" in self.on or any(re.search(rf"\b{n}\b", x) for n in list(scope.floats) + list(scope.ints)):
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
        self.called.add(f.name)
        args = []
        for _, k in f.params:
            if k == "i":
                ns = [i for i in scope.ints if i == "n"]
                args.append("n" if ns and self.r.random() < 0.5 else str(self.r.randint(0, 3)))
            else:
                args.append(self.strong(k, self.expr(k, scope, 1)))
        return f"{f.name}({', '.join(args)})"

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

    def stmt(self, scope, ind, fn, loop, nest):
        r = self.r
        p = " " * ind
        options = ["assign", "assign", "reassign", "reassign"]
        if nest < 2 and self.room > 8:
            options += [f for f in ("if", "for", "while") if f in self.on]
            options += ["rows"] if "rows" in self.on and scope.of("m") else []
        if loop is not None:
            options += [f for f in ("break", "continue") if f in self.on]
        if "return" in self.on and (loop is not None or r.random() < 0.3):
            options.append("return")
        if "update" in self.on and any(scope.ints.values()):
            options.append("update")
        pairs = [f for f in self.fns if len(f.ret) == 2 and self.can_call(f, scope)]
        if pairs:
            options.append("unpack")
        c = r.choice(options)
        if c == "unpack":
            return [p + self.unpack(r.choice(pairs), scope)]
        if c == "update":
            out = self.update(scope, p, loop)
            if out:
                return out
            c = "assign"
        if c == "reassign" and scope.writable():
            name = r.choice(scope.writable())
            e = self.expr(scope.floats[name], scope)
            if loop:
                return [f"{p}{name} = {self.squash(name, e)}"]
            if r.random() < 0.3:
                return [f"{p}{name} {r.choice(['+=', '-=', '*='])} {e}"]
            return [f"{p}{name} = {e}"]
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
            head, inner.ints[i] = r.choice(forms)
            return [f"{p}for {i} in {head}:"] + sub(inner, r.randint(1, 3), "for")
        if c == "rows":
            m, row, inner = r.choice(scope.of("m")), self.fresh("row"), scope.copy()
            inner.floats[row] = "w"
            if "for_unpack" in self.on and r.random() < 0.5:
                i = self.fresh("i")
                inner.ints[i] = "N"
                return [f"{p}for {i}, {row} in enumerate({m}):"] + sub(inner, r.randint(1, 2), "for")
            return [f"{p}for {row} in {m}:"] + sub(inner, r.randint(1, 2), "for")
        if c == "while":
            if r.random() < 0.5 or not scope.floats:  # a counter with a bound
                k = self.fresh("k")
                scope.ints[k] = None
                head = f"{k} < {r.randint(1, 4)}"
                if r.random() < 0.6:
                    head += f" and ({self.cond(scope, ints=False)})"
                return [f"{p}{k} = 0", f"{p}while {head}:", f"{p}    {k} += 1"] + sub(scope.copy(), r.randint(1, 2), "while")
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
            return [f"{p}if {self.cond(scope)}:", f"{p}    return {', '.join(self.expr(k, scope) for k in fn.ret)}"]
        raise AssertionError(c)

    def unpack(self, f, scope):
        """`a, b = f(...)` for a function `f` that returns a pair."""
        names = [self.fresh("t") for _ in f.ret]
        line = f"{', '.join(names)} = {self.call(f, scope)}"
        scope.floats.update(zip(names, f.ret))
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
        kinds = [self.r.choice("svwm") for _ in range(count)]
        if all(k == "s" for k in kinds):
            kinds[0] = self.r.choice("vm")
        return kinds

    def ann(self, kind):
        """A parameter's annotation: named, static or `?` sizes, or none."""
        if kind == "i":
            return "i64"
        dims = SHAPES[kind]
        if not dims:
            return self.r.choice([self.dt, self.dt, None])
        style = self.r.choice(["named", "static", "any", "none"])
        if style == "none":
            return None
        size = {"named": lambda d: d, "static": lambda d: str(self.sizes[d]), "any": lambda d: "?"}[style]
        return f"{self.dt}[{', '.join(size(d) for d in dims)}]"

    def signature(self, fn):
        parts = []
        for name, k in fn.params:
            a = self.ann(k)
            parts.append(f"{name}: {a}" if a else name)
        ret = ""
        if fn.ret == "s" and self.r.random() < 0.7:
            ret = f" -> {self.dt}"
        elif fn.ret not in ("s", "tuple") and self.r.random() < 0.4:
            types = [f"{self.dt}[{', '.join('?' for _ in SHAPES[k])}]" if SHAPES[k] else self.dt for k in fn.ret]
            ret = f" -> ({', '.join(types)})" if len(types) == 2 else f" -> {types[0]}"
        return f"def {fn.name}({', '.join(parts)}){ret}:"

    def result(self, kind, scope):
        """A return value that mixes in what the body computed."""
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

    def function(self, fn, budget, use_all=False):
        """`fn` with a random body; with `use_all`, it calls every function not called yet."""
        head = len(self.lines)
        self.lines.append("")  # the signature, once the body is known
        scope = Scope(fn.params)
        self.lines += self.block(scope, 4, fn, budget)
        if use_all:
            for f in self.fns:
                if f.name not in self.called and self.can_call(f, scope):
                    if len(f.ret) == 2:
                        self.lines.append("    " + self.unpack(f, scope))
                        continue
                    t = self.fresh("t")
                    self.lines.append(f"    {t} = {self.call(f, scope)}")
                    scope.floats[t] = f.ret
        self.lines[head] = self.signature(fn)
        self.lines += [f"    return {', '.join(self.result(k, scope) for k in fn.ret)}", ""]
        self.fns.append(fn)

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

    def main(self, ps, targets):
        """The entry: gradients of `targets` (or their values), and a little more."""
        r = self.r
        names = ", ".join(n for n, _ in ps)
        floats = [j for j, (_, k) in enumerate(ps) if k != "i"]
        scope = Scope(ps)
        body, outs = [], []
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
            if r.random() < 0.5:
                v = self.fresh("v")
                body.append(f"    {v}, {lhs} = value_and_grad({target}, wrt={spec})({names})")
                scope.floats[v] = "s"
                outs.append(v)
            else:
                body.append(f"    {lhs.strip('()') if len(gs) > 1 else lhs} = grad({target}, wrt={spec})({names})")
            for gname, j in zip(gs, wrt):
                scope.floats[gname] = ps[j][1]
                outs.append(gname)
        if "descent" in self.on and "grad" in self.on and r.random() < 0.25:
            j = r.choice(floats)
            q, i = self.fresh("q"), self.fresh("i")
            args = ", ".join(q if n == ps[j][0] else n for n, _ in ps)
            body += [f"    {q} = {ps[j][0]}", f"    for {i} in range({r.randint(1, 3)}):",
                     f"        {q} = {q} - 0.1 * grad({targets[0]}, wrt={j})({args})"]
            scope.floats[q] = ps[j][1]
            outs.append(q)
        for _ in range(r.randint(0, 2)):
            k = r.choice([k for k in "svwm" if scope.has(k)])
            t = self.fresh("t")
            body.append(f"    {t} = {self.expr(k, scope, 2)}")
            scope.floats[t] = k
            outs.append(t)
        self.lines += [self.signature(Fn("main", ps, "tuple"))] + body + [f"    return {', '.join(outs)}", ""]

    def value(self, kind):
        """An input of `kind`: uniform in [-1, 1] in the program's element type; i64s in 0..4."""
        if kind == "i":
            return self.r.randint(0, 4)
        shape = tuple(self.sizes[d] for d in SHAPES[kind])
        a = np.random.default_rng(self.r.getrandbits(32)).uniform(-1.0, 1.0, size=shape)
        a = a.astype(np.float32 if self.dt == "f32" else np.float64)
        return a[()] if not shape else a

    def program(self) -> Program:
        r = self.r
        for _ in range(r.randint(0, 2)):
            ps = [(f"a{j}", k) for j, k in enumerate(self.kinds(r.randint(1, 2)))]
            ps += [("n", "i")] if r.random() < 0.3 else []
            ret = r.choice([k for k in "svwm" if Scope(ps).has(k)])
            if "tuple" in self.on and r.random() < 0.3:
                ret = r.choice([ret + "s", "s" + ret])
            self.function(Fn(self.fresh("h"), ps, ret), r.randint(1, 3))
        if "recursion" in self.on and r.random() < 0.5:
            self.recursive(r.choice("svm"))
        ps = [(f"p{j}", k) for j, k in enumerate(self.kinds(r.randint(1, 3)))]
        ps += [("n", "i")] if r.random() < 0.5 else []
        floats = tuple(j for j, (_, k) in enumerate(ps) if k != "i")
        self.function(Fn("loss", ps, "s"), r.randint(2, 4), use_all=True)
        grads, targets = [("loss", floats)], ["loss"]
        if "grad2" in self.on and r.random() < 0.1:
            names = ", ".join(n for n, _ in ps)
            self.lines += [self.signature(Fn("loss2", ps, "s")),
                           f"    g = grad(loss, wrt={r.choice(floats)})({names})",
                           f"    return sum(g * g) + loss({names})", ""]
            grads.append(("loss2", floats))
            targets.append("loss2")
        self.main(ps, targets)
        args = tuple(self.value(k) for _, k in ps)
        return Program(self.seed, "\n".join(self.lines).rstrip() + "\n", self.dt, "main", args, grads)


def square(e):
    return f"{e} * {e}" if e.isidentifier() else f"({e}) * ({e})"


def generate(seed: int, features=None, lines=LINES) -> Program:
    """The program for `seed`, with `features` (default FEATURES), of about `lines` lines."""
    return Generator(seed, FEATURES if features is None else features, lines).program()
