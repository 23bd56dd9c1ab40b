"""dg: a small deep-learning language embedded in Python.

    import dg
    m = dg.load("model.dg")            # or dg.loads(text)
    y = m.forward(w, x)

    @dg.function
    def f(x: dg.f32["N", 3]) -> dg.f32:
        return sum(tanh(x) * 2.0)

See LANGUAGE.md for the language; `dg --help` for the command line.
"""
from __future__ import annotations

from pathlib import Path

from .core.errors import DgError, DgRuntimeError, DgSyntaxError, DgTypeError, register_source
from .dsl.embed import TYPES

__all__ = [
    "load", "loads", "function", "DgError", "DgSyntaxError", "DgTypeError", "DgRuntimeError",
    "f16", "bf16", "f32", "f64", "i32", "i64", "bool_",
    "grad", "value_and_grad", "vjp", "jvp",
]
__version__ = "0.1.0"


def load(path, mode: str | None = None, device: str | None = None):
    """Load a `.dg` file; its functions become attributes of the result."""
    from .runtime.program import DgModule, source_from_file

    return DgModule(source_from_file(path), mode, device)


def loads(text: str, mode: str | None = None, device: str | None = None, filename: str = "<string>"):
    """Load dg source text (imports are looked up in the current folder and DG_PATH)."""
    from .runtime.program import DgModule, source_from_text

    register_source(filename, text)
    return DgModule(source_from_text(text, filename, Path.cwd()), mode, device)


def function(fn=None, *, mode: str | None = None, device: str | None = None):
    """Decorator: a Python function whose body is dg syntax, run by dg."""
    from .runtime.embedded import make_function

    if fn is None:
        return lambda f: make_function(f, mode, device)
    return make_function(fn, mode, device)


def grad(fn, wrt=0):
    """The gradient of a scalar-valued dg function with respect to argument `wrt` (an int or a tuple)."""
    from .runtime.autodiff_api import GradFunction

    return GradFunction("grad", fn, wrt)


def value_and_grad(fn, wrt=0):
    """Like `grad`, but calls return `(value, gradient)`."""
    from .runtime.autodiff_api import GradFunction

    return GradFunction("value_and_grad", fn, wrt)


def vjp(fn, *primals):
    """`(fn(*primals), pullback)`; `pullback(cotangent)` returns one cotangent per primal."""
    from .runtime.autodiff_api import vjp as _vjp

    return _vjp(fn, *primals)


def jvp(fn, primals, tangents):
    raise DgError("dg.jvp (forward mode) is not available yet; use dg.vjp or dg.grad")


f16, bf16, f32, f64, i32, i64 = (TYPES[n] for n in ("f16", "bf16", "f32", "f64", "i32", "i64"))
bool_ = TYPES["bool"]
