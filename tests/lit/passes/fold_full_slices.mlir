// RUN: %dg opt %s --passes fold-full-slices | %filecheck %s

// A slice from 0 with unit strides that takes all of its source on every axis (its size there is
// the source's own: a static size, or a tensor.dim of the source) is its source; MLIR does not
// fold slices with dynamic sizes. A slice that takes less stays.
// CHECK-LABEL: func.func @f
// CHECK-NOT: tensor.extract_slice
// CHECK: return %arg0
func.func @f(%x: tensor<?x3xf32>) -> tensor<?x3xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x3xf32>
  %s = tensor.extract_slice %x[0, 0] [%n, 3] [1, 1] : tensor<?x3xf32> to tensor<?x3xf32>
  return %s : tensor<?x3xf32>
}

// CHECK-LABEL: func.func @g
// CHECK: tensor.extract_slice %arg0[0, 0] [%arg1, 3] [1, 1]
func.func @g(%x: tensor<?x3xf32>, %m: index) -> tensor<?x3xf32> {
  %s = tensor.extract_slice %x[0, 0] [%m, 3] [1, 1] : tensor<?x3xf32> to tensor<?x3xf32>
  return %s : tensor<?x3xf32>
}
