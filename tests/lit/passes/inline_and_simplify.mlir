// RUN: %dg opt %s --passes inline-and-simplify | %filecheck %s

// Calls are inlined (a step and its gradient functions become one body; a private function
// inlined everywhere goes), and canonicalization folds what that leaves: here the size of an
// argument whose type the caller knows.
// CHECK-NOT: @inner
// CHECK-LABEL: func.func @step
// CHECK-NEXT: %[[N:.*]] = arith.constant 3 : index
// CHECK-NEXT: return %[[N]]
func.func private @inner(%x: tensor<?xf32>) -> index {
  %c0 = arith.constant 0 : index
  %d = tensor.dim %x, %c0 : tensor<?xf32>
  return %d : index
}
func.func @step(%x: tensor<3xf32>) -> index {
  %0 = tensor.cast %x : tensor<3xf32> to tensor<?xf32>
  %1 = func.call @inner(%0) : (tensor<?xf32>) -> index
  return %1 : index
}
