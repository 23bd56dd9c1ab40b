; What lowering/codegen/objects.py adds to every module it compiles: LLVM's own library calls
; (memset, cos: the module flag RtLibUseGOT, as clang's -fno-plt writes it) made through the
; object's table, not through stubs; and the C library's memset and memcpy as the quick level
; calls them in place of its intrinsics (objects._library_copies copies their declarations).
; A stub's table entry is one that the JIT's linker leaves out of the room it asks llvmlite's
; memory manager for (lowering/codegen/object_room.py).

declare void @memset(ptr, i8 zeroext, i64) nonlazybind nobuiltin
declare void @memcpy(ptr, ptr, i64) nonlazybind nobuiltin

!llvm.module.flags = !{!0}
!0 = !{i32 7, !"RtLibUseGOT", i32 1}
