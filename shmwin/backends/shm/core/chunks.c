/* chunks.c -- a moving log's chunk heap (moving.c keeps the hits; this file, the memory that
 * follows them): chunks handed out, reserved, freed, given back when a row is emptied, and the
 * free list rebuilt by the repair of LOCK_CHUNKS.
 *
 * The heap lies after the rows (sparse, reserved as chunks are first handed out): a chunk is a
 * header (next chunk of its chain + 1, owner row + 1, 4 bytes each) and CHUNK_ENTRIES entries;
 * a row's chain word names its first chunk + 1 (0: none).
 *
 * Locks: LOCK_KEY_TABLE -> a row lock -> LOCK_CHUNKS, in that order only. Entries are written
 * under their key's row lock; chain words (a row's chain, a chunk's next and owner) and the
 * heap's words (chunks_top, chunks_reserved, chunk_free) change only under LOCK_CHUNKS, and a
 * chain word of a row only under its row lock too (the repair's cut of a junk chain aside).
 *
 * Invariant of the heap, between any two stores: every chunk below chunks_top is on the free
 * list, in exactly one row's chain (its owner that row), or -- inside "chunk_alloc" and
 * "chunk_free" -- in neither; never in both, never in two chains. A chunk in a chain may count
 * nothing (its hits expired): at the key's next counted hit its entries merge into the key's
 * one dead entry and it goes back, holding no hits; or when the key's row is emptied (clear,
 * reclaim, a rebuild's idle drops, the row's reuse).
 * Repair (LOCK_CHUNKS found owner-dead; "chunk_repair"): the free list is rebuilt from scratch:
 * every chunk reachable from a row's chain (rows below rows_top; at most the longest chain a
 * key can hold, and below chunks_top: a cycle, a junk index or a chunk of another owner cuts
 * the chain there) is kept, every other chunk below chunks_top goes on the free list. A chunk
 * a dead holder had taken but not yet published, or unlinked but not yet pushed, is so freed;
 * nothing counted is lost: entries are only in chains.
 *
 * Junk never reaches undefined behaviour: chain words are bounds-checked (below chunks_top, a
 * checked word, reserved) and their owner checked before a chunk is read; a chain longer than
 * a key can hold is a cycle. A junk chain is a CorruptSegmentError.
 */
#include "core.h"

#include <fcntl.h>
#include <sys/mman.h>

#ifdef MADV_POPULATE_WRITE
#define POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define POPULATE_WRITE 23  /* Linux 5.14+; older kernels answer EINVAL */
#endif

/* Chunks handed out, every one reserved: 0, or -1 with a CorruptSegmentError. */
int chunks_top(Core *c, int64_t *top) {
    int64_t t = load_state(c, CHUNKS_TOP_OFF, c->n_chunks, "chunks_top"), reserved;
    if (t < 0 || (reserved = load_state(c, CHUNKS_RESERVED_OFF, c->n_chunks, "chunks_reserved")) < 0) return -1;
    if (t > reserved) {
        PyErr_Format(c->st->corrupt, "window %R: its chunk heap hands out %lld chunks but reserved only %lld: "
                     "the segment is corrupt", c->name, (long long)t, (long long)reserved);
        return -1;
    }
    *top = t;
    return 0;
}

static int64_t junk_chain(Core *c, int64_t slot, int64_t v) {
    PyErr_Format(c->st->corrupt, "window %R: key row %lld's chain of hit times holds an impossible link %lld: "
                 "the segment is corrupt", c->name, (long long)slot, (long long)v);
    return -2;
}

/* The chunk a chain's link word value v names: its index, -1 at the chain's end, -2 junk (an
 * error set): out of the heap, another row's, or one step more than a key can hold (a cycle). */
int64_t chain_next(Core *c, int64_t slot, int64_t v, int64_t top, int64_t *steps) {
    if (v == 0) return -1;
    if (v < 0 || v > top || ++*steps > max_chain(c)) return junk_chain(c, slot, v);
    if (LOAD(cowner(chunk_at(c, v - 1))) != (uint32_t)(slot + 1)) return junk_chain(c, slot, v);
    return v - 1;
}

static int chunk_holds(char *ch) {
    for (int64_t j = 0; j < CHUNK_ENTRIES; j++)
        if (hits_of(LOAD(centries(ch) + j)) > 0) return 1;
    return 0;
}
/* ---- the chunk heap ---------------------------------------------------------------------------- */

/* Reserve chunks up to at least `need` (posix_fallocate: a full /dev/shm is an answer now,
 * never a SIGBUS later): 1, 0 if /dev/shm has no room (the caller merges: strict), -1 error.
 * Caller holds LOCK_CHUNKS. */
static int reserve_chunks(Core *c, int64_t have, int64_t need) {
    int64_t want = have + (have / 8 > 16 ? have / 8 : 16);
    if (want < need) want = need;
    if (want > c->n_chunks) want = c->n_chunks;
    int64_t from = c->chunks_off + have * CHUNK_BYTES, to = c->chunks_off + want * CHUNK_BYTES;
    from -= from % PAGE_BYTES;
    to = (to + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
    if (to > c->map_bytes) to = c->map_bytes;
    int err = NOSPACE_FOR_TEST() ? ENOSPC : posix_fallocate(c->fd, from, to - from);
    if (err == ENOSPC) return 0;
    if (err != 0) return space_error(c, err, "more hit times");
    (void)madvise(c->base + from, (size_t)(to - from), POPULATE_WRITE);
    store_state(c, CHUNKS_RESERVED_OFF, want);
    return 1;
}

/* Section "chunk_alloc": give the key of row `slot` a chunk of empty entries, first in its
 * chain: the free list's first, else the heap's next (reserved now). Caller holds the row
 * lock and LOCK_CHUNKS. 1 and *got, 0 if there is none (the heap at its end, or /dev/shm
 * full: the caller merges), -1 error.
 * Order: the chunk leaves the free list (or the heap's top grows) first -- it is then in no
 * chain and on no list -- its owner, next (the row's chain) and entries are written, and the
 * row's chain word publishes it last. A tear leaves the chunk in neither place: the repair
 * finds it unreachable and frees it; the key's entries are untouched. */
int alloc_chunk(Core *c, int64_t slot, int64_t *got) {
    int64_t top, head = LOAD(KEYWORD(c, CHUNK_FREE_OFF)), i, next_free = 0;
    int from_free = 0, drop_list = 0;
    if (chunks_top(c, &top) < 0) return -1;
    if (head > 0 && head <= top && LOAD(cowner(chunk_at(c, head - 1))) == 0) {
        i = head - 1;
        from_free = 1;
        next_free = LOAD(cnext(chunk_at(c, i)));
        if (next_free < 0 || next_free > top) next_free = 0;  /* junk: the rest is the repair's to find */
    } else {
        drop_list = head != 0;  /* junk: a head off the heap, or naming a held chunk */
        if (top >= c->n_chunks) return 0;
        int64_t reserved = load_state(c, CHUNKS_RESERVED_OFF, c->n_chunks, "chunks_reserved");
        if (reserved < 0) return -1;
        if (top >= reserved) {
            int rc = reserve_chunks(c, reserved, top + 1);
            if (rc <= 0) return rc;
        }
        i = top;
    }
    int64_t *st = mstate(c, ROW(c, slot));
    char *ch = chunk_at(c, i);
    SECTION("chunk_alloc");
    STORE(intent_at(c, LOCK_CHUNKS), slot);
    if (from_free) STORE(KEYWORD(c, CHUNK_FREE_OFF), next_free);
    else store_state(c, CHUNKS_TOP_OFF, i + 1);
    if (drop_list) STORE(KEYWORD(c, CHUNK_FREE_OFF), 0);
    STORE(cowner(ch), (uint32_t)(slot + 1));
    STORE(cnext(ch), (uint32_t)LOAD(st + MOVING_STATE_CHAIN));
    memset(centries(ch), 0, (size_t)CHUNK_ENTRIES * MOVING_ENTRY_BYTES);  /* no hits: counts nothing */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    FAILPOINT();
    STORE(st + MOVING_STATE_CHAIN, i + 1);  /* published */
    END_SECTION();
    *got = i;
    return 1;
}

/* Section "chunk_free": unlink from the chain of row `slot` every chunk holding no hits (`all`:
 * every chunk), and push each on the free list. Caller holds the row lock and LOCK_CHUNKS.
 * Order, chunk by chunk: the link before it skips it (it is then in no chain and on no list),
 * its owner is cleared, its next set to the free head, and the free head names it last. A
 * tear leaves one chunk in neither place: the repair frees it. Unless `all`, no chunk so
 * freed holds a hit, counting or not (a hit's dead entries were merged first: "moving_hit").
 * Returns the chunks freed, -1 error (a junk chain: the chunks before it were freed). */
int64_t free_chunks(Core *c, int64_t slot, int all) {
    int64_t *head = mstate(c, ROW(c, slot)) + MOVING_STATE_CHAIN, top, steps = 0, freed = 0;
    uint32_t *link = NULL;  /* the link naming the chunk looked at: the row's chain word, else a chunk's */
    if (chunks_top(c, &top) < 0) return -1;
    SECTION("chunk_free");
    STORE(intent_at(c, LOCK_CHUNKS), slot);
    for (;;) {
        int64_t i = chain_next(c, slot, link == NULL ? LOAD(head) : (int64_t)LOAD(link), top, &steps);
        if (i == -1) break;
        if (i == -2) {
            freed = -1;
            break;
        }
        char *ch = chunk_at(c, i);
        if (!all && chunk_holds(ch)) {
            link = cnext(ch);
            continue;
        }
        if (link == NULL) STORE(head, (int64_t)LOAD(cnext(ch)));  /* unlinked */
        else STORE(link, LOAD(cnext(ch)));
        STORE(cowner(ch), 0);
        STORE(cnext(ch), (uint32_t)LOAD(KEYWORD(c, CHUNK_FREE_OFF)));
        STORE(KEYWORD(c, CHUNK_FREE_OFF), i + 1);  /* free */
        freed++;
    }
    END_SECTION();
    return freed;
}

/* A row being emptied (empty_rings: its key inserted, cleared, reclaimed, dropped idle by a
 * rebuild, or every row by reset): its entries count nothing, and its chunks go back to the
 * free list. Caller holds the row lock (and LOCK_KEY_TABLE, so LOCK_CHUNKS comes after it:
 * in order), or every lock (reset: all_held). If LOCK_CHUNKS cannot be had (a timeout),
 * the chunks stay in the row's chain with their hits zeroed: the next key of the row uses
 * them, nothing is counted twice, nothing leaks. Errors are cleared: a junk chain is cut. */
void moving_empty(Core *c, char *row, int64_t slot) {
    int64_t *st = mstate(c, row);
    for (int64_t j = 0; j < MOVING_INLINE; j++) STORE(inline_at(st) + j, 0);
    if (LOAD(st + MOVING_STATE_CHAIN) == 0) return;
    if (c->all_held || lock_take(c, LOCK_CHUNKS) == 0) {
        if (free_chunks(c, slot, 1) < 0) {
            PyErr_Clear();
            STORE(st + MOVING_STATE_CHAIN, 0);  /* junk: cut; what it named is the repair's to find */
        }
        if (!c->all_held) lock_give(c, LOCK_CHUNKS);
        return;
    }
    PyErr_Clear();
    int64_t top, steps = 0;
    if (chunks_top(c, &top) < 0) {
        PyErr_Clear();
        return;
    }
    for (int64_t i = chain_next(c, slot, LOAD(st + MOVING_STATE_CHAIN), top, &steps); i >= 0;
         i = chain_next(c, slot, LOAD(cnext(chunk_at(c, i))), top, &steps))
        for (int64_t j = 0; j < CHUNK_ENTRIES; j++) STORE(centries(chunk_at(c, i)) + j, 0);
    PyErr_Clear();
}

/* Section "chunk_repair" -- the repair of LOCK_CHUNKS (locks.c), whose holder died inside
 * "chunk_alloc" or "chunk_free": the free list rebuilt from the chains (see the invariant at
 * the top). Bounded by rows_top x the longest chain + chunks_top. */
void repair_chunks(Core *c) {
    int64_t top, rows, head = 0;
    if (chunks_top(c, &top) < 0 || rows_top(c, &rows) < 0) {
        PyErr_Clear();  /* reported to the next caller */
        return;
    }
    unsigned char *held = PyMem_Calloc((size_t)(top > 0 ? top : 1), 1);
    if (held == NULL) {
        PyErr_Clear();
        return;
    }
    SECTION("chunk_repair");
    STORE(intent_at(c, LOCK_CHUNKS), -1);
    for (int64_t r = 0; r < rows; r++) {
        int64_t *chain = mstate(c, ROW(c, r)) + MOVING_STATE_CHAIN, steps = 0;
        uint32_t *link = NULL;  /* the link after the row's chain word: a chunk's */
        for (int64_t v = LOAD(chain); v != 0; v = LOAD(link)) {
            if (v < 0 || v > top || held[v - 1] || ++steps > max_chain(c) ||
                LOAD(cowner(chunk_at(c, v - 1))) != (uint32_t)(r + 1)) {
                if (link == NULL) STORE(chain, 0);  /* junk, a cycle, or another chain's: the chain ends here */
                else STORE(link, 0);
                break;
            }
            held[v - 1] = 1;
            link = cnext(chunk_at(c, v - 1));
        }
    }
    for (int64_t i = top - 1; i >= 0; i--) {
        if (held[i]) continue;
        char *ch = chunk_at(c, i);
        if (LOAD(cowner(ch)) != 0) STORE(cowner(ch), 0);
        STORE(cnext(ch), (uint32_t)head);
        head = i + 1;
    }
    STORE(KEYWORD(c, CHUNK_FREE_OFF), head);
    END_SECTION();
    PyMem_Free(held);
}

/* moving_chunks() -> (chunks handed out, of them on the free list, reserved, the heap's size),
 * under LOCK_CHUNKS: what the tests and tools see of the heap. */
PyObject *Core_moving_chunks(Core *c, PyObject *Py_UNUSED(ignored)) {
    PyObject *result = NULL;
    int64_t top, listed = 0;
    if (enter(c) < 0) return NULL;
    if (lock_take_ex(c, LOCK_CHUNKS, 1) < 0) goto out;
    if (chunks_top(c, &top) == 0) {
        for (int64_t v = LOAD(KEYWORD(c, CHUNK_FREE_OFF)); v > 0 && v <= top && listed < top;
             v = LOAD(cnext(chunk_at(c, v - 1))))
            listed++;
        result = Py_BuildValue("(LLLL)", (long long)top, (long long)listed,
                               (long long)((uint64_t)LOAD(KEYWORD(c, CHUNKS_RESERVED_OFF)) & 0xFFFFFFFFu), (long long)c->n_chunks);
    }
    lock_give(c, LOCK_CHUNKS);
out:
    leave(c);
    return result;
}
