; The quick call (runtime/fastcall.py): `dg_quick_call`, a METH_FASTCALL function of CPython
; whose `self` is the address of a table of i64 words, and `dg_quick_claim`, the general path's
; claim of a program's busy word.
;
; A template: runtime/natives.py (`native_ir`) replaces each placeholder (a dollar sign and a
; name in braces) with the value that runtime/fastcall.py gives it (`_constants`) before
; llvmlite parses it.
;   ${H_*}             the indices of the table's header words (fastcall.HEADER)
;   ${LEAF_WORDS}      a leaf's record: [0] its argument's index, [1] its descriptor's address,
;                      [2] its dtype (a PyArray_Descr), [3] its rank, [4] its shape's address
;                      (a scalar: 0, or the 4 bytes a Python float is rounded into for an f32
;                      parameter), [5] how many steps, [6] their address, [7] the type of a
;                      scalar leaf (0: an array)
;   ${STEP_WORDS}      a step from an argument to its leaf: [0] kind (${TUPLE}, ${LIST}, else a
;                      dict), [1] the container's length, [2] index, [3] key (a str)
;   ${RESULT_WORDS}    a result's record: [0] its word offset in the results struct, [1] rank,
;                      [2] dtype, [3] item size
;   ${RAN_ADDRESSES_AT}, ${STATE_BYTES}: the call's own words that it returns as `bytes` for
;                      the general path (fastcall.RAN): the entry's return code, the state
;                      words (core.abi.STATE_WORDS), then the arguments' addresses
;   ${OB_TYPE}         where a Python object holds its type
;   ${ARRAY_*}         where a NumPy array object (PyArrayObject_fields) holds its data, number
;                      of dimensions, dimensions, descr and flags, unchanged since NumPy 1.7
;                      (tests/runtime/test_natives.py checks them against NumPy)
;   ${SCALAR_VALUE}    where a NumPy scalar (PyScalarObject) and a Python float hold the value
;   ${CONTIGUOUS_ALIGNED}, ${OWN_BUFFER_FLAGS}: NumPy's array flags (NPY_ARRAY_*)

declare ptr @PyLong_AsVoidPtr(ptr)
declare i64 @PyObject_Size(ptr)
declare ptr @PyTuple_GetItem(ptr, i64)
declare ptr @PyList_GetItem(ptr, i64)
declare ptr @PyDict_GetItem(ptr, ptr)
declare ptr @PyTuple_New(i64)
declare i32 @PyTuple_SetItem(ptr, i64, ptr)
declare void @Py_IncRef(ptr)
declare void @Py_DecRef(ptr)
declare ptr @PyCapsule_New(ptr, ptr, ptr)
declare ptr @PyCapsule_GetPointer(ptr, ptr)
declare ptr @PyEval_SaveThread()
declare void @PyEval_RestoreThread(ptr)
declare i64 @PyThread_get_thread_ident()
declare ptr @PyBytes_FromStringAndSize(ptr, i64)
declare void @free(ptr)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

define internal i64 @word(ptr %t, i64 %k) {
  %p = getelementptr i64, ptr %t, i64 %k
  %v = load i64, ptr %p
  ret i64 %v
}

define internal ptr @pointer(ptr %t, i64 %k) {
  %p = getelementptr i64, ptr %t, i64 %k
  %v = load ptr, ptr %p
  ret ptr %v
}

; %fn (Py_IncRef or Py_DecRef) on each of the %n objects at %objs.
define internal void @each(ptr %objs, i64 %n, ptr %fn) {
entry:
  br label %loop
loop:
  %k = phi i64 [0, %entry], [%k1, %body]
  %done = icmp eq i64 %k, %n
  br i1 %done, label %out, label %body
body:
  %p = getelementptr ptr, ptr %objs, i64 %k
  %o = load ptr, ptr %p
  call void %fn(ptr %o)
  %k1 = add i64 %k, 1
  br label %loop
out:
  ret void
}

; A result's buffer, freed by its array's base when that array goes.
define void @dg_quick_free_capsule(ptr %cap) {
  %p = call ptr @PyCapsule_GetPointer(ptr %cap, ptr null)
  call void @free(ptr %p)
  ret void
}

; The object a leaf's steps reach from the arguments (a borrowed reference), or null where a
; container is not of the type and length it had.
define internal ptr @leaf_object(ptr %t, ptr %args, ptr %leaf) {
entry:
  %ai = call i64 @word(ptr %leaf, i64 0)
  %ap = getelementptr ptr, ptr %args, i64 %ai
  %a0 = load ptr, ptr %ap
  %ns = call i64 @word(ptr %leaf, i64 5)
  %steps = call ptr @pointer(ptr %leaf, i64 6)
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %next]
  %obj = phi ptr [%a0, %entry], [%item, %next]
  %done = icmp eq i64 %i, %ns
  br i1 %done, label %out, label %step
step:
  %s = getelementptr [${STEP_WORDS} x i64], ptr %steps, i64 %i
  %kind = call i64 @word(ptr %s, i64 0)
  %len = call i64 @word(ptr %s, i64 1)
  %idx = call i64 @word(ptr %s, i64 2)
  %key = call ptr @pointer(ptr %s, i64 3)
  ; (the header holds the tuple, list and dict types at ${H_TUPLE_TYPE}, ${H_LIST_TYPE} and
  ; ${H_DICT_TYPE}: a step's kind past the first)
  %ti = add i64 %kind, ${H_TUPLE_TYPE}
  %want = call ptr @pointer(ptr %t, i64 %ti)
  %typ = getelementptr i8, ptr %obj, i64 ${OB_TYPE}
  %ty = load ptr, ptr %typ
  %same = icmp eq ptr %ty, %want
  br i1 %same, label %sized, label %fail
sized:
  %n = call i64 @PyObject_Size(ptr %obj)
  %nok = icmp eq i64 %n, %len
  br i1 %nok, label %get, label %fail
get:
  switch i64 %kind, label %getdict [ i64 ${TUPLE}, label %gettuple
                                     i64 ${LIST}, label %getlist ]
gettuple:
  %it0 = call ptr @PyTuple_GetItem(ptr %obj, i64 %idx)
  br label %got
getlist:
  %it1 = call ptr @PyList_GetItem(ptr %obj, i64 %idx)
  br label %got
getdict:
  %it2 = call ptr @PyDict_GetItem(ptr %obj, ptr %key)
  br label %got
got:
  %item = phi ptr [%it0, %gettuple], [%it1, %getlist], [%it2, %getdict]
  %null = icmp eq ptr %item, null
  br i1 %null, label %fail, label %next
next:
  %i1 = add i64 %i, 1
  br label %loop
out:
  ret ptr %obj
fail:
  ret ptr null
}

; The address of the leaf's data: of a NumPy array of the leaf's dtype and shape, C-contiguous
; and aligned, or of the value of a NumPy scalar of the leaf's type; null for anything else.
define internal ptr @leaf_data(ptr %t, ptr %obj, ptr %leaf) {
entry:
  %typ = getelementptr i8, ptr %obj, i64 ${OB_TYPE}
  %ty = load ptr, ptr %typ
  %sty = call ptr @pointer(ptr %leaf, i64 7)
  %isscalar = icmp ne ptr %sty, null
  br i1 %isscalar, label %scalar, label %array
scalar:
  %sok = icmp eq ptr %ty, %sty
  br i1 %sok, label %svalue, label %no
svalue:
  %value = getelementptr i8, ptr %obj, i64 ${SCALAR_VALUE}
  %slot = call ptr @pointer(ptr %leaf, i64 4)
  %narrow = icmp ne ptr %slot, null
  br i1 %narrow, label %single, label %as_is
single:
  %double = load double, ptr %value
  %float = fptrunc double %double to float
  store float %float, ptr %slot
  ret ptr %slot
as_is:
  ret ptr %value
array:
  %nd_t = call ptr @pointer(ptr %t, i64 ${H_NDARRAY})
  %isarr = icmp eq ptr %ty, %nd_t
  br i1 %isarr, label %descr, label %no
descr:
  %dp = getelementptr i8, ptr %obj, i64 ${ARRAY_DESCR}
  %d = load ptr, ptr %dp
  %wd = call ptr @pointer(ptr %leaf, i64 2)
  %dok = icmp eq ptr %d, %wd
  br i1 %dok, label %flags, label %no
flags:
  %fp = getelementptr i8, ptr %obj, i64 ${ARRAY_FLAGS}
  %f = load i32, ptr %fp
  %fm = and i32 %f, ${CONTIGUOUS_ALIGNED}
  %fok = icmp eq i32 %fm, ${CONTIGUOUS_ALIGNED}
  br i1 %fok, label %rank, label %no
rank:
  %ndp = getelementptr i8, ptr %obj, i64 ${ARRAY_NDIM}
  %nd = load i32, ptr %ndp
  %nd64 = sext i32 %nd to i64
  %r = call i64 @word(ptr %leaf, i64 3)
  %rok = icmp eq i64 %nd64, %r
  br i1 %rok, label %dims, label %no
dims:
  %dimsp = getelementptr i8, ptr %obj, i64 ${ARRAY_DIMS}
  %dimv = load ptr, ptr %dimsp
  %shape = call ptr @pointer(ptr %leaf, i64 4)
  br label %loop
loop:
  %k = phi i64 [0, %dims], [%k1, %cont]
  %end = icmp eq i64 %k, %r
  br i1 %end, label %yes, label %cmp
cmp:
  %a = getelementptr i64, ptr %dimv, i64 %k
  %av = load i64, ptr %a
  %b = getelementptr i64, ptr %shape, i64 %k
  %bv = load i64, ptr %b
  %eq = icmp eq i64 %av, %bv
  %k1 = add i64 %k, 1
  br i1 %eq, label %cont, label %no
cont:
  br label %loop
yes:
  %datap = getelementptr i8, ptr %obj, i64 ${ARRAY_DATA}
  %data = load ptr, ptr %datap
  ret ptr %data
no:
  ret ptr null
}

; Whether result i is a dense buffer of its own (not an argument's, not an earlier result's),
; of no empty axis: what becomes an array here (else the general path adopts the results).
define internal i1 @result_simple(ptr %t, ptr %res, ptr %ptrs, i64 %i) {
entry:
  %recs = call ptr @pointer(ptr %t, i64 ${H_RESULTS})
  %rec = getelementptr [${RESULT_WORDS} x i64], ptr %recs, i64 %i
  %off = call i64 @word(ptr %rec, i64 0)
  %rank = call i64 @word(ptr %rec, i64 1)
  %w = getelementptr i64, ptr %res, i64 %off
  %q = load i64, ptr %w
  %q0 = icmp eq i64 %q, 0
  br i1 %q0, label %no, label %inputs
inputs:
  %nl = call i64 @word(ptr %t, i64 ${H_NLEAVES})
  br label %iloop
iloop:
  %l = phi i64 [0, %inputs], [%l1, %inext]
  %ldone = icmp eq i64 %l, %nl
  br i1 %ldone, label %earlier, label %ibody
ibody:
  %p = call i64 @word(ptr %ptrs, i64 %l)
  %isin = icmp eq i64 %p, %q
  %l1 = add i64 %l, 1
  br i1 %isin, label %no, label %inext
inext:
  br label %iloop
earlier:
  br label %eloop
eloop:
  %j = phi i64 [0, %earlier], [%j1, %enext]
  %edone = icmp eq i64 %j, %i
  br i1 %edone, label %shape, label %ebody
ebody:
  %recj = getelementptr [${RESULT_WORDS} x i64], ptr %recs, i64 %j
  %offj = call i64 @word(ptr %recj, i64 0)
  %qj = call i64 @word(ptr %res, i64 %offj)
  %dup = icmp eq i64 %qj, %q
  %j1 = add i64 %j, 1
  br i1 %dup, label %no, label %enext
enext:
  br label %eloop
shape:
  br label %sloop
sloop:
  %k = phi i64 [%rank, %shape], [%km, %snext]
  %dense = phi i64 [1, %shape], [%dense1, %snext]
  %sdone = icmp eq i64 %k, 0
  br i1 %sdone, label %yes, label %sbody
sbody:
  %km = sub i64 %k, 1
  %si = add i64 %off, 3
  %si2 = add i64 %si, %km
  %size = call i64 @word(ptr %res, i64 %si2)
  %pos = icmp sgt i64 %size, 0
  br i1 %pos, label %stride, label %no
stride:
  %ti = add i64 %si2, %rank
  %st = call i64 @word(ptr %res, i64 %ti)
  %sok = icmp eq i64 %st, %dense
  %dense1 = mul i64 %dense, %size
  br i1 %sok, label %snext, label %no
snext:
  br label %sloop
yes:
  ret i1 1
no:
  ret i1 0
}

; Result i as a NumPy object (a new reference; null with Python's error set): a scalar, an
; array copied out of a small buffer, or an array on the buffer (its base frees it). The
; buffer is the result's either way: freed here or by the array.
define internal ptr @make_one(ptr %t, ptr %res, i64 %i) {
entry:
  %recs = call ptr @pointer(ptr %t, i64 ${H_RESULTS})
  %rec = getelementptr [${RESULT_WORDS} x i64], ptr %recs, i64 %i
  %off = call i64 @word(ptr %rec, i64 0)
  %rank = call i64 @word(ptr %rec, i64 1)
  %descr = call ptr @pointer(ptr %rec, i64 2)
  %item = call i64 @word(ptr %rec, i64 3)
  %w = getelementptr i64, ptr %res, i64 %off
  %q = call ptr @pointer(ptr %w, i64 0)
  %b = call i64 @word(ptr %w, i64 1)
  %o = call i64 @word(ptr %w, i64 2)
  %ob = mul i64 %o, %item
  %srci = add i64 %b, %ob
  %src = inttoptr i64 %srci to ptr
  %sizes = getelementptr i64, ptr %w, i64 3
  %r32 = trunc i64 %rank to i32
  %scalar = icmp eq i64 %rank, 0
  br i1 %scalar, label %mkscalar, label %count
mkscalar:
  %sf = call ptr @pointer(ptr %t, i64 ${H_SCALAR})
  %s = call ptr %sf(ptr %src, ptr %descr, ptr null)
  call void @free(ptr %q)
  ret ptr %s
count:
  br label %cloop
cloop:
  %k = phi i64 [0, %count], [%k1, %cbody]
  %n = phi i64 [%item, %count], [%n1, %cbody]
  %cdone = icmp eq i64 %k, %rank
  br i1 %cdone, label %sized, label %cbody
cbody:
  %sz = call i64 @word(ptr %sizes, i64 %k)
  %n1 = mul i64 %n, %sz
  %k1 = add i64 %k, 1
  br label %cloop
sized:
  %new = call ptr @pointer(ptr %t, i64 ${H_NEW})
  %nd_t = call ptr @pointer(ptr %t, i64 ${H_NDARRAY})
  %small = call i64 @word(ptr %t, i64 ${H_SMALL})
  call void @Py_IncRef(ptr %descr)
  %copy = icmp sle i64 %n, %small
  br i1 %copy, label %copied, label %owned
copied:
  %a = call ptr %new(ptr %nd_t, ptr %descr, i32 %r32, ptr %sizes, ptr null, ptr null, i32 0, ptr null)
  %anull = icmp eq ptr %a, null
  br i1 %anull, label %copydone, label %copyin
copyin:
  %dp = getelementptr i8, ptr %a, i64 ${ARRAY_DATA}
  %data = load ptr, ptr %dp
  call void @llvm.memcpy.p0.p0.i64(ptr %data, ptr %src, i64 %n, i1 false)
  br label %copydone
copydone:
  call void @free(ptr %q)
  ret ptr %a
owned:
  %a2 = call ptr %new(ptr %nd_t, ptr %descr, i32 %r32, ptr %sizes, ptr null, ptr %src,
                      i32 ${OWN_BUFFER_FLAGS}, ptr null)
  %a2null = icmp eq ptr %a2, null
  br i1 %a2null, label %lost, label %capsule
capsule:
  %cap = call ptr @PyCapsule_New(ptr %q, ptr null, ptr @dg_quick_free_capsule)
  %capnull = icmp eq ptr %cap, null
  br i1 %capnull, label %nocap, label %base
nocap:
  call void @Py_DecRef(ptr %a2)
  br label %lost
base:
  %sb = call ptr @pointer(ptr %t, i64 ${H_SETBASE})
  %sr = call i32 %sb(ptr %a2, ptr %cap)
  %sok = icmp eq i32 %sr, 0
  br i1 %sok, label %done, label %nobase
nobase:
  call void @Py_DecRef(ptr %a2)
  ret ptr null
done:
  ret ptr %a2
lost:
  call void @free(ptr %q)
  ret ptr null
}

; The buffers of results from..nres, which no array took (after an error).
define internal void @free_from(ptr %t, ptr %res, i64 %from) {
entry:
  %nres = call i64 @word(ptr %t, i64 ${H_NRES})
  %recs = call ptr @pointer(ptr %t, i64 ${H_RESULTS})
  br label %loop
loop:
  %i = phi i64 [%from, %entry], [%i1, %body]
  %done = icmp sge i64 %i, %nres
  br i1 %done, label %out, label %body
body:
  %rec = getelementptr [${RESULT_WORDS} x i64], ptr %recs, i64 %i
  %off = call i64 @word(ptr %rec, i64 0)
  %q = call ptr @pointer(ptr %res, i64 %off)
  call void @free(ptr %q)
  %i1 = add i64 %i, 1
  br label %loop
out:
  ret void
}

; The results as Python objects into %out: 0, or 1 where the general path must adopt them
; (nothing taken), or 2 on an error (Python's error set, every buffer freed).
define internal i32 @make_results(ptr %t, ptr %res, ptr %ptrs, ptr %out) {
entry:
  %nres = call i64 @word(ptr %t, i64 ${H_NRES})
  %none = icmp eq i64 %nres, 0
  br i1 %none, label %retnone, label %check
retnone:
  %nobj = call ptr @pointer(ptr %t, i64 ${H_NONE})
  call void @Py_IncRef(ptr %nobj)
  store ptr %nobj, ptr %out
  ret i32 0
check:
  br label %cloop
cloop:
  %i = phi i64 [0, %check], [%i1, %cnext]
  %cdone = icmp eq i64 %i, %nres
  br i1 %cdone, label %build, label %cbody
cbody:
  %ok = call i1 @result_simple(ptr %t, ptr %res, ptr %ptrs, i64 %i)
  %i1 = add i64 %i, 1
  br i1 %ok, label %cnext, label %general
cnext:
  br label %cloop
general:
  ret i32 1
build:
  %tn = call i64 @word(ptr %t, i64 ${H_TUPLE})
  %single = icmp slt i64 %tn, 0
  br i1 %single, label %one, label %tuple
one:
  %o = call ptr @make_one(ptr %t, ptr %res, i64 0)
  store ptr %o, ptr %out
  %onull = icmp eq ptr %o, null
  br i1 %onull, label %onefail, label %good
onefail:
  call void @free_from(ptr %t, ptr %res, i64 1)
  ret i32 2
good:
  ret i32 0
tuple:
  %tup = call ptr @PyTuple_New(i64 %tn)
  %tnull = icmp eq ptr %tup, null
  br i1 %tnull, label %tfail, label %tloop
tfail:
  call void @free_from(ptr %t, ptr %res, i64 0)
  ret i32 2
tloop:
  %j = phi i64 [0, %tuple], [%j1, %tset]
  %tdone = icmp eq i64 %j, %tn
  br i1 %tdone, label %tgood, label %tbody
tbody:
  %x = call ptr @make_one(ptr %t, ptr %res, i64 %j)
  %j1 = add i64 %j, 1
  %xnull = icmp eq ptr %x, null
  br i1 %xnull, label %xfail, label %tset
tset:
  %sr = call i32 @PyTuple_SetItem(ptr %tup, i64 %j, ptr %x)
  br label %tloop
xfail:
  call void @Py_DecRef(ptr %tup)
  call void @free_from(ptr %t, ptr %res, i64 %j1)
  ret i32 2
tgood:
  store ptr %tup, ptr %out
  ret i32 0
}

define ptr @dg_quick_call(ptr %self, ptr %args, i64 %nargs) {
entry:
  %out = alloca ptr, align 8
  %t = call ptr @PyLong_AsVoidPtr(ptr %self)
  %owner = call i64 @word(ptr %t, i64 ${H_OWNER})
  %me = call i64 @PyThread_get_thread_ident()
  %mine = icmp eq i64 %me, %owner
  br i1 %mine, label %count, label %not_run
count:
  %na = call i64 @word(ptr %t, i64 ${H_NARGS})
  %nok = icmp eq i64 %nargs, %na
  br i1 %nok, label %room, label %not_run
room:
  ; the call's own words (see RAN): return code, state, the arguments' addresses, results
  %nl = call i64 @word(ptr %t, i64 ${H_NLEAVES})
  %rw = call i64 @word(ptr %t, i64 ${H_RES_WORDS})
  %w1 = add i64 %nl, ${RAN_ADDRESSES_AT}
  %bw = add i64 %w1, %rw
  %blob = alloca i64, i64 %bw, align 8
  %ptrs = getelementptr i64, ptr %blob, i64 ${RAN_ADDRESSES_AT}
  %res = getelementptr i64, ptr %blob, i64 %w1
  %held = alloca ptr, i64 %nl, align 8
  %lv = call ptr @pointer(ptr %t, i64 ${H_LEAVES})
  br label %lloop
lloop:
  %i = phi i64 [0, %room], [%i1, %lstore]
  %ldone = icmp eq i64 %i, %nl
  br i1 %ldone, label %claim, label %lbody
lbody:
  %leaf = getelementptr [${LEAF_WORDS} x i64], ptr %lv, i64 %i
  %obj = call ptr @leaf_object(ptr %t, ptr %args, ptr %leaf)
  %isnull = icmp eq ptr %obj, null
  br i1 %isnull, label %not_run, label %lcheck
lcheck:
  %data = call ptr @leaf_data(ptr %t, ptr %obj, ptr %leaf)
  %bad = icmp eq ptr %data, null
  br i1 %bad, label %not_run, label %lstore
lstore:
  %desc = call ptr @pointer(ptr %leaf, i64 1)
  store ptr %data, ptr %desc
  %desc1 = getelementptr ptr, ptr %desc, i64 1
  store ptr %data, ptr %desc1
  %pi = getelementptr ptr, ptr %ptrs, i64 %i
  store ptr %data, ptr %pi
  %hi = getelementptr ptr, ptr %held, i64 %i
  store ptr %obj, ptr %hi
  %i1 = add i64 %i, 1
  br label %lloop
claim:
  ; (not while the general path waits for the program: it would wait as long as calls come here)
  ; (nor once the program has newer code: the general path takes it over)
  %waitp = call ptr @pointer(ptr %t, i64 ${H_WAITING})
  %waiting = load atomic i64, ptr %waitp seq_cst, align 8
  %stalep = call ptr @pointer(ptr %t, i64 ${H_STALE})
  %stale = load atomic i64, ptr %stalep seq_cst, align 8
  %either = or i64 %waiting, %stale
  %nowait = icmp eq i64 %either, 0
  br i1 %nowait, label %take, label %not_run
take:
  %busyp = call ptr @pointer(ptr %t, i64 ${H_BUSY})
  %cx = cmpxchg ptr %busyp, i64 0, i64 %me seq_cst seq_cst
  %won = extractvalue { i64, i1 } %cx, 1
  br i1 %won, label %arm, label %not_run
arm:
  %armf = call ptr @pointer(ptr %t, i64 ${H_ARM})
  %armed = call i32 %armf()
  %aok = icmp eq i32 %armed, 0
  %mainw = call i64 @word(ptr %t, i64 ${H_MAIN})
  %offmain = icmp eq i64 %mainw, 0
  %go = or i1 %aok, %offmain
  br i1 %go, label %state, label %unclaim
unclaim:
  ; (Python's handler is to be learnt again: the general path does it)
  store atomic i64 0, ptr %busyp seq_cst, align 8
  br label %not_run
state:
  %st = call ptr @pointer(ptr %t, i64 ${H_STATE})
  %hasst = icmp ne ptr %st, null
  br i1 %hasst, label %reset, label %hold
reset:
  store i64 0, ptr %st
  %st1 = getelementptr i64, ptr %st, i64 1
  store i64 0, ptr %st1
  %st2 = getelementptr i64, ptr %st, i64 2
  %budget = call i64 @word(ptr %t, i64 ${H_BUDGET})
  store i64 %budget, ptr %st2
  br label %hold
hold:
  ; the arrays held while the GIL is let go (another thread may take them out of a list or dict)
  call void @each(ptr %held, i64 %nl, ptr @Py_IncRef)
  %fn = call ptr @pointer(ptr %t, i64 ${H_FN})
  %argv = call ptr @pointer(ptr %t, i64 ${H_ARGV})
  %ts = call ptr @PyEval_SaveThread()
  %rc = call i32 %fn(ptr %argv)
  call void @PyEval_RestoreThread(ptr %ts)
  %rc64 = sext i32 %rc to i64
  store i64 %rc64, ptr %blob
  %resbuf = call ptr @pointer(ptr %t, i64 ${H_RES})
  %rbytes = mul i64 %rw, 8
  call void @llvm.memcpy.p0.p0.i64(ptr %res, ptr %resbuf, i64 %rbytes, i1 false)
  br i1 %hasst, label %snap, label %flags
snap:
  %snapp = getelementptr i64, ptr %blob, i64 1
  call void @llvm.memcpy.p0.p0.i64(ptr %snapp, ptr %st, i64 ${STATE_BYTES}, i1 false)
  %failed = load i64, ptr %st
  br label %flags
flags:
  %f0 = phi i64 [0, %hold], [%failed, %snap]
  %flagp = call ptr @pointer(ptr %t, i64 ${H_FLAG})
  %flag = load volatile i64, ptr %flagp
  store atomic i64 0, ptr %busyp seq_cst, align 8
  call void @each(ptr %held, i64 %nl, ptr @Py_DecRef)
  %e1 = or i64 %rc64, %f0
  %e2 = or i64 %e1, %flag
  %clean = icmp eq i64 %e2, 0
  br i1 %clean, label %results, label %ran
results:
  %s = call i32 @make_results(ptr %t, ptr %res, ptr %ptrs, ptr %out)
  switch i32 %s, label %err [ i32 0, label %done
                              i32 1, label %ran ]
done:
  %o = load ptr, ptr %out
  ret ptr %o
err:
  ret ptr null
ran:
  %bb = mul i64 %bw, 8
  %bytes = call ptr @PyBytes_FromStringAndSize(ptr %blob, i64 %bb)
  ret ptr %bytes
not_run:
  %nm = call ptr @pointer(ptr %t, i64 ${H_NOTRUN})
  call void @Py_IncRef(ptr %nm)
  ret ptr %nm
}

; The general path's claim of a program: its busy word from 0 to the thread's id; 1 if it was 0.
define i32 @dg_quick_claim(ptr %busy, i64 %me) {
  %cx = cmpxchg ptr %busy, i64 0, i64 %me seq_cst seq_cst
  %won = extractvalue { i64, i1 } %cx, 1
  %r = zext i1 %won to i32
  ret i32 %r
}
