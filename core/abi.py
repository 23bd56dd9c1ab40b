"""The names and layouts compiled code and its executor share: the lowering writes them into
the code, the runtime looks them up, registers them or reads them.

Every name a dg function could have is kept away from these: the emitter renames a dg
function whose name starts with `RESERVED` (dsl/), and the CPU lowering gives every dg
function a dotted symbol (`LINKED` + its name), which no C library function can have.
"""

RESERVED = "dg_"

# The state compiled code shares with its executor, a global of STATE_WORDS i64:
# [0] nonzero once a check failed: the failed check's id plus one, the first failure winning
#     (loops and calls then wind down),
# [1] the stack pointer at the outermost dg call (0 before it),
# [2] how many bytes of stack dg calls may use (set by the executor per call),
# [3], [4] the values the first failed check reports (an index and a size, two sizes),
# [5] how many dg calls the failure unwound (each recorded by `FRAME` as its call returned),
# [6 ...] their call sites: the innermost INNER_FRAMES in order, then the outermost of the others
#     in a ring of MAX_FRAMES - INNER_FRAMES words (call k at 6 + INNER + (k - INNER) % RING).
STATE = "dg_state"
MAX_FRAMES = 32
INNER_FRAMES = 16
STATE_WORDS = 6 + MAX_FRAMES
STATE_TYPE = f"memref<{STATE_WORDS}xi64>"
STATE_DECL = f"memref.global @{STATE} : {STATE_TYPE} = dense<0>"
# Set (nonzero) by the SIGINT handler: compiled loops and recursions stop as after a failed check.
INTERRUPT = "dg_interrupt"
INTERRUPT_DECL = f"memref.global @{INTERRUPT} : memref<i64>"  # (no value: defined by the runtime)
FAIL = "dg_rt_fail"  # (check id, value, value: i64): record a failed check and its values
FAIL_VALUES = 2  # how many values a check reports at most
FRAME = "dg_rt_frame"  # (call site id: i64): a dg call returned, the first failure inside it
STACK_POINTER = "dg_stack_pointer"  # () -> i64
# Host calls (print, breakpoint): `dg_rt_host_<element type>(id, value as an unranked tensor)`
# or `dg_rt_host_none(id)`; called through their C interface (`_mlir_ciface_` + name).
HOST = "dg_rt_host_"

LINKED = "dg.fn."  # what compiled code calls a dg function `f`: `dg.fn.f`
GUARDED = "dg.guarded."  # `dg.guarded.<entry>(argv) -> i32`: the entry the executor calls
SETJMP, LONGJMP = "dg.setjmp", "dg.longjmp"  # the C library's, under the names guarded code uses

# The thread pool's entry: `dg.parallel_for(fn, ctx, n, work)` runs `fn(ctx, lo, hi)` over the
# iterations [0, n) of an outlined loop, `work` its estimated cost.
PARALLEL_FOR = "dg.parallel_for"
# Work (iterations times body operations) per thread below which sharing a loop costs more than
# it saves: waking a worker and waiting for it took some tens of microseconds on a 2-core
# virtual machine, where a loop of this much work takes about as long. The lowering leaves
# smaller loops in place; the pool splits loops in parts of at least this much.
GRAIN = 1 << 21

# The collectives compiled code calls (runtime.collectives defines them, on the MPI library
# mpi4py loaded, or for a world of one): rank and size () -> i64; allreduce (source address, or 0
# to reduce in place, address, count, type code, op code) and broadcast (address, count, type
# code, root), into a buffer; allgather (address, count, type code): every rank's block of
# count / size elements, its own already in place, into the buffer; reduce_scatter (address,
# count, type code, op code): the reduction of the buffer's block k over the ranks into rank k's
# first block; all_to_all (address, count, type code): block k of the buffer to rank k, rank k's
# block for this one into block k, in place.
MPI_RANK, MPI_SIZE = "dg.mpi_rank", "dg.mpi_size"
MPI_ALLREDUCE, MPI_BCAST = "dg.mpi_allreduce", "dg.mpi_bcast"
MPI_ALLGATHER, MPI_REDUCE_SCATTER = "dg.mpi_allgather", "dg.mpi_reduce_scatter"
MPI_ALL_TO_ALL = "dg.mpi_all_to_all"
# The point-to-point calls, one per element type (`<name>_<type>`: f32, f64, i32, i64): (peer, type
# code, group code, the buffer as an unranked memref: its rank, then its descriptor's address).
MPI_SEND, MPI_RECV = "dg.mpi_send", "dg.mpi_recv"
MPI_FLUSH = "dg.mpi_flush"  # () : waits for every send in flight (the runtime calls it before MPI ends)
# A reduction started and waited for apart: iallreduce (address, count, type code, op code, group)
# starts reducing the buffer in place; wait (address) waits for the one started on that buffer.
MPI_IALLREDUCE, MPI_WAIT = "dg.mpi_iallreduce", "dg.mpi_wait"
