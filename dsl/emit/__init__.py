"""Emission: the checked AST of a function, for one argument signature, to dg IR.

Expects: `FuncDef`s from the parser (or `embed`), rewritten by
`controlflow.rewrite`. Guarantees: textual MLIR made of `func`, `scf`,
`arith.constant` (index) and `dg` ops, every op with a location from the
`.dg` source (a name location for the variable it defines); or, when the
source has mistakes, every error found, each a located `DgTypeError`.

Checking and emission are one walk: every expression gets a `TensorType`
from the op registry's shape rules, and the same walk writes the op. A
function is emitted once per argument signature (a "specialization");
declared `?` or named dims are `?` in the IR, so other sizes reuse it.
Variables that a branch or loop body redefines become `scf` results and
loop-carried values.

The emitter is one class (`function.FunctionEmitter`) made of a part per concern:
`core` (dg ops, literals, casts), `statements`, `control` (if and loops),
`expressions`, and `calls` (calls and autodiff requests); `module` holds the
specializations of a module and the gradient declarations.
"""
from .module import ModuleEmitter  # noqa: F401
from .types import annotation_tree, leaf_types, tree_key, type_key  # noqa: F401
