"""The module the autodiff pass writes: its functions, the derived functions' names and texts.

Expects: the functions of a verified dg module (lowering/irmodel.py), some of
them gradient declarations (`dg.kind`, `dg.of`, `dg.wrt`). Guarantees: a
`Derivatives` object names each derived function before it is written (so
that recursion finds it), keeps the text of every function written, and
gives the whole module back as text (`module_text`): the originals copied,
the declarations not defined kept. A declaration the pass defined is read
back when a function derived from it is asked for (a gradient differentiated
again). It also remembers, once per loop, which carried values need no tape.

`copy_block` and `copy_op` write a block's ops again, unchanged, into another
function: what every sweep does with the ops it does not differentiate.
"""
from __future__ import annotations

import itertools

from dg.core.errors import DgError, DgTypeError
from dg.core.locations import loc_of
from dg.core.writer import Value, module_text
from dg.dialects.rules import RuleBuilder
from dg.dialects.dialect import parse

from ..irmodel import Block, Func, Op, read_module
from . import prune
from .activity import ALWAYS_ACTIVE, TERMINATORS, callee, is_float, slot_appends, slot_passed_on, walk_ops

EFFECTS = ("print", "breakpoint", "assert", "check")  # not repeated when a forward is recomputed


def ints(text: str) -> tuple:
    """`array<i64: 0, 2>` -> (0, 2)."""
    body = text.split(":", 1)[1].rstrip(">") if ":" in text else ""
    return tuple(int(x) for x in body.split(",") if x.strip())


def unquoted(text: str) -> str:
    return text.strip().strip('"')


# ---------------------------------------------------------------- copying
def copy_op(op: Op, env: dict, w: RuleBuilder, effects: bool) -> None:
    """Write `op` again (its regions too) with its operands mapped by env; env maps its results."""
    w.loc = op.loc
    if op.dg in EFFECTS and not effects:
        return
    if not op.regions:
        res = w.op(op.name, [env[o] for o in op.operands], [r.type for r in op.results], op.attrs)
        env.update(zip(op.results, res))
        return

    def region(b: Block):
        def write(w2):
            args = []
            for a in b.args:
                env[a] = w2.value(a.type, "a")
                args.append(env[a])
            if op.name != "scf.if":
                w2.block_header(args)
            copy_block(b, env, w2, effects)
            t = b.ops[-1]
            w2.loc = t.loc
            w2.op(t.name, [env[o] for o in t.operands], [], t.attrs)
        return write

    res = w.op(op.name, [env[o] for o in op.operands], [r.type for r in op.results], op.attrs,
               regions=[region(b) for b in op.regions])
    env.update(zip(op.results, res))


def copy_block(block: Block, env: dict, w: RuleBuilder, effects: bool) -> None:
    """Write the ops of `block` again (its terminator excepted); without `effects`, no print,
    breakpoint or check is repeated (a forward recomputed for a reverse sweep)."""
    for op in block.ops:
        if op.name not in TERMINATORS:
            copy_op(op, env, w, effects)


# ---------------------------------------------------------------- the module
class Derivatives:
    """The functions of the module being written and the derived ones, by name."""

    def __init__(self, funcs: list[Func]):
        self.funcs = {f.sym: f for f in funcs}
        self.order = [f.sym for f in funcs]
        self.counter = itertools.count()
        self.names: dict = {}  # (symbol, mask, slots) or ("jvp", symbol, mask) -> derived function's name
        self.texts: dict = {}  # symbol -> function text, for every function written
        self.placeholders: set = set()  # results of dg.undef: the slot of a value not given yet
        self.tapes: set = set()  # results of dg.tape_alloc
        self.untaped_slots: dict = {}  # loop op -> untaped(op)
        self.appended_slots: dict = {}  # loop op -> the untaped slots that are tapes it appends to
        self.cycles: dict = {}  # function -> whether it can call itself (recursive)
        self.pruned: set = set()  # derived functions whose dead code goes once the module is whole (prune.py)
        # The declarations' attributes (`dg.kind`, ...), kept once their bodies are written
        self.declared = {f.sym: dict(f.attrs) for f in funcs if f.body is None and "dg.kind" in f.attrs}
        self.note_placeholders(funcs)
        self.checkpoints = {f.sym: (unquoted(f.attrs["dg.of"]).lstrip("@"), int(f.attrs["dg.slots"].split(":")[0]))
                            for f in funcs if unquoted(f.attrs.get("dg.kind", "")) == "checkpoint"}

    def declarations(self) -> list:
        """The gradient declarations (`dg.kind`) not yet defined, in the module's order."""
        return [s for s in self.order if self.funcs[s].body is None and "dg.kind" in self.funcs[s].attrs]

    def note_placeholders(self, funcs) -> None:
        """The placeholders and tapes in `funcs`, whose loop slots `untaped` looks for."""
        for f in funcs:
            if f.body is not None:
                for op in walk_ops(f.body):
                    if op.dg in ("undef", "tape_alloc"):
                        (self.placeholders if op.dg == "undef" else self.tapes).update(op.results)

    def recursive(self, sym: str) -> bool:
        """Whether function `sym` can call itself (through the functions it calls)."""
        if sym not in self.cycles:
            seen, todo = set(), list(self.callees(sym))
            while todo:
                s = todo.pop()
                if s not in seen:
                    seen.add(s)
                    todo += self.callees(s)
            self.cycles[sym] = sym in seen
        return self.cycles[sym]

    def callees(self, sym: str) -> list:
        f = self.funcs.get(sym)
        if f is None or f.body is None:
            return [unquoted(f.attrs["dg.of"]).lstrip("@")] if f is not None and "dg.of" in f.attrs else []
        return [callee(op) for op in walk_ops(f.body) if op.name == "func.call"]

    def messages(self, sym: str) -> bool:
        """Whether function `sym` sends or receives a message between processes (an op of
        activity.ALWAYS_ACTIVE in it or in a function it calls): a call of it is then
        differentiated as those ops are, on both sides alike."""
        key = ("messages", sym)
        if key not in self.cycles:
            self.cycles[key] = False  # (a recursion: decided by its other calls)
            f = self.funcs.get(sym)
            self.cycles[key] = f is not None and f.body is not None and self.messages_in([f.body]) or any(
                self.messages(c) for c in self.callees(sym))
        return self.cycles[key]

    def messages_in(self, blocks: list) -> bool:
        """Whether ops in `blocks` send or receive messages (themselves, or through a call)."""
        return any(op.dg in ALWAYS_ACTIVE or op.name == "func.call" and self.messages(callee(op))
                   for b in blocks for op in walk_ops(b))

    def checkpointed(self, sym: str):
        """(the function, its slot count) when `sym` is a `checkpoint(f, slots=c)` declaration."""
        return self.checkpoints.get(sym)

    # ------------------------------------------------------------ loop slots
    def untaped(self, op: Op) -> set:
        """The positions of a loop's carried values that need no tape: an early return's slot,
        which starts as a placeholder (dg.undef) and which the body only hands on (or replaces
        as it returns; a loop inside may hand it on in turn). Until the loop's last step it holds
        the placeholder, which the reverse sweep uses in its place; a tape would see it change
        size when the value comes (a returned value whose size no parameter gives). And a tape
        the loop appends to (`slot_appends`): the reverse sweep uses its final value, which
        holds every row an iteration reads. Taping it would keep a copy per iteration, and see it
        change size as it grows. Worked out once per loop (the reverse sweep records a loop again
        for each step around it)."""
        skip = self.untaped_slots.get(op)
        if skip is None:
            inits = op.operands[3:] if op.name == "scf.for" else op.operands
            appended = self.appended_slots[op] = {i for i, o in enumerate(inits)
                                                  if o in self.tapes and slot_appends(op, i)}
            skip = self.untaped_slots[op] = appended | {i for i, o in enumerate(inits)
                                                        if o in self.placeholders and slot_passed_on(op, i)}
            for i in skip - appended:  # a loop inside gets the slot as its placeholder in turn
                for r in op.regions:
                    self.placeholders.add(r.args[1 + i if op.name == "scf.for" else i])
        return skip

    def untaped_value(self, op: Op, i: int, env: dict) -> Value:
        """What the reverse sweep takes for a loop's untaped slot i in every iteration: the tape's
        final value, or the placeholder."""
        if i in self.appended_slots[op]:
            return env[op.results[i]]
        return env[(op.operands[3:] if op.name == "scf.for" else op.operands)[i]]

    # ------------------------------------------------------------ derived functions
    def derive(self, key, sym: str, tag: str, mask: tuple, what: str, suffix: str = "") -> tuple:
        """(name, function) for a function derived from `sym` (`sym__TAG_<mask><suffix>`), named
        before it is made (so that recursion finds it). A gradient declaration is read back first
        (it is defined before anything derived from it: lowering/ad/__init__.py)."""
        name = f"{sym}__{tag}_{'_'.join(map(str, mask)) if mask else 'none'}{suffix}"
        while name in self.funcs or name in self.texts:
            name += "_"
        self.names[key] = name
        f = self.funcs[sym]
        if f.body is None:
            if sym not in self.texts:
                raise DgError(f"'{sym}' is differentiated before it is defined: a gradient that "
                              f"depends on itself", loc_of(f.location))
            f = self.reread(sym)
        for i in mask:
            if not is_float(f.args[i]):
                raise DgTypeError(f"cannot {what} argument {i} of '{sym}': it is {f.args[i].type}, not a float",
                                  loc_of(f.location))
        return name, f

    def reread(self, sym: str) -> Func:
        """The functions the pass wrote (gradients), read back so that they can be differentiated
        in turn; `sym`'s."""
        for f in read_module(parse(self.module_text())):
            if f.sym not in self.funcs or self.funcs[f.sym].body is None:
                self.funcs[f.sym] = f
                self.note_placeholders([f])
        return self.funcs[sym]

    def new_writer(self) -> RuleBuilder:
        return RuleBuilder(self.counter)

    def start(self, f: Func):
        """A writer for a new function with f's parameters: (writer, env mapping f's args, new args)."""
        w = self.new_writer()
        args = [w.value(a.type, "arg") for a in f.args]
        return w, dict(zip(f.args, args)), args

    def write(self, sym: str, args: list, result_types: list, loc: str, w: RuleBuilder,
              sizes: str | None = None, donated: list | str | None = None) -> None:
        """Keep the text of function `sym`, whose body `w` wrote. `sizes`: the copied function's
        `dg.sizes` attribute text (dsl/emit), if it has one; `donated`: the positions of the
        arguments its callers hand over (`dg.donated`: nothing reads them once passed, so the
        function may write them in place), or that attribute's text."""
        if isinstance(donated, list):
            donated = f"array<i64{': ' if donated else ''}{', '.join(map(str, donated))}>" if donated else None
        attrs = ", ".join(f"dg.{k} = {v}" for k, v in (("sizes", sizes), ("donated", donated)) if v)
        extra = f" attributes {{{attrs}}}" if attrs else ""
        head = (f"  func.func @{sym}({', '.join(f'{a.name}: {a.type} {loc}' for a in args)}) -> "
                f"({', '.join(result_types)}){extra} {{")
        self.texts[sym] = "\n".join([head] + w.lines + [f"  }} {loc}"])

    # ------------------------------------------------------------ the module's text
    def copy_function(self, f: Func) -> None:
        w, env, args = self.start(f)
        copy_block(f.body, env, w, effects=True)
        ret = f.body.ops[-1]
        w.loc = ret.loc
        w.op("func.return", [env[o] for o in ret.operands], [])
        self.write(f.sym, args, f.result_types, f.loc, w, f.attrs.get("dg.sizes"), f.attrs.get("dg.donated"))

    def prune(self) -> None:
        """The dead code of the functions in `pruned` removed (prune.py), each once every function
        it reaches is written."""
        funcs = {f.sym: f for f in read_module(parse(self._assembled()))}
        pure = prune.pure_functions(list(funcs.values()))
        for sym in sorted(self.pruned):
            reached, todo = set(), [sym]
            while todo:
                s = todo.pop()
                if s not in reached:
                    reached.add(s)
                    written = s in funcs and funcs[s].body is not None
                    todo += [callee(op) for op in walk_ops(funcs[s].body) if op.name == "func.call"] if written else []
            if all(s in funcs and funcs[s].body is not None for s in reached):
                prune.prune(funcs[sym].body, pure)
                self.copy_function(funcs[sym])
                self.pruned.discard(sym)

    @staticmethod
    def declaration(f: Func) -> str:
        attrs = ", ".join(f"{k} = {v}" for k, v in f.attrs.items())
        return (f"  func.func private @{f.sym}({', '.join(a.type for a in f.args)}) -> "
                f"({', '.join(f.result_types)}){' attributes {' + attrs + '}' if attrs else ''} {f.loc}")

    def module_text(self) -> str:
        """The whole module as it stands: originals not written yet are copied, declarations kept;
        the functions to prune pruned where everything they call is written."""
        for sym in self.order:
            if sym not in self.texts and self.funcs[sym].body is not None:
                self.copy_function(self.funcs[sym])
        if self.pruned:
            self.prune()
        return self._assembled()

    def _assembled(self) -> str:
        """The declarations not written yet and the functions written, as one module's text."""
        decls = [self.declaration(self.funcs[s]) for s in self.order
                 if self.funcs[s].body is None and s not in self.texts]
        return module_text(decls + list(self.texts.values()))
