"""The on-disk cache of compiled code: a second process reuses it; damaged entries are recompiled."""
import json
import os
import subprocess
import sys

import pytest

PROGRAM = """
def f(x: f32[N, 3], n: i64) -> f32:
    s = 0.0
    i = 0
    while i < n:
        s = s + sum(tanh(x * float(i)))
        i = i + 1
    return s
"""

# The same signature as PROGRAM, another result: a swapped entry would show.
OTHER = PROGRAM.replace("tanh(x * float(i))", "x * float(i) + 100.0")

RUN = """
import json, sys, time
import numpy as np
import dg
t = time.perf_counter()
m = dg.load(sys.argv[1])
r = m.f(np.ones((4, 3), np.float32), 3)
print(json.dumps({"value": float(r), "from_cache": m.f._last.runner.from_cache,
                  "seconds": time.perf_counter() - t}))
"""


def _run(tmp_path, program=PROGRAM, name="prog", **env):
    (tmp_path / f"{name}.dg").write_text(program)
    (tmp_path / "run.py").write_text(RUN)
    e = dict(os.environ, DG_MODE="compiled", DG_CACHE_DIR=str(tmp_path / "cache"), **env)
    out = subprocess.run([sys.executable, "run.py", f"{name}.dg"], cwd=tmp_path,  # (the path is in the key)
                         capture_output=True, text=True, env=e, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _entries(tmp_path) -> set:
    return {p.stem for p in (tmp_path / "cache").glob("*.o")}


@pytest.mark.slow
def test_second_process_reuses_the_cache(tmp_path):
    cold = _run(tmp_path)
    entries = sorted(p.suffix or p.name for p in (tmp_path / "cache").iterdir())
    warm = _run(tmp_path)
    assert not cold["from_cache"] and warm["from_cache"]
    assert entries == [".json", ".o", "secret"]
    assert warm["value"] == cold["value"] == pytest.approx(12 * (0.0 + 0.7615942 + 0.9640276), rel=1e-5)
    print(f"first call: cold compile {cold['seconds']:.3f} s, from the cache {warm['seconds']:.3f} s")


@pytest.mark.slow
def test_damaged_entry_is_compiled_again(tmp_path):
    good = _run(tmp_path)
    obj = next((tmp_path / "cache").glob("*.o"))
    obj.write_bytes(obj.read_bytes()[:100])  # truncated, as by a full disk
    again = _run(tmp_path)
    assert not again["from_cache"] and again["value"] == good["value"]
    meta = next((tmp_path / "cache").glob("*.json"))
    assert json.loads(meta.read_text())["seal"]
    assert _run(tmp_path)["from_cache"]  # the entry was written again, whole


@pytest.fixture(scope="module")
def two_entries(tmp_path_factory):
    """A cache folder holding the entries of PROGRAM and OTHER, and their values."""
    d = tmp_path_factory.mktemp("two")
    a = _run(d)
    (k_a,) = _entries(d)
    b = _run(d, OTHER, "other")
    (k_b,) = _entries(d) - {k_a}
    assert a["value"] != b["value"]
    return d, k_a, k_b, a["value"], b["value"]


def _copy(two_entries, tmp_path):
    import shutil

    d, k_a, k_b, va, vb = two_entries
    shutil.copytree(d / "cache", tmp_path / "cache")
    assert _run(tmp_path)["from_cache"] and _run(tmp_path, OTHER, "other")["from_cache"]  # as stored, both load
    return tmp_path / "cache", k_a, k_b, va, vb


@pytest.mark.slow
def test_an_entry_moved_under_another_key_is_refused(two_entries, tmp_path):
    """Entries swapped between two programs: each program computes its own result again."""
    c, k_a, k_b, va, vb = _copy(two_entries, tmp_path)
    for ext in (".o", ".json"):
        (c / f"{k_a}{ext}").rename(c / f"swap{ext}")
        (c / f"{k_b}{ext}").rename(c / f"{k_a}{ext}")
        (c / f"swap{ext}").rename(c / f"{k_b}{ext}")
    a = _run(tmp_path)
    assert (a["value"], a["from_cache"]) == (va, False)
    b = _run(tmp_path, OTHER, "other")
    assert (b["value"], b["from_cache"]) == (vb, False)


@pytest.mark.slow
def test_object_code_replaced_under_a_fitting_checksum_is_refused(two_entries, tmp_path):
    """The other program's object code put in place, and the metadata's checksum made to fit it:
    the seal, made with a secret only this user reads, does not fit."""
    import hashlib

    c, k_a, k_b, va, vb = _copy(two_entries, tmp_path)
    blob = (c / f"{k_b}.o").read_bytes()
    (c / f"{k_a}.o").write_bytes(blob)
    entry = json.loads((c / f"{k_a}.json").read_text())
    entry["meta"]["sha256"] = entry["sha256"] = hashlib.sha256(blob).hexdigest()
    (c / f"{k_a}.json").write_text(json.dumps(entry))
    a = _run(tmp_path)
    assert (a["value"], a["from_cache"]) == (va, False)


@pytest.mark.slow
def test_a_fifo_in_place_of_an_entry_is_not_waited_on(two_entries, tmp_path):
    c, k_a, k_b, va, vb = _copy(two_entries, tmp_path)
    (c / f"{k_a}.o").unlink()
    os.mkfifo(c / f"{k_a}.o")
    (c / f"{k_b}.json").unlink()
    os.mkfifo(c / f"{k_b}.json")
    a = _run(tmp_path)  # (a hang fails the run's time limit)
    assert (a["value"], a["from_cache"]) == (va, False)
    b = _run(tmp_path, OTHER, "other")
    assert (b["value"], b["from_cache"]) == (vb, False)


@pytest.mark.slow
def test_a_secret_others_may_read_is_not_trusted(two_entries, tmp_path):
    c, k_a, k_b, va, vb = _copy(two_entries, tmp_path)
    (c / "secret").chmod(0o644)
    a = _run(tmp_path)
    assert (a["value"], a["from_cache"]) == (va, False)


@pytest.mark.slow
def test_cache_can_be_turned_off(tmp_path):
    assert not _run(tmp_path, DG_CACHE="0")["from_cache"]
    assert not (tmp_path / "cache").exists()


def test_key_changes_with_the_ir_and_the_pipeline():
    from dg.lowering.codegen import cache

    a = cache.key("module {}", "p1")
    assert a == cache.key("module {}", "p1")
    assert a != cache.key("module { }", "p1") and a != cache.key("module {}", "p2")


def test_get_or_build_builds_once_and_then_finds_the_entry(tmp_path, monkeypatch):
    from dg.lowering.codegen import cache

    monkeypatch.setenv("DG_CACHE_DIR", str(tmp_path / "cache"))
    built = []

    def build():
        built.append(1)
        return {"n": len(built)}, b"object code"

    k = cache.key("module {}", "get_or_build")
    assert cache.get_or_build(k, build) == ({"n": 1}, b"object code", False)
    assert cache.get_or_build(k, build) == ({"n": 1}, b"object code", True)
    assert built == [1]
    monkeypatch.setenv("DG_CACHE", "0")  # (no cache: built every time)
    assert cache.get_or_build(k, build) == ({"n": 2}, b"object code", False)


def test_only_the_called_function_and_what_it_reaches_are_compiled():
    import numpy as np

    import dg

    m = dg.loads("""
def loss(w: f32[3], x: f32[N, 3]) -> f32:
    return sum(tanh(x @ w))

def unused(x: f32[N, 3]) -> f32:
    return sum(x)

def step(w: f32[3], x: f32[N, 3]):
    l, g = value_and_grad(loss)(w, x)
    return l, w - 0.1 * g
""", mode="compiled")
    w, x = np.ones(3, np.float32), np.ones((2, 3), np.float32)
    l, w2 = m.step(w, x)
    np.testing.assert_allclose(l, 2 * np.tanh(3.0), rtol=1e-6)
    np.testing.assert_allclose(w2, w - 0.1 * (1 - np.tanh(3.0) ** 2) * 2, rtol=1e-5)
    from dg.core.abi import LINKED

    text = m.step.ir("llvm")
    assert f"llvm.func @_mlir_ciface_{LINKED}step" in text
    assert "_mlir_ciface_loss" not in text and "unused" not in text
    assert f"@{LINKED}loss(" not in text  # the value comes from the gradient function, loss itself is dead
    assert "__vjp" not in text and "__value_and_grad" not in text  # inlined into step, then dropped


def test_building_pauses_the_collector_and_restores_it(monkeypatch):
    import gc

    import numpy as np

    import dg
    from dg.runtime import modes

    during = []
    prepare = modes.prepare

    def watched(comp, mode, device, **options):
        during.append(gc.isenabled())
        prepare(comp, mode, device, **options)

    monkeypatch.setattr(modes, "prepare", watched)
    m = dg.loads("def f(x: f32[N]) -> f32[N]:\n    return x + 1.0\n\ndef g(x: f32[N]) -> f32[N]:\n    return x @ x\n"
                 "\ndef h(x: f32[N]) -> f32[N]:\n    return x * 3.0\n", mode="compiled")
    try:
        m.f(np.ones(3, np.float32))
        assert during == [False] and gc.isenabled()
        with pytest.raises(dg.DgError):
            m.g(np.ones(3, np.float32))  # a build that fails still turns the collector back on
        assert gc.isenabled()
        gc.disable()
        m.h(np.ones(5, np.float32))
        assert during == [False, False]  # g failed before it reached prepare
        assert not gc.isenabled()  # a collector the caller turned off stays off
    finally:
        gc.enable()


def test_two_processes_compiling_the_same_program_at_once(tmp_path):
    """Both compile and run, and leave one whole entry that a third process loads."""
    (tmp_path / "prog.dg").write_text(PROGRAM)
    (tmp_path / "run.py").write_text(RUN)
    e = dict(os.environ, DG_MODE="compiled", DG_CACHE_DIR=str(tmp_path / "cache"))
    both = [subprocess.Popen([sys.executable, "run.py", "prog.dg"], cwd=tmp_path, env=e, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in both]
    assert [p.returncode for p in both] == [0, 0], [err for _, err in outs]
    values = {json.loads(out)["value"] for out, _ in outs}
    assert len(values) == 1 and all(err == "" for _, err in outs), outs
    third = _run(tmp_path)
    assert third["from_cache"] and third["value"] in values
    assert not list((tmp_path / "cache").glob(".tmp-*"))


@pytest.mark.parametrize("fault", ["read-only folder", pytest.param("full disk", marks=pytest.mark.skipif(
    not os.path.exists("/dev/full"), reason="no /dev/full to fill"))])
def test_a_cache_that_cannot_be_written_costs_a_warning_only(tmp_path, monkeypatch, caplog, fault):
    """A read-only folder (EROFS where the folder is made, the secret or an entry written) or a
    full disk (ENOSPC while an entry is written): the program compiles and runs, and the `dg`
    logger warns once; nothing half-written is left."""
    import errno

    import numpy as np

    import dg
    from dg.lowering.codegen import cache

    folder = tmp_path / "cache"
    monkeypatch.setenv("DG_CACHE_DIR", str(folder))
    monkeypatch.setattr(cache, "_WARNED", set())
    inside = lambda path: str(path).startswith(str(folder))  # noqa: E731 (only the cache's files fail)
    if fault == "read-only folder":
        def refuse():
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))

        real_mkstemp, real_open, real_mkdir = cache.tempfile.mkstemp, os.open, os.mkdir
        monkeypatch.setattr(cache.tempfile, "mkstemp", lambda *a, dir=None, **k: refuse() if inside(dir)
                            else real_mkstemp(*a, dir=dir, **k))
        monkeypatch.setattr(cache.os, "open", lambda path, flags, *a, **k: refuse()
                            if flags & os.O_CREAT and inside(path) else real_open(path, flags, *a, **k))
        monkeypatch.setattr(cache.os, "mkdir", lambda path, *a, **k: refuse() if inside(path)
                            else real_mkdir(path, *a, **k))
    else:  # (the temporary file written through /dev/full, whose writes fail with ENOSPC)
        real_mkstemp = cache.tempfile.mkstemp

        def full(*args, dir=None, **kwargs):
            fd, name = real_mkstemp(*args, dir=dir, **kwargs)
            if not inside(dir):
                return fd, name
            os.close(fd)
            return os.open("/dev/full", os.O_WRONLY), name

        monkeypatch.setattr(cache.tempfile, "mkstemp", full)
    m = dg.loads(PROGRAM.replace("sum(", "mean("), mode="compiled", filename=f"fault-{fault[:4]}.dg")
    with caplog.at_level("WARNING", logger="dg"):
        r = m.f(np.ones((4, 3), np.float32), 3)
        m.f(np.ones((5, 3), np.float32), 2)  # (a second compile: no second warning)
    assert r == pytest.approx(dg.loads(PROGRAM.replace("sum(", "mean("), mode="interp").f(np.ones((4, 3), np.float32), 3))
    warned = [rec.getMessage() for rec in caplog.records if "disk cache" in rec.getMessage()]
    assert len(warned) == 1 and os.strerror(errno.EROFS if fault == "read-only folder" else errno.ENOSPC) in warned[0]
    assert not [p for p in folder.rglob("*") if p.name.startswith(".tmp-") or p.suffix in (".o", ".json")]
    assert fault == "full disk" or not folder.exists()
