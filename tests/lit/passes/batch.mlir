// RUN: %dg opt %s --passes batch | %filecheck %s

// vmap of f over its argument: f__vmap_0 makes the mask of active examples
// (all of them) and calls f's batched function.
// CHECK-LABEL: func.func @f__batch_1(%arg0: tensor<?x3xf32>, %arg1: tensor<?xi1>) -> tensor<?xf32>
// The sum of each example: one axis further along.
// CHECK: %[[S:.*]] = "dg.sum"(%arg0) {axes = array<i64: 1>, keepdims = false} : (tensor<?x3xf32>) -> tensor<?xf32>
// A condition that differs by example: each side's mask.
// CHECK: %[[C:.*]] = "dg.gt"(%[[S]], %{{.*}}) : (tensor<?xf32>, tensor<f32>) -> tensor<?xi1>
// CHECK: %[[MT:.*]] = "dg.and"(%arg1, %[[C]])
// A cheap branch runs for every example; `where` picks each example's side.
// CHECK: %[[E:.*]] = "dg.exp"(%[[S]]) : (tensor<?xf32>) -> tensor<?xf32>
// CHECK: %[[Z:.*]] = "dg.broadcast_to"
// CHECK: %[[R:.*]] = "dg.where"(%[[MT]], %[[E]], %[[Z]])
// CHECK: return %[[R]]

// CHECK-LABEL: func.func @f__vmap_0(%arg0: tensor<?x3xf32>) -> tensor<?xf32>
// CHECK: %[[B:.*]] = "dg.dim"(%arg0) {axis = 0 : i64}
// CHECK: %[[ALL:.*]] = "dg.full"(%{{.*}}, %[[B]]) {shape = array<i64: -2>} : (tensor<i1>, tensor<i64>) -> tensor<?xi1>
// CHECK: call @f__batch_1(%arg0, %[[ALL]])

// A while whose condition differs by example runs while any example is active,
// and updates only the active examples' carried values.
// CHECK-LABEL: func.func @g__batch_1(%arg0: tensor<?xf32>, %arg1: tensor<?xi1>) -> tensor<?xf32>
// CHECK: scf.while (%[[ACT:.*]] = %arg1, %[[X:.*]] = %arg0) : (tensor<?xi1>, tensor<?xf32>)
// CHECK: %[[LT:.*]] = "dg.lt"(%[[X]], %{{.*}}) : (tensor<?xf32>, tensor<f32>) -> tensor<?xi1>
// CHECK: %[[LIVE:.*]] = "dg.and"(%[[ACT]], %[[LT]])
// CHECK: "dg.sum"
// CHECK: scf.condition(%{{.*}}) %[[LIVE]], %[[X]]
// CHECK: ^bb0(%[[ACT2:.*]]: tensor<?xi1>, %[[OLD:.*]]: tensor<?xf32>, %{{.*}}: tensor<?xf32>):
// CHECK: %[[NEW:.*]] = "dg.mul"
// CHECK: %[[KEPT:.*]] = "dg.where"(%[[ACT2]], %[[NEW]], %[[OLD]])
// CHECK: scf.yield %[[ACT2]], %[[KEPT]]

module {
  func.func private @f__vmap_0(tensor<?x3xf32>) -> (tensor<?xf32>) attributes {dg.kind = "vmap", dg.of = "f", dg.wrt = array<i64: 0>}
  func.func private @g__vmap_0(tensor<?xf32>) -> (tensor<?xf32>) attributes {dg.kind = "vmap", dg.of = "g", dg.wrt = array<i64: 0>}
  func.func @f(%arg0: tensor<3xf32>) -> tensor<f32> {
    %0 = "dg.sum"(%arg0) {axes = array<i64: 0>, keepdims = false} : (tensor<3xf32>) -> tensor<f32>
    %1 = "dg.constant"() {value = dense<0.000000e+00> : tensor<f32>} : () -> tensor<f32>
    %2 = "dg.gt"(%0, %1) : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %3 = "dg.to_i1"(%2) : (tensor<i1>) -> i1
    %4 = scf.if %3 -> (tensor<f32>) {
      %5 = "dg.exp"(%0) : (tensor<f32>) -> tensor<f32>
      scf.yield %5 : tensor<f32>
    } else {
      scf.yield %1 : tensor<f32>
    }
    return %4 : tensor<f32>
  }
  func.func @g(%arg0: tensor<f32>) -> tensor<f32> {
    %0 = "dg.constant"() {value = dense<1.000000e+02> : tensor<f32>} : () -> tensor<f32>
    %1 = "dg.constant"() {value = dense<2.000000e+00> : tensor<f32>} : () -> tensor<f32>
    %2 = scf.while (%a = %arg0) : (tensor<f32>) -> tensor<f32> {
      %3 = "dg.lt"(%a, %0) : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %4 = "dg.to_i1"(%3) : (tensor<i1>) -> i1
      scf.condition(%4) %a : tensor<f32>
    } do {
    ^bb0(%b: tensor<f32>):
      %5 = "dg.mul"(%b, %1) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      scf.yield %5 : tensor<f32>
    }
    return %2 : tensor<f32>
  }
}
