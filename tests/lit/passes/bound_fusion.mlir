// RUN: %dg opt %s --passes "bound-fusion{ops=8}" | %filecheck %s

// A chain of element-wise generics, each the one use of the one before, whose fused body would
// pass the bound (FUSED_OPS ops; 8 here) is cut by a linalg.copy, which element-wise fusion does
// not fuse through: each body here has 4 ops, so the third generic would make 12 with the two
// before it. A value with another use, which fusion leaves alone, needs no cut.
// CHECK-LABEL: func.func @long
// CHECK: linalg.generic
// CHECK: linalg.generic
// CHECK: %[[E:.*]] = tensor.empty
// CHECK: %[[C:.*]] = linalg.copy ins(%{{.*}} : tensor<?xf32>) outs(%[[E]] : tensor<?xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[C]]
// CHECK-LABEL: func.func @shared
// CHECK-NOT: linalg.copy
// CHECK: return
#m = affine_map<(d0) -> (d0)>
func.func @long(%a: tensor<?xf32>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xf32>
  %e = tensor.empty(%n) : tensor<?xf32>
  %b1 = linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]} ins(%a : tensor<?xf32>) outs(%e : tensor<?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y0 = arith.addf %x, %x : f32
    %y1 = arith.mulf %y0, %x : f32
    %y2 = arith.mulf %y1, %x : f32
    linalg.yield %y2 : f32
  } -> tensor<?xf32>
  %b2 = linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]} ins(%b1 : tensor<?xf32>) outs(%e : tensor<?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y0 = arith.addf %x, %x : f32
    %y1 = arith.mulf %y0, %x : f32
    %y2 = arith.mulf %y1, %x : f32
    linalg.yield %y2 : f32
  } -> tensor<?xf32>
  %b3 = linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]} ins(%b2 : tensor<?xf32>) outs(%e : tensor<?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y0 = arith.addf %x, %x : f32
    %y1 = arith.mulf %y0, %x : f32
    %y2 = arith.mulf %y1, %x : f32
    linalg.yield %y2 : f32
  } -> tensor<?xf32>
  return %b3 : tensor<?xf32>
}
func.func @shared(%a: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xf32>) {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xf32>
  %e = tensor.empty(%n) : tensor<?xf32>
  %b1 = linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]} ins(%a : tensor<?xf32>) outs(%e : tensor<?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y0 = arith.addf %x, %x : f32
    %y1 = arith.mulf %y0, %x : f32
    %y2 = arith.mulf %y1, %x : f32
    linalg.yield %y2 : f32
  } -> tensor<?xf32>
  %b2 = linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]} ins(%b1 : tensor<?xf32>) outs(%e : tensor<?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y0 = arith.addf %x, %x : f32
    %y1 = arith.mulf %y0, %x : f32
    %y2 = arith.mulf %y1, %x : f32
    linalg.yield %y2 : f32
  } -> tensor<?xf32>
  %b3 = linalg.generic {indexing_maps = [#m, #m], iterator_types = ["parallel"]} ins(%b2 : tensor<?xf32>) outs(%e : tensor<?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y0 = arith.addf %x, %x : f32
    %y1 = arith.mulf %y0, %x : f32
    %y2 = arith.mulf %y1, %x : f32
    linalg.yield %y2 : f32
  } -> tensor<?xf32>
  return %b3, %b2 : tensor<?xf32>, tensor<?xf32>
}
