// RUN: %dg opt %s --passes host-data-layout | %filecheck %s

// The module is lowered with the host's data layout (MLIR folds constant addresses with it; with
// LLVM's default one an i64 is 4-aligned).
// CHECK: module attributes {llvm.data_layout = "e-{{.*}}i64:64{{.*}}"}
func.func @f() {
  return
}
