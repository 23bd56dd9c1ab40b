; The thread pool that compiled code splits its large loops over (runtime/threads.py):
; `dg_pool_start(count)` starts its workers, `${PARALLEL_FOR}(fn, ctx, n, work)` runs
; `fn(ctx, lo, hi)` over [0, n) on the calling thread and the workers.
;
; A template: runtime/natives.py (`native_ir`) replaces ${PARALLEL_FOR} (core.abi.PARALLEL_FOR)
; and ${GRAIN} (core.abi.GRAIN: the work per thread below which a loop is not split).

@mutex = internal global [64 x i8] zeroinitializer, align 16
@wake = internal global [64 x i8] zeroinitializer, align 16
@done = internal global [64 x i8] zeroinitializer, align 16
@gen = internal global i64 0
@job_fn = internal global ptr null
@job_ctx = internal global ptr null
@job_n = internal global i64 0
@job_parts = internal global i64 0
@pending = internal global i64 0
@busy = internal global i32 0
@workers = internal global i64 0
@owner = internal global i32 0 ; the process the workers belong to (a fork's child has none)
@splits = global i64 0

declare i32 @pthread_mutex_init(ptr, ptr)
declare i32 @pthread_cond_init(ptr, ptr)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @pthread_cond_signal(ptr)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @getpid()

; iterations [n * k / parts, n * (k + 1) / parts) of a loop of n
define internal void @run_part(ptr %fn, ptr %ctx, i64 %n, i64 %k, i64 %parts) {
  %a = mul nuw i64 %n, %k
  %lo = udiv i64 %a, %parts
  %k1 = add nuw i64 %k, 1
  %b = mul nuw i64 %n, %k1
  %hi = udiv i64 %b, %parts
  call void %fn(ptr %ctx, i64 %lo, i64 %hi)
  ret void
}

; worker k (1 .. workers) runs part k of each loop that has more than k parts
define internal ptr @worker(ptr %arg) {
entry:
  %k = ptrtoint ptr %arg to i64
  %seen = alloca i64
  call i32 @pthread_mutex_lock(ptr @mutex)
  store i64 0, ptr %seen ; not the current loop's number: it may be one that waits for this worker
  br label %wait
wait:
  %g = load i64, ptr @gen
  %s = load i64, ptr %seen
  %same = icmp eq i64 %g, %s
  br i1 %same, label %sleep, label %job
sleep:
  call i32 @pthread_cond_wait(ptr @wake, ptr @mutex)
  br label %wait
job:
  store i64 %g, ptr %seen
  %parts = load i64, ptr @job_parts
  %mine = icmp ult i64 %k, %parts
  br i1 %mine, label %run, label %wait
run:
  %fn = load ptr, ptr @job_fn
  %ctx = load ptr, ptr @job_ctx
  %n = load i64, ptr @job_n
  call i32 @pthread_mutex_unlock(ptr @mutex)
  call void @run_part(ptr %fn, ptr %ctx, i64 %n, i64 %k, i64 %parts)
  call i32 @pthread_mutex_lock(ptr @mutex)
  %p = load i64, ptr @pending
  %p1 = sub i64 %p, 1
  store i64 %p1, ptr @pending
  %last = icmp eq i64 %p1, 0
  br i1 %last, label %signal, label %wait
signal:
  call i32 @pthread_cond_signal(ptr @done)
  br label %wait
}

; a fresh pool of `count` workers (the state of an earlier one, a forked parent's, is dropped)
define i64 @dg_pool_start(i64 %count) {
entry:
  %tid = alloca i64
  call i32 @pthread_mutex_init(ptr @mutex, ptr null)
  call i32 @pthread_cond_init(ptr @wake, ptr null)
  call i32 @pthread_cond_init(ptr @done, ptr null)
  store i64 0, ptr @gen
  store i64 0, ptr @pending
  store i32 0, ptr @busy
  store i64 0, ptr @workers
  %pid = call i32 @getpid()
  store i32 %pid, ptr @owner
  br label %head
head:
  %made = phi i64 [ 0, %entry ], [ %next, %made_one ]
  %more = icmp ult i64 %made, %count
  br i1 %more, label %make, label %out
make:
  %next = add i64 %made, 1
  %arg = inttoptr i64 %next to ptr
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @worker, ptr %arg)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %made_one, label %out
made_one:
  %t = load i64, ptr %tid
  call i32 @pthread_detach(i64 %t)
  store i64 %next, ptr @workers
  br label %head
out:
  %w = load i64, ptr @workers
  ret i64 %w
}

define void @"${PARALLEL_FOR}"(ptr %fn, ptr %ctx, i64 %n, i64 %work) {
entry:
  %w = load i64, ptr @workers
  %threads = add i64 %w, 1
  %by_work = udiv i64 %work, ${GRAIN}
  %p0 = call i64 @llvm.umin.i64(i64 %threads, i64 %by_work)
  %parts = call i64 @llvm.umin.i64(i64 %p0, i64 %n)
  %split = icmp ugt i64 %parts, 1
  br i1 %split, label %mine, label %alone
mine:
  %pid = call i32 @getpid()
  %owner = load i32, ptr @owner
  %here = icmp eq i32 %pid, %owner
  br i1 %here, label %claim, label %alone
claim:
  %old = cmpxchg ptr @busy, i32 0, i32 1 acquire monotonic
  %won = extractvalue { i32, i1 } %old, 1
  br i1 %won, label %share, label %alone
alone:
  call void %fn(ptr %ctx, i64 0, i64 %n)
  ret void
share:
  call i32 @pthread_mutex_lock(ptr @mutex)
  %count = load i64, ptr @splits
  %count1 = add i64 %count, 1
  store i64 %count1, ptr @splits
  store ptr %fn, ptr @job_fn
  store ptr %ctx, ptr @job_ctx
  store i64 %n, ptr @job_n
  store i64 %parts, ptr @job_parts
  %others = sub i64 %parts, 1
  store i64 %others, ptr @pending
  %g = load i64, ptr @gen
  %g1 = add i64 %g, 1
  store i64 %g1, ptr @gen
  call i32 @pthread_cond_broadcast(ptr @wake)
  call i32 @pthread_mutex_unlock(ptr @mutex)
  call void @run_part(ptr %fn, ptr %ctx, i64 %n, i64 0, i64 %parts)
  call i32 @pthread_mutex_lock(ptr @mutex)
  br label %check
check:
  %left = load i64, ptr @pending
  %finished = icmp eq i64 %left, 0
  br i1 %finished, label %out, label %sleep
sleep:
  call i32 @pthread_cond_wait(ptr @done, ptr @mutex)
  br label %check
out:
  call i32 @pthread_mutex_unlock(ptr @mutex)
  store atomic i32 0, ptr @busy release, align 4
  ret void
}

declare i64 @llvm.umin.i64(i64, i64)
