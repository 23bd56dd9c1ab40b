// RUN: %dg opt %s --passes to-parallel-loops | %filecheck %s

// On the GPU's way, linalg ops become loops: their parallel dimensions one scf.parallel.
// CHECK-LABEL: func.func @ew
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) = (%c0, %c0) to (%c40, %c50) step (%c1, %c1)
// CHECK: math.exp
// CHECK-NOT: linalg.generic
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
