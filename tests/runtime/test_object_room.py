"""Object code the JIT can place (lowering/codegen/objects.py, lowering/codegen/object_room.py).

llvmlite's memory manager reserves one block per object and aborts the process when a section
does not fit. LLVM's linker leaves out of that reservation the table entry of each stub it makes
for a call of a function outside the object, so enough such calls once killed the process while
a gradient loaded. The code generator calls outside functions through the table (no stubs),
and the loader refuses with a DgError any object that would still overrun.
"""
import os
import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dg
from dg.lowering.codegen import objects
from dg.lowering.codegen.object_room import refuse_unplaceable

# Calls of many functions outside the module (each a stub, if called plainly), fills and copies
# of run-time sizes (the library's memset and memcpy), and a global that takes most of its page.
MANY_CALLS = "\n".join(
    [f"declare double @{f}(double)" for f in ("cos", "sin", "tan", "exp", "log", "tanh", "sinh", "cosh",
                                                "atan", "asin", "acos", "cbrt", "expm1", "log1p")]
    + ["declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)",
       "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)",
       "@room = global [4000 x i8] zeroinitializer, align 16",
       "define double @f(double %x, ptr %p, ptr %q, i64 %n) {",
       "  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %n, i1 false)",
       "  call void @llvm.memset.p0.i64(ptr %p, i8 1, i64 8, i1 false)",
       "  call void @llvm.memcpy.p0.p0.i64(ptr %q, ptr %p, i64 %n, i1 false)",
       "  store i8 1, ptr @room",
       "  %v0 = fadd double %x, 1.0"]
    + [f"  %v{i + 1} = call double @{f}(double %v{i})" for i, f in enumerate(
        ("cos", "sin", "tan", "exp", "log", "tanh", "sinh", "cosh", "atan", "asin", "acos", "cbrt", "expm1",
         "log1p"))]
    + ["  ret double %v14", "}"])


def _stub_calls(blob: bytes) -> int:
    """The calls of undefined symbols that need a stub (x86-64 R_X86_64_PLT32) in an object."""
    from dg.lowering.codegen import object_room as r

    sections = np.frombuffer(blob, r._SECTION, int.from_bytes(blob[60:62], "little"),
                             int.from_bytes(blob[40:48], "little"))
    n = 0
    for rela in sections[sections["type"] == r._SHT_RELA]:
        symtab = sections[rela["link"]]
        symbols = np.frombuffer(blob, r._SYMBOL, int(symtab["size"]) // r._SYMBOL.itemsize, int(symtab["offset"]))
        relocs = np.frombuffer(blob, r._RELA, int(rela["size"]) // r._RELA.itemsize, int(rela["offset"]))
        target = relocs["info"] >> 32
        plt = target[(relocs["info"] & 0xFFFFFFFF) == r._PLT32]
        n += int((symbols["shndx"][plt] == 0).sum())
    return n


x86_64 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the stubs in question are x86-64's")


@x86_64
@pytest.mark.parametrize("level", [0, 2])
def test_outside_functions_are_called_through_the_table(level):
    blob = objects.object_code(MANY_CALLS, level)
    assert _stub_calls(blob) == 0
    refuse_unplaceable(blob, first=True)


@x86_64
def test_an_object_whose_stubs_overrun_is_refused(monkeypatch):
    """The object as the code generator made it before: 16 stubs whose table entries do not fit
    the page the memory manager reserves. The loader's check refuses it; linking it as it is
    aborts a process (shown in a child)."""
    monkeypatch.setattr(objects, "_calls_through_got", lambda mod: None)
    monkeypatch.setattr(objects, "_with_library_calls", lambda mod, context: None)
    monkeypatch.setattr(objects, "_library_copies", lambda text: text)
    blob = objects.object_code(MANY_CALLS, 0)
    assert _stub_calls(blob) >= 14
    with pytest.raises(dg.DgError, match="cannot be loaded"):
        refuse_unplaceable(blob, first=True)
    child = textwrap.dedent("""
        import sys
        import llvmlite.binding as llvm
        llvm.initialize_native_target(); llvm.initialize_native_asmprinter()
        target = llvm.Target.from_default_triple().create_target_machine(opt=3, reloc="pic")
        jit = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target, use_lmm=True)
        jit.add_object_file(llvm.ObjectFileRef.from_data(sys.stdin.buffer.read()))
        print("linked")
    """)
    out = subprocess.run([sys.executable, "-c", child], input=blob, capture_output=True, timeout=120)
    assert out.returncode != 0 and b"linked" not in out.stdout, "the overrun no longer aborts: the check may go"


# The fuzzed program whose gradient's object code aborted the process while it loaded.
CRASHED = '''
def h0(x0: f64[N, 3], n1: i64) -> f64[3]:
    for i1 in range(-1, n1):
        if (sum((zeros([x0.shape[0]], dtype=i64) + n1), axis=-1) >= n1):
            return f64((((zeros([3], dtype=f64) + -0.5) + 1.0) / (1.5 + abs(((zeros([3], dtype=f64) + -0.5) - 3.0)))))
        n1 = (((argmax((ones([3], dtype=f64) * 3.0), axis=0) // -2) + (i1 - x0.shape[0]))) % 7
    k2 = 0
    while k2 < 4 and ((1e-3 > 0.1) and ((sum(x0) < -1.0) or True)):
        k2 += 1
        if (-1.0 < (mean(x0) * mean(x0)) <= 1.0):
            v3 = (x0 <= (squeeze((zeros([3, 1], dtype=f64) + 3.0), -1) + (0.25 * -0.5)))
            n1 = ((k2 * n1)) % 7
            n1 = ((n1 * 5)) % 7
        v4 = (((zeros([x0.shape[0]], dtype=f64) + 0.5) + ((zeros([x0.shape[0], x0.shape[0]], dtype=f64) + -0.5) + max((zeros([x0.shape[0], x0.shape[0]], dtype=f64) + 1.0), axis=-1, keepdims=True))) + ((sum(f32(x0)) * sum(f32(x0))) - sum(reshape((zeros([x0.shape[0], 2], dtype=f32) + 1.5), [-1]))))
    return f64(((ones([3, 3], dtype=f64) * -1.0) @ (sqrt(abs((zeros([3], dtype=f64) + 2.0)) + 1.0) - ((zeros([3], dtype=f64) + 1e-3) + 0.1))))

def main(x0: f64[3], x1: f32[N, N]) -> f64:
    if ((-1.0 < mean(x0) <= 1.0) and (sum(f64(x1)) < -0.5)):
        v5: f32 = sum(f32(x0))
    else:
        if True:
            return f64((x0[-1] - 1e-3))
        for i6 in range(len(x0)):
            x0[i6] = 0.5 * x0[i6] + 0.5 * tanh(mean(f64([mean(f64(x1)), 1.5]), axis=-1))
            x0 = 0.5 * x0 + 0.5 * tanh(x0)
    for i7 in range(1, 4):
        if (-1.0 < (1e-3 - 0.1) <= 1.0):
            x1 = 0.5 * x1 + 0.5 * tanh(where(((zeros([x1.shape[0], x1.shape[0]], dtype=i64) + i7) >= (zeros([x1.shape[0], x1.shape[0]], dtype=i64) + 1)), (mean(f32(x0)) + x1), 1e-3))
    k8 = 0
    while k8 < 5 and (sum(x1) < -1.0):
        k8 += 1
        x0 = 0.5 * x0 + 0.5 * tanh(((x0 * f64((zeros([3], dtype=i64) + k8))) + cos(mean(x0))))
        k9 = 0
        while k9 < 4 and (sum(x1) < 0.5):
            k9 += 1
            x0 = 0.5 * x0 + 0.5 * tanh(log_softmax(x0, axis=-1))
            x0 = 0.5 * x0 + 0.5 * tanh(x0)
            x1 = 0.5 * x1 + 0.5 * tanh((-where(True, (zeros([2, x1.shape[0], x1.shape[0]], dtype=f32) + x1)[0], prod((zeros([2, 3], dtype=f32) + 2.0), axis=(0, 1)))))
        if (((sum(x1) > 1.0) or (sum(x1) > -1.0)) or (k8 < k8)):
            x1 = 0.5 * x1 + 0.5 * tanh((full([x1.shape[0], 2], -0.5) @ full([2, x1.shape[0]], 1.5)))
            x0 = 0.5 * x0 + 0.5 * tanh((softmax(x0, axis=-1) * 0.1))
            x1 = 0.5 * x1 + 0.5 * tanh(((sum((zeros([x1.shape[0], 2, x1.shape[0]], dtype=f32) + 0.25), axis=1) * -1.0) if (sum(x0) < 0.5) else ((x1 + k8) - 1.0)))
        elif (not (k8 != 1)):
            x1 = 0.5 * x1 + 0.5 * tanh((x1 - 0.5))
        else:
            v10 = (((zeros([3, 2], dtype=f64) + 0.5) * 0.5) ** 2)
            v10 = 0.5 * v10 + 0.5 * tanh((v10 / (1.5 + abs((zeros([2], dtype=f64) + 1e-3)))))
        if (not (sum(x0) <= mean(f64(x1)))):
            return f64(sqrt(abs((sum(f64(x1)) * 3.0)) + 1.0))
    for i11 in range(3):
        for i12 in range(len(x0)):
            x0[i12] = 0.5 * x0[i12] + 0.5 * tanh((log1p(abs(max(x0))) if (mean(f64(x1)) >= mean(x0)) else (3.0 / (1.5 + abs(sum(f64(x1)))))))
    if (mean(f64(x1)) >= (mean(f64(x1)) ** 2)):
        v13: f64[N, 3] = (((zeros([x1.shape[0], 3], dtype=f64) + x0) * 1e-3) + softmax(x0, axis=-1))
        v14 = ((ones([x1.shape[0], x1.shape[0]], dtype=f64) * -0.5) + -1.0)
    elif (-1.0 < (1e-3 if False else mean(x0)) <= 1.0):
        v15 = logsumexp((zeros([x1.shape[0], 3, x1.shape[0]], dtype=f64) + 1.0), axis=1)
        v15 = where(((ones([x1.shape[0]], dtype=i64) * 0) < 3), softmax(v15, axis=-1), (v15 if (sum(x1) > 1.0) else v15))
    x0 = log_softmax(min((zeros([3, 2], dtype=f64) + -1.0), axis=1), axis=-1)
    return f64(sum(f64(x1)))
'''


@pytest.mark.slow
def test_the_fuzzed_gradient_that_aborted_loads_and_runs(tmp_path):
    """In a process of its own, with a cache of its own: the gradient compiles, loads and agrees
    with the interpreter's."""
    (tmp_path / "crashed.dg").write_text(CRASHED)
    child = textwrap.dedent(f"""
        import numpy as np, dg
        x0 = np.random.default_rng(0).standard_normal(3)
        x1 = np.random.default_rng(0).standard_normal((2, 2)).astype(np.float32)
        for mode in ("compiled", "interp"):
            m = dg.load({str(tmp_path / "crashed.dg")!r}, mode=mode)
            print(mode, repr(m.main(x0, x1)), repr(dg.grad(m.main, wrt=0)(x0, x1).tolist()))
    """)
    env = {**os.environ, "DG_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    compiled, interp = (line.split(" ", 1)[1] for line in out.stdout.splitlines())
    assert compiled == interp


def test_the_library_calls_every_module_links_in_parse_and_route_through_the_table():
    """lowering/codegen/ll/library_calls.ll verifies on its own, and a module it is linked into
    (objects._with_library_calls) has the RtLibUseGOT flag and the C library's memset and memcpy
    declared as the quick level's rewrite calls them (objects._library_copies)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.parse_assembly(objects.LIBRARY_CALLS.read_text()).verify()
    mod = llvm.parse_assembly("define void @f() {\n  ret void\n}\n")
    objects._with_library_calls(mod, llvm.get_global_context())
    mod.verify()
    text = str(mod)
    assert '!"RtLibUseGOT", i32 1' in text
    assert objects._declaration("memset") == "declare void @memset(ptr, i8 zeroext, i64) nonlazybind nobuiltin"
    copied = objects._library_copies(
        "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)\n"
        "define void @g(ptr %p, i64 %n) {\n  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %n, i1 false)\n"
        "  ret void\n}\n")
    assert "call void @memset(ptr %p, i8 zeroext 0, i64 %n)" in copied
    llvm.parse_assembly(copied).verify()
