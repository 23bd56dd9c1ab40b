// RUN: %dg opt %s --passes guard-allocations | %filecheck %s

// Every malloc is numbered (the number stored before the call) and goes through dg.rt_malloc,
// which jumps back to the entry's guard when there is no memory; each C entry point gets a
// guarded one, `dg.guarded.F(argv) -> i32`, which calls it under setjmp and returns 0 or the
// failed site's number plus one. The sites' places go into the module.
// CHECK: module attributes {dg.alloc_sites = {{\[\[}}"-", 20, 8]]}
// CHECK-LABEL: llvm.func @f(
// CHECK: %[[SITE:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK: llvm.store %[[SITE]], %{{.*}} : i32, !llvm.ptr
// CHECK: llvm.call @dg.rt_malloc(
// CHECK-LABEL: llvm.func internal @dg.rt_malloc(
// CHECK: llvm.call @malloc(
// CHECK: llvm.call @dg.longjmp(
// CHECK-LABEL: llvm.func @dg.guarded.f(%arg0: !llvm.ptr) -> i32
// CHECK: llvm.call @dg.setjmp(
// CHECK: llvm.call @_mlir_ciface_f(
llvm.func @malloc(i64) -> !llvm.ptr
llvm.func @f(%n: i64) -> !llvm.ptr {
  %p = llvm.call @malloc(%n) : (i64) -> !llvm.ptr
  llvm.return %p : !llvm.ptr
}
llvm.func @_mlir_ciface_f(%a: !llvm.ptr) {
  llvm.return
}
