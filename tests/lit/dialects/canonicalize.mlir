// RUN: %dg opt %s --passes canonicalize,cse | %filecheck %s

// Pure dg ops are merged by cse and dropped when unused.
// CHECK-LABEL: func.func @f
// CHECK: %[[E:.*]] = "dg.exp"(%arg0)
// CHECK-NOT: "dg.exp"
// CHECK-NOT: "dg.tanh"
// CHECK: "dg.add"(%[[E]], %[[E]])
func.func @f(%a: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "dg.exp"(%a) : (tensor<3xf32>) -> tensor<3xf32>
  %1 = "dg.exp"(%a) : (tensor<3xf32>) -> tensor<3xf32>
  %2 = "dg.add"(%0, %1) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %3 = "dg.tanh"(%a) : (tensor<3xf32>) -> tensor<3xf32>
  return %2 : tensor<3xf32>
}

// Effects stay even when nothing uses them.
// CHECK-LABEL: func.func @effects
// CHECK: "dg.print"
// CHECK: "dg.assert"
func.func @effects(%a: tensor<f32>, %c: tensor<i1>) {
  "dg.print"(%a) {pieces = ["\00"], end = true} : (tensor<f32>) -> ()
  "dg.assert"(%c) {msg = "m"} : (tensor<i1>) -> ()
  return
}
