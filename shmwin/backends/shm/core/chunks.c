/* chunks.c -- a moving log's chunk heap (moving.c keeps the hits; this file, the memory that
 * follows them): chunks handed out, reserved, freed, given back when a row is emptied, and the
 * free list rebuilt by the repair of LOCK_CHUNKS.
 *
 * The heap lies after the rows (sparse, reserved as chunks are first handed out): a chunk is a
 * header (next chunk of its chain + 1, owner row + 1, 4 bytes each) and CHUNK_ENTRIES entries.
 * A chain runs from a key's oldest chunk to its newest; a row's chain word names both (and
 * where the key's run of entries starts and ends: moving.c), one store publishing any change.
 *
 * Locks: LOCK_KEY_TABLE -> a row lock -> LOCK_CHUNKS, in that order only. Entries are written
 * under their key's row lock; chain words (a row's chain, a chunk's next and owner) and the
 * heap's words (chunks_top, chunks_reserved, chunk_free) change only under LOCK_CHUNKS, and a
 * chain word of a row only under its row lock too (the repair's cut of a junk chain aside).
 *
 * Invariant of the heap, between any two stores: every chunk below chunks_top is on the free
 * list, in exactly one row's chain (its owner that row; a chain reaches from the chain word's
 * oldest chunk to its newest, and a chunk linked past the newest is in it too until the
 * repair cuts it off), or -- inside "chunk_alloc" and "chunk_free" -- in neither; never in
 * both, never in two chains. A chunk in a chain may count nothing (its hits expired): the
 * key's next hit or read keeps them as one dead entry and gives the chunks before it back,
 * from the oldest end; or the key's row is emptied (clear, reclaim, a rebuild's idle drops,
 * the row's reuse).
 * Repair (LOCK_CHUNKS found owner-dead; "chunk_repair"): the free list is rebuilt from scratch:
 * every chunk a row's chain word reaches, oldest to newest (rows below rows_top; at most the
 * longest chain a key can hold, and below chunks_top: a cycle, a junk index, a chunk of
 * another owner or a chain that ends before its newest cuts the chain there, and the chain
 * word's newest follows), is kept, every other chunk below chunks_top goes on the free list.
 * A chunk a dead holder had taken but not yet published (linked past the newest: cut off), or
 * unlinked but not yet pushed, is so freed; nothing counted is lost: entries counted are only
 * in the runs the chain words describe.
 *
 * Junk never reaches undefined behaviour: chain words are bounds-checked (below chunks_top, a
 * checked word, reserved) and their owner checked before a chunk is read; a chain longer than
 * a key can hold is a cycle. A junk chain is a CorruptSegmentError.
 */
#include "moving.h"

#include <fcntl.h>
#include <sys/mman.h>

#ifdef MADV_POPULATE_WRITE
#define POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define POPULATE_WRITE 23  /* Linux 5.14+; older kernels answer EINVAL */
#endif

/* Chunks handed out, every one reserved (words.c, heap_top): 0, or -1 with a CorruptSegmentError. */
int chunks_top(Core *c, int64_t *top) {
    static const HeapWords chunks = {CHUNKS_TOP_OFF, CHUNKS_RESERVED_OFF, "chunks_top", "chunks_reserved",
                                     "chunk heap", "chunks"};
    return heap_top(c, &chunks, c->n_chunks, top);
}

int64_t junk_chain(Core *c, int64_t slot, int64_t v) {
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

/* Section "chunk_alloc": give the key of row `slot` a chunk holding `words`, newest in its
 * chain, the key's inline entries out of its run (moving.c copied them into `words`). Caller
 * holds the row lock and LOCK_CHUNKS. The free list's first chunk, else the heap's next
 * (reserved now). 1 and *got, 0 if there is none (the heap at its end, or /dev/shm full: the
 * caller joins the hit to the newest entry: strict), -1 error.
 * Order: the chunk leaves the free list (or the heap's top grows) first -- it is then in no
 * chain and on no list -- its owner, next (none) and entries are written, the newest chunk
 * links it (in the chain, past the run's end: counting nothing), and the chain word publishes
 * it last, as the run's newest chunk with no entries inline. A tear before the link leaves the
 * chunk in neither place, after it linked past the newest: the repair frees it; the key's run
 * is untouched until the chain word's store, which moves its inline entries (copied first)
 * into the chunk in one store. */
int append_chunk(Core *c, int64_t slot, const int64_t words[CHUNK_ENTRIES], int64_t *got) {
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
    Shape sh = shape_of(LOAD(st + MOVING_STATE_CHAIN));
    char *ch = chunk_at(c, i);
    SECTION("chunk_alloc");
    STORE(intent_at(c, LOCK_CHUNKS), slot);
    if (from_free) STORE(KEYWORD(c, CHUNK_FREE_OFF), next_free);
    else store_state(c, CHUNKS_TOP_OFF, i + 1);
    if (drop_list) STORE(KEYWORD(c, CHUNK_FREE_OFF), 0);
    STORE(cowner(ch), (uint32_t)(slot + 1));
    STORE(cnext(ch), 0u);
    for (int64_t j = 0; j < CHUNK_ENTRIES; j++) STORE(centries(ch) + j, words[j]);
    if (sh.last >= 0) STORE(cnext(chunk_at(c, sh.last)), (uint32_t)(i + 1));  /* linked, past the run */
    Shape now = {sh.first >= 0 ? sh.first : i, i, sh.first >= 0 ? sh.tail : 0, 0};
    STORE(st + MOVING_STATE_CHAIN, shape_word(&now));  /* published: the run's newest chunk */
    END_SECTION();
    *got = i;
    return 1;
}

/* Section "chunk_free": the chain word of row `slot` becomes `shape`, whose run starts past
 * the key's `count` oldest chunks (count < 0: every chunk; moving.c walked them, and they hold
 * nothing the run still counts), and each goes on the free list, oldest first. Caller holds
 * the row lock and LOCK_CHUNKS (or every lock). Order: the chain word drops them (they are
 * then in no chain and on no list), then, chunk by chunk, its owner is cleared, its next set
 * to the free head, and the free head names it last. A tear leaves chunks in neither place:
 * the repair frees them. A junk link stops the pushes (an error set): the repair finds the
 * rest. */
void unlink_chunks(Core *c, int64_t slot, int64_t count, int64_t shape) {
    int64_t *chain = mstate(c, ROW(c, slot)) + MOVING_STATE_CHAIN, top, steps = 0;
    Shape old = shape_of(LOAD(chain));
    if (chunks_top(c, &top) < 0) return;
    SECTION("chunk_free");
    STORE(intent_at(c, LOCK_CHUNKS), slot);
    STORE(chain, shape);  /* unlinked */
    int64_t i = old.first >= 0 ? chain_next(c, slot, old.first + 1, top, &steps) : -1;
    for (int64_t k = 0; i >= 0 && k != count; k++) {
        char *ch = chunk_at(c, i);
        int64_t next = i == old.last ? -1 : chain_next(c, slot, LOAD(cnext(ch)), top, &steps);
        STORE(cowner(ch), 0u);
        STORE(cnext(ch), (uint32_t)LOAD(KEYWORD(c, CHUNK_FREE_OFF)));
        STORE(KEYWORD(c, CHUNK_FREE_OFF), i + 1);  /* free */
        i = next;
    }
    END_SECTION();
}

/* A row being emptied (empty_rings: its key inserted, cleared, reclaimed, dropped idle by a
 * rebuild, or every row by reset): its entries count nothing, and its chunks go back to the
 * free list. Caller holds the row lock (and LOCK_KEY_TABLE, so LOCK_CHUNKS comes after it:
 * in order), or every lock (reset: all_held). If LOCK_CHUNKS cannot be had (a timeout),
 * the chunks stay in the row's run with their hits zeroed: the next key of the row walks past
 * them and gives them back, nothing is counted twice, nothing leaks. Errors are cleared: a
 * junk chain is cut. */
void moving_empty(Core *c, char *row, int64_t slot) {
    int64_t *st = mstate(c, row), word = LOAD(st + MOVING_STATE_CHAIN);
    for (int64_t j = 0; j < MOVING_INLINE; j++) STORE(inline_at(st) + j, 0);
    STORE(st + MOVING_STATE_RUN, 0);
    Shape sh = shape_of(word);
    if (sh.first < 0 || shape_junk(word)) {
        if (word != 0) STORE(st + MOVING_STATE_CHAIN, 0);  /* junk: cut; what it named is the repair's to find */
        return;
    }
    if (c->all_held || lock_take(c, LOCK_CHUNKS) == 0) {
        unlink_chunks(c, slot, -1, 0);
        PyErr_Clear();
        if (!c->all_held) lock_give(c, LOCK_CHUNKS);
        return;
    }
    PyErr_Clear();
    int64_t top, steps = 0;
    if (chunks_top(c, &top) < 0) {
        PyErr_Clear();
        return;
    }
    for (int64_t i = chain_next(c, slot, sh.first + 1, top, &steps); i >= 0;
         i = i == sh.last ? -1 : chain_next(c, slot, LOAD(cnext(chunk_at(c, i))), top, &steps))
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
        int64_t *chain = mstate(c, ROW(c, r)) + MOVING_STATE_CHAIN, word = LOAD(chain), steps = 0, prev = -1;
        Shape sh = shape_of(word);
        if (sh.first < 0 || shape_junk(word)) continue;  /* no chunk, or junk: the row's next hit refuses it */
        int64_t v = sh.first + 1;
        for (; v != 0; v = LOAD(cnext(chunk_at(c, v - 1)))) {
            if (v < 0 || v > top || held[v - 1] || ++steps > max_chain(c) ||
                LOAD(cowner(chunk_at(c, v - 1))) != (uint32_t)(r + 1))
                break;  /* junk, a cycle, or another chain's: the chain ends before it */
            held[v - 1] = 1;
            prev = v - 1;
            if (prev == sh.last) break;
        }
        if (prev == sh.last) {
            if (LOAD(cnext(chunk_at(c, prev))) != 0) STORE(cnext(chunk_at(c, prev)), 0u);  /* linked past the newest: off */
            continue;
        }
        Shape cut = {prev >= 0 ? sh.first : -1, prev, prev >= 0 ? sh.tail : 0, sh.inl};
        if (prev >= 0) STORE(cnext(chunk_at(c, prev)), 0u);
        STORE(chain, shape_word(&cut));  /* the chain ends where it was found whole */
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
