/* counters.c -- limits' fixed window and sliding window counter, and the token bucket: a few
 * words of state per key, each changed in one section under the key's row lock. Three types
 * (FixedWindowCore, SlidingCounterCore, TokenBucketCore, at the end), one role each.
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

/* At open (the types' check hooks, below): is the segment of `role`, its rows with room for its state? */
static int is_role(Core *c, int role, int64_t buckets, int64_t bytes) {
    if (c->role == role && c->keyed && !c->limiter && c->n_rings == 1 && c->rings[0].n == buckets &&
        !c->rings[0].log && c->empty_bytes >= bytes && c->rings[0].bucket_ns <= MAX_SPAN_NS)
        return 0;
    return not_role(c);
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
    int lock = row_lock(c, slot);
    if (fixed_read(c, slot, now, f) < 0) return -1;
    SECTION("fixed_incr");
    seq_open(c, lock);  /* readers without the lock (fixedsum.c) see no half of it: core.h */
    STORE(intent_at(c, lock), slot);
    if (!f->live || f->count == 0) {
        STORE(st + FIXED_STATE_START, now);
        STORE(st + FIXED_STATE_COUNT, amount);
        f->start = now, f->count = amount, f->live = 1;
    } else {
        f->count = sat_add(f->count, amount);
        STORE(st + FIXED_STATE_COUNT, f->count);
    }
    touch_last(ROW(c, slot), f->start > now ? f->start : now);
    seq_close(c, lock);
    END_SECTION();
    return 0;
}

/* fixed_incr(key, amount=1) -> (count, end ns): the key's count after this incr, and when its
 * window ends. */
static PyObject *Core_fixed_incr(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    PyObject *key, *result = NULL;
    int64_t amount, now = 0, slot;
    Fixed f;
    if (enter_key_cost(c, &kc, args, nargs, kwnames, "fixed_incr", "amount", &key, &amount, 0) < 0 ||
        now_ns(c, &now) < 0)
        goto out;
    if (key_lock_at(c, &kc, key, 1, now, &slot) < 0) {  /* a full table: on_full answers (or raises) */
        if (met_full(c, 1))  /* admitted: counted nowhere; refused: a count over any limit */
            result = Py_BuildValue("(LL)", (long long)(full_allows(c) ? 0 : FULL_DENY_COUNT),
                                   (long long)(now + c->rings[0].bucket_ns));
        goto out;
    }
    int rc = fixed_incr_row(c, slot, now, amount, &f);
    key_unlock(c, &kc);
    if (rc == 0) result = Py_BuildValue("(LL)", (long long)f.count, (long long)(f.start + c->rings[0].bucket_ns));
out:
    return key_leave(c, &kc, result);
}

/* fixed_get(key[, now_ns]) -> (count, end ns) of the key's live window, or None: read under the
 * row lock. now_ns: the clock read once by a caller that asks several segments (limits' get of
 * a key with no period in it), instead of this core's clock (a Python call for limits' wall one). */
static PyObject *Core_fixed_get(Core *c, PyObject *const *args, Py_ssize_t nargs) {
    KeyCall kc = KEY_CALL;
    PyObject *result = NULL, *key;
    int64_t now = 0, slot;
    Fixed f;
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "fixed_get() takes a key and an optional now_ns, not %zd arguments", nargs);
        return NULL;
    }
    key = args[0];
    int have_now = nargs == 2 && args[1] != Py_None;  /* None: this core's clock, as if left out */
    if (have_now) {
        now = PyLong_AsLongLong(args[1]);
        if (now == -1 && PyErr_Occurred()) return NULL;
        if (now < 0) {
            PyErr_SetString(PyExc_ValueError, "fixed_get(): now_ns must be >= 0");
            return NULL;
        }
    }
    if (key_enter(c, &kc) < 0) return NULL;
    if (!have_now && now_ns(c, &now) < 0) goto out;
    int got = key_lock_at(c, &kc, key, 0, now, &slot);
    if (got < 0) goto out;
    if (got == 0) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    int rc = fixed_read(c, slot, now, &f);
    key_unlock(c, &kc);
    if (rc < 0) goto out;
    if (f.live) result = Py_BuildValue("(LL)", (long long)f.count, (long long)(f.start + c->rings[0].bucket_ns));
    else result = Py_NewRef(Py_None);
out:
    return key_leave(c, &kc, result);
}

/* A key's live count in units at `now` (0: no live window, or no such key), read under its row
 * lock as fixed_get reads it, with no answer to build: FixedSum (fixedsum.c) sums it over a
 * storage's fixed windows. 0, or -1 with an exception set (closed, corrupt, a lock timeout). */
int fixed_units_at(Core *c, PyObject *key, int64_t now, int64_t *units) {
    KeyCall kc = KEY_CALL;
    int64_t slot;
    Fixed f;
    *units = 0;
    if (key_enter(c, &kc) < 0) return -1;
    int rc = key_lock_at(c, &kc, key, 0, now, &slot);
    if (rc > 0) {
        if (LOAD(seq_at(c, kc.lock)) & 1) seq_close(c, kc.lock);  /* odd under our lock: a section died inside */
        rc = fixed_read(c, slot, now, &f);
        if (rc == 0 && f.live) *units = f.count;
    }
    key_leave(c, &kc, NULL);
    return rc < 0 ? -1 : 0;
}

/* Is `o` a FixedWindowCore? Its type is the one whose init is its spec's (role types are final). */
static int fixed_window_spec_init(Core *c, PyObject *args, PyObject *kw);  /* ROLE_SPEC's, below */
int is_fixed_core(PyObject *o) { return Py_TYPE(o)->tp_init == (initproc)fixed_window_spec_init; }

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
/* limits' weighted count, floored to whole `unit`s (1: whole counts; the storage counts in
 * thousandths of a hit and floors to whole hits, as limits floors its float count). */
static int64_t weighted(const Sliding *s, int64_t period, int64_t unit) {
    __int128 part = (__int128)s->previous * (period - s->elapsed) / period;  /* <= previous */
    if (unit <= 1) return sat_add((int64_t)part, s->current);
    __int128 exact = (__int128)s->previous * (period - s->elapsed) + (__int128)s->current * period;
    __int128 whole = exact / ((__int128)period * unit) * unit;  /* >= 0: counts are never negative */
    return whole > INT64_MAX ? INT64_MAX : (int64_t)whole;
}

/* Section "sliding_hit": count `amount` in the key's current window if limits' weighted count
 * leaves room for it under `limit`; else nothing. Caller holds the row lock.
 * Invariant between stores: moving to a new window stores its index first, then the previous
 * count, then the current one, so a tear shows the new window holding the old counts (at a
 * weight of 1, more than their due: refusals early), never fewer hits than were counted; in
 * the same window the count is one store. The key's last write goes last, never backwards.
 * Repair: none (nothing derived). */
static int sliding_hit_row(Core *c, int64_t slot, int64_t now, int64_t limit, int64_t amount, int64_t unit,
                           int *allowed) {
    int64_t *st = state_of(c, slot);
    Sliding s;
    if (sliding_read(c, slot, now, &s) < 0) return -1;
    *allowed = amount <= limit && weighted(&s, c->rings[0].bucket_ns, unit) <= limit - amount;
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

/* sliding_hit(key, limit, amount=1, unit=1) -> bool: whether amount was counted; the weighted
 * count is floored to whole units before it is compared. */
static PyObject *Core_sliding_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key", "limit", "amount", "unit"};
    PyObject *a[4], *result = NULL;
    int64_t limit, amount, now = 0, slot, unit = 1;
    int allowed = 0;
    if (parse_required(args, nargs, kwnames, names, 4, 2, a, "sliding_hit", "a key and a limit") < 0) return NULL;
    if (key_enter(c, &kc) < 0) return NULL;
    if (cost_of(a[1], &limit, 0) < 0 ||
        cost_of(a[2], &amount, 0) < 0 || (a[3] != NULL && cost_of(a[3], &unit, 1) < 0) || now_ns(c, &now) < 0)
        goto out;
    if (amount > limit) {  /* as limits: never, and no key is made for it */
        result = Py_NewRef(Py_False);
        goto out;
    }
    if (key_lock_at(c, &kc, a[0], 1, now, &slot) < 0) {  /* a full table: on_full answers (or raises) */
        if (met_full(c, 1)) result = Py_NewRef(full_allows(c) ? Py_True : Py_False);
        goto out;
    }
    int rc = sliding_hit_row(c, slot, now, limit, amount, unit, &allowed);
    key_unlock(c, &kc);
    if (rc == 0) result = Py_NewRef(allowed ? Py_True : Py_False);
out:
    return key_leave(c, &kc, result);
}

/* sliding_get(key) -> (previous, current, ns into the current window, period ns), as seen
 * now: read under the row lock (a key never counted: zeros). */
static PyObject *Core_sliding_get(Core *c, PyObject *key) {
    KeyCall kc = KEY_CALL;
    PyObject *result = NULL;
    int64_t now = 0, slot, period = c->rings[0].bucket_ns;  /* the Core's copy: no segment word */
    Sliding s;
    if (key_enter(c, &kc) < 0) return NULL;
    int got = key_lock(c, &kc, key, 0, &now, &slot);
    if (got < 0) goto out;
    if (got == 0) {
        result = Py_BuildValue("(iiLL)", 0, 0, (long long)(now % period), (long long)period);
        goto out;
    }
    int rc = sliding_read(c, slot, now, &s);
    key_unlock(c, &kc);
    if (rc == 0)
        result = Py_BuildValue("(LLLL)", (long long)s.previous, (long long)s.current, (long long)s.elapsed,
                               (long long)period);
out:
    return key_leave(c, &kc, result);
}

/* ---- token bucket (GCRA) ------------------------------------------------------------------ *
 *
 * shmwin.TokenBucket: golang.org/x/time/rate's bucket of at most `burst` tokens, refilled one
 * token per emission interval T, kept as one word per key: the theoretical arrival time `tat`,
 * the time from which the bucket is full. At now the bucket holds (now + burst x T - tat) // T
 * tokens (burst when tat <= now). Taking `cost` tokens is allowed iff
 *     max(tat, now) + cost x T - burst x T <= now,
 * and then tat = max(tat, now) + cost x T: all in integer ns, exactly (T and burst are the
 * ring's bucket width and bucket count; burst x T <= MAX_SPAN_NS, so nothing overflows). An
 * emptied row (EMPTY_EPOCH) is a full bucket, and so is a reclaimed one: the key's last write
 * is kept at tat - burst x T at least, so the key table reclaims the row (idle: burst x T after
 * its last write, the ring's span) only once its bucket is full again. A tat ahead of now (a
 * clock that lags the one that wrote it) counts as it is: refusals early, never admissions. */

typedef struct {
    int64_t tat;       /* max(stored tat, now) */
    int64_t T, tol;    /* the emission interval, and burst x T */
} Token;

/* At open: is the segment a token bucket's, its rows with room for its state? */
static int is_token(Core *c) {
    const Ring *r = &c->rings[0];
    if (c->role == ROLE_TOKEN_BUCKET && c->keyed && !c->limiter && c->n_rings == 1 && !r->log &&
        c->empty_bytes >= TOKEN_STATE_BYTES && r->n >= 1 && r->bucket_ns >= 1 &&
        r->bucket_ns <= MAX_SPAN_NS / (r->n + 2))
        return 0;
    return not_role(c);
}

/* The bucket's cost check: 0 <= cost <= burst, or a ValueError (as x/time/rate never allows
 * more than burst at once, we refuse to ask). */
static int token_cost(Core *c, PyObject *obj, int64_t *cost) {
    if (cost_of(obj, cost, 0) < 0) return -1;
    if (*cost <= c->rings[0].n) return 0;
    PyErr_Format(PyExc_ValueError, "cost %lld is more than the bucket of %R holds (burst %lld)", (long long)*cost,
                 c->name, (long long)c->rings[0].n);
    return -1;
}

/* The key's state at now, checked. Caller holds the row lock. */
static int token_read(Core *c, int64_t slot, int64_t now, Token *t) {
    int64_t tat = LOAD(state_of(c, slot) + TOKEN_STATE_TAT);
    t->T = c->rings[0].bucket_ns;
    t->tol = t->T * c->rings[0].n;
    t->tat = now;
    if (tat == EMPTY_EPOCH) return 0;
    if (tat < 0 || tat > MAX_NOW_NS + t->tol) return corrupt(c, slot, "arrival time", tat);
    if (tat > now) t->tat = tat;
    return 0;
}

/* Section "token_take": take `cost` tokens if the bucket holds them; else nothing (`commit`
 * 0: only the verdict). Taking nothing (cost 0) is always allowed, as token_hit answers it,
 * even from a clock that lags the tat's writer. Caller holds the row lock.
 * Invariant between stores: the key's last write moves first (to the new tat - burst x T,
 * never backwards), then tat in one store: a tear leaves either the old tat with a later last
 * write (the row kept longer than needed), or the new state whole. Never a tat whose row the
 * key table could reclaim before its bucket is full (which would hand out a full bucket early).
 * Repair: none (nothing derived). */
static int token_take_row(Core *c, int64_t slot, int64_t now, int64_t cost, int commit, Token *t, int *allowed) {
    if (token_read(c, slot, now, t) < 0) return -1;
    int64_t next = t->tat + cost * t->T;  /* < 2**62 + 2 x 2**60 */
    *allowed = cost == 0 || next - t->tol <= now;
    if (!*allowed || !commit || cost == 0) return 0;
    SECTION("token_take");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    touch_last(ROW(c, slot), next - t->tol);
    STORE(state_of(c, slot) + TOKEN_STATE_TAT, next);
    t->tat = next;
    END_SECTION();
    return 0;
}

/* token_hit(key, cost=1) -> bool: take cost tokens if the bucket holds them (TokenBucket.hit). */
static PyObject *Core_token_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key", "cost"};
    PyObject *a[2], *result = NULL;
    int64_t cost = 1, now = 0, slot;
    int allowed = 0;
    Token t;
    if (parse_keyed(args, nargs, kwnames, names, 2, a, "token_hit") < 0) return NULL;
    if (key_enter(c, &kc) < 0) return NULL;
    if ((a[1] != NULL && token_cost(c, a[1], &cost) < 0)) goto out;
    if (cost == 0) {  /* x/time/rate: taking nothing is always allowed (and makes no key) */
        result = Py_NewRef(Py_True);
        goto out;
    }
    if (tally_ready(c) < 0 || now_ns(c, &now) < 0) goto out;
    if (key_lock_at(c, &kc, a[0], 1, now, &slot) < 0) {
        if (met_full(c, 1)) {
            note_decision(c, now, full_allows(c), 0);
            result = Py_NewRef(full_allows(c) || DECIDER(c)->shadow ? Py_True : Py_False);
        }
        goto out;
    }
    int rc = token_take_row(c, slot, now, cost, 1, &t, &allowed);
    key_unlock(c, &kc);
    if (rc == 0) {
        /* near the limit: at most a fifth of the burst left after the take */
        int64_t left = allowed ? (now - t.tat + t.tol) / t.T : 0, five;
        int near = allowed && !__builtin_mul_overflow(left, 5, &five) && five <= t.tol / t.T;  /* burst */
        note_decision(c, now, allowed, near);
        result = Py_NewRef(allowed || DECIDER(c)->shadow ? Py_True : Py_False);
    }
out:
    return moved_retry(c, key_leave(c, &kc, result), "token_hit", args, nargs, kwnames);
}

/* token_check(key, cost, commit) -> (allowed, tokens, wait_ns | None, full_ns): take (commit)
 * or test; the whole tokens left after it, how long until cost tokens are there (0: now;
 * None: never, a full table met), and how long until the bucket is full. A test of an
 * unknown key makes no key. */
static PyObject *Core_token_check(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key", "cost", "commit"};
    PyObject *a[3], *result = NULL;
    int64_t cost, now = 0, slot, tokens, wait_ns = 0, full_ns = 0;
    int allowed = 0, commit;
    Token t;
    if (parse(args, nargs, kwnames, names, 3, a, "token_check") < 0) return NULL;
    if (a[0] == NULL || a[1] == NULL || a[2] == NULL) {
        PyErr_SetString(PyExc_TypeError, "token_check() needs key, cost and commit");
        return NULL;
    }
    if (key_enter(c, &kc) < 0) return NULL;
    if ((commit = PyObject_IsTrue(a[2])) < 0 || token_cost(c, a[1], &cost) < 0 ||
        now_ns(c, &now) < 0)
        goto out;
    tokens = c->rings[0].n;
    int got = key_lock_at(c, &kc, a[0], commit && cost > 0, now, &slot);  /* taking nothing makes no key */
    if (got < 0) {
        if (!met_full(c, 1)) goto out;
        allowed = full_allows(c);
        wait_ns = -1;
    } else if (got == 0) {  /* never seen: a full bucket */
        allowed = 1;
    } else {
        int rc = token_take_row(c, slot, now, cost, commit, &t, &allowed);
        key_unlock(c, &kc);
        if (rc < 0) goto out;
        int64_t left = now + t.tol - t.tat;  /* <= burst x T; < 0 only under a lagging clock */
        tokens = left > 0 ? left / t.T : 0;
        full_ns = t.tat - now;
        wait_ns = allowed ? 0 : t.tat + cost * t.T - t.tol - now;
    }
    if (wait_ns < 0) result = Py_BuildValue("(OLOL)", allowed ? Py_True : Py_False, (long long)tokens, Py_None,
                                            (long long)full_ns);
    else result = Py_BuildValue("(OLLL)", allowed ? Py_True : Py_False, (long long)tokens, (long long)wait_ns,
                                (long long)full_ns);
out:
    return moved_retry(c, key_leave(c, &kc, result), "token_check", args, nargs, kwnames);
}

/* ---- the types: one per role ---------------------------------------------------------------- */

static int fixed_check(Core *c) { return is_role(c, ROLE_FIXED_WINDOW, 1, FIXED_STATE_BYTES); }
static int sliding_check(Core *c) { return is_role(c, ROLE_SLIDING_COUNTER, 2, SLIDING_STATE_BYTES); }

static const RoleHooks fixed_hooks = {
    .role = "fixed-window", .keyed_role = ROLE_FIXED_WINDOW, .state_bytes = FIXED_STATE_BYTES, .check = fixed_check};
static const RoleHooks sliding_hooks = {
    .role = "sliding-counter", .keyed_role = ROLE_SLIDING_COUNTER, .state_bytes = SLIDING_STATE_BYTES, .check = sliding_check};
static const RoleHooks token_hooks = {
    .role = "token-bucket", .keyed_role = ROLE_TOKEN_BUCKET, .state_bytes = TOKEN_STATE_BYTES, .check = is_token};

static PyMethodDef fixed_methods[] = {
    METHOD_KW(fixed_incr, Core_fixed_incr, "key, amount=1",
        "limits' fixed window: count amount in key's live window (one starts now if none is): (count, end ns)."),
    METHOD_POS(fixed_get, Core_fixed_get, "key, now_ns=None", "(count, end ns) of key's live fixed window, or None."),
    {NULL},
};

static PyMethodDef sliding_methods[] = {
    METHOD_KW(sliding_hit, Core_sliding_hit, "key, limit, amount=1",
        "limits' sliding window counter: count amount if the weighted count leaves room; whether it did."),
    METHOD_O(sliding_get, Core_sliding_get, "key", "(previous, current, ns into the current window, period ns)."),
    {NULL},
};

static PyMethodDef token_methods[] = {
    METHOD_KW(token_hit, Core_token_hit, "key, cost=1",
        "A token bucket: take cost tokens from key's bucket if it holds them; whether it did."),
    METHOD_KW(token_check, Core_token_check, "key, cost, commit",
        "A token bucket's take (commit) or test: (allowed, tokens left, wait_ns or None, ns until full)."),
    DECIDER_METHODS,  /* its live limits: moved when its rate or burst changes (live.c; backends/shm/live.py) */
    {NULL},
};

ROLE_SPEC(fixed_window_spec, "FixedWindowCore", Core, fixed_hooks, fixed_methods,
          "A segment of role fixed-window: limits' fixed windows, and what every segment has (Core).");
ROLE_SPEC(sliding_counter_spec, "SlidingCounterCore", Core, sliding_hooks, sliding_methods,
          "A segment of role sliding-counter: limits' sliding window counters, and what every segment has.");
/* a decider: its tally is an object field of its own (DeciderObject, limiter.c) */
DECIDER_SPEC(token_bucket_spec, "TokenBucketCore", token_hooks, token_methods,
             "A segment of role token-bucket: each key's bucket (GCRA), its decisions, and what every segment has.");
