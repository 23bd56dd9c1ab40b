"""LLVM IR text to object code for this CPU, with llvmlite.

Expects: LLVM IR text (lowering.llvm_ir's translation of a module in the LLVM dialect).
Guarantees: `object_code(text, level)` is position-independent object code for the host CPU,
which the CPU executor's JIT links (runtime.linking); levels 1 to 3 are LLVM's default pipelines,
level 0 the quick one of a program's first calls (lowering.codegen.tiers). Every module gets
ll/library_calls.ll linked in (`_with_library_calls`).
"""
from __future__ import annotations

import ctypes
import functools
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

LIBRARY_CALLS = Path(__file__).resolve().parent / "ll" / "library_calls.ll"


def object_code(text: str, level: int, piece: bool = False) -> bytes:
    """Object code for this CPU (position independent, small code model) of LLVM IR text,
    optimized at `level`: 1 to 3, LLVM's default pipelines (the SLP vectorizer off) and code
    generation at that level; 0, quick (QUICK_PASSES and LLVM's fast code generation: a tenth of
    -O2's time on a large program, for code about three times slower). The module is parsed into
    an LLVM context of its own.
    The small code model reaches the object's own data by 32-bit offsets from the code: the JIT
    that links it must place each object's sections in one reservation (llvmlite's memory
    manager, runtime.linking). What is outside the object, a function through a stub, a global
    through a table entry, the JIT puts in that reservation too. (The large code model takes
    every address as 64 bits, and LLVM's fast instruction selection gives up on its calls and
    globals: the blocks it gives up on go to the slower selection, a quarter more of the quick
    level's code generation on the Tree-LSTM gradient.)
    A `piece` is one of several objects that one JIT links (quick_object_codes). llvmlite makes
    every call into LLVM under one lock of the process; a piece's three calls that take the time
    (parsing, the passes, code generation), all on its own module, context, pass manager and
    target machine, go around it, so that threads compile at once."""
    import llvmlite.binding as llvm
    from llvmlite.binding import ffi

    call = _unlocked if piece else (lambda name, *args: getattr(ffi.lib, name)(*args))
    text = _library_copies(text) if level == 0 else text
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    context = llvm.create_context()
    with ffi.OutputString() as error:
        mod = llvm.module.ModuleRef(call("LLVMPY_ParseAssembly", context, ctypes.c_char_p(text.encode()), error),
                                    context)
        if error:
            mod.close()
            raise RuntimeError(f"LLVM IR parsing error\n{error}")
    _with_library_calls(mod, context)
    _calls_through_got(mod)
    machine = _target_machine(level)
    mod.triple = machine.triple
    tuning = llvm.create_pipeline_tuning_options(speed_level=max(level, 1))
    tuning.slp_vectorization = False  # (see below)
    passes = llvm.create_pass_builder(machine, tuning)
    if level:
        manager = passes.getModulePassManager()
    else:
        manager = llvm.create_new_module_pass_manager()
        for name in QUICK_PASSES:
            getattr(manager, f"add_{name}_pass")()
    call("LLVMPY_RunNewModulePassManager", manager, mod, passes)
    with ffi.OutputString() as error:
        buffer = call("LLVMPY_TargetMachineEmitToMemory", machine, mod, 1, error)
        if not buffer:
            raise RuntimeError(str(error))
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buffer), ffi.lib.LLVMPY_GetBufferSize(buffer))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


def _calls_through_got(mod) -> None:
    """Every function the module declares but does not define (malloc, the runtime's, another
    piece's) called through a table entry (`nonlazybind`, as -fno-plt), as are the library calls
    LLVM makes itself (memset, cos: the module flag RtLibUseGOT). A plain call of such a function
    is linked through a stub, and each stub takes a table entry that the JIT's linker leaves out
    of the room it asks the memory manager for: past a few stubs, the entries overran the
    reservation and llvmlite's memory manager aborted the process."""
    for fn in mod.functions:
        if fn.is_declaration and not fn.name.startswith("llvm."):
            fn.add_function_attribute("nonlazybind")


def _library_copies(text: str) -> str:
    """LLVM IR text whose memset and memcpy intrinsics call the C library's functions, declared
    `nonlazybind`: LLVM's fast instruction selection (the quick level's) calls them without the
    table otherwise, through a stub (_calls_through_got). A copy of at most 32 bytes of a
    constant size stays an intrinsic: fast selection writes it as moves (a fill of any size it
    calls memset for)."""
    def memset(g):
        return f"call void @memset(ptr {g[1]}, i8 zeroext {g[2]}, i64 {g[3]})"

    def memcpy(g):
        if g[3].isdigit() and int(g[3]) <= 32:
            return g[0]
        return f"call void @memcpy(ptr {g[1]}, ptr {g[2]}, i64 {g[3]})"

    out, sets = _MEMSET.subn(memset, text)
    out = _MEMCPY.sub(memcpy, out)
    if sets and not re.search(r"^declare .*@memset\(", out, re.M):
        out += "\n" + _declaration("memset") + "\n"
    if "call void @memcpy(" in out and not re.search(r"^declare .*@memcpy\(", out, re.M):
        out += "\n" + _declaration("memcpy") + "\n"
    return out


@functools.lru_cache(maxsize=None)
def _library_calls_text() -> str:
    return LIBRARY_CALLS.read_text()


def _declaration(name: str) -> str:
    """The line of ll/library_calls.ll that declares the C library's function `name`."""
    return next(line for line in _library_calls_text().splitlines()
                if line.startswith("declare ") and f"@{name}(" in line)


_ARG = r"(?:[a-z]+(?:\([^)]*\))? )*([%@][-\w.$]+|\d+)"  # an operand, after its attributes
_MEMSET = re.compile(r"call void @llvm\.memset\.p0\.i64\(ptr " + _ARG + r", i8 ([-\w%.$]+), i64 ([-\w%.$]+), i1 false\)")
_MEMCPY = re.compile(r"call void @llvm\.memcpy\.p0\.p0\.i64\(ptr " + _ARG + r", ptr " + _ARG
                     + r", i64 ([-\w%.$]+), i1 false\)")


def _with_library_calls(mod, context) -> None:
    """ll/library_calls.ll linked into the module (parsed in its LLVM `context`): its module flag
    has LLVM's own library calls go through the table (_calls_through_got)."""
    import llvmlite.binding as llvm

    mod.link_in(llvm.parse_assembly(_library_calls_text(), context=context))


def _unlocked(name: str, *args):
    """llvmlite's function `name` called without its lock (the plain ctypes function its wrapper
    holds; with the lock where a version of llvmlite has no such wrapper)."""
    from llvmlite.binding import ffi

    fn = getattr(ffi.lib, name)
    return getattr(fn, "_cfn", fn)(*args)


# The SLP vectorizer is off at every level: on some functions its cost model ran for minutes (a
# loop with an early return of a 10-tuple: 35 to 200 s against about 1 s without it), and the
# benchmarks gained nothing from it; the loop vectorizer stays on.

# What the quick level runs before code generation: the loop functions inlined into the pool's
# entries, memref descriptors taken apart into scalars, and the arithmetic on them folded.
# Measured on the 2-layer GPT loss gradient: 0.25 s, and code 1.3 times as fast as without.
QUICK_PASSES = ("always_inliner", "sroa", "instruction_combine", "simplify_cfg")


def _target_machine(level: int):
    import llvmlite.binding as llvm

    return llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=level, reloc="pic",
        codemodel="small")


def quick_object_codes(text: str, parts: int) -> list:
    """The quick level's object code of LLVM IR text in up to `parts` pieces made at once on as
    many threads (`split_module`), which one JIT links; one piece for a small module."""
    texts = split_module(text, parts)
    if len(texts) == 1:
        return [object_code(text, 0)]
    import llvmlite.binding as llvm

    llvm.initialize_native_target()  # (once, before the threads)
    llvm.initialize_native_asmprinter()
    with ThreadPoolExecutor(len(texts)) as pool:
        return list(pool.map(lambda t: object_code(t, 0, piece=True), texts))


# A module is split only where each piece has at least this many lines of function bodies: LLVM's
# time per piece (parsing, then code generation) is then far above a thread's cost.
SPLIT_LINES = 4000


def split_module(text: str, parts: int) -> list:
    """LLVM IR text as up to `parts` modules that, linked, are the same program: each function
    defined in one of them, the largest first into the piece with the fewest lines, except that a
    function LLVM always inlines (a loop function, `X_loop`, into its pool entry `X`; a launch
    into its callers) is defined, internal, in each piece that uses it; everything else in
    each. A piece declares what it uses of the others: their functions, and the globals, which
    the first piece defines; what another piece uses loses its internal linkage. A module with
    a name or a global of a form this does not read (a quoted name, a global line it does not
    parse) stays whole."""
    if '@"' in text:
        return [text]
    lines = text.split("\n")
    if any(line.startswith("@") and not (_GLOBAL.match(line) or _EXTERNAL.match(line)) for line in lines):
        return [text]
    head, bodies, i = [], {}, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("define ") and line.endswith("{"):
            end = lines.index("}", i)
            bodies[_defined(line)] = lines[i:end + 1]
            i = end + 1
        else:
            head.append(line)
            i += 1
    size = sum(len(b) for b in bodies.values())
    parts = max(1, min(parts, size // SPLIT_LINES))
    if parts == 1:
        return [text]
    inlined = {g.group(1) for g in map(_ALWAYS_INLINE.match, head) if g}
    copied = {n for n, b in bodies.items() if inlined & set(_GROUP.findall(b[0][b[0].rindex(")"):]))}
    refers = {n: {m for m in _SYMBOL.findall("\n".join(b[1:])) if m in bodies} for n, b in bodies.items()}
    owner, load = {}, [0] * parts
    for name in sorted(set(bodies) - copied, key=lambda n: -len(bodies[n])):
        k = load.index(min(load))
        load[k] += len(bodies[name])
        owner[name] = k
    used = [set() for _ in range(parts)]  # the defined functions each piece calls or takes the address of
    for name, k in owner.items():
        used[k] |= refers[name]
    for k in range(parts):  # and what the copies it holds use
        more = used[k] & copied
        while more:
            more = {m for n in more for m in refers[n] if m not in used[k]}
            used[k] |= more
            more &= copied
    shared = {n for k in range(parts) for n in used[k] if n in owner and owner[n] != k}
    out = []
    for k in range(parts):
        piece = []
        for line in head:
            g = _GLOBAL.match(line)
            if g:
                line = _global_line(g, k == 0)
            piece.append(line)
        for name, body in bodies.items():
            if owner.get(name) == k or (name in copied and name in used[k]):
                piece.append(_LOCAL.sub("define ", body[0], 1) if name in shared else body[0])
                piece += body[1:]
            elif name in used[k]:
                piece.append("declare " + _LOCAL.sub("", body[0][len("define "):], 1).rstrip(" {"))
        out.append("\n".join(piece))
    return out


_SYMBOL = re.compile(r"@([-\w.$]+)")
_GROUP = re.compile(r"#(\d+)")  # an attribute group a function's `define` line names
_ALWAYS_INLINE = re.compile(r"^attributes #(\d+) = \{.*\balwaysinline\b")
_LOCAL = re.compile(r"^define (?:internal |private )|^(?:internal |private )")
_EXTERNAL = re.compile(r"^@[-\w.$]+ = external ")  # (a declaration: in every piece as it is)
_GLOBAL = re.compile(r"^@([-\w.$]+) = (?:(internal|private) )?((?:unnamed_addr )?(?:global|constant)) (.*)$")


def _defined(header: str) -> str:
    """The name a `define ... @name(...) ... {` line defines."""
    return _SYMBOL.search(header[:header.index("(")]).group(1) if "(" in header else _SYMBOL.search(header).group(1)


def _global_line(g, defining: bool) -> str:
    """A global's line for a piece of a split module: its definition, with external linkage, in
    the first piece; elsewhere a declaration of its type."""
    name, _, kind, rest = g.groups()
    if defining:
        return f"@{name} = {kind} {rest}"
    return f"@{name} = external {kind.replace('unnamed_addr ', '')} {_leading_type(rest)}"


def _leading_type(text: str) -> str:
    """The type that `text` starts with (`i64`, `ptr`, `[4 x i64]`, `{ ptr, i64 }`, `<4 x float>`)."""
    if text[0] not in "[{<":
        return text.split(" ", 1)[0].rstrip(",")
    depth = 0
    for i, c in enumerate(text):
        depth += c in "[{<"
        depth -= c in "]}>"
        if depth == 0:
            return text[:i + 1]
    return text
