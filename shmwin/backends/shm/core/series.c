/* series.c -- role "series": prometheus_client's values of one app, every process's, in one
 * segment (shmwin/integrations/prometheus_shm.py plugs them into prometheus_client's ValueClass).
 *
 * Two types. SeriesMap is the mapped segment: its directory of series (append-only entries
 * holding each series' whole identity, found through a hash index), its process slots and its
 * cells. SeriesValue is one prometheus_client value: a cell, written by C methods only, so that
 * Counter.inc() runs no Python frame and takes no lock.
 *
 *  - A counter's, a histogram bucket's or sum's, a summary's count or sum: ONE cell shared by
 *    every process, added to by a compare-and-swap on the float64's bits. A kill loses at most
 *    the add in flight (the CAS happened, or not).
 *  - A gauge: one cell per (series, process lifetime), written by that lifetime only, under a
 *    sequence word (odd while value and stamp are written) so that a mostrecent scrape reads the
 *    pair whole. A lifetime is a process slot's claim: the slot's robust mutex is held by the
 *    keeper thread (threads.c) for the process's life, so a scraper tells live from dead by
 *    probing it, with no help from the writer (as stripes.c does).
 *
 * The directory (section "series_insert", under the robust lock SERIES_LOCK_DIR): the new
 * entry's cell is zeroed, the entry and its identity written past entry_top, then cells_top,
 * then entry_top (which publishes it to scans), then its index word (which publishes it to
 * finders), then the entries count. Invariant: every entry below entry_top is whole. Repair
 * (EOWNERDEAD): a holder that died after entry_top but before the index word left an entry no
 * finder reaches, and the next insert of its identity would add a second: repair_index() puts
 * every entry below entry_top that the index lacks back into it, and recounts. A cell counted
 * in cells_top without an entry is only lost room. Lookups take no lock: index words and
 * entry_top are release-stored, acquire-loaded. The index grows in levels ("series_grow"):
 * the next, twice as large, is built whole before index_level names it.
 *
 * The other sections: "series_claim" (a process slot, seriesdir.c), "series_adopt" (a dead
 * lifetime's live-mode gauge entry taken over by the slot's next lifetime, below), and
 * seriesval.c's "series_add" (the CAS) and "series_set" (a gauge cell's write). Each states its
 * order and what a tear leaves; tests/integration/metrics/test_fp_series.py strikes every store.
 * The files: series.h (the shared structs), this one (SeriesMap's methods and type),
 * seriesdir.c (close safety, the lock, the directory, slots), seriesval.c (SeriesValue).
 *
 * Junk safety: every word read from the segment that says where to touch (entry offsets in
 * index words, cells in entries, entry_top, cells_top) is checked against the geometry read at
 * attach; a word that fails is a CorruptSegmentError.
 */
#include "series.h"

/* ---- SeriesMap: the methods --------------------------------------------------------------- */

static int positional(const char *method, Py_ssize_t n, Py_ssize_t want) {
    if (n == want) return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd positional arguments (%zd given)", method, want, n);
    return 0;
}

static int parse_key(PyObject *const *args, Py_buffer *key, uint64_t *h) {
    if (PyObject_GetBuffer(args[0], key, PyBUF_SIMPLE) < 0) return -1;
    if (key->len > SERIES_MAX_KEY) {
        PyBuffer_Release(key);
        PyErr_Format(PyExc_ValueError, "a series identity of %zd bytes: at most %d are stored", key->len,
                     SERIES_MAX_KEY);
        return -1;
    }
    *h = PyLong_AsUnsignedLongLongMask(args[1]);
    if (*h == (uint64_t)-1 && PyErr_Occurred()) {
        PyBuffer_Release(key);
        return -1;
    }
    return 0;
}

/* The entry's record as Python sees it: (offset, kind, cell, slot, lifetime, pid, flags). */
static PyObject *entry_tuple(SeriesMap *s, int64_t at) {
    return Py_BuildValue("(LILLLLL)", (long long)at, *(uint32_t *)(ENTRY(s, at) + SERIES_ENTRY_KIND_OFF),
                         (long long)LOAD(EW(s, at, SERIES_ENTRY_CELL)), (long long)LOAD(EW(s, at, SERIES_ENTRY_SLOT)),
                         (long long)LOAD(EW(s, at, SERIES_ENTRY_LIFETIME)),
                         (long long)LOAD(EW(s, at, SERIES_ENTRY_PID)), (long long)LOAD(EW(s, at, SERIES_ENTRY_FLAGS)));
}

/* find(key, hash, /) -> the entry's record, or None. Lock-free. */
static PyObject *sm_find(SeriesMap *s, PyObject *const *args, Py_ssize_t n) {
    Py_buffer key;
    uint64_t h;
    if (!positional("find", n, 2) || parse_key(args, &key, &h) < 0) return NULL;
    if (series_enter(s) < 0) {
        PyBuffer_Release(&key);
        return NULL;
    }
    int64_t at = series_find(s, key.buf, key.len, h);
    PyObject *r = at == -2 ? NULL : at == -1 ? Py_NewRef(Py_None) : entry_tuple(s, at);
    PyBuffer_Release(&key);
    series_leave(s);
    return r;
}

/* insert(key, hash, kind, lifetime, pid, /) -> (record, inserted): the entry of `key`, made if
 * missing. A SERIES_LIFETIME entry is this process's lifetime's: slot and lifetime claimed. */
static PyObject *sm_insert(SeriesMap *s, PyObject *const *args, Py_ssize_t n) {
    Py_buffer key;
    uint64_t h;
    if (!positional("insert", n, 5) || parse_key(args, &key, &h) < 0) return NULL;
    int kind = (int)PyLong_AsLong(args[2]);
    long long lifetime = PyLong_AsLongLong(args[3]), pid = PyLong_AsLongLong(args[4]);
    PyObject *r = NULL;
    if (PyErr_Occurred() || kind < SERIES_SHARED || kind > SERIES_META) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "insert: no such kind");
        PyBuffer_Release(&key);
        return NULL;
    }
    if (series_enter(s) < 0) {
        PyBuffer_Release(&key);
        return NULL;
    }
    int64_t slot = kind == SERIES_LIFETIME ? s->slot : -1;
    if (series_lock(s) == 0) {
        if (!s->closed) {
            int64_t at = series_find(s, key.buf, key.len, h);
            int made = at == -1;
            if (made) at = series_append(s, key.buf, key.len, h, kind, slot, lifetime, pid);
            if (at >= 0) r = Py_BuildValue("(NO)", entry_tuple(s, at), made ? Py_True : Py_False);
        } else {
            PyErr_Format(s->st->closed, "metrics segment %R was closed during the call", s->name);
        }
        series_unlock(s);
    }
    PyBuffer_Release(&key);
    series_leave(s);
    return r;
}

/* lifetime(pid, /) -> (slot, lifetime) of this process, claimed at its first call (after a
 * fork too: the child holds nothing). */
static PyObject *sm_lifetime(SeriesMap *s, PyObject *arg) {
    long long owner = PyLong_AsLongLong(arg);
    if (owner == -1 && PyErr_Occurred()) return NULL;
    if (series_enter(s) < 0) return NULL;
    int rc = 0;
    if (s->slot < 0 || s->slot_gen != fork_gen) {
        s->slot = -1;
        rc = series_lock(s);
        if (rc == 0) {
            if (s->closed) {
                PyErr_Format(s->st->closed, "metrics segment %R was closed during the call", s->name);
                rc = -1;
            } else {
                rc = series_claim(s, owner);
            }
            series_unlock(s);
        }
    }
    PyObject *r = rc < 0 ? NULL : Py_BuildValue("(LL)", (long long)s->slot, (long long)s->lifetime);
    series_leave(s);
    return r;
}

/* entries(start, /) -> (end, [(record, key), ...]): the entries from byte `start` to
 * entry_top, for the scrape's identity cache. */
static PyObject *sm_entries(SeriesMap *s, PyObject *arg) {
    long long start = PyLong_AsLongLong(arg);
    int64_t top;
    if (start == -1 && PyErr_Occurred()) return NULL;
    if (series_enter(s) < 0) return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL || series_entry_top(s, &top) < 0) goto fail;
    if (start < 0 || start > top) {
        PyErr_SetString(PyExc_ValueError, "entries: start is not an entry's offset");
        goto fail;
    }
    for (int64_t at = start; at < top; at += series_entry_bytes(s, at)) {
        if (!series_entry_ok(s, at, top)) {
            series_corrupt(s, "an entry below entry_top is junk");
            goto fail;
        }
        PyObject *rec = entry_tuple(s, at), *key = NULL, *item = NULL;
        if (rec != NULL)
            key = PyBytes_FromStringAndSize(ENTRY(s, at) + SERIES_ENTRY_BYTES,
                                            *(uint32_t *)(ENTRY(s, at) + SERIES_ENTRY_KEY_LEN_OFF));
        if (key != NULL) item = Py_BuildValue("(OO)", rec, key);
        Py_XDECREF(rec);
        Py_XDECREF(key);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
    }
    series_leave(s);
    return Py_BuildValue("(LN)", (long long)top, out);
fail:
    Py_XDECREF(out);
    series_leave(s);
    return NULL;
}

/* read(offsets, /) -> [(value, stamp, live, pid), ...] for the entry at each offset: one pass,
 * the GIL held, no lock taken. The entry's words are read now (an adopted entry changes its
 * lifetime and pid). `live`: a dropped entry is not; a shared cell always is; a lifetime's
 * cell is while that lifetime runs. */
static PyObject *sm_read(SeriesMap *s, PyObject *offsets) {
    PyObject *seq = PySequence_Fast(offsets, "read: a sequence of entry offsets");
    if (seq == NULL) return NULL;
    if (series_enter(s) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    int64_t top;
    if (out == NULL || series_entry_top(s, &top) < 0) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long at = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        double v = 0, t = 0;
        if (at == -1 && PyErr_Occurred()) goto fail;
        int64_t cell = series_entry_ok(s, at, top) ? LOAD(EW(s, at, SERIES_ENTRY_CELL)) : -1;
        if (cell < 0) {
            series_corrupt(s, "read: no such entry, or an entry without a cell");
            goto fail;
        }
        int64_t slot = LOAD(EW(s, at, SERIES_ENTRY_SLOT)), lt = LOAD(EW(s, at, SERIES_ENTRY_LIFETIME));
        int64_t pid = LOAD(EW(s, at, SERIES_ENTRY_PID));
        int live = !(LOAD(EW(s, at, SERIES_ENTRY_FLAGS)) & SERIES_DROPPED) && (slot < 0 || series_alive(s, slot, lt));
        series_read_cell(CELL(s, cell), &v, &t);
        PyObject *item = Py_BuildValue("(ddOL)", v, t, live ? Py_True : Py_False, (long long)pid);
        if (item == NULL) goto fail;
        PyList_SET_ITEM(out, i, item);
    }
    Py_DECREF(seq);
    series_leave(s);
    return out;
fail:
    Py_XDECREF(out);
    Py_DECREF(seq);
    series_leave(s);
    return NULL;
}

/* adopt(offset, lifetime, pid, /): a live-mode gauge's entry of this process's slot, left by a
 * dead lifetime of the slot, taken over by this lifetime (so that recycled workers cost no new
 * entries). Section "series_adopt": only the slot's owner writes it; the cell is zeroed under
 * its sequence word, then flags and pid, then the lifetime (which makes it live to a scrape):
 * a tear leaves it the dead lifetime's, skipped. */
static PyObject *sm_adopt(SeriesMap *s, PyObject *const *args, Py_ssize_t n) {
    if (!positional("adopt", n, 3)) return NULL;
    long long at = PyLong_AsLongLong(args[0]), lt = PyLong_AsLongLong(args[1]), pid = PyLong_AsLongLong(args[2]);
    int64_t top;
    if (PyErr_Occurred() || series_enter(s) < 0) return NULL;
    int ok = series_entry_top(s, &top) == 0;
    int64_t cell = ok && series_entry_ok(s, at, top) ? LOAD(EW(s, at, SERIES_ENTRY_CELL)) : -1;
    if (ok && (cell < 0 || s->slot < 0 || s->slot_gen != fork_gen || lt != s->lifetime ||
               LOAD(EW(s, at, SERIES_ENTRY_SLOT)) != s->slot ||
               *(uint32_t *)(ENTRY(s, at) + SERIES_ENTRY_KIND_OFF) != SERIES_LIFETIME))
        ok = series_corrupt(s, "adopt: not a lifetime entry of this process's slot") == 0;
    if (ok) {
        int64_t *c = CELL(s, cell), q = LOAD(c + SERIES_CELL_SEQ);
        SECTION("series_adopt");
        STORE(c + SERIES_CELL_SEQ, q | 1);
        STORE(c + SERIES_CELL_VALUE, 0);
        STORE(c + SERIES_CELL_STAMP, 0);
        STORE(c + SERIES_CELL_SEQ, (q | 1) + 1);
        STORE(EW(s, at, SERIES_ENTRY_FLAGS), 0);
        STORE(EW(s, at, SERIES_ENTRY_PID), (int64_t)pid);
        STORE(EW(s, at, SERIES_ENTRY_LIFETIME), (int64_t)lt);
        END_SECTION();
    }
    series_leave(s);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

/* drop(offset, /): mark an entry as removed (mark_process_dead); its cell is no longer read. */
static PyObject *sm_drop(SeriesMap *s, PyObject *arg) {
    long long at = PyLong_AsLongLong(arg);
    int64_t top;
    if (at == -1 && PyErr_Occurred()) return NULL;
    if (series_enter(s) < 0) return NULL;
    int ok = series_entry_top(s, &top) == 0;
    if (ok && !series_entry_ok(s, at, top)) ok = series_corrupt(s, "drop: no such entry") == 0;
    if (ok) __atomic_or_fetch(EW(s, at, SERIES_ENTRY_FLAGS), SERIES_DROPPED, __ATOMIC_RELEASE);
    series_leave(s);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

static PyObject *sm_close(SeriesMap *s, PyObject *Py_UNUSED(x)) {
    s->closed = 1;
    series_release(s);
    Py_RETURN_NONE;
}

/* ---- SeriesMap: the type ----------------------------------------------------------------------- */

static int header_word(SeriesMap *s, int word, int64_t *out) {
    uint64_t v = *(uint64_t *)HDR(s, word);
    *out = v > (uint64_t)INT64_MAX ? -1 : (int64_t)v;
    return *out >= 0;
}

/* The geometry, from the header Python wrote (and validated): every region in the mapping. */
static int read_geometry(SeriesMap *s) {
    if (s->map_bytes < SERIES_HDR_BYTES || *(uint32_t *)(s->base + SERIES_HDR_ROLE_OFF) != ROLE_SERIES)
        return series_corrupt(s, "not a series segment");
    int ok = header_word(s, SERIES_HDR_MAX_SERIES, &s->max_series) &&
             header_word(s, SERIES_HDR_INDEX_SLOTS, &s->index_slots) && header_word(s, SERIES_HDR_N_SLOTS, &s->n_slots) &&
             header_word(s, SERIES_HDR_LOCKS_AT, &s->locks_at) && header_word(s, SERIES_HDR_SLOTS_AT, &s->slots_at) &&
             header_word(s, SERIES_HDR_INDEX_AT, &s->index_at) &&
             header_word(s, SERIES_HDR_ENTRIES_AT, &s->entries_at) &&
             header_word(s, SERIES_HDR_ENTRIES_BYTES, &s->entries_bytes) &&
             header_word(s, SERIES_HDR_CELLS_AT, &s->cells_at);
    int64_t len = s->map_bytes;
    if (!ok || s->max_series < 1 || s->max_series > SERIES_MAX || s->index_slots < 2 * s->max_series ||
        s->index_slots < SERIES_INDEX_MIN || (s->index_slots & (s->index_slots - 1)) || s->n_slots < 1 || s->n_slots > MAX_STRIPES ||
        s->entries_bytes > ((int64_t)UINT32_MAX - 1) * WORD_BYTES || !fits(s->locks_at, 1, LOCK_BYTES, len) ||
        !fits(s->slots_at, s->n_slots, STRIPE_ENTRY_BYTES, len) || !fits(s->index_at, 2 * s->index_slots - SERIES_INDEX_MIN, WORD_BYTES, len) ||
        !fits(s->entries_at, 1, s->entries_bytes, len) || !fits(s->cells_at, s->max_series, SERIES_CELL_BYTES, len) ||
        (s->locks_at | s->slots_at | s->index_at | s->entries_at | s->cells_at) % WORD_BYTES)
        return series_corrupt(s, "its header's geometry does not fit the mapping");
    for (s->index_levels = 1; SERIES_INDEX_MIN << (s->index_levels - 1) < s->index_slots;) s->index_levels++;
    return 0;
}

static int sm_init(SeriesMap *s, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"", "name", "timeout_ns", NULL};
    PyObject *buffer, *name;
    long long timeout_ns;
    if (s->has_buf) {
        PyErr_SetString(PyExc_TypeError, "SeriesMap is initialised once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O$UL:SeriesMap", kwlist, &buffer, &name, &timeout_ns)) return -1;
    if (timeout_ns < 1) {
        PyErr_SetString(PyExc_ValueError, "timeout_ns must be positive");
        return -1;
    }
    s->st = PyType_GetModuleState(Py_TYPE(s));
    if (PyObject_GetBuffer(buffer, &s->buf, PyBUF_WRITABLE) < 0) return -1;
    s->has_buf = 1;
    s->base = s->buf.buf;
    s->map_bytes = s->buf.len;
    s->name = Py_NewRef(name);
    s->timeout_ns = timeout_ns;
    s->slot = -1;
    if (read_geometry(s) < 0) {
        s->has_buf = 0;
        PyBuffer_Release(&s->buf);
        return -1;
    }
    return 0;
}

static void sm_dealloc(SeriesMap *s) {
    PyTypeObject *tp = Py_TYPE(s);
    PyObject_GC_UnTrack(s);
    s->closed = 1;
    s->busy = 0;
    series_release(s);
    Py_CLEAR(s->name);
    tp->tp_free((PyObject *)s);
    Py_DECREF(tp);
}

static int sm_traverse(SeriesMap *s, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(s));
    return 0;
}

static PyObject *sm_value(SeriesMap *s, PyObject *const *args, Py_ssize_t n);

static PyMethodDef sm_methods[] = {
    METHOD_POS(find, sm_find, "key, hash",
        "The entry of identity key: (offset, kind, cell, slot, lifetime, pid, flags), or None."),
    METHOD_POS(insert, sm_insert, "key, hash, kind, lifetime, pid",
        "(entry, made): the entry of key, appended if missing."),
    METHOD_O(lifetime, sm_lifetime, "pid", "(slot, lifetime) of this process, claimed at its first call."),
    METHOD_O(entries, sm_entries, "start", "(end, [(entry, key), ...]): the entries from byte start."),
    METHOD_O(read, sm_read, "offsets", "[(value, stamp, live, pid)] of the entry at each offset."),
    METHOD_POS(adopt, sm_adopt, "offset, lifetime, pid", "A dead lifetime's entry of our slot, made ours."),
    METHOD_O(drop, sm_drop, "offset", "Mark an entry removed."),
    METHOD_POS(value, sm_value, "cell, rebind, pid_fn, pid", "A SeriesValue on a cell; rebind=None: a shared cell."),
    METHOD_NOARGS(close, sm_close, "Give the slot back; unmap once idle."),
    {NULL},
};

static PyObject *sm_closed(SeriesMap *s, void *Py_UNUSED(x)) { return PyBool_FromLong(s->closed); }

static PyGetSetDef sm_getset[] = {
    {"closed", (getter)sm_closed, NULL, "close() ran", NULL},
    {NULL},
};

static PyType_Slot sm_slots[] = {
    {Py_tp_doc, "SeriesMap(buffer, /, *, name, timeout_ns)\n--\n\nA mapped series segment (role \"series\")."},
    {Py_tp_init, sm_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, sm_dealloc},
    {Py_tp_traverse, sm_traverse},
    {Py_tp_methods, sm_methods},
    {Py_tp_getset, sm_getset},
    {0, NULL},
};

static PyType_Spec sm_spec = {
    .name = "shmwin._core.SeriesMap",
    .basicsize = sizeof(SeriesMap),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = sm_slots,
};

/* value(cell, rebind, pid_fn, pid, /): a SeriesValue on one of our cells (seriesval.c). */
static PyObject *sm_value(SeriesMap *s, PyObject *const *args, Py_ssize_t n) {
    if (!positional("value", n, 4)) return NULL;
    long long cell = PyLong_AsLongLong(args[0]), pid = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    if (s->closed || cell < 0 || cell >= s->max_series) {
        PyErr_SetString(PyExc_ValueError, "value: no such cell");
        return NULL;
    }
    return series_value_new(s, cell, args[1], args[2], pid);
}

int series_add_types(PyObject *m, ModState *st) {
    st->series_map_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &sm_spec, NULL);
    if (st->series_map_type == NULL || PyModule_AddType(m, st->series_map_type) < 0) return -1;
    st->series_value_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &series_value_spec, NULL);
    if (st->series_value_type == NULL || PyModule_AddType(m, st->series_value_type) < 0) return -1;
    return 0;
}
