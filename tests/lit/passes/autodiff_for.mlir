// RUN: %dg opt %s --passes autodiff | %filecheck %s

// scf.for: the forward sweep tapes the loop-carried values (one row per
// iteration, then the final values); the reverse is an scf.for that counts
// down the iterations, reads each row back, recomputes the body and runs its
// reverse. What the body yields is read from the next row, not recomputed.
// CHECK-LABEL: func.func @f__vjp_0(%arg0: tensor<3xf64>, %arg1: tensor<i64>, %arg2: tensor<f64>) -> (tensor<f64>, tensor<3xf64>)
// CHECK: %[[N:.*]] = "dg.range_len"
// Trip count and tape.
// CHECK: %[[TRIPS:.*]] = arith.maxsi
// CHECK: %[[ROWS:.*]] = arith.addi %[[TRIPS]], %{{.*}} : index
// CHECK: %[[TAPE0:.*]] = "dg.tape_alloc"(%arg0, %[[ROWS]]) : (tensor<3xf64>, index) -> tensor<?x3xf64>
// Forward loop: carries the tape and pushes h before each iteration.
// CHECK: %[[FWD:.*]]:2 = scf.for %[[I:[a-z0-9_]+]] = %{{.*}} to %[[N]] step %{{.*}} iter_args(%[[H:[a-z0-9_]+]] = %arg0, %[[TAPE:[a-z0-9_]+]] = %[[TAPE0]]) -> (tensor<3xf64>, tensor<?x3xf64>) {
// CHECK: %[[PUSHED:.*]] = "dg.tape_push"(%[[TAPE]], %{{.*}}, %[[H]])
// CHECK: "dg.tanh"
// CHECK: scf.yield %{{.*}}, %[[PUSHED]] : tensor<3xf64>, tensor<?x3xf64>
// CHECK: }
// CHECK: %[[FULL:.*]] = "dg.tape_push"(%[[FWD]]#1, %[[TRIPS]], %[[FWD]]#0)
// CHECK: "dg.sum"(%[[FWD]]#0)
// Reverse loop: iteration TRIPS - 1 - j, h read back from the tape.
// CHECK: %[[DX:.*]] = scf.for %[[J:[a-z0-9_]+]] = %{{.*}} to %[[TRIPS]] step %[[ONE:[a-z0-9_]+]] iter_args(%[[DH:[a-z0-9_]+]] = %{{.*}}) -> (tensor<3xf64>) {
// CHECK: %[[LAST:.*]] = arith.subi %[[TRIPS]], %[[ONE]] : index
// CHECK: %[[ROW:.*]] = arith.subi %[[LAST]], %[[J]] : index
// CHECK: %[[HR:.*]] = "dg.tape_read"(%[[FULL]], %[[ROW]]) : (tensor<?x3xf64>, index) -> tensor<3xf64>
// CHECK: %[[K:.*]] = "dg.constant"() {value = dense<1.500000e+00> : tensor<f64>}
// CHECK: "dg.mul"(%[[HR]], %[[K]])
// CHECK: "dg.tanh"
// CHECK: %[[NEXT:.*]] = arith.addi %[[ROW]], %{{.*}} : index
// CHECK: %[[Y:.*]] = "dg.tape_read"(%[[FULL]], %[[NEXT]])
// CHECK: "dg.mul"(%[[Y]], %[[Y]])
// CHECK: %[[DT:.*]] = "dg.mul"(%[[DH]], %{{.*}})
// CHECK: %[[DHIN:.*]] = "dg.mul"(%[[DT]], %[[K]])
// CHECK: scf.yield %[[DHIN]] : tensor<3xf64>
// CHECK: }
// CHECK: return %{{.*}}, %[[DX]] : tensor<f64>, tensor<3xf64>

// CHECK-LABEL: func.func @f__grad_0(%arg0: tensor<3xf64>, %arg1: tensor<i64>) -> tensor<3xf64>
// CHECK: call @f__vjp_0(
// CHECK-LABEL: func.func @f(
// CHECK-NOT: dg.tape
// CHECK: return
module {
  func.func private @f__grad_0(tensor<3xf64>, tensor<i64>) -> tensor<3xf64> attributes {dg.kind = "grad", dg.of = "f", dg.wrt = array<i64: 0>}
  func.func @f(%arg0: tensor<3xf64>, %arg1: tensor<i64>) -> tensor<f64> {
    %0 = "dg.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %1 = "dg.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
    %2 = "dg.range_len"(%0, %arg1, %1) : (tensor<i64>, tensor<i64>, tensor<i64>) -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %3 = scf.for %arg2 = %c0 to %2 step %c1 iter_args(%arg3 = %arg0) -> (tensor<3xf64>) {
      %5 = "dg.from_index"(%arg2) : (index) -> tensor<i64>
      %6 = "dg.constant"() {value = dense<1.500000e+00> : tensor<f64>} : () -> tensor<f64>
      %7 = "dg.mul"(%arg3, %6) : (tensor<3xf64>, tensor<f64>) -> tensor<3xf64>
      %8 = "dg.tanh"(%7) : (tensor<3xf64>) -> tensor<3xf64>
      scf.yield %8 : tensor<3xf64>
    }
    %4 = "dg.sum"(%3) {axes = array<i64: 0>, keepdims = false} : (tensor<3xf64>) -> tensor<f64>
    return %4 : tensor<f64>
  }
  func.func @g(%arg0: tensor<3xf64>, %arg1: tensor<i64>) -> tensor<3xf64> {
    %0 = call @f__grad_0(%arg0, %arg1) : (tensor<3xf64>, tensor<i64>) -> tensor<3xf64>
    return %0 : tensor<3xf64>
  }
}
