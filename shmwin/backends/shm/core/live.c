/* live.c -- live limits: a limiter's limits changed while every process uses it (issue 31).
 *
 * The header's live words (layout.py, "Live limits"): live_gen, live_changed_ns, and two
 * tables of MAX_RINGS limits in live_limits. Generation 0 is the ring table's limits (no
 * change yet); generation g's limits are table g & 1.
 *
 * Section "live" (set_limits), under LOCK_KEY_TABLE (setters take turns): write the table of
 * g + 1 -- the one no reader of g reads -- then live_changed_ns, then live_gen = g + 1
 * (release). Invariant: a published generation's table is whole. Repair: none; a setter that
 * dies before its last store published nothing (the half-written table is g + 1's, which no
 * one reads until a setter writes it whole again).
 *
 * Readers: each keyed call loads live_gen (key_lock_at, core.h: one acquire load, under the
 * key's row lock) and, when it is not the generation its core read last, live_reload reads the
 * table, then live_gen again: unchanged, the table was whole (a change writes the other
 * table; two changes in between change the word). So the newest limits hold from every
 * process's next call, whatever limits its code passed when it opened the segment.
 *
 * A concurrency's limit changes in place the same way (its one ring's limit: 1..MAX_CONCURRENCY;
 * its rows hold an entry per process, whatever the limit: concurrency.c). A token bucket's
 * limits never change in place; set_limits with its own limits only says when it last changed
 * (a moved bucket's new segment, for shmwin show).
 *
 * Only limits change in place: periods, buckets and a compact ring's count width are the
 * segment's layout. For those, shmwin/live.py makes a new segment under the name, seeded with
 * the old counts, and retires this one (a token bucket's rate or burst: always so): bit LIVE_MOVED of live_gen (section "retire", one
 * store under LOCK_KEY_TABLE; a death before it leaves the segment live, as it was). Every
 * keyed call of a retired segment raises WindowMovedError (but the retiring core's own: the
 * mover reads each key's counts under its row lock, so none is counted there after); a limiter's methods answer it with
 * moved_retry: the backend's hook reopens the name and hands back the method to call instead.
 */
#include "core.h"

#define RELOAD_TRIES 1000  /* a reader outrun by this many changes in a row: a LockTimeoutError */

/* Do this segment's limits change in place (a limiter's, a concurrency's)? */
static int changes_in_place(Core *c) { return c->limiter || c->hooks->live_max > 0; }

static int64_t *live_table(Core *c, int64_t gen) {
    return W(c, LIVE_LIMITS_OFF + (gen & 1) * MAX_RINGS * WORD_BYTES);
}

static int moved_error(Core *c) {
    PyErr_Format(c->st->moved, "window %R was replaced under its name (its rates changed): open it again",
                 c->name);
    return -1;
}

/* Can ring i hold `limit` in place? Its counts must fit their width (a compact ring's counts
 * never exceed COUNT32_MAX when 4 bytes wide). */
static int limit_fits(Core *c, int i, int64_t limit) {
    if (!c->limiter && c->hooks->live_max > 0) return limit >= 1 && limit <= c->hooks->live_max;  /* a concurrency's */
    return limit >= 0 && !(c->rings[i].cw == COUNT32_BYTES && limit > COUNT32_MAX);
}

/* The header's newest limits into this core: 0, or -1 with WindowMovedError (retired),
 * CorruptSegmentError (junk) or LockTimeoutError (outrun) set. */
int live_reload(Core *c) {
    int64_t limits[MAX_RINGS];
    for (int tries = 0; tries < RELOAD_TRIES; tries++) {
        int64_t gen = LOAD(W(c, LIVE_GEN_OFF));
        if (gen < 0) {  /* junk: bit 63 is never set (and a negative word has bit 62 too) */
            PyErr_Format(c->st->corrupt, "window %R has a junk live generation (%lld)", c->name, (long long)gen);
            return -1;
        }
        if (gen & LIVE_MOVED) return moved_error(c);
        if (!changes_in_place(c)) {  /* a limiter's and a concurrency's change: others stay their layout's */
            c->live_gen = gen;
            return 0;
        }
        if (gen == 0 || gen < c->live_gen) {
            PyErr_Format(c->st->corrupt, "window %R has a junk live generation (%lld)", c->name, (long long)gen);
            return -1;
        }
        const int64_t *t = live_table(c, gen);
        for (int i = 0; i < c->n_rings; i++) limits[i] = LOAD(&t[i]);
        if (LOAD(W(c, LIVE_GEN_OFF)) != gen) continue;  /* outrun by two changes: read again */
        c->min_limit = INT64_MAX;
        for (int i = 0; i < c->n_rings; i++) {
            if (!limit_fits(c, i, limits[i])) {
                PyErr_Format(c->st->corrupt, "window %R has a junk live limit (%lld)", c->name, (long long)limits[i]);
                return -1;
            }
        }
        for (int i = 0; i < c->n_rings; i++) {
            c->rings[i].limit = limits[i];
            if (limits[i] < c->min_limit) c->min_limit = limits[i];
        }
        c->live_gen = gen;
        return 0;
    }
    PyErr_Format(c->st->timeout, "window %R: its limits kept changing while this process read them", c->name);
    return -1;
}

/* A limiter method's failed call: once the segment moved, what the backend's hook says to call
 * instead with the same arguments (the name's new segment's method). */
PyObject *moved_retry_slow(Core *c, const char *method, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
    if (c->on_moved == NULL || !PyErr_ExceptionMatches(c->st->moved)) return NULL;
    PyErr_Clear();
    PyObject *hook = Py_NewRef(c->on_moved);  /* the hook may rebind this core's */
    PyObject *instead = PyObject_CallFunction(hook, "s", method);
    Py_DECREF(hook);
    if (instead == NULL) return NULL;
    PyObject *result = PyObject_Vectorcall(instead, args, (size_t)nargs, kwnames);
    Py_DECREF(instead);
    return result;
}

/* Enter, and take LOCK_KEY_TABLE: 0, or -1 (error set, nothing held). */
static int live_lock(Core *c) {
    if (!c->keyed) {
        PyErr_SetString(PyExc_ValueError, "live limits are a keyed segment's");
        return -1;
    }
    if (enter(c) < 0) return -1;
    if (lock_take(c, LOCK_KEY_TABLE) < 0) {
        leave(c);
        return -1;
    }
    return 0;
}

static void live_unlock(Core *c) {
    lock_give(c, LOCK_KEY_TABLE);
    leave(c);
}

/* set_limits((limits, changed_ns)) -> generation: section "live" (above). */
PyObject *Core_set_limits(Core *c, PyObject *arg) {
    int64_t limits[MAX_RINGS], changed_ns;
    PyObject *seq, *when;
    if (!PyArg_ParseTuple(arg, "OO:set_limits", &seq, &when)) return NULL;
    changed_ns = PyLong_AsLongLong(when);
    if (changed_ns == -1 && PyErr_Occurred()) return NULL;
    PyObject *fast = PySequence_Fast(seq, "set_limits() needs a sequence of limits");
    if (fast == NULL) return NULL;
    if (PySequence_Fast_GET_SIZE(fast) != c->n_rings) {
        PyErr_Format(PyExc_ValueError, "set_limits() needs %d limits, one per ring", c->n_rings);
        Py_DECREF(fast);
        return NULL;
    }
    for (int i = 0; i < c->n_rings; i++) {
        limits[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (limits[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return NULL;
        }
        if (!limit_fits(c, i, limits[i])) {
            PyErr_Format(PyExc_ValueError, "limit %lld does not fit ring %d of window %R in place",
                         (long long)limits[i], i, c->name);
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    for (int i = 0; !changes_in_place(c) && i < c->n_rings; i++) {
        if (limits[i] != c->rings[i].limit) {  /* a token bucket's: when it changed (moved), no more */
            PyErr_Format(PyExc_ValueError, "window %R: only a limiter's or a concurrency's limits change in place",
                         c->name);
            return NULL;
        }
    }
    if (live_lock(c) < 0) return NULL;
    int64_t gen = LOAD(W(c, LIVE_GEN_OFF));
    if (gen & LIVE_MOVED || gen < 0) {
        live_unlock(c);
        return gen < 0 ? PyErr_Format(c->st->corrupt, "window %R has a junk live generation", c->name)
                       : (moved_error(c), NULL);
    }
    SECTION("live");
    int64_t *t = live_table(c, gen + 1);
    for (int i = 0; i < c->n_rings; i++) STORE(&t[i], limits[i]);
    STORE(W(c, LIVE_CHANGED_NS_OFF), changed_ns);
    STORE(W(c, LIVE_GEN_OFF), gen + 1);  /* published: every process's next call */
    END_SECTION();
    live_unlock(c);
    return PyLong_FromLongLong(gen + 1);
}

/* retire(): section "retire" (above). */
PyObject *Core_retire(Core *c, PyObject *Py_UNUSED(ignored)) {
    if (live_lock(c) < 0) return NULL;
    SECTION("retire");
    int64_t gen = LOAD(W(c, LIVE_GEN_OFF));
    STORE(W(c, LIVE_GEN_OFF), gen | LIVE_MOVED);
    END_SECTION();
    c->live_gen = gen | LIVE_MOVED;  /* this core (the mover's) goes on: it reads the counts to carry */
    live_unlock(c);
    Py_RETURN_NONE;
}

/* unretire(): a mover that failed after retire() (a carry that could not store every key's hits,
 * an exception) gives the segment back, as it was: the bit cleared under LOCK_KEY_TABLE. The
 * retired segment's counts and live words did not change meanwhile (no call counts there, and
 * set_limits refuses it), and its new segment never had the name: nothing else to undo. */
PyObject *Core_unretire(Core *c, PyObject *Py_UNUSED(ignored)) {
    if (live_lock(c) < 0) return NULL;
    int64_t gen = LOAD(W(c, LIVE_GEN_OFF)) & ~(int64_t)LIVE_MOVED;
    STORE(W(c, LIVE_GEN_OFF), gen);
    c->live_gen = gen;
    live_unlock(c);
    Py_RETURN_NONE;
}

/* The limits of generation `gen` of a retired segment, into `limits`: 0, or -1 with
 * CorruptSegmentError set. No reader race: once retired, set_limits refuses the segment, so the
 * table of its last generation stays as it was published. */
static int retired_limits(Core *c, int64_t gen, int64_t *limits) {
    const int64_t *t = live_table(c, gen);
    for (int i = 0; i < c->n_rings; i++) {
        limits[i] = LOAD(&t[i]);
        if (!limit_fits(c, i, limits[i])) {
            PyErr_Format(c->st->corrupt, "window %R has a junk live limit (%lld)", c->name, (long long)limits[i]);
            return -1;
        }
    }
    return 0;
}

/* live() -> (generation word, changed wall ns, limits in force): after a reload; once moved, the
 * newest limits the segment had (its live words, not this core's: a core attached after the
 * retire never read them, and a takeover must move the rates in force, not the ring table's). */
PyObject *Core_live(Core *c, PyObject *Py_UNUSED(ignored)) {
    int64_t in_force[MAX_RINGS] = {0};  /* whole: the analyzer cannot tell n_rings stays put */
    if (enter(c) < 0) return NULL;
    int64_t gen = LOAD(W(c, LIVE_GEN_OFF)), changed = LOAD(W(c, LIVE_CHANGED_NS_OFF));
    int64_t base = gen & ~(int64_t)LIVE_MOVED;
    if (!(gen & LIVE_MOVED) && gen != c->live_gen && live_reload(c) < 0) {
        leave(c);
        return NULL;
    }
    for (int i = 0; i < c->n_rings; i++) in_force[i] = c->rings[i].limit;
    if (gen & LIVE_MOVED && changes_in_place(c) && base > 0 && retired_limits(c, base, in_force) < 0) {
        leave(c);
        return NULL;
    }
    PyObject *limits = PyTuple_New(c->n_rings);
    for (int i = 0; limits != NULL && i < c->n_rings; i++) {
        PyObject *v = PyLong_FromLongLong(in_force[i]);
        if (v == NULL) Py_CLEAR(limits);
        else PyTuple_SET_ITEM(limits, i, v);
    }
    leave(c);
    if (limits == NULL) return NULL;
    return Py_BuildValue("(LLN)", (long long)gen, (long long)changed, limits);
}

/* set_on_moved(hook): what a limiter's methods call once the segment moved (None: raise). */
PyObject *Core_set_on_moved(Core *c, PyObject *hook) {
    if (hook != Py_None && !PyCallable_Check(hook)) {
        PyErr_SetString(PyExc_TypeError, "set_on_moved() needs a callable or None");
        return NULL;
    }
    Py_XSETREF(c->on_moved, hook == Py_None ? NULL : Py_NewRef(hook));
    Py_RETURN_NONE;
}
