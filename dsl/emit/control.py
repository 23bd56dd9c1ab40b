"""Control flow: `if` as scf.if, loops as scf.for and scf.while, the names a branch or a body rebinds
becoming their results and carried values."""
from __future__ import annotations

import copy
from dataclasses import dataclass, fields

from dg.core.types import Sym, TensorType, is_bool, is_int, promote, same_dim

from .. import ast as A
from ..controlflow import RET, RETVAL
from ..values import (POISON, ListVal, PackedList, TypedValue, Undefined, describe_structure, flatten, is_tuple, same_structure,
                      structure, unflatten_like)
from .autobatch import autobatched
from .core import INDEX, all_values, show


@dataclass
class Computed(A.Node):
    """An expression the emitter writes by calling `make()` (rewrites it makes of its own code)."""
    make: object


def _join(t: TensorType, u: TensorType) -> TensorType:
    """t's type with the sizes it does not share with u made dynamic (a symbolic size is kept)."""
    return t.with_shape(p if isinstance(p, Sym) else (p if isinstance(q, int) and p == q else Sym())
                        for p, q in zip(t.shape, u.shape))


def _pattern(types) -> list:
    """Types as MLIR sees them (every symbolic size is `?`)."""
    return [t.mlir() for t in types]


def _changed(before, env_a, env_b):
    names = []
    for env in (env_a, env_b):
        for n, v in env.items():
            if before.get(n) is not v and n not in names:
                names.append(n)
    return names


def _assigned_names(stmts):
    out = []
    for s in stmts:
        if isinstance(s, (A.Assign,)):
            for t in s.targets:
                out += _target_names(t)
        elif isinstance(s, (A.AnnAssign, A.AugAssign)):
            out += _target_names(s.target)
        elif isinstance(s, A.If):
            out += _assigned_names(s.body) + _assigned_names(s.orelse)
        elif isinstance(s, (A.For, A.While)):
            if isinstance(s, A.For):
                out += _target_names(s.target)
            out += _assigned_names(s.body)
    return out


def _target_names(t):
    if isinstance(t, A.Name):
        return [t.id]
    if isinstance(t, (A.Tuple, A.List)):
        return [n for e in t.elts for n in _target_names(e)]
    return []


def _signature(v):
    """What a loop body's probe can depend on of a value bound before the loop: its type (each
    run-time size by identity), whether it is a weak literal, its known value; other bindings
    (functions, list displays, undefined names) by identity."""
    if isinstance(v, TypedValue):
        if v.poison:
            return ("poison",)
        shape = tuple(d.id if isinstance(d, Sym) else ("static", d) for d in v.type.shape)
        const = v.const
        try:
            hash(const)
        except TypeError:
            const = ("unhashable", id(const))
        return (v.dtype, shape, v.weak, const)
    if isinstance(v, tuple):
        return ("tuple", structure(v)) + tuple(_signature(x) for x in v)
    if isinstance(v, Undefined):
        if v.value is None:
            return ("unbound",)
        return ("maybe bound", _signature(v.value), _signature(v.bound))
    return ("object", id(v))


def _stackable(seq: tuple) -> bool:
    """Whether a tuple's items are tensors (or numbers) of one element type and shape, which a
    loop over it takes stacked (one loop); other tuples are unrolled."""
    if not seq or any(not isinstance(v, TypedValue) or v.poison for v in seq):
        return False
    strong = [v for v in seq if v.name is not None and not v.weak]
    if len(strong) != len(seq):
        return all(v.rank == 0 for v in seq) and len({v.dtype for v in strong}) <= 1
    return len({(v.dtype, v.type.shape) for v in seq}) == 1 and all(
        all(isinstance(d, int) for d in v.type.shape) for v in seq)


def _names_in(node, out: set) -> set:
    """Every name a statement or expression reads or binds (a `for`'s stop flags included)."""
    if isinstance(node, A.Name):
        out.add(node.id)
    elif isinstance(node, A.Node):
        if isinstance(node, A.For) and node.stops:
            out.update(node.stops)
        for f in fields(node):
            _names_in(getattr(node, f.name), out)
    elif isinstance(node, (list, tuple)):
        for x in node:
            _names_in(x, out)
    return out


BOOL = TensorType("bool", ())


def unbound_message(name: str) -> str:
    """What reading a name that no executed path bound says (Python's UnboundLocalError)."""
    return (f"UnboundLocalError: local variable '{name}' is referenced before assignment: "
            f"it is not bound on the path that ran")


class _Liveness:
    """Which names a function may still read after each statement (live variables, over the
    structured statements controlflow's rewrite leaves: no break, continue or early return). A
    name first bound in a branch or a loop body is carried out of it (a maybe-bound name, with
    its run-time flag) only where it is live: ordinary temporaries cost nothing."""

    def __init__(self, body):
        self.after: dict = {}  # id(statement) -> names live after it
        self.head: dict = {}  # id(loop) -> names live where its body ends (before its next test)
        self.block(body, frozenset())

    def block(self, stmts, live):
        for s in reversed(stmts):
            live = self.stmt(s, live)
        return live

    def stmt(self, s, live) -> frozenset:
        self.after[id(s)] = live
        if isinstance(s, A.Assign):
            kill, reads = set(), _names_in(s.value, set())
            for t in s.targets:
                kill.update(_target_names(t))
                _target_reads(t, reads)
            return frozenset((live - kill) | reads)
        if isinstance(s, A.AnnAssign):
            return frozenset((live - {s.target.id}) | _names_in(s.value, set()))
        if isinstance(s, A.Return):
            return frozenset(_names_in(s.value, set()))
        if isinstance(s, A.If):
            return frozenset(_names_in(s.test, set()) | self.block(s.body, live) | self.block(s.orelse, live))
        if isinstance(s, (A.For, A.While)):
            targets = set(_target_names(s.target)) if isinstance(s, A.For) else set()
            test = set(s.stops or ()) if isinstance(s, A.For) else _names_in(s.test, set())
            # From the last answer for this loop (an enclosing loop asks again, with more names
            # live): each loop then takes a pass or two, not 2**depth of them.
            head = frozenset(live | test | self.head.get(id(s), frozenset()))
            for _ in range(1000):  # names only join: this ends
                new = frozenset(live | test | (self.block(s.body, head) - targets))
                if new == head:
                    break
                head = new
            self.head[id(s)] = head
            return frozenset(head | (_names_in(s.iter, set()) if isinstance(s, A.For) else set()))
        return frozenset(live | _names_in(s, set()))  # AugAssign, ExprStmt, Assert, Pass: reads only


def _target_reads(t, out: set) -> None:
    """The names an assignment target reads: a subscript's base and indices (`x[i] = e`)."""
    if isinstance(t, (A.Tuple, A.List)):
        for e in t.elts:
            _target_reads(e, out)
    elif not isinstance(t, A.Name):
        _names_in(t, out)


def _leaves(v) -> list:
    """The values a name carries through scf: a maybe-bound name's then its flag."""
    if isinstance(v, Undefined):
        return flatten(v.value) + [v.bound]
    return flatten(v)


def _pack(struct, vals: list):
    """The inverse of _leaves, given the carried structure (an Undefined for a maybe-bound name)."""
    if isinstance(struct, Undefined):
        n = len(flatten(struct.value))
        return Undefined(struct.why, value=unflatten_like(struct.value, vals[:n]), bound=vals[n])
    return unflatten_like(struct, vals)


class ControlFlow:
    # ------------------------------------------------------------ control flow
    def cond_value(self, e, loc) -> TypedValue:
        """An expression as a 0-d bool tensor (NumPy truthiness), or a static bool."""
        v = self.as_value(self.expr(e), loc)
        return self.truth(v, e.loc if hasattr(e, "loc") else loc)

    def truth(self, v, loc) -> TypedValue:
        if not isinstance(v, TypedValue) or v.poison:
            return POISON
        if v.rank != 0:
            return self.error(f"the truth value of a {v.type} tensor is ambiguous: reduce it with any() or all(), or index it", loc)
        if v.name is None:
            return self.weak(bool(v.const))
        if v.dtype == "bool":
            return v
        return self.op("ne", [v, self.const(0, v.dtype, loc)], loc=loc)

    def to_i1(self, c: TypedValue, loc) -> TypedValue:
        if c.name is None:
            c = self.materialize(c, "bool", loc)
        return self.op("to_i1", [c], loc=loc)

    # ------------------------------------------------------------ names bound on some paths
    def live_names(self, node):
        """The names the function may read after statement `node` (for a loop: where its body
        ends); None where that is not known (all of them, then). The loops this emitter writes
        in place of a `for` (`iterated_pairs`, `for_until`) answer for it."""
        lv = self.__dict__.get("liveness")
        if lv is None:
            lv = self.liveness = _Liveness(self.fd.body)
        node_id = id(node)
        while node_id in self.__dict__.setdefault("rewritten_from", {}):
            node_id = self.rewritten_from[node_id]
        if isinstance(node, (A.For, A.While)):
            return lv.head.get(node_id)
        return lv.after.get(node_id)

    def read_maybe_bound(self, e: A.Name, v: Undefined):
        """A read of a name bound on some paths only: a run-time check that a path that ran bound
        it (a located DgRuntimeError, Python's UnboundLocalError), then its value."""
        flag = v.bound
        if isinstance(flag, TypedValue) and flag.name is None and not flag.poison:
            if not flag.const:
                return self.error(unbound_message(e.id), e.loc)
        elif isinstance(flag, TypedValue):
            self.op("check", [flag], {"msg": unbound_message(e.id)}, e.loc)
        return v.value

    def s_If(self, s):
        c = self.cond_value(s.test, s.loc)
        if c.poison:
            # Still check both branches for errors.
            saved = dict(self.env)
            self.block(s.body)
            self.env = dict(saved)
            self.block(s.orelse)
            self.env = saved
            return
        if c.name is None:  # static condition: only the branch taken exists
            self.block(s.body if c.const else s.orelse)
            return
        self.emit_if(c, lambda: self.block(s.body), lambda: self.block(s.orelse), s.loc, live=self.live_names(s))

    def emit_if(self, c: TypedValue, then_fn, else_fn, loc, result_fn=None, live=None):
        """scf.if; the results are the names either branch rebinds (or what `result_fn` picks).
        A name one branch binds and the other not is a result with its run-time `bound` flag
        where it is in `live` (the names read after: None, all of them), else unbound after."""
        before = dict(self.env)
        cond = self.to_i1(c, loc)
        if cond.poison:
            return
        saved_lines, saved_indent = self.lines, self.indent

        def run(fn):
            self.env = dict(before)
            self.lines = []
            self.indent = saved_indent + 2
            out = fn()
            return self.env, self.lines, out

        env_t, lines_t, out_t = run(then_fn)
        env_e, lines_e, out_e = run(else_fn)
        self.lines, self.indent = saved_lines, saved_indent
        self.env = before
        if result_fn is not None:  # expression form: each branch returned a value
            names = []
            pairs = [(out_t, out_e)]
        else:
            names = [n for n in _changed(before, env_t, env_e) if n not in ("$return", "$return_loc")]
            pairs = []
        merged = {}
        yields_t, yields_e, types = [], [], []
        for n in names:
            a, b = env_t.get(n, before.get(n)), env_e.get(n, before.get(n))
            merged[n] = (a, b)
        items = list(merged.items()) + [(None, p) for p in pairs]
        final = {}
        result_vals = []
        out_poison = False
        for n, (a, b) in items:
            ra, rb, t, struct = self.merge_pair(n, a, b, loc, live=live is None or n in live)
            if struct is None:
                if n is None:
                    out_poison = True
                else:
                    final[n] = ra  # Undefined / poison / unmergeable: no scf result
                continue
            yields_t.append(ra)
            yields_e.append(rb)
            types.append(t)
            result_vals.append((n, struct, len(ra)))
        # Materialize the yielded values inside their branch (literals, casts, undef).
        ylines_t = self.finish_yields(yields_t, types, lines_t, saved_indent + 2, loc)
        ylines_e = self.finish_yields(yields_e, types, lines_e, saved_indent + 2, loc)
        flat_types = [t for ts in types for t in ts]
        head, names = self.results(len(flat_types))
        rt = f" -> ({', '.join(t.mlir() for t in flat_types)})" if flat_types else ""
        self.line(f"{head}scf.if {cond.name}{rt} {{")
        self.lines += ylines_t
        self.line("} else {")
        self.lines += ylines_e
        self.line(f"}} {self.loc_text(loc)}")
        k = 0
        out = None
        for n, struct, count in result_vals:
            value = _pack(struct, [TypedValue(nm, t) for nm, t in zip(names[k:k + count], flat_types[k:k + count])])
            k += count
            if n is None:
                out = value
            else:
                final[n] = value
        self.env = dict(before)
        self.env.update(final)
        return POISON if out_poison else out

    def merge_pair(self, name, a, b, loc, live=False):
        """Line up what two paths bind to one name: (flat a, flat b, flat types, structure) or struct None.
        A `live` name (one read later) that a path leaves unbound is merged as maybe bound."""
        internal = name is not None and name.startswith("$")
        dead = not live and name is not None and not internal
        if dead and a is not b and (isinstance(a, ListVal) or isinstance(b, ListVal)):
            return Undefined(f"{show(name)} is bound differently on different paths"), None, None, None
        if isinstance(a, ListVal):
            a = self.as_value(a, loc)
        if isinstance(b, ListVal):
            b = self.as_value(b, loc)
        if live and name is not None and not internal:
            maybe = self.merge_maybe_bound(name, a, b, loc)
            if maybe is not None:
                return maybe
        ua, ub = a is None or isinstance(a, Undefined), b is None or isinstance(b, Undefined)
        if ua and ub:
            return None, None, None, None
        if ua or ub:
            known = b if ua else a
            if all_values(known) and any(v.poison for v in flatten(known)):
                return POISON, None, None, None
            if internal and all_values(known):
                flat = flatten(known)
                types = [v.type for v in flat]
                undef = [("undef", t) for t in types]
                fa, fb = (undef, flat) if ua else (flat, undef)
                return fa, fb, types, known
            why = f"{show(name)} is not defined on every path that reaches here"
            return Undefined(why, None), None, None, None
        if not (all_values(a) and all_values(b)):
            if a is b:
                return a, None, None, None
            return Undefined(f"{show(name)} has values of different kinds on different paths"), None, None, None
        fa, fb = flatten(a), flatten(b)
        if dead:
            # Read nowhere after (a path that returned early never reaches a rebinding, as in
            # Python): paths may bind it differently; a read would be an error (there is none).
            why = self.conflict(name, a, b, fa, fb)
            if why is not None:
                return Undefined(why), None, None, None
        if not same_structure(a, b):
            self.error(f"{show(name)} has a different structure on different paths ({describe_structure(a)}, "
                       f"{describe_structure(b)})", loc)
            return POISON, None, None, None
        if self.mod.recursive_unknown or (self.mod.quiet and not internal):
            # A recursion probe: a path through a recursive call has no type yet; the
            # other path's type is the guess (this pass is emitted again). So in a loop's
            # probe, where a path read a name the loop binds later (a maybe-bound name whose
            # type the probe is finding): errors there are reported when the loop is written.
            fa = [y if x.poison else x for x, y in zip(fa, fb)]
            fb = [x if y.poison else y for x, y in zip(fa, fb)]
        types = []
        for x, y in zip(fa, fb):
            if x.poison or y.poison:
                return POISON, None, None, None
            t = self.join_types(x, y, name, loc)
            if t is None:
                return POISON, None, None, None
            types.append(t)
        return fa, fb, types, a

    @staticmethod
    def conflict(name, a, b, fa, fb) -> str | None:
        """Why two paths' values of a name cannot be one value after them (structure, element
        type, rank), or None where they can."""
        if not same_structure(a, b):
            return f"{show(name)} has a different structure on different paths ({describe_structure(a)}, " \
                   f"{describe_structure(b)})"
        for x, y in zip(fa, fb):
            if x.poison or y.poison:
                return None
            dx = x.dtype if not (x.weak and x.name is None) else None
            dy = y.dtype if not (y.weak and y.name is None) else None
            if dx and dy and dx != dy:
                return f"{show(name)} is {x.type} on one path and {y.type} on another"
            if x.rank != y.rank:
                return f"{show(name)} has rank {x.rank} on one path and {y.rank} on another"
        return None

    def merge_maybe_bound(self, name, a, b, loc):
        """merge_pair of a name bound on one path and not (or maybe) on the other: its value
        (a placeholder where not bound) and its `bound` flag; None where that is not the case."""
        other = object()

        def part(v):
            if v is None or (isinstance(v, Undefined) and v.value is None):
                return None, self.weak(False)
            if isinstance(v, Undefined):
                return v.value, v.bound
            return (v, self.weak(True)) if all_values(v) else (other, None)

        (va, fa), (vb, fb) = part(a), part(b)
        if va is other or vb is other or (va is None and vb is None) or \
                (not isinstance(a, Undefined) and not isinstance(b, Undefined) and a is not None and b is not None):
            return None  # both bound, neither bound, or not arrays: merge_pair's own rules
        poisoned = [v is not None and any(x.poison for x in flatten(v)) for v in (va, vb)]
        if any(poisoned):
            if not self.mod.quiet or all(poisoned) or None in (va, vb):
                return POISON, None, None, None
            va, vb = (vb, vb) if poisoned[0] else (va, va)  # a probe's guess (see merge_pair)
        if va is not None and vb is not None:
            if not same_structure(va, vb):
                self.error(f"{show(name)} has a different structure on different paths ({describe_structure(va)}, "
                           f"{describe_structure(vb)})", loc)
                return POISON, None, None, None
            xa, xb = flatten(va), flatten(vb)
            types = [self.join_types(x, y, name, loc) for x, y in zip(xa, xb)]
            if any(t is None for t in types):
                return POISON, None, None, None
        else:
            xs = flatten(va if va is not None else vb)
            types = [x.type for x in xs]
            undef = [("undef", t) for t in types]
            xa, xb = (xs, undef) if va is not None else (undef, xs)
        struct = Undefined(f"{show(name)} is not bound on every path", value=va if va is not None else vb, bound=True)
        return xa + [fa], xb + [fb], types + [BOOL], struct

    def join_types(self, x: TypedValue, y: TypedValue, name, loc):
        dx = x.dtype if not (x.weak and x.name is None) else None
        dy = y.dtype if not (y.weak and y.name is None) else None
        if dx and dy and dx != dy:
            if name is None:
                dt = promote(dx, dy)
            else:
                self.error(f"{show(name)} is {x.type} on one path and {y.type} on another", loc)
                return None
        else:
            dt = dx or dy or promote(x.dtype, y.dtype)
        if x.rank != y.rank:
            self.error(f"{show(name)} has rank {x.rank} on one path and {y.rank} on another", loc)
            return None
        shape = tuple(a if same_dim(a, b) else Sym() for a, b in zip(x.type.shape, y.type.shape))
        return TensorType(dt, shape)

    def finish_yields(self, vals_lists, types_lists, lines, indent, loc):
        """Append `scf.yield` (with the casts/constants/placeholders it needs) to a branch's lines."""
        saved_lines, saved_indent = self.lines, self.indent
        self.lines, self.indent = lines, indent
        names = []
        flat_types = []
        for vals, types in zip(vals_lists, types_lists):
            for v, t in zip(vals, types):
                flat_types.append(t)
                names.append(self.conform(v, t, loc).name)
        if names:
            self.line(f"scf.yield {', '.join(names)} : {', '.join(t.mlir() for t in flat_types)} {self.loc_text(loc)}")
        else:
            self.line(f"scf.yield {self.loc_text(loc)}")
        out = self.lines
        self.lines, self.indent = saved_lines, saved_indent
        return out

    # ------------------------------------------------------------ loops
    def loop_carried(self, body_fn, before: dict, loc, loop: A.Node):
        """Probe a loop body to find what it rebinds and the types that stay stable.

        Each probe runs the body quietly with the carried values typed as found
        so far; a dim that differs between iterations becomes dynamic, until
        nothing changes (dims only ever go from static to dynamic, so this
        ends). Returns [(name, structure, flat types)].

        Inside a probe of an enclosing loop, the answer for the same `loop` and the same bindings
        of the names it mentions is remembered (each probe of the enclosing body asks again, and
        so does each of its enclosing loops: without it, the work grew as 3**depth). What the
        loop's own code captured besides (`loop_context`) is part of the question.
        """
        names = self.loop_names.get(id(loop))
        if names is None:
            names = self.loop_names[id(loop)] = sorted(_names_in(loop, set()))
        key = (id(loop), self.loop_context.get(id(loop)),
               tuple((n, _signature(before[n])) for n in names if n in before))
        if self.mod.quiet and key in self.loops_probed:
            return self.loops_probed[key]
        live = self.live_names(loop)
        carried: dict = {}  # name -> (structure, types)
        for attempt in range(64):
            env0 = dict(before)
            for n, (struct, types) in carried.items():
                env0[n] = _pack(struct, [TypedValue(f"%probe{i}", t) for i, t in enumerate(types)])
            self.mod.quiet += 1
            saved = (self.lines, self.indent, self.env)
            self.lines, self.env = [], dict(env0)
            try:
                body_fn()
                env1 = self.env
            finally:
                self.lines, self.indent, self.env = saved
                self.mod.quiet -= 1
            changed = False
            for n in _changed(env0, env1, env1):
                if n in ("$return", "$return_loc"):
                    continue
                new = self.carry_types(n, before.get(n), carried.get(n), env1.get(n), loc,
                                       live=live is None or n in live)
                if new is not None and (n not in carried or _pattern(carried[n][1]) != _pattern(new[1])):
                    carried[n] = new
                    changed = True
            if not changed:
                break
        found = self.loops_probed[key] = [(n, struct, types) for n, (struct, types) in carried.items()]
        return found

    def probed_only(self, before, carried, body) -> bool:
        """Inside a probe of an enclosing loop, a loop's text is thrown away: only the types it
        leaves its names with matter, so it is not written (True), and its body not emitted."""
        if not self.mod.quiet:
            return False
        n = sum(len(types) for _, _, types in carried)
        self.after_loop(before, carried, [f"%probe_out{i}" for i in range(n)], body)
        return True

    def carry_types(self, n, first, cur, after, loc, live=False):
        """The carried (structure, types) of `n` given its value before the loop (`first`),
        its carried types so far (`cur`), and its value after one iteration; None if not carried.
        A name not bound before the loop is carried maybe bound where it is `live` (read after
        the loop, or by a later iteration)."""
        if isinstance(after, ListVal):
            after = self.as_value(after, loc)
        if first is None or isinstance(first, Undefined):
            # First bound in the body: local to it, unless it is the early return's flag or value,
            # which the function's end reads. (The flags and counters of the loops inside are
            # dead once those end: carried, every loop carried those of all the loops within.)
            if n in (RET, RETVAL) and all_values(after) and all(not x.poison for x in flatten(after)):
                types = [x.type for x in flatten(after)]
                if cur is None or len(cur[1]) != len(types):
                    return cur or (after, types)
                # A later probe (carried values less static) may return other sizes: join them.
                return cur[0], [_join(c, t) if c.rank == t.rank and c.dtype == t.dtype else c
                                for c, t in zip(cur[1], types)]
            if live and not n.startswith("$"):
                return self.carry_maybe_bound(n, first, cur, after, loc)
            return None
        if not (all_values(first) and all_values(after)):
            return None
        before_vals = flatten(first) if cur is None else [TypedValue("%c", t) for t in cur[1]]
        struct = first if cur is None else cur[0]
        after_vals = flatten(after)
        if not same_structure(struct, after) or len(before_vals) != len(after_vals):
            self.error(f"{show(n)} changes its structure inside the loop (from {describe_structure(struct)} "
                       f"to {describe_structure(after)})", loc)
            return None
        if any(x.poison for x in before_vals + after_vals):
            return None
        types = self.join_carried(n, before_vals, after_vals, loc)
        return None if types is None else (struct, types)

    def carry_maybe_bound(self, n, first, cur, after, loc):
        """carry_types of a name the loop binds and that may be unbound before it: its value and
        its `bound` flag (see Undefined)."""
        if isinstance(after, Undefined):
            val = after.value
        else:
            val = after if all_values(after) else None
        if val is None or any(x.poison for x in flatten(val)):
            return None
        why = f"{show(n)} is not bound on every path"
        if cur is not None:
            struct, before_vals = cur[0].value, [TypedValue("%c", t) for t in cur[1][:-1]]
        elif isinstance(first, Undefined) and first.value is not None:
            struct, before_vals = first.value, flatten(first.value)
        else:
            return Undefined(why, value=val, bound=True), [x.type for x in flatten(val)] + [BOOL]
        if not same_structure(struct, val):
            self.error(f"{show(n)} changes its structure inside the loop (from {describe_structure(struct)} "
                       f"to {describe_structure(val)})", loc)
            return None
        types = self.join_carried(n, before_vals, flatten(val), loc)
        return None if types is None else (Undefined(why, value=struct, bound=True), types + [BOOL])

    def join_carried(self, n, before_vals, after_vals, loc):
        """The carried types of values before an iteration and after it; None after an error."""
        types = []
        for x, y in zip(before_vals, after_vals):
            x_weak = x.weak and x.name is None
            y_weak = y.weak and y.name is None
            if x.rank != y.rank:
                self.error(f"{show(n)} changes rank inside the loop ({x.type} before, {y.type} after); "
                           f"give it its final shape before the loop", loc)
                return None
            if not x_weak and not y_weak and x.dtype != y.dtype:
                self.error(f"{show(n)} changes its element type inside the loop ({x.dtype} before, {y.dtype} after)", loc)
                return None
            dt = y.dtype if x_weak and not y_weak else (x.dtype if not x_weak else promote(x.dtype, y.dtype))
            types.append(_join(x.type, y.type).with_dtype(dt))
        return types

    def carried_inits(self, carried, before, loc):
        inits = []
        for n, struct, types in carried:
            cur = before.get(n)
            if isinstance(struct, Undefined):  # maybe bound: its value (a placeholder) and its flag
                vals = _leaves(cur) if isinstance(cur, Undefined) and cur.value is not None else \
                    [("undef",)] * (len(types) - 1) + [self.weak(False)]
                inits += [self.conform(v, t, loc) for v, t in zip(vals, types)]
            elif cur is None or isinstance(cur, Undefined):
                inits += [self.conform(("undef",), t, loc) for t in types]
            else:
                if isinstance(cur, ListVal):
                    cur = self.as_value(cur, loc)
                inits += [self.conform(v, t, loc) for v, t in zip(flatten(cur), types)]
        return inits

    def tensors_for_loop(self, body, loc):
        """List displays that the loop rebinds become tensors first (a carried value is a tensor)."""
        for n in set(_assigned_names(body)):
            if isinstance(self.env.get(n), ListVal):
                self.env[n] = self.as_value(self.env[n], loc)

    def s_While(self, s):
        loc = s.loc
        self.tensors_for_loop(s.body, loc)
        before = dict(self.env)

        def body():
            self.cond_value(s.test, loc)  # checked, as the loop's "before" region
            self.block(s.body)

        carried = self.loop_carried(body, before, loc, s)
        if self.probed_only(before, carried, s.body):
            return
        inits = self.carried_inits(carried, before, loc)
        flat_types = [t for _, _, ts in carried for t in ts]
        head, res = self.results(len(flat_types))
        args = [self.fresh() for _ in flat_types]
        args2 = [self.fresh() for _ in flat_types]
        tys = ", ".join(t.mlir() for t in flat_types)
        init_s = ", ".join(f"{a} = {v.name}" for a, v in zip(args, inits))
        self.line(f"{head}scf.while ({init_s}) : ({tys}) -> ({tys}) {{")

        def bind_args(names):
            env = dict(before)
            k = 0
            for n, struct, types in carried:
                vals = [TypedValue(names[k + i], t) for i, t in enumerate(types)]
                env[n] = _pack(struct, vals)
                k += len(types)
            # Names first bound in the body are local to it.
            return env

        saved_indent = self.indent
        self.indent += 2
        self.env = bind_args(args)
        c = self.cond_value(s.test, loc)
        if not c.poison and c.name is None:
            c = self.materialize(c, "bool", loc)
        ci = self.to_i1(c, loc) if not c.poison else c
        cname = ci.name if not ci.poison else "%poison"
        if flat_types:
            self.line(f"scf.condition({cname}) {', '.join(args)} : {tys} {self.loc_text(loc)}")
        else:
            self.line(f"scf.condition({cname}) {self.loc_text(loc)}")
        self.indent = saved_indent
        self.line("} do {")
        block_args = ", ".join(f"{a}: {t.mlir()}" for a, t in zip(args2, flat_types))
        self.line(f"^bb0({block_args}):")
        self.indent += 2
        self.env = bind_args(args2)
        self.block(s.body)
        self.close_loop_body(carried, tys, saved_indent, loc)
        self.after_loop(before, carried, res, s.body)

    def close_loop_body(self, carried, tys, saved_indent, loc):
        outs = self.carried_outputs(carried, loc)
        if outs:
            self.line(f"scf.yield {', '.join(v.name for v in outs)} : {tys} {self.loc_text(loc)}")
        else:
            self.line(f"scf.yield {self.loc_text(loc)}")
        self.indent = saved_indent
        self.line(f"}} {self.loc_text(loc)}")

    def carried_outputs(self, carried, loc):
        outs = []
        for n, struct, types in carried:
            cur = self.env.get(n)
            if isinstance(cur, ListVal):
                cur = self.as_value(cur, loc)
            if isinstance(struct, Undefined):  # maybe bound: its value and its flag
                if isinstance(cur, Undefined) and cur.value is not None:
                    flat = _leaves(cur)
                elif all_values(cur):
                    flat = flatten(cur) + [self.weak(True)]
                else:
                    flat = [("undef",)] * (len(types) - 1) + [self.weak(False)]
                    outs += [self.conform(v, t, loc) for v, t in zip(flat, types)]
                    continue
                if any(v.poison for v in flat):
                    outs += [self.conform(("undef",), t, loc) for t in types]
                    continue
            elif cur is None or isinstance(cur, Undefined) or not all_values(cur):
                outs += [self.conform(("undef",), t, loc) for t in types]
                continue
            else:
                flat = flatten(cur)
            if len(flat) != len(types):
                self.error(f"{show(n)} changes its structure inside the loop (a tuple of another length)", loc)
                outs += [self.conform(("undef",), t, loc) for t in types]
                continue
            for v, t in zip(flat, types):
                if v.poison:
                    outs.append(self.conform(("undef",), t, loc))
                elif not (v.weak and v.name is None) and (v.dtype != t.dtype or v.rank != t.rank):
                    self.error(f"{show(n)} changes its type inside the loop ({t} before, {v.type} after)", loc)
                    outs.append(self.conform(("undef",), t, loc))
                else:
                    outs.append(self.conform(v, t, loc))
        return outs

    def after_loop(self, before, carried, res, body):
        """The names a loop carries, bound to its results `res` (their SSA names)."""
        ends = self.env  # where the body ended (the loop's text written)
        self.env = dict(before)
        k = 0
        for n, struct, types in carried:
            self.env[n] = _pack(struct, [TypedValue(nm, t) for nm, t in zip(res[k:k + len(types)], types)])
            k += len(types)
        for n in _assigned_names(body):
            if (n not in self.env or isinstance(self.env.get(n), Undefined)) and not any(n == c[0] for c in carried):
                end = ends.get(n)
                if all_values(end) and any(v.poison for v in flatten(end)):
                    self.env[n] = POISON  # an expression with an error (reported) gave its value
                else:
                    self.env[n] = Undefined(f"'{n}' is bound inside the loop body to a value that cannot be carried "
                                            f"out of the loop (only arrays, and tuples of them, can); bind it before "
                                            f"the loop to use it after")

    def s_For(self, s):
        loc = s.loc
        pairs = self.iterated_pairs(s)
        if pairs is not None:
            self.block(pairs)
            return
        self.tensors_for_loop(s.body, loc)
        before = dict(self.env)
        it = s.iter
        target = s.target
        over_range = isinstance(it, A.Call) and isinstance(it.func, A.Name) and it.func.id == "range" \
            and "range" not in self.env
        if not over_range:
            seq = self.expr(it)
            if isinstance(seq, PackedList):  # a list: its items, by index
                self.block(self.list_loop(s, seq))
                return
            if is_tuple(seq) and not _stackable(seq):
                self.block(self.unrolled(s, seq))
                return
        if not isinstance(target, A.Name):
            self.error("a for loop variable must be a single name (several with enumerate() or zip())", target.loc)
            return
        # The trip count and the value of the loop variable for index k.
        if over_range:
            if it.kwargs or not 1 <= len(it.args) <= 3:
                self.error("range() takes 1 to 3 integer arguments", it.loc)
                return
            vals = [self.as_value(self.expr(a), loc) for a in it.args]
            if any(not isinstance(v, TypedValue) or v.poison for v in vals):
                self.block_checked(s.body)
                return
            for v, a in zip(vals, it.args):
                if v.rank != 0 or not (is_int(v.dtype) or is_bool(v.dtype)):
                    self.error(f"range() arguments must be integer scalars, got {v.type}", a.loc)
                    return
            if len(vals) == 1:
                start, stop, step = self.weak(0), vals[0], self.weak(1)
            elif len(vals) == 2:
                start, stop, step = vals[0], vals[1], self.weak(1)
            else:
                start, stop, step = vals
            if step.name is None and step.const == 0:
                self.error("range() step must not be zero", it.loc)
                return
            start, stop, step = (self.cast(self.materialize(v, "i64", loc), "i64", loc) if v.name else v
                                 for v in (start, stop, step))

            def loop_var(k_index):
                k = self.op("from_index", [k_index], loc=loc)
                if step.name is None and step.const == 1 and start.name is None and start.const == 0:
                    return k
                return self.binop("+", start, self.binop("*", k, step, loc), loc)

            if all(v.name is None for v in (start, stop, step)):
                trip = len(range(start.const, stop.const, step.const))
                n_index = self.index_const(trip, loc)
            else:
                n_index = self.op("range_len", [self.materialize(v, "i64", loc) for v in (start, stop, step)], loc=loc)
        else:
            if is_tuple(seq):  # a tuple of values of one type: a loop over them stacked
                seq = ListVal(list(seq), it.loc)
            seq = self.as_value(seq, loc)
            if not isinstance(seq, TypedValue) or seq.poison:
                if not (isinstance(seq, TypedValue) and seq.poison):
                    self.error("a for loop iterates over range(...), an array or a tuple", it.loc)
                self.block_checked(s.body)
                return
            if seq.rank == 0:
                self.error(f"cannot iterate over a scalar ({seq.type})", it.loc)
                return
            d = seq.type.shape[0]
            n_index = self.index_const(d) if isinstance(d, int) else self.op(
                "to_index", [self.op("dim", [seq], {"axis": 0}, loc)], loc=loc)

            def loop_var(k_index):
                k = self.op("from_index", [k_index], loc=loc)
                return self.getitem(seq, [k], loc)

        def body(k_index=None):
            if k_index is None:
                k_index = TypedValue("%probe_iv", INDEX)
            self.env[target.id] = loop_var(k_index)
            self.block(s.body)

        if n_index.const == 0:
            return
        if s.stops:
            self.for_until(s, n_index, loop_var, loc)
            return
        carried = self.loop_carried(body, before, loc, s)
        target_bound = s.body + [A.Assign(loc, [target], A.Const(loc, 0))]
        if self.probed_only(before, carried, target_bound):
            return
        inits = self.carried_inits(carried, before, loc)
        flat_types = [t for _, _, ts in carried for t in ts]
        head, res = self.results(len(flat_types))
        iv = self.fresh()
        zero, one = self.index_const(0, loc), self.index_const(1, loc)
        args = [self.fresh() for _ in flat_types]
        tys = ", ".join(t.mlir() for t in flat_types)
        iters = ""
        if flat_types:
            iters = " iter_args(" + ", ".join(f"{a} = {v.name}" for a, v in zip(args, inits)) + f") -> ({tys})"
        self.line(f"{head}scf.for {iv} = {zero.name} to {n_index.name} step {one.name}{iters} {{")
        saved_indent = self.indent
        self.indent += 2
        env = dict(before)
        k = 0
        for n, struct, types in carried:
            env[n] = _pack(struct, [TypedValue(args[k + i], t) for i, t in enumerate(types)])
            k += len(types)
        self.env = env
        body(k_index=TypedValue(iv, INDEX))
        self.close_loop_body(carried, tys, saved_indent, loc)
        self.after_loop(before, carried, res, target_bound)

    def unrolled(self, s, seq: tuple) -> list:
        """`for t in tup` over a tuple whose items differ (structures, other types or shapes): the
        body once per item, the loop variable bound to it, each iteration after the first skipped
        once a `break` or `return` flag is set. Written once per loop and length (probes and
        emissions see the same statements, each iteration its own copy)."""
        done = self.__dict__.setdefault("unrolled_loops", {})
        key = (id(s), len(seq))
        if key not in done:
            loc = s.loc
            items = A.Name(loc, f"$tuple{self.fresh()[1:]}")
            stmts = []
            for i in range(len(seq)):
                one = [A.Assign(loc, [s.target], A.Subscript(loc, items, [A.Const(loc, i)])), *copy.deepcopy(s.body)]
                if i and s.stops:
                    test = A.BoolOp(loc, "and", [A.UnaryOp(loc, "not", A.Name(loc, f)) for f in s.stops]) \
                        if len(s.stops) > 1 else A.UnaryOp(loc, "not", A.Name(loc, s.stops[0]))
                    one = [A.If(loc, test, one, [])]
                stmts += one
            done[key] = (items.id, stmts)
        name, stmts = done[key]
        self.env[name] = seq
        return stmts

    def list_loop(self, s, seq):
        """`for x in xs` over a list: the list bound once, then, where the iterations only add up
        (autobatch.py), the body mapped over the items at once; else a loop over range(len(xs))
        that binds x to xs[k]. Written once per loop (its probes and its emissions see the same
        statements)."""
        done = self.__dict__.setdefault("list_loops", {})
        if id(s) not in done:
            loc = s.loc
            tag = self.fresh()[1:]
            q, k = A.Name(loc, f"$list{tag}"), A.Name(loc, f"$list{tag}_k")
            batched = autobatched(self, s, q.id)
            if batched is not None:
                done[id(s)] = (q.id, batched)
                self.env[q.id] = seq
                return batched
            loop = A.For(loc, k, A.Call(loc, A.Name(loc, "range"), [A.Call(loc, A.Name(loc, "len"), [q])]),
                         [A.Assign(loc, [s.target], A.Subscript(loc, q, [k])), *s.body], stops=s.stops)
            done[id(s)] = (q.id, [loop])
            self.__dict__.setdefault("rewritten_from", {})[id(loop)] = id(s)
        name, stmts = done[id(s)]
        self.env[name] = seq
        return stmts

    def iterated_pairs(self, s):
        """`for i, x in enumerate(xs)` and `for a, b in zip(xs, ys)` as statements of the loops dg
        has: the sequences bound once, then a loop over an index that binds the target from them
        (zip stops at the shorter, as Python's does). Written once per loop (its probes and its
        emissions see the same statements); None for any other loop."""
        it = s.iter
        if not (isinstance(it, A.Call) and isinstance(it.func, A.Name) and it.func.id in ("enumerate", "zip")
                and it.func.id not in self.env and not it.kwargs and isinstance(s.target, (A.Tuple, A.List))):
            return None
        done = getattr(self, "pair_loops", None)
        if done is None:
            done = self.pair_loops = {}
        if id(s) not in done:
            loc = s.loc
            tag = self.fresh()[1:]
            k = A.Name(loc, f"$pairs{tag}_k")
            bind, lengths = [], []

            def items(e):
                """The item at k of an iterable: enumerate() and zip() of iterables, nested as in
                Python, or a sequence (bound once)."""
                if isinstance(e, A.Call) and isinstance(e.func, A.Name) and e.func.id in ("enumerate", "zip") \
                        and e.func.id not in self.env and not e.kwargs:
                    if e.func.id == "enumerate" and len(e.args) != 1:
                        raise _NotPairs(self.error("enumerate() takes one sequence here", e.loc))
                    if e.func.id == "zip" and not e.args:
                        raise _NotPairs(self.error("zip() needs at least one sequence", e.loc))
                    inner = [items(a) for a in e.args]
                    return A.Tuple(loc, [k, *inner] if e.func.id == "enumerate" else inner)
                q = A.Name(loc, f"$pairs{tag}_{len(bind)}")
                bind.append(A.Assign(loc, [q], e))
                lengths.append(A.Call(loc, A.Name(loc, "len"), [q]))
                return A.Subscript(loc, q, [k])

            try:
                value = items(it)
            except _NotPairs as e:
                return e.result
            n = lengths[0]
            for other in lengths[1:]:  # (zip stops at the shortest)
                n = A.Call(loc, A.Name(loc, "minimum"), [n, other])
            loop = A.For(loc, k, A.Call(loc, A.Name(loc, "range"), [n]), [A.Assign(loc, [s.target], value), *s.body],
                         stops=s.stops)
            done[id(s)] = bind + [loop]
            self.__dict__.setdefault("rewritten_from", {})[id(loop)] = id(s)
        return done[id(s)]

    def for_until(self, s, n_index, loop_var, loc):
        """A `for` that a `break` or `return` may end (controlflow's `stops` flags): a `while` over
        its iterations that also tests the flags, so that it ends when one is set instead of
        running the rest of its trip count with nothing to do. One `while` per `for`, written
        once: what this emission of it needs (the trip count, the loop variable) it reads from
        `loop_context`, which is also part of what its probes are remembered under."""
        rewritten = self.until_loops.get(id(s))
        if rewritten is None:
            rewritten = self.until_loops[id(s)] = self._until_loop(s, loc)
            self.__dict__.setdefault("rewritten_from", {})[id(rewritten[1])] = id(s)
        entry, loop = rewritten
        self.loop_context[id(loop)] = (_signature(n_index), self.loop_context_of(loop_var))
        self.until_parts[id(loop)] = (n_index, loop_var)
        self.block(entry + [loop])

    def _until_loop(self, s, loc):
        tag = self.fresh()[1:]
        k, n = A.Name(loc, f"$for{tag}_k"), A.Name(loc, f"$for{tag}_n")
        test = A.BoolOp(loc, "and", [A.UnaryOp(loc, "not", A.Name(loc, f)) for f in s.stops]
                        + [A.Compare(loc, k, ["<"], [n])])
        loop = A.While(loc, test, [])
        parts = lambda: self.until_parts[id(loop)]  # noqa: E731 (what this emission of the loop uses)
        var = Computed(loc, lambda: parts()[1](self.op("to_index", [self.env[k.id]], loc=loc)))
        loop.body = [A.Assign(loc, [s.target], var), *s.body, A.Assign(loc, [k], A.BinOp(loc, "+", k, A.Const(loc, 1)))]
        entry = [A.Assign(loc, [n], Computed(loc, lambda: self.op("from_index", [parts()[0]], loc=loc))),
                 A.Assign(loc, [k], Computed(loc, lambda: self.materialize(self.weak(0), "i64", loc)))]
        return entry, loop

    @staticmethod
    def loop_context_of(loop_var):
        """The signatures of the values a loop-variable function closes over."""
        cells = loop_var.__closure__ or ()
        return tuple(_signature(c.cell_contents) if isinstance(c.cell_contents, TypedValue) else ("cell", id(c.cell_contents))
                     for c in cells)

    def e_Computed(self, e):
        return e.make()

    def block_checked(self, stmts):
        saved = dict(self.env)
        self.mod.quiet += 1
        try:
            self.block(stmts)
        finally:
            self.mod.quiet -= 1
        self.env = saved


class _NotPairs(Exception):
    """An enumerate() or zip() that cannot be a loop's: `result` is what its error returned."""

    def __init__(self, result):
        self.result = result
