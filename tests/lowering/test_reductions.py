"""Reductions along leading axes split into chunks threads can share (lowering/reductions.py).

Results on threads against the interpreter's are in tests/test_parallel.py; here, which
reductions are split and what the split is made of."""
import pytest

from dg.core.mlir import ir


def _generic(iterators: str, maps: str, ins: str, outs: str, body: str, elt: str = "f32") -> str:
    return (f"linalg.generic {{indexing_maps = [{maps}], iterator_types = [{iterators}]}} ins({ins}) outs({outs}) {{\n"
            f"^bb0(%a: {elt}, %b: {elt}):\n{body}\n}}\n")


COLS = "affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>"
ALL = "affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>"
CASES = {
    # name: (function, whether it is split)
    "column sum": ("func.func @f(%x: memref<?x?xf32>, %o: memref<?xf32>) {\n"
                   + _generic('"reduction", "parallel"', COLS, "%x : memref<?x?xf32>", "%o : memref<?xf32>",
                              "%y = arith.addf %a, %b : f32\nlinalg.yield %y : f32") + "return\n}", True),
    "scalar max of integers": ("func.func @f(%x: memref<?xi64>, %o: memref<i64>) {\n"
                               + _generic('"reduction"', ALL, "%x : memref<?xi64>", "%o : memref<i64>",
                                          "%y = arith.maxsi %b, %a : i64\nlinalg.yield %y : i64", "i64")
                               + "return\n}", True),
    "strided rows, static columns": ("func.func @f(%x: memref<?x8xf64, strided<[16, 2], offset: ?>>, %o: memref<8xf64>) {\n"
                                     + _generic('"reduction", "parallel"', COLS,
                                                "%x : memref<?x8xf64, strided<[16, 2], offset: ?>>",
                                                "%o : memref<8xf64>",
                                                "%y = arith.maximumf %a, %b : f64\nlinalg.yield %y : f64", "f64")
                                     + "return\n}", True),
    # a float product: parts that overflow and underflow would make inf * 0
    "float product": ("func.func @f(%x: memref<?xf32>, %o: memref<f32>) {\n"
                      + _generic('"reduction"', ALL, "%x : memref<?xf32>", "%o : memref<f32>",
                                 "%y = arith.mulf %a, %b : f32\nlinalg.yield %y : f32") + "return\n}", False),
    # a combination with no identity to start the chunks from
    "difference": ("func.func @f(%x: memref<?xf32>, %o: memref<f32>) {\n"
                   + _generic('"reduction"', ALL, "%x : memref<?xf32>", "%o : memref<f32>",
                              "%y = arith.subf %b, %a : f32\nlinalg.yield %y : f32") + "return\n}", False),
    # the output read twice
    "square of the sum": ("func.func @f(%x: memref<?xf32>, %o: memref<f32>) {\n"
                          + _generic('"reduction"', ALL, "%x : memref<?xf32>", "%o : memref<f32>",
                                     "%s = arith.mulf %b, %b : f32\n%y = arith.addf %s, %a : f32\nlinalg.yield %y : f32")
                          + "return\n}", False),
    # too few rows, all sizes known
    "small": ("func.func @f(%x: memref<100x300xf32>, %o: memref<300xf32>) {\n"
              + _generic('"reduction", "parallel"', COLS, "%x : memref<100x300xf32>", "%o : memref<300xf32>",
                         "%y = arith.addf %a, %b : f32\nlinalg.yield %y : f32") + "return\n}", False),
    # a parallel first loop: the outer loop is shared as it is
    "row sum": ("func.func @f(%x: memref<?x?xf32>, %o: memref<?xf32>) {\n"
                + _generic('"parallel", "reduction"', "affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>",
                           "%x : memref<?x?xf32>", "%o : memref<?xf32>",
                           "%y = arith.addf %a, %b : f32\nlinalg.yield %y : f32") + "return\n}", False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_which_reductions_are_split(case):
    from dg.core.mlir import operations_under
    from dg.dialects.dialect import shared_context
    from dg.lowering import reductions

    text, split = CASES[case]
    with shared_context():
        m = ir.Module.parse(text)
        assert reductions.split_leading_reductions(m) == int(split)
        assert m.operation.verify()
        names = [op.name for op in operations_under(m.body)]
    if split:
        # a chunk's reduction in the shared loop, the partial results combined
        assert names.count("linalg.generic") == 2 and names.count("scf.parallel") == 1, str(m)
        assert names.count("memref.alloc") == 1 and names.count("memref.dealloc") == 1, str(m)
        loop = next(op for op in operations_under(m.body) if op.name == "scf.parallel")
        inside = [op.name for op in operations_under(loop.regions[0].blocks[0])]
        assert inside.count("linalg.generic") == 1 and "memref.alloc" not in inside, str(m)
    else:
        assert names.count("linalg.generic") == 1 and "scf.parallel" not in names, str(m)


def test_float_sums_may_be_reordered():
    """Sums of reductions get `reassoc` (LLVM vectorizes them); a max does not need it, a product
    keeps its order (inf * 0 where it was 0 or inf), and an element-wise add is not a reduction."""
    from dg.core.mlir import operations_under
    from dg.dialects.dialect import shared_context
    from dg.lowering import reductions

    ew = _generic('"parallel"', "affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>", "%x : memref<?xf32>",
                  "%e : memref<?xf32>", "%y = arith.addf %a, %b : f32\nlinalg.yield %y : f32")
    text = ("func.func @f(%x: memref<?xf32>, %o: memref<f32>, %p: memref<f32>, %q: memref<f32>, %e: memref<?xf32>) {\n"
            + _generic('"reduction"', ALL, "%x : memref<?xf32>", "%o : memref<f32>",
                       "%y = arith.addf %a, %b : f32\nlinalg.yield %y : f32")
            + _generic('"reduction"', ALL, "%x : memref<?xf32>", "%p : memref<f32>",
                       "%y = arith.maximumf %a, %b : f32\nlinalg.yield %y : f32")
            + _generic('"reduction"', ALL, "%x : memref<?xf32>", "%q : memref<f32>",
                       "%y = arith.mulf %a, %b : f32\nlinalg.yield %y : f32") + ew + "return\n}")
    with shared_context():
        m = ir.Module.parse(text)
        assert reductions.reassociate(m) == 1
        flags = [str(op.attributes["fastmath"]) for op in operations_under(m.body)
                 if op.name in ("arith.addf", "arith.maximumf", "arith.mulf")]
    assert flags == ["#arith.fastmath<reassoc>", "#arith.fastmath<none>", "#arith.fastmath<none>",
                     "#arith.fastmath<none>"]


PRODUCTS = """
def p(x: f32[?]) -> f32:
    return prod(x)

def p0(x: f32[?, ?]) -> f32[?]:
    return prod(x, axis=0)
"""


def test_products_keep_their_order():
    """A product whose running value underflows to 0 before it could overflow (or the other way)
    is what the interpreter gives: parts or vector lanes would multiply inf by 0."""
    import numpy as np

    import dg

    comp = dg.loads(PRODUCTS, mode="compiled", filename="prod.dg")
    interp = dg.loads(PRODUCTS, mode="interp", filename="prod.dg")
    inf_first = np.full(256, 0.1, np.float32)
    inf_first[0] = np.inf
    for x in (np.array([0.25] * 128 + [4.0] * 128, np.float32), np.tile(np.float32([0.25, 4.0]), 2048), inf_first):
        np.testing.assert_array_equal(comp.p(x), interp.p(x))
        np.testing.assert_array_equal(comp.p0(x[:, None]), interp.p0(x[:, None]))
