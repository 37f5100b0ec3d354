/* seriesdir.c -- role "series": a metrics segment's close safety, its directory (the robust
 * lock, lock-free find, the append of section "series_insert" and its EOWNERDEAD repair) and its
 * process slots (section "series_claim"; liveness probed as stripes.c does). See series.c. */
#include "series.h"

int series_corrupt(SeriesMap *s, const char *what) {
    PyErr_Format(s->st->corrupt, "metrics segment %R: %s", s->name, what);
    return -1;
}

int series_enter(SeriesMap *s) {
    if (s->closed) {
        PyErr_Format(s->st->closed, "metrics segment %R is closed", s->name);
        return -1;
    }
    s->busy++;
    return 0;
}

/* Give our slot back and drop the mapping once no call is inside (a robust mutex's links live
 * in the map: the keeper must let it go first). */
void series_release(SeriesMap *s) {
    if (s->busy > 0 || !s->has_buf) return;
    if (s->slot >= 0 && s->slot_gen == fork_gen) keeper(KEEP_GIVE, SLOT_MUTEX(s, s->slot));
    s->slot = -1;
    s->has_buf = 0;
    s->base = NULL;
    PyBuffer_Release(&s->buf);
}

void series_leave(SeriesMap *s) {
    s->busy--;
    if (s->closed) series_release(s);
}

/* ---- the directory lock ------------------------------------------------------------------ */

static int repair_index(SeriesMap *s);


/* Take SERIES_LOCK_DIR: 0 held (repaired if its holder died inside), -1 error. Waits (GIL
 * released) at most the segment's timeout: inserts are rare, each a few microseconds. */
int series_lock(SeriesMap *s) {
    pthread_mutex_t *m = DIR_MUTEX(s);
    int rc = pthread_mutex_trylock(m);
    if (rc == EBUSY) {
        int64_t until = mono_ns() + s->timeout_ns;
        struct timespec ts = {.tv_sec = until / NS, .tv_nsec = until % NS};
        Py_BEGIN_ALLOW_THREADS
        rc = pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
        Py_END_ALLOW_THREADS
    }
    if (rc == EOWNERDEAD) {
        if (repair_index(s) < 0) PyErr_Clear();  /* junk: the next finder meets it */
        pthread_mutex_consistent(m);
        rc = 0;
    }
    if (rc == ETIMEDOUT) {
        PyErr_Format(s->st->timeout, "metrics segment %R: its directory lock was held for more than %lld ms",
                     s->name, (long long)(s->timeout_ns / 1000000));
        return -1;
    }
    if (rc != 0) return series_corrupt(s, "its directory lock is unusable");
    return 0;
}

/* ---- the directory: find, insert, repair -------------------------------------------------- */

/* entry_top, checked: every entry below it is whole. */
int series_entry_top(SeriesMap *s, int64_t *top) {
    *top = LOAD(HDR(s, SERIES_HDR_ENTRY_TOP));
    if (*top < 0 || *top > s->entries_bytes || *top % WORD_BYTES) return series_corrupt(s, "entry_top is junk");
    return 0;
}

/* Is the entry at `at` (below top) whole in the segment, its identity and its cell in bounds? */
int series_entry_ok(SeriesMap *s, int64_t at, int64_t top) {
    if (at < 0 || at % WORD_BYTES || at + SERIES_ENTRY_BYTES > top) return 0;
    uint32_t len = *(uint32_t *)(ENTRY(s, at) + SERIES_ENTRY_KEY_LEN_OFF);
    int64_t cell = LOAD(EW(s, at, SERIES_ENTRY_CELL));
    return len <= SERIES_MAX_KEY && at + SERIES_ENTRY_BYTES + (int64_t)len <= top &&
           cell >= -1 && cell < s->max_series;
}

int64_t series_entry_bytes(SeriesMap *s, int64_t at) {
    return SERIES_ENTRY_BYTES + PAD8((int64_t)*(uint32_t *)(ENTRY(s, at) + SERIES_ENTRY_KEY_LEN_OFF));
}

/* The index's level `level` (checked): its first word and its places. 0, or -1 junk. */
static int index_of(SeriesMap *s, int64_t level, int64_t **words, int64_t *places) {
    if (level < 0 || level >= s->index_levels) return series_corrupt(s, "index_level is junk");
    *places = (int64_t)SERIES_INDEX_MIN << level;
    *words = SW(s, s->index_at + ((int64_t)SERIES_INDEX_MIN << level) * WORD_BYTES - SERIES_INDEX_MIN * WORD_BYTES);
    return 0;
}

static int index_now(SeriesMap *s, int64_t **words, int64_t *places) {
    return index_of(s, LOAD(HDR(s, SERIES_HDR_INDEX_LEVEL)), words, places);
}

/* The entry holding identity `key` (of hash h): its offset, -1 none, -2 junk (error set).
 * Lock-free: an index word is stored only once its entry is whole and below entry_top, and a
 * level is in use only once it holds every entry; a finder on a level just left behind misses
 * only entries made since, which an insert finds again under the lock. */
int64_t series_find(SeriesMap *s, const char *key, Py_ssize_t len, uint64_t h) {
    int64_t top, *index = NULL, places = 0;
    if (series_entry_top(s, &top) < 0 || index_now(s, &index, &places) < 0) return -2;
    for (int64_t i = 0; i < places; i++) {
        uint64_t word = (uint64_t)LOAD(index + (int64_t)((h + (uint64_t)i) & (uint64_t)(places - 1)));
        if (word == 0) return -1;
        if (word >> 32 != h >> 32) continue;
        int64_t at = ((int64_t)(word & 0xFFFFFFFFu) - 1) * WORD_BYTES;
        /* an entry published since top was read (its entry_top store precedes its index word's,
         * which this load acquired): read top again before calling the word junk */
        if (!series_entry_ok(s, at, top) && (series_entry_top(s, &top) < 0 || !series_entry_ok(s, at, top)))
            return series_corrupt(s, "an index word names no entry") - 1;
        if (*(uint32_t *)(ENTRY(s, at) + SERIES_ENTRY_KEY_LEN_OFF) == (uint32_t)len &&
            memcmp(ENTRY(s, at) + SERIES_ENTRY_BYTES, key, (size_t)len) == 0)
            return at;
    }
    return -1;
}

/* Store the index word of the entry at `at` (hash h) in the first free place of a level.
 * Caller holds the directory lock. 0, or -1 with the level full (never half full: junk). */
static int index_put(SeriesMap *s, int64_t *index, int64_t places, int64_t at, uint64_t h) {
    for (int64_t i = 0; i < places; i++) {
        int64_t *w = index + (int64_t)((h + (uint64_t)i) & (uint64_t)(places - 1));
        if (LOAD(w) != 0) continue;
        STORE(w, (int64_t)((h >> 32) << 32 | (uint64_t)(at / WORD_BYTES + 1)));
        return 0;
    }
    return series_corrupt(s, "the index is full");
}

/* EOWNERDEAD on the directory lock: every whole entry (below entry_top) back in the index
 * level in use, and the entries word recounted. */
static int repair_index(SeriesMap *s) {
    int64_t top, *index = NULL, places = 0, n = 0;
    if (series_entry_top(s, &top) < 0 || index_now(s, &index, &places) < 0) return -1;
    for (int64_t at = 0; at < top; at += series_entry_bytes(s, at), n++) {
        if (!series_entry_ok(s, at, top)) return series_corrupt(s, "an entry below entry_top is junk");
        char *e = ENTRY(s, at);
        uint64_t h = (uint64_t)LOAD(EW(s, at, SERIES_ENTRY_HASH));
        int64_t found = series_find(s, e + SERIES_ENTRY_BYTES, *(uint32_t *)(e + SERIES_ENTRY_KEY_LEN_OFF), h);
        if (found == -2) return -1;
        if (found == -1 && index_put(s, index, places, at, h) < 0) return -1;
    }
    STORE(HDR(s, SERIES_HDR_ENTRIES), n);
    return 0;
}

/* Section "series_grow", under the directory lock, when the level in use would pass half
 * full: the next level (twice the places) is cleared -- a grower that died may have left
 * words there -- and filled with every entry below entry_top; then index_level names it.
 * Until that last store finders use the old level, whole. So the index costs what its
 * entries need (16 to 32 bytes each), not the top level's size, in /dev/shm. */
static int grow_index(SeriesMap *s, int64_t top) {
    int64_t level = LOAD(HDR(s, SERIES_HDR_INDEX_LEVEL)), *index = NULL, places = 0;
    int64_t n = LOAD(HDR(s, SERIES_HDR_ENTRIES));
    if (index_of(s, level, &index, &places) < 0) return -1;
    if (n + 1 <= places / 2 || level + 1 >= s->index_levels) return 0;
    if (index_of(s, level + 1, &index, &places) < 0) return -1;
    SECTION("series_grow");
    memset(index, 0, (size_t)places * WORD_BYTES);
    for (int64_t at = 0; at < top; at += series_entry_bytes(s, at)) {
        if (!series_entry_ok(s, at, top)) return series_corrupt(s, "an entry below entry_top is junk");
        if (index_put(s, index, places, at, (uint64_t)LOAD(EW(s, at, SERIES_ENTRY_HASH))) < 0) return -1;
    }
    STORE(HDR(s, SERIES_HDR_INDEX_LEVEL), level + 1);
    END_SECTION();
    return 0;
}

/* Section "series_insert": append an entry (its order: the top of series.c). Caller
 * holds the directory lock and found no entry for the key. Its offset, or -1 (error set). */
int64_t series_append(SeriesMap *s, const char *key, Py_ssize_t len, uint64_t h, int kind, int64_t slot,
                      int64_t lifetime, int64_t pid) {
    int64_t top, ctop = LOAD(HDR(s, SERIES_HDR_CELLS_TOP)), need = SERIES_ENTRY_BYTES + PAD8((int64_t)len);
    int64_t n = LOAD(HDR(s, SERIES_HDR_ENTRIES)), *index = NULL, places = 0;
    if (series_entry_top(s, &top) < 0) return -1;
    if (ctop < 0 || ctop > s->max_series) return series_corrupt(s, "cells_top is junk");
    if (top + need > s->entries_bytes || (kind != SERIES_META && ctop >= s->max_series)) {
        __atomic_add_fetch(HDR(s, SERIES_HDR_FULL_COUNT), 1, __ATOMIC_RELAXED);
        PyErr_Format(s->st->full, "metrics segment %R is full: %lld series (max_series=%lld)", s->name,
                     (long long)ctop, (long long)s->max_series);
        return -1;
    }
    if (grow_index(s, top) < 0 || index_now(s, &index, &places) < 0) return -1;
    int64_t cell = kind == SERIES_META ? -1 : ctop;
    char *e = ENTRY(s, top);
    SECTION("series_insert");
    if (cell >= 0) {
        int64_t *c = CELL(s, cell);
        STORE(c + SERIES_CELL_VALUE, 0);
        STORE(c + SERIES_CELL_STAMP, 0);
        STORE(c + SERIES_CELL_SEQ, 0);
        STORE(c + SERIES_CELL_ENTRY, top / WORD_BYTES);
    }
    *(uint32_t *)(e + SERIES_ENTRY_KEY_LEN_OFF) = (uint32_t)len;
    *(uint32_t *)(e + SERIES_ENTRY_KIND_OFF) = (uint32_t)kind;
    memcpy(e + SERIES_ENTRY_BYTES, key, (size_t)len);
    STORE(EW(s, top, SERIES_ENTRY_HASH), (int64_t)h);
    STORE(EW(s, top, SERIES_ENTRY_CELL), cell);
    STORE(EW(s, top, SERIES_ENTRY_SLOT), slot);
    STORE(EW(s, top, SERIES_ENTRY_LIFETIME), lifetime);
    STORE(EW(s, top, SERIES_ENTRY_PID), pid);
    STORE(EW(s, top, SERIES_ENTRY_FLAGS), 0);
    if (cell >= 0) STORE(HDR(s, SERIES_HDR_CELLS_TOP), ctop + 1);
    STORE(HDR(s, SERIES_HDR_ENTRY_TOP), top + need);
    if (index_put(s, index, places, top, h) < 0) return -1;
    STORE(HDR(s, SERIES_HDR_ENTRIES), n + 1);
    END_SECTION();
    return top;
}

/* Section "series_claim", under the directory lock: the first slot whose liveness mutex the
 * keeper can take (free, or its owner dead) becomes this process's, with a new lifetime
 * number. The slot's claims word (its lifetime) is stored last: a tear leaves the slot held
 * by nobody the scrape believes in, and the lifetimes word only skips a number. */
int series_claim(SeriesMap *s, long long owner) {
    int64_t r = 0;
    int rc = keeper_take_first((char *)SLOT_MUTEX(s, 0), STRIPE_ENTRY_BYTES, s->n_slots, &r);
    if (rc == EBUSY) {
        PyErr_Format(s->st->full, "metrics segment %R: all %lld process slots are held by live processes",
                     s->name, (long long)s->n_slots);
        return -1;
    }
    if (rc != 0) return series_corrupt(s, "a process slot's liveness lock is unusable");
    int64_t *e = SLOT(s, r), lt = LOAD(HDR(s, SERIES_HDR_LIFETIMES)) + 1;
    SECTION("series_claim");
    STORE(HDR(s, SERIES_HDR_LIFETIMES), lt);
    stripe_stamp(e, owner);
    STORE(e + STRIPE_OWNER, owner);
    STORE(e + STRIPE_CLAIMS, lt);
    END_SECTION();
    s->slot = r;
    s->lifetime = lt;
    s->slot_gen = fork_gen;
    return 0;
}

/* Is lifetime `lt` of slot r still running? Its slot still names it, and the slot's mutex is
 * held (probed by a trylock in this thread for an instant) or is our own. */
int series_alive(SeriesMap *s, int64_t r, int64_t lt) {
    if (r < 0 || r >= s->n_slots || LOAD(SLOT(s, r) + STRIPE_CLAIMS) != lt) return 0;
    if (r == s->slot && s->slot_gen == fork_gen) return 1;
    pthread_mutex_t *m = SLOT_MUTEX(s, r);
    int rc = pthread_mutex_trylock(m);
    if (rc == EBUSY) return 1;
    if (rc == EOWNERDEAD) rc = pthread_mutex_consistent(m);
    if (rc == 0) pthread_mutex_unlock(m);
    return 0;
}

/* A gauge cell's (value, stamp), read whole: retried while its writer is inside. A writer
 * killed inside leaves the sequence odd for good: after a bounded number of tries the pair is
 * taken as it is (each word is whole; only a mostrecent stamp may pair with the value before). */
void series_read_cell(int64_t *c, double *value, double *stamp) {
    int64_t v, t;
    for (int tries = 0; tries < 1000; tries++) {
        int64_t q = LOAD(c + SERIES_CELL_SEQ);
        v = LOAD(c + SERIES_CELL_VALUE);
        t = LOAD(c + SERIES_CELL_STAMP);
        if (!(q & 1) && LOAD(c + SERIES_CELL_SEQ) == q) break;
        CPU_RELAX();
    }
    memcpy(value, &v, sizeof v);
    memcpy(stamp, &t, sizeof t);
}
