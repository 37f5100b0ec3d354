/* coretype.c -- the Core type: one mapped segment as this process sees it.
 *
 * Core(buffer, /, *, name, timeout_ns, clock=None, on_full=0, claim=None, fd=-1) takes a
 * mapping whose header Python has validated (layout.unpack_header), reads the geometry from
 * that header itself (ShmwinHeader, generated from layout_words.py) and derives the rest --
 * slot words, ring offsets, rows, index levels, the idle time, the empty row -- as
 * layout.Layout.plan does (tests/unit/test_layout.py compares the two over many geometries).
 * Then it checks that every offset lies in the mapping and every ring in its row: junk in
 * a header that changed after Python read it is a ValueError, never a wild write.
 * A heap type (PEP 630): each Core holds its type, which holds the module and its state.
 */
#include "core.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- close safety: every entry point raises once close() ran ----------------------------- *
 * The mapping is kept (our buffer export) until no call of any thread is inside. */

void release_map(Core *c) {
    if (c->busy == 0 && c->closed) cache_drop(c);  /* its keys go once no call can hold an entry */
    if (c->busy == 0 && c->has_buf) give_stripe(c);  /* its robust-list links are in the map */
    if (c->busy == 0 && c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    if (c->has_buf && c->busy == 0) {
        reserver_forget(c);  /* the reserver may be populating our mapping */
        c->has_buf = 0;
        c->base = NULL;
        PyBuffer_Release(&c->buf);
    }
}

int closed_error(Core *c) {
    PyErr_Format(c->st->closed, "window %R is closed", c->name ? c->name : Py_None);
    return -1;
}

/* ---- the layout, from the header ------------------------------------------------------------ */

/* The words of a ring within a row: a compact ring's header and counts (padded to a word), or
 * its slots. r->n was checked (1..MAX_BUCKETS). */
static int64_t ring_words(const Core *c, const Ring *r) {
    if (r->cw) return LIMITER_RING_WORDS + (r->n * r->cw + WORD_BYTES - 1) / WORD_BYTES;
    return (c->head_slots + r->n) * c->slot_words;
}

/* Does [off, off + count x size) lie within [0, limit)? Checked: junk never wraps around. */
int fits(int64_t off, int64_t count, int64_t size, int64_t limit) {
    int64_t bytes, end;
    return off >= 0 && count >= 0 && size >= 0 && !__builtin_mul_overflow(count, size, &bytes) &&
           !__builtin_add_overflow(off, bytes, &end) && end <= limit;
}

/* Every offset lies in the mapping, every ring in its row: no section can reach outside them. */
static int layout_fits(Core *c) {
    int64_t len = c->map_bytes;
    if (!fits(c->rows_off, c->n_rows, c->row_bytes, len) || c->n_rows < 1 || c->n_fields < 1 ||
        c->slot_words <= c->n_fields || c->idle_ns < 1 ||
        !fits(c->locks_off, c->n_locks, LOCK_BYTES, len) ||
        c->n_locks < (c->keyed ? FIRST_KEY_LOCK + 1 : FIRST_KEY_LOCK) ||
        c->rings_off < 0 || !fits(c->rings_off, 1, c->empty_bytes, c->row_bytes))
        return 0;
    for (int i = 0; i < c->n_rings && c->state_words == 0; i++)  /* state rows: read_rings checked */
        if (c->rings[i].hdr < 0 || c->rings[i].hdr > c->row_bytes / WORD_BYTES ||
            !fits(c->rings[i].hdr * WORD_BYTES, 1, ring_words(c, &c->rings[i]) * WORD_BYTES, c->row_bytes))
            return 0;
    if (!c->keyed) return fits(c->stripes_off, c->n_rows, STRIPE_ENTRY_BYTES, len);
    if (c->n_stripes > 0 && !fits(c->stripes_off, c->n_stripes + 1, STRIPE_ENTRY_BYTES, c->keys_off)) return 0;
    if (c->names_off != -1 && (c->names_off < c->stripes_off || c->names_off % WORD_BYTES != 0)) return 0;
    if (c->n_chunks != 0 &&  /* the chunk heap: after the rows, in the mapping, its count a checked word's */
        (c->n_chunks < 0 || c->n_chunks > UINT32_MAX ||
         c->chunks_off < c->rows_off + c->n_rows * c->row_bytes || !fits(c->chunks_off, c->n_chunks, CHUNK_BYTES, len)))
        return 0;
    return c->index_levels >= 1 && c->index_levels <= 40 && c->key_slots >= 1 && c->key_slots <= (1 << 20) &&
           (c->key_slots & (c->key_slots - 1)) == 0 && c->rings_off >= KEY_ROW_KEY_OFF + c->key_bytes &&
           c->n_rows <= UINT32_MAX && fits(c->keys_off, 2 * ((INT64_C(1) << c->index_levels) - 1),
                                           c->key_slots * KEY_ENTRY_BYTES, c->rows_off);
}

static int bad_header(const char *what) {
    PyErr_Format(PyExc_ValueError, "Core: the segment's header %s", what);
    return -1;
}

/* An offset word of the header as a signed size: -1 (which no check lets through) if junk. */
static int64_t offset_of(uint64_t word) { return word > (uint64_t)INT64_MAX ? -1 : (int64_t)word; }

/* The rings of the header's ring table, placed one after another in a row (after the key
 * header of a keyed row), and what they decide: the idle time and the lowest limit. */
static int read_rings(Core *c, const ShmwinHeader *h) {
    int64_t words = c->keyed ? (KEY_ROW_KEY_OFF + c->key_bytes) / WORD_BYTES : 0;
    c->min_limit = INT64_MAX;
    c->idle_ns = 0;
    for (int i = 0; i < c->n_rings; i++) {
        const ShmwinRingEntry *e = &h->ring_table[i];
        Ring *r = &c->rings[i];
        r->log = (e->flags & RING_LOG) != 0;
        r->n = e->n_buckets;
        r->bucket_ns = e->bucket_ns;
        r->limit = e->limit;
        if ((e->flags & ~(uint32_t)RING_LOG) || r->n < 1 || r->n > MAX_BUCKETS || r->bucket_ns < 1 ||
            r->limit < 0 || (r->log && ((!c->limiter && !c->hooks->log_rings) || r->n > MAX_LOG_ENTRIES)))
            return bad_header("holds an impossible ring");
        /* a limiter's bucket ring is compact, its counts as wide as its limit needs
         * (layout_words.ring_count_bytes: a count never exceeds its ring's limit) */
        r->cw = !c->limiter || r->log ? 0 : r->limit <= COUNT32_MAX ? COUNT32_BYTES : WORD_BYTES;
        r->hdr = words;
        words += ring_words(c, r);
        if (r->limit < c->min_limit) c->min_limit = r->limit;
        int64_t span = r->log ? r->bucket_ns : span_ns(r);  /* after this long, every bucket is stale */
        if (span > c->idle_ns) c->idle_ns = span;
    }
    c->rings_off = c->rings[0].hdr * WORD_BYTES;
    c->empty_bytes = c->row_bytes - c->rings_off;
    if (c->state_words > 0) words = c->rings[0].hdr + c->state_words;  /* no ring in the row: its state */
    if (c->empty_bytes < 0 || words * WORD_BYTES > c->row_bytes) return bad_header("has rows too small for its rings");
    return 0;
}

/* The geometry: read from a private copy of the header's immutable part (bytes up to
 * CRC_END; the key table's words after it change under other processes). */
static int read_header(Core *c) {
    ShmwinHeader h;
    _Static_assert(offsetof(ShmwinHeader, rows_in_use) == CRC_END, "the immutable part ends at CRC_END");
    if (c->map_bytes < HEADER_BYTES) return bad_header("is missing: the mapping is too small");
    memset(&h, 0, sizeof h);
    memcpy(&h, c->base, CRC_END);
    if (h.version != FORMAT_VERSION || h.header_bytes != HEADER_BYTES || h.n_rings < 1 ||
        h.n_rings > MAX_RINGS || h.n_fields < 1 || h.n_fields > MAX_FIELDS || h.kind > KIND_LIMITER ||
        h.dtype > DTYPE_FLOAT64 || h.mode > MODE_LOCKED || h.n_locks > FIRST_KEY_LOCK + MAX_KEY_LOCKS ||
        h.capacity > MAX_CAPACITY || h.n_stripes > MAX_STRIPES)
        return bad_header("names an unknown version, kind, dtype, mode or count");
    c->limiter = h.kind == KIND_LIMITER;
    c->floats = h.dtype == DTYPE_FLOAT64;
    c->striped = h.mode == MODE_STRIPED;
    c->keyed = h.capacity > 0;
    c->role = (int)(h.role & 0xff) == (int)h.role ? (int)h.role : -1;  /* the tools' word (module.c picked the type by it) */
    if (c->hooks->keyed_role != 0 && (c->role != c->hooks->keyed_role || !c->keyed || c->limiter))
        return not_role(c);  /* before its geometry is read: another role's segment is refused as that */
    /* a keyed window's rows may hold its role's state instead of rings (its hooks say how much) */
    c->state_words = c->keyed && !c->limiter ? c->hooks->state_bytes / WORD_BYTES : 0;
    c->key_bytes = MAX_STORED_KEY;  /* layout_words.key_header_bytes (a moving log's header hook: a digest's) */
    c->n_stripes = c->keyed ? (int64_t)h.n_stripes : 0;  /* a keyed segment's: a concurrency's processes */
    c->n_fields = (int)h.n_fields;
    c->slot_words = SLOT_VALUES + c->n_fields;
    c->head_slots = c->limiter ? LIMITER_HEAD_SLOTS : WINDOW_HEAD_SLOTS;
    c->n_rings = (int)h.n_rings;
    c->n_locks = (int)h.n_locks;
    c->n_key_locks = c->keyed ? c->n_locks - FIRST_KEY_LOCK : 0;
    c->locks_off = offset_of(h.locks_off);
    c->stripes_off = offset_of(h.stripes_off);
    c->keys_off = offset_of(h.keys_off);
    c->names_off = -1;  /* a moving log's header hook places its key names */
    c->rows_off = offset_of(h.rows_off);
    c->row_bytes = offset_of(h.row_bytes);
    c->chunks_off = offset_of(h.chunks_off);
    c->n_chunks = offset_of(h.n_chunks);
    if (!c->hooks->chunk_heap && (h.chunks_off != 0 || h.n_chunks != 0))
        return bad_header("holds a chunk heap outside a moving log");
    c->n_rows = c->keyed ? (int64_t)h.capacity : (int64_t)h.n_stripes + 1;
    c->key_slots = h.key_slots;
    c->index_levels = 0;
    if (c->keyed && (c->key_slots < 1 || c->key_slots > (1 << 20) || (c->key_slots & (c->key_slots - 1))))
        return bad_header("holds an impossible key table");
    if (c->keyed)  /* the last level holds the capacity at a load of at most 1/4 */
        for (c->index_levels = 1; (c->key_slots << (c->index_levels - 1)) < 4 * c->n_rows;) c->index_levels++;
    memcpy(&c->hk0, h.hash_key, 8);
    memcpy(&c->hk1, h.hash_key + 8, 8);
    if ((c->hooks->header != NULL && c->hooks->header(c, &h) < 0) || read_rings(c, &h) < 0) return -1;
    if (!layout_fits(c)) {
        PyErr_SetString(PyExc_ValueError, "Core: the layout does not fit the mapping");
        return -1;
    }
    c->fields = PyDict_New();  /* {name: its word in a slot} */
    for (int i = 0; c->fields != NULL && i < c->n_fields; i++) {
        const char *raw = (const char *)h.field_names + i * FIELD_NAME_BYTES;
        PyObject *name = PyUnicode_DecodeUTF8(raw, (Py_ssize_t)strnlen(raw, FIELD_NAME_BYTES), "strict");
        PyObject *word = name ? PyLong_FromLong(SLOT_VALUES + i) : NULL;
        if (word == NULL || PyDict_SetItem(c->fields, name, word) < 0) Py_CLEAR(c->fields);
        Py_XDECREF(name);
        Py_XDECREF(word);
    }
    return c->fields == NULL ? -1 : 0;
}

/* A row's rings as they are when empty (layout.empty_rings): every slot's epoch and every
 * compact ring's head, zeroed and tail words EMPTY_EPOCH, every other word 0. */
static int make_empty_row(Core *c) {
    int64_t words = c->empty_bytes / WORD_BYTES;
    c->empty = PyMem_Calloc((size_t)(c->empty_bytes > 0 ? c->empty_bytes : 1), 1);
    if (c->empty == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int64_t *w = (int64_t *)c->empty;
    if (c->state_words > 0) {  /* a counter role's state: its first word EMPTY ("none"), then 0s;
                                  a moving log's: all 0s (no chain, entries of no hits) */
        if (words > 0 && !c->hooks->state_zeroed) w[0] = EMPTY_EPOCH;
        return 0;
    }
    for (int i = 0; i < c->n_rings; i++) {  /* layout_fits: every ring lies within the row */
        const Ring *r = &c->rings[i];
        int64_t *at = w + (r->hdr - c->rings[0].hdr);
        if (r->cw) {
            at[LIMITER_RING_HEAD] = at[LIMITER_RING_ZEROED] = at[LIMITER_RING_TAIL] = EMPTY_EPOCH;
            continue;
        }
        /* a log ring's header (LOG_HDR_*) is all 0s: an empty run, no dead entry */
        for (int64_t s = r->log ? c->head_slots : 0; s < c->head_slots + r->n; s++) at[s * c->slot_words + SLOT_EPOCH] = EMPTY_EPOCH;
    }
    return 0;
}

/* ---- the type --------------------------------------------------------------------------------- */

/* A Core that was never initialised raises WindowClosedError from every method. */
static PyObject *Core_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    Core *c = (Core *)PyType_GenericNew(type, args, kw);
    if (c == NULL) return NULL;
    c->st = PyType_GetModuleState(type);
    c->closed = 1;
    c->fd = -1;
    c->cache_mask = -1;
    c->hooks = &plain_hooks;
    if (c->st == NULL) Py_CLEAR(c);
    return (PyObject *)c;
}

/* Every type's init: the base's (plain rows of rings) and each role's, with its hooks. */
int core_init(Core *c, PyObject *args, PyObject *kw, const RoleHooks *hooks) {
    static char *kwlist[] = {"", "name", "timeout_ns", "clock", "on_full", "claim", "fd", NULL};
    PyObject *buffer, *name = NULL, *clock = Py_None, *claim = Py_None;
    long long timeout_ns = -1;
    int on_full = 0, fd = -1;
    if (c->has_buf || c->base || c->name) {
        PyErr_SetString(PyExc_RuntimeError, "Core is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$ULOiOi:Core", kwlist, &buffer, &name, &timeout_ns, &clock,
                                     &on_full, &claim, &fd))
        return -1;
    if (name == NULL || timeout_ns < 0) {
        PyErr_SetString(PyExc_TypeError, "Core() needs name= and timeout_ns= (a lock timeout, >= 0)");
        return -1;
    }
    if (on_full < ON_FULL_RAISE || on_full > ON_FULL_DENY) {
        PyErr_SetString(PyExc_ValueError, "Core: on_full is 0 (raise), 1 (allow) or 2 (deny)");
        return -1;
    }
    c->name = Py_NewRef(name);
    c->hooks = hooks;
    if (PyObject_GetBuffer(buffer, &c->buf, PyBUF_WRITABLE) < 0) return -1;
    c->has_buf = 1;
    c->base = c->buf.buf;
    c->map_bytes = c->buf.len;
    if (read_header(c) < 0 || make_empty_row(c) < 0) return -1;
    if (hooks->check != NULL && hooks->check(c) < 0) return -1;  /* the role's: is it one? */
    if (c->striped && claim == Py_None) {
        PyErr_SetString(PyExc_ValueError, "Core: a striped window needs claim=, its stripe callback");
        return -1;
    }
    if (c->keyed) {  /* our own descriptor (we close it), never an exec's: the table grows through it */
        if (fd < 0 || (c->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
            c->fd = -1;
            PyErr_SetString(PyExc_ValueError, "Core: a keyed window needs the segment's file descriptor");
            return -1;
        }
    }
    c->timeout_ns = timeout_ns > NS << 31 ? NS << 31 : timeout_ns;  /* 68 years: now + it never overflows */
    c->on_full = on_full;
    c->clock = clock == Py_None ? NULL : Py_NewRef(clock);
    c->claim = Py_NewRef(claim);
    c->closed = 0;
    return 0;
}

/* The role's check found the segment is not one of its. */
int not_role(Core *c) {
    PyErr_Format(PyExc_ValueError, "window %R is not a %s segment", c->name, c->hooks->role);
    return -1;
}

/* The base type's own segments: rows of rings, nothing asked of a role. */
const RoleHooks plain_hooks = {.role = "plain"};

static int Core_init(Core *c, PyObject *args, PyObject *kw) { return core_init(c, args, kw, &plain_hooks); }

/* DO(ref) for each object a Core holds that may close a cycle (its name, a str, goes at dealloc) */
#define CORE_REFS(c, DO) do { DO(c->clock); DO(c->claim); DO(c->fields); DO(c->on_moved); } while (0)

int core_traverse(Core *c, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(c));
    CORE_REFS(c, Py_VISIT);
    return 0;
}

int core_clear(Core *c) {
    CORE_REFS(c, Py_CLEAR);
    return 0;
}

static void Core_dealloc(Core *c) {
    PyObject_GC_UnTrack(c);
    if (!c->closed && c->busy == 0) {  /* freed unclosed: its stripe goes back as close() gives it */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);  /* a dealloc may run while an exception is set */
        drop_stripe(c);
        PyErr_Clear();  /* the owner word's lock did not come: the row is free all the same */
        PyErr_Restore(type, value, tb);
    }
    c->closed = 1;
    c->busy = 0;
    release_map(c);
    Py_TYPE(c)->tp_clear((PyObject *)c);  /* its type's: a role's own object fields too (DeciderObject) */
    Py_CLEAR(c->name);
    cache_drop(c);
    PyMem_Free(c->empty);
    if (c->fd >= 0) close(c->fd);
    free_instance((PyObject *)c);
}

static PyObject *Core_get_closed(Core *c, void *Py_UNUSED(x)) { return PyBool_FromLong(c->closed); }
static PyObject *Core_get_cached(Core *c, void *Py_UNUSED(x)) { return PyLong_FromLongLong(c->cache_used); }

/* What this Core read from the header and derived from it, as layout.Layout names it. */
static PyObject *Core_get_layout(Core *c, void *Py_UNUSED(x)) {
    if (c->fields == NULL) return closed_error(c), NULL;
    PyObject *rings = PyTuple_New(c->n_rings);
    for (int i = 0; rings != NULL && i < c->n_rings; i++) {
        const Ring *r = &c->rings[i];
        PyObject *t = Py_BuildValue("(LLLLOi)", (long long)r->hdr, (long long)r->n, (long long)r->bucket_ns,
                                    (long long)r->limit, r->log ? Py_True : Py_False, r->cw);
        if (t == NULL) Py_CLEAR(rings);
        else PyTuple_SET_ITEM(rings, i, t);
    }
    if (rings == NULL) return NULL;
    return Py_BuildValue(
        "{sOsOsOsOsisisisNsisisLsLsLsLsLsLsLsLsLsLsy#sO}", "limiter", c->limiter ? Py_True : Py_False,
        "floats", c->floats ? Py_True : Py_False, "striped", c->striped ? Py_True : Py_False,
        "keyed", c->keyed ? Py_True : Py_False, "n_fields", c->n_fields, "slot_words", c->slot_words,
        "head_slots", c->head_slots, "rings", rings, "n_locks", c->n_locks, "n_key_locks", c->n_key_locks,
        "locks_off", (long long)c->locks_off, "stripes_off", (long long)c->stripes_off,
        "keys_off", (long long)c->keys_off, "rows_off", (long long)c->rows_off,
        "row_bytes", (long long)c->row_bytes, "n_rows", (long long)c->n_rows,
        "key_slots", (long long)c->key_slots, "index_levels", (long long)c->index_levels,
        "rings_off", (long long)c->rings_off, "idle_ns", (long long)c->idle_ns,
        "empty_row", c->empty, (Py_ssize_t)c->empty_bytes, "fields", c->fields);
}

static PyGetSetDef Core_getset[] = {
    {"closed", (getter)Core_get_closed, NULL, "close() was called", NULL},
    {"cached", (getter)Core_get_cached, NULL, "how many keys this process's key cache holds", NULL},
    {"layout", (getter)Core_get_layout, NULL,
     "what this core read from the segment's header and derived from it (a dict, as layout.Layout)", NULL},
    {NULL},
};

static PyType_Slot core_slots[] = {
    {Py_tp_doc, "Core(buffer, /, *, name, timeout_ns, clock=None, on_full=0, claim=None, fd=-1)\n--\n\n"
                "Every write to one mapped shmwin segment, whose header layout.unpack_header validated."},
    {Py_tp_new, Core_new},
    {Py_tp_init, Core_init},
    GC_SLOTS(Core_dealloc, core_traverse, core_clear),
    {Py_tp_methods, core_methods},
    {Py_tp_getset, Core_getset},
    {0, NULL},
};

PyType_Spec core_spec = {
    .name = "shmwin._core.Core",
    .basicsize = sizeof(Core),
    .flags = ROLE_TYPE_FLAGS | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,  /* each role's type is a subtype (core.h's recipe) */
    .slots = core_slots,
};
