// RUN: %dg opt %s --passes autodiff | %filecheck %s

// scf.if: the reverse is an scf.if on the same condition; each branch
// recomputes its forward and then runs its own reverse.
// CHECK-LABEL: func.func @f__vjp_0_1(%arg0: tensor<3xf64>, %arg1: tensor<f64>, %arg2: tensor<f64>) -> (tensor<f64>, tensor<3xf64>, tensor<f64>)
// CHECK: %[[C:.*]] = "dg.to_i1"
// Forward.
// CHECK: %[[Y:.*]] = scf.if %[[C]] -> (tensor<f64>) {
// CHECK: "dg.exp"(%arg0)
// CHECK: } else {
// CHECK: "dg.sin"(%arg0)
// CHECK: }
// CHECK: %[[V:.*]] = "dg.mul"(%[[Y]], %arg1)
// Reverse of y * t: the adjoint of y, and t's gradient.
// CHECK: %[[DY:.*]] = "dg.mul"(%arg2, %arg1)
// CHECK: %[[DT:.*]] = "dg.mul"(%arg2, %[[Y]])
// Reverse of the if: same condition, branch forwards recomputed.
// CHECK: %[[DX:.*]] = scf.if %[[C]] -> (tensor<3xf64>) {
// CHECK: %[[E:.*]] = "dg.exp"(%arg0)
// CHECK: "dg.expand_dims"(%[[DY]])
// CHECK: %[[G1:.*]] = "dg.mul"(%{{.*}}, %[[E]])
// CHECK: scf.yield %[[G1]] : tensor<3xf64>
// CHECK: } else {
// CHECK: "dg.sin"(%arg0)
// CHECK: "dg.expand_dims"(%[[DY]])
// CHECK: %[[COS:.*]] = "dg.cos"(%arg0)
// CHECK: %[[G2:.*]] = "dg.mul"(%{{.*}}, %[[COS]])
// CHECK: scf.yield %[[G2]] : tensor<3xf64>
// CHECK: }
// CHECK: return %[[V]], %[[DX]], %[[DT]] : tensor<f64>, tensor<3xf64>, tensor<f64>

// CHECK-LABEL: func.func @f__grad_0_1(%arg0: tensor<3xf64>, %arg1: tensor<f64>) -> (tensor<3xf64>, tensor<f64>)
// CHECK: %[[R:.*]]:3 = call @f__vjp_0_1(
// CHECK: return %[[R]]#1, %[[R]]#2
// CHECK-LABEL: func.func @f(
module {
  func.func private @f__grad_0_1(tensor<3xf64>, tensor<f64>) -> (tensor<3xf64>, tensor<f64>) attributes {dg.kind = "grad", dg.of = "f", dg.wrt = array<i64: 0, 1>}
  func.func @f(%arg0: tensor<3xf64>, %arg1: tensor<f64>) -> tensor<f64> {
    %0 = "dg.sum"(%arg0) {axes = array<i64: 0>, keepdims = false} : (tensor<3xf64>) -> tensor<f64>
    %1 = "dg.gt"(%0, %arg1) : (tensor<f64>, tensor<f64>) -> tensor<i1>
    %2 = "dg.to_i1"(%1) : (tensor<i1>) -> i1
    %3 = scf.if %2 -> (tensor<f64>) {
      %5 = "dg.exp"(%arg0) : (tensor<3xf64>) -> tensor<3xf64>
      %6 = "dg.sum"(%5) {axes = array<i64: 0>, keepdims = false} : (tensor<3xf64>) -> tensor<f64>
      scf.yield %6 : tensor<f64>
    } else {
      %5 = "dg.sin"(%arg0) : (tensor<3xf64>) -> tensor<3xf64>
      %6 = "dg.sum"(%5) {axes = array<i64: 0>, keepdims = false} : (tensor<3xf64>) -> tensor<f64>
      scf.yield %6 : tensor<f64>
    }
    %4 = "dg.mul"(%3, %arg1) : (tensor<f64>, tensor<f64>) -> tensor<f64>
    return %4 : tensor<f64>
  }
  func.func @g(%arg0: tensor<3xf64>, %arg1: tensor<f64>) -> (tensor<3xf64>, tensor<f64>) {
    %0:2 = call @f__grad_0_1(%arg0, %arg1) : (tensor<3xf64>, tensor<f64>) -> (tensor<3xf64>, tensor<f64>)
    return %0#0, %0#1 : tensor<3xf64>, tensor<f64>
  }
}
