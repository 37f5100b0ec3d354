/* counters.c -- limits' fixed window and sliding window counter: a few words of state per key,
 * each changed in one section under the key's row lock.
 *
 * The segments are keyed windows with a role (layout_words.py: ROLES, FIXED_STATE,
 * SLIDING_STATE): the words right after a row's key header -- where a window's first ring
 * would start -- are the key's state, not buckets. A fresh or reused row is emptied as every
 * window row is (EMPTY_EPOCH in word 0): "no window". The ring in the header gives the period
 * P (its bucket width) and the idle time after which the key table may reuse the row: P for
 * a fixed window (one bucket), 2P for a sliding counter (two); each section keeps the key's
 * last write at least as late as the state it must keep alive (a lagging clock never moves
 * it back).
 *
 *   fixed-window     start, count. The live window is [start, start + P): count its hits.
 *                    As limits' storages: an incr with no live window (or an empty one)
 *                    starts one now; it ends exactly one period after its start.
 *   sliding-counter  window, current, previous. Windows are aligned on now // P; "current"
 *                    counts window `window`, "previous" the one before. At now in window w,
 *                    limits' weighted count is previous x (P - elapsed) / P + current, the
 *                    previous window weighed by the part of it still inside the last period.
 *
 * Junk never reaches undefined behaviour: a start or window index no clock can reach, or a
 * negative count, is a CorruptSegmentError; counts saturate. Nothing here is derived data:
 * the lock's repair (locks.c) touches only limiter rows, and each section's store order makes
 * a tear over-count (refuse early), never under-count (admit late).
 */
#include "core.h"

static int64_t *state_of(Core *c, int64_t slot) { return (int64_t *)(ROW(c, slot) + c->rings_off); }

/* Is this Core a segment of `role` whose rows have room for its state? */
static int is_role(Core *c, int role, int64_t buckets, int64_t bytes) {
    if (c->role == role && c->keyed && !c->limiter && c->n_rings == 1 && c->rings[0].n == buckets &&
        !c->rings[0].log && c->empty_bytes >= bytes && c->rings[0].bucket_ns <= MAX_SPAN_NS)
        return 0;
    PyErr_Format(PyExc_ValueError, "window %R is not a %s segment", c->name,
                 role == ROLE_FIXED_WINDOW ? "fixed-window" : "sliding-counter");
    return -1;
}

static int corrupt(Core *c, int64_t slot, const char *what, int64_t value) {
    PyErr_Format(c->st->corrupt, "window %R: key row %lld holds an impossible %s %lld: the segment is corrupt",
                 c->name, (long long)slot, what, (long long)value);
    return -1;
}


/* ---- fixed window ------------------------------------------------------------------------- */

typedef struct {
    int64_t start, count;
    int live;  /* now < start + P: the window counts (a start ahead of now -- a lagging clock -- too) */
} Fixed;

/* The state of the row at `now`, checked. Caller holds the row lock. */
static int fixed_read(Core *c, int64_t slot, int64_t now, Fixed *f) {
    int64_t *st = state_of(c, slot);
    f->start = LOAD(st + FIXED_STATE_START);
    f->count = LOAD(st + FIXED_STATE_COUNT);
    f->live = 0;
    if (f->start == EMPTY_EPOCH) return 0;
    if (f->start < 0 || f->start >= MAX_NOW_NS) return corrupt(c, slot, "window start", f->start);
    if (f->count < 0) return corrupt(c, slot, "count", f->count);
    f->live = now < f->start + c->rings[0].bucket_ns;  /* < 2**62 + 2**60: no overflow */
    return 0;
}

/* Section "fixed_incr": count `amount` in the key's live window, or start one at now with it
 * (no live window, or one whose count is 0: limits' memory storage restarts a window whose
 * count was 0, and so do we). Caller holds the row lock.
 * Invariant between stores: a new window's start is stored before its count, so a tear
 * leaves the old count in the new window (more than it holds: refusals early), never a
 * window short of hits it counted; a count store is one store. The key's last write goes
 * last, and never backwards: the row stays the key's for a period after the start at least.
 * Repair: none (nothing derived; the intent is stored as in every keyed section). */
static int fixed_incr_row(Core *c, int64_t slot, int64_t now, int64_t amount, Fixed *f) {
    int64_t *st = state_of(c, slot);
    if (fixed_read(c, slot, now, f) < 0) return -1;
    SECTION("fixed_incr");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    if (!f->live || f->count == 0) {
        STORE(st + FIXED_STATE_START, now);
        STORE(st + FIXED_STATE_COUNT, amount);
        f->start = now, f->count = amount, f->live = 1;
    } else {
        f->count = sat_add(f->count, amount);
        STORE(st + FIXED_STATE_COUNT, f->count);
    }
    touch_last(ROW(c, slot), f->start > now ? f->start : now);
    END_SECTION();
    return 0;
}

/* fixed_incr(key, amount=1) -> (count, end ns): the key's count after this incr, and when its
 * window ends. */
PyObject *Core_fixed_incr(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"key", "amount"};
    PyObject *a[2], *result = NULL;
    int64_t amount, now = 0, slot;
    Fixed f;
    if (parse(args, nargs, kwnames, names, 2, a, "fixed_incr") < 0) return NULL;
    if (a[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "fixed_incr() needs a key");
        return NULL;
    }
    if (enter(c) < 0) return NULL;
    if (is_role(c, ROLE_FIXED_WINDOW, 1, FIXED_STATE_BYTES) < 0 || cost_of(a[1], &amount, 0) < 0 ||
        now_ns(c, &now) < 0)
        goto out;
    if (lock_key(c, a[0], 1, now, &slot) < 0) {
        met_full(c, 0);  /* counted in full_count; the storage's on_full answers (limits_segments) */
        goto out;
    }
    int rc = fixed_incr_row(c, slot, now, amount, &f);
    lock_give(c, row_lock(c, slot));
    if (rc == 0) result = Py_BuildValue("(LL)", (long long)f.count, (long long)(f.start + c->rings[0].bucket_ns));
out:
    leave(c);
    return result;
}

/* fixed_get(key) -> (count, end ns) of the key's live window, or None: read under the row lock. */
PyObject *Core_fixed_get(Core *c, PyObject *key) {
    PyObject *result = NULL;
    int64_t now = 0, slot;
    Fixed f;
    if (enter(c) < 0) return NULL;
    if (is_role(c, ROLE_FIXED_WINDOW, 1, FIXED_STATE_BYTES) < 0 || now_ns(c, &now) < 0) goto out;
    int got = lock_key(c, key, 0, now, &slot);
    if (got < 0) goto out;
    if (got == 0) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    int rc = fixed_read(c, slot, now, &f);
    lock_give(c, row_lock(c, slot));
    if (rc < 0) goto out;
    if (f.live) result = Py_BuildValue("(LL)", (long long)f.count, (long long)(f.start + c->rings[0].bucket_ns));
    else result = Py_NewRef(Py_None);
out:
    leave(c);
    return result;
}

/* ---- sliding window counter ------------------------------------------------------------- */

typedef struct {
    int64_t stored;          /* the state's window index, as stored (EMPTY_EPOCH: none) */
    int64_t w, elapsed;      /* the window counted in, and ns into it */
    int64_t current, previous;
} Sliding;

/* The state of the row seen from `now`, checked. Caller holds the row lock. A state one window
 * ahead of now (a clock that lags the one that wrote it) is counted in, at its very start: the
 * previous window weighs fully (refuse early, never admit late); a state further ahead, or
 * two or more windows old, counts nothing. */
static int sliding_read(Core *c, int64_t slot, int64_t now, Sliding *s) {
    int64_t *st = state_of(c, slot), period = c->rings[0].bucket_ns;
    int64_t W = LOAD(st + SLIDING_STATE_WINDOW), cur = LOAD(st + SLIDING_STATE_CURRENT);
    int64_t prev = LOAD(st + SLIDING_STATE_PREVIOUS);
    s->stored = W;
    s->w = now / period;
    s->elapsed = now - s->w * period;
    s->current = s->previous = 0;
    if (W == EMPTY_EPOCH) return 0;
    if (W < 0 || W > MAX_NOW_NS / period) return corrupt(c, slot, "window index", W);
    if (cur < 0) return corrupt(c, slot, "current count", cur);
    if (prev < 0) return corrupt(c, slot, "previous count", prev);
    if (W == s->w + 1) s->w = W, s->elapsed = 0;
    if (W == s->w) s->current = cur, s->previous = prev;
    else if (W == s->w - 1) s->previous = cur;
    return 0;
}

/* limits' weighted count, floored: previous x (P - elapsed) / P + current, exactly, saturating. */
static int64_t weighted(const Sliding *s, int64_t period) {
    __int128 part = (__int128)s->previous * (period - s->elapsed) / period;  /* <= previous */
    return sat_add((int64_t)part, s->current);
}

/* Section "sliding_hit": count `amount` in the key's current window if limits' weighted count
 * leaves room for it under `limit`; else nothing. Caller holds the row lock.
 * Invariant between stores: moving to a new window stores its index first, then the previous
 * count, then the current one, so a tear shows the new window holding the old counts (at a
 * weight of 1, more than their due: refusals early), never fewer hits than were counted; in
 * the same window the count is one store. The key's last write goes last, never backwards.
 * Repair: none (nothing derived). */
static int sliding_hit_row(Core *c, int64_t slot, int64_t now, int64_t limit, int64_t amount, int *allowed) {
    int64_t *st = state_of(c, slot);
    Sliding s;
    if (sliding_read(c, slot, now, &s) < 0) return -1;
    *allowed = amount <= limit && weighted(&s, c->rings[0].bucket_ns) <= limit - amount;
    if (!*allowed || amount == 0) return 0;
    SECTION("sliding_hit");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    if (s.stored == s.w) {
        STORE(st + SLIDING_STATE_CURRENT, sat_add(s.current, amount));
    } else {
        STORE(st + SLIDING_STATE_WINDOW, s.w);
        STORE(st + SLIDING_STATE_PREVIOUS, s.previous);
        STORE(st + SLIDING_STATE_CURRENT, amount);
    }
    touch_last(ROW(c, slot), now > s.w * c->rings[0].bucket_ns ? now : s.w * c->rings[0].bucket_ns);
    END_SECTION();
    return 0;
}

/* sliding_hit(key, limit, amount=1) -> bool: whether amount was counted. */
PyObject *Core_sliding_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"key", "limit", "amount"};
    PyObject *a[3], *result = NULL;
    int64_t limit, amount, now = 0, slot;
    int allowed = 0;
    if (parse(args, nargs, kwnames, names, 3, a, "sliding_hit") < 0) return NULL;
    if (a[0] == NULL || a[1] == NULL) {
        PyErr_SetString(PyExc_TypeError, "sliding_hit() needs a key and a limit");
        return NULL;
    }
    if (enter(c) < 0) return NULL;
    if (is_role(c, ROLE_SLIDING_COUNTER, 2, SLIDING_STATE_BYTES) < 0 || cost_of(a[1], &limit, 0) < 0 ||
        cost_of(a[2], &amount, 0) < 0 || now_ns(c, &now) < 0)
        goto out;
    if (amount > limit) {  /* as limits: never, and no key is made for it */
        result = Py_NewRef(Py_False);
        goto out;
    }
    if (lock_key(c, a[0], 1, now, &slot) < 0) {
        met_full(c, 0);  /* counted in full_count; the storage's on_full answers (limits_segments) */
        goto out;
    }
    int rc = sliding_hit_row(c, slot, now, limit, amount, &allowed);
    lock_give(c, row_lock(c, slot));
    if (rc == 0) result = Py_NewRef(allowed ? Py_True : Py_False);
out:
    leave(c);
    return result;
}

/* sliding_get(key) -> (previous, current, ns into the current window, period ns), as seen
 * now: read under the row lock (a key never counted: zeros). */
PyObject *Core_sliding_get(Core *c, PyObject *key) {
    PyObject *result = NULL;
    int64_t now = 0, slot;
    Sliding s;
    if (enter(c) < 0) return NULL;
    if (is_role(c, ROLE_SLIDING_COUNTER, 2, SLIDING_STATE_BYTES) < 0 || now_ns(c, &now) < 0) goto out;
    int64_t period = c->rings[0].bucket_ns;
    int got = lock_key(c, key, 0, now, &slot);
    if (got < 0) goto out;
    if (got == 0) {
        result = Py_BuildValue("(iiLL)", 0, 0, (long long)(now % period), (long long)period);
        goto out;
    }
    int rc = sliding_read(c, slot, now, &s);
    lock_give(c, row_lock(c, slot));
    if (rc == 0)
        result = Py_BuildValue("(LLLL)", (long long)s.previous, (long long)s.current, (long long)s.elapsed,
                               (long long)period);
out:
    leave(c);
    return result;
}
