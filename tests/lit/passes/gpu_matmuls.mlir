// RUN: %dg opt %s --passes gpu-matmuls | %filecheck %s

// On the GPU, a linalg.matmul is a call of a kernel function that tiles C in shared memory (the
// zero fill of C before it folds into the kernel, which then stores instead of adding).
// CHECK-LABEL: func.func @mm
// CHECK-NOT: linalg.fill
// CHECK: call @dg_gpu_matmul_f32_new(
// CHECK: func.func private @dg_gpu_matmul_f32_new(
// CHECK: #gpu.address_space<workgroup>
// CHECK: gpu.barrier
func.func @mm(%a: memref<70x33xf32>, %b: memref<33x130xf32>) -> memref<70x130xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %c = memref.alloc() : memref<70x130xf32>
  linalg.fill ins(%cst : f32) outs(%c : memref<70x130xf32>)
  linalg.matmul ins(%a, %b : memref<70x33xf32>, memref<33x130xf32>) outs(%c : memref<70x130xf32>)
  return %c : memref<70x130xf32>
}
