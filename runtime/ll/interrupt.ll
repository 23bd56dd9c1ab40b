; Ctrl-C in compiled code (runtime/interrupt.py): the flag that compiled loops test, the SIGINT
; handler that sets it before it calls Python's own, and `dg_arm`, which puts the handler in
; front of Python's before a call.
;
; A template: runtime/natives.py (`native_ir`) replaces ${INTERRUPT} (the flag's name,
; core.abi.INTERRUPT), ${SIGINT} and ${SIGACTION_BYTES} (the size of the C library's struct
; sigaction on Linux: the handler, a 1024-bit mask, the flags padded, the restorer) with what
; runtime/interrupt.py gives them.

@${INTERRUPT} = global i64 0, align 8
@dg_python_handler = global ptr null, align 8
@dg_in_handler = global i64 0, align 8

declare i32 @sigaction(i32, ptr, ptr)

; The flag set, then Python's own handler called (once: a handler that raises SIGINT again
; inside it does not recurse).
define void @dg_on_sigint(i32 %sig, ptr %info, ptr %context) {
entry:
  store atomic i64 1, ptr @${INTERRUPT} seq_cst, align 8
  %was = atomicrmw xchg ptr @dg_in_handler, i64 1 seq_cst
  %nested = icmp ne i64 %was, 0
  br i1 %nested, label %done, label %go
go:
  %python = load atomic ptr, ptr @dg_python_handler seq_cst, align 8
  %word = ptrtoint ptr %python to i64
  %real = icmp ugt i64 %word, 1
  br i1 %real, label %chain, label %out
chain:
  call void %python(i32 %sig, ptr %info, ptr %context)
  br label %out
out:
  store atomic i64 0, ptr @dg_in_handler seq_cst, align 8
  br label %done
done:
  ret void
}

; The flag cleared; where SIGINT's handler is Python's, ours put in front of it (the same mask
; and flags). 1 where the handler is one this does not know (Python's, before it is learnt, or
; one installed behind Python's back), for Python to decide; else 0.
define i32 @dg_arm() {
entry:
  %now = alloca [${SIGACTION_BYTES} x i8], align 16
  store atomic i64 0, ptr @${INTERRUPT} seq_cst, align 8
  %r = call i32 @sigaction(i32 ${SIGINT}, ptr null, ptr %now)
  %ok = icmp eq i32 %r, 0
  br i1 %ok, label %check, label %keep
check:
  %current = load ptr, ptr %now, align 8
  %ours = icmp eq ptr %current, @dg_on_sigint
  %word = ptrtoint ptr %current to i64
  %none = icmp ule i64 %word, 1
  %skip = or i1 %ours, %none
  br i1 %skip, label %keep, label %known
known:
  %python = load atomic ptr, ptr @dg_python_handler seq_cst, align 8
  %is_python = icmp eq ptr %current, %python
  br i1 %is_python, label %install, label %unknown
install:
  store ptr @dg_on_sigint, ptr %now, align 8
  %r2 = call i32 @sigaction(i32 ${SIGINT}, ptr %now, ptr null)
  br label %keep
keep:
  ret i32 0
unknown:
  ret i32 1
}
