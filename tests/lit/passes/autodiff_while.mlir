// RUN: %dg opt %s --passes autodiff | %filecheck %s

// scf.while: the forward runs the loop as it is, counting the condition
// evaluations; then runs it again as an scf.for of that many iterations less
// one, taping the carried values (n + 1 rows, the last one after the loop).
// A tape carried by the scf.while itself would be copied on every iteration
// (MLIR bufferizes a while loop's carried tensors so). The reverse is an
// scf.for over the iterations counting down, reading each row back. The
// adjoint of x (free in the body) is carried through the reverse loop.
// CHECK-LABEL: func.func @f__vjp_0(%arg0: tensor<3xf64>, %arg1: tensor<f64>) -> (tensor<f64>, tensor<3xf64>)
// CHECK: %[[S0:.*]] = "dg.sum"
// CHECK: %[[W:.*]]:2 = scf.while (%[[S:[a-z0-9_]+]] = %[[S0]], %[[CNT:[a-z0-9_]+]] = %{{.*}}) : (tensor<f64>, index) -> (tensor<f64>, index) {
// CHECK: %[[NEXT:.*]] = arith.addi %[[CNT]], %{{.*}} : index
// CHECK: "dg.lt"(%[[S]],
// CHECK: scf.condition(%{{.*}}) %[[S]], %[[NEXT]] : tensor<f64>, index
// CHECK: } do {
// CHECK: "dg.sin"(%arg0)
// CHECK: scf.yield
// CHECK: }
// Body iterations: one less than the condition evaluations.
// CHECK: %[[N:.*]] = arith.subi %[[W]]#1, %{{.*}} : index
// CHECK: %[[ROWS:.*]] = arith.addi %[[N]], %{{.*}} : index
// CHECK: %[[TAPE0:.*]] = "dg.tape_alloc"(%[[S0]], %[[ROWS]]) : (tensor<f64>, index) -> tensor<?xf64>
// CHECK: %[[TAPED:.*]]:2 = scf.for %[[G:[a-z0-9_]+]] = %{{.*}} to %[[N]] step %{{.*}} iter_args(%[[X:[a-z0-9_]+]] = %[[S0]], %[[T:[a-z0-9_]+]] = %[[TAPE0]]) -> (tensor<f64>, tensor<?xf64>) {
// CHECK: %[[PUSHED:.*]] = "dg.tape_push"(%[[T]], %[[G]], %[[X]])
// CHECK: "dg.mul"(%[[X]],
// CHECK: scf.yield %{{.*}}, %[[PUSHED]] : tensor<f64>, tensor<?xf64>
// CHECK: }
// CHECK: %[[TAPE:.*]] = "dg.tape_push"(%[[TAPED]]#1, %[[N]], %[[TAPED]]#0)
// CHECK: %[[ITERS:.*]] = arith.subi %[[W]]#1, %[[ONE:[a-z0-9_]+]] : index
// CHECK: %[[Z:.*]] = "dg.zeros_like"(%arg0)
// CHECK: %[[REV:.*]]:2 = scf.for %[[J:[a-z0-9_]+]] = %{{.*}} to %[[ITERS]] step %[[ONE]] iter_args(%[[DS:[a-z0-9_]+]] = %arg1, %[[DX:[a-z0-9_]+]] = %[[Z]]) -> (tensor<f64>, tensor<3xf64>) {
// CHECK: %[[LAST:.*]] = arith.subi %[[ITERS]], %[[ONE]] : index
// CHECK: %[[ROW:.*]] = arith.subi %[[LAST]], %[[J]] : index
// CHECK: %[[SR:.*]] = "dg.tape_read"(%[[TAPE]], %[[ROW]]) : (tensor<?xf64>, index) -> tensor<f64>
// CHECK: %[[K:.*]] = "dg.constant"() {value = dense<1.700000e+00> : tensor<f64>}
// CHECK: "dg.mul"(%[[SR]], %[[K]])
// CHECK: "dg.cos"(%arg0)
// CHECK: %[[DX2:.*]] = "dg.add"(%[[DX]], %{{.*}})
// CHECK: %[[DS2:.*]] = "dg.mul"(%[[DS]], %[[K]])
// CHECK: scf.yield %[[DS2]], %[[DX2]] : tensor<f64>, tensor<3xf64>
// CHECK: }
// After the loop: the reverse of s = sum(x * x), added to the carried adjoint of x.
// CHECK: "dg.expand_dims"(%[[REV]]#0)
// CHECK: "dg.add"(%[[REV]]#1,
// CHECK: return %[[W]]#0, %{{.*}} : tensor<f64>, tensor<3xf64>

// CHECK-LABEL: func.func @f__grad_0(%arg0: tensor<3xf64>) -> tensor<3xf64>
// CHECK: call @f__vjp_0(
// CHECK-LABEL: func.func @f(
// CHECK-NOT: dg.tape
// CHECK: scf.while
// CHECK-NOT: dg.tape
// CHECK-LABEL: func.func @g(
module {
  func.func private @f__grad_0(tensor<3xf64>) -> tensor<3xf64> attributes {dg.kind = "grad", dg.of = "f", dg.wrt = array<i64: 0>}
  func.func @f(%arg0: tensor<3xf64>) -> tensor<f64> {
    %0 = "dg.mul"(%arg0, %arg0) : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
    %1 = "dg.sum"(%0) {axes = array<i64: 0>, keepdims = false} : (tensor<3xf64>) -> tensor<f64>
    %2 = scf.while (%arg1 = %1) : (tensor<f64>) -> tensor<f64> {
      %3 = "dg.constant"() {value = dense<5.000000e+01> : tensor<f64>} : () -> tensor<f64>
      %4 = "dg.lt"(%arg1, %3) : (tensor<f64>, tensor<f64>) -> tensor<i1>
      %5 = "dg.to_i1"(%4) : (tensor<i1>) -> i1
      scf.condition(%5) %arg1 : tensor<f64>
    } do {
    ^bb0(%arg1: tensor<f64>):
      %3 = "dg.constant"() {value = dense<1.700000e+00> : tensor<f64>} : () -> tensor<f64>
      %4 = "dg.mul"(%arg1, %3) : (tensor<f64>, tensor<f64>) -> tensor<f64>
      %5 = "dg.sin"(%arg0) : (tensor<3xf64>) -> tensor<3xf64>
      %6 = "dg.sum"(%5) {axes = array<i64: 0>, keepdims = false} : (tensor<3xf64>) -> tensor<f64>
      %7 = "dg.add"(%4, %6) : (tensor<f64>, tensor<f64>) -> tensor<f64>
      scf.yield %7 : tensor<f64>
    }
    return %2 : tensor<f64>
  }
  func.func @g(%arg0: tensor<3xf64>) -> tensor<3xf64> {
    %0 = call @f__grad_0(%arg0) : (tensor<3xf64>) -> tensor<3xf64>
    return %0 : tensor<3xf64>
  }
}
