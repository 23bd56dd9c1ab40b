// RUN: %dg opt %s --passes bufferize | %filecheck %s

// Element-wise generics fuse, tensors become buffers (function boundaries included), and a
// returned buffer is the caller's: no copy, no dealloc of it. A buffer asks for no alignment
// beyond malloc's (buffer-alignment=0).
// CHECK-LABEL: func.func @f(%arg0: memref<4xf32>) -> memref<4xf32>
// CHECK: %[[OUT:.*]] = memref.alloc() : memref<4xf32>
// CHECK: linalg.generic
// CHECK: math.exp
// CHECK: arith.addf
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.dealloc %[[OUT]]
// CHECK: return %[[OUT]]
#map = affine_map<(d0) -> (d0)>
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %a = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.exp %in : f32
    linalg.yield %0 : f32
  } -> tensor<4xf32>
  %e2 = tensor.empty() : tensor<4xf32>
  %b = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%a, %x : tensor<4xf32>, tensor<4xf32>) outs(%e2 : tensor<4xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %0 = arith.addf %in, %in2 : f32
    linalg.yield %0 : f32
  } -> tensor<4xf32>
  return %b : tensor<4xf32>
}

// A buffer that no call is passed is none of the calls' results; nor is one passed to a function
// whose results are buffers of its own (@fresh): each is freed plainly, not compared at run time
// with the results the caller returns (deallocs.split_deallocs). One passed to a function that
// may return it (@external: no body) is freed only where it is not what the call returned. A
// private function gives its results with their ownership (private-function-dynamic-ownership):
// the caller copies one only where it does not own it.
// CHECK-LABEL: func.func @caller(%arg0: memref<4xf32>) -> (memref<4xf32>, memref<4xf32>, f32)
// CHECK: %[[KEPT:.*]] = memref.alloc() : memref<4xf32>
// CHECK: %[[P:.*]] = memref.alloc() : memref<4xf32>
// CHECK: %[[R:.*]]:2 = call @fresh(%[[P]]) : (memref<4xf32>) -> (memref<4xf32>, i1)
// CHECK: %[[Q:.*]] = memref.alloc() : memref<4xf32>
// CHECK: %[[S:.*]] = call @external(%[[Q]])
// CHECK: scf.if %[[R]]#1
// CHECK-DAG: memref.dealloc %[[KEPT]] : memref<4xf32>
// CHECK-DAG: memref.dealloc %[[P]] : memref<4xf32>
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[Q]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[S]]
// CHECK: call @dealloc_helper
// CHECK: scf.if
// CHECK: scf.if
// CHECK-NEXT: memref.dealloc %[[Q]]
// CHECK: return
func.func private @external(%a: tensor<4xf32>) -> tensor<4xf32>
func.func private @fresh(%a: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %b = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%a : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.exp %in : f32
    linalg.yield %0 : f32
  } -> tensor<4xf32>
  return %b : tensor<4xf32>
}
func.func @caller(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, f32) {
  %e = tensor.empty() : tensor<4xf32>
  %a = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.exp %in : f32
    linalg.yield %0 : f32
  } -> tensor<4xf32>
  %e2 = tensor.empty() : tensor<4xf32>
  %p = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<4xf32>) outs(%e2 : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.tanh %in : f32
    linalg.yield %0 : f32
  } -> tensor<4xf32>
  %r = func.call @fresh(%p) : (tensor<4xf32>) -> tensor<4xf32>
  %e3 = tensor.empty() : tensor<4xf32>
  %q = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<4xf32>) outs(%e3 : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.sin %in : f32
    linalg.yield %0 : f32
  } -> tensor<4xf32>
  %s = func.call @external(%q) : (tensor<4xf32>) -> tensor<4xf32>
  %c0 = arith.constant 0 : index
  %v = tensor.extract %a[%c0] : tensor<4xf32>
  return %r, %s, %v : tensor<4xf32>, tensor<4xf32>, f32
}

// A function that calls itself is called before One-Shot Bufferize has analyzed it, which then
// takes every buffer the call is passed for written, and copies it; dg knows @rec only reads
// its argument (call_copies.drop_call_copies), and the call is passed the buffer itself, which
// is read after it.
// CHECK-LABEL: func.func private @rec(%arg0: memref<?xf32>, %arg1: index) -> f32
// CHECK-NOT: memref.copy
// CHECK: call @rec(%arg0, %{{.*}}) : (memref<?xf32>, index) -> f32
// CHECK-NOT: memref.copy
// CHECK: return
func.func private @rec(%x: tensor<?xf32>, %k: index) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %done = arith.cmpi eq, %k, %c0 : index
  %r = scf.if %done -> f32 {
    %v = tensor.extract %x[%c0] : tensor<?xf32>
    scf.yield %v : f32
  } else {
    %k1 = arith.subi %k, %c1 : index
    %v = func.call @rec(%x, %k1) : (tensor<?xf32>, index) -> f32
    %w = tensor.extract %x[%c0] : tensor<?xf32>
    %s = arith.addf %v, %w : f32
    scf.yield %s : f32
  }
  return %r : f32
}
