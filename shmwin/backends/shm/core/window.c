/* window.c -- the window type (WindowCore): a window's adds: add (this process's stripe, the
 * shared row, or the key's row), add_and_total (a keyed add that answers the key's total) and
 * add_batch (many (ring, epoch, value) items in one section). The rows' arithmetic is rings.c's
 * (add_row). Every window-kind segment whose role has no type of its own is one (module.c):
 * plain windows, fixed starts, a breaker's, a shedder's, a limiter's decisions tally, ...
 */
#include "core.h"

#include <math.h>

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

/* add(n=1, field=None, key=None): count n now, in this process's stripe, the shared row
 * (section "add_locked") or the key's row ("add_keyed"). */
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
    if (amount(c, a[0], &n, &d) < 0 || field_word(c, a[1], &f) < 0) goto out;
    if (a[2] != NULL && a[2] != Py_None && !c->keyed) {
        PyErr_Format(PyExc_ValueError, "window %R is not keyed (create it with keyed=True)", c->name);
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
    if (!c->keyed) {
        PyErr_Format(PyExc_ValueError, "window %R is not keyed (create it with keyed=True)", c->name);
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

/* ---- the type ----------------------------------------------------------------------------- */

/* Rows of slots to add to, checked once at open, before the rows are read: a limiter's rows are counted only by hit()
 * and check() (its compact rings keep no epoch per count, which add's slots need), and a role
 * with a type of its own keeps its state in its rows, not rings. */
static int window_header(Core *c, const ShmwinHeader *Py_UNUSED(h)) {
    if (c->limiter) {
        PyErr_Format(PyExc_ValueError, "window %R is a limiter: it counts through hit() and check() only", c->name);
        return -1;
    }
    if (role_has_type(KIND_WINDOW, c->role)) {
        PyErr_Format(PyExc_ValueError, "window %R holds per-key state (role %d), written only through its "
                     "role's type (_core.open)", c->name, c->role);
        return -1;
    }
    return 0;
}

static const RoleHooks window_hooks = {.role = "window", .header = window_header};

static PyMethodDef window_methods[] = {
    METHOD_KW(add, Core_add, "n=1, field=None, key=None",
        "Count n now in field's current bucket: this process's stripe, the shared row, or the key's row."),
    METHOD_KW(add_and_total, Core_add_and_total, "n=1, field=None, key=None",
        "Add, and the key's total over its longest ring with it (keyed windows)."),
    METHOD_KW(add_batch, Core_add_batch, "items, field=None, key=None",
        "Add (ring, epoch, value) triples in one section."),
    {NULL},
};

/* a WindowObject: its TallyNote, for when it is a limiter's tally */
ROLE_SPEC(window_spec, "WindowCore", WindowObject, window_hooks, window_methods,
          "A window's segment: its adds, and what every segment has (Core).");
