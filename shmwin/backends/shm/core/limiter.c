/* limiter.c -- the limiter type (LimiterCore), every segment of kind "limiter": hit, check (hit
 * or test, with the timing stats() and acquire() need), refund and charge, over the rows of
 * rings that rings.c keeps; and its decisions, tallied in a striped window (set_tally, which
 * the token bucket's type has too).
 *
 * Each keyed method runs core.h's prologue and epilogue (key_enter ... key_leave); the
 * sections themselves ("hit", "refund") are rings.c's.
 */
#include "core.h"

/* ---- a limiter's decisions --------------------------------------------------------------
 * Each hit() is counted in the limiter's decisions window (Core.tally: a striped window of
 * TALLY_FIELDS over the longest period, shmwin/limiter.py makes it): admitted or rejected, and
 * near the limit when admitted with at most a fifth of some rate's limit left. It is written
 * after the row lock is given back, in this process's own stripe: no lock, no shared line.
 * A decision that cannot be counted (the tally closed, corrupt) never fails the hit. */
enum { TALLY_ADMITTED, TALLY_REJECTED, TALLY_NEAR_LIMIT };

static int near_limit(Core *c, const Verdict *v) {
    for (int i = 0; i < c->n_rings; i++) {
        int64_t left = c->rings[i].limit - v->used[i], five;
        if (!__builtin_mul_overflow(left, 5, &five) && five <= c->rings[i].limit) return 1;
    }
    return 0;
}

/* The common case, inline: this process holds a stripe of the tally (a window of one int64
 * ring). Lock-free, as section "add_striped": the bucket is zeroed before it is stamped. */
static int note_in_stripe(Core *t, int64_t now, int f, int near) {
    if (t->closed || t->stripe_gen != fork_gen || t->stripe_row <= 0 || t->n_rings != 1 || t->floats) return 0;
    const Ring *r = &t->rings[0];
    TallyNote *n = TALLY_NOTE(t);
    int64_t e = n->e, *b = n->b;
    if (b == NULL || n->row != t->stripe_row || now < n->lo_ns || now - n->lo_ns >= r->bucket_ns) {
        e = now / r->bucket_ns;  /* a new bucket (or stripe): where it is, kept for the next hits */
        b = BUCKET(t, RING(t, ROW(t, t->stripe_row), 0), r, e);
        n->e = e, n->lo_ns = e * r->bucket_ns, n->row = t->stripe_row, n->b = b;
    }
    SECTION("add_striped");
    if (LOAD(b + SLOT_EPOCH) < e) {
        for (int k = 0; k < t->n_fields; k++) STORE(b + SLOT_VALUES + k, 0);
        STORE(b + SLOT_EPOCH, e);
    }
    STORE(b + f, sat_add(LOAD(b + f), 1));
    if (near) STORE(b + SLOT_VALUES + TALLY_NEAR_LIMIT, sat_add(LOAD(b + SLOT_VALUES + TALLY_NEAR_LIMIT), 1));
    END_SECTION();
    return 1;
}

void note_decision(Core *c, int64_t now, int allowed, int near) {
    Core *t = (Core *)DECIDER(c)->tally;  /* called with no error set; no Python runs here */
    int f = SLOT_VALUES + (allowed ? TALLY_ADMITTED : TALLY_REJECTED);
    if (t == NULL || t->closed || note_in_stripe(t, now, f, near)) return;
    /* no stripe of the tally (every one taken): its shared row, under its lock, uninterruptible */
    if (enter(t) < 0) {
        PyErr_Clear();
        return;
    }
    if (lock_take_ex(t, LOCK_SHARED_ROW, 0) == 0) {
        SECTION("add_locked");
        int rc = add_row(t, ROW(t, 0), now, f, 1, 1.0);
        if (rc == 0 && near) add_row(t, ROW(t, 0), now, SLOT_VALUES + TALLY_NEAR_LIMIT, 1, 1.0);
        END_SECTION();
        lock_give(t, LOCK_SHARED_ROW);
    }
    leave(t);
    if (PyErr_Occurred()) PyErr_Clear();  /* our own (a lock timed out, an overflow): never the hit's */
}

/* Before a hit's section: this process's stripe of the tally, claimed if it has none (after a
 * fork, at first use) -- the claim calls Python (claim_stripe), which must not run after the
 * hit is counted: an exception raised there (a signal handler's) would be lost or would fail
 * a hit already made. 0; -1 with that exception (nothing counted yet). A tally that cannot
 * give a stripe (closed, corrupt, every stripe taken) is not an error: note_decision then
 * counts in its shared row. */
int tally_ready(Core *c) {
    Core *t = (Core *)DECIDER(c)->tally;
    int64_t row;
    if (t == NULL || t->closed || !t->striped || t->stripe_gen == fork_gen) return 0;
    if (enter(t) < 0) {
        PyErr_Clear();
        return 0;
    }
    int rc = stripe_of(t, &row);
    leave(t);
    if (rc == 0) return 0;
    if (PyErr_ExceptionMatches(c->st->corrupt) || PyErr_ExceptionMatches(c->st->closed) ||
        PyErr_ExceptionMatches(c->st->timeout)) {
        PyErr_Clear();
        return 0;
    }
    return -1;
}

/* set_tally(tally, shadow): count decisions in `tally` (a striped window of 3 int fields, or
 * None), and answer True to every hit() if shadow. */
PyObject *Core_set_tally(Core *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_tally(tally, shadow) takes 2 arguments");
        return NULL;
    }
    PyObject *t = args[0];
    int shadow = PyObject_IsTrue(args[1]);
    if (shadow < 0) return NULL;
    if (t != Py_None) {
        Core *w = (Core *)t;
        if (!PyObject_TypeCheck(t, c->st->window_type) || w->keyed || w->floats || w->n_fields < 3) {
            PyErr_SetString(PyExc_TypeError, "set_tally() needs an unkeyed int window of 3 fields, or None");
            return NULL;
        }
    }
    Py_XSETREF(DECIDER(c)->tally, t == Py_None ? NULL : Py_NewRef(t));
    DECIDER(c)->shadow = shadow;
    Py_RETURN_NONE;
}

/* hit(key, cost=1) -> bool: count cost hits if every rate allows them, else nothing. */
static PyObject *Core_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key", "cost"};
    PyObject *a[2], *result = NULL;
    int64_t cost, now = 0, slot;
    Verdict v;
    if (parse_keyed(args, nargs, kwnames, names, 2, a, "hit") < 0) return NULL;
    if (key_enter(c, &kc) < 0) return NULL;
    if (cost_of(a[1], &cost, 1) < 0 || tally_ready(c) < 0) goto out;
    int got = key_lock(c, &kc, a[0], 1, &now, &slot);
    if (got < 0) {
        if (met_full(c, 1)) {  /* on_full answers: admitted uncounted, or refused */
            note_decision(c, now, full_allows(c), 0);
            result = Py_NewRef(full_allows(c) || DECIDER(c)->shadow ? Py_True : Py_False);
        }
        goto out;
    }
    int rc = hit_row(c, slot, now, cost, 1, &v);
    key_unlock(c, &kc);
    if (rc == 0) {
        note_decision(c, now, v.allowed, v.allowed && near_limit(c, &v));
        result = Py_NewRef(v.allowed || DECIDER(c)->shadow ? Py_True : Py_False);
    }
out:
    return moved_retry(c, key_leave(c, &kc, result), "hit", args, nargs, kwnames);
}

/* Parse (key, cost) for refund() and charge(): 0, or -1 with the error set. */
static int key_and_cost(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *what, PyObject **key,
                        int64_t *cost) {
    static const char *const names[] = {"key", "cost"};
    PyObject *a[2];
    if (parse_required(args, nargs, kwnames, names, 2, 2, a, what, "a key and a cost") < 0) return -1;
    *key = a[0];
    return cost_of(a[1], cost, 0);
}

/* refund(key, cost) -> int: give back up to cost of the key's hits, most recent first (section
 * "refund"); how much. A key never seen holds nothing: 0, and no key is made. */
static PyObject *Core_refund(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    PyObject *key, *result = NULL;
    int64_t cost, now = 0, slot, given = 0;
    Verdict v;
    if (key_and_cost(args, nargs, kwnames, "refund", &key, &cost) < 0 || key_enter(c, &kc) < 0) return NULL;
    int got = key_lock(c, &kc, key, 0, &now, &slot);
    if (got < 0) goto out;
    if (got > 0) {
        int rc = hit_row(c, slot, now, 0, 0, &v);  /* every ring brought to rest at now */
        if (rc == 0 && cost > 0) given = refund_row(c, slot, now, cost);
        key_unlock(c, &kc);
        if (rc < 0) goto out;
    }
    result = PyLong_FromLongLong(given);
out:
    return moved_retry(c, key_leave(c, &kc, result), "refund", args, nargs, kwnames);
}

/* charge(key, cost): count cost hits in every rate without a check (section "hit" with
 * COMMIT_FORCE): the key may go over its limits, and hit() refuses it until they leave. A
 * key with no row for it (a full table) is answered by on_full: "raise" raises, else the
 * charge is dropped (counted in full_count). */
static PyObject *Core_charge(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    PyObject *key, *result = NULL;
    int64_t cost, now = 0, slot;
    Verdict v;
    if (key_and_cost(args, nargs, kwnames, "charge", &key, &cost) < 0 || key_enter(c, &kc) < 0) return NULL;
    int got = key_lock(c, &kc, key, 1, &now, &slot);
    if (got < 0) {
        if (met_full(c, 1)) result = Py_NewRef(Py_None);
        goto out;
    }
    int rc = hit_row(c, slot, now, cost, COMMIT_FORCE, &v);
    key_unlock(c, &kc);
    if (rc == 0) result = Py_NewRef(Py_None);
out:
    return moved_retry(c, key_leave(c, &kc, result), "charge", args, nargs, kwnames);
}

/* check(key, cost, commit, detail=True) -> (allowed, used, reset_ns, wait_ns | None): hit()
 * (commit) or test() from the running totals, O(1); with detail, also when each rate's oldest
 * hit leaves and when cost would fit, for stats() and acquire(): scans from the oldest bucket
 * that stop at the first one answering. */
static PyObject *Core_check(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key", "cost", "commit", "detail"};
    PyObject *a[4], *result = NULL;
    int64_t cost, now = 0, slot;
    Verdict v;
    int commit, detail;
    memset(&v, 0, sizeof v);
    if (parse(args, nargs, kwnames, names, 4, a, "check") < 0) return NULL;
    if (a[0] == NULL || a[1] == NULL || a[2] == NULL) {
        PyErr_SetString(PyExc_TypeError, "check() needs key, cost and commit");
        return NULL;
    }
    if (key_enter(c, &kc) < 0) return NULL;
    commit = PyObject_IsTrue(a[2]);
    detail = a[3] == NULL ? 1 : PyObject_IsTrue(a[3]);
    if (commit < 0 || detail < 0 || cost_of(a[1], &cost, commit ? 1 : 0) < 0) goto out;
    if (commit && tally_ready(c) < 0) goto out;
    int got = key_lock(c, &kc, a[0], commit, &now, &slot);
    if (got < 0) {
        if (!met_full(c, 1)) goto out;
        v.allowed = full_allows(c);
        v.wait_ns = -1;
    } else if (got == 0) {  /* never seen: nothing counted */
        v.allowed = cost <= c->min_limit;
        v.wait_ns = v.allowed ? 0 : -1;
    } else {
        int rc = hit_row(c, slot, now, cost, commit, &v);
        if (rc == 0 && detail) timing(c, slot, now, cost, &v);
        key_unlock(c, &kc);
        if (rc < 0) goto out;
        /* acquire()'s tries: the one that counts is a decision; a refused try waits and tries again */
        if (commit && v.allowed) note_decision(c, now, 1, near_limit(c, &v));
    }
    PyObject *used = PyTuple_New(c->n_rings), *reset = PyTuple_New(c->n_rings);
    if (used == NULL || reset == NULL) {
        Py_XDECREF(used);
        Py_XDECREF(reset);
        goto out;
    }
    for (int i = 0; i < c->n_rings; i++) {
        PyTuple_SET_ITEM(used, i, PyLong_FromLongLong(v.used[i]));
        PyTuple_SET_ITEM(reset, i, PyLong_FromLongLong(v.reset_ns[i]));
    }
    if (v.wait_ns < 0) result = Py_BuildValue("(ONNO)", v.allowed ? Py_True : Py_False, used, reset, Py_None);
    else result = Py_BuildValue("(ONNL)", v.allowed ? Py_True : Py_False, used, reset, (long long)v.wait_ns);
out:
    return moved_retry(c, key_leave(c, &kc, result), "check", args, nargs, kwnames);
}

/* ---- the type ----------------------------------------------------------------------------- */

/* A decider's tally is its own object field: visited and cleared here, then the Core's. */
int decider_traverse(Core *c, visitproc visit, void *arg) {
    Py_VISIT(DECIDER(c)->tally);
    return core_traverse(c, visit, arg);
}

int decider_clear(Core *c) {
    Py_CLEAR(DECIDER(c)->tally);
    return core_clear(c);
}

static int limiter_header(Core *c, const ShmwinHeader *Py_UNUSED(h)) { return c->limiter ? 0 : not_role(c); }

/* A key row lock's holder died: the intent row's running totals may be torn (rings.c). */
static void limiter_repair(Core *c, int Py_UNUSED(i), int64_t slot) {
    if (slot >= 0) repair_row(c, slot);
}

static const RoleHooks limiter_hooks = {.role = "limiter", .header = limiter_header, .repair = limiter_repair};

static int limiter_init(Core *c, PyObject *args, PyObject *kw) { return core_init(c, args, kw, &limiter_hooks); }

static PyMethodDef limiter_methods[] = {
    METHOD_KW(hit, Core_hit, "key, cost=1",
        "Count cost hits for key if every rate allows them, else nothing: whether it did."),
    METHOD_KW(check, Core_check, "key, cost, commit, detail=True",
        "hit() (commit) or a test: (allowed, used, reset_ns, wait_ns or None)."),
    SET_TALLY_METHOD,
    LIVE_METHODS,
    METHOD_KW(refund, Core_refund, "key, cost", "Give back up to cost of key's hits, most recent first: how much."),
    METHOD_KW(charge, Core_charge, "key, cost", "Count cost hits for key without a check."),
    {NULL},
};

DECIDER_SPEC(limiter_spec, "LimiterCore", limiter_init, limiter_methods,
             "A limiter's segment: its check-and-count, its decisions, and what every segment has (Core).");
