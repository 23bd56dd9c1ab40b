// RUN: %dg opt %s --passes tiled-max-pool-grads | %filecheck %s

// max_pool2d_grad's plain form (what to-linalg writes): the index of each window's first largest
// element (a generic of two results), then a gather marked dg.max_pool2d_grad that reads it and
// dy per input pixel. Where the windows tile the input (stride = kernel, no padding) the gather,
// and the index it read, become one element-wise generic over [N, C, OH, KH, OW, KW] that reads
// the window's cells and its dy; other windows keep the gather. The marker goes.

#win = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2 * 2 + d4, d3 * 2 + d5)>
#k = affine_map<(d0, d1, d2, d3, d4, d5) -> (d4, d5)>
#o = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>

// CHECK-LABEL: func.func @tiled(
// CHECK-NOT: tensor.extract
// CHECK: %[[X6:.*]] = tensor.expand_shape %arg0 {{\[\[}}0], [1], [2, 3], [4, 5]] output_shape [2, 3, 2, 2, 3, 2] : tensor<2x3x4x6xf32> into tensor<2x3x2x2x3x2xf32>
// CHECK: %[[G:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%[[X6]], %[[X6]], %[[X6]], %[[X6]], %arg1 : tensor<2x3x2x2x3x2xf32>, tensor<2x3x2x2x3x2xf32>, tensor<2x3x2x2x3x2xf32>, tensor<2x3x2x2x3x2xf32>, tensor<2x3x2x3xf32>)
// CHECK: %[[DX:.*]] = tensor.collapse_shape %[[G]] {{\[\[}}0], [1], [2, 3], [4, 5]] : tensor<2x3x2x2x3x2xf32> into tensor<2x3x4x6xf32>
// CHECK-NOT: reduction
// CHECK: return %[[DX]]
func.func @tiled(%arg0: tensor<2x3x4x6xf32>, %arg1: tensor<2x3x2x3xf32>) -> tensor<2x3x4x6xf32> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %true = arith.constant true
  %c0_i64 = arith.constant 0 : i64
  %c-1_i64 = arith.constant -1 : i64
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %0 = tensor.empty(%c2, %c3) : tensor<2x3x?x?xf32>
  %1 = linalg.fill ins(%ninf : f32) outs(%0 : tensor<2x3x?x?xf32>) -> tensor<2x3x?x?xf32>
  %2 = tensor.empty(%c2, %c3) : tensor<2x3x?x?xi64>
  %3 = linalg.fill ins(%c-1_i64 : i64) outs(%2 : tensor<2x3x?x?xi64>) -> tensor<2x3x?x?xi64>
  %4 = tensor.empty() : tensor<2x2xf32>
  %5:2 = linalg.generic {indexing_maps = [#win, #k, #o, #o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%arg0, %4 : tensor<2x3x4x6xf32>, tensor<2x2xf32>) outs(%1, %3 : tensor<2x3x?x?xf32>, tensor<2x3x?x?xi64>) {
  ^bb0(%in: f32, %w: f32, %top: f32, %at: i64):
    %i = linalg.index 4 : index
    %j = linalg.index 5 : index
    %ik = arith.muli %i, %c2 : index
    %ij = arith.addi %ik, %j : index
    %flat = arith.index_cast %ij : index to i64
    %gt = arith.cmpf ogt, %in, %top : f32
    %nan = arith.cmpf uno, %in, %in : f32
    %was = arith.cmpf uno, %top, %top : f32
    %b1 = arith.ori %gt, %nan : i1
    %b2 = arith.xori %was, %true : i1
    %better = arith.andi %b1, %b2 : i1
    %first = arith.cmpi slt, %at, %c0_i64 : i64
    %take = arith.ori %better, %first : i1
    %v = arith.select %take, %in, %top : f32
    %a = arith.select %take, %flat, %at : i64
    linalg.yield %v, %a : f32, i64
  } -> (tensor<2x3x?x?xf32>, tensor<2x3x?x?xi64>)
  %6 = tensor.empty() : tensor<2x2xf32>
  %7 = tensor.empty() : tensor<2x3x4x6xf32>
  %8 = linalg.fill ins(%zero : f32) outs(%7 : tensor<2x3x4x6xf32>) -> tensor<2x3x4x6xf32>
  %9 = linalg.generic {dg.max_pool2d_grad = {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>},
                       indexing_maps = [#k, #o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%6 : tensor<2x2xf32>) outs(%8 : tensor<2x3x4x6xf32>) {
  ^bb0(%w: f32, %out: f32):
    %n = linalg.index 0 : index
    %c = linalg.index 1 : index
    %h = linalg.index 2 : index
    %x = linalg.index 3 : index
    %i = linalg.index 4 : index
    %j = linalg.index 5 : index
    %th = arith.subi %h, %i : index
    %y = arith.floordivsi %th, %c2 : index
    %tw = arith.subi %x, %j : index
    %z = arith.floordivsi %tw, %c2 : index
    %r1 = arith.remsi %th, %c2 : index
    %r2 = arith.remsi %tw, %c2 : index
    %k1 = arith.cmpi sge, %th, %c0 : index
    %k2 = arith.cmpi slt, %y, %c2 : index
    %k3 = arith.cmpi eq, %r1, %c0 : index
    %k4 = arith.cmpi sge, %tw, %c0 : index
    %k5 = arith.cmpi slt, %z, %c3 : index
    %k6 = arith.cmpi eq, %r2, %c0 : index
    %o1 = arith.andi %k1, %k2 : i1
    %o2 = arith.andi %o1, %k3 : i1
    %o3 = arith.andi %o2, %k4 : i1
    %o4 = arith.andi %o3, %k5 : i1
    %ok = arith.andi %o4, %k6 : i1
    %add = scf.if %ok -> (f32) {
      %at = tensor.extract %5#1[%n, %c, %y, %z] : tensor<2x3x?x?xi64>
      %ik = arith.muli %i, %c2 : index
      %ij = arith.addi %ik, %j : index
      %flat = arith.index_cast %ij : index to i64
      %hit = arith.cmpi eq, %at, %flat : i64
      %dy = tensor.extract %arg1[%n, %c, %y, %z] : tensor<2x3x2x3xf32>
      %v = arith.select %hit, %dy, %zero : f32
      scf.yield %v : f32
    } else {
      scf.yield %zero : f32
    }
    %s = arith.addf %out, %add : f32
    linalg.yield %s : f32
  } -> tensor<2x3x4x6xf32>
  return %9 : tensor<2x3x4x6xf32>
}

// windows of 3 with stride 2 overlap: the gather stays, without its marker
// CHECK-LABEL: func.func @overlapping(
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
// CHECK: tensor.extract %arg1
// CHECK-NOT: dg.max_pool2d_grad
func.func @overlapping(%arg0: tensor<2x3x5x5xf32>, %arg1: tensor<2x3x2x2xf32>, %arg2: tensor<2x3x2x2xi64>) -> tensor<2x3x5x5xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %6 = tensor.empty() : tensor<3x3xf32>
  %7 = tensor.empty() : tensor<2x3x5x5xf32>
  %8 = linalg.fill ins(%zero : f32) outs(%7 : tensor<2x3x5x5xf32>) -> tensor<2x3x5x5xf32>
  %9 = linalg.generic {dg.max_pool2d_grad = {kernel = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>},
                       indexing_maps = [#k, #o], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%6 : tensor<3x3xf32>) outs(%8 : tensor<2x3x5x5xf32>) {
  ^bb0(%w: f32, %out: f32):
    %n = linalg.index 0 : index
    %c = linalg.index 1 : index
    %at = tensor.extract %arg2[%n, %c, %n, %c] : tensor<2x3x2x2xi64>
    %dy = tensor.extract %arg1[%n, %c, %n, %c] : tensor<2x3x2x2xf32>
    %s = arith.addf %out, %dy : f32
    linalg.yield %s : f32
  } -> tensor<2x3x5x5xf32>
  return %9 : tensor<2x3x5x5xf32>
}
