/* fixedsum.c -- FixedSum: limits' get of a key its strategies did not build ("user:42":
 * django-ratelimit's, pyrate-limiter's, an app's own) over every fixed-window segment of one
 * limits storage, in one call.
 *
 * Such a key names no period, so its count is the sum of its live windows in all of the
 * storage's fixed-window segments (integrations/limits_segments.py). The storage lists them
 * only when its board (backends/shm/boards.py: one word each creator of a fixed-window segment
 * changes) no longer holds the value read before its last listing; then it hands this object
 * the board, that value and the cores it found (set). While the word holds it, get(key) is the
 * whole of limits' get: the clock read once, each core's row read without its row lock
 * (peek_units: a seqlock on the lock's seq word, format 12; under the lock, fixed_units_at in
 * counters.c, when the word moved), the units summed and given in hits -- no Python frame a
 * segment, no tuple a segment; StorageGet (at the end) is ShmStorage.get itself. When the word moved, get answers None and the storage lists
 * again (its Python path), then calls sum(key), which reads no board. It answers None too a
 * second (recheck_ns) after set(), so that each process checks its board is still the file at
 * its path (one removed by hand gets no new value), and for a key with a granularity after its
 * last "/" (maybe limits' own: the storage reads that one period's segment). Bytes keys are
 * summed as str ones (limits' memory storage keeps b"k" apart from "k", as the cores do).
 *
 * Safety. The object holds a reference to the tuple of cores, and each core its mapping: a
 * segment removed by another process stays mapped here until the storage lets it go, so a
 * call never reads unmapped memory; set() during a call (a clock or a lock wait may run other
 * threads) replaces the tuple the call no longer reads from, as the call holds its own
 * reference. The board is an export of the storage's mapping of it (8 bytes, aligned): one
 * acquire load. Every core's own checks hold (a closed core raises WindowClosedError, a junk
 * word CorruptSegmentError: the locked read a junk word sends it to); this file stores nothing
 * in shared memory (counters.c heals an odd seq word under the lock): no section, no fail point.
 *
 * Time. As limits' memory storage: time.time(), looked up in the time module at each call
 * (hiro, freezegun, time-machine and a patched time.time move it), as int(time.time() * 10**9)
 * computes it in Python: a float's product truncated; or the storage's own clock, called.
 */
#include "core.h"
#include <structmember.h>  /* T_LONGLONG: recheck_ns; T_PYSSIZET: StorageGet's vectorcall */

#define UNITS_PER_HIT 1000  /* roles/counters.py UNIT: counts are kept in thousandths of a hit */
/* How long get trusts a listing without looking at the board's file (a board removed by hand,
 * with no new value written, is noticed within this; the storage then stats the board and its
 * segments: a few us a second). CLOCK_MONOTONIC_COARSE: a vDSO read of a few ns, whatever
 * clock the storage counts with (a mocked or manual one may never move). */
#define RECHECK_NS INT64_C(1000000000)

typedef struct {
    PyObject_HEAD
    PyObject *cores;    /* a tuple of FixedWindowCore: the storage's fixed windows, as last listed */
    Py_buffer board;    /* the storage's board, mapped (has_board); its word at board.buf */
    int has_board;
    int64_t seen;       /* the board's value read before that listing */
    int64_t listed_ns;  /* CLOCK_MONOTONIC_COARSE at set(): get answers None recheck_ns later */
    long long recheck_ns; /* RECHECK_NS; a test sets 0 (every get lists) */
    PyObject *clock;    /* NULL: limits' wall clock (time.time); else callable() -> int ns */
    PyObject *time_module, *time_name;
} FixedSum;

static void drop_board(FixedSum *s) {
    if (s->has_board) PyBuffer_Release(&s->board);
    s->has_board = 0;
}

static int64_t coarse_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int fs_init(FixedSum *s, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) != 0 || (kw != NULL && PyDict_GET_SIZE(kw) != 0)) {
        PyErr_SetString(PyExc_TypeError, "FixedSum() takes no arguments (set() gives it its cores)");
        return -1;
    }
    drop_board(s);  /* called again: nothing of the last set() is kept */
    s->seen = 0;
    s->recheck_ns = RECHECK_NS;
    Py_CLEAR(s->clock);
    Py_XSETREF(s->cores, PyTuple_New(0));
    Py_XSETREF(s->time_module, PyImport_ImportModule("time"));
    Py_XSETREF(s->time_name, PyUnicode_InternFromString("time"));
    return s->cores != NULL && s->time_module != NULL && s->time_name != NULL ? 0 : -1;
}

/* DO(ref) for each object a FixedSum holds that may close a cycle (time_name, an interned str: cleared only) */
#define FS_REFS(s, DO) do { DO(s->cores); DO(s->clock); DO(s->time_module); } while (0)

static int fs_traverse(FixedSum *s, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(s));
    FS_REFS(s, Py_VISIT);
    return 0;
}

static int fs_clear(FixedSum *s) {
    drop_board(s);
    FS_REFS(s, Py_CLEAR);
    Py_CLEAR(s->time_name);
    return 0;
}

static void fs_dealloc(FixedSum *s) {
    PyObject_GC_UnTrack(s);
    fs_clear(s);
    free_instance((PyObject *)s);
}

/* cores (a tuple of FixedWindowCore) in a new tuple, those of one segment hash key side by side
 * (in the order given otherwise): a call then encodes and hashes a key once a hash key, as the
 * storage's fixed windows share theirs (boards.shared_hash_key), one made before keeping its
 * own. The sum's order is free: saturating adds of counts >= 0. */
static PyObject *grouped_by_hash_key(PyObject *cores) {
    Py_ssize_t n = PyTuple_GET_SIZE(cores);
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Core *c = (Core *)PyTuple_GET_ITEM(cores, i);
        Py_ssize_t at = i;  /* after the last one of c's key placed so far, else at the end */
        for (Py_ssize_t j = i - 1; j >= 0 && at == i; j--) {
            Core *d = (Core *)PyTuple_GET_ITEM(out, j);
            if (d->hk0 == c->hk0 && d->hk1 == c->hk1) at = j + 1;
        }
        for (Py_ssize_t j = i; j > at; j--) PyTuple_SET_ITEM(out, j, PyTuple_GET_ITEM(out, j - 1));
        PyTuple_SET_ITEM(out, at, Py_NewRef((PyObject *)c));
    }
    return out;
}

/* set(board, seen, cores, clock, /): what the storage found at its listing. board: an object
 * exporting the board's 8 bytes (its mmap), or None (none: get answers None each call);
 * seen: the word's value read before that listing; cores: a tuple of FixedWindowCore; clock:
 * None (time.time) or a callable returning ns. */
static PyObject *fs_set(FixedSum *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "set() takes board, seen, cores and clock, not %zd arguments", nargs);
        return NULL;
    }
    PyObject *board = args[0], *cores = args[2], *clock = args[3];
    int64_t seen = 0;
    if (!PyTuple_CheckExact(cores)) {
        PyErr_Format(PyExc_TypeError, "set(): cores must be a tuple, not %.80s", Py_TYPE(cores)->tp_name);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cores); i++)
        if (!is_fixed_core(PyTuple_GET_ITEM(cores, i))) {
            PyErr_Format(PyExc_TypeError, "set(): cores[%zd] is a %.80s, not a FixedWindowCore", i,
                         Py_TYPE(PyTuple_GET_ITEM(cores, i))->tp_name);
            return NULL;
        }
    if (clock != Py_None && !PyCallable_Check(clock)) {
        PyErr_SetString(PyExc_TypeError, "set(): clock must be None or a callable returning ns");
        return NULL;
    }
    Py_buffer b = {0};
    PyObject *grouped = grouped_by_hash_key(cores);
    if (grouped == NULL) return NULL;
    if (board != Py_None) {
        if (!PyLong_Check(args[1])) {
            PyErr_SetString(PyExc_TypeError, "set(): seen must be the board's value, an int");
            goto fail;
        }
        seen = PyLong_AsLongLong(args[1]);
        if (seen == -1 && PyErr_Occurred()) goto fail;
        if (PyObject_GetBuffer(board, &b, PyBUF_SIMPLE) < 0) goto fail;
        if (b.len < WORD_BYTES || (uintptr_t)b.buf % WORD_BYTES != 0) {
            PyBuffer_Release(&b);
            PyErr_SetString(PyExc_ValueError, "set(): a board is 8 aligned bytes");
            goto fail;
        }
    }
    drop_board(s);
    if (board != Py_None) s->board = b, s->has_board = 1;
    s->seen = seen;
    s->listed_ns = coarse_ns();
    Py_XSETREF(s->cores, grouped);
    Py_XSETREF(s->clock, clock == Py_None ? NULL : Py_NewRef(clock));
    Py_RETURN_NONE;
fail:
    Py_DECREF(grouped);
    return NULL;
}

/* seconds (time.time()'s answer) as int(seconds * 10**9) computes it: a float's product,
 * truncated; any other number (a mock's int) through Python's own arithmetic; not a number
 * (a str would be repeated 10**9 times): a TypeError. */
static int ns_of_seconds(PyObject *t, int64_t *now) {
    if (PyFloat_Check(t)) {
        double ns = PyFloat_AS_DOUBLE(t) * 1e9;
        if (ns >= 0 && ns < 0x1p63) {
            *now = (int64_t)ns;
            return 0;
        }
    } else if (!PyNumber_Check(t)) {
        PyErr_Format(PyExc_TypeError, "time.time() gave %.80s, not a number of seconds", Py_TYPE(t)->tp_name);
        return -1;
    } else {
        PyObject *billion = PyLong_FromLong(1000000000L), *product = NULL, *whole = NULL;
        if (billion != NULL) product = PyNumber_Multiply(t, billion);
        if (product != NULL) whole = PyNumber_Long(product);
        Py_XDECREF(billion);
        Py_XDECREF(product);
        if (whole == NULL) return -1;
        *now = PyLong_AsLongLong(whole);
        Py_DECREF(whole);
        if (*now == -1 && PyErr_Occurred()) return -1;
        if (*now >= 0) return 0;
    }
    PyErr_Format(PyExc_ValueError, "the clock read %R: not a time since 1970 in range", t);
    return -1;
}

/* Now, in ns: time.time() looked up at each call, or the storage's clock. No lock is held. */
static int now_of(FixedSum *s, int64_t *now) {
    PyObject *t;
    if (s->clock == NULL) {
        PyObject *f = PyObject_GetAttr(s->time_module, s->time_name);
        if (f == NULL) return -1;
        t = PyObject_CallNoArgs(f);
        Py_DECREF(f);
        if (t == NULL) return -1;
        int rc = ns_of_seconds(t, now);
        Py_DECREF(t);
        return rc;
    }
    t = PyObject_CallNoArgs(s->clock);
    if (t == NULL) return -1;
    *now = PyLong_Check(t) ? PyLong_AsLongLong(t) : -1;
    Py_DECREF(t);
    if (*now == -1 && PyErr_Occurred()) return -1;
    if (*now < 0) {
        PyErr_SetString(PyExc_ValueError, "the storage's clock must return an int of ns >= 0");
        return -1;
    }
    return 0;
}

/* Units as hits, as roles/counters.py to_hits gives them: an int when whole, else units / 1000
 * (a float, correctly rounded: Python's own division past 2**53). */
static PyObject *hits_of(int64_t units) {
    if (units % UNITS_PER_HIT == 0) return PyLong_FromLongLong(units / UNITS_PER_HIT);
    if (units < (INT64_C(1) << 53)) return PyFloat_FromDouble((double)units / UNITS_PER_HIT);
    PyObject *n = PyLong_FromLongLong(units), *d = PyLong_FromLong(UNITS_PER_HIT), *q = NULL;
    if (n != NULL && d != NULL) q = PyNumber_TrueDivide(n, d);
    Py_XDECREF(n);
    Py_XDECREF(d);
    return q;
}

/* A key's stored form and hash (encode_key) for the last segment hash key it was made with:
 * the cores of one storage that share theirs share it (one SipHash a call, not one a core). */
typedef struct {
    StoredKey k;
    uint64_t hk0, hk1;
    int made;
} KeyForm;

static int form_for(Core *c, PyObject *key, KeyForm *f) {
    if (f->made && f->hk0 == c->hk0 && f->hk1 == c->hk1 && c->key_bytes == MAX_STORED_KEY) return 0;
    f->made = 0;
    if (encode_key(c, key, &f->k) < 0) return -1;
    f->hk0 = c->hk0, f->hk1 = c->hk1, f->made = c->key_bytes == MAX_STORED_KEY;  /* (a digest row's: never shared) */
    return 0;
}

/* The live units of the key in row `slot` at generation `gen` of core c at now, read without
 * the row's lock: 1 read, or 0 and the caller reads it under the lock (fixed_units_at, which
 * waits for a section and raises what is wrong) -- a section under way or run meanwhile, the
 * row given to another key, a word out of range. The row's generation, the same around the
 * loads, says it was the key's throughout (generations never come back: index.c); its lock's
 * seq, even and the same around them, that no section changed the state in between (core.h:
 * fixed_incr and reset mark it). So the two words are one state a locked read could have read.
 * verified 0: key's text is compared with the row's (a short key's cache entry found by its
 * tag). Caller entered c. */
static int peek_units(Core *c, PyObject *key, int64_t slot, int64_t gen, int verified, int64_t now,
                      int64_t *units) {
    char *row = ROW(c, slot);
    const int64_t *seq = seq_at(c, row_lock(c, slot)), *st = (const int64_t *)(row + c->rings_off);
    int64_t q = LOAD(seq);
    if ((q & 1) || LOAD(RGEN(row)) != gen || (!verified && !row_holds_text(row, key))) return 0;
    int64_t start = LOAD(st + FIXED_STATE_START), count = LOAD(st + FIXED_STATE_COUNT);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);  /* every load above (the text's too) before the re-checks */
    if (LOAD(seq) != q || LOAD(RGEN(row)) != gen) return 0;
    if (start == EMPTY_EPOCH) {
        *units = 0;
        return 1;
    }
    if (start < 0 || start >= MAX_NOW_NS || count < 0) return 0;  /* junk: the locked read raises it */
    *units = now < start + c->rings[0].bucket_ns ? count : 0;  /* counters.c's fixed_read */
    return 1;
}

/* key's live units in core c at now. Its row from this process's key cache, else from the
 * index (lock-free, as lock_key looks: a key it does not find counts 0, no lock taken), then
 * read without its lock (peek_units) if it can, else under it. */
static int units_in(Core *c, PyObject *key, KeyForm *form, int64_t now, int64_t *units) {
    int64_t slot, gen;
    int verified = 1, read = 0, found;
    if (enter(c) < 0) return -1;
    if (LOAD(W(c, LIVE_GEN_OFF)) != c->live_gen) {  /* live limits moved: the locked path reloads them */
        leave(c);
        return fixed_units_at(c, key, now, units);
    }
    found = cache_hint(c, key, &slot, &gen, &verified);
    if (!found) {
        found = form_for(c, key, form) < 0 ? -1 : find_key(c, &form->k, &slot, &gen);
        if (found > 0 && (read = peek_units(c, key, slot, gen, 1, now, units))) remember(c, key, slot, gen);
    } else {
        read = peek_units(c, key, slot, gen, verified, now, units);
    }
    leave(c);
    if (found <= 0) {
        *units = 0;
        return found;  /* -1: an error (a key that cannot be encoded, a corrupt index) */
    }
    return read ? 0 : fixed_units_at(c, key, now, units);
}

/* The key's count in hits: its live windows' units in every core, summed (saturating, as the
 * cores count), at one now. */
static PyObject *sum_of(FixedSum *s, PyObject *key) {
    int64_t now, total = 0, units;
    if (s->cores == NULL || s->time_name == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "FixedSum was never initialised");
        return NULL;
    }
    if (!PyUnicode_Check(key) && !PyBytes_Check(key)) {
        PyErr_Format(PyExc_TypeError, "a key is a str or bytes, not %.80s", Py_TYPE(key)->tp_name);
        return NULL;
    }
    if (now_of(s, &now) < 0) return NULL;
    PyObject *cores = Py_NewRef(s->cores);  /* ours for the call, whatever set() does meanwhile */
    KeyForm form = {.made = 0};
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cores); i++) {
        if (units_in((Core *)PyTuple_GET_ITEM(cores, i), key, &form, now, &units) < 0) {
            Py_DECREF(cores);
            return NULL;
        }
        total = sat_add(total, units);
    }
    Py_DECREF(cores);
    return hits_of(total);
}

/* Whether the last listing still holds: the board holds the value read before it, and it was
 * less than recheck_ns ago. */
static int holds(FixedSum *s) {
    return s->has_board && LOAD((int64_t *)s->board.buf) == s->seen && coarse_ns() - s->listed_ns < s->recheck_ns;
}

/* holds(): whether the storage may skip its listing (its Python path asks it too). */
static PyObject *fs_holds(FixedSum *s, PyObject *Py_UNUSED(ignored)) { return PyBool_FromLong(holds(s)); }

static const char *const GRANULARITIES[] = {"second", "minute", "hour", "day", "month", "year"};

/* Whether key may be one limits built: a granularity after its last "/" (limits' keys end in
 * /LIMIT/MULTIPLES/GRANULARITY). A cheap, wide test: the storage's Python path reads such a
 * key exactly (limits_segments._limit_of_key); every other key ("user:42",
 * "ip:10.0.0.1/api/login") is summed here. 1 yes, 0 no, -1 an error. */
static int maybe_limits_key(PyObject *key) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(key), last = PyUnicode_FindChar(key, '/', 0, n, -1);
    if (last < 0) return last == -2 ? -1 : 0;
    int kind = PyUnicode_KIND(key);
    const void *data = PyUnicode_DATA(key);
    for (size_t g = 0; g < sizeof GRANULARITIES / sizeof *GRANULARITIES; g++) {
        const char *word = GRANULARITIES[g];
        Py_ssize_t len = (Py_ssize_t)strlen(word), i = 0;
        if (n - last - 1 != len) continue;
        while (i < len && PyUnicode_READ(kind, data, last + 1 + i) == (Py_UCS4)(unsigned char)word[i]) i++;
        if (i == len) return 1;
    }
    return 0;
}

/* get(key, /): the key's count in hits while the board holds the value set() was given (and
 * set() was less than RECHECK_NS ago) and the key is not one limits may have built (bytes
 * never are: limits builds str); else None, and the storage looks (its Python path). */
static int answers(FixedSum *s, PyObject *key) {  /* get's: 1 sum it, 0 None, -1 an error */
    if (!PyUnicode_Check(key) && !PyBytes_Check(key)) {
        PyErr_Format(PyExc_TypeError, "a limits key is a str or bytes, not %.80s", Py_TYPE(key)->tp_name);
        return -1;
    }
    if (!holds(s)) return 0;
    int maybe = PyUnicode_Check(key) ? maybe_limits_key(key) : 0;
    return maybe < 0 ? -1 : !maybe;
}
static PyObject *fs_get(FixedSum *s, PyObject *key) {
    int a = answers(s, key);
    if (a == 0) Py_RETURN_NONE;
    return a < 0 ? NULL : sum_of(s, key);
}

/* __reduce__: a copy (pickle, deepcopy of a storage) holds nothing: its first get looks. */
static PyObject *fs_reduce(FixedSum *s, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("(O())", (PyObject *)Py_TYPE(s));
}

/* sum(key, /): the key's count in hits over the cores set() was given, the board not read. */
static PyObject *fs_sum(FixedSum *s, PyObject *key) { return sum_of(s, key); }

static PyMethodDef fs_methods[] = {
    METHOD_POS(set, fs_set, "board, seen, cores, clock",
        "The storage's board (or None), its value before the listing, the fixed windows' cores found, the clock."),
    METHOD_O(get, fs_get, "key", "key's count in hits over the cores, or None: the board moved, or maybe limits' key."),
    METHOD_NOARGS(holds, fs_holds, "Whether the board holds the value set() was given, within recheck_ns of it."),
    {"__reduce__", (PyCFunction)fs_reduce, METH_NOARGS, "A copy holds nothing: its first get looks."},  /* no signature: pickle's */
    METHOD_O(sum, fs_sum, "key", "key's count in hits over the cores."),
    {NULL},
};

static PyMemberDef fs_members[] = {
    {"recheck_ns", T_LONGLONG, offsetof(FixedSum, recheck_ns), 0,
     "How long get trusts a listing without looking at the board's file (ns; 1 s)."},
    {NULL},
};

static PyType_Slot fs_slots[] = {
    {Py_tp_members, fs_members},
    {Py_tp_doc, "FixedSum()\n--\n\nA key's count over one limits storage's fixed windows (fixedsum.c)."},
    {Py_tp_init, fs_init},
    {Py_tp_new, PyType_GenericNew},
    GC_SLOTS(fs_dealloc, fs_traverse, fs_clear),
    {Py_tp_methods, fs_methods},
    {0, NULL},
};

static PyType_Spec fs_spec = {
    .name = "shmwin._core.FixedSum",
    .basicsize = sizeof(FixedSum),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = fs_slots,
};

/* ---- StorageGet: ShmStorage.get itself (integrations/limits.py), with no Python frame ------ *
 * limits wraps each storage's get (Storage.__init_subclass__) and calls what the class holds
 * with (storage, key). This object is that: the storage's FixedSum (its attribute named
 * first) answers; when it gives None (the board moved, maybe limits' own key), the storage's
 * Python path does (storage.<segments>.get(key)). Not a descriptor: limits' wrapper is the
 * function the instances bind. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *sum_name, *segments_name, *get_name;
} StorageGet;

static PyObject *sg_call(StorageGet *g, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "get() takes the storage and a key");
        return NULL;
    }
    PyObject *sum = PyObject_GetAttr(args[0], g->sum_name), *got;
    if (sum == NULL) return NULL;
    if (Py_TYPE(sum)->tp_init != (initproc)fs_init) {
        PyErr_Format(PyExc_TypeError, "the storage's %U is a %.80s, not a FixedSum", g->sum_name, Py_TYPE(sum)->tp_name);
        Py_DECREF(sum);
        return NULL;
    }
    int a = answers((FixedSum *)sum, args[1]);
    got = a > 0 ? sum_of((FixedSum *)sum, args[1]) : NULL;
    Py_DECREF(sum);
    if (a != 0) return got;  /* the count, or NULL: an error */
    PyObject *segments = PyObject_GetAttr(args[0], g->segments_name);
    if (segments == NULL) return NULL;
    got = PyObject_CallMethodOneArg(segments, g->get_name, args[1]);
    Py_DECREF(segments);
    return got;
}

/* StorageGet(sum_attr, segments_attr): the names of the storage's FixedSum and of what answers
 * get(key) in Python. */
static PyObject *sg_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    PyObject *sum_name, *segments_name;
    if ((kw != NULL && PyDict_GET_SIZE(kw) != 0) || !PyArg_ParseTuple(args, "UU:StorageGet", &sum_name, &segments_name))
        return NULL;
    StorageGet *g = (StorageGet *)tp->tp_alloc(tp, 0);
    if (g == NULL) return NULL;
    g->vectorcall = (vectorcallfunc)sg_call;
    g->sum_name = Py_NewRef(sum_name);
    g->segments_name = Py_NewRef(segments_name);
    g->get_name = PyUnicode_InternFromString("get");
    PyUnicode_InternInPlace(&g->sum_name);
    PyUnicode_InternInPlace(&g->segments_name);
    if (g->get_name == NULL) Py_CLEAR(g);
    return (PyObject *)g;
}

static int sg_traverse(StorageGet *g, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(g));
    return 0;  /* its fields are str: no cycle through them */
}

static void sg_dealloc(StorageGet *g) {
    PyTypeObject *tp = Py_TYPE(g);
    PyObject_GC_UnTrack(g);
    Py_CLEAR(g->sum_name);
    Py_CLEAR(g->segments_name);
    Py_CLEAR(g->get_name);
    tp->tp_free((PyObject *)g);
    Py_DECREF(tp);
}

static PyMemberDef sg_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(StorageGet, vectorcall), READONLY, NULL},
    {NULL},
};

static PyType_Slot sg_slots[] = {
    {Py_tp_doc, "StorageGet(sum_attr, segments_attr, /)\n--\n\n"
                "ShmStorage.get: (storage, key) -> the storage's FixedSum's answer, else storage.<segments_attr>.get(key)."},
    {Py_tp_new, sg_new},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_members, sg_members},
    {Py_tp_traverse, sg_traverse},
    {Py_tp_dealloc, sg_dealloc},
    {0, NULL},
};

static PyType_Spec sg_spec = {
    .name = "shmwin._core.StorageGet",
    .basicsize = sizeof(StorageGet),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = sg_slots,
};

int fixedsum_add_type(PyObject *m) {
    PyObject *t = PyType_FromModuleAndSpec(m, &fs_spec, NULL), *g = NULL;
    if (t == NULL) return -1;
    int rc = PyModule_AddType(m, (PyTypeObject *)t);
    if (rc == 0) g = PyType_FromModuleAndSpec(m, &sg_spec, NULL);
    if (rc == 0) rc = g == NULL ? -1 : PyModule_AddType(m, (PyTypeObject *)g);
    Py_DECREF(t);
    Py_XDECREF(g);
    return rc;
}
