"""The `%%dg` cell magic of IPython and Jupyter (`%load_ext dg`, LANGUAGE.md §4).

    %%dg --mode interp
    def f(x: f32[N]) -> f32:
        return sum(tanh(x))

    f(np.ones(3))                       # the next cell: f is a name of the notebook

Expects: IPython (`pip install dg[notebook]`); this module is imported only by
`dg.load_ipython_extension`, which hands it `dg.loads` (so that it does not import `dg` back).
Guarantees: the cell is parsed and type-checked when it runs (as `dg check` does), under the
file name `<dg cell N>` (N: the cell's execution count), so errors and run-time messages point
at the cell's own lines; each function of the cell is bound by its name in the notebook
(`--name NAME` also binds the module). A `DgError` of the cell shows as its message alone —
`FILE:LINE:COL: error: ...`, the source line and a caret — without a Python traceback, and
still fails the cell (a notebook run stops there).

Options: `--mode interp|compiled|shadow`, `--device cpu|cuda` (defaults: DG_MODE,
DG_DEVICE, as `dg.loads`), `--name NAME`.
"""
from __future__ import annotations

from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from dg.core.errors import DgError
from dg.runtime.program import check_source


def register(shell, loads) -> None:
    """The `%%dg` magic, compiling with `loads` (`dg.loads`)."""
    shell.register_magics(DgMagics(shell, loads=loads))


def short(error: DgError) -> DgError:
    """The error, shown by IPython as its message only (IPython's `_render_traceback_` protocol)."""
    error._render_traceback_ = lambda: str(error).splitlines()
    return error


@magics_class
class DgMagics(Magics):
    def __init__(self, shell, loads):
        super().__init__(shell)
        self.loads = loads
        self._names: set = set()  # the cell file names given so far

    def cell_name(self) -> str:
        """`<dg cell N>`, made unique when one cell runs again without a new execution count."""
        base = f"<dg cell {self.shell.execution_count}>"
        name, k = base, 1
        while name in self._names:
            k += 1
            name = f"{base[:-1]} ({k})>"
        self._names.add(name)
        return name

    @magic_arguments()
    @argument("--mode", default=None, help="interp, compiled or shadow (default: DG_MODE, else compiled)")
    @argument("--device", default=None, help="cpu or cuda (default: DG_DEVICE, else cpu)")
    @argument("--name", default=None, help="also bind the loaded module under this name")
    @cell_magic
    def dg(self, line: str, cell: str):
        """Compile the cell's dg source and bind each of its functions as a name of the notebook."""
        a = parse_argstring(self.dg, line)
        try:
            module = self.loads(cell, mode=a.mode, device=a.device, filename=self.cell_name())
            check_source(module._source)
        except DgError as e:
            raise short(e) from None
        names = {name: getattr(module, name) for name in module.functions}
        if a.name:
            names[a.name] = module
        self.shell.push(names)
