// RUN: %dg opt %s --passes to-kernels | %filecheck %s

// Parallel loops are tiled into 16 x 16 blocks of threads, the innermost (contiguous) axis on x,
// and outlined as kernels that the host launches; the rest stays on the host.
// CHECK-LABEL: func.func @ew
// CHECK: gpu.launch_func @ew_kernel::@ew_kernel blocks in (%c4, %c3, %c1) threads in (%c16, %c16, %c1)
// CHECK: gpu.module @ew_kernel
// CHECK: gpu.func @ew_kernel(
// CHECK-SAME: kernel
// CHECK: math.exp
func.func @ew(%x: memref<40x50xf32>) -> memref<40x50xf32> {
  %y = memref.alloc() : memref<40x50xf32>
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                  iterator_types = ["parallel", "parallel"]} ins(%x : memref<40x50xf32>) outs(%y : memref<40x50xf32>) {
  ^bb0(%v: f32, %o: f32):
    %e = math.exp %v : f32
    linalg.yield %e : f32
  }
  return %y : memref<40x50xf32>
}
