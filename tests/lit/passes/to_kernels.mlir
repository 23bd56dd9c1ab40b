// RUN: %dg opt %s --passes to-kernels | %filecheck %s

// Parallel loops (flattened: rows, 32 columns) are tiled into blocks of 32 x 8 threads, the
// columns on x, and outlined as kernels that the host launches; the rest stays on the host.
// CHECK-LABEL: func.func @ew
// CHECK: gpu.launch_func @ew_kernel::@ew_kernel blocks in (%c1, %c8, %c1) threads in (%c32, %c8, %c1)
// CHECK: gpu.module @ew_kernel
// CHECK: gpu.func @ew_kernel(
// CHECK-SAME: kernel
// CHECK: math.exp
func.func @ew(%x: memref<2000xf32>, %y: memref<2000xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c63 = arith.constant 63 : index
  %c2000 = arith.constant 2000 : index
  scf.parallel (%r, %c) = (%c0, %c0) to (%c63, %c32) step (%c1, %c1) {
    %row = arith.muli %r, %c32 : index
    %at = arith.addi %row, %c : index
    %in = arith.cmpi slt, %at, %c2000 : index
    scf.if %in {
      %v = memref.load %x[%at] : memref<2000xf32>
      %e = math.exp %v : f32
      memref.store %e, %y[%at] : memref<2000xf32>
    }
    scf.reduce
  }
  return
}
