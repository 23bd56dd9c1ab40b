// RUN: %dg opt %s --passes "only-entry{entry=step}" | %filecheck %s

// Only the entry stays callable from outside: the functions it calls become private (no C
// interface), and those it does not reach are dropped.
// CHECK-NOT: @unused
// CHECK-LABEL: func.func private @loss
// CHECK-NOT: llvm.emit_c_interface
// CHECK-LABEL: func.func @step
// CHECK-SAME: attributes {llvm.emit_c_interface}
func.func @loss(%x: tensor<3xf32>) -> tensor<3xf32> attributes {llvm.emit_c_interface} {
  return %x : tensor<3xf32>
}
func.func @step(%x: tensor<3xf32>) -> tensor<3xf32> attributes {llvm.emit_c_interface} {
  %0 = func.call @loss(%x) : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func @unused(%x: tensor<3xf32>) -> tensor<3xf32> attributes {llvm.emit_c_interface} {
  return %x : tensor<3xf32>
}
