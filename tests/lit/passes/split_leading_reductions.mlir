// RUN: %dg opt %s --passes split-leading-reductions | %filecheck %s

// A reduction along the first axis (a sum over the batch) is split in chunks of rows, each
// reduced on its own in an outer parallel loop (which threads share once outlined), then the
// partial results are combined in order.
// CHECK-LABEL: func.func @column_sum
// CHECK: %[[PARTS:.*]] = memref.alloc
// CHECK: scf.parallel (%[[CHUNK:.*]]) =
// CHECK: memref.subview %[[PARTS]][%[[CHUNK]], 0]
// CHECK: linalg.generic
// CHECK: arith.addf
// CHECK: scf.reduce
// CHECK: linalg.generic {{.*}} ins(%[[PARTS]] : memref<?x?xf32>) outs(%arg1 : memref<?xf32>)
// CHECK: arith.addf
func.func @column_sum(%x: memref<?x?xf32>, %o: memref<?xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>],
                  iterator_types = ["reduction", "parallel"]} ins(%x : memref<?x?xf32>) outs(%o : memref<?xf32>) {
  ^bb0(%a: f32, %b: f32):
    %y = arith.addf %a, %b : f32
    linalg.yield %y : f32
  }
  return
}

// A product of floats keeps its order (parts could overflow and underflow: inf * 0).
// CHECK-LABEL: func.func @product
// CHECK-NOT: scf.parallel
func.func @product(%x: memref<?xf32>, %o: memref<f32>) {
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>],
                  iterator_types = ["reduction"]} ins(%x : memref<?xf32>) outs(%o : memref<f32>) {
  ^bb0(%a: f32, %b: f32):
    %y = arith.mulf %a, %b : f32
    linalg.yield %y : f32
  }
  return
}
