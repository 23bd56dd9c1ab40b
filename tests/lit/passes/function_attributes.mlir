// RUN: %dg opt %s --passes function-attributes | %filecheck %s

// Every function with a body prefers 512-bit vectors (a CPU without them ignores it), beside its
// own attributes.
// CHECK: llvm.func @f() attributes {passthrough = {{\[\[}}"prefer-vector-width", "512"], "noinline"]}
// CHECK: llvm.func @g()
// CHECK-NOT: passthrough
llvm.func @f() attributes {passthrough = ["noinline"]} {
  llvm.return
}
llvm.func @g()
