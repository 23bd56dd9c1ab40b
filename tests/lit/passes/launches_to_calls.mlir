// RUN: %dg opt %s --passes launches-to-calls | %filecheck %s

// A launch is a call of cuLaunchKernel through the table: the parameter slots and their
// pointers are made once at the function's entry, each launch fills the slots as NVVM declares
// the kernel's parameters (a memref as two pointers, offset, sizes, strides; a float as its
// bits), skips an empty grid, and marks kernels as running. The constant globals are listed
// (cuda-runtime makes their addresses the device copies'); the gpu.module goes.
// CHECK: module attributes {dg.cuda_globals = {{\[\[}}"cst", 8]], dg.cuda_kernels = ["k"]}
// CHECK: memref.global constant @cst
// CHECK-LABEL: func.func @f
// CHECK: %[[SLOTS:.*]] = memref.alloca() : memref<11xi64>
// CHECK: %[[PTRS:.*]] = memref.alloca() : memref<11xi64>
// CHECK: scf.if
// CHECK: memref.get_global @dg_cuda_handles : memref<2xi64>
// CHECK: memref.extract_strided_metadata %arg0
// CHECK: arith.bitcast %{{.*}} : f32 to i32
// CHECK: call @dg.cuda.launch(
// CHECK: call @dg.cuda.note(
// CHECK-NOT: gpu.
module attributes {gpu.container_module} {
  memref.global "private" constant @cst : memref<2xf32> = dense<[1.0, 2.0]>
  func.func @f(%x: memref<2xf32>, %n: index) {
    %c1 = arith.constant 1 : index
    %s = arith.constant 0.5 : f32
    %g = memref.get_global @cst : memref<2xf32>
    gpu.launch_func @k::@k blocks in (%n, %c1, %c1) threads in (%c1, %c1, %c1) args(%x : memref<2xf32>, %g : memref<2xf32>, %s : f32)
    return
  }
  gpu.module @k {
    gpu.func @k(%x: memref<2xf32>, %c: memref<2xf32>, %s: f32) kernel {
      gpu.return
    }
  }
}
