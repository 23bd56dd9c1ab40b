; The collectives compiled code calls (runtime/collectives.py), under MPI: MPI_Allreduce (in
; place where the source is 0), MPI_Bcast, MPI_Allgather, MPI_Reduce_scatter_block and
; MPI_Alltoall (in place) of the library mpi4py loaded, each on the communicator of a group (the
; last argument of every function: core.mpi.GROUPS's index), whose handle, this process's rank
; in it and its size are in the tables @comms, @ranks and @sizes, which runtime/collectives.py
; fills when the grid is split. An allreduce or a broadcast goes over the buffer in chunks of
; at most ${CHUNK} elements (MPI's counts are ints).
;
; A send copies the buffer of an unranked memref (whole, contiguous) and starts MPI_Isend (tag
; 0) on the copy, which it keeps until a later send or `${MPI_FLUSH}` finds it sent: a send never
; waits for its receiver (a pipeline's stages send to each other in turn). A recv is MPI_Recv.
;
; A template: runtime/natives.py (`native_ir`) replaces ${MPI_RANK}, ${MPI_SIZE},
; ${MPI_ALLREDUCE}, ${MPI_BCAST}, ${MPI_ALLGATHER}, ${MPI_REDUCE_SCATTER}, ${MPI_ALL_TO_ALL},
; ${MPI_SEND}, ${MPI_RECV}, ${MPI_FLUSH}, ${MPI_IALLREDUCE} and ${MPI_WAIT} (core.abi's names),
; ALIASES at the end (the point-to-point calls' names
; per element type), ${NGROUPS}, ${COMMS}, ${RANKS} and ${SIZES} (the groups' first tables),
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
declare i32 @MPI_Isend(ptr, i32, ${H}, i32, i32, ${H}, ptr)
declare i32 @MPI_Recv(ptr, i32, ${H}, i32, i32, ${H}, ptr)
declare i32 @MPI_Test(ptr, ptr, ptr)
declare i32 @MPI_Iallreduce(ptr, ptr, i32, ${H}, ${H}, ${H}, ptr)
declare i32 @MPI_Wait(ptr, ptr)
declare ptr @malloc(i64)
declare ptr @realloc(ptr, i64)
declare void @free(ptr)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

; The reductions started and not yet waited for: their requests and buffers' addresses,
; @nstarted of each (room for @sroom).
@sreqs = internal global ptr null
@saddrs = internal global ptr null
@nstarted = internal global i64 0
@sroom = internal global i64 0

; The sends in flight: their requests and copies, @npending of each (room for @room).
@requests = internal global ptr null
@copies = internal global ptr null
@npending = internal global i64 0
@room = internal global i64 0

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

; The data's address and element count of an unranked memref (rank, descriptor: allocated,
; aligned, offset, sizes, strides), of elements of type code `type`.
define private { ptr, i32 } @buffer(i32 %type, i64 %rank, ptr %desc) {
entry:
  %ip = getelementptr [${NDTYPES} x i64], ptr @item, i32 0, i32 %type
  %item = load i64, ptr %ip
  %ap = getelementptr i64, ptr %desc, i64 1
  %aligned = load i64, ptr %ap
  %op = getelementptr i64, ptr %desc, i64 2
  %offset = load i64, ptr %op
  br label %loop
loop:
  %k = phi i64 [0, %entry], [%k1, %body]
  %n = phi i64 [1, %entry], [%n1, %body]
  %more = icmp slt i64 %k, %rank
  br i1 %more, label %body, label %exit
body:
  %sk = add i64 %k, 3
  %sp = getelementptr i64, ptr %desc, i64 %sk
  %size = load i64, ptr %sp
  %n1 = mul i64 %n, %size
  %k1 = add i64 %k, 1
  br label %loop
exit:
  %bytes = mul i64 %offset, %item
  %at = add i64 %aligned, %bytes
  %p = inttoptr i64 %at to ptr
  %n32 = trunc i64 %n to i32
  %r0 = insertvalue { ptr, i32 } undef, ptr %p, 0
  %r1 = insertvalue { ptr, i32 } %r0, i32 %n32, 1
  ret { ptr, i32 } %r1
}

; The sends in flight that have gone (all of them, waiting, with `wait`) released.
define private void @settle(i1 %wait) {
entry:
  %status = alloca [16 x i64]
  %flag = alloca i32
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i, %gone], [%i1, %kept]
  %n = load i64, ptr @npending
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %exit
body:
  %reqs = load ptr, ptr @requests
  %rp = getelementptr ${H}, ptr %reqs, i64 %i
  br i1 %wait, label %waiting, label %testing
waiting:
  %w = call i32 @MPI_Wait(ptr %rp, ptr %status)
  br label %gone
testing:
  %t = call i32 @MPI_Test(ptr %rp, ptr %flag, ptr %status)
  %f = load i32, ptr %flag
  %done = icmp ne i32 %f, 0
  br i1 %done, label %gone, label %kept
gone:
  ; its copy freed, the last one moved into its place
  %copies = load ptr, ptr @copies
  %cp = getelementptr ptr, ptr %copies, i64 %i
  %c = load ptr, ptr %cp
  call void @free(ptr %c)
  %last = sub i64 %n, 1
  %lrp = getelementptr ${H}, ptr %reqs, i64 %last
  %lr = load ${H}, ptr %lrp
  store ${H} %lr, ptr %rp
  %lcp = getelementptr ptr, ptr %copies, i64 %last
  %lc = load ptr, ptr %lcp
  store ptr %lc, ptr %cp
  store i64 %last, ptr @npending
  br label %loop
kept:
  %i1 = add i64 %i, 1
  br label %loop
exit:
  ret void
}

; (peer, type code, group, the buffer as an unranked memref)
define void @"${MPI_SEND}"(i64 %peer, i32 %type, i32 %g, i64 %rank, ptr %desc) {
entry:
  call void @settle(i1 false)
  %n = load i64, ptr @npending
  %room = load i64, ptr @room
  %full = icmp eq i64 %n, %room
  br i1 %full, label %grow, label %go
grow:
  %r2 = mul i64 %room, 2
  %r3 = add i64 %r2, 8
  %reqs0 = load ptr, ptr @requests
  %rb = mul i64 %r3, 8
  %reqs1 = call ptr @realloc(ptr %reqs0, i64 %rb)
  store ptr %reqs1, ptr @requests
  %copies0 = load ptr, ptr @copies
  %copies1 = call ptr @realloc(ptr %copies0, i64 %rb)
  store ptr %copies1, ptr @copies
  store i64 %r3, ptr @room
  br label %go
go:
  %b = call { ptr, i32 } @buffer(i32 %type, i64 %rank, ptr %desc)
  %p = extractvalue { ptr, i32 } %b, 0
  %count = extractvalue { ptr, i32 } %b, 1
  %ip = getelementptr [${NDTYPES} x i64], ptr @item, i32 0, i32 %type
  %item = load i64, ptr %ip
  %c64 = sext i32 %count to i64
  %bytes = mul i64 %c64, %item
  %nonzero = add i64 %bytes, 1
  %copy = call ptr @malloc(i64 %nonzero)
  call void @llvm.memcpy.p0.p0.i64(ptr %copy, ptr %p, i64 %bytes, i1 false)
  %t = call ${H} @type(i32 %type)
  %c = call ${H} @comm(i32 %g)
  %peer32 = trunc i64 %peer to i32
  %reqs = load ptr, ptr @requests
  %rp = getelementptr ${H}, ptr %reqs, i64 %n
  %copies = load ptr, ptr @copies
  %cp = getelementptr ptr, ptr %copies, i64 %n
  store ptr %copy, ptr %cp
  %r = call i32 @MPI_Isend(ptr %copy, i32 %count, ${H} %t, i32 %peer32, i32 0, ${H} %c, ptr %rp)
  %n1 = add i64 %n, 1
  store i64 %n1, ptr @npending
  ret void
}

; Every send in flight waited for and released (before MPI is finalized).
define void @"${MPI_FLUSH}"() {
  call void @settle(i1 true)
  ret void
}

define void @"${MPI_RECV}"(i64 %peer, i32 %type, i32 %g, i64 %rank, ptr %desc) {
  %status = alloca [16 x i64]
  %b = call { ptr, i32 } @buffer(i32 %type, i64 %rank, ptr %desc)
  %p = extractvalue { ptr, i32 } %b, 0
  %n = extractvalue { ptr, i32 } %b, 1
  %t = call ${H} @type(i32 %type)
  %c = call ${H} @comm(i32 %g)
  %peer32 = trunc i64 %peer to i32
  %r = call i32 @MPI_Recv(ptr %p, i32 %n, ${H} %t, i32 %peer32, i32 0, ${H} %c, ptr %status)
  ret void
}

; (address, count, type code, op code, group): the buffer's reduction over the group started in
; place (MPI_Iallreduce); `${MPI_WAIT}` on the same address waits for it.
define void @"${MPI_IALLREDUCE}"(i64 %addr, i64 %count, i32 %type, i32 %op, i32 %g) {
entry:
  %n = load i64, ptr @nstarted
  %room = load i64, ptr @sroom
  %full = icmp eq i64 %n, %room
  br i1 %full, label %grow, label %go
grow:
  %r2 = mul i64 %room, 2
  %r3 = add i64 %r2, 8
  %rb = mul i64 %r3, 8
  %q0 = load ptr, ptr @sreqs
  %q1 = call ptr @realloc(ptr %q0, i64 %rb)
  store ptr %q1, ptr @sreqs
  %a0 = load ptr, ptr @saddrs
  %a1 = call ptr @realloc(ptr %a0, i64 %rb)
  store ptr %a1, ptr @saddrs
  store i64 %r3, ptr @sroom
  br label %go
go:
  %t = call ${H} @type(i32 %type)
  %c = call ${H} @comm(i32 %g)
  %opp = getelementptr [${NOPS} x ${H}], ptr @ops, i32 0, i32 %op
  %o = load ${H}, ptr %opp
  %in_place = inttoptr i64 ${IN_PLACE} to ptr
  %p = inttoptr i64 %addr to ptr
  %n32 = trunc i64 %count to i32
  %reqs = load ptr, ptr @sreqs
  %rp = getelementptr ${H}, ptr %reqs, i64 %n
  %addrs = load ptr, ptr @saddrs
  %ap = getelementptr i64, ptr %addrs, i64 %n
  store i64 %addr, ptr %ap
  %r = call i32 @MPI_Iallreduce(ptr %in_place, ptr %p, i32 %n32, ${H} %t, ${H} %o, ${H} %c, ptr %rp)
  %n1 = add i64 %n, 1
  store i64 %n1, ptr @nstarted
  ret void
}

; (address): the reduction started on that buffer waited for, and forgotten (none: nothing).
define void @"${MPI_WAIT}"(i64 %addr) {
entry:
  %status = alloca [16 x i64]
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %next]
  %n = load i64, ptr @nstarted
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %exit
body:
  %addrs = load ptr, ptr @saddrs
  %ap = getelementptr i64, ptr %addrs, i64 %i
  %a = load i64, ptr %ap
  %hit = icmp eq i64 %a, %addr
  br i1 %hit, label %found, label %next
next:
  %i1 = add i64 %i, 1
  br label %loop
found:
  %reqs = load ptr, ptr @sreqs
  %rp = getelementptr ${H}, ptr %reqs, i64 %i
  %w = call i32 @MPI_Wait(ptr %rp, ptr %status)
  %last = sub i64 %n, 1
  %lrp = getelementptr ${H}, ptr %reqs, i64 %last
  %lr = load ${H}, ptr %lrp
  store ${H} %lr, ptr %rp
  %lap = getelementptr i64, ptr %addrs, i64 %last
  %la = load i64, ptr %lap
  store i64 %la, ptr %ap
  store i64 %last, ptr @nstarted
  br label %exit
exit:
  ret void
}

${ALIASES}
