/* index.c -- the key table of a keyed segment: the checked state words and the index over
 * the heap of rows (layout.py, "Key table"); lookups, inserts, rebuilds, reclaims, clears and
 * the rollback repair. The index maps a key's hash (keys.c) to the heap row that holds the
 * key's identity (its header) and its counts. Everything here runs under LOCK_KEY_TABLE except
 * find_key, which is lock-free: what it finds is a hint, confirmed by the row's generation under
 * the row's lock. Row generations only change under LOCK_KEY_TABLE and only go up (in absolute
 * value), so a cached (row, generation) can never name another key. space.c reserves the memory
 * the table grows into; keycache.c keeps this process's shortcut from a key object to its row.
 */
#include "core.h"

/* The key table's state words (state_tag, load_state, load_count, rows_top) and the index's
 * copies (index_copy, current_index) are words.c's: space.c and chunks.c read them too. */

/* Under LOCK_KEY_TABLE, before an insert counts on them: the counting words within their bounds
 * (at most a key per row; at most every entry of the index used), as attach checks them. */
static int counts_ok(Core *c, int64_t slots) {
    int64_t keys = LOAD(KEYWORD(c, KEYS_OFF)), used = LOAD(KEYWORD(c, INDEX_USED_OFF));
    if (keys >= 0 && keys <= c->n_rows && used >= 0 && used <= slots) return 0;
    PyErr_Format(c->st->corrupt, "window %R: its key table counts %lld keys in %lld index entries, out of "
                 "range: the segment is corrupt", c->name, (long long)keys, (long long)used);
    return -1;
}

/* rows_top is read at the first entry of the key's hash, not before the probe: a key absent
 * (most often found at its first entry, never used) then costs no check of the two heap words
 * (a foreign key's sum probes every fixed window: fixedsum.c). Read after the entry, it is at
 * least the top the entry's insert published (rows are handed out before they are indexed). */
int find_key(Core *c, const StoredKey *k, int64_t *slot, int64_t *gen) {
    Index x;
    int64_t top = -1;
    if (current_index(c, &x) < 0) return -1;
    PROBE(&x, k->hash, p, i) {
        int64_t *e = ENT(&x, p), g = LOAD(e + INDEX_ENTRY_GEN);
        if (g == 0) return 0;  /* never used: the key would have been placed here or before */
        int64_t w = LOAD(EPLACE(e));
        if (g < 0 || g >= MAX_GEN || PLACE_HASH(w) != (int64_t)k->hash) continue;
        if (top < 0 && rows_top(c, &top) < 0) return -1;
        int64_t r = PLACE_ROW(w);
        if (r < 0 || r >= top) continue;
        char *row = ROW(c, r);
        if (LOAD(RGEN(row)) == g && row_holds(row, k) && LOAD(e + INDEX_ENTRY_GEN) == g) {
            *slot = r;
            *gen = g;
            return 1;
        }
    }
    return 0;
}

/* now - last > idle_ns, without the subtraction: a junk last_ns never overflows it (now >= 0). */
int row_idle(Core *c, int64_t slot, int64_t now) {
    /* a role's busy key (a concurrency's, holding a slot of a live process) is never idle, whatever its age */
    return LOAD(RLAST(ROW(c, slot))) < now - c->idle_ns && (c->hooks->busy == NULL || !c->hooks->busy(c, slot));
}

/* The row entry e points at if it holds a key whose row agrees (generation and hash), else -1. */
static int64_t live_row(Core *c, int64_t *e, int64_t top) {
    int64_t g = LOAD(e + INDEX_ENTRY_GEN), w = LOAD(EPLACE(e)), h = PLACE_HASH(w), r = PLACE_ROW(w);
    if (g <= 0 || g >= MAX_GEN || h == 0 || r >= top) return -1;
    char *row = ROW(c, r);
    return LOAD(RGEN(row)) == g && IDENT_HASH(LOAD(RIDENT(row))) == h ? r : -1;
}

/* OutOfSpaceError(errno, message): the segment could not grow; nothing was written. */
/* The index's load: an insert rebuilds past GROW_AT (5/8: linear probing's paths stay well
 * under MAX_PROBES), and a rebuild writes the level whose load is at most half that. At 16
 * bytes an entry, the index costs a key 26 to 51 bytes.
 * Never smaller than the heap: a rebuild while most keys are idle keeps few, but their rows
 * stay reserved (on the free list) for the keys to come, so the new level also holds every
 * row handed out (`top`) below GROW_AT. Sized for the live keys only, it shrank, and growing
 * it back needs new memory, which a full /dev/shm refuses while the freed rows keep theirs:
 * new keys then fit only in the small index (16,384 of 40,000 a wave, in 8 MiB, for good). */
#define GROW_AT(used, slots) (8 * (used) > 5 * (slots))
static int64_t level_for(Core *c, int64_t kept, int64_t top) {
    int64_t level = 0;
    while (level + 1 < c->index_levels &&
           (16 * (kept + 1) > 5 * (c->key_slots << level) || GROW_AT(top, c->key_slots << level)))
        level++;
    return level;
}

/* Section "rebuild": a new index holding every key whose row is not idle, in the copy
 * nobody reads, sized for a load of at most 1/4; idle keys' rows go to the free list.
 * Caller holds LOCK_KEY_TABLE. Order: dropped rows are unpublished (negative generation, under
 * their row locks) first, so no writer counts into a key the new index forgets; the new
 * index is published with one store; the free list is written last. A tear anywhere is
 * undone by the repair (repair_keys): it keeps the current index and frees unreferenced rows;
 * a failure midway finishes the drops in the current index (drop_marked).
 * Each key's row is read once, in the first pass (its lines fetched a few entries ahead):
 * what that pass decides is kept in `fate`, which the later passes follow. Under LOCK_KEY_TABLE
 * no row's generation changes but by this section's own stores, so the decision holds. */
enum { FATE_NONE, FATE_KEEP, FATE_DROP };
#define AHEAD 8                /* entries ahead whose rows (or new places) are fetched early */

/* A rebuild that fails (a row lock timed out, no room for the new index) after unpublishing
 * idle rows finishes dropping them from the current index instead: each entry becomes a
 * tombstone, as clear() leaves, and its row goes to the free list. Nothing counted is lost
 * (they were idle) and no row is left unpublished yet named. Entries before `upto` only. */
static void drop_marked(Core *c, Index *cur, const unsigned char *fate, int64_t upto) {
    int64_t head = LOAD(KEYWORD(c, FREE_HEAD_OFF)), keys = KEYS(c);
    for (int64_t p = 0; p < upto; p++) {
        if (fate[p] != FATE_DROP) continue;
        int64_t *e = ENT(cur, p), g = LOAD(e + INDEX_ENTRY_GEN), r = PLACE_ROW(LOAD(EPLACE(e)));
        char *row = ROW(c, r);
        STORE(EPLACE(e), 0);
        STORE(e + INDEX_ENTRY_GEN, g + 1);  /* a tombstone: probing goes on past it */
        STORE(RIDENT(row), 0);
        STORE(RLAST(row), head);
        STORE(RGEN(row), g + 1);  /* free: positive again, holding no key */
        head = r + 1;
        keys--;
    }
    STORE(KEYWORD(c, FREE_HEAD_OFF), head);
    STORE(KEYWORD(c, KEYS_OFF), keys > 0 ? keys : 0);
}

static int rebuild(Core *c, int64_t now) {
    Index cur, next;
    int64_t top, kept = 0;
    if (current_index(c, &cur) < 0 || rows_top(c, &top) < 0) return -1;
    unsigned char *fate = PyMem_Calloc((size_t)cur.slots, 1);
    if (fate == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    SECTION("rebuild");
    for (int64_t p = 0; p < cur.slots; p++) {  /* count, and drop the idle */
        if (p + AHEAD < cur.slots) {
            int64_t ahead = PLACE_ROW(LOAD(EPLACE(ENT(&cur, p + AHEAD))));
            if (ahead < top) __builtin_prefetch(ROW(c, ahead), 0);
        }
        int64_t *e = ENT(&cur, p), r = live_row(c, e, top);
        if (r < 0) continue;
        if (row_idle(c, r, now)) {
            int lock = row_lock(c, r);
            if (lock_take(c, lock) < 0) {
                drop_marked(c, &cur, fate, p);
                END_SECTION();
                PyMem_Free(fate);
                return -1;
            }
            if (row_idle(c, r, now) && live_row(c, e, top) == r) {
                STORE(RGEN(ROW(c, r)), -LOAD(e + INDEX_ENTRY_GEN));  /* writers caching it stop matching */
                if (c->hooks->empty != NULL) empty_rings(c, ROW(c, r));  /* idle: what it holds goes back (chunks) */
                lock_give(c, lock);
                fate[p] = FATE_DROP;
                continue;
            }
            lock_give(c, lock);
        }
        fate[p] = FATE_KEEP;
        kept++;
    }
    next = index_copy(c, 2 * level_for(c, kept, top) + ((cur.index & 1) ^ 1));
    if (reserve_index(c, &next) < 0) {  /* nothing published */
        drop_marked(c, &cur, fate, cur.slots);
        END_SECTION();
        PyMem_Free(fate);
        return -1;
    }
    STORE(intent_at(c, LOCK_KEY_TABLE), -1);
    memset(next.base, 0, (size_t)(next.slots * KEY_ENTRY_BYTES));
    FAILPOINT();
    for (int64_t p = 0; p < cur.slots; p++) {
        if (p + AHEAD < cur.slots && fate[p + AHEAD] == FATE_KEEP)
            __builtin_prefetch(ENT(&next, PLACE_HASH(LOAD(EPLACE(ENT(&cur, p + AHEAD)))) & (next.slots - 1)), 1);
        if (fate[p] != FATE_KEEP) continue;
        int64_t *e = ENT(&cur, p);
        int64_t w = LOAD(EPLACE(e));
        PROBE(&next, (uint64_t)PLACE_HASH(w), q, i) {
            int64_t *f = ENT(&next, q);
            if (LOAD(f + INDEX_ENTRY_GEN) != 0) continue;
            STORE(EPLACE(f), w);
            STORE(f + INDEX_ENTRY_GEN, LOAD(e + INDEX_ENTRY_GEN));
            break;
        }
    }
    STORE(KEYWORD(c, INDEX_USED_OFF), kept);
    STORE(KEYWORD(c, KEYS_OFF), kept);
    STORE(KEYWORD(c, REBUILT_NS_OFF), now);
    store_state(c, INDEX_OFF, next.index);  /* published */
    int64_t head = LOAD(KEYWORD(c, FREE_HEAD_OFF));
    for (int64_t p = 0; p < cur.slots; p++) {  /* the dropped rows: negative, named by cur */
        if (fate[p] != FATE_DROP) continue;
        int64_t *e = ENT(&cur, p), g = LOAD(e + INDEX_ENTRY_GEN), r = PLACE_ROW(LOAD(EPLACE(e)));
        char *row = ROW(c, r);
        STORE(RIDENT(row), 0);
        STORE(RLAST(row), head);
        STORE(RGEN(row), g + 1);  /* free: positive again, holding no key */
        head = r + 1;
    }
    STORE(KEYWORD(c, FREE_HEAD_OFF), head);
    END_SECTION();
    PyMem_Free(fate);
    return 0;
}

/* Section "rollback" -- the repair of LOCK_KEY_TABLE after its holder died inside "insert" or
 * "rebuild": keep the current index, turn every entry that does not agree with its row into a
 * tombstone, and rebuild the free list from the rows no entry names. The keys so dropped were
 * being inserted (nothing counted yet) or idle (nothing live). Bounded by the table's size.
 * A junk generation (MAX_GEN or more in size) makes its entry a tombstone like any other; its
 * row is left out, named and freed by none, rather than given a generation computed from junk. */
void repair_keys(Core *c) {
    Index x;
    int64_t top = 0, used = 0, keys = 0, head = 0;
    int ok = current_index(c, &x) == 0 && rows_top(c, &top) == 0;
    unsigned char *named = repair_marks(ok, top);
    if (named == NULL) return;  /* reported to the next caller by find_key */
    SECTION("rollback");
    for (int64_t p = 0; p < x.slots; p++) {
        int64_t *e = ENT(&x, p), g = LOAD(e + INDEX_ENTRY_GEN);
        if (g == 0) continue;
        used++;
        if (PLACE_HASH(LOAD(EPLACE(e))) == 0 && g > 0) continue;  /* a tombstone */
        int64_t r = live_row(c, e, top);
        if (r < 0 || named[r]) {
            STORE(EPLACE(e), 0);
            STORE(e + INDEX_ENTRY_GEN, g <= -MAX_GEN || g >= MAX_GEN ? 1 : g < 0 ? -g : g);  /* junk: any tombstone */
            continue;
        }
        named[r] = 1;
        keys++;
    }
    for (int64_t r = top - 1; r >= 0; r--) {
        if (named[r]) continue;
        char *row = ROW(c, r);
        int64_t g = LOAD(RGEN(row));
        if (g <= -MAX_GEN || g >= MAX_GEN) continue;  /* junk: the row is left out, named and free by none */
        STORE(RGEN(row), -((g < 0 ? -g : g) + 1));  /* whoever cached it stops matching */
        STORE(RIDENT(row), 0);
        STORE(RLAST(row), head);
        STORE(RGEN(row), (g < 0 ? -g : g) + 2);  /* free: positive, holding no key */
        head = r + 1;
    }
    store_state(c, ROWS_TOP_OFF, top);
    STORE(KEYWORD(c, FREE_HEAD_OFF), head);
    STORE(KEYWORD(c, INDEX_USED_OFF), used);
    STORE(KEYWORD(c, KEYS_OFF), keys);
    END_SECTION();
    PyMem_Free(named);
}

/* A row for a new key: the free list's first, else the next on the heap (reserved now).
 * Nothing is stored: assign() takes it, in its section. */
enum { PLACE_NEW, PLACE_TOMB, PLACE_IDLE };

/* Section "insert": give key k the index entry p and the row r (free, the heap's next, or
 * the idle key's that p held). Caller holds LOCK_KEY_TABLE and the row's lock. The row's
 * generation and the entry's are negative from the first stores to the last ones, so if the
 * inserter dies midway no writer that cached the row's old key writes it, lookups skip the
 * entry, and the repair drops both. */
static int64_t assign(Core *c, Index *x, int64_t p, int place, int64_t r, int from_free,
                      const StoredKey *k, int64_t now) {
    int64_t *e = ENT(x, p), *row = (int64_t *)ROW(c, r);
    int64_t old = LOAD(RGEN(row)), next = LOAD(RLAST(row)), used = INDEX_USED(c), keys = KEYS(c);
    if (old <= -MAX_GEN || old >= MAX_GEN) {  /* checked before anything is written */
        PyErr_Format(c->st->corrupt, "window %R: key row %lld holds an impossible generation %lld: the "
                     "segment is corrupt", c->name, (long long)r, (long long)old);
        return -1;
    }
    int64_t gen = (old < 0 ? -old : old) + 1;
    SECTION("insert");
    STORE(intent_at(c, LOCK_KEY_TABLE), p);
    STORE(RGEN(row), -gen);  /* first: a writer that cached the row's old key no longer matches */
    STORE(e + INDEX_ENTRY_GEN, -gen);
    if (from_free) STORE(KEYWORD(c, FREE_HEAD_OFF), next);
    else if (place != PLACE_IDLE) store_state(c, ROWS_TOP_OFF, r + 1);
    STORE(RIDENT(row), 0);
    memset(RKEY(row), 0, (size_t)c->key_bytes);
    memcpy(RKEY(row), k->bytes, (size_t)k->len);
    FAILPOINT();
    STORE(RIDENT(row), k->ident);
    empty_rings(c, (char *)row);
    STORE(RLAST(row), now);
    STORE(RGEN(row), gen);
    STORE(EPLACE(e), PLACE(k->hash, r));
    STORE(e + INDEX_ENTRY_GEN, gen);  /* published */
    if (place == PLACE_NEW) STORE(KEYWORD(c, INDEX_USED_OFF), used + 1);
    if (place != PLACE_IDLE) STORE(KEYWORD(c, KEYS_OFF), keys + 1);
    END_SECTION();
    if (c->hooks->inserted != NULL) c->hooks->inserted(c, k, r, gen, now);  /* a moving log names it */
    return gen;  /* > 0; -1: an error, nothing written */
}

/* Where k goes in index x: the first entry on its probe path that is never used, a tombstone,
 * or (if idle_ok) an idle key's, whose row k then takes. -1 if the path is full. Without
 * idle_ok no other key's row is read: a new key costs only the index lines it probes. */
static int64_t place_of(Core *c, Index *x, int64_t top, const StoredKey *k, int64_t now, int idle_ok,
                        int *place) {
    PROBE(x, k->hash, p, i) {
        int64_t *e = ENT(x, p), g = LOAD(e + INDEX_ENTRY_GEN);
        int64_t w = LOAD(EPLACE(e));
        if (g == 0 || (g > 0 && PLACE_HASH(w) == 0)) {
            *place = g == 0 ? PLACE_NEW : PLACE_TOMB;
            return p;
        }
        int64_t r = idle_ok ? live_row(c, e, top) : -1;
        if (r >= 0 && row_idle(c, r, now)) {
            *place = PLACE_IDLE;
            return p;
        }
        r = PLACE_ROW(w);
        if (g > 0 && PLACE_HASH(w) == (int64_t)k->hash && r < top && row_holds(ROW(c, r), k)) {
            /* k's entry, whose row says another generation: under LOCK_KEY_TABLE only junk does that */
            PyErr_Format(c->st->corrupt, "window %R: key entry %lld and its row %lld disagree on the "
                         "key's generation: the segment is corrupt", c->name, (long long)p, (long long)r);
            *place = -1;
            return -2;
        }
    }
    return -1;
}

/* May a rebuild run to make room at `now`? At most once a second (or the idle time, if shorter)
 * of this caller's clock since the last scan that finished (rebuilt_ns): a table full of live
 * keys must not turn every refused insert into a scan. A finished scan dropped every key idle
 * at its instant, so at that instant none is left to find; a key that turns idle after it
 * waits at most that second for its row to be taken (tests/integration/test_reclaim_retry.py).
 * A scan killed or failed midway stores no time: the next insert scans again at once. */
static int may_rebuild(Core *c, int64_t now) {
    int64_t last = LOAD(KEYWORD(c, REBUILT_NS_OFF)), since;
    if (__builtin_sub_overflow(now, last, &since)) return 1;  /* junk: a long time ago */
    return since >= (c->idle_ns < NS ? c->idle_ns : NS) || since < 0;
}

/* Forget the key of row r (generation g, named by index entry e if not NULL), under
 * LOCK_KEY_TABLE and the row's lock: what "clear" and "reclaim" store. The row is unpublished
 * first (a writer that cached (r, g) stops matching, and so does a lock-free lookup: the
 * entry says g), emptied if asked, its entry made a tombstone, and the row put on the free
 * list. Between any two stores the repair of LOCK_KEY_TABLE (repair_keys) finishes the drop:
 * an entry that does not agree with its row is a tombstone, a row no entry names is free. */
static void drop_key(Core *c, int64_t *e, int64_t r, int64_t g, int empty) {
    char *row = ROW(c, r);
    int64_t keys = KEYS(c), head = LOAD(KEYWORD(c, FREE_HEAD_OFF));
    STORE(intent_at(c, row_lock(c, r)), r);
    STORE(RGEN(row), -(g + 1));  /* first: no writer counts into it from now on */
    if (empty || c->hooks->empty != NULL) empty_rings(c, row);  /* a role's (a moving log's chunks) go back even when idle */
    if (e != NULL) {
        STORE(EPLACE(e), 0);  /* a tombstone: probing goes on past it */
        STORE(e + INDEX_ENTRY_GEN, g + 1);
    }
    STORE(RIDENT(row), 0);
    STORE(RLAST(row), head);
    STORE(RGEN(row), g + 2);  /* free */
    STORE(KEYWORD(c, FREE_HEAD_OFF), r + 1);
    STORE(KEYWORD(c, KEYS_OFF), keys > 0 ? keys - 1 : 0);
}

/* Section "reclaim": room for new keys without new memory, when /dev/shm refuses more (or the
 * index has no room and no memory for a larger one). Every idle key -- its newest write older
 * than every ring's span, so its windows hold nothing -- is dropped in place (drop_key), its
 * row to the free list; a live key is never touched, so no count is lost. All idle keys go,
 * not the least recently used few: none holds anything, and one scan serves many inserts.
 * Caller holds LOCK_KEY_TABLE. Invariant and repair: drop_key's, key by key. At most once
 * a second (may_rebuild, sharing rebuilt_ns, stored when the scan has finished): a table of
 * live keys is not rescanned per insert. Returns the keys dropped, -1 with an error (a row
 * lock timed out). */
static int64_t reclaim(Core *c, int64_t now) {
    Index x;
    int64_t top, dropped = 0;
    if (current_index(c, &x) < 0 || rows_top(c, &top) < 0) return -1;
    for (int64_t p = 0; p < x.slots; p++) {
        if (p + AHEAD < x.slots) {
            int64_t ahead = PLACE_ROW(LOAD(EPLACE(ENT(&x, p + AHEAD))));
            if (ahead < top) __builtin_prefetch(ROW(c, ahead), 0);
        }
        int64_t *e = ENT(&x, p), r = live_row(c, e, top);
        if (r < 0 || !row_idle(c, r, now)) continue;
        int lock = row_lock(c, r);
        if (lock_take(c, lock) < 0) return -1;
        int64_t g = LOAD(e + INDEX_ENTRY_GEN);
        if (live_row(c, e, top) == r && row_idle(c, r, now)) {
            SECTION("reclaim");
            drop_key(c, e, r, g, 0);
            END_SECTION();
            dropped++;
        }
        lock_give(c, lock);
    }
    /* last, once every idle key is dropped: a reclaim killed (or failed) midway left some, and
     * is not one that may_rebuild counts: the next insert reclaims at once */
    STORE(KEYWORD(c, REBUILT_NS_OFF), now);
    return dropped;
}


/* Is the error set a full /dev/shm (OutOfSpaceError)? Then reclaim may make room. */
static int out_of_space(Core *c) { return PyErr_ExceptionMatches(c->st->space); }

/* Insert k under LOCK_KEY_TABLE: 1 holding the row lock of *slot, -1 error (nothing held).
 * Room is made in this order: a tombstone or never-used entry and a free or new row; then
 * a rebuild (the index half full, or `capacity` keys held) that drops idle keys; when
 * /dev/shm refuses memory for rows or a larger index, "reclaim" drops idle keys in place
 * and the insert goes on in the current index, up to its probe bound. Only then an error:
 * KeyTableFullError or OutOfSpaceError, for on_full to answer (met_full, index.c). */
int insert_key(Core *c, PyObject *key, const StoredKey *k, int64_t now, int64_t *slot, int64_t *gen) {
    if (lock_take_ex(c, LOCK_KEY_TABLE, 1) < 0) return -1;
    /* tight: no memory for a larger index (this process saw a rebuild fail for it within the
     * last second): go on in the current one rather than scan the index at every insert */
    int rebuilt = 0, reclaimed = 0, tight = now < c->tight_until_ns && now >= c->tight_until_ns - NS;
    punch_replaced(c, now);
    for (int attempt = 0; attempt < 8; attempt++) {
        int64_t r, g;
        int found = find_key(c, k, &r, &g), place, from_free = 0;
        if (found < 0) goto fail;
        if (found) {  /* inserted meanwhile by another process: definitive under LOCK_KEY_TABLE */
            int lock = row_lock(c, r);
            if (lock_take(c, lock) < 0) goto fail;
            if (LOAD(RGEN(ROW(c, r))) == g) {
                lock_give(c, LOCK_KEY_TABLE);
                *slot = r;
                *gen = g;
                return 1;
            }
            lock_give(c, lock);
            PyErr_Format(c->st->corrupt, "window %R: key row %lld changed generation under the key "
                         "table lock: the segment is corrupt", c->name, (long long)r);
            goto fail;
        }
        Index x;
        int64_t p = -1, top;
        if (current_index(c, &x) < 0 || rows_top(c, &top) < 0 || counts_ok(c, x.slots) < 0) goto fail;
        if (tight || !GROW_AT(INDEX_USED(c) + 1, x.slots)) {
            /* An idle key's entry is taken only when there is no other room: a full table or
             * probe path. Otherwise idle keys wait for the next rebuild, which frees their rows
             * (at most every slots/4 inserts), and a new key reads no other key's row. */
            p = place_of(c, &x, top, k, now, 0, &place);
            if (p == -1 || (p >= 0 && KEYS(c) >= c->n_rows)) p = place_of(c, &x, top, k, now, 1, &place);
        }
        if (p == -2) goto fail;
        int full = p >= 0 && place != PLACE_IDLE && KEYS(c) >= c->n_rows;
        if (p < 0 || full) {  /* the index needs room, or the table holds `capacity` keys */
            if (!rebuilt && !tight && (!full || may_rebuild(c, now))) {
                rebuilt = 1;
                if (rebuild(c, now) < 0) {
                    if (!out_of_space(c)) goto fail;
                    PyErr_Clear();  /* no memory for a larger index: go on in this one */
                    tight = 1;
                    c->tight_until_ns = now > INT64_MAX - NS ? INT64_MAX : now + NS;
                }
                continue;
            }
            if (!reclaimed && p < 0 && tight && may_rebuild(c, now)) {
                reclaimed = 1;
                if (reclaim(c, now) < 0) goto fail;
                continue;
            }
            lock_give(c, LOCK_KEY_TABLE);
            if (full || !tight)
                PyErr_Format(c->st->full, "no room for key %R in window %R: it holds %lld live keys, its "
                             "capacity. Give it a larger capacity (or none: the table then grows)",
                             key, c->name, (long long)KEYS(c));
            else
                space_error(c, ENOSPC, "a larger key index, and no idle key to reclaim");
            return -1;
        }
        if (place == PLACE_IDLE) {
            r = PLACE_ROW(LOAD(EPLACE(ENT(&x, p))));
        } else if (take_row(c, &r, &from_free) < 0) {
            if (!out_of_space(c) || reclaimed || !may_rebuild(c, now)) goto fail;
            PyErr_Clear();  /* /dev/shm is full: make room from idle keys, then look again */
            reclaimed = 1;
            if (reclaim(c, now) < 0) goto fail;
            continue;
        }
        int lock = row_lock(c, r);
        if (lock_take(c, lock) < 0) goto fail;
        if (place == PLACE_IDLE && (live_row(c, ENT(&x, p), top) != r || !row_idle(c, r, now))) {
            lock_give(c, lock);  /* written while we waited for its lock: look again */
            continue;
        }
        g = assign(c, &x, p, place, r, from_free, k, now);
        if (g < 0) {
            lock_give(c, lock);
            goto fail;
        }
        lock_give(c, LOCK_KEY_TABLE);
        *slot = r;
        *gen = g;
        return 1;
    }
    PyErr_Format(c->st->full, "no room for key %R in window %R: every place for it kept being taken",
                 key, c->name);
fail:
    lock_give(c, LOCK_KEY_TABLE);
    return -1;
}

/* A new key met a full table: no row for it (KeyTableFullError: `capacity` live keys) or no
 * memory (OutOfSpaceError: a full /dev/shm, after reclaim found no idle key). Counted in the
 * header's full_count, which the tools show, whatever is answered. 1: `apply` and on_full
 * answers instead of the error (cleared); 0: the error stands. Any other error: 0, uncounted. */
int met_full(Core *c, int apply) {
    if (!PyErr_ExceptionMatches(c->st->full) && !PyErr_ExceptionMatches(c->st->space)) return 0;
    __atomic_fetch_add(KEYWORD(c, FULL_COUNT_OFF), 1, __ATOMIC_RELAXED);
    if (!apply || c->on_full == ON_FULL_RAISE) return 0;
    PyErr_Clear();
    return 1;
}

/* clear(key): forget key and every count of it (section "clear"), under LOCK_KEY_TABLE and the
 * key's row lock: the row is unpublished first (writers caching it stop matching), emptied,
 * its index entry made a tombstone, and the row put on the free list. A tear is finished by
 * the repair: the entry no longer agrees with its row, so both are dropped. */
int clear_key(Core *c, PyObject *key) {
    StoredKey k;
    int64_t r, g;
    Index x;
    if (encode_key(c, key, &k) < 0 || lock_take_ex(c, LOCK_KEY_TABLE, 1) < 0) return -1;
    int found = find_key(c, &k, &r, &g);
    if (found > 0 && current_index(c, &x) < 0) found = -1;  /* (a word spoiled meanwhile) */
    if (found <= 0) {
        lock_give(c, LOCK_KEY_TABLE);
        return found;
    }
    int lock = row_lock(c, r);
    if (lock_take(c, lock) < 0) {
        lock_give(c, LOCK_KEY_TABLE);
        return -1;
    }
    int64_t *e = NULL;
    PROBE(&x, k.hash, p, i) {
        int64_t *f = ENT(&x, p);
        if (LOAD(f + INDEX_ENTRY_GEN) == g && PLACE_ROW(LOAD(EPLACE(f))) == r) {
            e = f;
            break;
        }
    }
    SECTION("clear");
    drop_key(c, e, r, g, 1);
    END_SECTION();
    lock_give(c, lock);
    lock_give(c, LOCK_KEY_TABLE);
    return 1;  /* the caller forgets it in this process's key cache */
}
