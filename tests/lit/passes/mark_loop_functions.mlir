// RUN: %dg opt %s --passes mark-loop-functions | %filecheck %s

// After the lowering to LLVM: a loop function is inlined into the pool's entry (its one caller),
// and the pointer arguments outline-parallel-loops found to alias nothing are `noalias` (which
// MLIR's lowering of memrefs drops).
// CHECK-LABEL: llvm.func @__dg_par_0_loop(
// CHECK-SAME: %arg1: !llvm.ptr {llvm.noalias}
// CHECK-SAME: passthrough = ["alwaysinline"]
// CHECK-NOT: dg.noalias
llvm.func @__dg_par_0_loop(%a: !llvm.ptr, %b: !llvm.ptr) attributes {dg.noalias = array<i64: 1>} {
  llvm.return
}
