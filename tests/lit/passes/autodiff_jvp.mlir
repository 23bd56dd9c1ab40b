// RUN: %dg opt %s --passes autodiff | %filecheck %s

// Forward mode: a `jvp` declaration is defined by a call of `f__tangent_<mask>`,
// which runs f's ops once, each followed by its tangent (the op's `jvp` facet).
// scf.if gets one more result per active result; scf.for and scf.while one more
// carried value per active carried value; a call calls the callee's tangent
// function. Nothing is taped.

// CHECK-LABEL: func.func @branch__tangent_0(%arg0: tensor<f64>, %arg1: tensor<f64>) -> (tensor<f64>, tensor<f64>)
// CHECK: %[[IF:.*]]:2 = scf.if %{{.*}} -> (tensor<f64>, tensor<f64>) {
// CHECK: %[[S:.*]] = "dg.sin"(%arg0)
// CHECK: %[[C:.*]] = "dg.cos"(%arg0)
// CHECK: %[[T:.*]] = "dg.mul"(%arg1, %[[C]])
// CHECK: scf.yield %[[S]], %[[T]]
// CHECK: } else {
// CHECK: %[[SQ:.*]] = "dg.mul"(%arg0, %arg0)
// x * x: one VJP of the diagonal rule, both operands' terms added.
// CHECK: %[[A:.*]] = "dg.mul"(%arg1, %arg0)
// CHECK: %[[B:.*]] = "dg.mul"(%arg1, %arg0)
// CHECK: %[[TS:.*]] = "dg.add"(%[[A]], %[[B]])
// CHECK: scf.yield %[[SQ]], %[[TS]]
// CHECK: return %[[IF]]#0, %[[IF]]#1
// CHECK-LABEL: func.func @branch__jvp_0(
// CHECK: call @branch__tangent_0(%arg0, %arg1)

// CHECK-LABEL: func.func @loop__tangent_0(%arg0: tensor<f64>, %arg1: tensor<i64>, %arg2: tensor<f64>)
// CHECK: %[[FOR:.*]]:2 = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[X:.*]] = %arg0, %[[TX:.*]] = %arg2) -> (tensor<f64>, tensor<f64>) {
// CHECK: %[[K:.*]] = "dg.constant"() {value = dense<1.500000e+00> : tensor<f64>}
// CHECK: %[[Y:.*]] = "dg.mul"(%[[X]], %[[K]])
// CHECK: %[[TY:.*]] = "dg.mul"(%[[TX]], %[[K]])
// CHECK: scf.yield %[[Y]], %[[TY]]
// CHECK-NOT: dg.tape
// CHECK: return %[[FOR]]#0, %[[FOR]]#1

// CHECK-LABEL: func.func @until__tangent_0(%arg0: tensor<f64>, %arg1: tensor<f64>)
// CHECK: %[[W:.*]]:2 = scf.while (%[[X:.*]] = %arg0, %[[TX:.*]] = %arg1) : (tensor<f64>, tensor<f64>) -> (tensor<f64>, tensor<f64>) {
// CHECK: "dg.lt"(%[[X]],
// CHECK: scf.condition(%{{.*}}) %[[X]], %[[TX]]
// CHECK: } do {
// CHECK: ^bb0(%[[X2:.*]]: tensor<f64>, %[[TX2:.*]]: tensor<f64>):
// CHECK: "dg.mul"(%[[X2]], %[[X2]])
// CHECK: "dg.mul"(%[[TX2]], %[[X2]])
// CHECK: scf.yield
// CHECK-NOT: dg.tape
// CHECK: return %[[W]]#0, %[[W]]#1

// CHECK-LABEL: func.func @twice__tangent_0(%arg0: tensor<f64>, %arg1: tensor<f64>)
// CHECK: %[[A:.*]]:2 = call @branch__tangent_0(%arg0, %arg1)
// CHECK: %[[B:.*]]:2 = call @branch__tangent_0(%[[A]]#0, %[[A]]#1)
// CHECK: return %[[B]]#0, %[[B]]#1
module {
  func.func private @branch__jvp_0(tensor<f64>, tensor<f64>) -> (tensor<f64>, tensor<f64>) attributes {dg.kind = "jvp", dg.of = "branch", dg.wrt = array<i64: 0>}
  func.func private @loop__jvp_0(tensor<f64>, tensor<i64>, tensor<f64>) -> (tensor<f64>, tensor<f64>) attributes {dg.kind = "jvp", dg.of = "loop", dg.wrt = array<i64: 0>}
  func.func private @until__jvp_0(tensor<f64>, tensor<f64>) -> (tensor<f64>, tensor<f64>) attributes {dg.kind = "jvp", dg.of = "until", dg.wrt = array<i64: 0>}
  func.func private @twice__jvp_0(tensor<f64>, tensor<f64>) -> (tensor<f64>, tensor<f64>) attributes {dg.kind = "jvp", dg.of = "twice", dg.wrt = array<i64: 0>}
  func.func @branch(%arg0: tensor<f64>) -> tensor<f64> {
    %0 = "dg.constant"() {value = dense<0.000000e+00> : tensor<f64>} : () -> tensor<f64>
    %1 = "dg.gt"(%arg0, %0) : (tensor<f64>, tensor<f64>) -> tensor<i1>
    %2 = "dg.to_i1"(%1) : (tensor<i1>) -> i1
    %3 = scf.if %2 -> (tensor<f64>) {
      %4 = "dg.sin"(%arg0) : (tensor<f64>) -> tensor<f64>
      scf.yield %4 : tensor<f64>
    } else {
      %4 = "dg.mul"(%arg0, %arg0) : (tensor<f64>, tensor<f64>) -> tensor<f64>
      scf.yield %4 : tensor<f64>
    }
    return %3 : tensor<f64>
  }
  func.func @loop(%arg0: tensor<f64>, %arg1: tensor<i64>) -> tensor<f64> {
    %0 = "dg.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %1 = "dg.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
    %2 = "dg.range_len"(%0, %arg1, %1) : (tensor<i64>, tensor<i64>, tensor<i64>) -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %3 = scf.for %arg2 = %c0 to %2 step %c1 iter_args(%arg3 = %arg0) -> (tensor<f64>) {
      %4 = "dg.from_index"(%arg2) : (index) -> tensor<i64>
      %5 = "dg.constant"() {value = dense<1.500000e+00> : tensor<f64>} : () -> tensor<f64>
      %6 = "dg.mul"(%arg3, %5) : (tensor<f64>, tensor<f64>) -> tensor<f64>
      scf.yield %6 : tensor<f64>
    }
    return %3 : tensor<f64>
  }
  func.func @until(%arg0: tensor<f64>) -> tensor<f64> {
    %0 = scf.while (%arg1 = %arg0) : (tensor<f64>) -> tensor<f64> {
      %1 = "dg.constant"() {value = dense<1.000000e+01> : tensor<f64>} : () -> tensor<f64>
      %2 = "dg.lt"(%arg1, %1) : (tensor<f64>, tensor<f64>) -> tensor<i1>
      %3 = "dg.to_i1"(%2) : (tensor<i1>) -> i1
      scf.condition(%3) %arg1 : tensor<f64>
    } do {
    ^bb0(%arg1: tensor<f64>):
      %1 = "dg.mul"(%arg1, %arg1) : (tensor<f64>, tensor<f64>) -> tensor<f64>
      %2 = "dg.constant"() {value = dense<1.000000e+00> : tensor<f64>} : () -> tensor<f64>
      %3 = "dg.add"(%1, %2) : (tensor<f64>, tensor<f64>) -> tensor<f64>
      scf.yield %3 : tensor<f64>
    }
    return %0 : tensor<f64>
  }
  func.func @twice(%arg0: tensor<f64>) -> tensor<f64> {
    %0 = call @branch(%arg0) : (tensor<f64>) -> tensor<f64>
    %1 = call @branch(%0) : (tensor<f64>) -> tensor<f64>
    return %1 : tensor<f64>
  }
  func.func @main(%arg0: tensor<f64>, %arg1: tensor<i64>) -> (tensor<f64>, tensor<f64>, tensor<f64>, tensor<f64>) {
    %0 = "dg.constant"() {value = dense<1.000000e+00> : tensor<f64>} : () -> tensor<f64>
    %1:2 = call @branch__jvp_0(%arg0, %0) : (tensor<f64>, tensor<f64>) -> (tensor<f64>, tensor<f64>)
    %2 = "dg.constant"() {value = dense<1.000000e+00> : tensor<f64>} : () -> tensor<f64>
    %3:2 = call @loop__jvp_0(%arg0, %arg1, %2) : (tensor<f64>, tensor<i64>, tensor<f64>) -> (tensor<f64>, tensor<f64>)
    %4 = "dg.constant"() {value = dense<1.000000e+00> : tensor<f64>} : () -> tensor<f64>
    %5:2 = call @until__jvp_0(%arg0, %4) : (tensor<f64>, tensor<f64>) -> (tensor<f64>, tensor<f64>)
    %6 = "dg.constant"() {value = dense<1.000000e+00> : tensor<f64>} : () -> tensor<f64>
    %7:2 = call @twice__jvp_0(%arg0, %6) : (tensor<f64>, tensor<f64>) -> (tensor<f64>, tensor<f64>)
    return %1#1, %3#1, %5#1, %7#1 : tensor<f64>, tensor<f64>, tensor<f64>, tensor<f64>
  }
}
