/* moving.c -- the moving log's type (MovingLogCore): limits' moving window on shm://, each
 * key's hit times, exactly, in memory that follows the hits a key holds (chunks.c).
 *
 * Role "moving-log" (layout_words.py: MOVING_STATE, CHUNK): a keyed window of one log ring --
 * the period P, at most n = min(limit, times) entries a key, the limit L -- whose rows hold,
 * after the key header (its key a digest), `chain` (the shape of the key's run, below), `run`
 * (derived: the run's hits, its running total, and its chunks) and MOVING_INLINE entries. More
 * entries live in chunks of the segment's chunk heap (after the rows; sparse, reserved as
 * chunks are first handed out): a chunk is a header (next chunk of its chain + 1, owner row +
 * 1, 4 bytes each) and CHUNK_ENTRIES entries.
 *
 * The run (issue #30): a key's entries in time order, from entry `tail` of its oldest chunk
 * through the chain (oldest to newest, every chunk whole but the oldest) to its newest chunk,
 * then the row's first `inline` entries; the chain word holds the oldest and newest chunks,
 * tail and inline, so one store changes the run's shape. A call never scans it:
 * - the walk from the oldest end stops at the first entry that counts (every later one does):
 *   used = the running total less what it walked past, each entry walked past once, as the
 *   next settle takes it out (O(1) amortised; a refused hit at the limit reads one entry);
 * - the settle (any call that walked past something) keeps those entries as one dead entry
 *   in the last one's place and gives back the chunks before it, from the oldest end;
 * - a hit is appended at the newest end: the row's next entry, or, the row's two taken, a
 *   new chunk that takes them and the hit; a clock behind the newest entry puts it in order
 *   among the newest chunk's and the row's entries (at most 5 move).
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
 * The chunk heap -- its locks, its invariant, its repair -- is chunks.c's. Junk never reaches
 * undefined behaviour: a junk shape, or a junk link the walk reaches, is a CorruptSegmentError
 * (chunks.c); hit counts saturate. A row lock's repair (repair_run) recomputes the run word.
 * The type (MovingLogCore) and its hooks are at the end.
 */
#include "moving.h"

/* ---- entries: stamp << 32 | hits ----------------------------------------------------------- */

/* A time's stamp: rounded up to the quantum (a junk or negative time is clamped first). */
static int64_t stamp_of(Core *c, int64_t t) {
    if (t < 0) t = 0;
    if (t > MAX_NOW_NS) t = MAX_NOW_NS;
    return (t + ((INT64_C(1) << c->moving_shift) - 1)) >> c->moving_shift;
}
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

/* At open (the type's check hook): a keyed window of one log ring whose rows hold its state?
 * Then its quantum (layout_words.moving_quantum_shift): P spans at most 2**MOVING_SPAN_BITS. */
static int is_moving(Core *c) {
    for (c->moving_shift = MOVING_MIN_SHIFT;
         ((c->rings[0].bucket_ns - 1) >> c->moving_shift) >= (INT64_C(1) << MOVING_SPAN_BITS);)
        c->moving_shift++;
    if (c->role == ROLE_MOVING_LOG && c->n_chunks >= 0 && c->n_chunks <= MOVING_LINK_MASK && c->state_words > 0 && c->keyed && !c->limiter && c->n_rings == 1 && c->rings[0].log &&
        c->empty_bytes >= MOVING_STATE_BYTES && c->rings[0].bucket_ns <= MAX_SPAN_NS &&
        c->rings[0].limit <= MOVING_HITS_MAX)
        return 0;
    return not_role(c);
}

static int counts(Core *c, int64_t t, int64_t hits, int64_t now) {
    return hits > 0 && t >= now - period(c);  /* a time ahead of now (a clock behind) counts */
}
static int64_t add_hits(int64_t a, int64_t b) { return b > INT64_MAX - a ? INT64_MAX : a + b; }  /* both >= 0 */
static int64_t run_word(int64_t total, int64_t chunks) {
    if (total > (int64_t)MOVING_HITS_MAX) total = (int64_t)MOVING_HITS_MAX;  /* saturating: refuse early */
    return (int64_t)((uint64_t)total | (uint64_t)chunks << MOVING_RUN_CHUNKS_SHIFT);
}

/* ---- the run: a key's entries in time order (see the top) ----------------------------------- */

/* A place in a key's run: an entry of a chunk (chunk >= 0) or of the row (chunk -1); e NULL past
 * the run's end. nth: the run's chunks before it (in the row: all of them). */
typedef struct {
    int64_t chunk, j, nth;
    int64_t *e;
} Cur;

typedef struct {
    int64_t slot, top, steps;
    int64_t *st;
    Shape sh;
} Run;

/* Open the run of row `slot`'s key at its first entry (caller holds the row lock): 0, or -1
 * with a CorruptSegmentError (a junk chain word or link). */
static int run_open(Core *c, int64_t slot, Run *r, Cur *at) {
    r->slot = slot, r->steps = 0, r->top = 0;
    r->st = mstate(c, ROW(c, slot));
    int64_t word = LOAD(r->st + MOVING_STATE_CHAIN);
    r->sh = shape_of(word);
    if (shape_junk(word)) {
        junk_chain(c, slot, word);
        return -1;
    }
    at->nth = 0, at->j = 0;
    if (r->sh.first < 0) {
        at->chunk = -1, at->e = r->sh.inl > 0 ? inline_at(r->st) : NULL;
        return 0;
    }
    if (chunks_top(c, &r->top) < 0) return -1;
    int64_t i = chain_next(c, slot, r->sh.first + 1, r->top, &r->steps);
    if (i < 0) return -1;
    at->chunk = i, at->j = r->sh.tail, at->e = centries(chunk_at(c, i)) + r->sh.tail;
    return 0;
}

/* The run's next place: 0, or -1 with an error (junk: a chain that ends before its newest chunk,
 * leaves the heap, another row's chunk, a cycle). */
static int run_next(Core *c, Run *r, Cur *at) {
    if (at->chunk < 0) {
        at->j++;
        at->e = at->j < r->sh.inl ? inline_at(r->st) + at->j : NULL;
        return 0;
    }
    if (at->j + 1 < CHUNK_ENTRIES) {
        at->j++, at->e++;
        return 0;
    }
    at->nth++, at->j = 0;
    if (at->chunk == r->sh.last) {
        at->chunk = -1, at->e = r->sh.inl > 0 ? inline_at(r->st) : NULL;
        return 0;
    }
    int64_t v = LOAD(cnext(chunk_at(c, at->chunk))), i = chain_next(c, r->slot, v, r->top, &r->steps);
    if (i == -1) i = junk_chain(c, r->slot, v);  /* the chain ends before its newest chunk */
    if (i < 0) return -1;
    at->chunk = i, at->e = centries(chunk_at(c, i));
    return 0;
}

/* Entries in the run (the run word's chunks: derived, so never trusted past the shape's bounds). */
static int64_t run_len(const Shape *sh, int64_t chunks) {
    if (sh->first < 0) return sh->inl;
    int64_t n = (chunks > 0 ? chunks : 1) * CHUNK_ENTRIES - sh->tail + sh->inl;
    return n > 0 ? n : 0;
}

/* ---- the walk: what a key counts at now, from the oldest end --------------------------------- */

typedef struct {
    Run run;
    int64_t anchor;            /* the stamp of the row's last write: entries are read against it */
    int64_t total, chunks;     /* the run word's: the run's hits and chunks */
    int64_t g, gone_hits;      /* the run's first entries counting nothing at now, and their hits */
    int64_t dead_stamp;        /* the newest stamp of those holding hits (INT64_MIN: none) */
    Cur last_gone, start;      /* the last of them; the first entry counting (e NULL: none) */
    int64_t used;              /* hits counted at now */
} Walk;

/* Walk the key of row `slot` at now from its oldest entry to the first that counts (every later
 * one counts too: the run is in time order). Caller holds the row lock. 0, or -1 with an error.
 * O(1) but for the entries that stopped counting since the last settle (each walked once). */
static int walk(Core *c, int64_t slot, int64_t now, Walk *w) {
    Cur at;
    if (run_open(c, slot, &w->run, &at) < 0) return -1;
    uint64_t run = (uint64_t)LOAD(w->run.st + MOVING_STATE_RUN);
    w->anchor = anchor_of(c, ROW(c, slot));
    w->total = (int64_t)(run & MOVING_HITS_MAX), w->chunks = (int64_t)(run >> MOVING_RUN_CHUNKS_SHIFT);
    w->g = 0, w->gone_hits = 0, w->dead_stamp = INT64_MIN;
    while (at.e != NULL) {
        int64_t x = LOAD(at.e), stamp = stamp_near(x, w->anchor), hits = hits_of(x);
        if (counts(c, time_of(c, stamp), hits, now)) break;
        w->g++;
        w->gone_hits = add_hits(w->gone_hits, hits);
        if (hits > 0 && stamp > w->dead_stamp) w->dead_stamp = stamp;
        w->last_gone = at;
        if (run_next(c, &w->run, &at) < 0) return -1;
    }
    w->start = at;
    w->used = w->total > w->gone_hits ? w->total - w->gone_hits : 0;
    return 0;
}

/* ---- the settle: what stopped counting leaves the run, as one dead entry -------------------- */

/* Section "moving_settle" (then "chunk_free"): the walked entries that count nothing at now
 * leave the run's oldest end, kept as ONE dead entry (see "Clocks that step" at the top) in the
 * last one's place, at the newest of their stamps -- or OLD_QUANTA before the last write, if
 * that is later -- holding min(their hits, room) (room 0: none kept). The chunks before it go
 * back to the free list (LOCK_CHUNKS held: the caller's). A run that starts at the row's
 * second entry moves it to the first. Order: the dead entry is written over an entry that
 * counted nothing (counted by the run still: a clock stepped back sees its hits, or more),
 * the moved entry copied before the chain word publishes the new start (counted twice until
 * then), the chunks unlinked and pushed after ("chunk_free"); the run word last (derived:
 * the row's repair recomputes it). A tear loses nothing counted. */
static void settle(Core *c, Walk *w, int64_t room, int64_t floor) {
    int64_t *st = w->run.st, m_hits = w->gone_hits < room ? w->gone_hits : room;
    if (m_hits < 0) m_hits = 0;
    Cur at = m_hits > 0 ? w->last_gone : w->start;
    Shape sh = w->run.sh;
    int64_t drop = at.nth;
    int compact = 0;
    if (at.chunk >= 0) {
        sh.first = at.chunk, sh.tail = at.j;
    } else {
        sh.first = sh.last = -1, sh.tail = 0;
        if (at.e == NULL) sh.inl = 0;
        else if (at.j == 1) compact = 1, sh.inl = 1;
    }
    int64_t word = shape_word(&sh);
    SECTION("moving_settle");
    STORE(intent_at(c, row_lock(c, w->run.slot)), w->run.slot);
    if (m_hits > 0) {
        int64_t dead = entry_word(w->dead_stamp > floor ? w->dead_stamp : floor, m_hits);
        if (LOAD(at.e) != dead) STORE(at.e, dead);
    }
    if (compact) STORE(inline_at(st), LOAD(inline_at(st) + 1));
    if (drop == 0 && LOAD(st + MOVING_STATE_CHAIN) != word) STORE(st + MOVING_STATE_CHAIN, word);
    END_SECTION();
    if (drop > 0) unlink_chunks(c, w->run.slot, drop, word);
    w->total = w->total > w->gone_hits ? w->total - w->gone_hits + m_hits : m_hits;
    w->chunks = w->chunks > drop ? w->chunks - drop : 0;
    w->g = m_hits > 0;  /* the run now starts with the dead entry, if any, then counts */
    STORE(st + MOVING_STATE_RUN, run_word(w->total, w->chunks));
}

/* Settle the walked key if anything stopped counting (room: what the dead entry may keep):
 * taking LOCK_CHUNKS (held after: *held) if chunks go back; if it cannot be had (a timeout),
 * nothing is settled (the walk finds the same entries again). 0, or -1 with an error. */
static int settle_walked(Core *c, Walk *w, int64_t room, int64_t floor, int *held) {
    if (w->g == 0) return 0;
    Cur at = w->gone_hits > 0 && room > 0 ? w->last_gone : w->start;
    if (at.nth > 0 && !*held) {
        if (lock_take(c, LOCK_CHUNKS) < 0) {
            PyErr_Clear();
            return 0;
        }
        *held = 1;
    }
    settle(c, w, room, floor);
    Cur first;
    if (run_open(c, w->run.slot, &w->run, &first) < 0) return -1;
    if (w->g > 0 && run_next(c, &w->run, &first) < 0) return -1;
    w->start = first;
    return 0;
}

/* ---- the hit ----------------------------------------------------------------------------------- */

/* The entries of the run's newest end that a hit may be written among, oldest first: the newest
 * chunk's in the run, then the row's (pointers into `in`); their count, or -1 with an error. */
static int64_t newest_end(Core *c, Run *r, int64_t **in) {
    int64_t m = 0;
    if (r->sh.last >= 0) {
        int64_t steps = 0, i = chain_next(c, r->slot, r->sh.last + 1, r->top, &steps);
        if (i < 0) return -1;
        for (int64_t j = r->sh.first == r->sh.last ? r->sh.tail : 0; j < CHUNK_ENTRIES; j++)
            in[m++] = centries(chunk_at(c, i)) + j;
    }
    for (int64_t j = 0; j < r->sh.inl; j++) in[m++] = inline_at(r->st) + j;
    return m;
}

/* Put entry x at place j of the newest end `in` (m entries), whose next place `e` the caller
 * has just published holding a copy of in[m - 1]: each later entry moves up one place, the
 * newest first (a copy counted twice until overwritten; never one lost). */
static void shift_in(int64_t **in, int64_t m, int64_t j, int64_t x) {
    for (int64_t i = m - 1; i > j; i--) STORE(in[i], LOAD(in[i - 1]));
    STORE(in[j], x);
}

/* Section "moving_hit": count `cost` hits at now in the walked (and settled) key. Caller holds
 * the row lock (and LOCK_CHUNKS if *held). The last write moves on first (never backwards).
 * Then, n entries counting, the two oldest merge into the newer one's time (their hits
 * forgotten later, never earlier; the older left empty, at the run's start, for the next walk).
 * The hit is stamped at now -- no further behind the last write than OLD_QUANTA, and, if the
 * run has chunks before its newest, no earlier than the newest end's oldest entry (a clock
 * behind: later, never sooner) -- and
 * written in time order there, an entry of its own: appended (or, a clock behind the newest
 * entry, put in its place, later entries moving up), in the row's next entry
 * or, the row's two taken, in a new chunk that takes them and the newest ("chunk_alloc"). One
 * entry counting and n = 1, or no chunk to be had: the hit joins the newest entry, at the later
 * of its time and now. Order: the merge's newer entry raised before the older is emptied; a new
 * place written before the chain word publishes it; the run word last (derived). A tear loses
 * at most the call's own hit. Repair (repair_run): the run word recomputed from the run. */
static int add_hit(Core *c, Walk *w, int64_t now, int64_t cost, int *held) {
    Run *r = &w->run;
    int64_t stamp = stamp_of(c, now), *in[CHUNK_ENTRIES + MOVING_INLINE], m, j, *join = NULL;
    int single = 0;
    if (stamp < w->anchor - OLD_QUANTA) stamp = w->anchor - OLD_QUANTA;  /* a clock far behind: later, never sooner */
    int64_t live = run_len(&r->sh, w->chunks) - w->g;
    SECTION("moving_hit");
    STORE(intent_at(c, row_lock(c, r->slot)), r->slot);
    touch_last(ROW(c, r->slot), now);
    if (live >= max_entries(c) && w->start.e != NULL) {
        Cur b = w->start;
        if (run_next(c, r, &b) < 0) goto fail;
        if (b.e != NULL) {  /* the oldest joins the second oldest */
            int64_t wa = LOAD(w->start.e), wb = LOAD(b.e);
            STORE(b.e, entry_word(stamp_near(wb, w->anchor), add_hits(hits_of(wb), hits_of(wa))));
            STORE(w->start.e, entry_word(stamp_near(wa, w->anchor), 0));
        } else {
            single = 1;  /* one entry counting, n = 1: the hit joins it */
        }
    }
    if ((m = newest_end(c, r, in)) < 0) goto fail;
    for (j = 0; r->sh.first != r->sh.last && j < m; j++)  /* entries before the end: its oldest bounds the stamp */
        if (hits_of(LOAD(in[j])) > 0) {
            int64_t first = stamp_near(LOAD(in[j]), w->anchor);
            if (stamp < first) stamp = first;
            break;
        }
    for (j = m; j > 0; j--) {  /* the place: after every entry at or before the stamp */
        int64_t x = LOAD(in[j - 1]);
        if (hits_of(x) == 0 || stamp_near(x, w->anchor) <= stamp) break;
    }
    if (single && m > 0) join = in[m - 1];
    if (join == NULL && r->sh.inl >= MOVING_INLINE) {  /* a new chunk takes the row's entries */
        int64_t got = -1, words[CHUNK_ENTRIES] = {LOAD(inline_at(r->st)), LOAD(inline_at(r->st) + 1),
                                                  j == m ? entry_word(stamp, cost) : LOAD(in[m - 1])};
        int rc = 0;
        if (w->chunks < max_chain(c) && c->n_chunks > 0) {
            if (!*held && lock_take(c, LOCK_CHUNKS) < 0) goto fail;
            *held = 1;
            if ((rc = append_chunk(c, r->slot, words, &got)) < 0) goto fail;
        }
        if (rc == 1) {
            w->chunks++;
            if (j < m) {  /* a clock behind the newest entry: the row's entries are the chunk's now */
                SECTION("moving_hit");
                for (int64_t i = 0; i < m; i++)
                    if (in[i] == inline_at(r->st) || in[i] == inline_at(r->st) + 1)
                        in[i] = centries(chunk_at(c, got)) + (in[i] - inline_at(r->st));
                shift_in(in, m, j, entry_word(stamp, cost));
            }
            goto done;
        }
        join = in[m - 1];  /* no chunk to be had: the hit joins the newest entry */
    }
    if (join != NULL) {
        int64_t x = LOAD(join), was = stamp_near(x, w->anchor);
        STORE(join, entry_word(was > stamp ? was : stamp, add_hits(hits_of(x), cost)));  /* later, never sooner */
    } else {
        Shape sh = r->sh;
        sh.inl++;
        STORE(inline_at(r->st) + r->sh.inl, j == m ? entry_word(stamp, cost) : LOAD(in[m - 1]));
        STORE(r->st + MOVING_STATE_CHAIN, shape_word(&sh));  /* published */
        if (j < m) shift_in(in, m, j, entry_word(stamp, cost));
    }
done:
    END_SECTION();
    STORE(r->st + MOVING_STATE_RUN, run_word(add_hits(w->total, cost), w->chunks));
    return 0;
fail:
    END_SECTION();
    return -1;
}

/* Check and count `cost` at now for the key of row `slot`, whose lock the caller holds:
 * *allowed, and 0, or -1 with an error (nothing counted). What stopped counting is settled
 * first, the dead entry keeping min(its hits, L - used - cost) (L - used if nothing is
 * counted; see "Clocks that step" at the top); a refused call with nothing to settle stores
 * nothing. */
static int hit_key(Core *c, int64_t slot, int64_t now, int64_t cost, int *allowed) {
    int64_t limit = c->rings[0].limit;
    int held = 0, rc = 0;
    Walk w;
    if (walk(c, slot, now, &w) < 0) return -1;
    *allowed = cost <= limit && w.used <= limit - cost;
    int counting = *allowed && cost > 0;
    int64_t room = w.used < limit ? limit - w.used : 0, stamp = stamp_of(c, now);
    if (counting) room -= cost;  /* >= 0: allowed */
    int64_t floor = (counting && stamp > w.anchor ? stamp : w.anchor) - OLD_QUANTA;
    if (w.g > 0) rc = settle_walked(c, &w, room, floor, &held);
    if (rc == 0 && counting) rc = add_hit(c, &w, now, cost, &held);
    if (held) lock_give(c, LOCK_CHUNKS);
    return rc;
}

/* moving_hit(key, cost=1) -> bool: whether cost was counted (at most limit hits in any period). */
static PyObject *Core_moving_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key", "cost"};
    PyObject *a[2], *result = NULL;
    int64_t cost, now = 0, slot;
    int allowed = 0;
    if (parse_keyed(args, nargs, kwnames, names, 2, a, "moving_hit") < 0) return NULL;
    if (key_enter(c, &kc) < 0) return NULL;
    if (cost_of(a[1], &cost, 0) < 0 || now_ns(c, &now) < 0) goto out;
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
 * under the row lock (a key never counted: (0, 0)). What stopped counting is settled, as by a
 * refused hit: a read walks each entry that left once. */
static PyObject *Core_moving_get(Core *c, PyObject *key) {
    KeyCall kc = KEY_CALL;
    PyObject *result = NULL;
    int64_t now = 0, slot, reset = 0;
    int held = 0, rc = 0;
    Walk w;
    if (key_enter(c, &kc) < 0) return NULL;
    int got = key_lock(c, &kc, key, 0, &now, &slot);  /* now, then the row */
    if (got < 0) goto out;
    if (got == 0) {
        result = Py_BuildValue("(ii)", 0, 0);
        goto out;
    }
    rc = walk(c, slot, now, &w);
    if (rc == 0) {
        int64_t limit = c->rings[0].limit;
        if (w.start.e != NULL) reset = leaves_in(c, time_of(c, stamp_near(LOAD(w.start.e), w.anchor)), now);
        if (w.g > 0) rc = settle_walked(c, &w, w.used < limit ? limit - w.used : 0, w.anchor - OLD_QUANTA, &held);
        if (held) lock_give(c, LOCK_CHUNKS);
    }
    key_unlock(c, &kc);
    if (rc == 0) result = Py_BuildValue("(LL)", (long long)w.used, (long long)reset);
out:
    return key_leave(c, &kc, result);
}

/* The repair of a key row lock whose holder died inside "moving_settle" or "moving_hit": the
 * row's run word recomputed from its run (a junk run is left as it is: its next call refuses
 * it). */
static void repair_run(Core *c, int64_t slot) {
    Run r;
    Cur at;
    int64_t total = 0;
    if (run_open(c, slot, &r, &at) < 0) {
        PyErr_Clear();
        return;
    }
    while (at.e != NULL) {
        total = add_hits(total, hits_of(LOAD(at.e)));
        if (run_next(c, &r, &at) < 0) {
            PyErr_Clear();
            return;
        }
    }
    STORE(r.st + MOVING_STATE_RUN, run_word(total, at.nth));
}

/* ---- key names: a moving log's rows keep digests; the tools read the names here --------- *
 * (layout_words.NAME_ENTRY): the type's inserted hook. Written by the inserter of a key, under LOCK_KEY_TABLE, after the
 * section "insert": a display hint in no invariant, so plain stores and no fail point. The
 * entry is taken among NAME_PROBES from the key's hash: a free one, or a stale one (its row
 * holds another generation now, or its key is idle); if none, the key stays unnamed. Its generation is zeroed
 * first and stored last: a reader that reads it the same before and after, and the row's
 * own, has read a whole name. */
static void name_key(Core *c, const StoredKey *k, int64_t r, int64_t gen, int64_t now) {
    int64_t top;
    if (k->raw == NULL || rows_top(c, &top) < 0) {  /* rows past top may be holes: never read */
        PyErr_Clear();
        return;
    }
    for (int64_t i = 0; i < NAME_PROBES; i++) {
        char *e = c->base + c->names_off + (int64_t)((k->hash + (uint64_t)i) % NAME_SLOTS) * NAME_ENTRY_BYTES;
        int64_t *eg = (int64_t *)(e + NAME_ENTRY_GEN_OFF), was = __atomic_load_n(eg, __ATOMIC_ACQUIRE);
        uint32_t was_row = __atomic_load_n((uint32_t *)(e + NAME_ENTRY_ROW_OFF), __ATOMIC_RELAXED);
        if (was != 0 && (int64_t)was_row < top && was_row != (uint64_t)r &&
            LOAD(RGEN(ROW(c, was_row))) == was && !row_idle(c, (int64_t)was_row, now))
            continue;  /* another key's name, and that key is live */
        Py_ssize_t n = k->raw_len < NAME_MAX_BYTES ? k->raw_len : NAME_MAX_BYTES;
        uint32_t len = (uint32_t)n | (uint32_t)(k->flags & KEY_FLAG_STR) << 16 | (uint32_t)(n < k->raw_len) << 24;
        __atomic_store_n(eg, 0, __ATOMIC_RELEASE);
        __atomic_store_n((uint32_t *)(e + NAME_ENTRY_ROW_OFF), (uint32_t)r, __ATOMIC_RELAXED);
        __atomic_store_n((uint32_t *)(e + NAME_ENTRY_LEN_OFF), len, __ATOMIC_RELAXED);
        memset(e + NAME_ENTRY_NAME_OFF, 0, NAME_MAX_BYTES);
        memcpy(e + NAME_ENTRY_NAME_OFF, k->raw, (size_t)n);
        __atomic_store_n(eg, gen, __ATOMIC_RELEASE);  /* named */
        return;
    }
}

/* ---- the type ----------------------------------------------------------------------------- */

/* The header hook: rows keep a digest of the key (its name in the names area, before the
 * index), and the segment a chunk heap after its rows. */
static int moving_header(Core *c, const ShmwinHeader *Py_UNUSED(h)) {
    c->key_bytes = MOVING_KEY_BYTES;
    c->names_off = c->keys_off - NAME_SLOTS * NAME_ENTRY_BYTES;  /* keyed: keyed_role checked it */
    return 0;
}

/* LOCK_CHUNKS's holder died inside "chunk_alloc" or "chunk_free": the free list, rebuilt from
 * the chains (chunks.c). A row lock's, inside "moving_settle" or "moving_hit": the run word. */
static void moving_repair(Core *c, int i, int64_t slot) {
    if (i == LOCK_CHUNKS) repair_chunks(c);
    else if (slot >= 0) repair_run(c, slot);
}

static const RoleHooks moving_hooks = {
    .role = "moving-log", .keyed_role = ROLE_MOVING_LOG, .state_bytes = MOVING_STATE_BYTES, .state_zeroed = 1, .log_rings = 1, .chunk_heap = 1,
    .header = moving_header, .check = is_moving, .empty = moving_empty, .inserted = name_key, .repair = moving_repair,
    .late_lock = LOCK_CHUNKS};

static int moving_init(Core *c, PyObject *args, PyObject *kw) { return core_init(c, args, kw, &moving_hooks); }

static PyMethodDef moving_methods[] = {
    METHOD_KW(moving_hit, Core_moving_hit, "key, cost=1",
        "limits' moving window: count cost hits now if the last period's leave room under the limit; whether it "
        "did."),
    METHOD_O(moving_get, Core_moving_get, "key", "(hits counted, ns until the oldest of them is forgotten; 0: none)."),
    METHOD_NOARGS(moving_chunks, Core_moving_chunks, "(chunks handed out, on the free list, reserved, in the heap)."),
    {NULL},
};

/* no object fields of its own: Core's GC support, inherited */
ROLE_SPEC(moving_log_spec, "MovingLogCore", Core, moving_init, moving_methods,
          "A segment of role moving-log: each key's hit times, and what every segment has (Core).");
