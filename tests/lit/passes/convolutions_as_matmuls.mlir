// RUN: %dg opt %s --passes convolutions-as-matmuls | %filecheck %s

// A convolution's plain form (what to-linalg writes for conv2d, conv2d_input_grad and
// conv2d_weight_grad): one generic over the channels viewed as (groups, channels per group),
// marked dg.convolution. With groups = 1 it becomes an im2col copy and one linalg.matmul; a
// grouped convolution, and a conv2d with one input channel, keep their generic. The marker goes.

#x = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 * 2 + d6, d4 + d7 * 2)>
#w = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#y = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
#u = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 - d6 + 2, d4 - d7 * 2 + 2)>
#wt = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d5, d2, d6, d7)>
#xw = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d5, d0, d2, d6 * 2 + d3, d7 + d4 * 2)>
#dw = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d5, d0, d1, d6, d7)>
#u1 = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 - d6 + 2, d4 - d7 + 2)>
#x1 = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 + d6, d4 + d7)>

// y = W [4, 18] @ col [18, 64], col[c, i, j, n, y, x] = xp[n, c, 2y + i, x + 2j]; then [O, N, ...] -> [N, O, ...]
// CHECK-LABEL: func.func @conv(
// CHECK: %[[XP:.*]] = tensor.insert_slice %arg0 into
// CHECK: %[[COL:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%[[XP]] : tensor<2x3x9x10xf32>) outs(%{{.*}} : tensor<3x3x2x2x4x8xf32>)
// CHECK: %[[COL2:.*]] = tensor.reshape %[[COL]]({{.*}}) -> tensor<18x64xf32>
// CHECK: %[[W2:.*]] = tensor.reshape %arg1({{.*}}) -> tensor<4x18xf32>
// CHECK: %[[MM:.*]] = linalg.matmul ins(%[[W2]], %[[COL2]] : tensor<4x18xf32>, tensor<18x64xf32>)
// CHECK: %[[Y4:.*]] = tensor.reshape %[[MM]]({{.*}}) -> tensor<4x2x4x8xf32>
// CHECK: %[[Y:.*]] = linalg.generic {{.*}} ins(%[[Y4]] : tensor<4x2x4x8xf32>) outs(%{{.*}} : tensor<2x4x4x8xf32>)
// CHECK-NOT: tensor.expand_shape
// CHECK: return %[[Y]]
func.func @conv(%arg0: tensor<2x3x7x6xf32>, %arg1: tensor<4x3x3x2xf32>) -> tensor<2x4x4x8xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<2x3x9x10xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<2x3x9x10xf32>) -> tensor<2x3x9x10xf32>
  %xp = tensor.insert_slice %arg0 into %z[0, 0, 1, 2] [2, 3, 7, 6] [1, 1, 1, 1] : tensor<2x3x7x6xf32> into tensor<2x3x9x10xf32>
  %x5 = tensor.expand_shape %xp [[0], [1, 2], [3], [4]] output_shape [2, 1, 3, 9, 10] : tensor<2x3x9x10xf32> into tensor<2x1x3x9x10xf32>
  %w5 = tensor.expand_shape %arg1 [[0, 1], [2], [3], [4]] output_shape [1, 4, 3, 3, 2] : tensor<4x3x3x2xf32> into tensor<1x4x3x3x2xf32>
  %e5 = tensor.empty() : tensor<2x1x4x4x8xf32>
  %i5 = linalg.fill ins(%zero : f32) outs(%e5 : tensor<2x1x4x4x8xf32>) -> tensor<2x1x4x4x8xf32>
  %y5 = linalg.generic {dg.convolution = {op = "conv2d", stride = array<i64: 2, 1>, dilation = array<i64: 1, 2>, groups = 1 : i64},
                        indexing_maps = [#x, #w, #y], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x5, %w5 : tensor<2x1x3x9x10xf32>, tensor<1x4x3x3x2xf32>) outs(%i5 : tensor<2x1x4x4x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %m, %o : f32
    linalg.yield %s : f32
  } -> tensor<2x1x4x4x8xf32>
  %y = tensor.collapse_shape %y5 [[0], [1, 2], [3], [4]] : tensor<2x1x4x4x8xf32> into tensor<2x4x4x8xf32>
  return %y : tensor<2x4x4x8xf32>
}

// dcol = W^T [18, 4] @ dy' [4, 64] (the matmul's map transposes W); then each of the 3 x 2 kernel
// positions added into a strided slice of the padded gradient, which the plain form's crop cuts
// CHECK-LABEL: func.func @input_grad(
// CHECK: %[[DP:.*]] = linalg.generic {{.*}} ins(%arg0 : tensor<2x4x4x8xf32>) outs(%{{.*}} : tensor<4x2x4x8xf32>)
// CHECK: %[[D2:.*]] = tensor.reshape %[[DP]]({{.*}}) -> tensor<4x64xf32>
// CHECK: %[[W2:.*]] = tensor.reshape %arg1({{.*}}) -> tensor<4x18xf32>
// CHECK: %[[DC:.*]] = linalg.matmul indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}] ins(%[[W2]], %[[D2]] : tensor<4x18xf32>, tensor<4x64xf32>)
// CHECK: %[[D6:.*]] = tensor.reshape %[[DC]]({{.*}}) -> tensor<3x3x2x2x4x8xf32>
// CHECK-COUNT-6: tensor.insert_slice %{{.*}} into %{{.*}}[0, 0, {{[0-9]+}}, {{[0-9]+}}] [2, 3, 4, 8] [1, 1, 2, 1] : tensor<2x3x4x8xf32> into tensor<2x3x9x10xf32>
// CHECK: %[[C:.*]] = tensor.cast %{{.*}} : tensor<2x3x9x10xf32> to tensor<2x?x9x10xf32>
// CHECK: tensor.extract_slice %[[C]][0, 0, 1, 2]
// CHECK-NOT: tensor.expand_shape
func.func @input_grad(%arg0: tensor<2x4x4x8xf32>, %arg1: tensor<4x3x3x2xf32>) -> tensor<2x3x7x6xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %c1 = arith.constant 1 : index
  %e = tensor.empty() : tensor<2x4x11x12xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<2x4x11x12xf32>) -> tensor<2x4x11x12xf32>
  %u = tensor.insert_slice %arg0 into %z[0, 0, 2, 2] [2, 4, 4, 8] [1, 1, 2, 1] : tensor<2x4x4x8xf32> into tensor<2x4x11x12xf32>
  %u5 = tensor.expand_shape %u [[0], [1, 2], [3], [4]] output_shape [2, 1, 4, 11, 12] : tensor<2x4x11x12xf32> into tensor<2x1x4x11x12xf32>
  %w5 = tensor.expand_shape %arg1 [[0, 1], [2], [3], [4]] output_shape [1, 4, 3, 3, 2] : tensor<4x3x3x2xf32> into tensor<1x4x3x3x2xf32>
  %e5 = tensor.empty() : tensor<2x1x3x9x10xf32>
  %i5 = linalg.fill ins(%zero : f32) outs(%e5 : tensor<2x1x3x9x10xf32>) -> tensor<2x1x3x9x10xf32>
  %g5 = linalg.generic {dg.convolution = {op = "conv2d_input_grad", stride = array<i64: 2, 1>, dilation = array<i64: 1, 2>, groups = 1 : i64},
                        indexing_maps = [#u, #wt, #y], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%u5, %w5 : tensor<2x1x4x11x12xf32>, tensor<1x4x3x3x2xf32>) outs(%i5 : tensor<2x1x3x9x10xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %m, %o : f32
    linalg.yield %s : f32
  } -> tensor<2x1x3x9x10xf32>
  %g = tensor.collapse_shape %g5 [[0], [1, 2], [3], [4]] : tensor<2x1x3x9x10xf32> into tensor<2x3x9x10xf32>
  %gc = tensor.cast %g : tensor<2x3x9x10xf32> to tensor<2x?x9x10xf32>
  %c = tensor.dim %gc, %c1 : tensor<2x?x9x10xf32>
  %crop = tensor.extract_slice %gc[0, 0, 1, 2] [2, %c, 7, 6] [1, 1, 1, 1] : tensor<2x?x9x10xf32> to tensor<2x?x7x6xf32>
  %dx = tensor.cast %crop : tensor<2x?x7x6xf32> to tensor<2x3x7x6xf32>
  return %dx : tensor<2x3x7x6xf32>
}

// without padding the padded gradient is the gradient: the crop, which would cut nothing, goes
// CHECK-LABEL: func.func @input_grad_unpadded(
// CHECK: linalg.matmul
// CHECK-COUNT-9: tensor.insert_slice %{{.*}} into %{{.*}} [2, 3, 4, 4] [1, 1, 1, 1] : tensor<2x3x4x4xf32> into tensor<2x3x6x6xf32>
// CHECK-NEXT: %[[C:.*]] = tensor.cast %{{.*}} : tensor<2x3x6x6xf32> to tensor<2x?x6x6xf32>
// CHECK-NOT: tensor.extract_slice
// CHECK: %[[DX:.*]] = tensor.cast %[[C]] : tensor<2x?x6x6xf32> to tensor<2x3x6x6xf32>
// CHECK-NEXT: return %[[DX]]
func.func @input_grad_unpadded(%arg0: tensor<2x4x4x4xf32>, %arg1: tensor<4x3x3x3xf32>) -> tensor<2x3x6x6xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %c1 = arith.constant 1 : index
  %e = tensor.empty() : tensor<2x4x8x8xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %u = tensor.insert_slice %arg0 into %z[0, 0, 2, 2] [2, 4, 4, 4] [1, 1, 1, 1] : tensor<2x4x4x4xf32> into tensor<2x4x8x8xf32>
  %u5 = tensor.expand_shape %u [[0], [1, 2], [3], [4]] output_shape [2, 1, 4, 8, 8] : tensor<2x4x8x8xf32> into tensor<2x1x4x8x8xf32>
  %w5 = tensor.expand_shape %arg1 [[0, 1], [2], [3], [4]] output_shape [1, 4, 3, 3, 3] : tensor<4x3x3x3xf32> into tensor<1x4x3x3x3xf32>
  %e5 = tensor.empty() : tensor<2x1x3x6x6xf32>
  %i5 = linalg.fill ins(%zero : f32) outs(%e5 : tensor<2x1x3x6x6xf32>) -> tensor<2x1x3x6x6xf32>
  %g5 = linalg.generic {dg.convolution = {op = "conv2d_input_grad", stride = array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 1 : i64},
                        indexing_maps = [#u1, #wt, #y], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%u5, %w5 : tensor<2x1x4x8x8xf32>, tensor<1x4x3x3x3xf32>) outs(%i5 : tensor<2x1x3x6x6xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %m, %o : f32
    linalg.yield %s : f32
  } -> tensor<2x1x3x6x6xf32>
  %g = tensor.collapse_shape %g5 [[0], [1, 2], [3], [4]] : tensor<2x1x3x6x6xf32> into tensor<2x3x6x6xf32>
  %gc = tensor.cast %g : tensor<2x3x6x6xf32> to tensor<2x?x6x6xf32>
  %c = tensor.dim %gc, %c1 : tensor<2x?x6x6xf32>
  %crop = tensor.extract_slice %gc[0, 0, 0, 0] [2, %c, 6, 6] [1, 1, 1, 1] : tensor<2x?x6x6xf32> to tensor<2x?x6x6xf32>
  %dx = tensor.cast %crop : tensor<2x?x6x6xf32> to tensor<2x3x6x6xf32>
  return %dx : tensor<2x3x6x6xf32>
}

// dw = dy' [4, 64] @ col^T (the matmul's map transposes col [18, 64]), read as [4, 3, 3, 2]
// CHECK-LABEL: func.func @weight_grad(
// CHECK: %[[COL:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<3x3x2x2x4x8xf32>)
// CHECK: %[[COL2:.*]] = tensor.reshape %[[COL]]({{.*}}) -> tensor<18x64xf32>
// CHECK: %[[DP:.*]] = linalg.generic {{.*}} ins(%arg1 : tensor<2x4x4x8xf32>) outs(%{{.*}} : tensor<4x2x4x8xf32>)
// CHECK: %[[D2:.*]] = tensor.reshape %[[DP]]({{.*}}) -> tensor<4x64xf32>
// CHECK: %[[MM:.*]] = linalg.matmul indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}] ins(%[[D2]], %[[COL2]] : tensor<4x64xf32>, tensor<18x64xf32>) outs(%{{.*}} : tensor<4x18xf32>)
// CHECK: %[[DW:.*]] = tensor.reshape %[[MM]]({{.*}}) -> tensor<4x3x3x2xf32>
// CHECK: return %[[DW]]
func.func @weight_grad(%arg0: tensor<2x3x7x6xf32>, %arg1: tensor<2x4x4x8xf32>) -> tensor<4x3x3x2xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<2x3x9x10xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<2x3x9x10xf32>) -> tensor<2x3x9x10xf32>
  %xp = tensor.insert_slice %arg0 into %z[0, 0, 1, 2] [2, 3, 7, 6] [1, 1, 1, 1] : tensor<2x3x7x6xf32> into tensor<2x3x9x10xf32>
  %x5 = tensor.expand_shape %xp [[0], [1, 2], [3], [4]] output_shape [2, 1, 3, 9, 10] : tensor<2x3x9x10xf32> into tensor<2x1x3x9x10xf32>
  %d5 = tensor.expand_shape %arg1 [[0], [1, 2], [3], [4]] output_shape [2, 1, 4, 4, 8] : tensor<2x4x4x8xf32> into tensor<2x1x4x4x8xf32>
  %e5 = tensor.empty() : tensor<1x4x3x3x2xf32>
  %i5 = linalg.fill ins(%zero : f32) outs(%e5 : tensor<1x4x3x3x2xf32>) -> tensor<1x4x3x3x2xf32>
  %g5 = linalg.generic {dg.convolution = {op = "conv2d_weight_grad", stride = array<i64: 2, 1>, dilation = array<i64: 1, 2>, groups = 1 : i64},
                        indexing_maps = [#xw, #dw, #y], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x5, %d5 : tensor<2x1x3x9x10xf32>, tensor<2x1x4x4x8xf32>) outs(%i5 : tensor<1x4x3x3x2xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %m, %o : f32
    linalg.yield %s : f32
  } -> tensor<1x4x3x3x2xf32>
  %g = tensor.collapse_shape %g5 [[0, 1], [2], [3], [4]] : tensor<1x4x3x3x2xf32> into tensor<4x3x3x2xf32>
  return %g : tensor<4x3x3x2xf32>
}

// groups = 2: the generic stays, without its marker
// CHECK-LABEL: func.func @grouped(
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
// CHECK-NOT: linalg.matmul
func.func @grouped(%arg0: tensor<2x4x6x6xf32>, %arg1: tensor<6x2x3x3xf32>) -> tensor<2x6x4x4xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %x5 = tensor.expand_shape %arg0 [[0], [1, 2], [3], [4]] output_shape [2, 2, 2, 6, 6] : tensor<2x4x6x6xf32> into tensor<2x2x2x6x6xf32>
  %w5 = tensor.expand_shape %arg1 [[0, 1], [2], [3], [4]] output_shape [2, 3, 2, 3, 3] : tensor<6x2x3x3xf32> into tensor<2x3x2x3x3xf32>
  %e5 = tensor.empty() : tensor<2x2x3x4x4xf32>
  %i5 = linalg.fill ins(%zero : f32) outs(%e5 : tensor<2x2x3x4x4xf32>) -> tensor<2x2x3x4x4xf32>
  %y5 = linalg.generic {dg.convolution = {op = "conv2d", stride = array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 2 : i64},
                        indexing_maps = [#x1, #w, #y], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x5, %w5 : tensor<2x2x2x6x6xf32>, tensor<2x3x2x3x3xf32>) outs(%i5 : tensor<2x2x3x4x4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %m, %o : f32
    linalg.yield %s : f32
  } -> tensor<2x2x3x4x4xf32>
  %y = tensor.collapse_shape %y5 [[0], [1, 2], [3], [4]] : tensor<2x2x3x4x4xf32> into tensor<2x6x4x4xf32>
  return %y : tensor<2x6x4x4xf32>
}

// one input channel: the generic stays (an im2col copy 9 times the input, a gemm of depth 9)
// CHECK-LABEL: func.func @one_channel(
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
// CHECK-NOT: linalg.matmul
// CHECK-NOT: dg.convolution
func.func @one_channel(%arg0: tensor<2x1x6x6xf32>, %arg1: tensor<4x1x3x3xf32>) -> tensor<2x4x4x4xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %x5 = tensor.expand_shape %arg0 [[0], [1, 2], [3], [4]] output_shape [2, 1, 1, 6, 6] : tensor<2x1x6x6xf32> into tensor<2x1x1x6x6xf32>
  %w5 = tensor.expand_shape %arg1 [[0, 1], [2], [3], [4]] output_shape [1, 4, 1, 3, 3] : tensor<4x1x3x3xf32> into tensor<1x4x1x3x3xf32>
  %e5 = tensor.empty() : tensor<2x1x4x4x4xf32>
  %i5 = linalg.fill ins(%zero : f32) outs(%e5 : tensor<2x1x4x4x4xf32>) -> tensor<2x1x4x4x4xf32>
  %y5 = linalg.generic {dg.convolution = {op = "conv2d", stride = array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 1 : i64},
                        indexing_maps = [#x1, #w, #y], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x5, %w5 : tensor<2x1x1x6x6xf32>, tensor<1x4x1x3x3xf32>) outs(%i5 : tensor<2x1x4x4x4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %m, %o : f32
    linalg.yield %s : f32
  } -> tensor<2x1x4x4x4xf32>
  %y = tensor.collapse_shape %y5 [[0], [1, 2], [3], [4]] : tensor<2x1x4x4x4xf32> into tensor<2x4x4x4xf32>
  return %y : tensor<2x4x4x4xf32>
}
