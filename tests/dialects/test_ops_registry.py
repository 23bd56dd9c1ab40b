"""Registry-driven op tests: every op's shape rule agrees with its NumPy
implementation, and every op is declared in the IRDL dialect."""
import numpy as np
import pytest

from dg.core.types import TensorType, dtype_of_np
from dg.dialects import OPS
from dg.dialects.dialect import irdl_text, shared_context

# Ops whose implementation needs a runtime (effects) or special inputs.
NO_SAMPLE = {"print", "assert", "check", "breakpoint", "constant", "to_index", "from_index", "to_i1", "from_i1", "range_len",
             "tape_alloc", "tape_push", "tape_read",
             "send", "recv",  # (a message needs two processes: tests/dist/test_pipeline.py)
             "allreduce_start", "allreduce_wait"}  # (a pair: tests/dist/test_blocks.py)


def test_every_op_has_a_sample_or_a_reason():
    missing = [n for n, op in OPS.items() if op.sample is None and n not in NO_SAMPLE]
    assert not missing, f"ops without a registry sample: {missing}"


def _type_of(a) -> TensorType:
    a = np.asarray(a)
    return TensorType(dtype_of_np(a.dtype), tuple(a.shape))


@pytest.mark.parametrize("name", sorted(n for n, op in OPS.items() if op.sample is not None))
def test_shape_rule_matches_numpy(name):
    op = OPS[name]
    rng = np.random.default_rng(0)
    for trial in range(3):
        arrays, attrs = op.sample(rng)
        arrays = [np.asarray(a) for a in arrays]
        out = op.impl(*arrays, **attrs)
        rule = op.infer([_type_of(a) for a in arrays], **attrs)
        outs = list(out) if isinstance(out, tuple) else [out]
        rules = rule if isinstance(rule, list) else [rule]
        assert len(outs) == len(rules)
        for o, r in zip(outs, rules):
            o = np.asarray(o)
            assert dtype_of_np(o.dtype) == r.dtype, f"{name}: impl gives {o.dtype}, rule says {r.dtype}"
            assert o.ndim == r.rank, f"{name}: impl gives rank {o.ndim}, rule says {r}"
            for d, s in zip(r.shape, o.shape):
                if isinstance(d, int):
                    assert d == s, f"{name}: impl gives shape {o.shape}, rule says {r}"


def _float_sampled():
    out = []
    for n, op in sorted(OPS.items()):
        if op.sample is None:
            continue
        arrays, attrs = op.sample(np.random.default_rng(1))
        if arrays and np.asarray(arrays[0]).dtype == np.float32 and "dtype" not in attrs:
            out.append(n)
    return out


@pytest.mark.parametrize("name", _float_sampled())
def test_shape_rule_keeps_f64_and_f16(name):
    """Float ops keep their operands' precision (no silent promotion to f64 or demotion)."""
    op = OPS[name]
    arrays, attrs = op.sample(np.random.default_rng(1))
    arrays = [np.asarray(a) for a in arrays]
    for dt in (np.float64, np.float16):
        cast = [a.astype(dt) if a.dtype == np.float32 else a for a in arrays]
        out = op.impl(*cast, **attrs)
        rule = op.infer([_type_of(a) for a in cast], **attrs)
        outs = list(out) if isinstance(out, tuple) else [out]
        rules = rule if isinstance(rule, list) else [rule]
        for o, r in zip(outs, rules):
            assert dtype_of_np(np.asarray(o).dtype) == r.dtype, f"{name} on {np.dtype(dt)}: {np.asarray(o).dtype} vs {r}"


def test_irdl_declares_every_op():
    text = irdl_text()
    for name in OPS:
        assert f"irdl.operation @{name} " in text
    shared_context()  # the dialect loads


def test_pure_ops_fold_away_when_unused():
    from dg.dialects.dialect import parse
    from dg.lowering.pipeline import run_passes

    m = parse('''
func.func @f(%a: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "dg.exp"(%a) : (tensor<3xf32>) -> tensor<3xf32>
  %1 = "dg.exp"(%a) : (tensor<3xf32>) -> tensor<3xf32>
  %2 = "dg.add"(%0, %1) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %3 = "dg.tanh"(%a) : (tensor<3xf32>) -> tensor<3xf32>
  return %2 : tensor<3xf32>
}''')
    out = str(run_passes(m, "canonicalize,cse"))
    assert out.count('"dg.exp"') == 1
    assert "dg.tanh" not in out


def _example_function(name: str) -> str:
    """The op's IR example (its doc's last line) inside a function taking its operands."""
    example = [line.strip() for line in OPS[name].doc.splitlines() if f'"dg.{name}"' in line][-1]
    operands = example.split(f'"dg.{name}"(')[1].split(")")[0]
    types = example.rsplit(" : (", 1)[1].split(") -> ")[0]
    params = ", ".join(f"{o}: {t}" for o, t in zip(operands.split(", "), types.split(", ")) if o)
    return f"func.func @example({params}) {{\n  {example}\n  return\n}}"


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_has_an_ir_example_that_verifies(name):
    """Every op's doc ends with an example of it in IR, which parses and whose types its rule gives."""
    from dg.dialects.dialect import parse
    from dg.dialects.verify import verify_module

    doc = OPS[name].doc
    assert doc and doc.splitlines()[0].strip(), f"dg.{name} has no description"
    verify_module(parse(_example_function(name), f"<the example of dg.{name}>"))


def test_a_targets_own_lowering_is_the_one_its_pipeline_takes(monkeypatch):
    """`lower_for[target]` replaces `lower` in that target's to-linalg, and only there."""
    from dg.dialects.dialect import parse
    from dg.dialects.helpers import lower_elementwise
    from dg.lowering.pipeline import run_passes

    on_gpu = lower_elementwise(lambda b, kind, ety, args, op: b.binary("arith.subf", b.const(0.0, ety), args[0], ety))
    monkeypatch.setitem(OPS["neg"].lower_for, "cuda", on_gpu)
    text = 'func.func @f(%a: tensor<3xf32>) -> tensor<3xf32> {\n  %0 = "dg.neg"(%a) : (tensor<3xf32>) -> tensor<3xf32>\n' \
           '  return %0 : tensor<3xf32>\n}\n'
    cpu, gpu = (str(run_passes(parse(text), passes)) for passes in ("to-linalg", "to-linalg{target=cuda}"))
    assert "arith.negf" in cpu and "arith.subf" not in cpu
    assert "arith.subf" in gpu and "arith.negf" not in gpu
