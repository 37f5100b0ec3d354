/* moving.c -- the moving log's type (MovingLogCore): limits' moving window on shm://, each
 * key's hit times, exactly, in memory that follows the hits a key holds (chunks.c).
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
 * The chunk heap -- its locks, its invariant, its repair -- is chunks.c's. Junk never reaches
 * undefined behaviour: a junk chain is a CorruptSegmentError (chunks.c); hit counts saturate.
 * The type (MovingLogCore) and its hooks are at the end.
 */
#include "core.h"

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
    if (c->role == ROLE_MOVING_LOG && c->n_chunks >= 0 && c->state_words > 0 && c->keyed && !c->limiter && c->n_rings == 1 && c->rings[0].log &&
        c->empty_bytes >= MOVING_STATE_BYTES && c->rings[0].bucket_ns <= MAX_SPAN_NS &&
        c->rings[0].limit <= MOVING_HITS_MAX)
        return 0;
    return not_role(c);
}

static int counts(Core *c, int64_t t, int64_t hits, int64_t now) {
    return hits > 0 && t >= now - period(c);  /* a time ahead of now (a clock behind) counts */
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
static PyObject *Core_moving_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
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
 * read under the row lock (a key never counted: (0, 0)). */
static PyObject *Core_moving_get(Core *c, PyObject *key) {
    KeyCall kc = KEY_CALL;
    PyObject *result = NULL;
    int64_t now = 0, slot;
    Scan s;
    if (key_enter(c, &kc) < 0) return NULL;
    if (now_ns(c, &now) < 0) goto out;
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
 * the chains (chunks.c). A row lock's: nothing (entries are written one store each). */
static void moving_repair(Core *c, int i, int64_t Py_UNUSED(slot)) {
    if (i == LOCK_CHUNKS) repair_chunks(c);
}

static const RoleHooks moving_hooks = {
    .role = "moving-log", .keyed_role = ROLE_MOVING_LOG, .state_bytes = MOVING_STATE_BYTES, .state_zeroed = 1, .log_rings = 1, .chunk_heap = 1,
    .header = moving_header, .check = is_moving, .empty = moving_empty, .inserted = name_key, .repair = moving_repair,
    .late_lock = LOCK_CHUNKS};

static int moving_init(Core *c, PyObject *args, PyObject *kw) { return core_init(c, args, kw, &moving_hooks); }

static PyMethodDef moving_methods[] = {
    {"moving_hit", FASTCALL_KW(Core_moving_hit),
     "moving_hit($self, /, key, cost=1)\n--\n\n"
     "limits' moving window: count cost hits now if the last period's leave room under the limit; whether it did."},
    {"moving_get", (PyCFunction)Core_moving_get, METH_O,
     "moving_get($self, key, /)\n--\n\n(hits counted, ns until the oldest of them is forgotten; 0: none)."},
    {"moving_chunks", (PyCFunction)Core_moving_chunks, METH_NOARGS,
     "moving_chunks($self, /)\n--\n\n(chunks handed out, on the free list, reserved, in the heap)."},
    {NULL},
};

static PyType_Slot moving_slots[] = {
    {Py_tp_doc, "A segment of role moving-log: each key's hit times, and what every segment has (Core)."},
    {Py_tp_init, moving_init},
    {Py_tp_methods, moving_methods},
    {0, NULL},
};

PyType_Spec moving_log_spec = {
    .name = "shmwin._core.MovingLogCore",
    .basicsize = sizeof(Core),
    .flags = ROLE_TYPE_FLAGS,
    .slots = moving_slots,
};
