"""Shared fixtures for the dg end-to-end conformance tests.

Every test is parametrized over `mode`: the interpreter and compiled code
(CPU) must give the same results as NumPy. A dg module is built once per
(source, mode) and shared by all tests that use it (util.load_src and
util.load_prog keep the cache).

The third parameter, `ptx`, runs the test in compiled mode on the CPU and
also lowers every function it compiles to PTX for sm_90, which `ptxas`
must assemble: no GPU is needed for that, so CI checks the GPU lowering of
every end-to-end program. It is in the `slow` tier (CI runs it; the
README's test command leaves it out): PTX takes about twice a CPU compile.

The fourth, `cuda`, runs the test with `device="cuda"` (DG_DEVICE=cuda): it
is collected only on a machine with an NVIDIA GPU and its driver.
"""
import pytest

from .util import assemble_ptx


def _modes() -> list:
    from dg.runtime.cuda import driver_status

    return ["interp", "compiled", pytest.param("ptx", marks=pytest.mark.slow)] + \
        (["cuda"] if driver_status()[0] else [])


@pytest.fixture(params=_modes(), scope="session")
def mode(request):
    return request.param


@pytest.fixture(autouse=True)
def _on_the_gpu(request, monkeypatch):
    if "mode" not in request.fixturenames or request.getfixturevalue("mode") != "cuda":
        return
    monkeypatch.setenv("DG_DEVICE", "cuda")


@pytest.fixture(autouse=True)
def _ptx_of_every_program(request, monkeypatch):
    if "mode" not in request.fixturenames or request.getfixturevalue("mode") != "ptx":
        return
    from dg.runtime import modes

    prepare = modes.prepare

    def prepare_and_make_ptx(comp, mode, device, **options):
        prepare(comp, mode, device, **options)
        assemble_ptx(modes.stage_text(comp, "ptx"), comp.symbol)

    monkeypatch.setattr(modes, "prepare", prepare_and_make_ptx)
