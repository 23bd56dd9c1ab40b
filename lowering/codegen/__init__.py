"""Code generation: a program's IR to object code for this CPU (LLVM through llvmlite).

`units` (the IR a program travels as: `Unit` at the grad stage, `LlvmUnit` once lowered),
`lower` (the pipeline down to LLVM IR, for the CPU or CUDA's host), `tiers` (from the disk cache
or made: optimized at once, or quick code first), `objects` (LLVM's passes and code generation),
`object_room` (whether the JIT can place an object), `optimizer` (the worker process that
optimizes quick code), `cache` (the disk cache, `get_or_build`).
"""
