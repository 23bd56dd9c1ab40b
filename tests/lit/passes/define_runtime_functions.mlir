// RUN: %dg opt %s --passes define-runtime-functions | %filecheck %s

// The runtime functions the lowering declared get their bodies on the CPU: dg_rt_fail records
// the first failed check's id (plus one) in word 0 of the state global the executor reads and
// the two values it reports in words 3 and 4; dg_rt_frame counts a call the failure unwound in
// word 5 and writes its site's id into a slot after it; dg_stack_pointer reads the stack pointer.
// CHECK: memref.global @dg_state : memref<38xi64>
// CHECK-LABEL: func.func private @dg_rt_fail(%arg0: i64, %arg1: i64, %arg2: i64)
// CHECK: memref.get_global @dg_state
// CHECK: scf.if
// CHECK: memref.store
// CHECK: memref.store %arg1
// CHECK: memref.store %arg2
// CHECK-LABEL: func.func private @dg_rt_frame(%arg0: i64)
// CHECK: arith.remsi
// CHECK: memref.store %arg0
// CHECK-LABEL: func.func private @dg_stack_pointer() -> i64
// CHECK: llvm.intr.stacksave
memref.global @dg_state : memref<38xi64> = dense<0>
func.func private @dg_rt_fail(i64, i64, i64) attributes {llvm.emit_c_interface}
func.func private @dg_rt_frame(i64)
func.func private @dg_stack_pointer() -> i64
