/* seriesval.c -- role "series": SeriesValue, one prometheus_client value in its cell. Its
 * inc, set and get are C methods: Counter.inc() runs no Python frame and takes no lock. A shared
 * cell is added to by CAS (section "series_add"); a gauge's lifetime cell is written under its
 * sequence word (section "series_set"). See series.c. */
#include "series.h"

/* ---- SeriesValue: prometheus_client's value, in a cell ------------------------------------------ */

/* A per-lifetime value's cell, bound to this process lifetime: after a fork (or when pid_fn
 * answers another pid), Python's rebind(self) finds or makes this lifetime's entry. */
static int bound(SeriesValue *v) {
    if (v->map->closed) {
        PyErr_Format(v->map->st->closed, "metrics segment %R is closed", v->map->name);
        return -1;
    }
    if (!v->per_lifetime) return 0;
    if (v->pid_fn != NULL) {
        PyObject *p = PyObject_CallNoArgs(v->pid_fn);
        long long pid = p == NULL ? -1 : PyLong_AsLongLong(p);
        Py_XDECREF(p);
        if (pid == -1 && PyErr_Occurred()) return -1;
        if (pid == v->pid && v->gen == fork_gen) return 0;
    } else if (v->gen == fork_gen) {
        return 0;
    }
    PyObject *r = PyObject_CallOneArg(v->rebind, (PyObject *)v);
    long long cell, pid;
    if (r == NULL) return -1;
    int ok = PyArg_ParseTuple(r, "LL", &cell, &pid);
    Py_DECREF(r);
    if (!ok) return -1;
    if (v->map->closed || cell < 0 || cell >= v->map->max_series) {
        PyErr_SetString(PyExc_ValueError, "rebind: no such cell");
        return -1;
    }
    v->cell = CELL(v->map, cell);
    v->pid = pid;
    v->gen = fork_gen;
    return 0;
}

/* Section "series_add": a shared cell's add, one compare-and-swap on the float64's bits. */
static void shared_add(int64_t *w, double amount) {
    int64_t old = __atomic_load_n(w, __ATOMIC_RELAXED), new;
    double d;
    SECTION("series_add");
    do {
        memcpy(&d, &old, sizeof d);
        d += amount;
        memcpy(&new, &d, sizeof d);
    } while (!__atomic_compare_exchange_n(w, &old, new, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
    FAILPOINT();  /* the CAS is the section's one store */
    END_SECTION();
}

/* Section "series_set": a lifetime's cell, written by this lifetime only (the GIL serialises
 * its threads): the sequence goes odd, value and stamp are stored, the sequence goes even. */
static void lifetime_set(int64_t *c, double value, double stamp) {
    int64_t q = LOAD(c + SERIES_CELL_SEQ), bits;
    SECTION("series_set");
    STORE(c + SERIES_CELL_SEQ, q | 1);
    memcpy(&bits, &value, sizeof bits);
    STORE(c + SERIES_CELL_VALUE, bits);
    memcpy(&bits, &stamp, sizeof bits);
    STORE(c + SERIES_CELL_STAMP, bits);
    STORE(c + SERIES_CELL_SEQ, (q | 1) + 1);
    END_SECTION();
}

static double cell_value(int64_t *c) {
    int64_t bits = LOAD(c + SERIES_CELL_VALUE);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static PyObject *sv_inc(SeriesValue *v, PyObject *arg) {
    double amount = PyFloat_AsDouble(arg);
    if (amount == -1.0 && PyErr_Occurred()) return NULL;
    if (bound(v) < 0) return NULL;
    if (v->per_lifetime) lifetime_set(v->cell, cell_value(v->cell) + amount, 0.0);
    else shared_add(v->cell + SERIES_CELL_VALUE, amount);
    Py_RETURN_NONE;
}

static PyObject *sv_set(SeriesValue *v, PyObject *const *args, Py_ssize_t n, PyObject *kw) {
    static const char *const names[] = {"value", "timestamp", NULL};
    PyObject *value = n > 0 ? args[0] : NULL, *stamp = n > 1 ? args[1] : Py_None;
    Py_ssize_t nkw = kw == NULL ? 0 : PyTuple_GET_SIZE(kw);
    if (n + nkw < 1 || n > 2) {
        PyErr_SetString(PyExc_TypeError, "set(value, timestamp=None)");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kw, i);
        if (PyUnicode_CompareWithASCIIString(k, names[0]) == 0 && value == NULL) value = args[n + i];
        else if (PyUnicode_CompareWithASCIIString(k, names[1]) == 0 && n < 2) stamp = args[n + i];
        else {
            PyErr_Format(PyExc_TypeError, "set() got an unexpected keyword argument %R", k);
            return NULL;
        }
    }
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "set(value, timestamp=None): value missing");
        return NULL;
    }
    double d = PyFloat_AsDouble(value), t = stamp == Py_None ? 0.0 : PyFloat_AsDouble(stamp);
    if (PyErr_Occurred() || bound(v) < 0) return NULL;
    if (v->per_lifetime) {
        lifetime_set(v->cell, d, t);
    } else {
        int64_t bits;
        memcpy(&bits, &d, sizeof bits);
        SECTION("series_add");
        STORE(v->cell + SERIES_CELL_VALUE, bits);
        END_SECTION();
    }
    Py_RETURN_NONE;
}

static PyObject *sv_get(SeriesValue *v, PyObject *Py_UNUSED(x)) {
    if (bound(v) < 0) return NULL;
    return PyFloat_FromDouble(cell_value(v->cell));
}

/* prometheus_client's multiprocess mode keeps no exemplars (MmapedValue): neither do we. */
static PyObject *sv_set_exemplar(SeriesValue *Py_UNUSED(v), PyObject *Py_UNUSED(e)) { Py_RETURN_NONE; }
static PyObject *sv_get_exemplar(SeriesValue *Py_UNUSED(v), PyObject *Py_UNUSED(x)) { Py_RETURN_NONE; }

static void sv_dealloc(SeriesValue *v) {
    PyTypeObject *tp = Py_TYPE(v);
    PyObject_GC_UnTrack(v);
    Py_CLEAR(v->map);
    Py_CLEAR(v->rebind);
    Py_CLEAR(v->pid_fn);
    tp->tp_free((PyObject *)v);
    Py_DECREF(tp);
}

static int sv_traverse(SeriesValue *v, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(v));
    Py_VISIT(v->map);
    Py_VISIT(v->rebind);
    Py_VISIT(v->pid_fn);
    return 0;
}

static int sv_clear(SeriesValue *v) {
    Py_CLEAR(v->rebind);
    Py_CLEAR(v->pid_fn);
    return 0;
}

static PyMethodDef sv_methods[] = {
    METHOD_O(inc, sv_inc, "amount", "Add amount."),
    {"set", (PyCFunction)(void (*)(void))sv_set, METH_FASTCALL | METH_KEYWORDS,
     "set($self, value, timestamp=None)\n--\n\nStore value (a gauge: with its timestamp)."},
    METHOD_NOARGS(get, sv_get, "The value: a shared cell's total."),
    METHOD_O(set_exemplar, sv_set_exemplar, "exemplar", "Ignored."),
    METHOD_NOARGS(get_exemplar, sv_get_exemplar, "None."),
    {NULL},
};

static PyType_Slot sv_slots[] = {
    {Py_tp_doc, "A prometheus_client value in a series segment's cell (SeriesMap.value)."},
    {Py_tp_dealloc, sv_dealloc},
    {Py_tp_traverse, sv_traverse},
    {Py_tp_clear, sv_clear},
    {Py_tp_methods, sv_methods},
    {0, NULL},
};

PyType_Spec series_value_spec = {
    .name = "shmwin._core.SeriesValue",
    .basicsize = sizeof(SeriesValue),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = sv_slots,
};

/* A value on `cell`: rebind None makes a shared cell's; else the value is bound to this
 * lifetime's cell now and rebinds through rebind(self) after a fork (or when pid_fn, if not
 * None, answers another pid than `pid`). */
PyObject *series_value_new(SeriesMap *s, int64_t cell, PyObject *rebind, PyObject *pid_fn, long long pid) {
    SeriesValue *v = PyObject_GC_New(SeriesValue, s->st->series_value_type);
    if (v == NULL) return NULL;
    v->map = (SeriesMap *)Py_NewRef(s);
    v->cell = CELL(s, cell);
    v->per_lifetime = rebind != Py_None;
    v->rebind = v->per_lifetime ? Py_NewRef(rebind) : NULL;
    v->pid_fn = pid_fn != Py_None ? Py_NewRef(pid_fn) : NULL;
    v->pid = pid;
    v->gen = fork_gen;
    PyObject_GC_Track(v);
    return (PyObject *)v;
}
