// RUN: %dg opt %s --passes cublas-matmuls | %filecheck %s

// On the GPU, a linalg.matmul is first a call of a helper that reads the operands' layouts and
// calls cuBLAS through the executor's table when the table has it; its fallback is the
// linalg.matmul itself (which gpu-matmuls then makes the tiled kernel). The zero fill of C folds
// into the helper (beta = 0).
// CHECK-LABEL: func.func @mm
// CHECK-NOT: linalg.fill
// CHECK: call @dg_cublas_gemm_f32_new(
// CHECK: memref.global @dg_cuda : memref<10xi64>
// CHECK: func.func private @dg_cublas_gemm_f32_new(
// CHECK: %[[FP:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<10xi64>
// CHECK: %[[HAVE:.*]] = arith.cmpi ne, %[[FP]]
// CHECK: %[[USE:.*]] = arith.andi %{{.*}}, %[[HAVE]] : i1
// CHECK: scf.if %[[USE]] {
// CHECK: call @dg.cublas.gemm_s(
// CHECK: } else {
// CHECK: linalg.matmul
func.func @mm(%a: memref<70x33xf32>, %b: memref<33x130xf32>) -> memref<70x130xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %c = memref.alloc() : memref<70x130xf32>
  linalg.fill ins(%cst : f32) outs(%c : memref<70x130xf32>)
  linalg.matmul ins(%a, %b : memref<70x33xf32>, memref<33x130xf32>) outs(%c : memref<70x130xf32>)
  return %c : memref<70x130xf32>
}
