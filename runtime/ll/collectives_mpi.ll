; The collectives compiled code calls (runtime/collectives.py), under MPI: MPI_Allreduce (in
; place where the source is 0), MPI_Bcast, MPI_Allgather, MPI_Reduce_scatter_block and
; MPI_Alltoall (in place) of the library mpi4py loaded, each on the communicator of a group (the
; last argument of every function: core.mpi.GROUPS's index), whose handle, this process's rank
; in it and its size are in the tables @comms, @ranks and @sizes, which runtime/collectives.py
; fills when the grid is split. An allreduce or a broadcast goes over the buffer in chunks of
; at most ${CHUNK} elements (MPI's counts are ints).
;
; A template: runtime/natives.py (`native_ir`) replaces ${MPI_RANK}, ${MPI_SIZE},
; ${MPI_ALLREDUCE}, ${MPI_BCAST}, ${MPI_ALLGATHER}, ${MPI_REDUCE_SCATTER} and ${MPI_ALL_TO_ALL}
; (core.abi's names), ${NGROUPS}, ${COMMS}, ${RANKS} and ${SIZES} (the groups' first tables),
; ${H} (the type of an MPI handle: i32 in MPICH, i64 (a pointer) in Open MPI), ${IN_PLACE}
; (MPI_IN_PLACE), ${NDTYPES}, ${ITEMS} and ${TYPES} (the item size and MPI type handle of each
; of core.mpi.DTYPES, the type codes' order), ${NOPS} and ${OPS} (the MPI op handle of each of
; core.mpi.OPS, the op codes' order) and ${CHUNK}.

@comms = global [${NGROUPS} x ${H}] [${COMMS}]
@ranks = global [${NGROUPS} x i64] [${RANKS}]
@sizes = global [${NGROUPS} x i64] [${SIZES}]

define i64 @"${MPI_RANK}"(i32 %g) {
  %p = getelementptr [${NGROUPS} x i64], ptr @ranks, i32 0, i32 %g
  %r = load i64, ptr %p
  ret i64 %r
}

define i64 @"${MPI_SIZE}"(i32 %g) {
  %p = getelementptr [${NGROUPS} x i64], ptr @sizes, i32 0, i32 %g
  %s = load i64, ptr %p
  ret i64 %s
}

@item = private constant [${NDTYPES} x i64] [${ITEMS}]
@types = private constant [${NDTYPES} x ${H}] [${TYPES}]
@ops = private constant [${NOPS} x ${H}] [${OPS}]

declare i32 @MPI_Allreduce(ptr, ptr, i32, ${H}, ${H}, ${H})
declare i32 @MPI_Bcast(ptr, i32, ${H}, i32, ${H})
declare i32 @MPI_Allgather(ptr, i32, ${H}, ptr, i32, ${H}, ${H})
declare i32 @MPI_Reduce_scatter_block(ptr, ptr, i32, ${H}, ${H}, ${H})
declare i32 @MPI_Alltoall(ptr, i32, ${H}, ptr, i32, ${H}, ${H})

define private ${H} @comm(i32 %g) {
  %p = getelementptr [${NGROUPS} x ${H}], ptr @comms, i32 0, i32 %g
  %c = load ${H}, ptr %p
  ret ${H} %c
}

define private ${H} @type(i32 %type) {
  %p = getelementptr [${NDTYPES} x ${H}], ptr @types, i32 0, i32 %type
  %t = load ${H}, ptr %p
  ret ${H} %t
}

; (source address, or 0 to reduce in place; address; count; type code; op code; group)
define void @"${MPI_ALLREDUCE}"(i64 %send, i64 %addr, i64 %count, i32 %type, i32 %op, i32 %g) {
entry:
  %t = call ${H} @type(i32 %type)
  %c = call ${H} @comm(i32 %g)
  %ip = getelementptr [${NDTYPES} x i64], ptr @item, i32 0, i32 %type
  %item = load i64, ptr %ip
  %opp = getelementptr [${NOPS} x ${H}], ptr @ops, i32 0, i32 %op
  %o = load ${H}, ptr %opp
  %in_place = inttoptr i64 ${IN_PLACE} to ptr
  %inplace = icmp eq i64 %send, 0
  br label %loop
loop:
  %done = phi i64 [0, %entry], [%next, %body]
  %left = sub i64 %count, %done
  %more = icmp sgt i64 %left, 0
  br i1 %more, label %body, label %exit
body:
  %big = icmp sgt i64 %left, ${CHUNK}
  %n = select i1 %big, i64 ${CHUNK}, i64 %left
  %off = mul i64 %done, %item
  %a = add i64 %addr, %off
  %p = inttoptr i64 %a to ptr
  %n32 = trunc i64 %n to i32
  %sa = add i64 %send, %off
  %sp = inttoptr i64 %sa to ptr
  %s = select i1 %inplace, ptr %in_place, ptr %sp
  %r = call i32 @MPI_Allreduce(ptr %s, ptr %p, i32 %n32, ${H} %t, ${H} %o, ${H} %c)
  %next = add i64 %done, %n
  br label %loop
exit:
  ret void
}

; (address, count, type code, root, group)
define void @"${MPI_BCAST}"(i64 %addr, i64 %count, i32 %type, i64 %root, i32 %g) {
entry:
  %t = call ${H} @type(i32 %type)
  %c = call ${H} @comm(i32 %g)
  %ip = getelementptr [${NDTYPES} x i64], ptr @item, i32 0, i32 %type
  %item = load i64, ptr %ip
  %root32 = trunc i64 %root to i32
  br label %loop
loop:
  %done = phi i64 [0, %entry], [%next, %body]
  %left = sub i64 %count, %done
  %more = icmp sgt i64 %left, 0
  br i1 %more, label %body, label %exit
body:
  %big = icmp sgt i64 %left, ${CHUNK}
  %n = select i1 %big, i64 ${CHUNK}, i64 %left
  %off = mul i64 %done, %item
  %a = add i64 %addr, %off
  %p = inttoptr i64 %a to ptr
  %n32 = trunc i64 %n to i32
  %r = call i32 @MPI_Bcast(ptr %p, i32 %n32, ${H} %t, i32 %root32, ${H} %c)
  %next = add i64 %done, %n
  br label %loop
exit:
  ret void
}

; The count of one of a group's blocks of a buffer of `count` elements (an int: the lowering
; checks that blocks fit).
define private i32 @block(i64 %count, i32 %g) {
  %p = getelementptr [${NGROUPS} x i64], ptr @sizes, i32 0, i32 %g
  %size = load i64, ptr %p
  %block = sdiv i64 %count, %size
  %b32 = trunc i64 %block to i32
  ret i32 %b32
}

; (address, count, type code, group): every rank's block of count / size elements into the
; buffer, in place (this rank's block is there already).
define void @"${MPI_ALLGATHER}"(i64 %addr, i64 %count, i32 %type, i32 %g) {
  %t = call ${H} @type(i32 %type)
  %c = call ${H} @comm(i32 %g)
  %b = call i32 @block(i64 %count, i32 %g)
  %in_place = inttoptr i64 ${IN_PLACE} to ptr
  %p = inttoptr i64 %addr to ptr
  %r = call i32 @MPI_Allgather(ptr %in_place, i32 0, ${H} %t, ptr %p, i32 %b, ${H} %t, ${H} %c)
  ret void
}

; (address, count, type code, op code, group): block k of the buffer reduced over the ranks,
; into rank k's first block, in place.
define void @"${MPI_REDUCE_SCATTER}"(i64 %addr, i64 %count, i32 %type, i32 %op, i32 %g) {
  %t = call ${H} @type(i32 %type)
  %c = call ${H} @comm(i32 %g)
  %b = call i32 @block(i64 %count, i32 %g)
  %opp = getelementptr [${NOPS} x ${H}], ptr @ops, i32 0, i32 %op
  %o = load ${H}, ptr %opp
  %in_place = inttoptr i64 ${IN_PLACE} to ptr
  %p = inttoptr i64 %addr to ptr
  %r = call i32 @MPI_Reduce_scatter_block(ptr %in_place, ptr %p, i32 %b, ${H} %t, ${H} %o, ${H} %c)
  ret void
}

; (address, count, type code, group): block k of the buffer to rank k, and rank k's block for
; this process into block k, in place.
define void @"${MPI_ALL_TO_ALL}"(i64 %addr, i64 %count, i32 %type, i32 %g) {
  %t = call ${H} @type(i32 %type)
  %c = call ${H} @comm(i32 %g)
  %b = call i32 @block(i64 %count, i32 %g)
  %in_place = inttoptr i64 ${IN_PLACE} to ptr
  %p = inttoptr i64 %addr to ptr
  %r = call i32 @MPI_Alltoall(ptr %in_place, i32 0, ${H} %t, ptr %p, i32 %b, ${H} %t, ${H} %c)
  ret void
}
