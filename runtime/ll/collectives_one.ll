; The collectives compiled code calls (runtime/collectives.py), in a world of one process: rank 0
; of 1 in every group (the last argument of every function); an allreduce that reads a source
; buffer copies it; every other collective leaves its buffer as it is (its one block is the
; whole buffer, in place already).
;
; send and recv have no peer in a world of one (compiled code checks the peer before calling).
;
; A template: runtime/natives.py (`native_ir`) replaces ${MPI_RANK}, ${MPI_SIZE},
; ${MPI_ALLREDUCE}, ${MPI_BCAST}, ${MPI_ALLGATHER}, ${MPI_REDUCE_SCATTER}, ${MPI_ALL_TO_ALL},
; ${MPI_SEND}, ${MPI_RECV}, ${MPI_FLUSH}, ${MPI_IALLREDUCE} and ${MPI_WAIT} (core.abi's names),
; ALIASES at the end (the point-to-point calls' names
; per element type), ${NDTYPES} and ${ITEMS} (the item size of each of core.mpi.DTYPES, the
; type codes' order).

define i64 @"${MPI_RANK}"(i32 %g) {
  ret i64 0
}

define i64 @"${MPI_SIZE}"(i32 %g) {
  ret i64 1
}

@item = private constant [${NDTYPES} x i64] [${ITEMS}]

declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

; (source address, or 0 to reduce in place; address; count; type code; op code; group)
define void @"${MPI_ALLREDUCE}"(i64 %s, i64 %a, i64 %n, i32 %t, i32 %o, i32 %g) {
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

; (address, count, type code, root, group)
define void @"${MPI_BCAST}"(i64 %a, i64 %n, i32 %t, i64 %r, i32 %g) {
  ret void
}

; (address, count, type code, group)
define void @"${MPI_ALLGATHER}"(i64 %a, i64 %n, i32 %t, i32 %g) {
  ret void
}

; (address, count, type code, op code, group)
define void @"${MPI_REDUCE_SCATTER}"(i64 %a, i64 %n, i32 %t, i32 %o, i32 %g) {
  ret void
}

; (address, count, type code, group)
define void @"${MPI_ALL_TO_ALL}"(i64 %a, i64 %n, i32 %t, i32 %g) {
  ret void
}

; (peer, type code, group, the buffer as an unranked memref)
define void @"${MPI_SEND}"(i64 %peer, i32 %type, i32 %g, i64 %rank, ptr %desc) {
  ret void
}

define void @"${MPI_RECV}"(i64 %peer, i32 %type, i32 %g, i64 %rank, ptr %desc) {
  ret void
}

define void @"${MPI_FLUSH}"() {
  ret void
}

; (address, count, type code, op code, group): one process's reduction is its buffer
define void @"${MPI_IALLREDUCE}"(i64 %a, i64 %n, i32 %t, i32 %o, i32 %g) {
  ret void
}

define void @"${MPI_WAIT}"(i64 %a) {
  ret void
}

${ALIASES}
