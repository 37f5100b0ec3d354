/* methods.c -- the argument helpers every method uses (parse, cost_of), the methods of every
 * segment (clear, reset, find, the stripes', close) and the Core's method table, which names
 * the methods of window.c, limiter.c, counters.c, concurrency.c, moving.c and lease.c too.
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

/* Rows of buckets to add to or hit? A counter role's rows hold its state only (counters.c):
 * no ring call may touch them. 0, or -1 with the error set. */
int ring_rows(Core *c) {
    if (c->state_words == 0) return 0;
    PyErr_Format(PyExc_ValueError, "window %R holds limits' per-key state (role %d), written only "
                 "through shm://", c->name, c->role);
    return -1;
}

/* An unkeyed window's add: this process's stripe (lock-free), else the shared row under its
 * lock ("add_striped", "add_locked"). 0, or -1 with the error set. */
/* clear(key): forget key and every count of it (clear_key, index.c: section "clear"). */
static PyObject *Core_clear(Core *c, PyObject *key) {
    int got = -1;
    if (enter(c) < 0) return NULL;
    if (!c->keyed) PyErr_Format(PyExc_ValueError, "window %R is not keyed", c->name);
    else got = clear_key(c, key);
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
    if (IS_MOVING(c)) {  /* LOCK_CHUNKS after the row locks: LOCK_KEY_TABLE -> rows -> LOCK_CHUNKS */
        for (int i = LOCK_CHUNKS; i + 1 < c->n_locks; i++) order[i] = i + 1;
        order[c->n_locks - 1] = LOCK_CHUNKS;
    }
    for (; held < c->n_locks; held++)
        if (lock_take_ex(c, order[held], held == 0) < 0) break;
    int64_t rows = c->n_rows;
    if (held == c->n_locks && (!c->keyed || rows_top(c, &rows) == 0)) {
        c->chunks_held = 1;  /* a moving log's rows give their chunks back under the lock we hold */
        SECTION("reset");
        for (int64_t r = 0; r < rows; r++) empty_rings(c, ROW(c, r));
        END_SECTION();
        c->chunks_held = 0;
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
    int64_t row = c->stripe_row;
    if (enter(c) < 0) return NULL;
    int mine = c->stripe_gen == fork_gen && row > 0;
    if (mine && lock_take(c, LOCK_STRIPE_TABLE) == 0) {
        int64_t *e = STRIPE(c, row);
        if (LOAD(e + STRIPE_OWNER) == c->stripe_owner) STORE(e + STRIPE_OWNER, 0);
        give_stripe(c);
        lock_give(c, LOCK_STRIPE_TABLE);
    }
    c->stripe_gen = 0;
    c->stripe_row = 0;
    leave(c);
    if (PyErr_Occurred()) return NULL;
    return PyLong_FromLongLong(mine ? row : 0);
}

/* close(): no call touches the mapping from now on; released once no call is inside. */
static PyObject *Core_close(Core *c, PyObject *Py_UNUSED(ignored)) {
    if (!c->closed && c->busy == 0) give_stripe(c);  /* before the mapping can go */
    c->closed = 1;
    release_map(c);  /* and the key cache: now, or when the last call inside leaves */
    Py_RETURN_NONE;
}

/* ---- the method table: text signatures, so that inspect.signature() reads each ------------- */

#define FASTCALL_KW(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL | METH_KEYWORDS

PyMethodDef core_methods[] = {
    {"add", FASTCALL_KW(Core_add),
     "add($self, /, n=1, field=None, key=None)\n--\n\n"
     "Count n now in field's current bucket: this process's stripe, the shared row, or the key's row."},
    {"add_and_total", FASTCALL_KW(Core_add_and_total),
     "add_and_total($self, /, n=1, field=None, key=None)\n--\n\n"
     "Add, and the key's total over its longest ring with it (keyed windows)."},
    {"add_batch", FASTCALL_KW(Core_add_batch),
     "add_batch($self, /, items, field=None, key=None)\n--\n\n"
     "Add (ring, epoch, value) triples in one section."},
    {"hit", FASTCALL_KW(Core_hit),
     "hit($self, /, key, cost=1)\n--\n\n"
     "Count cost hits for key if every rate allows them, else nothing: whether it did."},
    {"check", FASTCALL_KW(Core_check),
     "check($self, /, key, cost, commit, detail=True)\n--\n\n"
     "hit() (commit) or a test: (allowed, used, reset_ns, wait_ns or None)."},
    {"set_tally", (PyCFunction)(void (*)(void))Core_set_tally, METH_FASTCALL,
     "set_tally($self, tally, shadow, /)\n--\n\nCount decisions in tally (or None); shadow: hit() always True."},
    {"refund", FASTCALL_KW(Core_refund),
     "refund($self, /, key, cost)\n--\n\nGive back up to cost of key's hits, most recent first: how much."},
    {"charge", FASTCALL_KW(Core_charge),
     "charge($self, /, key, cost)\n--\n\nCount cost hits for key without a check."},
    {"clear", (PyCFunction)Core_clear, METH_O, "clear($self, key, /)\n--\n\nForget key and its counts."},
    {"reset", (PyCFunction)Core_reset, METH_NOARGS, "reset($self, /)\n--\n\nEmpty every row, for everyone."},
    {"find", (PyCFunction)Core_find, METH_O,
     "find($self, key, /)\n--\n\n(row, generation) of key, or None: lock-free."},
    {"cache_probes", (PyCFunction)Core_cache_probes, METH_O,
     "cache_probes($self, key, /)\n--\n\nHow many entries of this process's key cache a lookup of key reads."},
    {"free_stripes", (PyCFunction)Core_free_stripes, METH_NOARGS,
     "free_stripes($self, /)\n--\n\nFree the stripes of dead owners: how many."},
    {"stripe_owners", (PyCFunction)Core_stripe_owners, METH_NOARGS,
     "stripe_owners($self, /)\n--\n\n[(row, pid, alive)] of every stripe with an owner."},
    {"release_stripe", (PyCFunction)Core_release_stripe, METH_NOARGS,
     "release_stripe($self, /)\n--\n\nHand this process's stripe back (data kept): its row, or 0."},
    {"close", (PyCFunction)Core_close, METH_NOARGS, "close($self, /)\n--\n\nStop touching the mapping."},
    /* the counter roles' (counters.c) */
    {"fixed_incr", FASTCALL_KW(Core_fixed_incr),
     "fixed_incr($self, /, key, amount=1)\n--\n\n"
     "limits' fixed window: count amount in key's live window (one starts now if none is): (count, end ns)."},
    {"fixed_get", (PyCFunction)Core_fixed_get, METH_O,
     "fixed_get($self, key, /)\n--\n\n(count, end ns) of key's live fixed window, or None."},
    {"sliding_hit", FASTCALL_KW(Core_sliding_hit),
     "sliding_hit($self, /, key, limit, amount=1)\n--\n\n"
     "limits' sliding window counter: count amount if the weighted count leaves room; whether it did."},
    {"sliding_get", (PyCFunction)Core_sliding_get, METH_O,
     "sliding_get($self, key, /)\n--\n\n(previous, current, ns into the current window, period ns)."},
    /* per-key concurrency's (concurrency.c) */
    {"conc_acquire", FASTCALL_KW(Core_conc_acquire),
     "conc_acquire($self, /, key)\n--\n\n"
     "Take one of key's slots for this process if its live holders leave room: (taken, holders after)."},
    {"conc_release", (PyCFunction)Core_conc_release, METH_O,
     "conc_release($self, key, /)\n--\n\nGive back one of this process's slots of key: False if it holds none."},
    {"conc_count", (PyCFunction)Core_conc_count, METH_O,
     "conc_count($self, key, /)\n--\n\nSlots of key held now by live processes."},
    {"conc_mine", (PyCFunction)Core_conc_mine, METH_O,
     "conc_mine($self, key, /)\n--\n\nSlots of key this process (this Core) holds."},
    {"token_hit", FASTCALL_KW(Core_token_hit),
     "token_hit($self, /, key, cost=1)\n--\n\n"
     "A token bucket: take cost tokens from key's bucket if it holds them; whether it did."},
    {"token_check", FASTCALL_KW(Core_token_check),
     "token_check($self, /, key, cost, commit)\n--\n\n"
     "A token bucket's take (commit) or test: (allowed, tokens left, wait_ns or None, ns until full)."},
    /* limits' moving window (moving.c) */
    {"moving_hit", FASTCALL_KW(Core_moving_hit),
     "moving_hit($self, /, key, cost=1)\n--\n\n"
     "limits' moving window: count cost hits now if the last period's leave room under the limit; whether it did."},
    {"moving_get", (PyCFunction)Core_moving_get, METH_O,
     "moving_get($self, key, /)\n--\n\n(hits counted, ns until the oldest of them is forgotten; 0: none)."},
    {"moving_chunks", (PyCFunction)Core_moving_chunks, METH_NOARGS,
     "moving_chunks($self, /)\n--\n\n(chunks handed out, on the free list, reserved, in the heap)."},
    /* a two-tier limiter's host tier: each key's lease (lease.c) */
    {"lease_spend", FASTCALL_KW(Core_lease_spend),
     "lease_spend($self, /, key, cost=1)\n--\n\n"
     "Spend cost hits of key's lease (True); refuse while Redis's refusal holds (False); else seal it: "
     "(its account or None,)."},
    {"lease_install", FASTCALL_KW(Core_lease_install),
     "lease_install($self, /, key, lease, granted, cost, start_ns, deadline_ns, grant_us)\n--\n\n"
     "Publish a granted lease with cost spent of it: (installed, the replaced lease's account or None)."},
    {"lease_deny", FASTCALL_KW(Core_lease_deny),
     "lease_deny($self, /, key, until_ns)\n--\n\nRefuse key without asking Redis until until_ns."},
    {"lease_refund", FASTCALL_KW(Core_lease_refund),
     "lease_refund($self, /, key, cost)\n--\n\nGive up to cost hits back to key's live lease: how many."},
    {"lease_seal", (PyCFunction)Core_lease_seal, METH_O,
     "lease_seal($self, key, /)\n--\n\nSeal key's live lease: its account (to give back), or None."},
    {"lease_get", (PyCFunction)Core_lease_get, METH_O,
     "lease_get($self, key, /)\n--\n\nkey's lease words, or None (no row)."},
    {NULL},
};
