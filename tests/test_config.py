"""core/config.py: every DG_ environment variable, its default, read when asked, a bad value refused.

A bad value of each kind of variable (a switch, a choice, DG_BLAS, a count) is a DgError that
names the variable, the value and what it may be; the modules that ask config see the same
values the environment variables gave before there was one place to read them."""
import os
from pathlib import Path

import pytest

import dg
from dg.core.config import VARIABLES, Config, config

SWITCHES = [n for n, v in VARIABLES.items() if v.values == "0, 1"]
PATHS = ["DG_PATH", "DG_CACHE_DIR", "DG_LIBDEVICE"]
SWITCH_CHOICES = "one of 0, 1 (also off, on, no, yes, false, true)"


@pytest.fixture
def clean(monkeypatch):
    """No DG_ variable set (the test suite sets DG_VERIFY_PASSES)."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_kinds_cover_every_variable():
    assert set(SWITCHES) | set(PATHS) | {"DG_MODE", "DG_DEVICE", "DG_BLAS", "DG_NUM_THREADS"} == set(VARIABLES)
    assert len(VARIABLES) == 19


def test_each_variable_has_its_property():
    """config.mode is DG_MODE, config.cache_dir DG_CACHE_DIR, ...: one property a variable, no other."""
    props = {k for k, v in vars(Config).items() if isinstance(v, property)}
    assert props == {name[3:].lower() for name in VARIABLES}


def test_defaults(clean):
    assert {name: getattr(config, name[3:].lower()) for name in VARIABLES} == {
        "DG_MODE": "compiled", "DG_DEVICE": "cpu", "DG_CHECK_NUMERICS": False, "DG_AUTOBATCH": True, "DG_PATH": (),
        "DG_CACHE": True, "DG_CACHE_DIR": None, "DG_QUICK_START": True, "DG_TIERED": False,
        "DG_LOG_COMPILES": False, "DG_TRACEBACK_FILTERING": True, "DG_VERIFY_PASSES": False,
        "DG_NUM_THREADS": None, "DG_BLAS": ("mkl", "openblas", "cblas"), "DG_PERF_MAP": False, "DG_KEEP_MEMORY": True,
        "DG_CUBLAS": True, "DG_LIBDEVICE": None, "DG_DIST": True}
    for name, v in VARIABLES.items():  # the documented default is the value of an unset variable
        if name in SWITCHES:
            assert config.value(name) == (v.default == "1")


@pytest.mark.parametrize("name", VARIABLES)
def test_empty_is_the_default(clean, name):
    unset = config.value(name)
    clean.setenv(name, "")
    assert config.value(name) == unset


def test_read_when_asked_not_at_import(clean):
    assert config.mode == "compiled"
    clean.setenv("DG_MODE", "interp")
    assert config.mode == "interp"
    clean.setenv("DG_MODE", "shadow")
    assert config.mode == "shadow"
    clean.delenv("DG_MODE")
    assert config.mode == "compiled"


@pytest.mark.parametrize("name", SWITCHES)
def test_switches(clean, name):
    for text in ("1", "on", "yes", "true", " ON ", "True"):
        clean.setenv(name, text)
        assert config.value(name) is True, text
    for text in ("0", "off", "no", "false", "OFF ", "False"):
        clean.setenv(name, text)
        assert config.value(name) is False, text


def test_choices_and_values(clean):
    clean.setenv("DG_MODE", " Interp ")
    assert config.mode == "interp"
    clean.setenv("DG_DEVICE", "cuda")
    assert config.device == "cuda"
    for text, families in (("1", ("mkl", "openblas", "cblas")), ("auto", ("mkl", "openblas", "cblas")),
                           ("0", ()), ("none", ()), ("OpenBLAS", ("openblas",)), ("cblas", ("cblas",))):
        clean.setenv("DG_BLAS", text)
        assert config.blas == families, text
    clean.setenv("DG_NUM_THREADS", " 3 ")
    assert config.num_threads == 3
    clean.setenv("DG_PATH", "/a/b::c")
    assert config.path == (Path("/a/b"), Path("c"))
    clean.setenv("DG_CACHE_DIR", "/tmp/some cache")
    assert config.cache_dir == Path("/tmp/some cache")
    clean.setenv("DG_LIBDEVICE", "/x/libdevice.10.bc")
    assert config.libdevice == "/x/libdevice.10.bc"


# One bad value for each kind of variable, and what the error says may be set.
BAD = [(name, "maybe", SWITCH_CHOICES) for name in SWITCHES] + [
    ("DG_TIERED", "2", SWITCH_CHOICES),  # (once anything but "1" was off)
    ("DG_LOG_COMPILES", "verbose", SWITCH_CHOICES),  # (once anything but "0" was on)
    ("DG_MODE", "bogus", "one of interp, compiled, shadow"),
    ("DG_MODE", "ptx", "one of interp, compiled, shadow"),
    ("DG_DEVICE", "tpu", "one of cpu, cuda"),
    ("DG_BLAS", "atlas", "one of 0, 1, mkl, openblas, cblas"),
    ("DG_NUM_THREADS", "many", "a whole number, at least 1"),
    ("DG_NUM_THREADS", "0", "a whole number, at least 1"),
    ("DG_NUM_THREADS", "-2", "a whole number, at least 1"),
    ("DG_NUM_THREADS", "1.5", "a whole number, at least 1"),
]


@pytest.mark.parametrize("name, text, expected", BAD)
def test_a_bad_value_names_the_variable_and_its_choices(clean, name, text, expected):
    clean.setenv(name, text)
    with pytest.raises(dg.DgError) as e:
        config.value(name)
    assert e.value.raw_message == f"{name}={text!r}: expected {expected}"
    with pytest.raises(dg.DgError, match=f"^dg: error: {name}="):
        getattr(config, name[3:].lower())
    clean.delenv(name)
    config.value(name)  # (the bad value is not kept)


def test_paths_take_any_text(clean):
    text = "anything at all: ?*"
    for name in PATHS:
        clean.setenv(name, text)
    assert config.value("DG_CACHE_DIR") == Path(text)
    assert config.value("DG_LIBDEVICE") == text
    assert [str(p) for p in config.value("DG_PATH")] == text.split(os.pathsep)


def test_the_modules_ask_config(clean, tmp_path):
    """The functions that read the variables before core/config.py read them through it now."""
    from dg.core import mlir, tracebacks
    from dg.lowering import blas
    from dg.lowering.codegen import cache, optimizer
    from dg.runtime import compile_log, program, threads, tiered

    clean.setenv("DG_NUM_THREADS", "5")
    assert threads.count() == 5
    clean.setenv("DG_CACHE_DIR", str(tmp_path))
    assert cache.folder() == tmp_path
    clean.setenv("DG_CACHE", "0")
    assert cache.folder() is None
    clean.delenv("DG_CACHE")
    clean.delenv("DG_CACHE_DIR")
    clean.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.folder() == tmp_path / "xdg" / "dg" / "compiled"
    clean.setenv("DG_MODE", "interp")
    clean.setenv("DG_DEVICE", "cuda")
    assert (program.default_mode(), program.default_device("compiled"), program.default_device("interp")) == \
        ("interp", "cuda", "cpu")
    clean.setenv("DG_CHECK_NUMERICS", "yes")
    assert program.default_check_numerics()
    clean.setenv("DG_TIERED", "1")
    clean.setenv("DG_QUICK_START", "0")
    clean.setenv("DG_LOG_COMPILES", "1")
    clean.setenv("DG_TRACEBACK_FILTERING", "off")
    assert tiered.enabled() and not optimizer.enabled() and compile_log._on() and not tracebacks.filtering()
    clean.setenv("DG_BLAS", "none")
    assert blas._wanted() == ()
    clean.setenv("DG_VERIFY_PASSES", "1")
    with mlir.ir.Context():
        assert mlir.pass_manager("builtin.module(canonicalize)") is not None


def test_a_bad_mode_fails_the_load(clean):
    clean.setenv("DG_MODE", "bogus")
    with pytest.raises(dg.DgError, match="DG_MODE='bogus': expected one of interp, compiled, shadow"):
        dg.loads("def f(x):\n    return x\n")
    assert dg.loads("def f(x):\n    return x\n", mode="interp").f(2.0) == 2.0  # a mode named wins
