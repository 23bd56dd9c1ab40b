// Ops that parse but that their rules reject (for verify.mlir).
func.func @f(%a: tensor<3xf32>, %b: tensor<4xf32>, %i: tensor<3xi64>) -> tensor<3xf32> {
  %x = "dg.exp"(%a) : (tensor<3xf32>) -> tensor<3xf32>
  %y = "dg.add"(%x, %b) : (tensor<3xf32>, tensor<4xf32>) -> tensor<3xf32>
  %z = "dg.tanh"(%x) : (tensor<3xf32>) -> tensor<5xf32>
  %w = "dg.exp"(%i) : (tensor<3xi64>) -> tensor<3xi64>
  return %y : tensor<3xf32>
}
