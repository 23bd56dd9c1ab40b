"""Registry-driven batching tests: for every op with a sample, the batch pass's
rule (its `batch` facet, or the loop over examples it falls back on) gives what
a loop over the examples gives, with every operand batched and with each one
batched alone (the others shared by every example).

Each case is a one-op function `@f` plus a `vmap` declaration `@f_vmap`; the
module goes through the batch pass and runs in the interpreter (and, for a few
ops, the compiled CPU backend too)."""
import numpy as np
import pytest

from dg.core.attrs import attr_text
from dg.core.types import Sym, TensorType, dtype_of_np
from dg.dialects import OPS
from dg.dialects.dialect import parse
from dg.lowering.transforms import run_batch
from dg.runtime import interp

B = 3
# Ops without a sample, and where their batching is tested instead.
ELSEWHERE = {
    "assert": "e2e/test_vmap.py (a failed check names the example)",
    "check": "e2e/test_vmap.py (the batch sizes of mapped arguments)",
    "constant": "no operands: copied as it is",
    "undef": "no operands: copied as it is",
    "print": "an effect: prints the batch",
    "breakpoint": "an effect: shows the batch",
    "to_i1": "e2e/test_vmap.py (if and while on per-example conditions)",
    "from_i1": "e2e/test_vmap.py (break)",
    "to_index": "e2e/test_vmap.py (loops)",
    "from_index": "e2e/test_vmap.py (loops)",
    "range_len": "e2e/test_vmap.py (for over per-example ranges)",
    "tape_alloc": "e2e/test_vmap.py (vmap of grad through loops)",
    "tape_push": "e2e/test_vmap.py (vmap of grad through loops)",
    "tape_read": "e2e/test_vmap.py (vmap of grad through loops)",
    "send": "per example, in order: a message needs two processes (dist/test_pipeline.py)",
    "recv": "per example, in order: a message needs two processes (dist/test_pipeline.py)",
    "allreduce_start": "per example, in order: a pair with allreduce_wait (dist/test_blocks.py)",
    "allreduce_wait": "per example, in order: a pair with allreduce_start (dist/test_blocks.py)",
}


def _type_of(a) -> TensorType:
    a = np.asarray(a)
    return TensorType(dtype_of_np(a.dtype), tuple(a.shape))


def _examples(name):
    """B samples of one shape (the op's sample from several seeds, or its first one perturbed),
    and the attributes."""
    op = OPS[name]
    first, attrs = op.sample(np.random.default_rng(0))
    first = [np.asarray(a) for a in first]
    attrs = {**{k: "" for k, kind in op.attrs.items() if kind == "str"}, **attrs}  # (a message a sample leaves out)
    out = [first]
    for s in range(1, B):
        arrays, more = op.sample(np.random.default_rng(s))
        arrays = [np.asarray(a) for a in arrays]
        more = {**{k: "" for k, kind in op.attrs.items() if kind == "str"}, **more}
        if more != attrs or [a.shape for a in arrays] != [a.shape for a in first]:
            arrays = [a + np.asarray(0.25 * s, a.dtype) if a.dtype.kind == "f" else a for a in first]
        out.append(arrays)
    return out, attrs


def _module(name, types, attrs, batched):
    op = OPS[name]
    rt = op.infer(types, **attrs)
    rts = rt if isinstance(rt, list) else [rt]
    ins = ", ".join(t.mlir() for t in types)
    outs = ", ".join(t.mlir() for t in rts)
    params = ", ".join(f"%a{i}: {t.mlir()}" for i, t in enumerate(types))
    operands = ", ".join(f"%a{i}" for i in range(len(types)))
    results = ", ".join(f"%r#{i}" for i in range(len(rts))) if len(rts) > 1 else "%r"
    head = f"%r:{len(rts)}" if len(rts) > 1 else "%r"
    attr = ", ".join(f"{k} = {attr_text(op.attrs[k], v)}" for k, v in attrs.items())

    def batch(t):
        return TensorType(t.dtype, (Sym(),) + tuple(t.shape)).mlir()
    vins = ", ".join(batch(t) if b else t.mlir() for t, b in zip(types, batched))
    vouts = ", ".join(batch(t) for t in rts)
    where = ", ".join(str(i) for i, b in enumerate(batched) if b)
    return f"""
func.func @f({params}) -> ({outs}) {{
  {head} = "dg.{name}"({operands}) {{{attr}}} : ({ins}) -> ({outs})
  return {results} : {outs}
}}
""", f"""func.func private @f_vmap({vins}) -> ({vouts}) attributes {{dg.kind = "vmap", dg.of = "f", dg.wrt = array<i64: {where}>}}
"""


def _cases():
    out = []
    for name, op in sorted(OPS.items()):
        if op.sample is None:
            continue
        arrays, _ = op.sample(np.random.default_rng(0))
        n = len(arrays)
        if n == 0:
            continue
        patterns = [(True,) * n] + ([tuple(i == j for i in range(n)) for j in range(n)] if n > 1 else [])
        for p in patterns:
            out.append(pytest.param(name, p, id=f"{name}-{''.join('b' if x else 's' for x in p)}"))
    return out


def _run(name, batched, compiled=False):
    examples, attrs = _examples(name)
    types = [_type_of(a) for a in examples[0]]
    text, decl = _module(name, types, attrs, batched)
    out = str(run_batch(parse(text + decl, f"<batch:{name}>")))
    args = [np.stack([ex[i] for ex in examples]) if b else examples[0][i] for i, b in enumerate(batched)]
    if compiled:
        from dg.lowering.codegen.units import Unit
        from dg.runtime import targets
        from dg.runtime.cpu import CPU
        got = targets.build(CPU, Unit(out)).call("f_vmap", args)
    else:
        got = interp.run(interp.Translation(parse(out)), "f_vmap", args)
    tr = interp.Translation(parse(text))
    want = []
    for k in range(B):
        one = [examples[k][i] if b else examples[0][i] for i, b in enumerate(batched)]
        want.append(interp.run(tr, "f", one))
    return got, want


def assert_same_as_loop(name, got, want):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = [w if isinstance(w, (tuple, list)) else (w,) for w in want]
    for j, g in enumerate(got):
        w = np.stack([np.asarray(x[j]) for x in want])
        g = np.asarray(g)
        assert g.shape == w.shape, f"{name}: result {j} has shape {g.shape}, the loop's {w.shape}"
        assert g.dtype == w.dtype, f"{name}: result {j} is {g.dtype}, the loop's {w.dtype}"
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("name,batched", _cases())
def test_batching_rule_matches_a_loop_over_examples(name, batched):
    got, want = _run(name, batched)
    assert_same_as_loop(name, got, want)


@pytest.mark.parametrize("name", ["add", "tanh", "matmul", "softmax", "sum", "getitem", "take", "reshape",
                                  "conv2d", "where"])
def test_batching_rule_compiled_matches_a_loop(name):
    arrays, _ = OPS[name].sample(np.random.default_rng(0))
    got, want = _run(name, (True,) * len(arrays), compiled=True)
    assert_same_as_loop(name, got, want)


def test_every_op_has_its_batching_tested():
    """An op without a sample says where its batching is tested instead."""
    missing = [n for n, op in OPS.items() if op.sample is None and n not in ELSEWHERE]
    assert not missing, f"ops whose batching no test covers: {missing}"
