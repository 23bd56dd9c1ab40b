// RUN: %dg opt %s --passes verify | %filecheck %s
// RUN: not %dg opt %S/Inputs/verify_bad.mlir --passes verify 2>&1 | %filecheck %s --check-prefix=BAD

// dg ops whose types are their rules' pass, a result left less static than the rule knows included.
// CHECK-LABEL: func.func @f
// CHECK: "dg.add"
// CHECK: "dg.sum"
func.func @f(%a: tensor<3xf32>, %b: tensor<2x3xf32>) -> tensor<?xf32> {
  %0 = "dg.add"(%a, %b) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "dg.sum"(%0) {axes = array<i64: 0>, keepdims = false} : (tensor<2x3xf32>) -> tensor<?xf32>
  return %1 : tensor<?xf32>
}

// Each op its rule rejects is an error at its own line, all of them together.
// BAD: verify_bad.mlir:4:8: error: dg.add: shapes [3] and [4] do not broadcast
// BAD: verify_bad.mlir:5:8: error: dg.tanh: its operands give (tensor<3xf32>), not (tensor<5xf32>)
// BAD: verify_bad.mlir:6:8: error: dg.exp: exp needs a float tensor, got i64[3]
