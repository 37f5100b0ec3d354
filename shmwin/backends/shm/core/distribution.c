/* distribution.c -- role "distribution": shmwin.Distribution's writes, DistributionCore, a
 * heap subtype of Core (core.h's recipe).
 *
 * A distribution is a locked window (unkeyed: row 0 under LOCK_SHARED_ROW; keyed: each key's
 * row under its row lock) whose bucket slots are DIST_SLOT (epoch, count, sum, min, max) and
 * whose row ends with every bucket's bins, ring after ring: sketch_bins u32 counts per bucket
 * (shmwin/geometry.py's Sketch draws the bins; format_rows.py's DIST_SLOT the slot). One record() is one call:
 * the value is checked, the clock read, the row locked, and every ring's current bucket takes
 * the value -- one write feeds every resolution.
 *
 * _core.open builds it for a distribution's segment: Core's init (the header read and checked
 * there), then its check hook reads the sketch from the header's sketch words and checks its
 * bins lie within a row. It has no add, add_and_total or add_batch (a window's type has them):
 * no plain add lands in these slots.
 *
 * Crash consistency (section "record", "record_keyed", "record_many"). Invariant between
 * stores: a bucket is recycled -- count, sum, min (+inf), max (-inf) and every bin word
 * stored -- before its new epoch is stamped, so whoever sees the new epoch sees none of the
 * old values; then one value goes to its bin, min, max, sum and count, in that order. A tear
 * leaves that one value in some of those words and not the others (the bins may count it
 * while count does not: readers rank over the bins' own total), never touches another value,
 * and leaves a half-recycled bucket under its old, stale epoch, which the next writer
 * recycles again. Nothing is derived, so EOWNERDEAD repairs nothing (locks.c's repair()
 * leaves a window's rows as they are).
 *
 * Junk safety: the sketch words are checked at init (a bin count the row holds, a finite
 * range and error); a bin index is clamped to the bins; a bin saturates at DIST_BIN_MAX.
 */
#include "core.h"

#include <math.h>

typedef struct {
    Core core;                     /* first: a Dist is a Core to every Core method */
    int64_t n_bins, n_log;         /* bins per bucket, and the log bins among them */
    int64_t bin_stride;            /* bytes of one bucket's bins (whole words) */
    int64_t ring_bins[MAX_RINGS];  /* byte offset, within a row, of ring i's first bucket's bins */
    double low, high, inv_log_gamma;
    /* this process's last bucket of each ring: epoch e_at[i] spans [lo_ns[i], lo_ns[i] + bucket)
     * and lies in slot slot_at[i] -- no division per record while the bucket lasts */
    int64_t lo_ns[MAX_RINGS], e_at[MAX_RINGS], slot_at[MAX_RINGS];
} Dist;

static inline double dbl(int64_t bits) {
    double v;
    memcpy(&v, &bits, 8);
    return v;
}

static inline int64_t bits_of(double v) {
    int64_t bits;
    memcpy(&bits, &v, 8);
    return bits;
}

/* The bin of a finite v >= 0: shmwin/geometry.py's Sketch.bin_of, by the same formula. */
static int64_t bin_of(const Dist *d, double v) {
    if (v == 0) return DIST_BIN_ZERO;
    if (v < d->low) return DIST_BIN_UNDER;
    if (v > d->high) return DIST_BIN_OVER;
    double i = floor(log(v / d->low) * d->inv_log_gamma);
    if (!(i >= 0)) i = 0;
    if (i > (double)(d->n_log - 1)) i = (double)(d->n_log - 1);
    return DIST_FIRST_LOG_BIN + (int64_t)i;
}

/* A value a distribution records: a finite number >= 0 (-0.0 is 0), else ValueError/TypeError. */
static int value_of(PyObject *obj, double *v) {
    *v = PyFloat_AsDouble(obj);
    if (*v == -1.0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "record() takes a number, not %R", obj);
        return -1;
    }
    if (!isfinite(*v) || *v < 0) {
        PyErr_Format(PyExc_ValueError, "a distribution records finite values >= 0, not %R", obj);
        return -1;
    }
    *v += 0.0;  /* -0.0 -> 0.0 */
    return 0;
}

/* ---- the section: one value into every ring's bucket -------------------------------------- */

/* Recycle a stale bucket for epoch e: its words and bins zeroed, then e stamped. Caller holds
 * the row's lock. */
static void recycle(const Dist *d, int64_t *s, int64_t *bins, int64_t e) {
    STORE(s + DIST_SLOT_COUNT, 0);
    STORE(s + DIST_SLOT_SUM, 0);
    STORE(s + DIST_SLOT_MIN, bits_of(INFINITY));
    STORE(s + DIST_SLOT_MAX, bits_of(-INFINITY));
    for (int64_t w = 0; w < d->bin_stride / WORD_BYTES; w++) STORE(bins + w, 0);
    STORE(s + DIST_SLOT_EPOCH, e);
}

/* The epoch of time t >= 0 in ring i, and its slot: from this process's last bucket while t
 * lies in it, else divided out (and remembered). */
static inline int64_t epoch_at(Dist *d, int i, int64_t t, int64_t *slot) {
    const Ring *r = &d->core.rings[i];
    if (!(t >= d->lo_ns[i] && t - d->lo_ns[i] < r->bucket_ns)) {
        d->e_at[i] = t / r->bucket_ns;
        d->lo_ns[i] = d->e_at[i] * r->bucket_ns;
        d->slot_at[i] = d->e_at[i] % r->n;
    }
    *slot = d->slot_at[i];
    return d->e_at[i];
}

/* The slot and bins of the bucket that takes a value stamped at_ns in ring i, or NULL when
 * the ring no longer spans it (a stamp older than the ring's span, as seen at now_ns); *e
 * its epoch. */
static int64_t *bucket_of(Dist *d, char *row, int i, int64_t now_ns, int64_t at_ns, int64_t **bins, int64_t *e) {
    const Core *c = &d->core;
    const Ring *r = &c->rings[i];
    int64_t slot;
    if (at_ns != now_ns && at_ns / r->bucket_ns <= now_ns / r->bucket_ns - r->n) return NULL;
    *e = epoch_at(d, i, at_ns, &slot);
    *bins = (int64_t *)(row + d->ring_bins[i] + slot * d->bin_stride);
    return RING(c, row, i) + (c->head_slots + slot) * c->slot_words;  /* BUCKET(), its slot known */
}

/* Would adding `more` to a live bucket's sum leave it finite, in every ring? (Checked before
 * any store: a refused record changes nothing.) Caller holds the row's lock. */
static int sums_fit(Dist *d, char *row, int64_t now_ns, double more, int stamped) {
    const Core *c = &d->core;
    if (stamped) {  /* stamps may reach any bucket: none may overflow (a stale one's sum too: rare) */
        for (int i = 0; i < c->n_rings; i++)
            for (int64_t slot = 0; slot < c->rings[i].n; slot++)
                if (!isfinite(dbl(LOAD(RING(c, row, i) + (c->head_slots + slot) * c->slot_words + DIST_SLOT_SUM)) +
                              more))
                    return 0;
        return 1;
    }
    for (int i = 0; i < d->core.n_rings; i++) {
        int64_t *bins, e, *s = bucket_of(d, row, i, now_ns, now_ns, &bins, &e);
        if (LOAD(s + DIST_SLOT_EPOCH) >= e &&
            !isfinite(dbl(LOAD(s + DIST_SLOT_SUM)) + more))
            return 0;
    }
    return 1;
}

/* Value v (bin b) stamped at_ns into every ring that spans it. Caller holds the row's lock;
 * the section's invariant is at the top of this file. */
static void record_row(Dist *d, char *row, int64_t now_ns, int64_t at_ns, double v, int64_t b) {
    const Core *c = &d->core;
    for (int i = 0; i < c->n_rings; i++) {
        int64_t *bins, e, *s = bucket_of(d, row, i, now_ns, at_ns, &bins, &e);
        if (s == NULL) continue;
        if (LOAD(s + DIST_SLOT_EPOCH) < e) recycle(d, s, bins, e);  /* a newer one is kept: a lagging clock */
        uint32_t *bin = (uint32_t *)bins + b, n = LOAD(bin);
        if (n < DIST_BIN_MAX) STORE(bin, n + 1);  /* saturates: documented in docs/distribution.md */
        if (v < dbl(LOAD(s + DIST_SLOT_MIN))) STORE(s + DIST_SLOT_MIN, bits_of(v));
        if (v > dbl(LOAD(s + DIST_SLOT_MAX))) STORE(s + DIST_SLOT_MAX, bits_of(v));
        STORE(s + DIST_SLOT_SUM, bits_of(dbl(LOAD(s + DIST_SLOT_SUM)) + v));
        STORE(s + DIST_SLOT_COUNT, LOAD(s + DIST_SLOT_COUNT) + 1);
    }
}

/* ---- the row: locked, written, given back ------------------------------------------------ */

typedef struct {
    const double *values;
    const int64_t *at;  /* NULL: every value now */
    Py_ssize_t n;
    double total;       /* the values' sum (finite: checked) */
} Batch;

static int sum_overflow(Core *c) {
    PyErr_Format(PyExc_OverflowError, "this record would overflow the sum of distribution %R", c->name);
    return -1;
}

/* The batch into `row`, whose lock the caller holds (section `section`). */
static int record_locked(Dist *d, char *row, int64_t now, const Batch *bt, const char *section) {
    (void)section;  /* the production build's SECTION() names nothing */
    if (!sums_fit(d, row, now, bt->total, bt->at != NULL)) return sum_overflow(&d->core);
    SECTION(section);
    for (Py_ssize_t k = 0; k < bt->n; k++)
        record_row(d, row, now, bt->at ? bt->at[k] : now, bt->values[k], bin_of(d, bt->values[k]));
    END_SECTION();
    return 0;
}

/* The batch into the shared row, or the key's row (created if new): 0, or -1 with the error
 * set (a full key table: dropped and counted when on_full answers it). Sections: "record"
 * (a keyed one's: "record_keyed") or "record_many". */
static int record_batch(Dist *d, PyObject *key, int64_t now, const Batch *bt, const char *section) {
    Core *c = &d->core;
    KeyCall kc = KEY_CALL;
    int rc = -1;
    int64_t slot;
    if (key_enter(c, &kc) < 0) return -1;
    if ((key != NULL && key != Py_None) != c->keyed) {
        PyErr_Format(c->keyed ? PyExc_TypeError : PyExc_ValueError,
                     c->keyed ? "distribution %R is keyed: pass key=" : "distribution %R is not keyed", c->name);
    } else if (!c->keyed) {
        if (lock_take_ex(c, LOCK_SHARED_ROW, 1) == 0) {
            rc = record_locked(d, ROW(c, 0), now, bt, section);
            lock_give(c, LOCK_SHARED_ROW);
        }
    } else if (key_lock_at(c, &kc, key, 1, now, &slot) < 0) {
        if (met_full(c, 1)) rc = 0;  /* on_full: dropped, counted in full_count */
    } else {
        char *row = ROW(c, slot);
        STORE(intent_at(c, row_lock(c, slot)), slot);
        rc = record_locked(d, row, now, bt, strcmp(section, "record") == 0 ? "record_keyed" : section);
        if (rc == 0) touch_last(row, now);
    }
    key_leave(c, &kc, NULL);
    return rc;
}

/* record(value, /, key=None): one value now (section "record"; keyed: "record_keyed"). */
static PyObject *Dist_record(Dist *d, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"value", "key"};
    PyObject *a[2] = {NULL, NULL};
    int64_t now;
    Batch bt = {NULL, NULL, 1, 0};
    if (nargs == 1 && kwnames == NULL) a[0] = args[0];
    else if (parse(args, nargs, kwnames, names, 2, a, "record") < 0) return NULL;
    if (a[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "record() needs a value");
        return NULL;
    }
    if (value_of(a[0], &bt.total) < 0 || now_ns(&d->core, &now) < 0) return NULL;
    bt.values = &bt.total;
    if (record_batch(d, a[1], now, &bt, "record") < 0) return NULL;
    Py_RETURN_NONE;
}

/* A C-contiguous buffer of n items of `format` ("d" or "q"). */
static int take_array(PyObject *obj, const char *format, Py_buffer *b, const char *what) {
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    /* an int64 array's format is "l" where a long is 8 bytes (numpy's), "q" elsewhere */
    int same = b->format != NULL && (strcmp(b->format, format) == 0 ||
                                     (format[0] == 'q' && (strcmp(b->format, "l") == 0 || strcmp(b->format, "<q") == 0 ||
                                                           strcmp(b->format, "<l") == 0)) ||
                                     (format[0] == 'd' && strcmp(b->format, "<d") == 0));
    if (b->itemsize != 8 || !same) {
        PyErr_Format(PyExc_TypeError, "record_many(): %s must be a contiguous %s array", what,
                     format[0] == 'd' ? "float64" : "int64");
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* The batch's checks, before anything is stored: every value finite and >= 0, every stamp
 * within [now - the longest span, now]. */
/* The start of the oldest bucket any resolution keeps at `now`: a stamp before it would land in
 * no bucket at all (each ring keeps n buckets, the current one included). */
static int64_t oldest_kept_ns(const Core *c, int64_t now) {
    int64_t oldest = now;
    for (int i = 0; i < c->n_rings; i++) {
        const Ring *r = &c->rings[i];
        int64_t start = (now / r->bucket_ns - r->n + 1) * r->bucket_ns;
        if (start < oldest) oldest = start;
    }
    return oldest;
}

static int check_batch(Dist *d, int64_t now, Batch *bt) {
    Core *c = &d->core;
    int64_t oldest = oldest_kept_ns(c, now);
    bt->total = 0;
    for (Py_ssize_t k = 0; k < bt->n; k++) {
        double v = bt->values[k];
        if (!isfinite(v) || v < 0) {
            PyObject *bad = PyFloat_FromDouble(v);
            if (bad != NULL)
                PyErr_Format(PyExc_ValueError, "a distribution records finite values >= 0, not %R (item %zd)", bad, k);
            Py_XDECREF(bad);
            return -1;
        }
        bt->total += v;
        if (bt->at != NULL && (bt->at[k] > now || bt->at[k] < 0 || bt->at[k] < oldest)) {
            PyErr_Format(PyExc_ValueError, "record_many(): stamp %lld (item %zd) is %s", (long long)bt->at[k], k,
                         bt->at[k] > now ? "in the future" : "older than the oldest bucket any resolution keeps");
            return -1;
        }
    }
    if (!isfinite(bt->total)) return sum_overflow(c);
    return 0;
}

/* record_many(values, at=None, key=None): a float64 array, optionally stamped (int64 ns on the
 * distribution's clock), in one section ("record_many") under one lock. */
static PyObject *Dist_record_many(Dist *d, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"values", "at", "key"};
    PyObject *a[3] = {NULL, NULL, NULL};
    Py_buffer vb, ab;
    int64_t now;
    int rc = -1, have_at = 0;
    if (parse(args, nargs, kwnames, names, 3, a, "record_many") < 0) return NULL;
    if (a[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "record_many() needs values");
        return NULL;
    }
    if (take_array(a[0], "d", &vb, "values") < 0) return NULL;
    Batch bt = {vb.buf, NULL, vb.len / 8, 0};
    if (a[1] != NULL && a[1] != Py_None) {
        if (take_array(a[1], "q", &ab, "at") < 0) goto out;
        have_at = 1;
        bt.at = ab.buf;
        if (ab.len != vb.len) {
            PyErr_SetString(PyExc_ValueError, "record_many(): at= needs one stamp per value");
            goto out;
        }
    }
    if (now_ns(&d->core, &now) < 0 || check_batch(d, now, &bt) < 0) goto out;
    rc = bt.n == 0 ? 0 : record_batch(d, a[2], now, &bt, "record_many");
out:
    if (have_at) PyBuffer_Release(&ab);
    PyBuffer_Release(&vb);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

/* Core's adds would write a window's slot into a distribution's: refused. */
static int bad_sketch(const char *what) {
    PyErr_Format(PyExc_ValueError, "Distribution: the segment's %s", what);
    return -1;
}

/* The sketch, from the header's words (outside nothing: they lie in the checksummed part that
 * Core's init copied), and where each ring's bins lie in a row. */
static int read_sketch(Dist *d) {
    Core *c = &d->core;
    ShmwinHeader h;
    memcpy(&h, c->base, CRC_END);
    if (c->role != ROLE_DISTRIBUTION || c->limiter || !c->floats || c->striped || c->state_words != 0 ||
        c->n_fields != 4 || c->slot_words != DIST_SLOT_BYTES / WORD_BYTES || c->head_slots != WINDOW_HEAD_SLOTS)
        return bad_sketch("header is not a distribution's");
    double error = dbl((int64_t)h.sketch_error);
    d->low = dbl((int64_t)h.sketch_low);
    d->high = dbl((int64_t)h.sketch_high);
    d->n_bins = h.sketch_bins;
    d->n_log = d->n_bins - DIST_FIRST_LOG_BIN;
    if (d->n_bins <= DIST_FIRST_LOG_BIN || d->n_bins > DIST_MAX_BINS || !(error >= 1e-5 && error <= 0.5) ||
        !isfinite(d->low) || !isfinite(d->high) || !(d->low > 0 && d->low < d->high) ||
        !(d->high / d->low <= 1e300))  /* geometry.MAX_RANGE_RATIO: v / low stays finite */
        return bad_sketch("sketch words are impossible");
    d->inv_log_gamma = 1 / log((1 + error) / (1 - error));
    d->bin_stride = (d->n_bins * DIST_BIN_BYTES + WORD_BYTES - 1) / WORD_BYTES * WORD_BYTES;
    const Ring *last = &c->rings[c->n_rings - 1];
    int64_t at = (last->hdr + (c->head_slots + last->n) * c->slot_words) * WORD_BYTES, buckets = 0;
    for (int i = 0; i < c->n_rings; i++) {
        d->ring_bins[i] = at + buckets * d->bin_stride;
        buckets += c->rings[i].n;
    }
    if (!fits(at, buckets, d->bin_stride, c->row_bytes)) return bad_sketch("rows are too small for their bins");
    for (int i = 0; i < MAX_RINGS; i++) d->lo_ns[i] = INT64_MAX;  /* no bucket remembered yet */
    return 0;
}

/* The role's check hook (core.h's recipe): the segment is a distribution's, and its sketch
 * words are possible; they are read here, once the layout is derived. */
static int is_distribution(Core *c) {
    if (c->role != ROLE_DISTRIBUTION) return not_role(c);
    return read_sketch((Dist *)c);
}

static const RoleHooks distribution_hooks = {.role = "distribution",
                                             .check = is_distribution};

static int dist_init(Core *c, PyObject *args, PyObject *kw) { return core_init(c, args, kw, &distribution_hooks); }

#define FASTCALL_KW(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL | METH_KEYWORDS

static PyMethodDef dist_methods[] = {
    {"record", FASTCALL_KW(Dist_record),
     "record($self, value, /, key=None)\n--\n\nOne value (finite, >= 0) now, into every resolution."},
    METHOD_KW(record_many, Dist_record_many, "values, at=None, key=None",
        "A float64 array in one section; at=: int64 stamps (ns, this clock), one per value."),
    {NULL},
};

/* no object fields of its own: Core's GC support, inherited */
ROLE_SPEC(distribution_spec, "DistributionCore", Dist, dist_init, dist_methods,
          "DistributionCore(buffer, /, *, name, timeout_ns, clock=None, on_full=0, claim=None, fd=-1)\n--\n\n"
          "A Core whose segment is a distribution's (role \"distribution\"): record(), record_many().");
