// RUN: %dg opt %s --passes mpi-collectives | %filecheck %s

// A collective's marked copy (what dialects/ops_dist.py lowers the collectives to) becomes a call
// into the fresh buffer: its address, its element count, the codes of its element type, of the
// reduction (or the root) where it has one, and of its group (core.mpi.GROUPS), made only while no check has failed and no Ctrl-C came (the
// state word and the interrupt flag). An allreduce of a contiguous source reads it directly (its
// address first) and the copy goes; a broadcast keeps the copy and sends from it. The marker is
// dropped; an unmarked copy is left alone.
// CHECK-LABEL: func.func @f
// CHECK: %[[DIM:.*]] = memref.dim %arg1, %c0
// CHECK: %[[COUNT:.*]] = arith.muli
// CHECK: memref.extract_aligned_pointer_as_index %arg0
// CHECK: memref.extract_aligned_pointer_as_index %arg1
// CHECK: memref.get_global @dg_state
// CHECK: memref.get_global @dg_interrupt
// CHECK: %[[GO:.*]] = arith.cmpi eq
// CHECK-NOT: linalg.copy
// CHECK-NEXT: scf.if %[[GO]] {
// CHECK-NEXT: func.call @dg.mpi_allreduce(%{{.*}}, %{{.*}}, %{{.*}}, %c0_i32, %c1_i32, %c0_i32{{.*}}) : (i64, i64, i64, i32, i32, i32) -> ()
// CHECK: linalg.copy ins(%arg2 : memref<4xf64>) outs(%arg3 : memref<4xf64>)
// CHECK-NEXT: scf.if
// CHECK-NEXT: func.call @dg.mpi_bcast(%{{.*}}, %{{.*}}, %c1_i32{{.*}}, %c2_i64, %c2_i32) : (i64, i64, i32, i64, i32) -> ()
// CHECK: linalg.copy ins(%arg0 : memref<?x3xf32>) outs(%arg1 : memref<?x3xf32>)
// CHECK-NEXT: scf.if
// CHECK-NEXT: func.call @dg.mpi_allgather(%{{.*}}, %{{.*}}, %c0_i32{{.*}}, %c1_i32{{.*}}) : (i64, i64, i32, i32) -> ()
// CHECK: linalg.copy ins(%arg2 : memref<4xf64>) outs(%arg3 : memref<4xf64>)
// CHECK-NEXT: scf.if
// CHECK-NEXT: func.call @dg.mpi_reduce_scatter(%{{.*}}, %{{.*}}, %c1_i32{{.*}}, %c2_i32{{.*}}, %c3_i32) : (i64, i64, i32, i32, i32) -> ()
// CHECK: linalg.copy ins(%arg0 : memref<?x3xf32>) outs(%arg1 : memref<?x3xf32>)
// CHECK-NEXT: return
// CHECK: func.func private @dg.mpi_allreduce(i64, i64, i64, i32, i32, i32)
// CHECK: func.func private @dg.mpi_bcast(i64, i64, i32, i64, i32)
// CHECK: func.func private @dg.mpi_allgather(i64, i64, i32, i32)
// CHECK: func.func private @dg.mpi_reduce_scatter(i64, i64, i32, i32, i32)
func.func @f(%x: memref<?x3xf32>, %y: memref<?x3xf32>, %a: memref<4xf64>, %b: memref<4xf64>) {
  linalg.copy {dg.collective = "allreduce:1:0:0"} ins(%x : memref<?x3xf32>) outs(%y : memref<?x3xf32>)
  linalg.copy {dg.collective = "bcast:2:1:2"} ins(%a : memref<4xf64>) outs(%b : memref<4xf64>)
  linalg.copy {dg.collective = "allgather:0:0:1"} ins(%x : memref<?x3xf32>) outs(%y : memref<?x3xf32>)
  linalg.copy {dg.collective = "reduce_scatter:2:1:3"} ins(%a : memref<4xf64>) outs(%b : memref<4xf64>)
  linalg.copy ins(%x : memref<?x3xf32>) outs(%y : memref<?x3xf32>)
  return
}
