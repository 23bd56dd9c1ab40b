"""The pieces several families of ops share, in one module that each `ops_*.py` imports (an op
file imports no other op file).

- sizes given in a `shape` attribute (`DYN` for "the next size operand"), checked and bounded;
- broadcasting (indexing maps, output sizes) and operands checked at run time to agree in size;
- generics: element-wise (`map_generic`, `lower_elementwise`), copies, squeezes, reductions
  (`reduce_generic` and the keepdims pieces softmax and cross-entropy use);
- scalars: integer predicates and limits, float truncation;
- pieces of VJP rules (`reshape_like`, `summed_to`);
- images [N, C, H, W] and their windows, for convolution and pooling: shape rules, NumPy
  windows and their scatter, padding and output sizes in IR (the lowering passes of the CPU's
  strategies for them, in lowering/, use these too).

Lowering pieces take the lowering's builder `b` (dialects.builder.Builder) and write IR text;
VJP pieces take the autodiff pass's builder `g`.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from dg.core.types import DTYPES, ShapeError, Sym, TensorType, is_float

from .builder import fail_if, stand_in_if


# ---------------------------------------------------------------- sizes given in a `shape` attribute
DYN = -2  # in a `shape` attribute: the next size operand (an i64 scalar)
NEGATIVE_SIZE = "a size given at run time is negative"
# More elements than any memory holds: checked before the sizes are multiplied into a byte count
# that would wrap around in compiled code (and allocate too little).
MAX_ELEMENTS = 1 << 50
TOO_LARGE = "the sizes make more than 2**50 elements"


def shape_from(attr_shape, dims):
    """NumPy's side: a `shape` attribute's sizes, each DYN the next of `dims` (a ValueError for a
    negative one, or for more than MAX_ELEMENTS elements)."""
    dims = list(dims)
    out = []
    for s in attr_shape:
        out.append(int(dims.pop(0)) if s == DYN else int(s))
        if s == DYN and out[-1] < 0:  # (NumPy would take a -1 in a reshape for "the rest")
            raise ValueError(NEGATIVE_SIZE)
    check_count(out)
    return out


def check_count(shape) -> None:
    """A ValueError where the sizes make more than MAX_ELEMENTS elements."""
    n = 1
    for d in shape:
        n *= int(d)
    if n > MAX_ELEMENTS:
        raise ValueError(TOO_LARGE)


def bounded(b, sizes: list) -> list:
    """Index sizes given at run time, all 0 (after a located failure) when together they make
    more than MAX_ELEMENTS elements (counted in f64, which does not wrap around)."""
    count = b.const(1.0, "f64")
    for s in sizes:
        i = b.unary("arith.index_cast", s, "index to i64")
        count = b.binary("arith.mulf", count, b.unary("arith.sitofp", i, "i64 to f64"), "f64")
    too = b.cmp("ogt", count, b.const(float(MAX_ELEMENTS), "f64"), "f64")
    fail_if(b, too, TOO_LARGE)
    zero = b.const(0, "index")
    return [b.select(too, zero, s, "index") for s in sizes]


def type_shape(attr_shape):
    """A `shape` attribute as a type's shape: a fresh symbolic size for each DYN."""
    return tuple(Sym() if s == DYN else s for s in attr_shape)


def sizes_from(b, op, attr_shape, dyn_operands):
    """Index values for a `shape` attribute: static entries, -2 from the next i64 operand (a
    negative one is a located error, and 0 until it is raised)."""
    dyn = list(dyn_operands)
    out = []
    for s in attr_shape:
        if s == DYN:
            v, t = dyn.pop(0)
            x = b.extract(v, t)
            zero = b.const(0, "i64")
            neg = b.cmp("slt", x, zero, "i64")
            fail_if(b, neg, NEGATIVE_SIZE)
            i = b.assign(f"arith.index_cast {b.select(neg, zero, x, 'i64')} : i64 to index", "i")
            out.append(i)
        else:
            out.append(b.const(s, "index"))
    return bounded(b, out) if DYN in attr_shape else out


# ---------------------------------------------------------------- broadcasting, and operands checked to agree in size

def broadcast_maps(in_types, out_t):
    """Indexing maps of inputs broadcast (NumPy rules) to the output shape."""
    R = out_t.rank
    maps = []
    for t in in_types:
        exprs = []
        for j, d in enumerate(t.shape):
            i = R - t.rank + j
            od = out_t.shape[i]
            if isinstance(d, int) and d == 1 and not (isinstance(od, int) and od == 1):
                exprs.append("0")
            else:
                exprs.append(f"d{i}")
        maps.append(", ".join(exprs))
    return maps


def out_sizes(b, operands, in_types, out_t):
    """Index SSA values for each output dim, taken from an operand that has it."""
    R = out_t.rank
    sizes = []
    for i, od in enumerate(out_t.shape):
        if isinstance(od, int):
            sizes.append(None)
            continue
        for v, t in zip(operands, in_types):
            j = i - (R - t.rank)
            if j >= 0 and not (isinstance(t.shape[j], int) and t.shape[j] == 1):
                sizes.append(b.dim(v, t, j))
                break
    return sizes


def _same_size(d, od) -> bool:
    """True when sizes d and od are known to be equal before run time."""
    if isinstance(d, int) or isinstance(od, int):
        return d == od
    return d is od or (d.name is not None and d.name == od.name)


BROADCAST_ONLY_DECLARED = "only sizes declared as 1 broadcast"


def broadcast_groups(types, out_t) -> tuple:
    """The `agree` facet of element-wise ops: per result axis, the operand axes on it that are not
    declared 1 (a symbolic size stands for one that is not 1, as in dsl.types.broadcast_shapes)."""
    R = out_t.rank
    groups = [[(k, i - R + t.rank) for k, t in enumerate(types)
               if i - R + t.rank >= 0 and t.shape[i - R + t.rank] != 1] for i in range(R)]
    return groups, f"operands could not be broadcast together: sizes {{0}} and {{1}} differ at run time ({BROADCAST_ONLY_DECLARED})"


def checked_operands(b, vals, types, out_t) -> tuple:
    """(operands, the output's sizes) of an element-wise op, the operands checked at run time
    where their sizes are not known to agree (agreeing_operands). A size declared 1 broadcasts
    and is not checked."""
    vals, sizes = agreeing_operands(b, vals, types, *broadcast_groups(types, out_t))
    return vals, [s if not isinstance(od, int) else None for s, od in zip(sizes, out_t.shape)]


def unknown_groups(groups, types) -> list:
    """The groups whose members' sizes are not all known to be equal before run time."""
    return [g for g in groups if len(_distinct(types, g)) > 1]


def _distinct(types, members) -> list:
    """One member for each set of members whose sizes are known to be equal before run time."""
    reps = []
    for k, j in members:
        if not any(_same_size(types[k].shape[j], types[rk].shape[rj]) for rk, rj in reps):
            reps.append((k, j))
    return reps


def first_member(members: list, types: list) -> tuple:
    """The member of a group of axes that must agree that the others are compared with: one
    that declares a static size, else the first."""
    return next(((k, j) for k, j in members if isinstance(types[k].shape[j], int)), members[0])


def agreeing_operands(b, vals, types, groups, message) -> tuple:
    """(operands, sizes): the operands, checked at run time to agree in size on the axes of each
    group (a list of members (operand index, axis)), and each group's size (an index SSA value:
    a static size a member declares, else the first member's; None for an empty group).

    A mismatch is a DgRuntimeError with `message` at this op, which names the group's size `{0}`
    and the member's `{1}`. Until the error is raised a member
    that may differ from its group's size is replaced by an uninitialised tensor of that size, so
    that no loop reads past its end. Members known to be equal (one static size, one symbolic
    name) are not checked; canonicalization folds the checks between sizes that come from one
    source, and the replacements with them."""
    bad = [None] * len(vals)
    safe = [{} for _ in vals]  # per operand: {axis: size}
    sizes = []
    for members in groups:
        if not members:
            sizes.append(None)
            continue
        first = first_member(members, types)
        size = b.dim(vals[first[0]], types[first[0]], first[1])
        for k, j in members:
            if not _same_size(types[k].shape[j], types[first[0]].shape[first[1]]):
                d = b.dim(vals[k], types[k], j)
                ne = b.cmp("ne", d, size, "index")
                fail_if(b, ne, message, ((size, "index"), (d, "index")))
                bad[k] = ne if bad[k] is None else b.binary("arith.ori", bad[k], ne, "i1")
                safe[k][j] = size
        sizes.append(size)
    out = []
    for k, (v, t) in enumerate(zip(vals, types)):
        if bad[k] is not None:
            v = stand_in_if(b, bad[k], v, t, safe[k])
        out.append(v)
    return out, sizes


def contracted_operands(b, vals, types, members, message) -> list:
    """The operands, checked at run time to agree in size on the axes `members` [(operand index,
    axis)] of a contraction, which the result does not have. A mismatch is a DgRuntimeError with
    `message`; until it is raised, every member is sliced (a view, no copy) to the smallest of
    the sizes. Canonicalization folds the minimum where the sizes come from one source, and
    slices.fold_full_slices then drops the slices. Where a member declares a static size, the
    others are checked against it as in agreeing_operands (a slice cannot make one larger)."""
    if any(isinstance(types[k].shape[j], int) for k, j in members):
        return agreeing_operands(b, vals, types, [members], message)[0]
    reps = _distinct(types, members)
    if len(reps) == 1:
        return vals
    dims = [b.dim(vals[k], types[k], j) for k, j in reps]
    bad, size = None, dims[0]
    for d in dims[1:]:
        ne = b.cmp("ne", dims[0], d, "index")
        fail_if(b, ne, message, ((dims[0], "index"), (d, "index")))
        bad = ne if bad is None else b.binary("arith.ori", bad, ne, "i1")
        size = b.binary("arith.minui", size, d, "index")
    out = list(vals)
    for k, j in members:
        out[k] = b.slice(out[k], types[k], [size if i == j else None for i in range(types[k].rank)])
    return out


# ---------------------------------------------------------------- generics

def map_generic(b, out_t, inputs, scalar_fn):
    """An elementwise linalg.generic over inputs [(value, type)] broadcast to out_t;
    `scalar_fn(b, input scalars)` gives the element. On the CPU, a 0-d result is the scalar
    computed on the operands' elements, in a 0-d tensor: canonicalization then folds a chain of
    scalar ops into plain arithmetic, which a generic per op (and a buffer per op once bufferized)
    would not be."""
    if out_t.rank == 0 and b.target == "cpu":
        return b.scalar_tensor(scalar_fn(b, [b.extract(v, t) for v, t in inputs]), out_t)
    vals, types = [v for v, _ in inputs], [t for _, t in inputs]
    vals, sizes = checked_operands(b, vals, types, out_t)
    init = b.empty(out_t, sizes)
    omap = ", ".join(f"d{i}" for i in range(out_t.rank))
    return b.generic(out_t, init, list(zip(vals, types)), broadcast_maps(types, out_t), omap,
                     ["parallel"] * out_t.rank, lambda bb, args: scalar_fn(bb, args[:-1]))


def lower_elementwise(scalar_fn, out_dtype_from=None):
    """The `lower` facet of an element-wise op: `scalar_fn(b, kind, element type, input scalars,
    op)` gives one element (`kind` "f", "i", "b" or "u": of the result's element type, or of
    operand `out_dtype_from`'s)."""
    def lower(b, op):
        out_t = op.result_types[0]
        src_t = op.types[out_dtype_from] if out_dtype_from is not None else out_t
        kind, ety = DTYPES[src_t.dtype][2], src_t.element
        return map_generic(b, out_t, list(zip(op.operands, op.types)),
                           lambda bb, args: scalar_fn(bb, kind, ety, args, op))

    return lower


def marked_generic(b, marker: str, *args) -> str:
    """`b.generic(*args)`, the generic carrying the discardable attribute `marker` (IR text,
    `name = value`) too: how a lowering pass of a target recognizes an op's plain form, to write
    it in that target's own way (as mpi-collectives recognizes a collective's marked copy)."""
    start = len(b.lines)
    r = b.generic(*args)
    head = f"{r} = linalg.generic {{"
    at = next(i for i in range(start, len(b.lines)) if b.lines[i].lstrip().startswith(head))
    b.lines[at] = b.lines[at].replace(head, f"{head}{marker}, ", 1)
    return r


def copy_generic(b, op, x, xt, out_t, sizes, in_map):
    """A copy of x into a new tensor of type out_t (`sizes`: its dynamic sizes), read through `in_map`."""
    e = b.empty(out_t, sizes)
    omap = ", ".join(f"d{i}" for i in range(out_t.rank))
    return b.generic(out_t, e, [(x, xt)], [in_map], omap, ["parallel"] * out_t.rank, lambda bb, a: a[0])


def squeeze_generic(b, x, xt, out_t, axes):
    """x without its size-1 `axes`, as a copy of type out_t."""
    sizes, in_map, i = [], [], 0
    for j in range(xt.rank):
        if j in axes:
            in_map.append("0")
        else:
            sizes.append(b.dim(x, xt, j))
            in_map.append(f"d{i}")
            i += 1
    return copy_generic(b, None, x, xt, out_t, sizes, ", ".join(in_map))


# ---------------------------------------------------------------- reductions

def reduce_generic(b, x, xt, axes, keepdims, out_t, init_scalar, combine):
    """A linalg.generic reducing `axes` of x into out_t (filled with init_scalar first). With no
    axes (a 0-d x), an elementwise map: a generic that reads its own output under parallel
    iterators is a reduction in disguise, which elementwise fusion repeated for every element of
    the consumer it was fused into."""
    if not axes:
        return map_generic(b, out_t, [(x, xt)], lambda bb, a: combine(bb, a[0], init_scalar))
    R = xt.rank
    sizes = []
    for i in range(R):
        if i in axes:
            continue
        sizes.append(b.dim(x, xt, i))
    if keepdims:
        full, it = [], iter(sizes)
        for i in range(R):
            full.append(None if i in axes else next(it))
        sizes = full
    init = b.fill(out_t, sizes, init_scalar)
    in_map = ", ".join(f"d{i}" for i in range(R))
    if keepdims:
        out_map = ", ".join("0" if i in axes else f"d{i}" for i in range(R))
    else:
        out_map = ", ".join(f"d{i}" for i in range(R) if i not in axes)
    its = ["reduction" if i in axes else "parallel" for i in range(R)]
    return b.generic(out_t, init, [(x, xt)], [in_map], out_map, its, lambda bb, a: combine(bb, a[0], a[1]))


def count_of(b, x, xt, axes, ety):
    """The number of reduced elements, as a float scalar of type ety."""
    n = b.const(1, "index")
    for i in axes:
        n = b.binary("arith.muli", n, b.dim(x, xt, i), "index")
    i64 = b.assign(f"arith.index_cast {n} : index to i64", "x")
    return b.unary("arith.sitofp", i64, f"i64 to {ety}")


def keep_type(t, axes):
    """t with the reduced `axes` kept as size 1."""
    return TensorType(t.dtype, tuple(1 if i in axes else d for i, d in enumerate(t.shape)))


def drop_kept(b, r, kept_t, out_t, axes):
    """A keepdims result as the op's result type (squeezing the reduced axes when asked)."""
    if kept_t.rank == out_t.rank:  # keepdims (the result's sizes may be named otherwise)
        return r
    return squeeze_generic(b, r, kept_t, out_t, set(axes))


def max_keep(b, x, xt, axes):
    """(the largest element along `axes`, keepdims, its type)."""
    ety = xt.element
    kt = keep_type(xt, axes)
    init = b.const(float("-inf"), ety)
    return reduce_generic(b, x, xt, axes, True, kt, init,
                          lambda bb, a, o: bb.binary("arith.maximumf", a, o, ety)), kt


def sum_keep(b, x, xt, axes):
    """(the sum along `axes`, keepdims, its type)."""
    ety = xt.element
    kt = keep_type(xt, axes)
    return reduce_generic(b, x, xt, axes, True, kt, b.const(0.0, ety),
                          lambda bb, a, o: bb.binary("arith.addf", a, o, ety)), kt


def lse_keep(b, x, xt, axes):
    """log(sum(exp(x - m))) + m over axes, with keepdims (m the max, finite-guarded)."""
    ety = xt.element
    m, kt = max_keep(b, x, xt, axes)
    zero = b.const(0.0, ety)

    def finite(bb, a):
        inf = bb.const(float("inf"), ety)
        isfin = bb.cmp("one", bb.unary("math.absf", a[0], ety), inf, ety)
        return bb.select(isfin, a[0], zero, ety)

    mf = map_generic(b, kt, [(m, kt)], finite)
    e = map_generic(b, xt, [(x, xt), (mf, kt)],
                    lambda bb, a: bb.unary("math.exp", bb.binary("arith.subf", a[0], a[1], ety), ety))
    s, _ = sum_keep(b, e, xt, axes)
    return map_generic(b, kt, [(s, kt), (mf, kt)],
                       lambda bb, a: bb.binary("arith.addf", bb.unary("math.log", a[0], ety), a[1], ety)), kt


# ---------------------------------------------------------------- scalars

def int_predicate(pred: str, kind: str) -> str:
    """A signed integer comparison's predicate for an integer kind: unsigned for bools (True is
    the i1 1, which a signed comparison reads as -1) and u64."""
    return "u" + pred[1:] if kind in "bu" and pred[0] == "s" else pred


def int_limits(ety: str) -> tuple:
    """The smallest and largest signed integers of `ety` (i8 ... i64)."""
    bits = int(ety[1:])
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def truncate_float(b, x, src: str, dst: str):
    """`x` (a float of MLIR type `src`) rounded to the narrower float type `dst`. From f64 to a
    16-bit type it goes through f32 rounded to odd (the nearest f32 toward zero, its last bit set
    when inexact), which then rounds to the 16-bit type exactly as a direct rounding would: LLVM's
    direct f64-to-half conversion is a call to a runtime function the JIT does not have."""
    if not (src == "f64" and dst in ("f16", "bf16")):
        return b.unary("arith.truncf", x, f"{src} to {dst}")
    t = b.unary("arith.truncf", x, "f64 to f32")
    back = b.unary("arith.extf", t, "f32 to f64")
    bits = b.unary("arith.bitcast", t, "f32 to i32")
    over = b.cmp("ogt", b.unary("math.absf", back, "f64"), b.unary("math.absf", x, "f64"), "f64")
    toward_zero = b.select(over, b.binary("arith.subi", bits, b.const(1, "i32"), "i32"), bits, "i32")
    odd = b.binary("arith.ori", toward_zero, b.const(1, "i32"), "i32")
    inexact = b.cmp("one", back, x, "f64")
    t = b.unary("arith.bitcast", b.select(inexact, odd, bits, "i32"), "i32 to f32")
    return b.unary("arith.truncf", t, f"f32 to {dst}")


# ---------------------------------------------------------------- adjoints (VJP rules)

def reshape_like(g, d, x):
    """d (with x's number of elements) reshaped to x's shape, sizes from x at run time."""
    shape = tuple(s if isinstance(s, int) else DYN for s in x.tt.shape)
    sizes = [g.dim(x, i) for i, s in enumerate(x.tt.shape) if not isinstance(s, int)]
    return g.dg_op("reshape", [d] + sizes, {"shape": shape})


def summed_to(g, d, x):
    """The adjoint d of a value broadcast from x, summed to x's shape. Where x has a size that only
    the run time knows, by dg.sum_to: it may be 1 there and stretched (the autodiff pass itself
    sums only the axes that broadcasting adds or that x declares 1)."""
    return d if x.tt.is_static() else g.dg_op("sum_to", [d, x])


# ---------------------------------------------------------------- images [N, C, H, W] and their windows
# (convolution and pooling: their shape rules, NumPy implementations and lowerings; the CPU's
# strategy passes for them in lowering/)
PAR, RED = "parallel", "reduction"  # iterator types


def check_image(what: str, t: TensorType, role: str) -> None:
    """A ShapeError unless t is a float tensor of rank 4 (`role`: "input", "weight")."""
    if t.rank != 4 or not is_float(t.dtype):
        raise ShapeError(f"{what}: the {role} must be a float tensor of rank 4, got {t}")


def check_positive(what: str, name: str, pair, least: int = 1) -> None:
    """A ShapeError unless `pair` is two ints of at least `least` (1: positive, 0: non-negative)."""
    if len(pair) != 2 or any(v < least for v in pair):
        raise ShapeError(f"{what}: {name} must be {'positive' if least else 'non-negative'}, got {tuple(pair)}")


def out_dim(what: str, size, k: int, s: int, p: int, d: int = 1):
    """The output size along one axis: an int where `size` is one, else a fresh symbolic size."""
    if not isinstance(size, int):
        return Sym()
    n = (size + 2 * p - d * (k - 1) - 1) // s + 1
    if n < 1:
        raise ShapeError(f"{what}: the input size {size} with padding {p} is smaller than the kernel "
                         f"({d * (k - 1) + 1} with dilation)")
    return n


def like_rule(k: int, of: str):
    """The rule of a gradient op: the type of operand k, the others of its element type."""
    def rule(types, **attrs):
        if any(t.dtype != types[k].dtype or t.rank != 4 for t in types):
            raise ShapeError(f"{of}: operands must be rank-4 tensors of one element type, got {types}")
        return types[k]

    return rule


def out_hw(x_shape, k, stride, padding, dilation=(1, 1)):
    """The output's height and width (ints) for an input of shape x_shape [N, C, H, W] (NumPy's
    side: a ValueError where the kernel is larger than the padded input)."""
    sizes = [(h + 2 * p - d * (kk - 1) - 1) // s + 1
             for h, kk, s, p, d in zip(x_shape[2:], k, stride, padding, dilation)]
    if min(sizes) < 1:
        raise ValueError(f"the input {tuple(x_shape[2:])} with padding {tuple(padding)} is smaller than the kernel")
    return sizes


def pad_hw(x, padding, value=0.0):
    """The array x [N, C, H, W] with padding[0] rows and padding[1] columns of `value` on each side."""
    (ph, pw) = padding
    if ph == 0 and pw == 0:
        return x
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def windows(xp, k, stride, dilation, out):
    """The windows of a padded image: a view [N, C, OH, OW, KH, KW]."""
    span = [d * (kk - 1) + 1 for kk, d in zip(k, dilation)]
    v = sliding_window_view(xp, span, axis=(2, 3))
    v = v[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]
    return v[:, :, :out[0], :out[1]]


def scatter_windows(x_shape, dtype, padding, stride, dilation, k, part):
    """sum over kernel positions (i, j) of part(i, j) ([N, C, OH, OW]) added into the padded
    image at rows i*d + oh*s and columns j*d + ow*s, cropped to x_shape."""
    n, c, h, w = x_shape
    (ph, pw) = padding
    out = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            p = part(i, j)
            r0, c0 = i * dilation[0], j * dilation[1]
            out[:, :, r0:r0 + (p.shape[2] - 1) * stride[0] + 1:stride[0],
                c0:c0 + (p.shape[3] - 1) * stride[1] + 1:stride[1]] += p
    return out[:, :, ph:ph + h, pw:pw + w]


def ix(b, n: int) -> str:
    """An index constant."""
    return b.const(n, "index")


def iop(b, name: str, a: str, c: str) -> str:
    """`arith.NAME a, c` on indices ("addi", "muli", "divui", ...)."""
    return b.binary(f"arith.{name}", a, c, "index")


def sizes_of(b, v, t) -> list:
    """The sizes of v (of type t) as index values: constants where t has them, else tensor.dim."""
    return [b.dim(v, t, i) for i in range(t.rank)]


def sizes_text(t: TensorType, sizes: list) -> str:
    """The sizes of a slice of type t as IR text: t's static sizes, else the index values `sizes`."""
    return ", ".join(str(d) if isinstance(d, int) else s for d, s in zip(t.shape, sizes))


def grown(d, by: int):
    """A type's size d grown by `by` (a fresh symbolic size where d is one)."""
    return d + by if isinstance(d, int) else Sym()


def size_product(dims):
    """The product of a type's sizes: an int where they all are, else a fresh symbolic size."""
    out = 1
    for d in dims:
        if not isinstance(d, int):
            return Sym()
        out *= d
    return out


def padded_hw(b, x, xt, padding, value):
    """(x padded on H and W with `value`, its type, its sizes)."""
    sizes = sizes_of(b, x, xt)
    (ph, pw) = padding
    if ph == 0 and pw == 0:
        return x, xt, sizes
    pt = TensorType(xt.dtype, xt.shape[:2] + (grown(xt.shape[2], 2 * ph), grown(xt.shape[3], 2 * pw)))
    psizes = sizes[:2] + [iop(b, "addi", sizes[2], ix(b, 2 * ph)), iop(b, "addi", sizes[3], ix(b, 2 * pw))]
    init = b.fill(pt, psizes, b.const(value, xt.element))
    r = b.assign(f"tensor.insert_slice {x} into {init}[0, 0, {ph}, {pw}] [{sizes_text(xt, sizes)}] [1, 1, 1, 1] "
                 f": {xt.mlir()} into {pt.mlir()}", "pad")
    return r, pt, psizes


def out_len(b, out_d, padded: str, k: int, s: int, d: int = 1) -> str:
    """The output size along one axis as an index: a constant where the type has it, else
    computed from the padded size and checked to be at least 1 (0 after a failed check)."""
    if isinstance(out_d, int):
        return ix(b, out_d)
    t = iop(b, "subi", padded, ix(b, d * (k - 1) + 1))
    n = iop(b, "addi", iop(b, "floordivsi", t, ix(b, s)), ix(b, 1))
    fail_if(b, b.cmp("slt", n, ix(b, 1), "index"),
            "the input is smaller than the kernel: the output would have size {0}", ((n, "index"),))
    return iop(b, "maxsi", n, ix(b, 0))


def window_index(out: str, s: int, k: str, d: int) -> str:
    """`out * s + k * d` as affine text."""
    return f"{out}{f' * {s}' if s != 1 else ''} + {k}{f' * {d}' if d != 1 else ''}"


def normal_like(rng, y):
    """Samples: standard normal numbers of y's shape and element type (an output's gradient)."""
    return rng.standard_normal(y.shape).astype(y.dtype)


# ---------------------------------------------------------------- index specs
def expand_spec(spec, rank):
    """Replace the ellipsis and pad with full slices; returns the item list."""
    items = list(spec)
    consumed = sum(1 for s in items if s[0] in "ist")
    if consumed > rank:
        raise ShapeError(f"too many indices ({consumed}) for a rank-{rank} tensor")
    if "e" in items:
        if items.count("e") > 1:
            raise ShapeError("an index can only have a single ellipsis")
        k = items.index("e")
        items[k:k + 1] = ["s:::"] * (rank - consumed)
    else:
        items += ["s:::"] * (rank - consumed)
    return items
