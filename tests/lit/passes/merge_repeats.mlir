// RUN: %dg opt %s --passes merge-repeats | %filecheck %s

// The same product computed twice (a reverse function's recomputed forward, once inlined) is
// computed once; the zero-filled tensor that it and a different product write into (once cse
// has merged the two fills) is made again for one of them, so that neither writes into the
// other's result. A check on a condition that an earlier one already tested (here, once cse has
// merged the two comparisons) goes, in the same block or in a nested one; a check inside a branch
// does not stand for the same check after the branch.
// CHECK-LABEL: func.func @f
// CHECK: %[[Z1:.*]] = linalg.fill
// CHECK: %[[Z2:.*]] = linalg.fill
// CHECK: %[[P:.*]] = linalg.matmul ins(%arg0, %arg1 {{.*}} outs(%[[Z2]]
// CHECK: scf.if
// CHECK-NEXT: call @dg_rt_fail(%c0_i64
// CHECK: linalg.matmul ins(%arg1, %arg0 {{.*}} outs(%[[Z1]]
// CHECK-NOT: linalg.matmul
// CHECK: scf.if %arg3
// CHECK-NEXT: }
// CHECK: scf.if %arg3
// CHECK-NEXT: arith.cmpi eq
// CHECK-NEXT: scf.if
// CHECK-NEXT: call @dg_rt_fail(%c4_i64
// CHECK: scf.if
// CHECK-NEXT: call @dg_rt_fail(%c5_i64
// CHECK: scf.if
// CHECK-NEXT: call @dg_rt_fail(%c3_i64
// CHECK-NOT: dg_rt_fail
// CHECK: return %[[P]], %[[P]]
func.func private @dg_rt_fail(i64, i64, i64)
func.func @f(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>, %n: index, %flag: i1)
    -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  %c2 = arith.constant 2 : i64
  %c3 = arith.constant 3 : i64
  %c4 = arith.constant 4 : i64
  %c5 = arith.constant 5 : i64
  %big = arith.constant 100 : index
  %e = tensor.empty() : tensor<4x4xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
  %p = linalg.matmul ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>) outs(%z : tensor<4x4xf32>) -> tensor<4x4xf32>
  %bad = arith.cmpi sgt, %n, %big : index
  scf.if %bad {
    func.call @dg_rt_fail(%c0, %c0, %c0) : (i64, i64, i64) -> ()
  }
  %e2 = tensor.empty() : tensor<4x4xf32>
  %z2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4x4xf32>) -> tensor<4x4xf32>
  %p2 = linalg.matmul ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>) outs(%z2 : tensor<4x4xf32>) -> tensor<4x4xf32>
  %q = linalg.matmul ins(%b, %a : tensor<4x4xf32>, tensor<4x4xf32>) outs(%z2 : tensor<4x4xf32>) -> tensor<4x4xf32>
  %bad2 = arith.cmpi sgt, %n, %big : index
  scf.if %bad2 {
    func.call @dg_rt_fail(%c1, %c0, %c0) : (i64, i64, i64) -> ()
  }
  scf.if %flag {
    %bad3 = arith.cmpi sgt, %n, %big : index
    scf.if %bad3 {
      func.call @dg_rt_fail(%c2, %c0, %c0) : (i64, i64, i64) -> ()
    }
  }
  scf.if %flag {
    %bad5 = arith.cmpi eq, %n, %big : index
    scf.if %bad5 {
      func.call @dg_rt_fail(%c4, %c0, %c0) : (i64, i64, i64) -> ()
    }
  }
  %bad6 = arith.cmpi eq, %n, %big : index
  scf.if %bad6 {
    func.call @dg_rt_fail(%c5, %c0, %c0) : (i64, i64, i64) -> ()
  }
  %bad4 = arith.cmpi slt, %n, %big : index
  scf.if %bad4 {
    func.call @dg_rt_fail(%c3, %c0, %c0) : (i64, i64, i64) -> ()
  }
  return %p, %p2, %q : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}
