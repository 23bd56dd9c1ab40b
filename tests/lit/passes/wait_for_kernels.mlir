// RUN: %dg opt %s --passes wait-for-kernels | %filecheck %s

// Host code waits for the kernels before it reads a buffer they may have written and before a
// public function returns; reads of host globals (the state word) and of the stack do not wait.
// CHECK-LABEL: func.func @f
// CHECK: gpu.launch_func
// CHECK-NEXT: memref.get_global @dg_state
// CHECK-NEXT: memref.load %{{.*}}[%{{.*}}] : memref<38xi64>
// CHECK-NEXT: call @dg.cuda.wait()
// CHECK-NEXT: memref.load %{{.*}}[] : memref<f32>
// CHECK: call @dg.cuda.wait()
// CHECK-NEXT: return
// CHECK: func.func private @dg.cuda.wait()
// CHECK: scf.if
// CHECK: call @dg.cuda.sync(
module attributes {gpu.container_module} {
  memref.global @dg_state : memref<38xi64> = dense<0>
  func.func @f(%x: memref<f32>) -> f32 {
    %c1 = arith.constant 1 : index
    %c0 = arith.constant 0 : index
    gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%x : memref<f32>)
    %g = memref.get_global @dg_state : memref<38xi64>
    %w = memref.load %g[%c0] : memref<38xi64>
    %v = memref.load %x[] : memref<f32>
    return %v : f32
  }
  gpu.module @k {
    gpu.func @k(%x: memref<f32>) kernel {
      %c = arith.constant 1.0 : f32
      memref.store %c, %x[] : memref<f32>
      gpu.return
    }
  }
}
