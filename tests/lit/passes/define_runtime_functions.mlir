// RUN: %dg opt %s --passes define-runtime-functions | %filecheck %s

// The runtime functions the lowering declared get their bodies on the CPU: dg_rt_fail records
// the first failed check's id (plus one) in word 0 of the state global the executor reads, and
// dg_stack_pointer reads the stack pointer.
// CHECK: memref.global @dg_state : memref<3xi64>
// CHECK-LABEL: func.func private @dg_rt_fail(%arg0: i64)
// CHECK: memref.get_global @dg_state
// CHECK: scf.if
// CHECK: memref.store
// CHECK-LABEL: func.func private @dg_stack_pointer() -> i64
// CHECK: llvm.intr.stacksave
memref.global @dg_state : memref<3xi64> = dense<0>
func.func private @dg_rt_fail(i64) attributes {llvm.emit_c_interface}
func.func private @dg_stack_pointer() -> i64
