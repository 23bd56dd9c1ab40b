"""The function emitter: one class made of the emitter's parts."""
from __future__ import annotations

from dg.core.errors import Loc
from dg.core.types import Sym, scalar

from .. import controlflow
from ..values import POISON, Static, TypedValue, flatten, leaf_paths, unflatten_like
from .calls import Calls
from .control import ControlFlow
from .core import EmitterCore
from .expressions import Expressions
from .statements import Statements
from .types import leaf_types


def _named_sizes(param_types) -> str:
    """The function attribute `dg.sizes` naming the arguments' symbolic sizes, one list of axis
    names ("" for a static or unnamed axis) per argument, when any has a name. A call from
    Python checks that equal names are equal sizes; the lowering relies on it (lowering.sizes)."""
    def name(d):
        plain = isinstance(d, Sym) and d.name and d.name.isprintable() and not set(d.name) & set('"\\')
        return d.name if plain else ""  # a name MLIR's string syntax would need escapes for stays out

    named = [[name(d) for d in t.shape] if t is not None else [] for t in param_types]
    if not any(n for axes in named for n in axes):
        return ""
    text = ", ".join("[" + ", ".join(f'"{n}"' for n in axes) + "]" for axes in named)
    return f" attributes {{dg.sizes = [{text}]}}"


class FunctionEmitter(Statements, ControlFlow, Expressions, Calls, EmitterCore):
    def __init__(self, mod, source, spec):
        super().__init__(indent=2)
        self.mod = mod
        self.source = source
        self.spec = spec
        self.fd = controlflow.rewrite(spec.fd)
        self.env: dict = {}
        self.dim_syms: dict = {}
        self.sizes: dict = {}  # size name -> (value, axis) that has it: parameters first (emit)
        self.sym_sources: dict = {}  # Sym.id -> (parameter, axis) of a size the parameters have
        self.cur_loc: Loc | None = spec.fd.loc  # the statement being emitted
        self.last_def = None  # (lines, index, ssa name, loc) of the last single-result op
        self.loops_probed: dict = {}  # ControlFlow.loop_carried's answers inside probes
        self.loop_names: dict = {}  # id(loop) -> the names it mentions
        self.loop_context: dict = {}  # id(loop) -> what it captured besides, as a signature
        self.until_loops: dict = {}  # id(for statement) -> its rewriting as a while (for_until)
        self.until_parts: dict = {}  # id(that while) -> (trip count, loop variable function)
        self.weak_returns: set = set()  # positions of the result an early return gave a weak literal
        self.strong_returns: dict = {}  # position -> element types the other returns gave it

    # ------------------------------------------------------------ the function
    def emit(self):
        fd = self.fd
        spec = self.spec
        params = []
        for p, t in zip(fd.params, spec.param_types):
            if t is None:  # `dg check` of an unannotated parameter: unknown, errors through it are not reported
                self.env[p.name] = POISON
                continue
            leaves = []
            for lt, path in zip(flatten(t), leaf_paths(t)):
                if isinstance(lt, Static):  # a literal the call gave: the literal again
                    leaves.append(TypedValue(None, scalar(lt.dtype), const=lt.value, weak=True))
                    continue
                plain = not path and p.name.isidentifier() and p.name.isascii()
                name = f"%{p.name}" if plain else self.fresh()
                v = TypedValue(name, lt)
                leaves.append(v)
                for axis, d in enumerate(lt.shape):
                    if isinstance(d, Sym):
                        self.sym_sources.setdefault(d.id, (v, axis))
                        if d.name:
                            self.sizes.setdefault(d.name, (v, axis))
                params.append(f"{name}: {lt.mlir()} {self.loc_text(p.loc, p.name + path)}")
            self.env[p.name] = unflatten_like(t, leaves)
        self.lines = []
        self.indent = 4
        self.block(fd.body)
        ret = self.env.get("$return")
        proto = None
        if ret is not None:
            proto, ret_vals = ret
        else:
            ret_vals = []
        types = [v.type for v in ret_vals]
        if any(t is None for t in types):
            types = []
            ret_vals = []
        preset = spec.result_types
        if ret_vals and preset is not None and len(preset) == len(ret_vals) and all(
                t is not None and t.dtype == v.dtype and t.rank == v.rank for t, v in zip(preset, ret_vals)):
            # Recursive calls were typed with the declared or assumed result types.
            ret_vals = [self.conform(v, t, self.env.get("$return_loc", fd.loc)) for v, t in zip(ret_vals, preset)]
            types = [v.type for v in ret_vals]
            proto = unflatten_like(proto, ret_vals)
        ret_loc = self.env.get("$return_loc", fd.loc)
        body = list(self.lines)
        if ret_vals:
            body.append(f"    return {', '.join(v.name for v in ret_vals)} : {', '.join(t.mlir() for t in types)} {self.loc_text(ret_loc)}")
        else:
            body.append(f"    return {self.loc_text(ret_loc)}")
        rtypes = ", ".join(t.mlir() for t in types)
        header = f"  func.func @{spec.symbol}({', '.join(params)}) -> ({rtypes}){_named_sizes(leaf_types(spec.param_types))} {{"
        text = header + "\n" + "\n".join(body) + f"\n  }} {self.loc_text(fd.loc, fd.name)}"
        return text, proto
