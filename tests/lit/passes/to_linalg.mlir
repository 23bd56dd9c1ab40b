// RUN: %dg opt %s --passes to-linalg | %filecheck %s

// Each dg op becomes its registry entry's lowering: element-wise ops a linalg.generic that
// computes one element (the operand of size 3 broadcast by its indexing map), a check an scf.if
// that records the check's id, a print a call into the executor, a call of a dg function records
// its site when the first failure happened inside it. The tables of the checks (place, message,
// how many values it reports), of the host calls and of the call sites go into the module.
// CHECK: #[[ROW:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK: module attributes {dg.call_sites = {{\[\[}}"-", 44, 8]], dg.checks = {{\[\[\[}}"-", 26, 3], "assertion failed: c must hold", 0], {{\[\[}}"-", 43, 1], "recursion too deep {{.*}}", 0]], dg.host_calls = {{\[\[}}"print", ["a:", "\00"], true]]}
// CHECK-DAG: func.func private @dg_rt_fail(i64, i64, i64)
// CHECK-DAG: func.func private @dg_rt_frame(i64)
// CHECK-DAG: func.func private @dg_rt_host_f64(i64, tensor<*xf64>
// CHECK-LABEL: func.func @f
// CHECK-SAME: attributes {llvm.emit_c_interface}
// CHECK: %[[E:.*]] = linalg.generic
// CHECK: math.exp
// CHECK: linalg.generic {indexing_maps = [#[[ROW]], {{.*}}]} ins(%[[E]], %arg1
// CHECK: arith.addf
// CHECK: %[[BAD:.*]] = arith.xori
// CHECK: scf.if %[[BAD]] {
// CHECK: func.call @dg_rt_fail(
// CHECK: call @dg_rt_host_f64(
func.func @f(%a: tensor<3xf64>, %b: tensor<2x3xf64>, %c: tensor<i1>) -> tensor<2x3xf64> {
  %0 = "dg.exp"(%a) : (tensor<3xf64>) -> tensor<3xf64>
  %1 = "dg.add"(%0, %b) : (tensor<3xf64>, tensor<2x3xf64>) -> tensor<2x3xf64>
  "dg.assert"(%c) {msg = "c must hold"} : (tensor<i1>) -> ()
  "dg.print"(%0) {pieces = ["a:", "\00"], end = true} : (tensor<3xf64>) -> ()
  return %1 : tensor<2x3xf64>
}

// A function that calls itself checks the stack it has left first (entry guard), and returns
// placeholders when it may not go on.
// CHECK-LABEL: func.func @deep
// CHECK: call @dg_stack_pointer()
// CHECK: scf.if
// CHECK: linalg.fill
// CHECK: } else {
// CHECK: %[[BEFORE:.*]] = memref.load
// CHECK: func.call @deep(
// CHECK: %[[AFTER:.*]] = memref.load
// CHECK: scf.if
// CHECK-NEXT: func.call @dg_rt_frame(
func.func @deep(%x: tensor<f64>) -> tensor<f64> {
  %0 = func.call @deep(%x) : (tensor<f64>) -> tensor<f64>
  return %0 : tensor<f64>
}
