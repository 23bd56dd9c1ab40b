// RUN: %dg opt %s --passes to-llvm | %filecheck %s

// Down to the LLVM dialect with MLIR's own conversions: linalg to loops, bf16 math in f32 (the conversions
// integer operations: LLVM would call runtime functions the JIT does not have),
// memrefs to descriptors, a C entry point (`_mlir_ciface_`) for a function that asks for one.
// CHECK: llvm.func @malloc(i64) -> !llvm.ptr
// CHECK-LABEL: llvm.func @f(
// CHECK: llvm.call @malloc
// CHECK: llvm.cond_br
// CHECK: llvm.intr.exp
// CHECK: llvm.func @_mlir_ciface_f(
// CHECK-LABEL: llvm.func @h(
// CHECK: llvm.bitcast %arg0 : bf16 to i16
// CHECK: llvm.intr.exp({{.*}}) : (f32) -> f32
// CHECK: llvm.bitcast {{.*}} : i16 to bf16
func.func @f(%x: memref<4xf32>) -> memref<4xf32> attributes {llvm.emit_c_interface} {
  %a = memref.alloc() : memref<4xf32>
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                  iterator_types = ["parallel"]} ins(%x : memref<4xf32>) outs(%a : memref<4xf32>) {
  ^bb0(%v: f32, %o: f32):
    %e = math.exp %v : f32
    linalg.yield %e : f32
  }
  return %a : memref<4xf32>
}
func.func @h(%x: bf16) -> bf16 {
  %e = math.exp %x : bf16
  return %e : bf16
}
