// RUN: %dg opt %s --passes bufferize | %filecheck %s

// Element-wise generics fuse, tensors become buffers (function boundaries included), and a
// returned buffer is the caller's: no copy, no dealloc of it. A buffer asks for no alignment
// beyond malloc's (buffer-alignment=0).
// CHECK-LABEL: func.func @f(%arg0: memref<4xf32>) -> memref<4xf32>
// CHECK: %[[OUT:.*]] = memref.alloc() : memref<4xf32>
// CHECK: linalg.generic
// CHECK: math.exp
// CHECK: arith.addf
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.dealloc %[[OUT]]
// CHECK: return %[[OUT]]
#map = affine_map<(d0) -> (d0)>
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %a = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.exp %in : f32
    linalg.yield %0 : f32
  } -> tensor<4xf32>
  %e2 = tensor.empty() : tensor<4xf32>
  %b = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%a, %x : tensor<4xf32>, tensor<4xf32>) outs(%e2 : tensor<4xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %0 = arith.addf %in, %in2 : f32
    linalg.yield %0 : f32
  } -> tensor<4xf32>
  return %b : tensor<4xf32>
}
