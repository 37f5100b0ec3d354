/* space.c -- the memory a key table grows into: the heap's rows and the index's copies are
 * reserved (posix_fallocate) before they are written, so that a full /dev/shm is an error
 * now (OutOfSpaceError), never a SIGBUS later; replaced index copies give their pages back.
 *
 * Called by index.c under LOCK_KEY_TABLE; threads.c's reserver prefetches a large heap's
 * next rows.
 */
#include "core.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE_OR_NONE MADV_POPULATE_WRITE
#else
#define MADV_POPULATE_WRITE_OR_NONE 23  /* Linux 5.14+; older kernels answer EINVAL */
#endif


int space_error(Core *c, int err, const char *what) {
    PyObject *msg = PyUnicode_FromFormat("no room in /dev/shm for %s in window %R (%s): free some "
                                         "space, or give the window a capacity and an on_full policy",
                                         what, c->name, strerror(err));
    PyObject *args = msg ? Py_BuildValue("(iN)", err, msg) : NULL;
    if (args != NULL) {
        PyErr_SetObject(c->st->space, args);
        Py_DECREF(args);
    }
    return -1;
}

/* The heap's next size after `have` rows: half again (at least 8) while small, then a
 * 32nd, with the next 32nd prefetched by the reserver. */
static int64_t grown(Core *c, int64_t have) {
    /* large tables grow by a 32nd (and the next is prefetched): at most a 16th of the
     * rows held is reserved ahead of the keys */
    int64_t want = have + (have >= AHEAD_MIN_ROWS ? have / 32 : have / 2 > 8 ? have / 2 : 8);
    return want > c->n_rows ? c->n_rows : want;
}

/* Rows [from, to) as page-aligned byte offsets in the segment; 0 <= from <= to <= n_rows
 * (from checked words only), so no product passes the mapping's size. */
static void row_pages(Core *c, int64_t from, int64_t to, int64_t *lo, int64_t *hi) {
    *lo = c->rows_off + from * c->row_bytes;
    *hi = c->rows_off + to * c->row_bytes;
    *lo -= *lo % PAGE_BYTES;
    *hi = (*hi + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
    if (*hi > c->map_bytes) *hi = c->map_bytes;
}

/* Reserve heap rows up to at least `need` (posix_fallocate: a full /dev/shm is an error now,
 * never a SIGBUS later), unless the reserver already did. */
static int reserve_rows(Core *c, int64_t have, int64_t need) {
    int64_t want = grown(c, have), from, to;
    if (want < need) want = need > c->n_rows ? c->n_rows : need;
    row_pages(c, have, want, &from, &to);
    if (NOSPACE_FOR_TEST()) return space_error(c, ENOSPC, "more keys");
    if (!reserved_ahead(c, from, to)) {
        int err = posix_fallocate(c->fd, from, to - from);
        if (err != 0) return space_error(c, err, "more keys");
        /* Map the new rows into this process in one call rather than one fault per page
         * (Linux 5.14+; elsewhere, or if it fails, the pages simply fault in as touched). */
        (void)madvise(c->base + from, (size_t)(to - from), MADV_POPULATE_WRITE_OR_NONE);
    }
    store_state(c, ROWS_RESERVED_OFF, want);
    if (want >= AHEAD_MIN_ROWS && want < c->n_rows) {
        row_pages(c, want, grown(c, want), &from, &to);
        reserve_ahead(c, from, to);
    }
    return 0;
}

/* An index copy's bytes in the segment, page-aligned. */
static void index_pages(Core *c, const Index *x, int64_t *lo, int64_t *hi) {
    *lo = (char *)x->base - c->base;
    *hi = *lo + x->slots * KEY_ENTRY_BYTES;
    *lo -= *lo % PAGE_BYTES;
}

/* Reserve the memory of an index copy before writing it. */
int reserve_index(Core *c, const Index *x) {
    int64_t from, to;
    index_pages(c, x, &from, &to);
    int err = NOSPACE_FOR_TEST() ? ENOSPC : posix_fallocate(c->fd, from, to - from);
    if (err != 0) return space_error(c, err, "a larger key index");
    (void)madvise(c->base + from, (size_t)(to - from), MADV_POPULATE_WRITE_OR_NONE);  /* as rows */
    return 0;
}

/* Give back the memory of every index copy but `keep` (the published one): only whole pages
 * inside a copy, so no neighbour is touched. A copy is reserved again (reserve_index) before
 * it is next written. Called under LOCK_KEY_TABLE (punch_replaced). */
static void punch_stale(Core *c, int64_t keep) {
    for (int64_t id = 0; id < 2 * c->index_levels; id++) {
        if (id == keep) continue;
        Index x = index_copy(c, id);
        int64_t lo = (char *)x.base - c->base, hi = lo + x.slots * KEY_ENTRY_BYTES;
        lo = (lo + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
        hi -= hi % PAGE_BYTES;
        if (hi > lo) (void)fallocate(c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, lo, hi - lo);
    }
}

int take_row(Core *c, int64_t *r, int *from_free) {
    int64_t head = LOAD(KEYWORD(c, FREE_HEAD_OFF)), top;
    if (rows_top(c, &top) < 0) return -1;
    if (head > 0 && head <= top) {  /* a junk head abandons the free list, never strays */
        *r = head - 1;
        *from_free = 1;
        return 0;
    }
    if (top >= c->n_rows) {
        PyErr_Format(c->st->full, "window %R has handed out all %lld rows", c->name, (long long)c->n_rows);
        return -1;
    }
    /* top <= reserved (rows_top checked it): the heap grows one step past what it holds */
    int64_t reserved = load_state(c, ROWS_RESERVED_OFF, c->n_rows, "rows_reserved");
    if (reserved < 0 || (top >= reserved && reserve_rows(c, reserved, top + 1) < 0)) return -1;
    *r = top;
    *from_free = 0;
    return 0;
}

/* The copies a rebuild replaced give their pages back once the new one has been published
 * for a second of the inserter's clock (the caller's now: a test's manual clock, the wall
 * clock of shm://, else the host's monotonic clock): at the next insert, once per rebuild and
 * process. A lookup that loaded the old descriptor has long finished with it. One that has
 * not -- stalled a second mid-probe, or a wall clock stepped forward meanwhile -- reads zeros,
 * "never used", and a hit then looks again under LOCK_KEY_TABLE; on a /dev/shm full at that
 * moment its read of the hole would be a SIGBUS: the price of not keeping two or three idle
 * copies of the index (42 bytes a key at 100,000 keys). Caller holds LOCK_KEY_TABLE. */
void punch_replaced(Core *c, int64_t now) {
    int64_t at = LOAD(KEYWORD(c, REBUILT_NS_OFF)), since;
    Index x;
    if (at == c->punched_ns || __builtin_sub_overflow(now, at, &since) || since < NS) return;
    if (current_index(c, &x) < 0) {
        PyErr_Clear();  /* reported by the lookups that follow */
        return;
    }
    punch_stale(c, x.index);
    c->punched_ns = at;
}
