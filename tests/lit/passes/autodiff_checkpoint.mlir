// RUN: %dg opt %s --passes autodiff | %filecheck %s

// checkpoint(f, slots=4): a `checkpoint` declaration is f itself outside gradients;
// its gradient is f's, with every loop keeping at most 4 snapshots (`f__vjp_<mask>_ck4`).
// The forward keeps the carried values of every s-th iteration (s = 1 at first) as
// rows of a 4-row tape; when it is full, every other row is dropped (getitem with
// step 2, concat) and s doubles. The reverse goes over the snapshots from the last:
// each segment is run again keeping 4 snapshots the same way, and each piece of it
// is run once more, taped in full, and reversed.

// CHECK-LABEL: func.func @loop__checkpoint_4(
// CHECK: call @loop(%arg0, %arg1)
// CHECK-LABEL: func.func @loop__vjp_0_ck4(
// CHECK: %[[C4:.*]] = arith.constant 4 : index
// CHECK: %[[SNAPS:.*]] = "dg.tape_alloc"(%arg0, %[[C4]])
// CHECK: %[[FWD:.*]]:4 = scf.for %[[IV:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[X:.*]] = %arg0, %[[T:.*]] = %[[SNAPS]], %[[M:.*]] = %{{.*}}, %[[S:.*]] = %{{.*}}) -> (tensor<?xf64>, tensor<?x?xf64>, index, index) {
// CHECK: %[[R:.*]] = arith.remsi %{{.*}}, %[[S]] : index
// CHECK: %[[KEEP:.*]]:3 = scf.if %{{.*}} -> (tensor<?x?xf64>, index, index) {
// CHECK: %[[THIN:.*]]:3 = scf.if %{{.*}} -> (tensor<?x?xf64>, index, index) {
// CHECK: %[[HALF:.*]] = "dg.getitem"(%[[T]]) {spec = ["s:::2"]}
// CHECK: "dg.concat"(%[[HALF]], %[[HALF]]) {axis = 0 : i64}
// CHECK: arith.addi %[[S]], %[[S]] : index
// CHECK: "dg.tape_push"(%[[THIN]]#0, %[[THIN]]#1, %[[X]])
// CHECK: "dg.sin"(%[[X]])
// CHECK: scf.yield
// The pieces' tape: made once, with room for the longest piece (2s/4 iterations and the
// final values), and carried through the reverse loops.
// CHECK: arith.ceildivsi %{{.*}}, %{{.*}} : index
// CHECK: %[[PIECES:.*]] = "dg.tape_alloc"(%arg0,
// The reverse: segments from the last snapshot, of min(s, n - j*s) iterations.
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %[[FWD]]#2 step %{{.*}} iter_args(%{{.*}} = %{{.*}}, %[[HELD:.*]] = %[[PIECES]])
// CHECK: arith.minsi %[[FWD]]#3,
// CHECK: "dg.tape_read"(%[[FWD]]#1,
// CHECK: "dg.tape_alloc"(%{{.*}}, %{{.*}})
// CHECK: scf.for {{.*}} -> (tensor<?xf64>, tensor<?x?xf64>, index, index) {
// CHECK: "dg.getitem"({{.*}}) {spec = ["s:::2"]}
// CHECK: "dg.sin"
// Each piece: run taped in full (n + 1 rows) into the pieces' tape, then the countdown reverse.
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}, %[[HELD2:.*]] = %[[HELD]])
// CHECK: "dg.tape_read"
// CHECK: scf.for %{{.*}} iter_args(%{{.*}} = %{{.*}}, %[[T2:.*]] = %[[HELD2]]) -> (tensor<?xf64>, tensor<?x?xf64>) {
// CHECK: "dg.tape_push"(%[[T2]],
// CHECK: "dg.sin"
// CHECK: scf.for
// CHECK: "dg.tape_read"
// CHECK: "dg.cos"

// A `while` loop: run once, as an scf.while over chunks of s iterations (an scf.while
// copies what it carries on every iteration, so the snapshots travel through it once
// per chunk), each an scf.for that stops doing anything once the condition fails.
// A snapshot is taken as each chunk starts.
// CHECK-LABEL: func.func @until__vjp_0_ck4(
// CHECK: %[[SN:.*]] = "dg.tape_alloc"(%arg0, %{{.*}})
// CHECK: %[[LIVE:.*]] = arith.constant true
// CHECK: %[[CH:.*]]:6 = scf.while ({{.*}}%[[GOING:.*]] = %[[LIVE]]) : (tensor<?xf64>, tensor<?x?xf64>, index, index, index, i1)
// CHECK: scf.condition(%[[GOING]])
// CHECK: } do {
// CHECK: %[[KEPT:.*]]:3 = scf.if
// CHECK: "dg.getitem"({{.*}}) {spec = ["s:::2"]}
// CHECK: "dg.concat"
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[KEPT]]#2 step %{{.*}} iter_args({{.*}}) -> (tensor<?xf64>, index, i1) {
// CHECK: "dg.lt"
// CHECK: scf.if %{{.*}} -> (tensor<?xf64>, index, i1) {
// CHECK: "dg.mul"
// CHECK: } {dg.loop_body}
// The reverse goes over the m snapshots the chunks kept, for the n iterations they counted.
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[CH]]#2 step
module {
  func.func private @loop__checkpoint_4(tensor<?xf64>, tensor<i64>) -> tensor<f64> attributes {dg.kind = "checkpoint", dg.of = "loop", dg.slots = 4 : i64, dg.wrt = array<i64>}
  func.func private @loop__checkpoint_4__grad_0(tensor<?xf64>, tensor<i64>) -> tensor<?xf64> attributes {dg.kind = "grad", dg.of = "loop__checkpoint_4", dg.wrt = array<i64: 0>}
  func.func private @until__checkpoint_4(tensor<?xf64>) -> tensor<f64> attributes {dg.kind = "checkpoint", dg.of = "until", dg.slots = 4 : i64, dg.wrt = array<i64>}
  func.func private @until__checkpoint_4__grad_0(tensor<?xf64>) -> tensor<?xf64> attributes {dg.kind = "grad", dg.of = "until__checkpoint_4", dg.wrt = array<i64: 0>}
  func.func @loop(%arg0: tensor<?xf64>, %arg1: tensor<i64>) -> tensor<f64> {
    %0 = "dg.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %1 = "dg.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
    %2 = "dg.range_len"(%0, %arg1, %1) : (tensor<i64>, tensor<i64>, tensor<i64>) -> index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %3 = scf.for %arg2 = %c0 to %2 step %c1 iter_args(%arg3 = %arg0) -> (tensor<?xf64>) {
      %5 = "dg.from_index"(%arg2) : (index) -> tensor<i64>
      %6 = "dg.sin"(%arg3) : (tensor<?xf64>) -> tensor<?xf64>
      %7 = "dg.constant"() {value = dense<1.500000e+00> : tensor<f64>} : () -> tensor<f64>
      %8 = "dg.mul"(%6, %7) : (tensor<?xf64>, tensor<f64>) -> tensor<?xf64>
      scf.yield %8 : tensor<?xf64>
    }
    %4 = "dg.sum"(%3) {axes = array<i64: 0>, keepdims = false} : (tensor<?xf64>) -> tensor<f64>
    return %4 : tensor<f64>
  }
  func.func @until(%arg0: tensor<?xf64>) -> tensor<f64> {
    %0 = scf.while (%arg1 = %arg0) : (tensor<?xf64>) -> tensor<?xf64> {
      %2 = "dg.sum"(%arg1) {axes = array<i64: 0>, keepdims = false} : (tensor<?xf64>) -> tensor<f64>
      %3 = "dg.constant"() {value = dense<1.000000e+01> : tensor<f64>} : () -> tensor<f64>
      %4 = "dg.lt"(%2, %3) : (tensor<f64>, tensor<f64>) -> tensor<i1>
      %5 = "dg.to_i1"(%4) : (tensor<i1>) -> i1
      scf.condition(%5) %arg1 : tensor<?xf64>
    } do {
    ^bb0(%arg1: tensor<?xf64>):
      %2 = "dg.constant"() {value = dense<1.500000e+00> : tensor<f64>} : () -> tensor<f64>
      %3 = "dg.mul"(%arg1, %2) : (tensor<?xf64>, tensor<f64>) -> tensor<?xf64>
      %4 = "dg.constant"() {value = dense<1.000000e+00> : tensor<f64>} : () -> tensor<f64>
      %5 = "dg.add"(%3, %4) : (tensor<?xf64>, tensor<f64>) -> tensor<?xf64>
      scf.yield %5 : tensor<?xf64>
    }
    %1 = "dg.sum"(%0) {axes = array<i64: 0>, keepdims = false} : (tensor<?xf64>) -> tensor<f64>
    return %1 : tensor<f64>
  }
  func.func @main(%arg0: tensor<?xf64>, %arg1: tensor<i64>) -> (tensor<?xf64>, tensor<?xf64>) {
    %0 = call @loop__checkpoint_4__grad_0(%arg0, %arg1) : (tensor<?xf64>, tensor<i64>) -> tensor<?xf64>
    %1 = call @until__checkpoint_4__grad_0(%arg0) : (tensor<?xf64>) -> tensor<?xf64>
    return %0, %1 : tensor<?xf64>, tensor<?xf64>
  }
}
