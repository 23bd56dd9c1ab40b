// RUN: %dg opt %s --passes blas-matmuls | %filecheck %s

// An f32 or f64 linalg.matmul is a call of a helper that calls the BLAS's gemm (MKL's or
// NumPy's OpenBLAS, whichever dg found); a zero fill of C right before it is dropped, and the
// helper that overwrites C (beta = 0) is called instead.
// CHECK-LABEL: func.func @minus
// CHECK-NOT: linalg.fill
// CHECK-NOT: linalg.matmul
// CHECK: call @dg_gemm_f32_new(
// CHECK: func.func private @dg_gemm_f32_new(
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @minus(%arg0: memref<6x3xf32>, %arg1: memref<6x4xf32>, %arg2: memref<4x3xf32>) -> memref<6x3xf32> attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<6x3xf32>
  linalg.fill ins(%cst : f32) outs(%alloc : memref<6x3xf32>)
  linalg.matmul ins(%arg1, %arg2 : memref<6x4xf32>, memref<4x3xf32>) outs(%alloc : memref<6x3xf32>)
  %alloc_0 = memref.alloc() {alignment = 64 : i64} : memref<6x3xf32>
  linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %alloc : memref<6x3xf32>, memref<6x3xf32>) outs(%alloc_0 : memref<6x3xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %0 = arith.subf %in, %in_1 : f32
    linalg.yield %0 : f32
  }
  memref.dealloc %alloc : memref<6x3xf32>
  return %alloc_0 : memref<6x3xf32>
}
