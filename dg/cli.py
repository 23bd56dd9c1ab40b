"""The `dg` command line: run, check, ir, opt, graph, export (LANGUAGE.md §5), and `dg --config`."""
from __future__ import annotations

import argparse
import importlib.metadata
import sys
from pathlib import Path

import numpy as np

from dg.core import tracebacks
from dg.core.errors import DgError
from dg.lowering.pipeline import SHOWN

# NumPy's names of the element types, which --args takes too (float32[4, 3])
NUMPY_NAMES = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int32": "i32",
               "int64": "i64", "bool_": "bool"}


def _parse_signature(text: str) -> list:
    """`f32[4, 3], i64, f32` -> zero arrays of those types (for `dg ir --args`)."""
    from dg.core.types import DTYPES, np_dtype
    from dg.dsl.parser import parse_type
    from dg.lowering.pipeline import split_top_level

    arrays = []
    for part in split_top_level(text):
        te = parse_type(part, "<--args>", register=False)
        dtype = NUMPY_NAMES.get(te.dtype, te.dtype)
        if dtype not in DTYPES:
            raise DgError(f"--args: unknown element type '{te.dtype}' in {part!r} (expected one of "
                          f"{', '.join(DTYPES)})")
        dims = [] if te.dims is None else te.dims
        if any(not isinstance(d, int) for d in dims):
            raise DgError(f"--args needs concrete sizes, got {text!r}")
        arrays.append(np.zeros(dims, dtype=np_dtype(dtype)))
    return arrays


def cmd_run(a) -> int:
    import dg

    m = dg.load(a.file, mode=a.mode, device=a.device, check_numerics=a.check_numerics or None)
    if a.entry not in m.functions:
        raise DgError(f"--entry {a.entry}: {a.file} has no function '{a.entry}'")
    out = getattr(m, a.entry)()
    if out is not None:
        print(out)
    return 0


def cmd_check(a) -> int:
    from dg.runtime.program import check_source, source_from_file

    try:
        check_source(source_from_file(a.file))
    except DgError as e:
        errs = getattr(e, "all_errors", [e])
        for err in errs:
            print(str(err), file=sys.stderr)
        print(f"{len(errs)} error{'s' if len(errs) != 1 else ''}", file=sys.stderr)
        return 1
    print(f"{a.file}: ok")
    return 0


def cmd_ir(a) -> int:
    import dg

    m = dg.load(a.file, mode=a.mode, device=a.device)
    if a.fn not in m.functions:
        raise DgError(f"{a.file} has no function '{a.fn}'")
    fn = getattr(m, a.fn)
    args = _parse_signature(a.args) if a.args else None
    print(fn.ir(a.stage, args=args))
    return 0


def cmd_opt(a) -> int:
    from dg.dialects.dialect import parse
    from dg.lowering.pipeline import run_passes

    source = "<stdin>" if a.file == "-" else a.file
    try:
        text = sys.stdin.read() if a.file == "-" else Path(a.file).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DgError(f"cannot read {a.file}: {e.strerror if isinstance(e, OSError) else e}") from None
    m = run_passes(parse(text, source), ["verify"], source=source)  # dg ops against their rules
    if a.passes:
        m = run_passes(m, a.passes)
    print(m.operation.get_asm(enable_debug_info=a.debug_info))
    return 0


def cmd_graph(a) -> int:
    import dg
    from dg.runtime.graph import output_format

    output_format(a.output)  # an unknown extension is refused before anything is compiled
    m = dg.load(a.file, mode="interp")
    if a.fn not in m.functions:
        raise DgError(f"{a.file} has no function '{a.fn}'")
    fn = getattr(m, a.fn)
    args = _parse_signature(a.args) if a.args else None
    fn.graph(args=args, grad=a.grad).save(a.output)
    print(f"wrote {a.output}")
    return 0


def cmd_config() -> int:
    """A table of every `DG_*` variable: what it is set to now ("(unset)" where it is not), its
    default and its meaning; a value dg would refuse is named below the table, and exits with 1."""
    from dg.core.config import VARIABLES

    rows, bad = [("VARIABLE", "VALUE", "DEFAULT", "MEANING")], []
    for v in VARIABLES.values():
        text = v.text()
        try:
            v.read()
        except DgError as e:
            bad.append(e.raw_message)
        rows.append((v.name, "(unset)" if text is None else text, v.default, v.meaning))
    widths = [max(len(r[k]) for r in rows) for k in range(3)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[3])
    for message in bad:
        print(f"dg --config: error: {message}", file=sys.stderr)
    return 1 if bad else 0


def cmd_export(a) -> int:
    import dg

    m = dg.load(a.file, mode="compiled", device="cpu")
    names = [n.strip() for n in a.entry.split(",") if n.strip()]
    for n in names:
        if n not in m.functions:
            raise DgError(f"--entry {n}: {a.file} has no function '{n}'")
    signatures = [t.strip() for t in a.args.split(";")] if a.args else [None] * len(names)
    if len(signatures) != len(names):
        raise DgError(f"--args: {len(signatures)} signatures (separated by ';') for {len(names)} entries")
    examples = [None if t is None else tuple(_parse_signature(t)) for t in signatures]
    out = dg.export({n: getattr(m, n) for n in names}, a.output, examples, name=a.name, blas=a.blas)
    for path in (out.shared, out.static, out.header):
        print(path)
    return 0


def _version() -> str:
    try:
        return importlib.metadata.version("dg")
    except importlib.metadata.PackageNotFoundError:  # a checkout that was not installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dg", description="dg: a small deep-learning language")
    p.add_argument("--version", action="version", version=f"dg {_version()}")
    p.add_argument("--config", action="store_true",
                   help="print every DG_* environment variable: its value now, its default and its meaning")
    sub = p.add_subparsers(dest="cmd")

    def mode_args(sp):
        sp.add_argument("--mode", choices=["interp", "compiled", "shadow"], default=None,
                        help="interp, compiled, or shadow (both, compared op by op); default DG_MODE, else compiled")
        sp.add_argument("--device", choices=["cpu", "cuda"], default=None)

    r = sub.add_parser("run", help="run a zero-argument entry function and print what it returns")
    r.add_argument("file")
    r.add_argument("--entry", default="main")
    r.add_argument("--check-numerics", action="store_true",
                   help="raise at the first op that makes a NaN or an infinity (also DG_CHECK_NUMERICS=1)")
    mode_args(r)
    r.set_defaults(fn_cmd=cmd_run)

    c = sub.add_parser("check", help="parse and type-check, printing every error")
    c.add_argument("file")
    c.set_defaults(fn_cmd=cmd_check)

    i = sub.add_parser("ir", help="print a function's IR at a stage")
    i.add_argument("file")
    i.add_argument("--fn", required=True)
    i.add_argument("--stage", default="dg", help=f"the pipeline's stage to show: {', '.join(SHOWN)}")
    i.add_argument("--args", default=None, help='argument types, e.g. "f32[4, 3], i64"')
    mode_args(i)
    i.set_defaults(fn_cmd=cmd_ir)

    o = sub.add_parser("opt", help="run passes on textual IR (like mlir-opt)")
    o.add_argument("file", help="an .mlir file, or - for standard input")
    o.add_argument("--passes", default="", help="comma-separated pass names, e.g. canonicalize,cse")
    o.add_argument("--debug-info", action="store_true", help="print locations")
    o.set_defaults(fn_cmd=cmd_opt)

    g = sub.add_parser("graph", help="draw a function's dataflow graph (.svg, .png, .pdf with Graphviz; .dot)")
    g.add_argument("file")
    g.add_argument("--fn", required=True)
    g.add_argument("-o", "--output", required=True, help="the file to write: .svg, .png, .pdf, or .dot/.gv (the source)")
    g.add_argument("--grad", action="store_true", help="draw the gradient (with respect to every float parameter)")
    g.add_argument("--args", default=None, help='argument types, e.g. "f32[4, 3], i64"')
    g.set_defaults(fn_cmd=cmd_graph)

    e = sub.add_parser("export", help="build a native library and a C header of functions (no Python at run time)")
    e.add_argument("file")
    e.add_argument("--entry", required=True, help="the functions to export: NAME[,NAME...]")
    e.add_argument("--args", default=None,
                   help='argument types, e.g. "f32[4, 3], i64" (one signature per entry, separated by ";"); '
                        "without it, the functions' annotations")
    e.add_argument("-o", "--output", required=True, help="the folder to write lib<name>.so, lib<name>.a and <name>.h into")
    e.add_argument("--name", default=None, help="the library's name and its functions' prefix (default: the file's stem)")
    e.add_argument("--blas", choices=["auto", "none"], default="auto",
                   help="auto: link the BLAS dg calls here; none: products as dg's own loops")
    e.set_defaults(fn_cmd=cmd_export)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.config:
        if args.cmd is not None:
            parser.error(f"--config takes no command (got '{args.cmd}')")
        return cmd_config()
    if args.cmd is None:
        parser.error("the following arguments are required: cmd")
    before, tracebacks.COMMAND[0] = tracebacks.COMMAND[0], True
    try:
        return args.fn_cmd(args)
    except DgError as e:  # (an error with no place in a file is the command's: `dg run: error: ...`)
        print(str(e) if e.loc is not None else "\n".join([f"dg {args.cmd}: error: {e.raw_message}"] + e.notes),
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        tracebacks.COMMAND[0] = before


if __name__ == "__main__":
    sys.exit(main())
