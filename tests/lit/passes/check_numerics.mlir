// RUN: %dg opt %s --passes check-numerics | %filecheck %s

// After each op that makes floats, a check_finite of each float result, which later uses take;
// an op of a gradient (its location marked dg.gradient) says so. Constants and integer results
// are not checked.
// CHECK-LABEL: func.func @f
// CHECK: %[[C:.*]] = "dg.constant"
// CHECK-NEXT: %[[L:.*]] = "dg.log"(%arg0)
// CHECK-NEXT: %[[LC:.*]] = "dg.check_finite"(%[[L]]) {msg = "log made {0} (check_numerics)"}
// CHECK-NEXT: %[[M:.*]] = "dg.mul"(%[[LC]], %[[C]])
// CHECK-NEXT: %[[MC:.*]] = "dg.check_finite"(%[[M]]) {msg = "in the gradient of this line, mul made {0} (check_numerics)"}
// CHECK-NEXT: %[[N:.*]] = "dg.lt"(%[[MC]], %[[C]])
// CHECK-NEXT: return %[[MC]], %[[N]]
func.func @f(%x: tensor<3xf64>) -> (tensor<3xf64>, tensor<3xi1>) {
  %c = "dg.constant"() {value = dense<2.0> : tensor<f64>} : () -> tensor<f64>
  %0 = "dg.log"(%x) : (tensor<3xf64>) -> tensor<3xf64> loc("f.dg":2:9)
  %1 = "dg.mul"(%0, %c) : (tensor<3xf64>, tensor<f64>) -> tensor<3xf64> loc("dg.gradient"("f.dg":3:5))
  %2 = "dg.lt"(%1, %c) : (tensor<3xf64>, tensor<f64>) -> tensor<3xi1>
  return %1, %2 : tensor<3xf64>, tensor<3xi1>
}
