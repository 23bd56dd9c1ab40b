// RUN: %dg opt %s --passes link-names | %filecheck %s

// dg functions get dotted symbols, which no C library function has: a dg function named like
// one (`sinf`) is not what LLVM's own calls of it reach. Calls follow; declarations (the
// runtime's) keep their names.
// CHECK: func.func private @dg_rt_fail(i64, i64, i64)
// CHECK-LABEL: func.func @dg.fn.sinf
// CHECK-LABEL: func.func @dg.fn.f
// CHECK: call @dg.fn.sinf(
func.func private @dg_rt_fail(i64, i64, i64)
func.func @sinf(%x: memref<f32>) {
  return
}
func.func @f(%x: memref<f32>) {
  call @sinf(%x) : (memref<f32>) -> ()
  return
}
