/* What an exported dg library links besides its compiled code (runtime/export: `dg export`):
 * MLIR's strided copy, the Ctrl-C flag compiled loops read (never set here), the calling
 * thread's stack budget, the thread pool's start, each thread's last error, and the copies
 * that make a call's results arrays of their own. Needs only the C library and pthreads. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DG_HIDDEN __attribute__((visibility("hidden")))

/* The Ctrl-C flag compiled loops and recursions read (core.abi.INTERRUPT): a library has no
 * handler of its own, so it stays 0. */
DG_HIDDEN int64_t dg_interrupt = 0;

/* ------------------------------------------------------------ MLIR's memrefCopy */
typedef struct { int64_t rank; int64_t *desc; } dg_unranked;

static void copy_strided(char *dst, const int64_t *dst_strides, const char *src, const int64_t *src_strides,
                         const int64_t *sizes, int64_t rank, int64_t item) {
    if (rank == 0) { memcpy(dst, src, (size_t)item); return; }
    for (int64_t i = 0; i < sizes[0]; i++)
        copy_strided(dst + i * dst_strides[0] * item, dst_strides + 1, src + i * src_strides[0] * item,
                     src_strides + 1, sizes + 1, rank - 1, item);
}

/* (descriptor words: allocated, aligned, offset, sizes[rank], strides[rank]) */
void memrefCopy(int64_t item, dg_unranked *src, dg_unranked *dst) {
    int64_t rank = src->rank, *s = src->desc, *d = dst->desc;
    for (int64_t k = 0; k < rank; k++)
        if (s[3 + k] == 0) return;
    copy_strided((char *)d[1] + d[2] * item, d + 3 + rank, (const char *)s[1] + s[2] * item, s + 3 + rank,
                 s + 3, rank, item);
}

DG_HIDDEN void dg__copy_strided(void *dst, const void *src, const int64_t *sizes, const int64_t *strides,
                                int64_t rank, int64_t item) {
    int64_t dense[16];
    int64_t n = 1;
    for (int64_t k = rank - 1; k >= 0; k--) { dense[k] = n; n *= sizes[k]; }
    if (n) copy_strided(dst, dense, src, strides, sizes, rank, item);
}

/* ------------------------------------------------------------ threads and stacks */
extern int64_t dg_pool_start(int64_t count);
static pthread_once_t started = PTHREAD_ONCE_INIT;

static void start(void) {
    const char *env = getenv("DG_NUM_THREADS");
    long n = env && *env ? strtol(env, NULL, 10) : 0;
    if (n <= 0) {
        cpu_set_t set;
        n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    }
    dg_pool_start(n > 1 ? n - 1 : 0);
}

static __thread int64_t budget;

/* Bytes of stack a call's dg functions may use on this thread: half of what it has (at most
 * 32 MiB), as in Python (runtime.linking); the pool started first, once per process. */
DG_HIDDEN int64_t dg__prepare(void) {
    pthread_once(&started, start);
    if (!budget) {
        size_t size = 0;
        pthread_attr_t attr;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            pthread_attr_getstacksize(&attr, &size);
            pthread_attr_destroy(&attr);
        }
        if (!size) size = 2 << 20;
        if (size > ((size_t)64 << 20)) size = (size_t)64 << 20;
        budget = (int64_t)(size / 2);
    }
    return budget;
}

/* ------------------------------------------------------------ errors */
static __thread char *error_text;
static __thread size_t error_room;

const char *dg_last_error(void) { return error_text ? error_text : ""; }

static void put(size_t *at, const char *text, size_t n) {
    if (*at + n + 1 > error_room) {
        size_t room = (*at + n + 1) * 2;
        char *grown = realloc(error_text, room);
        if (!grown) return;
        error_text = grown;
        error_room = room;
    }
    memcpy(error_text + *at, text, n);
    *at += n;
    error_text[*at] = 0;
}

DG_HIDDEN void dg__clear_error(void) { if (error_text) error_text[0] = 0; }

/* The last error: `format` (printf's, in full) then the dg call stack. */
DG_HIDDEN void dg__error(const char *format, ...) {
    va_list ap, again;
    va_start(ap, format);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, format, ap);
    va_end(ap);
    size_t at = 0;
    char *text = malloc((size_t)n + 1);
    if (text) {
        vsnprintf(text, (size_t)n + 1, format, again);
        put(&at, text, (size_t)n);
        free(text);
    }
    va_end(again);
}

/* A failed check's message: `text` with \x01 and \x02 standing for its two values, then its
 * call stack from state words [5 ...] (core.abi's layout: `count` calls, the innermost `inner`
 * in order, then a ring of the outermost), each call site's place from `places` ("" for a site
 * of dg's own functions) and its source line from `sites`, runs of one site as one line with their count, as
 * core.errors.call_stack_lines writes them. */
DG_HIDDEN void dg__check_error(const char *text, int64_t a, int64_t b, const int64_t *frames, int64_t inner,
                               int64_t most, const char *const *sites, const char *const *places) {
    size_t at = 0;
    char num[32];
    dg__clear_error();
    put(&at, "", 0);
    for (const char *p = text; *p; p++) {
        if (*p == 1 || *p == 2) {
            int n = snprintf(num, sizeof num, "%lld", (long long)(*p == 1 ? a : b));
            put(&at, num, (size_t)n);
        } else {
            put(&at, p, 1);
        }
    }
    int64_t count = frames[0];
    const int64_t *slots = frames + 1;
    int64_t ids[64];
    int64_t n = 0;
    if (count <= most) {
        for (int64_t k = 0; k < count; k++) ids[n++] = slots[k];
    } else {
        int64_t ring = most - inner;
        for (int64_t k = 0; k < inner; k++) ids[n++] = slots[k];
        ids[n++] = -(count - most);
        for (int64_t k = count - ring; k < count; k++) ids[n++] = slots[inner + (k - inner) % ring];
    }
    /* the sites of dg's own functions are left out */
    int64_t kept[64], m = 0;
    for (int64_t k = 0; k < n; k++)
        if (ids[k] < 0 || places[ids[k]][0]) kept[m++] = ids[k];
#define SAME(x, y) ((x) >= 0 && (y) >= 0 && ((x) == (y) || !strcmp(places[x], places[y])))
    int64_t run_site = 0, run_count = 0;
    int have = 0; /* 0: no run, 1: a site's, 2: calls not known */
    for (int64_t k = 0; k <= m; k++) {
        int64_t s = k < m ? kept[k] : 0;
        if (k < m && s < 0 && k > 0 && k < m - 1 && SAME(kept[k - 1], kept[k + 1]) && have == 1) {
            run_count += -s;
            continue;
        }
        if (k < m && s >= 0 && have == 1 && SAME(run_site, s)) { run_count++; continue; }
        if (have == 1) {
            snprintf(num, sizeof num, " (%lld times)", (long long)run_count);
            put(&at, "\n  called from ", 15);
            put(&at, places[run_site], strlen(places[run_site]));
            if (run_count > 1) put(&at, num, strlen(num));
            put(&at, sites[run_site], strlen(sites[run_site]));
        } else if (have == 2) {
            int w = snprintf(num, sizeof num, "\n  ... %lld more call%s", (long long)run_count, run_count != 1 ? "s" : "");
            put(&at, num, (size_t)w);
        }
        if (k == m) break;
        if (s < 0) { have = 2; run_count = -s; }
        else { have = 1; run_site = s; run_count = 1; }
    }
#undef SAME
}

/* ------------------------------------------------------------ results */
/* A result's descriptor (`words`: allocated, aligned, offset, sizes, strides) as an array of its
 * own in `out`: into the caller's buffer where it gave one (its shape must be the result's),
 * else the buffer the call allocated where it is dense and no argument's or earlier result's,
 * else a copy. `taken` lists the buffers results own so far (`*ntaken` of them); `inputs` the
 * arguments' data. 0, or 1 after an error (its message set). */
typedef struct dg_array { void *data; int64_t rank; int64_t shape[8]; } dg_array;

static int owned_by(const void *p, void *const *list, int64_t n) {
    for (int64_t k = 0; k < n; k++)
        if (list[k] == p) return 1;
    return 0;
}

/* 0 where the caller gave no buffer for a result, or one of its shape; else 1 (the message set). */
DG_HIDDEN int dg__fits(const int64_t *words, int64_t rank, const dg_array *out, const char *name) {
    if (!out->data) return 0;
    int same = out->rank == rank;
    for (int64_t k = 0; same && k < rank; k++) same = out->shape[k] == words[3 + k];
    if (same) return 0;
    char shape[256];
    size_t at = 0;
    for (int64_t k = 0; k < rank && at < sizeof shape - 24; k++)
        at += (size_t)snprintf(shape + at, sizeof shape - at, k ? ", %lld" : "%lld", (long long)words[3 + k]);
    shape[at] = 0;
    dg__error("dg: error: the buffer given for result '%s' is not of the result's shape (%s): set its rank and "
              "shape, or its data to NULL to have the library allocate the result", name, shape);
    return 1;
}

DG_HIDDEN int dg__result(const int64_t *words, int64_t rank, int64_t item, dg_array *out, void *const *inputs,
                         int64_t ninputs, void **taken, int64_t *ntaken, const char *name) {
    void *alloc = (void *)words[0];
    char *at = (char *)words[1] + words[2] * item;
    const int64_t *sizes = words + 3, *strides = words + 3 + rank;
    int64_t n = 1, dense = 1, expect = 1;
    for (int64_t k = rank - 1; k >= 0; k--) {
        if (sizes[k] != 1 && strides[k] != expect) dense = 0;
        expect *= sizes[k];
        n *= sizes[k];
    }
    if (out->data) {
        if (n) dg__copy_strided(out->data, at, sizes, strides, rank, item);
        return 0;
    }
    out->rank = rank;
    for (int64_t k = 0; k < rank; k++) out->shape[k] = sizes[k];
    if (!n) { out->data = NULL; return 0; }
    if (alloc && dense && at == (char *)alloc && !owned_by(alloc, inputs, ninputs) && !owned_by(alloc, taken, *ntaken)) {
        taken[(*ntaken)++] = alloc;
        out->data = alloc;
        return 0;
    }
    out->data = malloc((size_t)(n * item));
    if (!out->data) { dg__error("dg: error: out of memory for result '%s'", name); return 1; }
    dg__copy_strided(out->data, at, sizes, strides, rank, item);
    return 0;
}

/* A scalar result, read into `out`. */
DG_HIDDEN void dg__scalar(const int64_t *words, int64_t item, void *out) {
    memcpy(out, (char *)words[1] + words[2] * item, (size_t)item);
}

/* What the call allocated that no result owns: freed. */
DG_HIDDEN void dg__release(const int64_t *res, const int64_t *offsets, int64_t nres, void *const *inputs,
                           int64_t ninputs, void **taken, int64_t *ntaken) {
    for (int64_t k = 0; k < nres; k++) {
        void *alloc = (void *)res[offsets[k]];
        if (alloc && !owned_by(alloc, inputs, ninputs) && !owned_by(alloc, taken, *ntaken)) {
            taken[(*ntaken)++] = alloc;
            free(alloc);
        }
    }
}

void dg_free(dg_array *a) {
    if (a) { free(a->data); a->data = NULL; }
}
