// RUN: %dg opt %s --passes function-attributes | %filecheck %s

// Every function with a body prefers 512-bit vectors (a CPU without them ignores it) and makes no
// call a jump, beside its own attributes.
// CHECK: llvm.func @f() attributes {passthrough = {{\[\[}}"prefer-vector-width", "512"], ["disable-tail-calls", "true"], "noinline"]}
// CHECK: llvm.func @g()
// CHECK-NOT: passthrough
llvm.func @f() attributes {passthrough = ["noinline"]} {
  llvm.return
}
llvm.func @g()
