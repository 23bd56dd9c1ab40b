// RUN: %dg opt %s --passes check-allocation-sizes | %filecheck %s

// An allocation whose sizes, multiplied, may make more elements than any memory holds gets, when
// they do, sizes of 2**59 elements in all: its malloc then fails, and the guard reports it at its
// place. One size is compared with the most it may be; several are multiplied in f64, which does
// not wrap around as the byte count would. One whose static sizes are too many calls malloc for
// 2**62 bytes first. The allocations of a function with the same sizes share the test, made
// where the last of their sizes is defined: at the function's start for its arguments, in a
// branch after the op that gives a size there.
// CHECK-LABEL: func.func @f
// CHECK-DAG: %[[TOO8:.*]] = arith.cmpi sgt, %arg0, %c140737488355328 : index
// CHECK-DAG: %[[SIZE8:.*]] = arith.select %[[TOO8]], %{{.*}}, %arg0 : index
// CHECK-DAG: %[[TOO4:.*]] = arith.cmpi sgt, %arg0, %c281474976710656 : index
// CHECK-DAG: %[[SIZE4:.*]] = arith.select %[[TOO4]], %{{.*}}, %arg0 : index
// CHECK: memref.alloc(%[[SIZE8]]) : memref<?x8xf32>
// CHECK-NEXT: memref.alloc(%[[SIZE8]]) : memref<?x8xf32>
// CHECK-NEXT: scf.if
// CHECK-NEXT: memref.alloc(%[[SIZE8]]) : memref<?x8xf32>
// CHECK-NEXT: memref.alloc(%[[SIZE4]]) : memref<?x4xf32>
// CHECK-NEXT: memref.alloc(%[[SIZE4]]) : memref<?x4xf32>
// CHECK: memref.alloc(%[[SIZE4]]) : memref<?x4xf32>
// CHECK-LABEL: func.func @h
// CHECK: scf.if
// CHECK-NEXT: %[[N:.*]] = arith.addi
// CHECK: arith.sitofp
// CHECK: arith.sitofp
// CHECK: %[[TOO:.*]] = arith.cmpf ogt
// CHECK: %[[A:.*]] = arith.select %[[TOO]], %{{.*}}, %arg0 : index
// CHECK: %[[B:.*]] = arith.select %[[TOO]], %{{.*}}, %[[N]] : index
// CHECK: arith.muli
// CHECK-NEXT: memref.alloc(%[[A]], %[[B]]) : memref<?x?xf32>
// CHECK-NEXT: memref.alloc(%[[A]], %[[B]]) : memref<?x?xf32>
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
func.func @h(%m: index, %c: i1) {
  scf.if %c {
    %n = arith.addi %m, %m : index
    %k = arith.muli %m, %m : index
    %a = memref.alloc(%m, %n) : memref<?x?xf32>
    %b = memref.alloc(%m, %n) : memref<?x?xf32>
    scf.yield
  }
  return
}
func.func @g() -> memref<1125899906842624x2xf32> {
  %a = memref.alloc() : memref<1125899906842624x2xf32>
  return %a : memref<1125899906842624x2xf32>
}
