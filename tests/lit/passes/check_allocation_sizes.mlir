// RUN: %dg opt %s --passes check-allocation-sizes | %filecheck %s

// An allocation whose sizes, multiplied, may make more elements than any memory holds gets, when
// they do, sizes of 2**59 elements in all (counted in f64, which does not wrap around as the
// byte count would): its malloc then fails, and the guard reports it at its place. One whose
// static sizes are too many calls malloc for 2**62 bytes first. Allocations of the same sizes
// share the test, in the block that made it and in the blocks inside it, not after that block.
// CHECK-LABEL: func.func @f
// CHECK: %[[N:.*]] = arith.sitofp
// CHECK: %[[TOO:.*]] = arith.cmpf ogt
// CHECK: %[[SIZE:.*]] = arith.select %[[TOO]], %{{.*}}, %arg0 : index
// CHECK: memref.alloc(%[[SIZE]]) : memref<?x8xf32>
// CHECK-NOT: arith.cmpf
// CHECK: memref.alloc(%[[SIZE]]) : memref<?x8xf32>
// CHECK: scf.if
// CHECK-NOT: arith.cmpf
// CHECK: memref.alloc(%[[SIZE]]) : memref<?x8xf32>
// CHECK: arith.cmpf ogt
// CHECK: memref.alloc(%[[S4:.*]]) : memref<?x4xf32>
// CHECK-NOT: arith.cmpf
// CHECK: memref.alloc(%[[S4]]) : memref<?x4xf32>
// CHECK: }
// CHECK: arith.cmpf ogt
// CHECK: memref.alloc(%{{.*}}) : memref<?x4xf32>
// CHECK-LABEL: func.func @g
// CHECK: llvm.mlir.constant(4611686018427387904 : i64)
// CHECK: llvm.call @malloc
// CHECK: llvm.func @malloc(i64) -> !llvm.ptr
func.func @f(%n: index, %c: i1) -> memref<?x8xf32> {
  %a = memref.alloc(%n) : memref<?x8xf32>
  %b = memref.alloc(%n) : memref<?x8xf32>
  scf.if %c {
    %d = memref.alloc(%n) : memref<?x8xf32>
    %e = memref.alloc(%n) : memref<?x4xf32>
    %f = memref.alloc(%n) : memref<?x4xf32>
    scf.yield
  }
  %g = memref.alloc(%n) : memref<?x4xf32>
  return %a : memref<?x8xf32>
}
func.func @g() -> memref<1125899906842624x2xf32> {
  %a = memref.alloc() : memref<1125899906842624x2xf32>
  return %a : memref<1125899906842624x2xf32>
}
