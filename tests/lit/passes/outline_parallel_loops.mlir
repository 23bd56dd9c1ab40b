// RUN: %dg opt %s --passes outline-parallel-loops | %filecheck %s

// A large loop of independent iterations moves into a function of its own, which runs the
// iterations [lo, hi) of its first axis; in its place, a call of its launch on the values it
// uses (a memref as its descriptor). The launch packs them into the module's context global and
// calls the thread pool's entry with the loop's trip count and an estimate of its work. The
// output is fresh memory that nothing else views: the loop function gets its pointer again,
// and says so (dg.noalias), for LLVM.
// CHECK-LABEL: func.func @f
// CHECK: %[[D:.*]] = builtin.unrealized_conversion_cast %alloc : memref<?xf32> to !llvm.struct
// CHECK: call @__dg_par_0_launch(%{{.*}}, %[[D]],
// CHECK-NOT: scf.parallel
// CHECK: return
func.func @f(%b: memref<?xf32>) -> memref<?xf32> {
  %c0 = arith.constant 0 : index
  %n = memref.dim %b, %c0 : memref<?xf32>
  %a = memref.alloc(%n) : memref<?xf32>
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                  iterator_types = ["parallel"]} ins(%b : memref<?xf32>) outs(%a : memref<?xf32>) {
  ^bb0(%x: f32, %y: f32):
    %e = math.exp %x : f32
    linalg.yield %e : f32
  }
  return %a : memref<?xf32>
}

// A loop whose sizes are known and too small to share stays where it is.
// CHECK-LABEL: func.func @small
// CHECK-NOT: dg.parallel_for
// CHECK: scf.parallel
// CHECK-LABEL: func.func private @__dg_par_0_loop(%arg0: index, %arg1: index,
// CHECK-SAME: %[[P:arg[0-9]+]]: !llvm.ptr) attributes {dg.noalias = array<i64: {{[0-9]+}}>}
// CHECK: %[[E:.*]] = llvm.insertvalue %[[P]]
// CHECK: %[[OUT:.*]] = builtin.unrealized_conversion_cast %[[E]]
// CHECK: scf.parallel
// CHECK: math.exp
// CHECK: memref.store %{{.*}}, %[[OUT]]
// CHECK: llvm.mlir.global internal @dg.par_context()
// CHECK-LABEL: func.func private @__dg_par_0(%arg0: !llvm.ptr, %arg1: i64, %arg2: i64)
// CHECK: call @__dg_par_0_loop(
// CHECK-LABEL: func.func private @__dg_par_0_launch(
// CHECK: %[[CTX:.*]] = llvm.mlir.addressof @dg.par_context
// CHECK: llvm.store
// CHECK: %[[FN:.*]] = constant @__dg_par_0
// CHECK: llvm.call @dg.parallel_for(%{{.*}}, %[[CTX]], %{{.*}}, %{{.*}})
func.func @small(%b: memref<8xf32>, %a: memref<8xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                  iterator_types = ["parallel"]} ins(%b : memref<8xf32>) outs(%a : memref<8xf32>) {
  ^bb0(%x: f32, %y: f32):
    %e = math.exp %x : f32
    linalg.yield %e : f32
  }
  return
}
