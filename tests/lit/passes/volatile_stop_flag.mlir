// RUN: %dg opt %s --passes volatile-stop-flag | %filecheck %s

// After the lowering to LLVM: each read of the Ctrl-C flag is volatile, directly or through an
// address computed from the flag's, so that LLVM cannot read it once before a loop that
// touches no memory; other loads stay as they are.
// CHECK-LABEL: llvm.func @spin(
// CHECK: llvm.load volatile %{{.*}} : !llvm.ptr -> i64
// CHECK: llvm.load volatile %{{.*}} : !llvm.ptr -> i64
// CHECK: llvm.load %{{.*}} : !llvm.ptr -> f64
llvm.mlir.global external @dg_interrupt() {addr_space = 0 : i32} : i64
llvm.func @spin(%x: !llvm.ptr) -> f64 {
  %f = llvm.mlir.addressof @dg_interrupt : !llvm.ptr
  %a = llvm.load %f : !llvm.ptr -> i64
  %g = llvm.getelementptr %f[0] : (!llvm.ptr) -> !llvm.ptr, i64
  %b = llvm.load %g : !llvm.ptr -> i64
  %v = llvm.load %x : !llvm.ptr -> f64
  llvm.return %v : f64
}
