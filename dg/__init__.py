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
from .core.tracebacks import user_facing
from .dsl.embed import TYPES

__all__ = [
    "load", "loads", "function", "DgError", "DgSyntaxError", "DgTypeError", "DgRuntimeError",
    "f16", "bf16", "f32", "f64", "i32", "i64", "bool_",
    "grad", "value_and_grad", "vjp", "jvp", "checkpoint", "vmap", "saved_residuals", "dist", "save", "load_params",
    "export",
]
__version__ = "0.1.0"

from . import dist  # noqa: E402  (dg.dist: data-parallel collectives from Python)
from .params import load_params, save  # noqa: E402  (parameters to .npz files and back)


@user_facing
def load(path, mode: str | None = None, device: str | None = None, check_numerics: bool | None = None,
         autobatch: bool | None = None):
    """Load a `.dg` file; its functions become attributes of the result. `mode`: "compiled",
    "interp" or "shadow" (both, compared op by op; default DG_MODE, else "compiled");
    `check_numerics`: the first op that makes a NaN or an infinity raises (default
    DG_CHECK_NUMERICS); `autobatch`: a `for` over a list whose iterations only add up runs
    batched, as `vmap` would (default DG_AUTOBATCH, else on)."""
    from .runtime.program import DgModule, source_from_file

    return DgModule(source_from_file(path), mode, device, check_numerics, autobatch)


@user_facing
def loads(text: str, mode: str | None = None, device: str | None = None, filename: str = "<string>",
          check_numerics: bool | None = None, autobatch: bool | None = None):
    """Load dg source text (imports are looked up in the current folder and DG_PATH); the
    options as for `load`."""
    from .runtime.program import DgModule, source_from_text

    register_source(filename, text)
    return DgModule(source_from_text(text, filename, Path.cwd()), mode, device, check_numerics, autobatch)


@user_facing
def function(fn=None, *, mode: str | None = None, device: str | None = None, check_numerics: bool | None = None,
             autobatch: bool | None = None):
    """Decorator: a Python function whose body is dg syntax, run by dg (the options as for `load`)."""
    from .runtime.embedded import make_function

    if fn is None:
        return lambda f: make_function(f, mode, device, check_numerics, autobatch)
    return make_function(fn, mode, device, check_numerics, autobatch)


@user_facing
def grad(fn, wrt=0):
    """The gradient of a scalar-valued dg function with respect to argument `wrt` (an int or a tuple)."""
    from .runtime.autodiff_api import GradFunction

    return GradFunction("grad", fn, wrt)


@user_facing
def value_and_grad(fn, wrt=0):
    """Like `grad`, but calls return `(value, gradient)`."""
    from .runtime.autodiff_api import GradFunction

    return GradFunction("value_and_grad", fn, wrt)


@user_facing
def vjp(fn, *primals):
    """`(fn(*primals), pullback)`; `pullback(cotangent)` returns one cotangent per primal."""
    from .runtime.autodiff_api import vjp as _vjp

    return _vjp(fn, *primals)


def saved_residuals(fn, wrt=0):
    """`saved_residuals(f, wrt)(*args)`: what the reverse sweep of f's gradient keeps, per `.dg`
    line (values, loop tapes, checkpoint slots; iterations and recomputed ones): `.rows`,
    `.total_bytes`, and `str()` a table."""
    from .runtime.autodiff_api import saved_residuals as _saved

    return _saved(fn, wrt)


@user_facing
def vmap(fn, in_axes=0, out_axes=0):
    """`fn` mapped over a batch: `in_axes` one entry per argument (an int, the axis to map over;
    None, shared by every example) or one for all; results stacked along `out_axes`. Runs as
    batched operations, through control flow and recursion that differ by example (§3.1)."""
    from .runtime.autodiff_api import VmapFunction

    return VmapFunction(fn, in_axes, out_axes)


@user_facing
def checkpoint(fn, slots=None):
    """`fn`, whose gradients recompute its forward from its arguments; with `slots`, every loop in
    them keeps at most that many snapshots of its carried values (memory O(slots) per loop)."""
    from .runtime.autodiff_api import CheckpointFunction

    return CheckpointFunction(fn, slots)


@user_facing
def jvp(fn, primals, tangents):
    """`(fn(*primals), tangent)`: forward mode along `tangents` (one per primal, of its structure);
    `dg.jvp(dg.grad(f), (x,), (v,))` is a Hessian-vector product."""
    from .runtime.autodiff_api import jvp as _jvp

    return _jvp(fn, primals, tangents)


f16, bf16, f32, f64, i32, i64 = (TYPES[n] for n in ("f16", "bf16", "f32", "f64", "i32", "i64"))
bool_ = TYPES["bool"]


@user_facing
def export(fns, path, example_args=None, name: str | None = None, blas: str = "auto"):
    """Build a native library of compiled dg functions that runs with no Python: writes
    `lib<name>.so`, `lib<name>.a` and `<name>.h` into folder `path` and returns their paths
    (`.shared`, `.static`, `.header`). `fns`: a dg function (or `dg.grad` and the like of one),
    a list, or a dict C name -> function; `example_args`: the arguments that choose each one's
    specialization, as a first call would (a tuple for one function, else a list or a dict by
    name; None: the annotations); `name`: the library's (default: the source file's stem);
    `blas`: "auto" links the BLAS dg calls here, "none" runs products as dg's own loops.
    docs/export.md describes the C interface."""
    from .runtime.export import export as build

    return build(fns, path, example_args, name=name, blas_choice=blas)


def load_ipython_extension(ipython):
    """`%load_ext dg` in IPython or Jupyter: adds the `%%dg` cell magic (dg.notebook)."""
    from .notebook import register

    register(ipython, loads)
