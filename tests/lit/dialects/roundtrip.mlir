// RUN: %dg opt %s | %dg opt - | %filecheck %s
// The dg dialect verifies and round-trips through its textual form.

// CHECK-LABEL: func.func @g
// CHECK: "dg.getitem"(%arg0, %{{.*}}) {spec = ["i:$", "s:1::2", "n", "e"]}
// CHECK: "dg.reshape"(%{{.*}}) {shape = array<i64: -1, 2>}
// CHECK: "dg.sum"(%{{.*}}) {axes = array<i64: 0>, keepdims = true}
func.func @g(%x: tensor<4x6x2xf32>, %i: tensor<i64>) -> tensor<1x?xf32> {
  %0 = "dg.getitem"(%x, %i) {spec = ["i:$", "s:1::2", "n", "e"]} : (tensor<4x6x2xf32>, tensor<i64>) -> tensor<3x1x2xf32>
  %1 = "dg.reshape"(%0) {shape = array<i64: -1, 2>} : (tensor<3x1x2xf32>) -> tensor<3x2xf32>
  %2 = "dg.sum"(%1) {axes = array<i64: 0>, keepdims = true} : (tensor<3x2xf32>) -> tensor<1x2xf32>
  %3 = tensor.cast %2 : tensor<1x2xf32> to tensor<1x?xf32>
  return %3 : tensor<1x?xf32>
}
