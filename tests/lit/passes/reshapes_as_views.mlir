// RUN: %dg opt %s --passes reshapes-as-views | %filecheck %s

// A reshape of a row-major buffer whose shape buffer is filled just before it is a
// reinterpret_cast to those sizes and their row-major strides (static where the result type's
// trailing sizes are); the shape buffer, its stores and its deallocation go. A shape buffer that
// no reshape reads any more goes too.
// CHECK-LABEL: func.func @f
// CHECK-NOT: memref.alloc() {{.*}}xindex>
// CHECK: %[[R:.*]] = arith.muli %arg3, %arg2 : index
// CHECK: memref.reinterpret_cast %arg0 to offset: [0], sizes: [%arg1, %arg2, %arg3], strides: [%[[R]], %arg3, 1]
// CHECK: memref.reinterpret_cast %arg0 to offset: [0], sizes: [%arg1, 4], strides: [4, 1]
// CHECK-NOT: memref.reshape
// CHECK-NOT: memref.dealloc
// CHECK: return
func.func @f(%a: memref<?xf32>, %n: index, %m: index, %k: index) -> (memref<?x?x?xf32>, memref<?x4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %s = memref.alloc() : memref<3xindex>
  memref.store %n, %s[%c0] : memref<3xindex>
  memref.store %m, %s[%c1] : memref<3xindex>
  memref.store %k, %s[%c2] : memref<3xindex>
  %r = memref.reshape %a(%s) : (memref<?xf32>, memref<3xindex>) -> memref<?x?x?xf32>
  %s2 = memref.alloc() : memref<2xindex>
  memref.store %n, %s2[%c0] : memref<2xindex>
  memref.store %c4, %s2[%c1] : memref<2xindex>
  %r2 = memref.reshape %a(%s2) : (memref<?xf32>, memref<2xindex>) -> memref<?x4xf32>
  %unread = memref.alloc() : memref<1xindex>
  memref.store %n, %unread[%c0] : memref<1xindex>
  memref.dealloc %s : memref<3xindex>
  memref.dealloc %s2 : memref<2xindex>
  memref.dealloc %unread : memref<1xindex>
  return %r, %r2 : memref<?x?x?xf32>, memref<?x4xf32>
}
