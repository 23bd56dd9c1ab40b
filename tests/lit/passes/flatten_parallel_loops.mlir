// RUN: %dg opt %s --passes flatten-parallel-loops | %dg opt - --passes canonicalize | %filecheck %s

// A parallel loop of any rank becomes one over (rows, 32 columns) of its iterations in row-major
// order, guarded, the indices recovered by division: 40 x 50 is 2000 iterations, 63 rows of 32.
// CHECK-LABEL: func.func @ew
// CHECK: scf.parallel (%[[R:.*]], %[[C:.*]]) = (%c0, %c0) to (%c63, %c32) step (%c1, %c1)
// CHECK: %[[ROW:.*]] = arith.muli %[[R]], %c32
// CHECK: %[[AT:.*]] = arith.addi %[[ROW]], %[[C]]
// CHECK: %[[IN:.*]] = arith.cmpi slt, %[[AT]], %c2000
// CHECK: scf.if %[[IN]]
// CHECK: arith.remsi %[[AT]], %c50
// CHECK: arith.divsi %[[AT]], %c50
// CHECK: math.exp
// 1-D, 100 iterations of step 3 from 1 (34 of them): 2 rows of 32.
// CHECK-LABEL: func.func @strided
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) = (%c0, %c0) to (%c2, %c32) step (%c1, %c1)
// CHECK: arith.cmpi slt, %{{.*}}, %c34
func.func @ew(%x: memref<40x50xf32>, %y: memref<40x50xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c40 = arith.constant 40 : index
  %c50 = arith.constant 50 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%c40, %c50) step (%c1, %c1) {
    %v = memref.load %x[%i, %j] : memref<40x50xf32>
    %e = math.exp %v : f32
    memref.store %e, %y[%i, %j] : memref<40x50xf32>
    scf.reduce
  }
  return
}
func.func @strided(%x: memref<101xf32>) {
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c101 = arith.constant 101 : index
  %z = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c1) to (%c101) step (%c3) {
    memref.store %z, %x[%i] : memref<101xf32>
    scf.reduce
  }
  return
}
