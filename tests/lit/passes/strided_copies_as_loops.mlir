// RUN: %dg opt %s --passes strided-copies-as-loops | %filecheck %s

// A copy into a strided view (a row of a tape) is a linalg.copy, which becomes loops LLVM
// vectorizes, not a call of MLIR's `memrefCopy` (which the executor serves in Python). A copy
// between plain buffers stays, and becomes a memcpy.
// CHECK-LABEL: func.func @f
// CHECK: %[[ROW:.*]] = memref.subview
// CHECK: linalg.copy ins(%arg0 : memref<4x6xf32>) outs(%[[ROW]] :
// CHECK: memref.copy %arg0, %arg2 : memref<4x6xf32> to memref<4x6xf32>
func.func @f(%a: memref<4x6xf32>, %b: memref<8x6xf32>, %c: memref<4x6xf32>, %i: index) {
  %row = memref.subview %b[%i, 0] [4, 6] [1, 1] : memref<8x6xf32> to memref<4x6xf32, strided<[6, 1], offset: ?>>
  memref.copy %a, %row : memref<4x6xf32> to memref<4x6xf32, strided<[6, 1], offset: ?>>
  memref.copy %a, %c : memref<4x6xf32> to memref<4x6xf32>
  return
}
