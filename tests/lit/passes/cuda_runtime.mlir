// RUN: %dg opt %s --passes cuda-runtime | %filecheck %s

// After the LLVM lowering, the driver's entry points and cuBLAS's gemm are called through the
// table, malloc/free become the table's allocator (the device pool's managed memory), and the
// address of a constant global is its device copy's, from the handles after the kernels'.
// CHECK-LABEL: llvm.func @f(
// CHECK-NOT: llvm.mlir.addressof @cst
// CHECK: llvm.call @dg.cuda.constant.1()
// CHECK-NOT: llvm.func @malloc
// CHECK: llvm.call @dg.cuda.malloc(
// CHECK: llvm.call @dg.cuda.free(
// CHECK: llvm.func internal @dg.cuda.constant.1()
// CHECK: llvm.mlir.addressof @dg_cuda_handles
// CHECK: llvm.getelementptr %{{.*}}[0, 1]
// CHECK: llvm.func internal @dg.cuda.launch(
// CHECK: llvm.call %{{.*}}(%{{.*}}) : !llvm.ptr, (!llvm.ptr, i32, i32, i32, i32, i32, i32, i32, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
// CHECK: llvm.func internal @dg.cuda.malloc(
// CHECK: llvm.getelementptr %{{.*}}[0, 2]
// CHECK: llvm.func internal @dg.cublas.gemm_s(
// CHECK: llvm.getelementptr %{{.*}}[0, 8]

module attributes {dg.cuda_globals = [["cst", 8]], dg.cuda_kernels = ["k"]} {
  llvm.mlir.global external constant @cst(dense<[1.0, 2.0]> : tensor<2xf32>) {addr_space = 0 : i32} : !llvm.array<2 x f32>
  llvm.mlir.global external @dg_cuda_handles(dense<0> : tensor<2xi64>) {addr_space = 0 : i32} : !llvm.array<2 x i64>
  llvm.mlir.global external @dg_cuda(dense<0> : tensor<10xi64>) {addr_space = 0 : i32} : !llvm.array<10 x i64>
  llvm.func @malloc(i64) -> !llvm.ptr
  llvm.func @free(!llvm.ptr)
  llvm.func @dg.cuda.launch(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64) -> i64
  llvm.func @dg.cuda.sync(i64) -> i64
  llvm.func @dg.cublas.gemm_s(i32, i32, i32, i32, i32, i32, f32, !llvm.ptr, i32, !llvm.ptr, i32, f32, !llvm.ptr, i32)
  llvm.func @f(%n: i64) -> f32 {
    %g = llvm.mlir.addressof @cst : !llvm.ptr
    %v = llvm.load %g : !llvm.ptr -> f32
    %p = llvm.call @malloc(%n) : (i64) -> !llvm.ptr
    llvm.call @free(%p) : (!llvm.ptr) -> ()
    llvm.return %v : f32
  }
}
