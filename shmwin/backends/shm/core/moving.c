/* moving.c -- limits' moving window on shm://: each key's hit times, exactly, in memory that
 * follows the hits a key holds.
 *
 * Role "moving-log" (layout_words.py: MOVING_STATE, CHUNK): a keyed window of one log ring --
 * the period P, at most n = min(limit, times) entries a key, the limit L -- whose rows hold,
 * after the key header, `chain` (the key's first chunk + 1, 0: none) and MOVING_INLINE
 * entries (t ns, hits). More entries live in chunks of the segment's chunk heap (after the
 * rows; sparse, reserved as chunks are first handed out): a chunk is a header (next chunk of
 * its chain + 1, owner row + 1) and CHUNK_ENTRIES entries. An entry counts while hits > 0 and
 * t >= now - P (limits' memory storage's moving window, and a log ring's: rings.c): a hit is
 * forgotten 1 ns after P has passed.
 *
 * Locks: LOCK_KEY_TABLE -> a row lock -> LOCK_CHUNKS, in that order only. Entries are written
 * under their key's row lock; chain words (a row's chain, a chunk's next and owner) and the
 * heap's words (chunks_top, chunks_reserved, chunk_free) change only under LOCK_CHUNKS, and a
 * chain word of a row only under its row lock too (the repair's cut of a junk chain aside).
 *
 * Invariant of the heap, between any two stores: every chunk below chunks_top is on the free
 * list, in exactly one row's chain (its owner that row), or -- inside "chunk_alloc" and
 * "chunk_free" -- in neither; never in both, never in two chains. A chunk in a chain may count
 * nothing (its hits expired): it goes back lazily, at the key's next counted hit, or when the
 * key's row is emptied (clear, reclaim, a rebuild's idle drops, the row's reuse).
 * Repair (LOCK_CHUNKS found owner-dead; "chunk_repair"): the free list is rebuilt from scratch:
 * every chunk reachable from a row's chain (rows below rows_top; at most the longest chain a
 * key can hold, and below chunks_top: a cycle, a junk index or a chunk of another owner cuts
 * the chain there) is kept, every other chunk below chunks_top goes on the free list. A chunk
 * a dead holder had taken but not yet published, or unlinked but not yet pushed, is so freed;
 * nothing counted is lost: entries are only in chains.
 *
 * Junk never reaches undefined behaviour: chain words are bounds-checked (below chunks_top, a
 * checked word, reserved) and their owner checked before a chunk is read; a chain longer than
 * a key can hold is a cycle. A junk chain is a CorruptSegmentError. Hit counts saturate.
 */
#include "core.h"

#include <fcntl.h>
#include <sys/mman.h>

#ifdef MADV_POPULATE_WRITE
#define POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define POPULATE_WRITE 23  /* Linux 5.14+; older kernels answer EINVAL */
#endif

#define ENTRY_WORDS (LOG_ENTRY_BYTES / WORD_BYTES)
#define INLINE_W (MOVING_STATE_ENTRIES_OFF / WORD_BYTES)
#define CHUNK_W (CHUNK_ENTRIES_OFF / WORD_BYTES)

static int64_t *mstate(Core *c, char *row) { return (int64_t *)(row + c->rings_off); }
static int64_t *chunk_at(Core *c, int64_t i) { return (int64_t *)(c->base + c->chunks_off + i * CHUNK_BYTES); }
static int64_t period(Core *c) { return c->rings[0].bucket_ns; }
static int64_t max_entries(Core *c) { return c->rings[0].n; }  /* n = min(limit, times) */
static int64_t inline_entries(Core *c) { return max_entries(c) < MOVING_INLINE ? max_entries(c) : MOVING_INLINE; }

/* The longest chain a key can hold: a chunk is taken only when every entry counts and fewer
 * than n do, so a key holds at most ceil((n - MOVING_INLINE) / CHUNK_ENTRIES) chunks. */
static int64_t max_chain(Core *c) {
    int64_t extra = max_entries(c) - MOVING_INLINE;
    return extra > 0 ? (extra + CHUNK_ENTRIES - 1) / CHUNK_ENTRIES : 0;
}

static int counts(Core *c, int64_t t, int64_t hits, int64_t now) {
    return hits > 0 && t >= now - period(c);  /* a time ahead of now (a clock behind) counts */
}

/* Is this Core a moving log: a keyed window of one log ring whose rows hold its state? */
static int is_moving(Core *c) {
    if (IS_MOVING(c) && c->keyed && !c->limiter && c->n_rings == 1 && c->rings[0].log &&
        c->empty_bytes >= MOVING_STATE_BYTES && c->rings[0].bucket_ns <= MAX_SPAN_NS)
        return 0;
    PyErr_Format(PyExc_ValueError, "window %R is not a moving-log segment", c->name);
    return -1;
}

/* Chunks handed out, every one reserved: 0, or -1 with a CorruptSegmentError. */
static int chunks_top(Core *c, int64_t *top) {
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
static int64_t chain_next(Core *c, int64_t slot, int64_t v, int64_t top, int64_t *steps) {
    if (v == 0) return -1;
    if (v < 0 || v > top || ++*steps > max_chain(c)) return junk_chain(c, slot, v);
    if (LOAD(chunk_at(c, v - 1) + CHUNK_OWNER) != slot + 1) return junk_chain(c, slot, v);
    return v - 1;
}

/* ---- the scan: what a key's entries count at now, and where a new hit goes ------------------ */

typedef struct {
    int64_t used, live;        /* hits counted (saturating), entries counting */
    int64_t *free_e;           /* an entry counting nothing: inline first, then the chain's */
    int64_t free_chunk;        /* the chunk holding free_e; -1: inline, or none */
    int64_t *oldest, *second;  /* the two oldest counting entries */
    int64_t t_oldest, t_second;
    int64_t chunks, dead;      /* chunks in the chain; of them, those counting nothing */
} Scan;

static int scan_entry(Core *c, int64_t *e, int64_t now, int64_t chunk, Scan *s) {
    int64_t t = LOAD(e + LOG_TIME), hits = LOAD(e + LOG_HITS);
    if (!counts(c, t, hits, now)) {
        if (s->free_e == NULL) s->free_e = e, s->free_chunk = chunk;
        return 0;
    }
    s->live++;
    s->used = hits > INT64_MAX - s->used ? INT64_MAX : s->used + hits;
    if (s->oldest == NULL || t < s->t_oldest) {
        s->second = s->oldest, s->t_second = s->t_oldest;
        s->oldest = e, s->t_oldest = t;
    } else if (s->second == NULL || t < s->t_second) {
        s->second = e, s->t_second = t;
    }
    return 1;
}

/* Scan the key of row `slot` at now. Caller holds the row lock. 0, or -1 with an error. */
static int scan(Core *c, int64_t slot, int64_t now, Scan *s) {
    int64_t *st = mstate(c, ROW(c, slot)), top, steps = 0;
    memset(s, 0, sizeof *s);
    s->free_chunk = -1;
    for (int64_t j = 0; j < inline_entries(c); j++) scan_entry(c, st + INLINE_W + j * ENTRY_WORDS, now, -1, s);
    if (LOAD(st + MOVING_STATE_CHAIN) == 0) return 0;
    if (chunks_top(c, &top) < 0) return -1;
    for (int64_t i = chain_next(c, slot, LOAD(st + MOVING_STATE_CHAIN), top, &steps); i != -1;
         i = chain_next(c, slot, LOAD(chunk_at(c, i) + CHUNK_NEXT), top, &steps)) {
        if (i == -2) return -1;
        int64_t *ch = chunk_at(c, i), any = 0;
        for (int64_t j = 0; j < CHUNK_ENTRIES; j++) any |= scan_entry(c, ch + CHUNK_W + j * ENTRY_WORDS, now, i, s);
        s->chunks++;
        if (!any) s->dead++;
    }
    return 0;
}

static int chunk_counts(Core *c, int64_t *ch, int64_t now) {
    for (int64_t j = 0; j < CHUNK_ENTRIES; j++) {
        int64_t *e = ch + CHUNK_W + j * ENTRY_WORDS;
        if (counts(c, LOAD(e + LOG_TIME), LOAD(e + LOG_HITS), now)) return 1;
    }
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
static int alloc_chunk(Core *c, int64_t slot, int64_t *got) {
    int64_t top, head = LOAD(KEYWORD(c, CHUNK_FREE_OFF)), i, next_free = 0;
    int from_free = 0, drop_list = 0;
    if (chunks_top(c, &top) < 0) return -1;
    if (head > 0 && head <= top && LOAD(chunk_at(c, head - 1) + CHUNK_OWNER) == 0) {
        i = head - 1;
        from_free = 1;
        next_free = LOAD(chunk_at(c, i) + CHUNK_NEXT);
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
    int64_t *st = mstate(c, ROW(c, slot)), *ch = chunk_at(c, i);
    SECTION("chunk_alloc");
    STORE(intent_at(c, LOCK_CHUNKS), slot);
    if (from_free) STORE(KEYWORD(c, CHUNK_FREE_OFF), next_free);
    else store_state(c, CHUNKS_TOP_OFF, i + 1);
    if (drop_list) STORE(KEYWORD(c, CHUNK_FREE_OFF), 0);
    STORE(ch + CHUNK_OWNER, slot + 1);
    STORE(ch + CHUNK_NEXT, LOAD(st + MOVING_STATE_CHAIN));
    memset(ch + CHUNK_W, 0, (size_t)CHUNK_ENTRIES * LOG_ENTRY_BYTES);  /* no hits: counts nothing */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    FAILPOINT();
    STORE(st + MOVING_STATE_CHAIN, i + 1);  /* published */
    END_SECTION();
    *got = i;
    return 1;
}

/* Section "chunk_free": unlink from the chain of row `slot` every chunk counting nothing at
 * now (`all`: every chunk) but `keep`, and push each on the free list. Caller holds the row
 * lock and LOCK_CHUNKS. Order, chunk by chunk: the link before it skips it (it is then in no
 * chain and on no list), its owner is cleared, its next set to the free head, and the free
 * head names it last. A tear leaves one chunk in neither place: the repair frees it. The
 * key's counting entries are never in a chunk so freed. Returns the chunks freed, -1 error
 * (a junk chain: the chunks before it were freed). */
static int64_t free_chunks(Core *c, int64_t slot, int64_t now, int64_t keep, int all) {
    int64_t *link = mstate(c, ROW(c, slot)) + MOVING_STATE_CHAIN, top, steps = 0, freed = 0;
    if (chunks_top(c, &top) < 0) return -1;
    SECTION("chunk_free");
    STORE(intent_at(c, LOCK_CHUNKS), slot);
    for (;;) {
        int64_t i = chain_next(c, slot, LOAD(link), top, &steps);
        if (i == -1) break;
        if (i == -2) {
            freed = -1;
            break;
        }
        int64_t *ch = chunk_at(c, i);
        if (i == keep || (!all && chunk_counts(c, ch, now))) {
            link = ch + CHUNK_NEXT;
            continue;
        }
        STORE(link, LOAD(ch + CHUNK_NEXT));  /* unlinked */
        STORE(ch + CHUNK_OWNER, 0);
        STORE(ch + CHUNK_NEXT, LOAD(KEYWORD(c, CHUNK_FREE_OFF)));
        STORE(KEYWORD(c, CHUNK_FREE_OFF), i + 1);  /* free */
        freed++;
    }
    END_SECTION();
    return freed;
}

/* A row being emptied (empty_rings: its key inserted, cleared, reclaimed, dropped idle by a
 * rebuild, or every row by reset): its entries count nothing, and its chunks go back to the
 * free list. Caller holds the row lock (and LOCK_KEY_TABLE, so LOCK_CHUNKS comes after it:
 * in order), or every lock (reset: chunks_held). If LOCK_CHUNKS cannot be had (a timeout),
 * the chunks stay in the row's chain with their hits zeroed: the next key of the row uses
 * them, nothing is counted twice, nothing leaks. Errors are cleared: a junk chain is cut. */
void moving_empty(Core *c, char *row, int64_t slot) {
    int64_t *st = mstate(c, row);
    for (int64_t j = 0; j < MOVING_INLINE; j++) STORE(st + INLINE_W + j * ENTRY_WORDS + LOG_HITS, 0);
    if (LOAD(st + MOVING_STATE_CHAIN) == 0) return;
    if (c->chunks_held || lock_take(c, LOCK_CHUNKS) == 0) {
        if (free_chunks(c, slot, 0, -1, 1) < 0) {
            PyErr_Clear();
            STORE(st + MOVING_STATE_CHAIN, 0);  /* junk: cut; what it named is the repair's to find */
        }
        if (!c->chunks_held) lock_give(c, LOCK_CHUNKS);
        return;
    }
    PyErr_Clear();
    int64_t top, steps = 0;
    if (chunks_top(c, &top) < 0) {
        PyErr_Clear();
        return;
    }
    for (int64_t i = chain_next(c, slot, LOAD(st + MOVING_STATE_CHAIN), top, &steps); i >= 0;
         i = chain_next(c, slot, LOAD(chunk_at(c, i) + CHUNK_NEXT), top, &steps))
        for (int64_t j = 0; j < CHUNK_ENTRIES; j++) STORE(chunk_at(c, i) + CHUNK_W + j * ENTRY_WORDS + LOG_HITS, 0);
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
        int64_t *link = mstate(c, ROW(c, r)) + MOVING_STATE_CHAIN, steps = 0;
        for (int64_t v = LOAD(link); v != 0; v = LOAD(link)) {
            if (v < 0 || v > top || held[v - 1] || ++steps > max_chain(c) ||
                LOAD(chunk_at(c, v - 1) + CHUNK_OWNER) != r + 1) {
                STORE(link, 0);  /* junk, a cycle, or another chain's: the chain ends here */
                break;
            }
            held[v - 1] = 1;
            link = chunk_at(c, v - 1) + CHUNK_NEXT;
        }
    }
    for (int64_t i = top - 1; i >= 0; i--) {
        if (held[i]) continue;
        int64_t *ch = chunk_at(c, i);
        if (LOAD(ch + CHUNK_OWNER) != 0) STORE(ch + CHUNK_OWNER, 0);
        STORE(ch + CHUNK_NEXT, head);
        head = i + 1;
    }
    STORE(KEYWORD(c, CHUNK_FREE_OFF), head);
    END_SECTION();
    PyMem_Free(held);
}

/* ---- the hit ----------------------------------------------------------------------------------- */

/* Section "moving_hit": count `cost` hits at now in the entry the scan found (as a log ring's
 * log_add, rings.c): an entry that counts nothing, or -- n entries counting, or no chunk to be
 * had -- the two oldest merged into the newer one's time (their hits forgotten later, never
 * earlier: strict), the freed entry taking the hit. Caller holds the row lock.
 * Invariant between stores: an entry is emptied (hits 0) before it is restamped, so a tear
 * loses at most the call's own hit; mid-merge, the newer entry holds both before the oldest
 * is emptied (counted twice until they leave: refusals early, never admissions late). The
 * key's last write goes last, never backwards. Repair: none (nothing derived). */
static void put_hit(Core *c, int64_t slot, int64_t now, int64_t cost, Scan *s, int64_t *e) {
    SECTION("moving_hit");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    if (e == NULL && s->second == NULL) {  /* one entry, counting: the new hits join it, at now */
        int64_t hits = LOAD(s->oldest + LOG_HITS);
        if (LOAD(s->oldest + LOG_TIME) < now) STORE(s->oldest + LOG_TIME, now);  /* first: later, never sooner */
        STORE(s->oldest + LOG_HITS, hits > INT64_MAX - cost ? INT64_MAX : hits + cost);
    } else {
        if (e == NULL) {  /* the oldest joins the second oldest */
            int64_t ha = LOAD(s->oldest + LOG_HITS), hb = LOAD(s->second + LOG_HITS);
            STORE(s->second + LOG_HITS, ha > INT64_MAX - hb ? INT64_MAX : ha + hb);
            STORE(s->oldest + LOG_HITS, 0);
            e = s->oldest;
        }
        if (LOAD(e + LOG_HITS) != 0) STORE(e + LOG_HITS, 0);  /* an entry that left: emptied before restamped */
        STORE(e + LOG_TIME, now);
        STORE(e + LOG_HITS, cost);
    }
    touch_last(ROW(c, slot), now);
    END_SECTION();
}

/* Check and count `cost` at now for the key of row `slot`, whose lock the caller holds:
 * *allowed, and 0, or -1 with an error (nothing counted). Chunks counting nothing go back
 * first (all but the one the hit may go to); a chunk is taken when every entry counts and
 * fewer than n do. */
static int hit_key(Core *c, int64_t slot, int64_t now, int64_t cost, int *allowed) {
    int64_t limit = c->rings[0].limit;
    Scan s;
    if (scan(c, slot, now, &s) < 0) return -1;
    *allowed = cost <= limit && s.used <= limit - cost;
    if (!*allowed || cost == 0) return 0;
    int64_t *e = s.live < max_entries(c) ? s.free_e : NULL;
    int need = s.live < max_entries(c) && e == NULL && c->n_chunks > 0;
    if (s.dead > 0 || need) {
        if (lock_take(c, LOCK_CHUNKS) < 0) return -1;
        int64_t got;
        if (s.dead > 0 && free_chunks(c, slot, now, e != NULL ? s.free_chunk : -1, 0) < 0) {
            lock_give(c, LOCK_CHUNKS);
            return -1;
        }
        int rc = need ? alloc_chunk(c, slot, &got) : 0;
        lock_give(c, LOCK_CHUNKS);
        if (rc < 0) return -1;
        if (rc == 1) e = chunk_at(c, got) + CHUNK_W;
    }
    put_hit(c, slot, now, cost, &s, e);
    return 0;
}

/* moving_hit(key, cost=1) -> bool: whether cost was counted (at most limit hits in any period). */
PyObject *Core_moving_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"key", "cost"};
    PyObject *a[2], *result = NULL;
    int64_t cost, now = 0, slot;
    int allowed = 0;
    if (parse(args, nargs, kwnames, names, 2, a, "moving_hit") < 0) return NULL;
    if (a[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "moving_hit() needs a key");
        return NULL;
    }
    if (enter(c) < 0) return NULL;
    if (is_moving(c) < 0 || cost_of(a[1], &cost, 0) < 0 || now_ns(c, &now) < 0) goto out;
    if (cost > c->rings[0].limit) {  /* as limits: never, and no key is made for it */
        result = Py_NewRef(Py_False);
        goto out;
    }
    if (lock_key(c, a[0], 1, now, &slot) < 0) {
        met_full(c, 0);  /* counted in full_count; the storage's on_full answers (limits_segments) */
        goto out;
    }
    int rc = hit_key(c, slot, now, cost, &allowed);
    lock_give(c, row_lock(c, slot));
    if (rc == 0) result = Py_NewRef(allowed ? Py_True : Py_False);
out:
    leave(c);
    return result;
}

/* How long until an entry stamped t leaves, from now (never negative, never wrapped). */
static int64_t leaves_in(Core *c, int64_t t, int64_t now) {
    int64_t ahead = t - now;  /* >= -P for a counting entry */
    if (ahead > INT64_MAX - period(c) - 1) return INT64_MAX;
    return ahead + period(c) + 1 > 0 ? ahead + period(c) + 1 : 0;
}

/* moving_get(key) -> (hits counted, ns until the oldest of them is forgotten; 0: none), now,
 * read under the row lock (a key never counted: (0, 0)). */
PyObject *Core_moving_get(Core *c, PyObject *key) {
    PyObject *result = NULL;
    int64_t now = 0, slot;
    Scan s;
    if (enter(c) < 0) return NULL;
    if (is_moving(c) < 0 || now_ns(c, &now) < 0) goto out;
    int got = lock_key(c, key, 0, now, &slot);
    if (got < 0) goto out;
    if (got == 0) {
        result = Py_BuildValue("(ii)", 0, 0);
        goto out;
    }
    int rc = scan(c, slot, now, &s);
    lock_give(c, row_lock(c, slot));
    if (rc == 0)
        result = Py_BuildValue("(LL)", (long long)s.used, (long long)(s.live ? leaves_in(c, s.t_oldest, now) : 0));
out:
    leave(c);
    return result;
}

/* moving_chunks() -> (chunks handed out, of them on the free list, reserved, the heap's size),
 * under LOCK_CHUNKS: what the tests and tools see of the heap. */
PyObject *Core_moving_chunks(Core *c, PyObject *Py_UNUSED(ignored)) {
    PyObject *result = NULL;
    int64_t top, listed = 0;
    if (enter(c) < 0) return NULL;
    if (is_moving(c) < 0 || lock_take_ex(c, LOCK_CHUNKS, 1) < 0) goto out;
    if (chunks_top(c, &top) == 0) {
        for (int64_t v = LOAD(KEYWORD(c, CHUNK_FREE_OFF)); v > 0 && v <= top && listed < top;
             v = LOAD(chunk_at(c, v - 1) + CHUNK_NEXT))
            listed++;
        result = Py_BuildValue("(LLLL)", (long long)top, (long long)listed,
                               (long long)((uint64_t)LOAD(KEYWORD(c, CHUNKS_RESERVED_OFF)) & 0xFFFFFFFFu), (long long)c->n_chunks);
    }
    lock_give(c, LOCK_CHUNKS);
out:
    leave(c);
    return result;
}
