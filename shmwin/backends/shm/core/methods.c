/* methods.c -- the Core's methods: argument checks at the top, then one section each.
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

static int field_word(Core *c, PyObject *field, int *f) {
    if (field == NULL || field == Py_None) {
        *f = SLOT_VALUES;  /* the first field */
        return 0;
    }
    PyObject *w = PyDict_GetItemWithError(c->fields, field);
    if (w == NULL) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyObject *known = PyDict_Keys(c->fields);
            PyErr_Clear();
            if (known != NULL) {
                PyErr_Format(c->st->field, "unknown field %R; this window's fields are %R", field, known);
                Py_DECREF(known);
            }
        }
        return -1;
    }
    long word = PyLong_AsLong(w);
    if (word < SLOT_VALUES || word >= SLOT_VALUES + c->n_fields) {  /* built at init from the header */
        if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "field %R names no word of a slot", field);
        return -1;
    }
    *f = (int)word;
    return 0;
}

/* The amount of an add: an int64 for int windows, a finite double for float ones. */
static int amount(Core *c, PyObject *obj, int64_t *n, double *d) {
    if (obj == NULL) {
        *n = 1;
        *d = 1.0;
        return 0;
    }
    if (c->floats) {
        if (!PyFloat_Check(obj) && !PyLong_Check(obj) && !PyIndex_Check(obj) &&
            Py_TYPE(obj)->tp_as_number == NULL) {
            PyErr_Format(PyExc_TypeError, "add() takes a number, not %R", obj);
            return -1;
        }
        *d = PyFloat_AsDouble(obj);
        if (*d == -1.0 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "add() takes a number, not %R", obj);
            return -1;
        }
        if (!isfinite(*d)) {
            PyErr_Format(PyExc_ValueError, "add() takes a finite number, not %R", obj);
            return -1;
        }
        return 0;
    }
    if (!PyLong_Check(obj) && !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "add() takes an int for an int64 window, not %R", obj);
        return -1;
    }
    PyObject *i = PyNumber_Index(obj);
    if (i == NULL) return -1;
    int overflow;
    *n = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "%R does not fit in an int64 window value", obj);
        return -1;
    }
    return *n == -1 && PyErr_Occurred() ? -1 : 0;
}

/* A cost: a non-negative int, or a float with an integral value (1.0). */
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

/* add(n=1, field=None, key=None): count n now, in this process's stripe, the shared row
 * (section "add_locked") or the key's row ("add_keyed"). */
/* Rows of buckets to add to or hit? A counter role's rows hold its state only (counters.c):
 * no ring call may touch them. 0, or -1 with the error set. */
static int ring_rows(Core *c) {
    if (c->state_words == 0) return 0;
    PyErr_Format(PyExc_ValueError, "window %R holds limits' per-key state (role %d), written only "
                 "through shm://", c->name, c->role);
    return -1;
}

/* An unkeyed window's add: this process's stripe (lock-free), else the shared row under its
 * lock ("add_striped", "add_locked"). 0, or -1 with the error set. */
static int add_unkeyed(Core *c, int64_t now, int f, int64_t n, double d) {
    int64_t row;
    int rc;
    if (c->striped) {
        if (stripe_of(c, &row) < 0) return -1;
        if (row > 0) {  /* lock-free: only this process writes its stripe (under the GIL) */
            SECTION("add_striped");
            rc = add_row(c, ROW(c, row), now, f, n, d);
            END_SECTION();
            return rc;
        }
    }
    if (lock_take_ex(c, LOCK_SHARED_ROW, 1) < 0) return -1;
    SECTION("add_locked");
    rc = add_row(c, ROW(c, 0), now, f, n, d);
    END_SECTION();
    lock_give(c, LOCK_SHARED_ROW);
    return rc;
}

/* Rows of slots to add to? A limiter's rows are counted only by hit() and check(): its
 * compact rings keep no epoch per count (rings.c), which add's slots need. */
static int slot_rows(Core *c) {
    if (ring_rows(c) < 0) return -1;
    if (!c->limiter) return 0;
    PyErr_Format(PyExc_ValueError, "window %R is a limiter: it counts through hit() and check() only", c->name);
    return -1;
}

static PyObject *Core_add(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"n", "field", "key"};
    KeyCall kc = KEY_CALL;
    PyObject *a[3];
    int64_t n, now = 0, slot;
    double d;
    int f, rc = -1;
    if (nargs == 0 && kwnames == NULL) {
        a[0] = a[1] = a[2] = NULL;
    } else if (parse(args, nargs, kwnames, names, 3, a, "add") < 0) {
        return NULL;
    }
    if (key_enter(c, &kc) < 0) return NULL;
    if (slot_rows(c) < 0 || amount(c, a[0], &n, &d) < 0 || field_word(c, a[1], &f) < 0) goto out;
    if (a[2] != NULL && a[2] != Py_None && !c->keyed) {
        PyErr_Format(PyExc_ValueError, "window %R is not keyed (create it with capacity=...)", c->name);
        goto out;
    }
    if (c->keyed && (a[2] == NULL || a[2] == Py_None)) {
        PyErr_Format(PyExc_TypeError, "window %R is keyed: pass key=", c->name);
        goto out;
    }
    if (now_ns(c, &now) < 0) goto out;
    if (c->keyed) {
        int got = key_lock_at(c, &kc, a[2], 1, now, &slot);
        if (got < 0) {
            if (met_full(c, 1)) rc = 0;  /* on_full: the add is dropped, counted in full_count */
            goto out;
        }
        char *r = ROW(c, slot);
        SECTION("add_keyed");
        STORE(intent_at(c, row_lock(c, slot)), slot);
        rc = add_row(c, r, now, f, n, d);
        if (rc == 0) touch_last(r, now);
        END_SECTION();
        key_unlock(c, &kc);
        goto out;
    }
    rc = add_unkeyed(c, now, f, n, d);
out:
    key_leave(c, &kc, NULL);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

/* add_and_total(n=1, field=None, key=None) -> the key's total over its longest ring,
 * this add included, with no other add to the key in between (keyed windows). */
static PyObject *Core_add_and_total(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"n", "field", "key"};
    PyObject *a[3], *result = NULL;
    int64_t n, now = 0, slot;
    double d;
    int f;
    if (parse(args, nargs, kwnames, names, 3, a, "add_and_total") < 0 || key_enter(c, &kc) < 0) return NULL;
    if (slot_rows(c) < 0) goto out;
    if (!c->keyed) {
        PyErr_Format(PyExc_ValueError, "window %R is not keyed (create it with capacity=...)", c->name);
        goto out;
    }
    if (a[2] == NULL || a[2] == Py_None) {
        PyErr_Format(PyExc_TypeError, "window %R is keyed: pass key=", c->name);
        goto out;
    }
    if (amount(c, a[0], &n, &d) < 0 || field_word(c, a[1], &f) < 0) goto out;
    if (now_ns(c, &now) < 0) goto out;
    if (key_lock_at(c, &kc, a[2], 1, now, &slot) < 0) {
        met_full(c, 0);  /* counted; its callers (in-flight, shedder) decide */
        goto out;
    }
    char *row = ROW(c, slot);
    SECTION("add_keyed");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    int rc = add_row(c, row, now, f, n, d);
    if (rc == 0) touch_last(row, now);
    END_SECTION();
    if (rc == 0) {
        int longest = 0;
        for (int i = 1; i < c->n_rings; i++)
            if (span_ns(&c->rings[i]) > span_ns(&c->rings[longest])) longest = i;
        const Ring *r = &c->rings[longest];
        int64_t *hdr = RING(c, row, longest), e = now / r->bucket_ns, ti = 0;
        int past = 0;  /* the sum left int64 (counts, or junk) */
        double td = 0;
        for (int64_t j = 0, k = e - r->n + 1; j < r->n; j++, k++) {
            int64_t *b = BUCKET(c, hdr, r, k < 0 ? 0 : k);
            if (k < 0 || LOAD(b + SLOT_EPOCH) != k) continue;
            int64_t bits = LOAD(b + f);
            double x;
            memcpy(&x, &bits, 8);
            past |= __builtin_add_overflow(ti, bits, &ti);
            td += x;
        }
        if (!c->floats && past)  /* as policy.int64_total: raise, never a wrapped total */
            PyErr_Format(PyExc_OverflowError, "the total of key %R in window %R is past int64 (the add was "
                         "counted)", a[2], c->name);
        else result = c->floats ? PyFloat_FromDouble(td) : PyLong_FromLongLong(ti);
    }
    key_unlock(c, &kc);
out:
    return key_leave(c, &kc, result);
}

/* add_batch(items, field=None, key=None): add (ring, epoch, value) triples, computed by
 * add_many(), in one section ("add_batch", add_items below). Items whose slot already holds a
 * newer epoch are outside the window by now and are dropped. */
typedef struct {
    int64_t ring, epoch, bits;  /* bits: the int64, or the double's bits */
} Item;

static int parse_items(Core *c, PyObject *obj, Item **out, Py_ssize_t *count) {
    PyObject *seq = PySequence_Fast(obj, "items must be a sequence of (ring, epoch, value)");
    if (seq == NULL) return -1;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    Item *items = PyMem_Malloc((size_t)(m ? m : 1) * sizeof(Item));
    if (items == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, j), *value;
        double d;
        if (!PyArg_ParseTuple(t, "LLO", &items[j].ring, &items[j].epoch, &value) ||
            amount(c, value, &items[j].bits, &d) < 0)
            goto bad;
        if (c->floats) memcpy(&items[j].bits, &d, 8);
        if (items[j].ring < 0 || items[j].ring >= c->n_rings || items[j].epoch < 0) {
            PyErr_SetString(PyExc_ValueError, "an item names no ring, or a negative epoch");
            goto bad;
        }
    }
    Py_DECREF(seq);
    *out = items;
    *count = m;
    return 0;
bad:
    Py_DECREF(seq);
    PyMem_Free(items);
    return -1;
}

static int64_t *item_slot(Core *c, char *row, const Item *it) {
    return BUCKET(c, RING(c, row, it->ring), &c->rings[it->ring], it->epoch);
}

/* Section "add_batch": the items into one row -- the key's (under its lock), the shared row
 * (under LOCK_SHARED_ROW), or this process's stripe (lock-free: only it writes there). Each
 * item is added as add_row adds: a slot older than the item is zeroed, then stamped, then
 * counted; a newer slot is left alone. Every overflow is checked before the first store.
 * Invariant between stores: every slot holds a whole bucket -- a lock-free reader that sees
 * an item's epoch sees no value of an older one -- and the items are applied in order, so a
 * tear leaves those before it counted and the rest not: a batch counted in part, never a
 * bucket torn or counted twice. Repair: none; a window keeps nothing derived (the keyed row's
 * intent is stored for the lock's repair, which recomputes only a limiter's totals). */
static int add_items(Core *c, char *row, int f, const Item *items, Py_ssize_t m) {
    for (Py_ssize_t j = 0; j < m; j++) {  /* overflow: check all, then write */
        int64_t *s = item_slot(c, row, &items[j]), v = LOAD(s + SLOT_EPOCH) == items[j].epoch ? LOAD(s + f) : 0;
        int64_t out;
        double x, y;
        memcpy(&x, &v, 8);
        memcpy(&y, &items[j].bits, 8);
        if (c->floats ? !isfinite(x + y) : __builtin_add_overflow(v, items[j].bits, &out)) {
            PyErr_SetString(PyExc_OverflowError, "the batch would overflow a window value");
            return -1;
        }
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        int64_t *s = item_slot(c, row, &items[j]), cur;
        if (LOAD(s + SLOT_EPOCH) > items[j].epoch) continue;
        if (LOAD(s + SLOT_EPOCH) < items[j].epoch) {
            for (int k = 0; k < c->n_fields; k++) STORE(s + SLOT_VALUES + k, 0);
            STORE(s + SLOT_EPOCH, items[j].epoch);
        }
        cur = LOAD(s + f);
        if (c->floats) {
            double x, y;
            memcpy(&x, &cur, 8);
            memcpy(&y, &items[j].bits, 8);
            x += y;
            memcpy(&cur, &x, 8);
            STORE(s + f, cur);
        } else if (__builtin_add_overflow(cur, items[j].bits, &cur)) {
            /* only items naming one bucket twice get here (add_many sums them first): those
             * before it are counted, as a tear would leave them */
            PyErr_SetString(PyExc_OverflowError, "the batch would overflow a window value");
            return -1;
        } else {
            STORE(s + f, cur);
        }
    }
    return 0;
}

static PyObject *Core_add_batch(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"items", "field", "key"};
    PyObject *a[3];
    Item *items = NULL;
    Py_ssize_t m = 0;
    int64_t row = 0, now = 0;
    int f, lock = -1, rc = -1;
    if (parse(args, nargs, kwnames, names, 3, a, "add_batch") < 0 || enter(c) < 0) return NULL;
    if (slot_rows(c) < 0) goto out;
    if (a[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "add_batch() needs items");
        goto out;
    }
    if (field_word(c, a[1], &f) < 0 || parse_items(c, a[0], &items, &m) < 0) goto out;
    if (c->keyed != (a[2] != NULL && a[2] != Py_None)) {
        PyErr_Format(c->keyed ? PyExc_TypeError : PyExc_ValueError,
                     c->keyed ? "window %R is keyed: pass key=" : "window %R is not keyed", c->name);
        goto out;
    }
    if (now_ns(c, &now) < 0) goto out;
    if (c->keyed) {
        if (lock_key(c, a[2], 1, now, &row) < 0) {
            if (met_full(c, 1)) rc = 0;  /* on_full: the batch is dropped, counted in full_count */
            goto out;
        }
        lock = row_lock(c, row);
    } else if (c->striped && stripe_of(c, &row) < 0) {
        goto out;
    }
    if (!c->keyed && row == 0) {
        if (lock_take_ex(c, LOCK_SHARED_ROW, 1) < 0) goto out;
        lock = LOCK_SHARED_ROW;
    }
    SECTION("add_batch");
    if (c->keyed) STORE(intent_at(c, lock), row);
    rc = add_items(c, ROW(c, row), f, items, m);
    if (rc == 0 && c->keyed) touch_last(ROW(c, row), now);
    END_SECTION();
    if (lock >= 0) lock_give(c, lock);
out:
    PyMem_Free(items);
    leave(c);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

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
    int64_t e = t->note_e, *b = t->note_b;
    if (b == NULL || t->note_row != t->stripe_row || now < t->note_lo_ns || now - t->note_lo_ns >= r->bucket_ns) {
        e = now / r->bucket_ns;  /* a new bucket (or stripe): where it is, kept for the next hits */
        b = BUCKET(t, RING(t, ROW(t, t->stripe_row), 0), r, e);
        t->note_e = e, t->note_lo_ns = e * r->bucket_ns, t->note_row = t->stripe_row, t->note_b = b;
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
    Core *t = (Core *)c->tally;  /* called with no error set; no Python runs here */
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
    Core *t = (Core *)c->tally;
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
static PyObject *Core_set_tally(Core *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_tally(tally, shadow) takes 2 arguments");
        return NULL;
    }
    PyObject *t = args[0];
    int shadow = PyObject_IsTrue(args[1]);
    if (shadow < 0) return NULL;
    if (t != Py_None) {
        Core *w = (Core *)t;
        if (!PyObject_TypeCheck(t, c->st->core_type) || w->limiter || w->keyed || w->floats ||
            w->n_fields < 3 || w->state_words != 0) {
            PyErr_SetString(PyExc_TypeError, "set_tally() needs an unkeyed int window of 3 fields, or None");
            return NULL;
        }
    }
    if (!c->limiter && c->role != ROLE_TOKEN_BUCKET) {
        PyErr_Format(PyExc_TypeError, "window %R is not a limiter: it makes no decisions", c->name);
        return NULL;
    }
    Py_XSETREF(c->tally, t == Py_None ? NULL : Py_NewRef(t));
    c->shadow = shadow;
    Py_RETURN_NONE;
}

/* hit(key, cost=1) -> bool: count cost hits if every rate allows them, else nothing. */
static PyObject *Core_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key", "cost"};
    PyObject *a[2], *result = NULL;
    int64_t cost, now = 0, slot;
    Verdict v;
    if (nargs == 1 && kwnames == NULL) {
        a[0] = args[0];
        a[1] = NULL;
    } else if (parse(args, nargs, kwnames, names, 2, a, "hit") < 0) {
        return NULL;
    }
    if (a[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "hit() needs a key");
        return NULL;
    }
    if (key_enter(c, &kc) < 0) return NULL;
    if (ring_rows(c) < 0 || cost_of(a[1], &cost, 1) < 0 || tally_ready(c) < 0) goto out;
    int got = key_lock(c, &kc, a[0], 1, &now, &slot);
    if (got < 0) {
        if (met_full(c, 1)) {  /* on_full answers: admitted uncounted, or refused */
            note_decision(c, now, c->on_full == 1, 0);
            result = Py_NewRef(c->on_full == 1 || c->shadow ? Py_True : Py_False);
        }
        goto out;
    }
    int rc = hit_row(c, slot, now, cost, 1, &v);
    key_unlock(c, &kc);
    if (rc == 0) {
        note_decision(c, now, v.allowed, v.allowed && near_limit(c, &v));
        result = Py_NewRef(v.allowed || c->shadow ? Py_True : Py_False);
    }
out:
    return key_leave(c, &kc, result);
}

/* Parse (key, cost) for refund() and charge(): 0, or -1 with the error set. */
static int key_and_cost(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *what,
                        PyObject **key, int64_t *cost) {
    static const char *const names[] = {"key", "cost"};
    PyObject *a[2];
    if (parse(args, nargs, kwnames, names, 2, a, what) < 0) return -1;
    if (a[0] == NULL || a[1] == NULL) {
        PyErr_Format(PyExc_TypeError, "%s() needs a key and a cost", what);
        return -1;
    }
    *key = a[0];
    return ring_rows(c) < 0 || cost_of(a[1], cost, 0) < 0 ? -1 : 0;
}

/* refund(key, cost) -> int: give back up to cost of the key's hits, most recent first (section
 * "refund"); how much. A key never seen holds nothing: 0, and no key is made. */
static PyObject *Core_refund(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    PyObject *key, *result = NULL;
    int64_t cost, now = 0, slot, given = 0;
    Verdict v;
    if (key_and_cost(c, args, nargs, kwnames, "refund", &key, &cost) < 0 || key_enter(c, &kc) < 0) return NULL;
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
    return key_leave(c, &kc, result);
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
    if (key_and_cost(c, args, nargs, kwnames, "charge", &key, &cost) < 0 || key_enter(c, &kc) < 0) return NULL;
    int got = key_lock(c, &kc, key, 1, &now, &slot);
    if (got < 0) {
        if (met_full(c, 1)) result = Py_NewRef(Py_None);
        goto out;
    }
    int rc = hit_row(c, slot, now, cost, COMMIT_FORCE, &v);
    key_unlock(c, &kc);
    if (rc == 0) result = Py_NewRef(Py_None);
out:
    return key_leave(c, &kc, result);
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
    if (ring_rows(c) < 0) goto out;
    commit = PyObject_IsTrue(a[2]);
    detail = a[3] == NULL ? 1 : PyObject_IsTrue(a[3]);
    if (commit < 0 || detail < 0 || cost_of(a[1], &cost, commit ? 1 : 0) < 0) goto out;
    if (commit && tally_ready(c) < 0) goto out;
    int got = key_lock(c, &kc, a[0], commit, &now, &slot);
    if (got < 0) {
        if (!met_full(c, 1)) goto out;
        v.allowed = c->on_full == 1;
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
    return key_leave(c, &kc, result);
}

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
