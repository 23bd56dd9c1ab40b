// RUN: %dg opt %s --passes shadow-taps | %filecheck %s

// After each op that makes tensors, a tap of each result, numbered; the table of the taps (place,
// op, in a gradient) goes into the module. Constants are not tapped.
// CHECK: module attributes {dg.taps = {{\[\[}}["f.dg", 2, 9], "log", false], {{\[\[}}"f.dg", 3, 5], "mul", true]]}
// CHECK: %[[C:.*]] = "dg.constant"
// CHECK-NEXT: %[[L:.*]] = "dg.log"(%arg0)
// CHECK-NEXT: %[[LT:.*]] = "dg.tap"(%[[L]]) {id = 0 : i64}
// CHECK-NEXT: %[[M:.*]] = "dg.mul"(%[[LT]], %[[C]])
// CHECK-NEXT: %[[MT:.*]] = "dg.tap"(%[[M]]) {id = 1 : i64}
// CHECK-NEXT: return %[[MT]]
func.func @f(%x: tensor<3xf64>) -> tensor<3xf64> {
  %c = "dg.constant"() {value = dense<2.0> : tensor<f64>} : () -> tensor<f64>
  %0 = "dg.log"(%x) : (tensor<3xf64>) -> tensor<3xf64> loc("f.dg":2:9)
  %1 = "dg.mul"(%0, %c) : (tensor<3xf64>, tensor<f64>) -> tensor<3xf64> loc("dg.gradient"("f.dg":3:5))
  return %1 : tensor<3xf64>
}
