// RUN: %dg opt %s --passes reassociate-reductions | %filecheck %s

// The add that combines into a reduction's output may be reordered (LLVM then vectorizes the
// sum); a product keeps its order, and an element-wise add is no reduction.
// CHECK-LABEL: func.func @sum
// CHECK: arith.addf %{{.*}}, %{{.*}} fastmath<reassoc> : f32
// CHECK-LABEL: func.func @product
// CHECK-NOT: fastmath
// CHECK-LABEL: func.func @add
// CHECK-NOT: fastmath
func.func @sum(%x: memref<?xf32>, %o: memref<f32>) {
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>],
                  iterator_types = ["reduction"]} ins(%x : memref<?xf32>) outs(%o : memref<f32>) {
  ^bb0(%a: f32, %b: f32):
    %y = arith.addf %a, %b : f32
    linalg.yield %y : f32
  }
  return
}
func.func @product(%x: memref<?xf32>, %o: memref<f32>) {
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>],
                  iterator_types = ["reduction"]} ins(%x : memref<?xf32>) outs(%o : memref<f32>) {
  ^bb0(%a: f32, %b: f32):
    %y = arith.mulf %a, %b : f32
    linalg.yield %y : f32
  }
  return
}
func.func @add(%x: memref<?xf32>, %o: memref<?xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                  iterator_types = ["parallel"]} ins(%x : memref<?xf32>) outs(%o : memref<?xf32>) {
  ^bb0(%a: f32, %b: f32):
    %y = arith.addf %a, %b : f32
    linalg.yield %y : f32
  }
  return
}
