/* methods.c -- the argument helpers every method uses (parse, cost_of; methods.h: parse_keyed), and the methods every
 * segment has (clear, reset, find, the stripes', close): the base type Core's table, which every
 * role's type inherits (window.c, limiter.c, counters.c, concurrency.c, moving.c, lease.c).
 *
 * The hot methods (add, hit, check) are METH_FASTCALL | METH_KEYWORDS with a positional
 * fast path; on their success path nothing is allocated and nothing looked up but the key.
 */
#include "core.h"

#include <math.h>

/* ---- argument helpers ------------------------------------------------------------------ */

/* Positional-or-keyword arguments of a METH_FASTCALL|METH_KEYWORDS call, by name. */
int parse(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *const *names,
                 int n, PyObject **out, const char *fname) {
    if (nargs > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fname, n, nargs);
        return -1;
    }
    for (int i = 0; i < n; i++) out[i] = i < nargs ? args[i] : NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t j = 0; j < nkw; j++) {
        const char *kw = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, j));
        int i = 0;
        if (kw == NULL) return -1;
        while (i < n && strcmp(kw, names[i]) != 0) i++;
        if (i == n || out[i] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got %s keyword argument '%s'", fname,
                         i == n ? "an unexpected" : "a repeated", kw);
            return -1;
        }
        out[i] = args[nargs + j];
    }
    return 0;
}

int cost_of(PyObject *obj, int64_t *cost, int64_t at_least) {
    if (obj == NULL) {
        *cost = 1;
        return 0;
    }
    if (PyFloat_Check(obj)) {
        double d = PyFloat_AS_DOUBLE(obj);
        if (!(d == floor(d) && d >= (double)at_least && d < 9e18)) goto bad;
        *cost = (int64_t)d;
        return 0;
    }
    if (PyBool_Check(obj) || !(PyLong_Check(obj) || PyIndex_Check(obj))) goto bad;
    PyObject *i = PyNumber_Index(obj);
    if (i == NULL) return -1;
    int overflow;
    *cost = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (!overflow && *cost >= at_least) return 0;
bad:
    PyErr_Format(PyExc_ValueError, "cost must be a whole number >= %lld, not %R", (long long)at_least, obj);
    return -1;
}

/* ---- methods ----------------------------------------------------------------------------- */

/* clear(key): forget key and every count of it (clear_key, index.c: section "clear"). */
static PyObject *Core_clear(Core *c, PyObject *key) {
    int got = -1;
    if (enter(c) < 0) return NULL;
    if (!c->keyed) PyErr_Format(PyExc_ValueError, "window %R is not keyed", c->name);
    else if ((got = clear_key(c, key)) > 0) forget(c, key);  /* gone from the table: from our cache too */
    leave(c);
    if (got < 0) return NULL;
    Py_RETURN_NONE;
}

/* reset(): empty every row for everyone (section "reset"), every lock held, taken in order
 * (the first one interruptibly). Striped rows are written lock-free by their owners: adds
 * racing with a reset may be dropped.
 * Invariant between stores: rows are emptied one after another, each by one copy of the
 * empty rings (empty_rings, which fences it): a row's header slots -- a limiter's running
 * totals and tails -- go in the same copy as its buckets. A tear leaves the rows before it
 * empty and the rest as they were: a reset in part, which only ever forgets counts, never
 * adds one. Repair: none; no intent is stored, and the next holder of each lock finds every
 * row empty or untouched (a limiter row cut inside its copy holds a total below its buckets'
 * sum, which hit_row recomputes from them once it would go negative: never more admitted than
 * a finished reset allows). */
static PyObject *Core_reset(Core *c, PyObject *Py_UNUSED(ignored)) {
    int held = 0, order[FIRST_KEY_LOCK + MAX_KEY_LOCKS];
    if (enter(c) < 0) return NULL;
    for (int i = 0; i < c->n_locks; i++) order[i] = i;
    int late = c->hooks->late_lock;  /* a role's lock taken after the rows' (a moving log's LOCK_CHUNKS) */
    if (late > 0 && late < c->n_locks) {  /* LOCK_KEY_TABLE -> rows -> late */
        for (int i = late; i + 1 < c->n_locks; i++) order[i] = i + 1;
        order[c->n_locks - 1] = late;
    }
    for (; held < c->n_locks; held++)
        if (lock_take_ex(c, order[held], held == 0) < 0) break;
    int64_t rows = c->n_rows;
    if (held == c->n_locks && (!c->keyed || rows_top(c, &rows) == 0)) {
        c->all_held = 1;  /* a role's rows give back what they hold (a moving log's chunks) under locks we hold */
        int first_seq = c->keyed ? FIRST_KEY_LOCK : c->n_locks;  /* rows changed in place: their seqs (core.h) */
        SECTION("reset");
        for (int i = first_seq; i < c->n_locks; i++) seq_open(c, i);
        for (int64_t r = 0; r < rows; r++) empty_rings(c, ROW(c, r));
        for (int i = first_seq; i < c->n_locks; i++) seq_close(c, i);
        END_SECTION();
        c->all_held = 0;
    }
    while (held-- > 0) lock_give(c, order[held]);
    leave(c);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

/* find(key) -> (slot, generation) or None: lock-free; readers re-check the generation. */
static PyObject *Core_find(Core *c, PyObject *key) {
    StoredKey k;
    int64_t s, g;
    PyObject *result = NULL;
    if (enter(c) < 0) return NULL;
    if (!c->keyed) {
        PyErr_Format(PyExc_ValueError, "window %R is not keyed", c->name);
    } else if (encode_key(c, key, &k) == 0) {
        int found = find_key(c, &k, &s, &g);  /* -1: an error is set, s and g are not */
        if (found > 0) result = Py_BuildValue("(LL)", (long long)s, (long long)g);
        else if (found == 0) result = Py_NewRef(Py_None);
    }
    leave(c);
    return result;
}

/* free_stripes() -> how many freed: under LOCK_STRIPE_TABLE, clear the owner of every claimed
 * row whose owner is gone (its liveness mutex free or owner-dead). Data stays, counted. */
static PyObject *Core_free_stripes(Core *c, PyObject *Py_UNUSED(ignored)) {
    long long freed = 0;
    if (enter(c) < 0) return NULL;
    if (c->striped && lock_take(c, LOCK_STRIPE_TABLE) == 0) {
        for (int64_t r = 1; r < c->n_rows; r++) {
            int64_t *e = STRIPE(c, r);
            if (LOAD(e + STRIPE_OWNER) != 0 && !stripe_alive(c, r)) {
                STORE(e + STRIPE_OWNER, 0);
                freed++;
            }
        }
        lock_give(c, LOCK_STRIPE_TABLE);
    }
    leave(c);
    if (PyErr_Occurred()) return NULL;
    return PyLong_FromLongLong(freed);
}

/* stripe_owners() -> [(row, pid, alive)] of every row with an owner recorded; alive is the
 * kernel's word (the owner's keeper holds the row's mutex), whatever /proc shows. */
static PyObject *Core_stripe_owners(Core *c, PyObject *Py_UNUSED(ignored)) {
    PyObject *out;
    if (enter(c) < 0) return NULL;
    out = PyList_New(0);
    for (int64_t r = 1; out != NULL && c->striped && r < c->n_rows; r++) {
        int64_t *e = STRIPE(c, r);
        if (LOAD(e + STRIPE_OWNER) == 0) continue;
        PyObject *t = Py_BuildValue("(LLO)", (long long)r, (long long)LOAD(e + STRIPE_OWNER_PID),
                                    stripe_alive(c, r) ? Py_True : Py_False);
        if (t == NULL || PyList_Append(out, t) < 0) Py_CLEAR(out);
        Py_XDECREF(t);
    }
    leave(c);
    return out;
}

/* release_stripe(): hand this process's stripe back (data kept); the next add claims again. */
static PyObject *Core_release_stripe(Core *c, PyObject *Py_UNUSED(ignored)) {
    if (enter(c) < 0) return NULL;
    int64_t row = drop_stripe(c);
    leave(c);
    if (PyErr_Occurred()) return NULL;
    return PyLong_FromLongLong(row);
}

/* close(): no call touches the mapping from now on; released once no call is inside. */
static PyObject *Core_close(Core *c, PyObject *Py_UNUSED(ignored)) {
    if (!c->closed && c->busy == 0) give_stripe(c);  /* before the mapping can go */
    c->closed = 1;
    release_map(c);  /* and the key cache: now, or when the last call inside leaves */
    Py_RETURN_NONE;
}

/* ---- the method table: text signatures, so that inspect.signature() reads each ------------- */

/* The base type's methods: what every role's type inherits (each role's own are in its file). */
PyMethodDef core_methods[] = {
    METHOD_O(clear, Core_clear, "key", "Forget key and its counts."),
    METHOD_NOARGS(reset, Core_reset, "Empty every row, for everyone."),
    METHOD_O(find, Core_find, "key", "(row, generation) of key, or None: lock-free."),
    METHOD_O(cache_probes, Core_cache_probes, "key",
        "How many entries of this process's key cache a lookup of key reads."),
    METHOD_NOARGS(free_stripes, Core_free_stripes, "Free the stripes of dead owners: how many."),
    METHOD_NOARGS(stripe_owners, Core_stripe_owners, "[(row, pid, alive)] of every stripe with an owner."),
    METHOD_NOARGS(release_stripe, Core_release_stripe, "Hand this process's stripe back (data kept): its row, or 0."),
    METHOD_NOARGS(close, Core_close, "Stop touching the mapping."),
    {NULL},
};
