// RUN: %dg opt %s --passes share-argument-dims | %filecheck %s

// The sizes of an argument's axis are one tensor.dim at the top of the function, and the sizes
// that Python's calls check to be equal (the annotation names them alike: K) one for all, so
// that the run-time check between them folds away.
// CHECK-LABEL: func.func @f
// CHECK-SAME: dg.sizes
// CHECK-DAG: %[[TRUE:.*]] = arith.constant true
// CHECK-DAG: %[[K:.*]] = tensor.dim %arg0, %c1
// CHECK-NOT: tensor.dim
// CHECK: return %[[K]], %[[K]], %[[TRUE]]
func.func @f(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> (index, index, i1) attributes {dg.sizes = [["N", "K"], ["K", "M"]]} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %k1 = tensor.dim %a, %c1 : tensor<?x?xf32>
  %k2 = tensor.dim %b, %c0 : tensor<?x?xf32>
  %same = arith.cmpi eq, %k1, %k2 : index
  return %k1, %k2, %same : index, index, i1
}
