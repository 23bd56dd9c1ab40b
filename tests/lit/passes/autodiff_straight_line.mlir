// RUN: %dg opt %s --passes autodiff | %filecheck %s

// Straight-line code: the pass defines the `grad` declaration with a call to
// `f__vjp_0` (forward sweep, then each op's registry VJP in reverse order), and
// the declaration's attributes are gone.
// CHECK-NOT: dg.kind
// CHECK-LABEL: func.func @f__vjp_0(%arg0: tensor<3xf64>, %arg1: tensor<f64>, %arg2: tensor<f64>) -> (tensor<f64>, tensor<3xf64>)
// Forward sweep: f's body.
// CHECK: %[[T:.*]] = "dg.tanh"(%arg0)
// CHECK: %[[M:.*]] = "dg.mul"(%[[T]], %arg1)
// CHECK: %[[S:.*]] = "dg.sum"(%[[M]])
// Reverse sweep: sum's adjoint broadcasts the cotangent back, then mul, then tanh (1 - y*y).
// CHECK: "dg.expand_dims"(%arg2)
// CHECK: %[[DM:.*]] = "dg.add"
// CHECK: %[[DT:.*]] = "dg.mul"(%[[DM]], %arg1)
// CHECK: "dg.mul"(%[[DM]], %[[T]])
// CHECK: %[[ONE:.*]] = "dg.constant"() {value = dense<1.000000e+00> : tensor<f64>}
// CHECK: %[[YY:.*]] = "dg.mul"(%[[T]], %[[T]])
// CHECK: %[[D:.*]] = "dg.sub"(%[[ONE]], %[[YY]])
// CHECK: %[[DX:.*]] = "dg.mul"(%[[DT]], %[[D]])
// CHECK: return %[[S]], %[[DX]] : tensor<f64>, tensor<3xf64>

// The gradient seeds the cotangent with 1.0 and keeps the gradients.
// CHECK-LABEL: func.func @f__grad_0(%arg0: tensor<3xf64>, %arg1: tensor<f64>) -> tensor<3xf64>
// CHECK: %[[SEED:.*]] = "dg.constant"() {value = dense<1.000000e+00> : tensor<f64>}
// CHECK: %[[R:.*]]:2 = call @f__vjp_0(%arg0, %arg1, %[[SEED]])
// CHECK: return %[[R]]#1

// The differentiated function and its caller are unchanged.
// CHECK-LABEL: func.func @f(
// CHECK-NOT: dg.expand_dims
// CHECK: return
// CHECK-LABEL: func.func @g(
// CHECK: call @f__grad_0(%arg0, %arg1)
module {
  func.func private @f__grad_0(tensor<3xf64>, tensor<f64>) -> tensor<3xf64> attributes {dg.kind = "grad", dg.of = "f", dg.wrt = array<i64: 0>}
  func.func @f(%arg0: tensor<3xf64>, %arg1: tensor<f64>) -> tensor<f64> {
    %0 = "dg.tanh"(%arg0) : (tensor<3xf64>) -> tensor<3xf64>
    %1 = "dg.mul"(%0, %arg1) : (tensor<3xf64>, tensor<f64>) -> tensor<3xf64>
    %2 = "dg.sum"(%1) {axes = array<i64: 0>, keepdims = false} : (tensor<3xf64>) -> tensor<f64>
    return %2 : tensor<f64>
  }
  func.func @g(%arg0: tensor<3xf64>, %arg1: tensor<f64>) -> tensor<3xf64> {
    %0 = call @f__grad_0(%arg0, %arg1) : (tensor<3xf64>, tensor<f64>) -> tensor<3xf64>
    return %0 : tensor<3xf64>
  }
}
