// RUN: %dg opt %s --passes zero-fills-as-memset | %filecheck %s

// A zero fill of a row-major buffer is a memset of its bytes (elements times their size); a
// fill with another value, with -0.0, or of a strided view stays a fill.
// CHECK-LABEL: func.func @f
// CHECK: %[[N:.*]] = memref.dim %arg0, %{{.*}} : memref<?x8xf32>
// CHECK: %[[NI:.*]] = arith.index_cast %[[N]] : index to i64
// CHECK: %[[B:.*]] = arith.muli %{{.*}}, %[[NI]] : i64
// CHECK: %[[BYTES:.*]] = arith.muli %[[B]], %{{.*}} : i64
// CHECK: %[[A:.*]] = memref.extract_aligned_pointer_as_index %arg0
// CHECK: %[[AI:.*]] = arith.index_cast %[[A]] : index to i64
// CHECK: %[[P:.*]] = llvm.inttoptr %[[AI]] : i64 to !llvm.ptr
// CHECK: "llvm.intr.memset"(%[[P]], %{{.*}}, %[[BYTES]]) <{isVolatile = false}>
// CHECK: "llvm.intr.memset"
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%arg0 : memref<?x8xf32>)
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%arg0 : memref<?x8xf32>)
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : memref<4xf32, strided<[2]>>)
// CHECK-NOT: linalg.fill
func.func @f(%a: memref<?x8xf32>, %b: memref<3xi64>, %c: memref<8xf32>) {
  %zero = arith.constant 0.0 : f32
  %izero = arith.constant 0 : i64
  %one = arith.constant 1.0 : f32
  %minus = arith.constant -0.0 : f32
  linalg.fill ins(%zero : f32) outs(%a : memref<?x8xf32>)
  linalg.fill ins(%izero : i64) outs(%b : memref<3xi64>)
  linalg.fill ins(%one : f32) outs(%a : memref<?x8xf32>)
  linalg.fill ins(%minus : f32) outs(%a : memref<?x8xf32>)
  %s = memref.subview %c[0] [4] [2] : memref<8xf32> to memref<4xf32, strided<[2]>>
  linalg.fill ins(%zero : f32) outs(%s : memref<4xf32, strided<[2]>>)
  return
}
