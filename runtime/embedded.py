"""Sources for `@dg.function`: one Python function each.

Names a dg body calls are looked up among the other `@dg.function`s
visible from the Python function's globals, then the built-ins.
"""
from __future__ import annotations

from dg.dsl import ast as A
from dg.dsl.embed import function_ast
from dg.dsl.values import FuncRef

from .program import DgFunction, Source, check_mode, default_check_numerics, default_device, default_mode


class EmbeddedSource(Source):
    def __init__(self, fn, fd: A.FuncDef):
        self.file = fd.loc.file
        self.ast = A.Module(fd.loc, fd.loc.file, [], [fd])
        self.search_dir = None
        self.funcs = {fd.name: fd}
        self.imported = {}
        self.consts = {}
        self.py_globals = fn.__globals__

    def resolve(self, name: str, exported_only: bool = False):
        if name in self.funcs:
            return FuncRef(self, name)
        obj = self.py_globals.get(name)
        if isinstance(obj, DgFunction):
            return FuncRef(obj.source, obj.name)
        return None


def make_function(fn, mode=None, device=None, check_numerics=None, autobatch=None) -> DgFunction:
    fd = function_ast(fn)
    src = EmbeddedSource(fn, fd)
    mode = mode or default_mode()
    device = device or default_device(mode)
    check_mode(mode, device)
    numerics = default_check_numerics() if check_numerics is None else bool(check_numerics)
    f = DgFunction(src, fd.name, mode, device, numerics, autobatch)
    f.__wrapped__ = fn
    f.__doc__ = fn.__doc__
    return f
