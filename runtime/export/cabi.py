"""The C side of an exported library: its header, and the wrapper that calls each compiled entry.

Expects: `Entry`s (one per exported function: its C name, the dg function's parameters as leaves
with their declared types, its result leaves, and the compiled code's tables: checks, allocation
sites, call sites). Guarantees: `header(lib, entries, notes)` is the C header of the library:
`dg_array` (data, rank, shape: a row-major array), the return codes, `dg_last_error`,
`dg_free`, and one function per entry whose parameters are its arguments' leaves (arrays as
`const dg_array *`, scalars by value) then its results' (arrays as `dg_array *`, scalars as
pointers), each named by its path (`p_w1`, `out_1_w1`); `wrapper(lib, entry)` the C source of
that function: it checks the arguments as the Python call does (ranks, static sizes, equal
named sizes), packs their memref descriptors, calls the guarded entry
(`core.abi.GUARDED`), and turns a failed check, an allocation that failed or results into what
the header promises (runtime/export/runtime.c's helpers). Messages are the Python call's, made
here with the same functions (core.errors), the values put in at run time.
"""
from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field

from dg.core.abi import GUARDED, INNER_FRAMES, LINKED, MAX_FRAMES, STATE, STATE_WORDS
from dg.core.errors import DgError, format_diagnostic, source_line
from dg.core.locations import loc_from_row
from dg.core.types import Sym, TensorType, np_dtype, parse_mlir_type
from dg.dsl.values import PackedList, Record, TypedValue


MAX_RANK = 8

# Return codes (the header's DG_OK ...).
CODES = {"DG_OK": 0, "DG_ERROR_ARGUMENT": 1, "DG_ERROR_CHECK": 2, "DG_ERROR_MEMORY": 3}

# The C type of a scalar of each element type (bf16 and f16 as their bits).
C_TYPES = {"f16": "uint16_t", "bf16": "uint16_t", "f32": "float", "f64": "double", "i32": "int32_t",
           "i64": "int64_t", "bool": "bool", "u64": "uint64_t"}

_C_KEYWORDS = {"auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
               "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
               "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
               "union", "unsigned", "void", "volatile", "while", "bool", "true", "false"}


@dataclass
class Leaf:
    """One array a function takes or gives: its C name, its type (declared sizes: ints, named or
    unnamed `Sym`s), and for an argument, the parameter's name and path and place."""

    name: str
    type: TensorType
    shown: str = ""  # as the Python call names it: p["w1"]
    loc: object = None

    @property
    def rank(self) -> int:
        return len(self.type.shape)

    @property
    def item(self) -> int:
        return np_dtype(self.type.dtype).itemsize

    @property
    def ctype(self) -> str:
        return C_TYPES[self.type.dtype]


@dataclass
class Entry:
    """An exported function: `name` (its C name is the library's prefix, `_`, then this), the dg
    function's name and signature text, its symbol in the compiled code, its argument and result
    leaves, the compiled code's tables (lowering.codegen.lower.to_llvm's meta) and whether it has
    state words."""

    name: str
    dg_name: str
    shown: str
    symbol: str
    args: list
    results: list
    meta: dict = field(default_factory=dict)
    stateful: bool = True  # whether the code has state words (core.abi.STATE: a program with loops or checks)


def c_name(path: str) -> str:
    """A leaf's path (`p["w1"][0]`) as a C identifier (`p_w1_0`)."""
    name = re.sub(r"[^0-9A-Za-z_]+", "_", path).strip("_") or "x"
    if name[0].isdigit():
        name = "_" + name
    return name + "_" if name in _C_KEYWORDS or keyword.iskeyword(name) else name


def _c_string(text: str) -> str:
    """`text` as a C string literal (its bytes, UTF-8; \\x01 and \\x02 kept as bytes)."""
    out = []
    for b in text.encode():
        c = chr(b)
        if c == "\\" or c == '"':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif 32 <= b < 127:
            out.append(c)
        else:
            out.append(f'\\{b:03o}')
    return '"' + "".join(out) + '"'


def _c_format(text: str) -> str:
    """A message as a printf format: `%` doubled, then \\x01 for a value (%lld)."""
    return _c_string(text.replace("%", "%%").replace("\x01", "%lld"))


def _proto(entry: Entry, lib: str) -> str:
    params = []
    for a in entry.args:
        params.append(f"{a.ctype} {a.name}" if not a.rank else f"const dg_array *{a.name}")
    for r in entry.results:
        params.append(f"{r.ctype} *{r.name}" if not r.rank else f"dg_array *{r.name}")
    return f"int {lib}_{entry.name}({', '.join(params) or 'void'})"


def header(lib: str, entries: list, notes: list) -> str:
    """The library's C header (see the module's docstring); `notes` head its comment."""
    guard = f"DG_EXPORT_{lib.upper()}_H"
    lines = ["/*"] + [f" * {n}" if n else " *" for n in notes] + [" */", f"#ifndef {guard}", f"#define {guard}", "",
                                                                   "#include <stdbool.h>", "#include <stdint.h>", "",
                                                                   "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    lines += [
        "#ifndef DG_ARRAY_DEFINED",
        "#define DG_ARRAY_DEFINED",
        f"#define DG_MAX_RANK {MAX_RANK}",
        "/* A row-major (C order) array: `data` points at its first element, `shape` gives its first",
        " * `rank` sizes. An argument's data is only read. A result's data is the library's (malloc'd:",
        " * release it with dg_free), or, where the caller set `data` (and `rank` and `shape`, which",
        " * must be the result's) before the call, the result is copied into that buffer. */",
        "typedef struct dg_array {",
        "    void *data;",
        "    int64_t rank;",
        "    int64_t shape[DG_MAX_RANK];",
        "} dg_array;",
        "",
        "/* What every function returns. */",
    ]
    lines += [f"#define {k} {v}" for k, v in CODES.items()]
    lines += [
        "",
        "/* The last error on this thread: the located message the Python call raises (FILE:LINE:COL,",
        " * the source line, the values, the dg call stack), or \"\" after a call that succeeded. */",
        "const char *dg_last_error(void);",
        "/* Frees a result's data (the library's) and sets it to NULL. */",
        "void dg_free(dg_array *a);",
        "#endif",
        "",
        "/* The same as dg_last_error, for a program that links more than one dg library. */",
        f"const char *{lib}_last_error(void);",
        "",
    ]
    for e in entries:
        lines.append(f"/* {e.shown}")
        for leaf in e.args + e.results:
            shown = f" ({leaf.shown})" if leaf.shown != leaf.name else ""
            lines.append(f" *   {leaf.name}{shown}: {leaf.type}")
        lines.append(" */")
        lines.append(_proto(e, lib) + ";")
        lines.append("")
    lines += ["#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def _argument_checks(entry: Entry) -> list:
    """C statements that check each array argument as the Python call does (runtime.signature):
    present, of its rank, its static sizes, its named sizes equal where they are named alike."""
    out, seen = [], {}
    fn = entry.dg_name
    for k, a in enumerate(entry.args):
        if not a.rank:
            continue
        where = f"argument '{a.shown}' of {fn}() must be {a.type}"
        fail = lambda text, *values: (  # noqa: E731
            f"{{ dg__error({_c_format(format_diagnostic(a.loc, text))}{''.join(', (long long)' + v for v in values)}); "
            f"return DG_ERROR_ARGUMENT; }}")
        out.append(f"if (!{a.name}) {fail(where + ', got NULL')}")
        out.append(f"if ({a.name}->rank != {a.rank}) {fail(where + ', got an array of rank ' + chr(1), a.name + '->rank')}")
        for axis, d in enumerate(a.type.shape):
            size = f"{a.name}->shape[{axis}]"
            if isinstance(d, int):
                out.append(f"if ({size} != {d}) "
                           f"{fail(f'{where}, got size {chr(1)} in axis {axis} (expected {d})', size)}")
                continue
            out.append(f"if ({size} < 0) {fail(f'{where}, got size {chr(1)} in axis {axis}', size)}")
            if isinstance(d, Sym) and d.name:
                if d.name in seen:
                    first, first_axis, first_leaf = seen[d.name]
                    text = (f"size '{d.name}' is {chr(1)} in axis {first_axis} of '{first_leaf}' but {chr(1)} in axis "
                            f"{axis} of '{a.shown}' ({fn}() declares them equal)")
                    out.append(f"if ({size} != {first}) {fail(text, first, size)}")
                else:
                    seen[d.name] = (size, axis, a.shown)
        n = " * ".join(f"{a.name}->shape[{i}]" for i in range(a.rank))
        out.append(f"if (!{a.name}->data && {n}) {fail(where + ', got no data')}")
    return out


def _tables(entry: Entry, k: int) -> list:
    """The static tables of entry k's messages: each check's (its values as \\x01 and \\x02),
    each allocation site's, each call site's place and source line."""
    meta = entry.meta
    checks = []
    for place, message, n in meta["checks"]:
        text = message.format("\x01", "\x02") if n else message
        checks.append(format_diagnostic(loc_from_row(place), text))
    allocs = [format_diagnostic(loc_from_row(place), "out of memory: the value computed here does not fit in memory")
              for place in meta["alloc_sites"]]
    places, sites = [], []
    for place in meta["call_sites"]:
        loc = loc_from_row(place)
        own = loc is None or loc.file.startswith("<dg.")
        places.append("" if own else str(loc))
        src = None if own else source_line(loc.file, loc.line)
        sites.append(f"\n      {src.strip()}" if src is not None and src.strip() else "")

    def table(name, items, fmt=_c_string):
        body = ", ".join(fmt(t) for t in items) if items else '""'
        return f"static const char *const {name}_{k}[] = {{{body}}};"

    return [table("checks", checks), table("allocs", allocs, lambda t: _c_string(t.replace("%", "%%"))),
            table("places", places), table("sites", sites)]


def library_functions(lib: str) -> str:
    """The C source of the library's own functions beside the runtime's (runtime.c)."""
    return (f"const char *dg_last_error(void);\n"
            f"const char *{lib}_last_error(void) {{ return dg_last_error(); }}\n")


def wrapper(lib: str, entries: list, first: int = 0) -> str:
    """The C source of the library's functions for `entries` (see the module's docstring), their
    tables numbered from `first`."""
    lines = ["#include <stdbool.h>", "#include <stdint.h>", "#include <stdlib.h>", "",
             "typedef struct dg_array { void *data; int64_t rank; int64_t shape[8]; } dg_array;",
             *[f"#define {k} {v}" for k, v in CODES.items()],
             *([f"extern __thread int64_t {STATE}[{STATE_WORDS}];"] if any(e.stateful for e in entries) else []),
             "int64_t dg__prepare(void);", "void dg__clear_error(void);", "void dg__error(const char *, ...);",
             "void dg__check_error(const char *, int64_t, int64_t, const int64_t *, int64_t, int64_t, "
             "const char *const *, const char *const *);",
             "int dg__fits(const int64_t *, int64_t, const dg_array *, const char *);",
             "int dg__result(const int64_t *, int64_t, int64_t, dg_array *, void *const *, int64_t, void **, "
             "int64_t *, const char *);",
             "void dg__scalar(const int64_t *, int64_t, void *);",
             "void dg__release(const int64_t *, const int64_t *, int64_t, void *const *, int64_t, void **, int64_t *);",
             ""]
    for k, e in enumerate(entries, first):
        lines += _function(lib, e, k)
    return "\n".join(lines) + "\n"


def _function(lib: str, e: Entry, k: int) -> list:
    ins = [parse_mlir_type(t) for t in e.meta["signatures"][e.symbol][0]]
    outs = [parse_mlir_type(t) for t in e.meta["signatures"][e.symbol][1]]
    assert len(ins) == len(e.args) and len(outs) == len(e.results), (e.name, ins, e.args, outs, e.results)
    body = [f"extern int32_t dg__entry_{k}(void **) __asm__(\"{GUARDED}{LINKED}{e.symbol}\");", *_tables(e, k),
            _proto(e, lib) + " {",
            "    int64_t budget = dg__prepare();" if e.stateful else "    dg__prepare();",
            "    dg__clear_error();"]
    body += ["    " + s for s in _argument_checks(e)]
    argv, inputs = [], []
    for i, a in enumerate(e.args):
        if not a.rank:
            body.append(f"    {a.ctype} v{i} = {a.name};")
            body.append(f"    int64_t d{i}[3] = {{(int64_t)&v{i}, (int64_t)&v{i}, 0}};")
            inputs.append(f"&v{i}")
        else:
            sizes = [f"{a.name}->shape[{j}]" for j in range(a.rank)]
            strides = []
            for j in range(a.rank):
                strides.append(" * ".join(sizes[j + 1:]) or "1")
            words = [f"(int64_t){a.name}->data"] * 2 + ["0"] + sizes + strides
            body.append(f"    int64_t d{i}[{len(words)}] = {{{', '.join(words)}}};")
            inputs.append(f"{a.name}->data")
        argv.append(f"d{i}")
    offsets, at = [], 0
    for r in e.results:
        offsets.append(at)
        at += 3 + 2 * r.rank
    nres = len(e.results)
    if nres:
        body.append(f"    int64_t res[{at}] = {{0}};")
        argv.insert(0, "res")
    body.append(f"    void *argv[{max(1, len(argv))}] = {{{', '.join(argv) or '0'}}};")
    body.append(f"    void *inputs[{max(1, len(inputs))}] = {{{', '.join(inputs) or '0'}}};")
    body.append(f"    void *taken[{max(1, nres)}];")
    body.append("    int64_t ntaken = 0;")
    body.append(f"    static const int64_t offsets[{max(1, nres)}] = {{{', '.join(map(str, offsets)) or '0'}}};")
    for r in e.results:
        if r.rank:
            body.append(f"    if (!{r.name}) {{ dg__error(\"dg: error: result '{r.name}' of {lib}_{e.name}() is NULL\"); "
                        f"return DG_ERROR_ARGUMENT; }}")
    if e.stateful:
        body += [
            f"    {STATE}[0] = 0;",
            f"    {STATE}[1] = 0;",
            f"    {STATE}[2] = budget;",
            f"    int32_t rc = dg__entry_{k}(argv);",
            f"    if ({STATE}[0]) {{",
            f"        int64_t id = {STATE}[0] - 1;",
            f"        if (!rc) dg__release(res, offsets, {nres}, inputs, {len(inputs)}, taken, &ntaken);" if nres else "",
            f"        dg__check_error(checks_{k}[id], {STATE}[3], {STATE}[4], {STATE} + 5, {INNER_FRAMES}, {MAX_FRAMES}, "
            f"sites_{k}, places_{k});",
            "        return DG_ERROR_CHECK;",
            "    }",
        ]
    else:  # (code with neither loops nor checks: nothing can fail but an allocation)
        body.append(f"    int32_t rc = dg__entry_{k}(argv);")
    body.append(f"    if (rc) {{ dg__error(\"%s\", allocs_{k}[rc - 1]); return DG_ERROR_MEMORY; }}")
    fits = " || ".join(f"dg__fits(res + {off}, {r.rank}, {r.name}, \"{r.name}\")"
                       for r, off in zip(e.results, offsets) if r.rank)
    if fits:
        body.append(f"    if ({fits}) {{")
        body.append(f"        dg__release(res, offsets, {nres}, inputs, {len(inputs)}, taken, &ntaken);")
        body.append("        return DG_ERROR_ARGUMENT;")
        body.append("    }")
    for r, off in zip(e.results, offsets):
        if r.rank:
            body.append(f"    if (dg__result(res + {off}, {r.rank}, {r.item}, {r.name}, inputs, {len(inputs)}, taken, "
                        f"&ntaken, \"{r.name}\")) {{")
            body.append(f"        dg__release(res, offsets, {nres}, inputs, {len(inputs)}, taken, &ntaken);")
            body.append("        return DG_ERROR_MEMORY;")
            body.append("    }")
        else:
            body.append(f"    if ({r.name}) dg__scalar(res + {off}, {r.item}, {r.name});")
    if nres:
        body.append(f"    dg__release(res, offsets, {nres}, inputs, {len(inputs)}, taken, &ntaken);")
    body += ["    return DG_OK;", "}", ""]
    return [line for line in body if line != ""] + [""]


def leaves_of(t, prefix: str, shown: str, loc=None) -> list:
    """The leaves of a type (a TensorType, or a tuple or record of them), in flatten's order, each
    named by `prefix` and its path (C) and by `shown` and its path (as dg writes it)."""
    if isinstance(t, PackedList):
        raise DgError(f"dg export: '{shown}' is a list; exported functions take and give arrays, tuples and "
                      f"records (pass a list's leaves and offsets as arrays)", loc)
    if isinstance(t, Record):
        return [leaf for key, e in t.items() for leaf in leaves_of(e, f"{prefix}_{key}", f'{shown}["{key}"]', loc)]
    if isinstance(t, tuple):
        return [leaf for i, e in enumerate(t) for leaf in leaves_of(e, f"{prefix}_{i}", f"{shown}[{i}]", loc)]
    if isinstance(t, TypedValue):
        t = t.type
    return [Leaf(c_name(prefix), t, shown, loc)]
