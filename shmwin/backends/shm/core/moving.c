/* moving.c -- limits' moving window on shm://: each key's hit times, exactly, in memory that
 * follows the hits a key holds.
 *
 * Role "moving-log" (layout_words.py: MOVING_STATE, CHUNK): a keyed window of one log ring --
 * the period P, at most n = min(limit, times) entries a key, the limit L -- whose rows hold,
 * after the key header (its key a digest), `chain` (the key's first chunk + 1, 0: none) and
 * MOVING_INLINE entries. More entries live in chunks of the segment's chunk heap (after the
 * rows; sparse, reserved as chunks are first handed out): a chunk is a header (next chunk of
 * its chain + 1, owner row + 1, 4 bytes each) and CHUNK_ENTRIES entries.
 *
 * An entry is one word, stamp << 32 | hits (layout_words.MOVING_STATE): the stamp is its time
 * rounded up to the quantum q = 2**moving_shift ns (32 ns for P up to 2**33 ns), modulo 2**32,
 * read back against the row's last write. Every entry holding hits lies within OLD_QUANTA
 * (2**30, at least 4 P) before the last write and a quantum after it. An entry counts while
 * hits > 0 and t >= now - P, a time ahead of now (a clock behind) included (limits' memory
 * storage's moving window, and a log ring's: rings.c): a hit is forgotten after P has passed,
 * at most q - 1 ns late (its time was rounded up), never early.
 *
 * Clocks that step. limits reads the wall clock, which NTP steps back, and processes' clocks
 * may disagree; so an entry that counts nothing at one hit's now may count again at a later
 * call's. A hit never erases hits: the entries counting nothing at its now ("dead") are kept
 * as ONE entry, at the newest of their times, holding min(their hits, L - used - cost) (used:
 * the hits counting at now). Why that is strict, for any clock x the entry counted at before:
 * x <= that time + P < now, so at x every entry counting at now and the new hit count too
 * (their times are later); the kept entry adds its hits, so x sees either every hit it saw
 * before and the new one, or L: in both cases no fewer than the exact log's count, up to L.
 * (Held at the newest dead time, older dead hits count longer for a clock stepped back:
 * refusals early, never admissions late.) Merges only move hits later; a time that falls
 * OLD_QUANTA behind the last write is moved up to that bound, later too. So a clock stepped
 * back, by any amount, never sees fewer hits than it recorded inside its window, up to L;
 * in the exact regime (n = L) the kept entry always finds room (it is kept only when
 * used + cost < L, so at most L - 2 entries count), and a clock that only moves forward
 * sees exactly what it did before.
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

static int64_t *mstate(Core *c, char *row) { return (int64_t *)(row + c->rings_off); }
static int64_t *inline_at(int64_t *st) { return (int64_t *)((char *)st + MOVING_STATE_ENTRIES_OFF); }
static char *chunk_at(Core *c, int64_t i) { return c->base + c->chunks_off + i * CHUNK_BYTES; }
static uint32_t *cnext(char *ch) { return (uint32_t *)(ch + CHUNK_NEXT_OFF); }
static uint32_t *cowner(char *ch) { return (uint32_t *)(ch + CHUNK_OWNER_OFF); }
static int64_t *centries(char *ch) { return (int64_t *)(ch + CHUNK_ENTRIES_OFF); }

/* ---- entries: stamp << 32 | hits ----------------------------------------------------------- */

/* A time's stamp: rounded up to the quantum (a junk or negative time is clamped first). */
static int64_t stamp_of(Core *c, int64_t t) {
    if (t < 0) t = 0;
    if (t > MAX_NOW_NS) t = MAX_NOW_NS;
    return (t + ((INT64_C(1) << c->moving_shift) - 1)) >> c->moving_shift;
}
static int64_t hits_of(int64_t w) { return (int64_t)((uint64_t)w & MOVING_HITS_MAX); }
static int64_t entry_word(int64_t stamp, int64_t hits) {
    if (hits > MOVING_HITS_MAX) hits = MOVING_HITS_MAX;  /* a limit is at most that: never */
    return (int64_t)((uint64_t)(uint32_t)stamp << MOVING_STAMP_SHIFT | (uint64_t)hits);
}
/* The entry's stamp, read back against `anchor` (the stamp of its row's last write): the
 * nearest stamp with those 32 low bits. */
static int64_t stamp_near(int64_t w, int64_t anchor) {
    uint32_t low = (uint32_t)((uint64_t)w >> MOVING_STAMP_SHIFT);
    return anchor + (int32_t)(low - (uint32_t)anchor);
}
/* Its time (ns): rounded up; before 0 (junk): -1, which counts only as long as now < P. */
static int64_t time_of(Core *c, int64_t stamp) {
    if (stamp < 0) return -1;
    if (stamp > (MAX_NOW_NS >> c->moving_shift)) return MAX_NOW_NS;
    return stamp << c->moving_shift;
}
static int64_t anchor_of(Core *c, char *row) { return stamp_of(c, LOAD(RLAST(row))); }
/* How far behind the last write (in quanta) an entry may lie: a quarter of the stamps' range,
 * four periods at least (P spans at most 2**MOVING_SPAN_BITS quanta). */
#define OLD_QUANTA (INT64_C(1) << (MOVING_SPAN_BITS + 2))
static int64_t period(Core *c) { return c->rings[0].bucket_ns; }
static int64_t max_entries(Core *c) { return c->rings[0].n; }  /* n = min(limit, times) */

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
        c->empty_bytes >= MOVING_STATE_BYTES && c->rings[0].bucket_ns <= MAX_SPAN_NS &&
        c->rings[0].limit <= MOVING_HITS_MAX)
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
    if (LOAD(cowner(chunk_at(c, v - 1))) != (uint32_t)(slot + 1)) return junk_chain(c, slot, v);
    return v - 1;
}

/* ---- the scan: what a key's entries count at now, and where a new hit goes ------------------ */

#define SCAN_DEADS 4
typedef struct {
    int64_t anchor;            /* the stamp of the row's last write: entries are read against it */
    int64_t used, live;        /* hits counted (saturating), entries counting */
    int64_t dead_hits;         /* hits of the entries counting nothing at now (saturating) */
    int64_t dead_stamp;        /* the newest of their stamps (INT64_MIN: none) */
    int64_t *free1, *free2;    /* the first two entries counting nothing (dead or empty): inline first */
    int64_t n_dead;            /* entries holding hits that count nothing at now */
    int64_t *deads[SCAN_DEADS];  /* the first SCAN_DEADS of them: zeroed without a second walk */
    int64_t *oldest, *second;  /* the two oldest counting entries */
    int64_t t_oldest, t_second;
    int64_t chunks, dead;      /* chunks in the chain; of them, those counting nothing */
} Scan;

static int scan_entry(Core *c, int64_t *e, int64_t now, Scan *s) {
    int64_t w = LOAD(e), stamp = stamp_near(w, s->anchor), t = time_of(c, stamp), hits = hits_of(w);
    if (!counts(c, t, hits, now)) {
        if (s->free1 == NULL) s->free1 = e;
        else if (s->free2 == NULL) s->free2 = e;
        if (hits > 0) {
            if (s->n_dead < SCAN_DEADS) s->deads[s->n_dead] = e;
            s->n_dead++;
            s->dead_hits = hits > INT64_MAX - s->dead_hits ? INT64_MAX : s->dead_hits + hits;
            if (stamp > s->dead_stamp) s->dead_stamp = stamp;
        }
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

/* Scan the key of row `slot` at now. Caller holds the row lock. 0, or -1 with an error. Every
 * row has MOVING_INLINE entries (emptied with it), whatever n: a key of n = 1 keeps its dead
 * hits in the second. */
static int scan(Core *c, int64_t slot, int64_t now, Scan *s) {
    int64_t *st = mstate(c, ROW(c, slot)), top, steps = 0;
    memset(s, 0, sizeof *s);
    s->dead_stamp = INT64_MIN;
    s->anchor = anchor_of(c, ROW(c, slot));
    for (int64_t j = 0; j < MOVING_INLINE; j++) scan_entry(c, inline_at(st) + j, now, s);
    if (LOAD(st + MOVING_STATE_CHAIN) == 0) return 0;
    if (chunks_top(c, &top) < 0) return -1;
    for (int64_t i = chain_next(c, slot, LOAD(st + MOVING_STATE_CHAIN), top, &steps); i != -1;
         i = chain_next(c, slot, LOAD(cnext(chunk_at(c, i))), top, &steps)) {
        if (i == -2) return -1;
        int64_t *es = centries(chunk_at(c, i)), any = 0;
        for (int64_t j = 0; j < CHUNK_ENTRIES; j++) any |= scan_entry(c, es + j, now, s);
        s->chunks++;
        if (!any) s->dead++;
    }
    return 0;
}

static int entry_counts(Core *c, int64_t w, int64_t anchor, int64_t now) {
    return counts(c, time_of(c, stamp_near(w, anchor)), hits_of(w), now);
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
static int alloc_chunk(Core *c, int64_t slot, int64_t *got) {
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
static int64_t free_chunks(Core *c, int64_t slot, int all) {
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
 * in order), or every lock (reset: chunks_held). If LOCK_CHUNKS cannot be had (a timeout),
 * the chunks stay in the row's chain with their hits zeroed: the next key of the row uses
 * them, nothing is counted twice, nothing leaks. Errors are cleared: a junk chain is cut. */
void moving_empty(Core *c, char *row, int64_t slot) {
    int64_t *st = mstate(c, row);
    for (int64_t j = 0; j < MOVING_INLINE; j++) STORE(inline_at(st) + j, 0);
    if (LOAD(st + MOVING_STATE_CHAIN) == 0) return;
    if (c->chunks_held || lock_take(c, LOCK_CHUNKS) == 0) {
        if (free_chunks(c, slot, 1) < 0) {
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

/* ---- the hit ----------------------------------------------------------------------------------- */

/* Zero the key's dead entries (holding hits, counting nothing at now; read against `anchor`,
 * the last write before this hit) but m and e: those the scan listed, else (more of them) found
 * by a second walk. Inside "moving_hit". */
static void zero_dead(Core *c, int64_t slot, int64_t now, Scan *s, const int64_t *m, const int64_t *e) {
    int64_t *st = mstate(c, ROW(c, slot)), top, steps = 0, anchor = s->anchor;
    if (s->n_dead <= SCAN_DEADS) {
        for (int64_t j = 0; j < s->n_dead; j++)
            if (s->deads[j] != m && s->deads[j] != e) STORE(s->deads[j], 0);
        return;
    }
    for (int64_t j = 0; j < MOVING_INLINE; j++) {
        int64_t *x = inline_at(st) + j, w = LOAD(x);
        if (x != m && x != e && hits_of(w) > 0 && !entry_counts(c, w, anchor, now)) STORE(x, 0);
    }
    if (LOAD(st + MOVING_STATE_CHAIN) == 0 || chunks_top(c, &top) < 0) {
        PyErr_Clear();  /* the scan read the same words: not reached */
        return;
    }
    for (int64_t i = chain_next(c, slot, LOAD(st + MOVING_STATE_CHAIN), top, &steps); i >= 0;
         i = chain_next(c, slot, LOAD(cnext(chunk_at(c, i))), top, &steps))
        for (int64_t j = 0; j < CHUNK_ENTRIES; j++) {
            int64_t *x = centries(chunk_at(c, i)) + j, w = LOAD(x);
            if (x != m && x != e && hits_of(w) > 0 && !entry_counts(c, w, anchor, now)) STORE(x, 0);
        }
    PyErr_Clear();
}

/* Section "moving_hit": count `cost` hits at now (as a log ring's log_add, rings.c). Caller
 * holds the row lock. The last write moves on first (never backwards). Then, if the key has
 * dead entries (holding hits, counting nothing at now), `m` (the first entry counting nothing,
 * in scan order) takes `m_hits` of them at the newest dead stamp -- or at OLD_QUANTA before the
 * last write, if that is later -- and every other dead entry is zeroed (m_hits 0: all are).
 * Last the hit's entry is written, one word: `e` (an entry counting nothing, not m), or -- n
 * entries counting, or no room -- the two oldest counting entries merged into the newer one's
 * time (their hits forgotten later, never earlier), the freed entry taking the hit; one
 * counting entry and no room: the hit joins it, at now. The hit is stamped no further behind
 * the last write than OLD_QUANTA (a clock lagging more: held longer, strict).
 * Invariant between stores: no clock sees fewer hits than before the section (m holds the dead
 * hits, up to what matters, before any other is zeroed; mid-merge the newer entry holds both
 * before the oldest is restamped: counted twice until they leave); every entry holding hits
 * reads back at its time or later: m and the hit are written within OLD_QUANTA of the last
 * write, and an entry the last write has just passed by more than 2**31 quanta (a clock that
 * jumped) reads back 2**32 quanta later, until m replaces it -- refusals early, never
 * admissions late. A tear loses at most the call's own hit. Repair: none (nothing derived). */
static void put_hit(Core *c, int64_t slot, int64_t now, int64_t cost, Scan *s, int64_t *m, int64_t m_hits,
                    int64_t *e) {
    int64_t stamp = stamp_of(c, now), floor = (s->anchor > stamp ? s->anchor : stamp) - OLD_QUANTA;
    if (stamp < s->anchor - OLD_QUANTA) stamp = s->anchor - OLD_QUANTA;  /* a clock far behind: later, never sooner */
    SECTION("moving_hit");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    touch_last(ROW(c, slot), now);
    if (s->n_dead > 0) {
        if (m != NULL) {
            int64_t w = entry_word(s->dead_stamp > floor ? s->dead_stamp : floor, m_hits);
            if (LOAD(m) != w) STORE(m, w);
        }
        zero_dead(c, slot, now, s, m, e);
    }
    if (e == NULL && s->second == NULL) {  /* one entry, counting: the new hits join it, at now */
        int64_t w = LOAD(s->oldest), was = stamp_near(w, s->anchor);
        STORE(s->oldest, entry_word(was > stamp ? was : stamp, hits_of(w) + cost));  /* later, never sooner */
    } else {
        if (e == NULL) {  /* the oldest joins the second oldest */
            int64_t w = LOAD(s->second);
            STORE(s->second, entry_word(stamp_near(w, s->anchor), hits_of(w) + hits_of(LOAD(s->oldest))));
            e = s->oldest;
        }
        STORE(e, entry_word(stamp, cost));
    }
    END_SECTION();
}

/* Give back the chunks of row `slot` left holding no hits (after "moving_hit" merged their dead
 * entries). Caller holds the row lock. Housekeeping after the hit counted: a chunk lock that
 * cannot be had (a timeout) leaves them in the chain, empty, for the key's next hits. */
static void give_back(Core *c, int64_t slot) {
    if (lock_take(c, LOCK_CHUNKS) < 0) {
        PyErr_Clear();
        return;
    }
    if (free_chunks(c, slot, 0) < 0) PyErr_Clear();  /* the scan walked the same chain: not reached */
    lock_give(c, LOCK_CHUNKS);
}

/* Check and count `cost` at now for the key of row `slot`, whose lock the caller holds:
 * *allowed, and 0, or -1 with an error (nothing counted). The dead entries are kept as one
 * holding min(their hits, L - used - cost) (dropped when that is 0; see "Clocks that step" at
 * the top); a chunk is taken when no entry is left for the hit and fewer than n count; chunks
 * left holding no hits go back after the hit. */
static int hit_key(Core *c, int64_t slot, int64_t now, int64_t cost, int *allowed) {
    int64_t limit = c->rings[0].limit;
    Scan s;
    if (scan(c, slot, now, &s) < 0) return -1;
    *allowed = cost <= limit && s.used <= limit - cost;
    if (!*allowed || cost == 0) return 0;
    int64_t room = limit - cost - s.used;  /* >= 0: allowed */
    int64_t m_hits = s.dead_hits < room ? s.dead_hits : room;
    int64_t *m = m_hits > 0 ? s.free1 : NULL;
    int64_t *e = s.live < max_entries(c) ? (m != NULL ? s.free2 : s.free1) : NULL;
    if (e == NULL && s.live < max_entries(c) && s.chunks < max_chain(c) && c->n_chunks > 0) {
        if (lock_take(c, LOCK_CHUNKS) < 0) return -1;
        int64_t got;
        int rc = alloc_chunk(c, slot, &got);
        lock_give(c, LOCK_CHUNKS);
        if (rc < 0) return -1;
        if (rc == 1) e = centries(chunk_at(c, got));
    }
    if (e == NULL && s.oldest == NULL) {  /* no entry counts and none is free (junk): all join, at now */
        e = m != NULL ? m : s.free1;
        m = NULL;
        cost = cost + m_hits;
    }
    put_hit(c, slot, now, cost, &s, m, m_hits, e);
    if (s.dead > 0) give_back(c, slot);
    return 0;
}

/* moving_hit(key, cost=1) -> bool: whether cost was counted (at most limit hits in any period). */
PyObject *Core_moving_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key", "cost"};
    PyObject *a[2], *result = NULL;
    int64_t cost, now = 0, slot;
    int allowed = 0;
    if (parse(args, nargs, kwnames, names, 2, a, "moving_hit") < 0) return NULL;
    if (a[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "moving_hit() needs a key");
        return NULL;
    }
    if (key_enter(c, &kc) < 0) return NULL;
    if (is_moving(c) < 0 || cost_of(a[1], &cost, 0) < 0 || now_ns(c, &now) < 0) goto out;
    if (cost > c->rings[0].limit) {  /* as limits: never, and no key is made for it */
        result = Py_NewRef(Py_False);
        goto out;
    }
    if (key_lock_at(c, &kc, a[0], 1, now, &slot) < 0) {
        if (met_full(c, 1)) result = Py_NewRef(full_allows(c) ? Py_True : Py_False);  /* on_full answers */
        goto out;
    }
    int rc = hit_key(c, slot, now, cost, &allowed);
    key_unlock(c, &kc);
    if (rc == 0) result = Py_NewRef(allowed ? Py_True : Py_False);
out:
    return key_leave(c, &kc, result);
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
    KeyCall kc = KEY_CALL;
    PyObject *result = NULL;
    int64_t now = 0, slot;
    Scan s;
    if (key_enter(c, &kc) < 0) return NULL;
    if (is_moving(c) < 0 || now_ns(c, &now) < 0) goto out;
    int got = key_lock_at(c, &kc, key, 0, now, &slot);
    if (got < 0) goto out;
    if (got == 0) {
        result = Py_BuildValue("(ii)", 0, 0);
        goto out;
    }
    int rc = scan(c, slot, now, &s);
    key_unlock(c, &kc);
    if (rc == 0)
        result = Py_BuildValue("(LL)", (long long)s.used, (long long)(s.live ? leaves_in(c, s.t_oldest, now) : 0));
out:
    return key_leave(c, &kc, result);
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
