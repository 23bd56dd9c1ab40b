; The collectives compiled code calls (runtime/collectives.py), in a world of one process: rank 0
; of 1; an allreduce that reads a source buffer copies it, one in place and a broadcast leave
; the buffer as it is.
;
; A template: runtime/natives.py (`native_ir`) replaces ${MPI_RANK}, ${MPI_SIZE},
; ${MPI_ALLREDUCE}, ${MPI_BCAST}, ${MPI_ALLGATHER}, ${MPI_REDUCE_SCATTER} and ${MPI_ALL_TO_ALL}
; (core.abi's names), ${RANK} and ${SIZE} (the world's),
; ${NDTYPES} and ${ITEMS} (the item size of each of core.mpi.DTYPES, the type codes' order).

define i64 @"${MPI_RANK}"() {
  ret i64 ${RANK}
}

define i64 @"${MPI_SIZE}"() {
  ret i64 ${SIZE}
}

@item = private constant [${NDTYPES} x i64] [${ITEMS}]

declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

; (source address, or 0 to reduce in place; address; count; type code; op code)
define void @"${MPI_ALLREDUCE}"(i64 %s, i64 %a, i64 %n, i32 %t, i32 %o) {
  %inplace = icmp eq i64 %s, 0
  br i1 %inplace, label %done, label %copy
copy:
  %ip = getelementptr [${NDTYPES} x i64], ptr @item, i32 0, i32 %t
  %item = load i64, ptr %ip
  %bytes = mul i64 %n, %item
  %sp = inttoptr i64 %s to ptr
  %dp = inttoptr i64 %a to ptr
  call void @llvm.memcpy.p0.p0.i64(ptr %dp, ptr %sp, i64 %bytes, i1 false)
  br label %done
done:
  ret void
}

; (address, count, type code, root)
define void @"${MPI_BCAST}"(i64 %a, i64 %n, i32 %t, i64 %r) {
  ret void
}

; (address, count, type code): a world of one's block is the whole buffer, in place already
define void @"${MPI_ALLGATHER}"(i64 %a, i64 %n, i32 %t) {
  ret void
}

; (address, count, type code, op code): the reduction over one process is the buffer itself
define void @"${MPI_REDUCE_SCATTER}"(i64 %a, i64 %n, i32 %t, i32 %o) {
  ret void
}

; (address, count, type code): one process exchanges its one block with itself
define void @"${MPI_ALL_TO_ALL}"(i64 %a, i64 %n, i32 %t) {
  ret void
}
