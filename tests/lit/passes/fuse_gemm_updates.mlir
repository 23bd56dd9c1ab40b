// RUN: %dg opt %s --passes fuse-gemm-updates | %filecheck %s

// An update `w - A @ B` (an SGD step's) whose product only the update reads is one BLAS call:
// w copied into the product's buffer, then gemm adds -1 * A @ B to it (beta = 1). The update's
// pass over the result and its buffer go.
// CHECK-LABEL: func.func @minus
// CHECK: %[[G:.*]] = memref.alloc()
// CHECK: memref.copy %arg0, %[[G]]
// CHECK: %[[S:.*]] = arith.negf
// CHECK: call @dg_gemm_f32_scaled(%{{.*}}, %{{.*}}, %{{.*}}, %[[S]])
// CHECK-NOT: linalg.generic
// CHECK: return %[[G]]
// CHECK: func.func private @dg_gemm_f32_scaled(
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @minus(%arg0: memref<6x3xf32>, %arg1: memref<6x4xf32>, %arg2: memref<4x3xf32>) -> memref<6x3xf32> attributes {llvm.emit_c_interface} {
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<6x3xf32>
  %a = memref.cast %arg1 : memref<6x4xf32> to memref<?x?xf32, strided<[?, ?], offset: ?>>
  %b = memref.cast %arg2 : memref<4x3xf32> to memref<?x?xf32, strided<[?, ?], offset: ?>>
  %c = memref.cast %alloc : memref<6x3xf32> to memref<?x?xf32, strided<[?, ?], offset: ?>>
  call @dg_gemm_f32_new(%a, %b, %c) : (memref<?x?xf32, strided<[?, ?], offset: ?>>, memref<?x?xf32, strided<[?, ?], offset: ?>>, memref<?x?xf32, strided<[?, ?], offset: ?>>) -> ()
  %alloc_0 = memref.alloc() {alignment = 64 : i64} : memref<6x3xf32>
  linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %alloc : memref<6x3xf32>, memref<6x3xf32>) outs(%alloc_0 : memref<6x3xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %0 = arith.subf %in, %in_1 : f32
    linalg.yield %0 : f32
  }
  memref.dealloc %alloc : memref<6x3xf32>
  return %alloc_0 : memref<6x3xf32>
}
func.func private @dg_gemm_f32_new(memref<?x?xf32, strided<[?, ?], offset: ?>>, memref<?x?xf32, strided<[?, ?], offset: ?>>, memref<?x?xf32, strided<[?, ?], offset: ?>>)
