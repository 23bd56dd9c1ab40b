"""The quick call: a compiled function called from Python with no Python between the call and
the compiled code.

Expects: a CPU program's entry (`runtime.cpu._Entry`) and the arguments of a call that the
general path has just run (NumPy arrays, in tuples, lists and dicts with string keys as
`signature.fingerprint` takes them). Guarantees: `Quick(...)` (`CpuProgram.quick`) has an `fn`, a
built-in function (machine code made here once per process, from LLVM IR, with llvmlite) that
takes the same positional arguments. For arguments of the same structure, dtypes and shapes
as those it was made for (each array C-contiguous and aligned) it writes their addresses into
descriptors prepared once, arms Ctrl-C, releases the GIL around the compiled call and returns
the results as `CpuProgram.call` and `signature.to_python` would: a NumPy array (on the result's
own buffer, or copied out when small), a NumPy scalar, a tuple of them, or None. It returns
`NOT_RUN` for anything else (other shapes, another thread, the program in a call already: the
general path then runs the call), and `RAN` words when the call ran but its outcome needs the
general path (a failed check, no memory, Ctrl-C, a result that is not a dense buffer of its own):
`Quick.finish(words)` then gives what `CpuProgram.call` would have given, or raises its error.
The words are the call's own copy of what it left (its return code, the state words, the
arguments' addresses, the results struct), so that a call made before `finish` runs (from a
signal handler, or a finalizer) cannot change them. The arrays of the arguments are held while
the GIL is let go (another thread could take them out of a list or a dict).

The general path and this one share the program's `busy` word (one call of a program at a
time: its state words belong to that call), which holds the id of the thread whose call has
it: both take it atomically (`claim`), this one only when it is free and gives it back before
it makes the results; the general path waits for it, and while it waits (its `waiting` word
set) this one leaves every call to the general path, which queues on the program's lock. It
leaves them to it too once the program has newer code (quick-start code whose optimized code
has arrived, `stale`): the general path loads that code, and a new quick call takes over.

What the machine code reads is a table of 64-bit words (the `H_*` header, then the leaves'
records, each with the steps from the argument tuple to its array, and the results' records).
It reads NumPy's array objects by their C layout (`PyArrayObject_fields`: data at 16, nd at 24,
dimensions at 32, descr at 56, flags at 64), unchanged since NumPy 1.7, and calls NumPy through
its C API table (`_ARRAY_API`), whose slots never move.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from dg.core.abi import STATE_WORDS

from . import interrupt

# The header's words.
(H_FN, H_ARGV, H_RES, H_BUSY, H_STATE, H_FLAG, H_OWNER, H_BUDGET, H_ARM, H_NARGS, H_NLEAVES, H_LEAVES,
 H_NRES, H_RESULTS, H_TUPLE, H_NOTRUN, H_MAIN, H_RES_WORDS, H_SMALL, H_NDARRAY, H_NEW, H_SCALAR, H_SETBASE,
 H_NONE, H_TUPLE_TYPE, H_LIST_TYPE, H_DICT_TYPE, H_WAITING, H_STALE) = range(29)
HEADER_WORDS = 29
# A leaf: its argument, its descriptor's address, its dtype, rank and shape, its steps (how many,
# their address), the type of a scalar leaf (else 0: an array). A scalar's shape word is 0, or
# for a Python float that an f32 parameter takes, the address of the 4 bytes its value is
# rounded into. A step: kind, length, index, key.
# A result: word offset in the results struct, rank, dtype, item size.
LEAF_WORDS, STEP_WORDS, RESULT_WORDS = 8, 4, 4
# Where a NumPy scalar of the types `_SCALARS` holds its value (`PyScalarObject`: the object's
# header, then the value), and a Python float its double (`PyFloatObject`).
SCALAR_VALUE = 16
_SCALARS = frozenset(np.dtype(c).type for c in "?bhilqBHILQefd") | {float}
TUPLE, LIST, DICT = 0, 1, 2
_C_CONTIGUOUS, _ALIGNED, _WRITEABLE = 0x1, 0x100, 0x400
METH_FASTCALL = 0x80


class _Marker:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


NOT_RUN = _Marker("NOT_RUN")
# What the quick call returns when the general path must finish a call that ran: a `bytes` of
# words, its own copy of what `Quick.finish` reads (a call that Python makes before `finish`
# runs, from a signal handler or a finalizer, may take the quick call again): the entry's return
# code, the state words, the arguments' addresses, the results struct.
RAN = bytes

_IR = f"""
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

define internal i64 @word(ptr %t, i64 %k) {{
  %p = getelementptr i64, ptr %t, i64 %k
  %v = load i64, ptr %p
  ret i64 %v
}}

define internal ptr @pointer(ptr %t, i64 %k) {{
  %p = getelementptr i64, ptr %t, i64 %k
  %v = load ptr, ptr %p
  ret ptr %v
}}

; %fn (Py_IncRef or Py_DecRef) on each of the %n objects at %objs.
define internal void @each(ptr %objs, i64 %n, ptr %fn) {{
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
}}

; A result's buffer, freed by its array's base when that array goes.
define void @dg_quick_free_capsule(ptr %cap) {{
  %p = call ptr @PyCapsule_GetPointer(ptr %cap, ptr null)
  call void @free(ptr %p)
  ret void
}}

; The object a leaf's steps reach from the arguments (a borrowed reference), or null where a
; container is not of the type and length it had.
define internal ptr @leaf_object(ptr %t, ptr %args, ptr %leaf) {{
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
  %s = getelementptr [{STEP_WORDS} x i64], ptr %steps, i64 %i
  %kind = call i64 @word(ptr %s, i64 0)
  %len = call i64 @word(ptr %s, i64 1)
  %idx = call i64 @word(ptr %s, i64 2)
  %key = call ptr @pointer(ptr %s, i64 3)
  %ti = add i64 %kind, {H_TUPLE_TYPE}
  %want = call ptr @pointer(ptr %t, i64 %ti)
  %typ = getelementptr i8, ptr %obj, i64 8
  %ty = load ptr, ptr %typ
  %same = icmp eq ptr %ty, %want
  br i1 %same, label %sized, label %fail
sized:
  %n = call i64 @PyObject_Size(ptr %obj)
  %nok = icmp eq i64 %n, %len
  br i1 %nok, label %get, label %fail
get:
  switch i64 %kind, label %getdict [ i64 {TUPLE}, label %gettuple
                                     i64 {LIST}, label %getlist ]
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
}}

; The address of the leaf's data: of a NumPy array of the leaf's dtype and shape, C-contiguous
; and aligned, or of the value of a NumPy scalar of the leaf's type; null for anything else.
define internal ptr @leaf_data(ptr %t, ptr %obj, ptr %leaf) {{
entry:
  %typ = getelementptr i8, ptr %obj, i64 8
  %ty = load ptr, ptr %typ
  %sty = call ptr @pointer(ptr %leaf, i64 7)
  %isscalar = icmp ne ptr %sty, null
  br i1 %isscalar, label %scalar, label %array
scalar:
  %sok = icmp eq ptr %ty, %sty
  br i1 %sok, label %svalue, label %no
svalue:
  %value = getelementptr i8, ptr %obj, i64 {SCALAR_VALUE}
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
  %nd_t = call ptr @pointer(ptr %t, i64 {H_NDARRAY})
  %isarr = icmp eq ptr %ty, %nd_t
  br i1 %isarr, label %descr, label %no
descr:
  %dp = getelementptr i8, ptr %obj, i64 56
  %d = load ptr, ptr %dp
  %wd = call ptr @pointer(ptr %leaf, i64 2)
  %dok = icmp eq ptr %d, %wd
  br i1 %dok, label %flags, label %no
flags:
  %fp = getelementptr i8, ptr %obj, i64 64
  %f = load i32, ptr %fp
  %fm = and i32 %f, {_C_CONTIGUOUS | _ALIGNED}
  %fok = icmp eq i32 %fm, {_C_CONTIGUOUS | _ALIGNED}
  br i1 %fok, label %rank, label %no
rank:
  %ndp = getelementptr i8, ptr %obj, i64 24
  %nd = load i32, ptr %ndp
  %nd64 = sext i32 %nd to i64
  %r = call i64 @word(ptr %leaf, i64 3)
  %rok = icmp eq i64 %nd64, %r
  br i1 %rok, label %dims, label %no
dims:
  %dimsp = getelementptr i8, ptr %obj, i64 32
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
  %datap = getelementptr i8, ptr %obj, i64 16
  %data = load ptr, ptr %datap
  ret ptr %data
no:
  ret ptr null
}}

; Whether result i is a dense buffer of its own (not an argument's, not an earlier result's),
; of no empty axis: what becomes an array here (else the general path adopts the results).
define internal i1 @result_simple(ptr %t, ptr %res, ptr %ptrs, i64 %i) {{
entry:
  %recs = call ptr @pointer(ptr %t, i64 {H_RESULTS})
  %rec = getelementptr [{RESULT_WORDS} x i64], ptr %recs, i64 %i
  %off = call i64 @word(ptr %rec, i64 0)
  %rank = call i64 @word(ptr %rec, i64 1)
  %w = getelementptr i64, ptr %res, i64 %off
  %q = load i64, ptr %w
  %q0 = icmp eq i64 %q, 0
  br i1 %q0, label %no, label %inputs
inputs:
  %nl = call i64 @word(ptr %t, i64 {H_NLEAVES})
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
  %recj = getelementptr [{RESULT_WORDS} x i64], ptr %recs, i64 %j
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
}}

; Result i as a NumPy object (a new reference; null with Python's error set): a scalar, an
; array copied out of a small buffer, or an array on the buffer (its base frees it). The
; buffer is the result's either way: freed here or by the array.
define internal ptr @make_one(ptr %t, ptr %res, i64 %i) {{
entry:
  %recs = call ptr @pointer(ptr %t, i64 {H_RESULTS})
  %rec = getelementptr [{RESULT_WORDS} x i64], ptr %recs, i64 %i
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
  %sf = call ptr @pointer(ptr %t, i64 {H_SCALAR})
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
  %new = call ptr @pointer(ptr %t, i64 {H_NEW})
  %nd_t = call ptr @pointer(ptr %t, i64 {H_NDARRAY})
  %small = call i64 @word(ptr %t, i64 {H_SMALL})
  call void @Py_IncRef(ptr %descr)
  %copy = icmp sle i64 %n, %small
  br i1 %copy, label %copied, label %owned
copied:
  %a = call ptr %new(ptr %nd_t, ptr %descr, i32 %r32, ptr %sizes, ptr null, ptr null, i32 0, ptr null)
  %anull = icmp eq ptr %a, null
  br i1 %anull, label %copydone, label %copyin
copyin:
  %dp = getelementptr i8, ptr %a, i64 16
  %data = load ptr, ptr %dp
  call void @llvm.memcpy.p0.p0.i64(ptr %data, ptr %src, i64 %n, i1 false)
  br label %copydone
copydone:
  call void @free(ptr %q)
  ret ptr %a
owned:
  %a2 = call ptr %new(ptr %nd_t, ptr %descr, i32 %r32, ptr %sizes, ptr null, ptr %src,
                      i32 {_C_CONTIGUOUS | _ALIGNED | _WRITEABLE}, ptr null)
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
  %sb = call ptr @pointer(ptr %t, i64 {H_SETBASE})
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
}}

; The buffers of results from..nres, which no array took (after an error).
define internal void @free_from(ptr %t, ptr %res, i64 %from) {{
entry:
  %nres = call i64 @word(ptr %t, i64 {H_NRES})
  %recs = call ptr @pointer(ptr %t, i64 {H_RESULTS})
  br label %loop
loop:
  %i = phi i64 [%from, %entry], [%i1, %body]
  %done = icmp sge i64 %i, %nres
  br i1 %done, label %out, label %body
body:
  %rec = getelementptr [{RESULT_WORDS} x i64], ptr %recs, i64 %i
  %off = call i64 @word(ptr %rec, i64 0)
  %q = call ptr @pointer(ptr %res, i64 %off)
  call void @free(ptr %q)
  %i1 = add i64 %i, 1
  br label %loop
out:
  ret void
}}

; The results as Python objects into %out: 0, or 1 where the general path must adopt them
; (nothing taken), or 2 on an error (Python's error set, every buffer freed).
define internal i32 @make_results(ptr %t, ptr %res, ptr %ptrs, ptr %out) {{
entry:
  %nres = call i64 @word(ptr %t, i64 {H_NRES})
  %none = icmp eq i64 %nres, 0
  br i1 %none, label %retnone, label %check
retnone:
  %nobj = call ptr @pointer(ptr %t, i64 {H_NONE})
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
  %tn = call i64 @word(ptr %t, i64 {H_TUPLE})
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
}}

define ptr @dg_quick_call(ptr %self, ptr %args, i64 %nargs) {{
entry:
  %out = alloca ptr, align 8
  %t = call ptr @PyLong_AsVoidPtr(ptr %self)
  %owner = call i64 @word(ptr %t, i64 {H_OWNER})
  %me = call i64 @PyThread_get_thread_ident()
  %mine = icmp eq i64 %me, %owner
  br i1 %mine, label %count, label %not_run
count:
  %na = call i64 @word(ptr %t, i64 {H_NARGS})
  %nok = icmp eq i64 %nargs, %na
  br i1 %nok, label %room, label %not_run
room:
  ; the call's own words (see RAN): return code, state, the arguments' addresses, results
  %nl = call i64 @word(ptr %t, i64 {H_NLEAVES})
  %rw = call i64 @word(ptr %t, i64 {H_RES_WORDS})
  %w1 = add i64 %nl, {1 + STATE_WORDS}
  %bw = add i64 %w1, %rw
  %blob = alloca i64, i64 %bw, align 8
  %ptrs = getelementptr i64, ptr %blob, i64 {1 + STATE_WORDS}
  %res = getelementptr i64, ptr %blob, i64 %w1
  %held = alloca ptr, i64 %nl, align 8
  %lv = call ptr @pointer(ptr %t, i64 {H_LEAVES})
  br label %lloop
lloop:
  %i = phi i64 [0, %room], [%i1, %lstore]
  %ldone = icmp eq i64 %i, %nl
  br i1 %ldone, label %claim, label %lbody
lbody:
  %leaf = getelementptr [{LEAF_WORDS} x i64], ptr %lv, i64 %i
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
  %waitp = call ptr @pointer(ptr %t, i64 {H_WAITING})
  %waiting = load atomic i64, ptr %waitp seq_cst, align 8
  %stalep = call ptr @pointer(ptr %t, i64 {H_STALE})
  %stale = load atomic i64, ptr %stalep seq_cst, align 8
  %either = or i64 %waiting, %stale
  %nowait = icmp eq i64 %either, 0
  br i1 %nowait, label %take, label %not_run
take:
  %busyp = call ptr @pointer(ptr %t, i64 {H_BUSY})
  %cx = cmpxchg ptr %busyp, i64 0, i64 %me seq_cst seq_cst
  %won = extractvalue {{ i64, i1 }} %cx, 1
  br i1 %won, label %arm, label %not_run
arm:
  %armf = call ptr @pointer(ptr %t, i64 {H_ARM})
  %armed = call i32 %armf()
  %aok = icmp eq i32 %armed, 0
  %mainw = call i64 @word(ptr %t, i64 {H_MAIN})
  %offmain = icmp eq i64 %mainw, 0
  %go = or i1 %aok, %offmain
  br i1 %go, label %state, label %unclaim
unclaim:
  ; (Python's handler is to be learnt again: the general path does it)
  store atomic i64 0, ptr %busyp seq_cst, align 8
  br label %not_run
state:
  %st = call ptr @pointer(ptr %t, i64 {H_STATE})
  %hasst = icmp ne ptr %st, null
  br i1 %hasst, label %reset, label %hold
reset:
  store i64 0, ptr %st
  %st1 = getelementptr i64, ptr %st, i64 1
  store i64 0, ptr %st1
  %st2 = getelementptr i64, ptr %st, i64 2
  %budget = call i64 @word(ptr %t, i64 {H_BUDGET})
  store i64 %budget, ptr %st2
  br label %hold
hold:
  ; the arrays held while the GIL is let go (another thread may take them out of a list or dict)
  call void @each(ptr %held, i64 %nl, ptr @Py_IncRef)
  %fn = call ptr @pointer(ptr %t, i64 {H_FN})
  %argv = call ptr @pointer(ptr %t, i64 {H_ARGV})
  %ts = call ptr @PyEval_SaveThread()
  %rc = call i32 %fn(ptr %argv)
  call void @PyEval_RestoreThread(ptr %ts)
  %rc64 = sext i32 %rc to i64
  store i64 %rc64, ptr %blob
  %resbuf = call ptr @pointer(ptr %t, i64 {H_RES})
  %rbytes = mul i64 %rw, 8
  call void @llvm.memcpy.p0.p0.i64(ptr %res, ptr %resbuf, i64 %rbytes, i1 false)
  br i1 %hasst, label %snap, label %flags
snap:
  %snapp = getelementptr i64, ptr %blob, i64 1
  call void @llvm.memcpy.p0.p0.i64(ptr %snapp, ptr %st, i64 {8 * STATE_WORDS}, i1 false)
  %failed = load i64, ptr %st
  br label %flags
flags:
  %f0 = phi i64 [0, %hold], [%failed, %snap]
  %flagp = call ptr @pointer(ptr %t, i64 {H_FLAG})
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
  %nm = call ptr @pointer(ptr %t, i64 {H_NOTRUN})
  call void @Py_IncRef(ptr %nm)
  ret ptr %nm
}}

; The general path's claim of a program: its busy word from 0 to the thread's id; 1 if it was 0.
define i32 @dg_quick_claim(ptr %busy, i64 %me) {{
  %cx = cmpxchg ptr %busy, i64 0, i64 %me seq_cst seq_cst
  %won = extractvalue {{ i64, i1 }} %cx, 1
  %r = zext i1 %won to i32
  ret i32 %r
}}
"""

_API = ("PyLong_AsVoidPtr", "PyObject_Size", "PyTuple_GetItem", "PyList_GetItem", "PyDict_GetItem", "PyTuple_New",
        "PyTuple_SetItem", "Py_IncRef", "Py_DecRef", "PyCapsule_New", "PyCapsule_GetPointer", "PyEval_SaveThread",
        "PyEval_RestoreThread", "PyThread_get_thread_ident", "PyBytes_FromStringAndSize")


class _Native:
    """The machine code, made once per process (under the lock), and NumPy's C API."""

    lock = threading.Lock()
    engine = None
    call = 0  # dg_quick_call's address
    claim = None  # dg_quick_claim, callable
    numpy = None  # (ndarray type, PyArray_NewFromDescr, PyArray_Scalar, PyArray_SetBaseObject) addresses


def _numpy_api() -> tuple:
    try:
        from numpy._core import _multiarray_umath as mu
    except ImportError:  # (NumPy 1.x)
        from numpy.core import _multiarray_umath as mu
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    table = (ctypes.c_void_p * 300).from_address(get(mu._ARRAY_API, None))
    return table[2], table[94], table[60], table[282]


def native() -> int:
    """dg_quick_call's address (the machine code made on first use)."""
    if _Native.engine is None:
        with _Native.lock:
            if _Native.engine is None:
                import llvmlite.binding as llvm

                llvm.initialize_native_target()
                llvm.initialize_native_asmprinter()
                for name in _API:
                    llvm.add_symbol(name, ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value)
                libc = ctypes.CDLL(None)
                llvm.add_symbol("free", ctypes.cast(libc.free, ctypes.c_void_p).value)
                target = llvm.Target.from_default_triple().create_target_machine(opt=2)
                module = llvm.parse_assembly(_IR)
                module.verify()
                engine = llvm.create_mcjit_compiler(module, target)
                engine.finalize_object()
                _Native.numpy = _numpy_api()
                _Native.call = engine.get_function_address("dg_quick_call")
                _Native.claim = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64)(
                    engine.get_function_address("dg_quick_claim"))
                _Native.engine = engine
    return _Native.call


class _MethodDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("meth", ctypes.c_void_p), ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


_new_function = ctypes.pythonapi.PyCFunction_NewEx
_new_function.restype = ctypes.py_object
_new_function.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]


def _words(values: list) -> ctypes.Array:
    return (ctypes.c_int64 * max(1, len(values)))(*values)


def _leaves(args) -> list | None:
    """[(argument index, [(kind, length, index, key)], array or scalar)] for each leaf, in the
    order `signature.fingerprint` takes them (dict keys sorted), or None for arguments it does not
    take or that hold anything but NumPy arrays and scalars and Python floats."""
    out: list = []
    for i, a in enumerate(args):
        if not _walk(out, i, [], a):
            return None
    return out


def _walk(out: list, i: int, steps: list, v) -> bool:
    """(A plain function: a closure that calls itself would be a reference cycle, keeping the
    arguments alive until the next garbage collection.)"""
    t = type(v)
    if t is np.ndarray or t in _SCALARS:
        out.append((i, steps, v))
        return True
    if t is dict:
        if not all(type(k) is str for k in v):
            return False
        keys = sorted(v)
        return all(_walk(out, i, steps + [(DICT, len(keys), 0, k)], v[k]) for k in keys)
    if t is tuple or t is list:
        if not v or not any(type(e) in (np.ndarray, dict, tuple, list) for e in v):
            return False
        kind = TUPLE if t is tuple else LIST
        return all(_walk(out, i, steps + [(kind, len(v), k, None)], e) for k, e in enumerate(v))
    return False


class Quick:
    """The quick call of one compiled entry for arguments shaped as some given ones: `fn(*args)`
    (see the module's docstring); `finish(words)` after it returned `RAN` words. `comp`: the
    specialization it runs (its caller's)."""

    comp = None

    def __init__(self, program, entry, leaves: list, nargs: int, results: list, single: bool, budget: int):
        self.program, self.entry = program, entry
        address = native()
        nd_type, new, make_scalar, setbase = _Native.numpy
        self.descs, self.res, self.argv = entry.buffers()
        base = ctypes.addressof(self.descs)
        keep = self.keep = []  # what the table points into
        leaf_words = []
        for (arg, steps, a), offset, dtype in zip(leaves, entry.offsets, entry.dtypes):
            kind = type(a)
            if kind is np.ndarray:
                shape = _words(list(a.shape))
            else:  # a scalar: its value read where it is, a Python float's rounded for an f32 parameter
                shape = ctypes.c_float() if kind is float and dtype == np.float32 else None
                a = np.asarray(a, dtype=dtype)
            step_words = []
            for container, n, index, key in steps:
                if key is not None:
                    keep.append(key)
                step_words += [container, n, index, id(key) if key is not None else 0]
            steps_arr = _words(step_words)
            keep += [shape, steps_arr, dtype]
            leaf_words += [arg, base + offset, id(dtype), a.ndim, ctypes.addressof(shape) if shape is not None else 0,
                           len(steps), ctypes.addressof(steps_arr), id(kind) if kind is not np.ndarray else 0]
            words = [0, 0, 0, *a.shape]  # the descriptor's sizes and strides, fixed for these shapes
            stride = 1
            strides = []
            for d in reversed(a.shape):
                strides.append(stride)
                stride *= d
            words += reversed(strides)
            for k, w in enumerate(words):
                self.descs[offset // 8 + k] = w
        self.leaf_table = _words(leaf_words)
        result_words = []
        for (off, rank, dtype), out_dtype in zip(entry.results, results):
            keep.append(out_dtype)
            result_words += [off, rank, id(out_dtype), out_dtype.itemsize]
        self.result_table = _words(result_words)
        self.busy = program.busy
        state = program._state
        header = [0] * HEADER_WORDS
        header[H_FN] = ctypes.cast(entry.fn, ctypes.c_void_p).value
        header[H_ARGV] = ctypes.addressof(self.argv)
        header[H_RES] = ctypes.addressof(self.res)
        header[H_BUSY] = ctypes.addressof(self.busy)
        header[H_WAITING] = ctypes.addressof(program.waiting)
        self.stale = program.stale_word()  # (nonzero once the program has newer code: NOT_RUN from then on)
        header[H_STALE] = ctypes.addressof(self.stale)
        header[H_STATE] = ctypes.addressof(state) if state is not None else 0
        header[H_FLAG] = ctypes.addressof(program._interrupted)
        header[H_OWNER] = threading.get_ident()
        header[H_BUDGET] = budget
        header[H_ARM] = interrupt.arm_address()
        header[H_NARGS] = nargs
        header[H_NLEAVES] = len(leaves)
        header[H_LEAVES] = ctypes.addressof(self.leaf_table)
        header[H_NRES] = len(results)
        header[H_RESULTS] = ctypes.addressof(self.result_table)
        header[H_TUPLE] = -1 if single else len(results)
        header[H_NOTRUN], header[H_NONE] = id(NOT_RUN), id(None)
        header[H_MAIN] = threading.current_thread() is threading.main_thread()
        header[H_RES_WORDS] = entry.out_words
        header[H_SMALL] = entry.small
        header[H_NDARRAY], header[H_NEW], header[H_SCALAR], header[H_SETBASE] = nd_type, new, make_scalar, setbase
        header[H_TUPLE_TYPE], header[H_LIST_TYPE], header[H_DICT_TYPE] = id(tuple), id(list), id(dict)
        self.has_state = state is not None
        self.table = _words(header)
        self.method = _MethodDef(b"dg_quick_call", address, METH_FASTCALL, None)
        self.fn = _new_function(ctypes.addressof(self.method), ctypes.addressof(self.table), None)

    def finish(self, words: bytes):
        """What `CpuProgram.call` gives (or raises) for the call that returned these `RAN` words."""
        w = memoryview(words).cast("q")
        n = len(self.entry.offsets)
        s = w[1:1 + STATE_WORDS]
        failed = (s[0] - 1, s[3], s[4], list(s[5:])) if self.has_state and s[0] else None
        inputs = set(w[1 + STATE_WORDS:1 + STATE_WORDS + n])
        return self.program.outcome(self.entry, w[0], words[8 * (1 + STATE_WORDS + n):], inputs, failed,
                                    outermost=True)


def claim(busy: ctypes.c_int64, me: int) -> bool:
    """The program whose busy word this is taken for thread `me` (atomically: 0 to `me`), if free."""
    if _Native.claim is None:
        native()
    return bool(_Native.claim(ctypes.addressof(busy), me))
