// RUN: %dg opt %s --passes cuda-runtime | %filecheck %s

// After the LLVM lowering, the driver's entry points and cuBLAS's gemm are called through the
// table, and malloc/free become the table's allocator (the device pool's managed memory).
// CHECK-NOT: llvm.func @malloc
// CHECK: llvm.call @dg.cuda.malloc(
// CHECK: llvm.call @dg.cuda.free(
// CHECK: llvm.func internal @dg.cuda.launch(
// CHECK: llvm.call %{{.*}}(%{{.*}}) : !llvm.ptr, (!llvm.ptr, i32, i32, i32, i32, i32, i32, i32, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
// CHECK: llvm.func internal @dg.cuda.malloc(
// CHECK: llvm.getelementptr %{{.*}}[0, 2]
// CHECK: llvm.func internal @dg.cublas.gemm_s(
// CHECK: llvm.getelementptr %{{.*}}[0, 8]
module {
  llvm.mlir.global external @dg_cuda(dense<0> : tensor<10xi64>) {addr_space = 0 : i32} : !llvm.array<10 x i64>
  llvm.func @malloc(i64) -> !llvm.ptr
  llvm.func @free(!llvm.ptr)
  llvm.func @dg.cuda.launch(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64) -> i64
  llvm.func @dg.cuda.sync(i64) -> i64
  llvm.func @dg.cublas.gemm_s(i32, i32, i32, i32, i32, i32, f32, !llvm.ptr, i32, !llvm.ptr, i32, f32, !llvm.ptr, i32)
  llvm.func @f(%n: i64) {
    %p = llvm.call @malloc(%n) : (i64) -> !llvm.ptr
    llvm.call @free(%p) : (!llvm.ptr) -> ()
    llvm.return
  }
}
