/* cache.c -- the counter cache type (CounterCacheCore): Django's cache of int counters
 * (shmwin.integrations.django.ShmwinCounterCache), each key's counter and its expiry changed in
 * one section under the key's row lock, so that django-ratelimit's add-then-incr is exact
 * across processes with no assumption on the order of the calls.
 *
 * The segment is a keyed window of role "counter-cache" (format_rows.py: CACHE_STATE): a key's
 * row holds (expires_ns, value); the value is live while now < expires_ns. The ring in the
 * header has one bucket of I, the key's idle time (a second), and its limit is T, the longest
 * timeout the cache keeps. Every write keeps the key's last write at least expires_ns - I, so
 * the key table never reuses the row of a live key, and reuses it about I after it expired.
 *
 *   counter_add     set the value if the key holds none live (Django's add): whether it did
 *   counter_set     set the value and its expiry (Django's set)
 *   counter_incr    add delta to the live value (Django's incr/decr): the new value, or None
 *   counter_get     the live value, or None
 *   counter_touch   a new expiry for the live value: whether there was one
 *   counter_delete  forget the value: whether there was a live one
 *
 * A timeout is 0..T ns (None: T); 0 stores a value already expired, as Django's caches do.
 * Junk never reaches undefined behaviour: an expiry no clock can reach is a CorruptSegmentError,
 * an incr past int64 an OverflowError with nothing stored. Nothing here is derived data: the
 * lock's repair has nothing to do (each section says what a tear leaves).
 */
#include "core.h"

static int64_t *cc_state(Core *c, int64_t slot) { return (int64_t *)(ROW(c, slot) + c->rings_off); }

/* At open (the type's check hook): a counter cache whose rows hold a counter? */
static int is_counter_cache(Core *c) {
    const Ring *r = &c->rings[0];
    if (c->role == ROLE_COUNTER_CACHE && c->keyed && !c->limiter && c->n_rings == 1 && r->n == 1 && !r->log &&
        c->empty_bytes >= CACHE_STATE_BYTES && r->bucket_ns > 0 && r->bucket_ns <= MAX_SPAN_NS && r->limit > 0 &&
        r->limit <= MAX_SPAN_NS)
        return 0;
    return not_role(c);
}

typedef struct {
    int64_t expires_ns, value;
    int live;
} Counter;

/* The row's counter at `now`, checked. Caller holds the row lock. */
static int cc_read(Core *c, int64_t slot, int64_t now, Counter *k) {
    const int64_t *st = cc_state(c, slot);
    k->expires_ns = LOAD(st + CACHE_STATE_EXPIRES_NS);
    k->value = LOAD(st + CACHE_STATE_VALUE);
    k->live = 0;
    if (k->expires_ns == EMPTY_EPOCH) return 0;
    if (k->expires_ns < 0 || k->expires_ns > MAX_NOW_NS + MAX_SPAN_NS) {
        PyErr_Format(c->st->corrupt, "window %R: key row %lld holds an impossible expiry %lld: the segment is corrupt",
                     c->name, (long long)slot, (long long)k->expires_ns);
        return -1;
    }
    k->live = now < k->expires_ns;
    return 0;
}

/* The row stays the key's until its value expires: its last write at least expires - I (it may
 * lie ahead of now: the key is not idle before). */
static void keep_until(Core *c, int64_t slot, int64_t now, int64_t expires_ns) {
    int64_t at = expires_ns - c->idle_ns;
    touch_last(ROW(c, slot), at > now ? at : now);
}

/* Section "counter_write": store value, then its expiry. Caller holds the row lock.
 * Invariant between stores: the value goes first, so a tear leaves either the old expiry on the
 * new value (a key that held none still holds none: expiry past or EMPTY_EPOCH) or the whole
 * write; never an old value made live again. The key's last write goes last, never backwards.
 * Repair: none. */
static void cc_write(Core *c, int64_t slot, int64_t now, int64_t value, int64_t expires_ns) {
    int64_t *st = cc_state(c, slot);
    SECTION("counter_write");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    STORE(st + CACHE_STATE_VALUE, value);
    STORE(st + CACHE_STATE_EXPIRES_NS, expires_ns);
    keep_until(c, slot, now, expires_ns);
    END_SECTION();
}

/* ---- arguments ------------------------------------------------------------------------------ */

/* An int64 counter value: an int (never a bool, a float or anything else). */
static int value_of(PyObject *obj, int64_t *v, const char *what) {
    if (obj == NULL || PyBool_Check(obj) || !PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %R", what, obj == NULL ? Py_None : obj);
        return -1;
    }
    int overflow;
    *v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (*v == -1 && PyErr_Occurred()) return -1;
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "%s %R does not fit a 64-bit counter", what, obj);
        return -1;
    }
    return 0;
}

/* A timeout in ns: 0..T (the ring's limit), None: T (the longest the segment keeps). */
static int ttl_of(Core *c, PyObject *obj, int64_t *ttl_ns) {
    int64_t longest_ns = c->rings[0].limit;
    if (obj == NULL || obj == Py_None) {
        *ttl_ns = longest_ns;
        return 0;
    }
    if (value_of(obj, ttl_ns, "timeout_ns") < 0) return -1;
    if (*ttl_ns < 0 || *ttl_ns > longest_ns) {
        PyErr_Format(PyExc_ValueError, "timeout_ns must be 0..%lld (this cache's longest), not %lld",
                     (long long)longest_ns, (long long)*ttl_ns);
        return -1;
    }
    return 0;
}

/* ---- the methods ------------------------------------------------------------------------------ */

/* The shared path of add and set: key, value, timeout parsed, the key's row locked (made if
 * new). Returns 1 with the row locked, 0 when a full table answered (*answered: on_full's
 * answer), -1 on error. */
static int cc_lock_new(Core *c, KeyCall *kc, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                       const char *fname, int64_t *now, int64_t *value, int64_t *ttl_ns, int64_t *slot) {
    static const char *const names[] = {"key", "value", "timeout_ns"};
    PyObject *a[3];
    if (parse_keyed(args, nargs, kwnames, names, 3, a, fname) < 0) return -1;
    if (key_enter(c, kc) < 0 || value_of(a[1], value, "value") < 0 || ttl_of(c, a[2], ttl_ns) < 0 ||
        now_ns(c, now) < 0)
        return -1;
    if (key_lock_at(c, kc, a[0], 1, *now, slot) < 0) return met_full(c, 1) ? 0 : -1;
    return 1;
}

/* counter_add(key, value, timeout_ns=None) -> bool: set the value if the key holds none live. */
static PyObject *Core_counter_add(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    PyObject *result = NULL;
    int64_t now = 0, value, ttl_ns, slot;
    Counter k;
    int got = cc_lock_new(c, &kc, args, nargs, kwnames, "counter_add", &now, &value, &ttl_ns, &slot);
    if (got == 0) result = Py_NewRef(Py_False);  /* a full table: nothing stored, whatever on_full says */
    if (got <= 0) goto out;
    int rc = cc_read(c, slot, now, &k);
    if (rc == 0 && !k.live) cc_write(c, slot, now, value, now + ttl_ns);
    key_unlock(c, &kc);
    if (rc == 0) result = Py_NewRef(k.live ? Py_False : Py_True);
out:
    return key_leave(c, &kc, result);
}

/* counter_set(key, value, timeout_ns=None) -> bool: set the value (False: a full table refused it). */
static PyObject *Core_counter_set(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    PyObject *result = NULL;
    int64_t now = 0, value, ttl_ns, slot;
    int got = cc_lock_new(c, &kc, args, nargs, kwnames, "counter_set", &now, &value, &ttl_ns, &slot);
    if (got == 0) result = Py_NewRef(Py_False);
    if (got <= 0) goto out;
    cc_write(c, slot, now, value, now + ttl_ns);
    key_unlock(c, &kc);
    result = Py_NewRef(Py_True);
out:
    return key_leave(c, &kc, result);
}

/* Section "counter_incr": one store, the new value (its expiry unchanged). Repair: none. */
static void cc_incr_row(Core *c, int64_t slot, int64_t value) {
    SECTION("counter_incr");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    STORE(cc_state(c, slot) + CACHE_STATE_VALUE, value);
    END_SECTION();
}

/* counter_incr(key, delta=1) -> the new value, or None if the key holds none live. */
static PyObject *Core_counter_incr(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key", "delta"};
    PyObject *a[2], *result = NULL;
    int64_t now = 0, delta = 1, slot, sum = 0;
    Counter k;
    if (parse_keyed(args, nargs, kwnames, names, 2, a, "counter_incr") < 0) return NULL;
    if (key_enter(c, &kc) < 0 || (a[1] != NULL && value_of(a[1], &delta, "delta") < 0) || now_ns(c, &now) < 0)
        goto out;
    int got = key_lock_at(c, &kc, a[0], 0, now, &slot);  /* an incr makes no key */
    if (got <= 0) {
        if (got == 0) result = Py_NewRef(Py_None);
        goto out;
    }
    int rc = cc_read(c, slot, now, &k), over = 0;
    if (rc == 0 && k.live) {
        over = __builtin_add_overflow(k.value, delta, &sum);
        if (!over) cc_incr_row(c, slot, sum);
    }
    key_unlock(c, &kc);
    if (rc < 0) goto out;
    if (over) PyErr_Format(PyExc_OverflowError, "%lld + %lld does not fit a 64-bit counter: nothing counted",
                           (long long)k.value, (long long)delta);
    else result = k.live ? PyLong_FromLongLong(sum) : Py_NewRef(Py_None);
out:
    return key_leave(c, &kc, result);
}

/* The key's row locked if it has one (0: none), and its counter read. */
static int cc_lock_read(Core *c, KeyCall *kc, PyObject *key, int64_t *now, int64_t *slot, Counter *k) {
    if ((!kc->entered && key_enter(c, kc) < 0) || now_ns(c, now) < 0) return -1;
    int got = key_lock_at(c, kc, key, 0, *now, slot);
    if (got <= 0) return got;
    return cc_read(c, *slot, *now, k) < 0 ? -1 : 1;
}

/* counter_get(key) -> the live value, or None. */
static PyObject *Core_counter_get(Core *c, PyObject *key) {
    KeyCall kc = KEY_CALL;
    PyObject *result = NULL;
    int64_t now = 0, slot;
    Counter k = {0, 0, 0};
    int got = cc_lock_read(c, &kc, key, &now, &slot, &k);
    key_unlock(c, &kc);
    if (got >= 0) result = k.live ? PyLong_FromLongLong(k.value) : Py_NewRef(Py_None);
    return key_leave(c, &kc, result);
}

/* Section "counter_touch": one store, the new expiry. Repair: none. */
static void cc_touch_row(Core *c, int64_t slot, int64_t now, int64_t expires_ns) {
    SECTION("counter_touch");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    STORE(cc_state(c, slot) + CACHE_STATE_EXPIRES_NS, expires_ns);
    keep_until(c, slot, now, expires_ns);
    END_SECTION();
}

/* counter_touch(key, timeout_ns=None) -> bool: a new expiry for the live value, if there is one. */
static PyObject *Core_counter_touch(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key", "timeout_ns"};
    PyObject *a[2], *result = NULL;
    int64_t now = 0, ttl_ns, slot;
    Counter k = {0, 0, 0};
    if (parse_keyed(args, nargs, kwnames, names, 2, a, "counter_touch") < 0) return NULL;
    int got = key_enter(c, &kc) < 0 || ttl_of(c, a[1], &ttl_ns) < 0 ? -1 : cc_lock_read(c, &kc, a[0], &now, &slot, &k);
    if (got > 0 && k.live) cc_touch_row(c, slot, now, now + ttl_ns);
    key_unlock(c, &kc);
    if (got >= 0) result = Py_NewRef(k.live ? Py_True : Py_False);
    return key_leave(c, &kc, result);
}

/* Section "counter_delete": one store, no expiry (EMPTY_EPOCH: no value). Repair: none. */
static void cc_delete_row(Core *c, int64_t slot) {
    SECTION("counter_delete");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    STORE(cc_state(c, slot) + CACHE_STATE_EXPIRES_NS, EMPTY_EPOCH);
    END_SECTION();
}

/* counter_delete(key) -> bool: forget the value; whether a live one was there. The row stays the
 * key's until the key table reclaims it (its last write then says so). */
static PyObject *Core_counter_delete(Core *c, PyObject *key) {
    KeyCall kc = KEY_CALL;
    PyObject *result = NULL;
    int64_t now = 0, slot;
    Counter k = {0, 0, 0};
    int got = cc_lock_read(c, &kc, key, &now, &slot, &k);
    if (got > 0 && k.expires_ns != EMPTY_EPOCH) cc_delete_row(c, slot);
    key_unlock(c, &kc);
    if (got >= 0) result = Py_NewRef(k.live ? Py_True : Py_False);
    return key_leave(c, &kc, result);
}

/* ---- the type ----------------------------------------------------------------------------- */

static const RoleHooks counter_cache_hooks = {
    .role = "counter-cache", .keyed_role = ROLE_COUNTER_CACHE, .state_bytes = CACHE_STATE_BYTES,
    .check = is_counter_cache};

static int counter_cache_init(Core *c, PyObject *args, PyObject *kw) {
    return core_init(c, args, kw, &counter_cache_hooks);
}

static PyMethodDef counter_cache_methods[] = {
    METHOD_KW(counter_add, Core_counter_add, "key, value, timeout_ns=None",
        "Set key's value for timeout_ns if it holds none live: whether it did."),
    METHOD_KW(counter_set, Core_counter_set, "key, value, timeout_ns=None",
        "Set key's value for timeout_ns: True, or False if a full key table refused it."),
    METHOD_KW(counter_incr, Core_counter_incr, "key, delta=1",
        "Add delta to key's live value: the new value, or None."),
    METHOD_O(counter_get, Core_counter_get, "key", "key's live value, or None."),
    METHOD_KW(counter_touch, Core_counter_touch, "key, timeout_ns=None",
        "A new expiry for key's live value: whether it had one."),
    METHOD_O(counter_delete, Core_counter_delete, "key", "Forget key's value: whether it held a live one."),
    {NULL},
};

/* no object fields of its own: Core's GC support, inherited */
ROLE_SPEC(counter_cache_spec, "CounterCacheCore", Core, counter_cache_init, counter_cache_methods,
          "A segment of role counter-cache: each key's int counter and its expiry, and what every "
          "segment has (Core).");
