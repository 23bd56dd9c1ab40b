// RUN: %dg opt %s --passes internal-linkage | %filecheck %s

// Private functions get internal linkage: the ExecutionEngine writes no wrapper for them (a
// wrapper would inline the function once more).
// CHECK-LABEL: func.func private @helper
// CHECK-SAME: llvm.linkage = #llvm.linkage<internal>
// CHECK-LABEL: func.func @entry
// CHECK-NOT: llvm.linkage
func.func private @helper(%x: memref<f32>) {
  return
}
func.func @entry(%x: memref<f32>) {
  call @helper(%x) : (memref<f32>) -> ()
  return
}
