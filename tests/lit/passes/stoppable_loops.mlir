// RUN: %dg opt %s --passes stoppable-loops | %filecheck %s

// A dg-level loop (marked dg.stoppable by to-linalg) becomes a while loop over the same body that
// also ends once a check failed (word 0 of dg_state) or Ctrl-C was pressed (dg_interrupt); the
// loops of the lowering (unmarked) stay as they are.
// CHECK-LABEL: func.func @f
// CHECK: %[[R:.*]]:2 = scf.while (%[[I:.*]] = %c0, %[[S:.*]] = %arg1) : (index, f64) -> (index, f64) {
// CHECK: %[[IN:.*]] = arith.cmpi slt, %[[I]], %arg0 : index
// CHECK: memref.get_global @dg_state
// CHECK: memref.get_global @dg_interrupt
// CHECK: %[[ANY:.*]] = arith.ori
// CHECK: %[[GO:.*]] = arith.cmpi eq, %[[ANY]]
// CHECK: %[[BOTH:.*]] = arith.andi %[[IN]], %[[GO]] : i1
// CHECK: scf.condition(%[[BOTH]]) %[[I]], %[[S]] : index, f64
// CHECK: } do {
// CHECK: ^bb0(%[[J:.*]]: index, %[[T:.*]]: f64):
// CHECK: %[[U:.*]] = arith.addf %[[T]], %[[T]] : f64
// CHECK: %[[NEXT:.*]] = arith.addi %[[J]], %c1 : index
// CHECK: scf.yield %[[NEXT]], %[[U]] : index, f64
// CHECK: return %[[R]]#1 : f64
// CHECK-LABEL: func.func @g
// CHECK: scf.for
// CHECK-NOT: scf.while
// CHECK: memref.global @dg_state : memref<38xi64>
// CHECK: memref.global @dg_interrupt : memref<i64>
func.func @f(%n: index, %s0: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%s = %s0) -> (f64) {
    %t = arith.addf %s, %s : f64
    scf.yield %t : f64
  } {dg.stoppable}
  return %r : f64
}
func.func @g(%n: index, %s0: f64) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%s = %s0) -> (f64) {
    %t = arith.addf %s, %s : f64
    scf.yield %t : f64
  }
  return %r : f64
}
