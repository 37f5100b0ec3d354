/* shmwin._core -- every write to a shmwin segment, each one uninterruptible call.
 *
 * Why native: a critical section written in Python can be cut between two stores by a
 * signal handler that raises (KeyboardInterrupt, a SIGALRM request timeout), and it pays
 * interpreter prices for every word. Here no Python code runs while a segment lock is held,
 * and the GIL is released only while a call waits for a contended mutex. Readers (sums over
 * buckets) stay numpy, in Python.
 *
 * The types. A segment's core is of a heap type: the base Core (what every segment has) or
 * one of its subtypes, one per role, each in its role's file with its own methods. open()
 * below builds a segment's type by its header's kind and role words (role_types); each type
 * hands core_init its RoleHooks (core.h: what the shared code asks of a role, and the recipe
 * for a new role's type), so no method tests a role word.
 *
 * The files, one concern each (core.h, the internal header, declares what they share; the
 * inline prologue and epilogue of every keyed method, key_enter ... key_leave, are there):
 *
 *   module.c       this map; the module (PEP 489 multi-phase init, PEP 630 module state: the
 *                  exception classes and the types); the role -> type table and open();
 *                  init_locks, init_stripes, LAYOUT; the test build's fail points
 *   core.h         what the files share: the Core's fields, RoleHooks and the recipe of a
 *                  role's type, STORE/SECTION, the inline hot paths
 *   layout.h       GENERATED from shmwin/backends/shm/format.py (format_c.py): every offset, word index, flag and
 *                  lock number of the binary format, with _Static_asserts on each
 *   coretype.c     the base type Core: the geometry read from the segment's header (with its
 *                  role's hooks) and derived, close safety (enter/leave), the type's slots
 *   methods.c      argument helpers; the methods every segment has (clear, reset, find, the
 *                  stripes', close): the base's method table
 *   window.c       WindowCore: a window's adds, add, add_and_total, add_batch
 *   limiter.c      LimiterCore: a limiter's hit, check, refund, charge; its decisions' tally
 *   counters.c     FixedWindowCore, SlidingCounterCore, TokenBucketCore: limits' fixed window
 *                  and sliding window counter; the token bucket
 *   fixedsum.c     FixedSum: limits' get of a key its strategies did not build, summed over
 *                  every fixed-window segment of one storage in one call, while its board holds
 *   concurrency.c  ConcurrencyCore: per-key concurrency, holders over live processes
 *   moving.c       MovingLogCore: limits' moving window, each key's hit times in its row and
 *                  in chunks; its key names
 *   chunks.c       the moving log's chunk heap: handed out, freed, given back, repaired
 *   lease.c        LeaseCore: a two-tier limiter's host tier (shm+redis://), each key's lease
 *                  of hits from Redis, spent, sealed, installed under the key's row lock
 *   distribution.c  DistributionCore: role "distribution", shmwin.Distribution's record and
 *                  record_many, each value into every resolution's bucket of bins
 *   live.c         live limits: a limiter's limits changed in place (a generation word each
 *                  keyed call compares), a segment replaced under its name (moved)
 *   cache.c        CounterCacheCore: role "counter-cache", Django's cache of int counters: each
 *                  key's value and expiry, add/set/incr/touch/delete under the key's row lock
 *   rings.c        rows: the window's add, the limiter's check-and-count and its repair
 *   exactlog.c     a limiter's log rings (exact=...): hit times in order, a running total,
 *                  expiry from the tail, the dead entry kept for a clock stepped back
 *   stripes.c      the unkeyed striped window's per-process rows: claimed, given back, alive
 *   keys.c         a key's stored form and hash (SipHash-1-3), rows compared with it
 *   words.c        the key table's checked state words, the index's copies
 *   index.c        keyed segments' index: find, insert, rebuild, reclaim, clear and their
 *                  rollback repair
 *   space.c        the memory the table grows into: rows and index copies reserved, holes
 *                  punched
 *   keycache.c     this process's way from a key object to its locked row
 *   locks.c        time, the robust mutexes and bounded waits, and the dispatch of EOWNERDEAD
 *                  repairs
 *   series.h       role "series": what its three files share (SeriesMap, SeriesValue)
 *   moving.h       role "moving-log": what moving.c and chunks.c share (a run's shape, chunks)
 *   methods.h      what methods.c offers the role files: a method table's entries (METHOD_KW,
 *                  METHOD_O, ...: each text signature once), parse, parse_keyed, cost_of,
 *                  enter_key_cost; a type's GC_SLOTS and free_instance
 *   series.c       role "series": prometheus_client's values of one app; the SeriesMap type
 *   seriesdir.c    a series segment's directory (lock, find, append, repair), its slots
 *   seriesval.c    SeriesValue: one prometheus_client value's cell (inc, set, get)
 *   threads.c      per process: the fork generation, the time namespace's offset, the keeper
 *                  and the reserver threads
 *
 * Who calls whom (a -> b: a file calls a function that b defines; calls through core.h's (and methods.h's)
 * inline helpers and through a role's hooks not drawn). tests/unit/test_core_file_map.py holds
 * this map, and the one in docs/internals.md, to the files and their calls, and that no file
 * reaches itself through them (the role files on top, the key table below, no circle):
 *
 * CALLS-BEGIN
 *   cache.c -> coretype.c index.c
 *   chunks.c -> space.c words.c
 *   concurrency.c -> coretype.c index.c keycache.c methods.c rings.c stripes.c threads.c
 *   coretype.c -> keycache.c rings.c stripes.c threads.c
 *   counters.c -> coretype.c index.c limiter.c methods.c rings.c
 *   distribution.c -> coretype.c index.c methods.c
 *   exactlog.c ->
 *   fixedsum.c -> counters.c index.c keycache.c keys.c rings.c
 *   index.c -> keys.c rings.c space.c words.c
 *   keycache.c -> index.c keys.c
 *   keys.c ->
 *   lease.c -> coretype.c index.c methods.c rings.c
 *   limiter.c -> coretype.c index.c methods.c rings.c
 *   live.c ->
 *   locks.c -> coretype.c index.c words.c
 *   methods.c -> coretype.c index.c keycache.c keys.c rings.c stripes.c words.c
 *   module.c -> fixedsum.c locks.c series.c threads.c
 *   moving.c -> chunks.c coretype.c index.c words.c
 *   rings.c -> exactlog.c
 *   series.c -> coretype.c seriesdir.c seriesval.c
 *   seriesdir.c -> threads.c
 *   seriesval.c ->
 *   space.c -> threads.c words.c
 *   stripes.c -> threads.c
 *   threads.c ->
 *   window.c -> index.c keycache.c methods.c module.c rings.c
 *   words.c ->
 * CALLS-END
 *
 * Crash consistency. Locks are robust process-shared mutexes: a holder that dies hands the
 * next locker EOWNERDEAD, and that locker repairs before marking the mutex consistent. Each
 * section says what may be torn between its stores and how the repair recomputes it. Stores
 * are ordered so that a tear can only make a limiter refuse early, never admit late. Every
 * store goes through STORE(); in the test build (-DSHMWIN_TEST, and only there) it is also a
 * fail point: failpoint("section", n, signal) raises `signal` in this process right after the
 * n-th store of `section`.
 *
 * Close safety. Every entry point raises WindowClosedError once close() ran; the mapping is
 * kept (our buffer export) until no call of any thread is inside.
 *
 * Junk safety. Anyone who can write the segment can write any word of it, and a bit can flip:
 * no word read from it is trusted with memory or arithmetic. Words that say where memory is
 * touched are checked where they are loaded (the key table's checked words, row numbers
 * against rows_top, epochs against what a clock reaches, generations below MAX_GEN); counts
 * are clamped, or added saturating or with __builtin_*_overflow. A word that fails is a
 * CorruptSegmentError, or (a count) a refusal: never undefined behaviour, never a fault.
 * scripts/checks.d/50-sanitizers.sh holds the core to it (tests/integration/core/test_bad_words.py).
 */
#include "core.h"

#include <signal.h>
#include <stdio.h>

/* ---- fail points: the test build's (-DSHMWIN_TEST) ---------------------------------------- */

#ifdef SHMWIN_TEST
#include <stdlib.h>

int fp_armed;
long fp_left;
int fp_nospace;
long long fp_lock_waits;
static char fp_section[32];
static long fp_after;          /* fire after this many stores of the section */
static int fp_signal;          /* what to raise in this process then */
static int fp_fired;

void fp_enter(const char *section) {
    fp_left = strcmp(section, fp_section) == 0 ? fp_after : 0;
}

void fp_fire(void) {
    fp_fired = 1;
    fp_armed = 0;
    raise(fp_signal);   /* SIGKILL ends us here; a Python handler runs after this call returns */
}

static void fp_arm(const char *section, long after, int sig) {
    snprintf(fp_section, sizeof fp_section, "%s", section);
    fp_after = after;
    fp_signal = sig;
    fp_armed = *section != '\0' && after > 0;
    fp_fired = 0;
    fp_left = 0;
}

static PyObject *failpoint(PyObject *Py_UNUSED(m), PyObject *args) {
    const char *section = "";
    long after = 0;
    int sig = SIGKILL;
    if (!PyArg_ParseTuple(args, "|sli:failpoint", &section, &after, &sig)) return NULL;
    fp_arm(section, after, sig);
    Py_RETURN_NONE;
}

/* A fired signal's Python handler runs here at the latest: where an interpreter next checks for
 * signals after a C call returns is its own choice (3.10-3.13 as the call returns, 3.14 a
 * statement later), so a victim asks right after the struck call, and its handler's exception
 * surfaces there on every CPython. */
static PyObject *failpoint_fired(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(x)) {
    if (PyErr_CheckSignals() < 0) return NULL;
    return PyBool_FromLong(fp_fired);
}

static PyObject *nospace(PyObject *Py_UNUSED(m), PyObject *on) {
    int v = PyObject_IsTrue(on);
    if (v < 0) return NULL;
    fp_nospace = v;
    Py_RETURN_NONE;
}

/* How many times this process slept on a held lock (lock_wait(), past its spins): a call that
 * left it unchanged never waited on another process, however long the machine made it take. */
static PyObject *lock_waits(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(x)) {
    return PyLong_FromLongLong(fp_lock_waits);
}

/* A child process is armed through the environment: SHMWIN_FAILPOINT="section:n:signal". */
static void fp_from_environment(void) {
    const char *env = getenv("SHMWIN_FAILPOINT");
    char section[32];
    long after;
    int sig;
    if (env && *env && sscanf(env, "%31[^:]:%ld:%d", section, &after, &sig) == 3) fp_arm(section, after, sig);
}

#define FAILPOINT_METHODS                                                                         \
    {"failpoint", failpoint, METH_VARARGS,                                                        \
     "failpoint($module, section='', after=0, signal=9, /)\n--\n\n"                               \
     "The test build's: raise signal in this process after the after-th store of section."},      \
    {"failpoint_fired", failpoint_fired, METH_NOARGS,                                             \
     "failpoint_fired($module, /)\n--\n\nDid the armed fail point fire? (Runs pending signal handlers first.)"},                        \
    {"nospace", nospace, METH_O,                                                                  \
     "nospace($module, on, /)\n--\n\nThe test build's: every reservation of this process fails "   \
     "as on a full /dev/shm (ENOSPC), so that reclaim runs without filling one."},                \
    {"lock_waits", lock_waits, METH_NOARGS,                                                       \
     "lock_waits($module, /)\n--\n\nThe test build's: how many times this process slept on a held lock."},
#else
#define FAILPOINT_METHODS
#endif

/* ---- the types: a segment's by its header's kind and role words -------------------------------- *
 * Each row names the type of a segment of that kind and role (ROLE_ANY: every role of the kind
 * without a row of its own). How a role adds its type: core.h, "a role: its type". */

#define ROLE_ANY -1
static const struct {
    int kind, role;
    PyType_Spec *spec;
} role_types[] = {
    {KIND_WINDOW, ROLE_ANY, &window_spec},   /* plain, fixed starts, breaker, shedder, decisions, ... */
    {KIND_LIMITER, ROLE_ANY, &limiter_spec}, /* a limiter, whatever its role word */
    {KIND_WINDOW, ROLE_FIXED_WINDOW, &fixed_window_spec},
    {KIND_WINDOW, ROLE_SLIDING_COUNTER, &sliding_counter_spec},
    {KIND_WINDOW, ROLE_TOKEN_BUCKET, &token_bucket_spec},
    {KIND_WINDOW, ROLE_CONCURRENCY, &concurrency_spec},
    {KIND_WINDOW, ROLE_MOVING_LOG, &moving_log_spec},
    {KIND_WINDOW, ROLE_LEASE, &lease_spec},
    {KIND_WINDOW, ROLE_DISTRIBUTION, &distribution_spec},
    {KIND_WINDOW, ROLE_COUNTER_CACHE, &counter_cache_spec},
};
#define N_ROLE_TYPES ((int)(sizeof role_types / sizeof *role_types))
_Static_assert(N_ROLE_TYPES <= MAX_ROLE_TYPES, "core.h's MAX_ROLE_TYPES holds the table");

/* The row of (kind, role): its own, else its kind's ROLE_ANY row, else -1 (a junk kind). */
static int role_row(int kind, int role) {
    int any = -1;
    for (int i = 0; i < N_ROLE_TYPES; i++) {
        if (role_types[i].kind != kind) continue;
        if (role_types[i].role == role) return i;
        if (role_types[i].role == ROLE_ANY) any = i;
    }
    return any;
}

/* Has (kind, role) a type of its own (not its kind's ROLE_ANY one)? A window's type refuses it. */
int role_has_type(int kind, int role) {
    int i = role_row(kind, role);
    return i >= 0 && role_types[i].role != ROLE_ANY;
}

/* open(buffer, /, *, name, timeout_ns, ...): the segment's type, picked by its header's kind and
 * role words, built over it (the same keywords as Core()). A header too short, or of a junk
 * kind, goes to the base type, whose init says what is wrong with it; one that changes under
 * us is caught by the type's own check of the words it reads again. */
static PyObject *open_segment(PyObject *m, PyObject *args, PyObject *kw) {
    ModState *st = PyModule_GetState(m);
    Py_buffer b;
    ShmwinHeader h;
    if (PyTuple_GET_SIZE(args) < 1) {
        PyErr_SetString(PyExc_TypeError, "open() needs the segment's buffer");
        return NULL;
    }
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, 0), &b, PyBUF_SIMPLE) < 0) return NULL;
    memset(&h, 0, sizeof h);
    int row = -1;
    if (b.len >= HEADER_BYTES) {
        memcpy(&h, b.buf, CRC_END);
        row = role_row(h.kind <= KIND_LIMITER ? (int)h.kind : -1, h.role <= 0xff ? (int)h.role : -1);
    }
    PyBuffer_Release(&b);
    PyTypeObject *type = row >= 0 ? st->role_types[row] : st->core_type;
    return PyObject_Call((PyObject *)type, args, kw);
}

/* ---- module functions ------------------------------------------------------------------------ */

/* init_locks(buffer, offset, count, /): a new lock table, every robust mutex free. */
static PyObject *init_locks(PyObject *Py_UNUSED(m), PyObject *args) {
    Py_buffer b;
    Py_ssize_t off, count;
    if (!PyArg_ParseTuple(args, "w*nn:init_locks", &b, &off, &count)) return NULL;
    int rc = init_mutexes(&b, off, count, LOCK_BYTES, LOCK_MUTEX_OFF, LOCK_INTENT_OFF);
    PyBuffer_Release(&b);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

/* init_stripes(buffer, offset, count, /): a new stripe table, every liveness mutex free. */
static PyObject *init_stripes(PyObject *Py_UNUSED(m), PyObject *args) {
    Py_buffer b;
    Py_ssize_t off, count;
    if (!PyArg_ParseTuple(args, "w*nn:init_stripes", &b, &off, &count)) return NULL;
    int rc = init_mutexes(&b, off, count, STRIPE_ENTRY_BYTES, STRIPE_MUTEX_OFF, -1);
    PyBuffer_Release(&b);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

/* The offset this process's CLOCK_MONOTONIC is read with (its time namespace's), in ns. */
static PyObject *timens_offset(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(x)) {
    return PyLong_FromLongLong(timens_offset_ns);
}

static PyObject *reserver_counts(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(x)) { return reserver_counts_dict(); }

static PyMethodDef module_methods[] = {
    {"open", (PyCFunction)(void (*)(void))open_segment, METH_VARARGS | METH_KEYWORDS,
     "open($module, buffer, /, *, name, timeout_ns, clock=None, on_full=0, claim=None, fd=-1)\n--\n\n"
     "The segment's core: of the type its header's kind and role name (Core's subtypes), as Core() takes it."},
    {"init_locks", init_locks, METH_VARARGS,
     "init_locks($module, buffer, offset, count, /)\n--\n\nA new lock table: robust process-shared mutexes."},
    {"init_stripes", init_stripes, METH_VARARGS,
     "init_stripes($module, buffer, offset, count, /)\n--\n\nA new stripe table, every stripe free."},
    {"timens_offset", timens_offset, METH_NOARGS,
     "timens_offset($module, /)\n--\n\n"
     "ns this process's CLOCK_MONOTONIC is ahead of the host's (its time namespace's offset)."},
    {"reserver_counts", reserver_counts, METH_NOARGS,
     "reserver_counts($module, /)\n--\n\n"
     "This process's row reserver: {'posted', 'done', 'used'} jobs (see threads.c)."},
    FAILPOINT_METHODS
    {NULL},
};

/* ---- the module: its state, and its exec ------------------------------------------------------ */

/* DO(ref) for each reference the state (core.h's ModState) holds: the module's traverse and clear walk one list */
#define MODSTATE_EACH(st, DO)                                                                          \
    do {                                                                                               \
        DO(st->core_type); DO(st->window_type); DO(st->closed); DO(st->timeout); DO(st->corrupt);      \
        DO(st->full); DO(st->field); DO(st->space); DO(st->moved); DO(st->series_map_type);            \
        DO(st->series_value_type);                                                                     \
        for (int i_ = 0; i_ < MAX_ROLE_TYPES; i_++) DO(st->role_types[i_]);                            \
    } while (0)

static int module_traverse(PyObject *m, visitproc visit, void *arg) {
    ModState *st = PyModule_GetState(m);
    MODSTATE_EACH(st, Py_VISIT);
    return 0;
}

static int module_clear(PyObject *m) {
    ModState *st = PyModule_GetState(m);
    MODSTATE_EACH(st, Py_CLEAR);
    return 0;
}

static void module_free(void *m) { module_clear((PyObject *)m); }

/* The exception classes, from shmwin.errors (the one errors module): the module's state. */
static int take_errors(ModState *st) {
    static const char *names[] = {"WindowClosedError", "LockTimeoutError", "CorruptSegmentError",
                                  "KeyTableFullError", "UnknownFieldError", "OutOfSpaceError",
                                  "WindowMovedError"};
    PyObject **slots[] = {&st->closed, &st->timeout, &st->corrupt, &st->full, &st->field, &st->space,
                          &st->moved};
    PyObject *errors = PyImport_ImportModule("shmwin.errors");
    if (errors == NULL) return -1;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        *slots[i] = PyObject_GetAttrString(errors, names[i]);
        if (*slots[i] == NULL) {
            Py_DECREF(errors);
            return -1;
        }
    }
    Py_DECREF(errors);
    return 0;
}

/* LAYOUT: every constant of layout.h by name (a read-only mapping), for the tests to hold
 * against layout_words.constants(): what this build was compiled with. A table and one loop,
 * not a call per name inline: gcc -fanalyzer walked the 336 inlined branches' paths for 60 of
 * the 40-c-warnings job's 87 CPU-seconds (under 1 CPU-second as a loop). */
static const struct {
    const char *name;
    long long value;
} layout_table[] = {
#define LAYOUT_ROW(name) {#name, (long long)(name)},
    SHMWIN_LAYOUT_NAMES(LAYOUT_ROW)
#undef LAYOUT_ROW
};

static PyObject *layout_names(void) {
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    for (size_t i = 0; i < sizeof layout_table / sizeof *layout_table; i++) {
        PyObject *v = PyLong_FromLongLong(layout_table[i].value);
        if (v == NULL || PyDict_SetItemString(d, layout_table[i].name, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    PyObject *proxy = PyDictProxy_New(d);
    Py_DECREF(d);
    return proxy;
}

static int module_exec(PyObject *m) {
    static int forks_handled;  /* process-wide, once: see threads.c */
    ModState *st = PyModule_GetState(m);
    if (!forks_handled) {
        if (pthread_atfork(NULL, NULL, after_fork_child) != 0) {
            PyErr_SetString(PyExc_RuntimeError, "shmwin._core: pthread_atfork failed");
            return -1;
        }
        forks_handled = 1;
    }
    timens_offset_ns = read_timens_offset();
#ifdef SHMWIN_TEST
    fp_from_environment();
#endif
    if (take_errors(st) < 0) return -1;
    st->core_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &core_spec, NULL);
    if (st->core_type == NULL || PyModule_AddType(m, st->core_type) < 0) return -1;
    for (int i = 0; i < N_ROLE_TYPES; i++) {  /* each role's type: Core's subtype */
        PyTypeObject *t = (PyTypeObject *)PyType_FromModuleAndSpec(m, role_types[i].spec, (PyObject *)st->core_type);
        if (t == NULL) return -1;
        st->role_types[i] = t;
        if (PyModule_AddType(m, t) < 0) return -1;
        if (role_types[i].spec == &window_spec) st->window_type = (PyTypeObject *)Py_NewRef(t);
    }
    if (series_add_types(m, st) < 0) return -1;  /* series.c: its own types, not Core's */
    if (fixedsum_add_type(m) < 0) return -1;      /* fixedsum.c: limits' get over a storage's fixed windows */
    PyObject *layout = layout_names();
    if (layout == NULL || PyModule_AddObjectRef(m, "LAYOUT", layout) < 0) {
        Py_XDECREF(layout);
        return -1;
    }
    Py_DECREF(layout);
    return PyModule_AddIntConstant(m, "MUTEX_BYTES", (long)sizeof(pthread_mutex_t));
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#ifdef Py_mod_multiple_interpreters
    /* One interpreter per process: the keeper holds stripes' mutexes for the process, and
     * the fork generation, the reserver and the time offset are the process's (threads.c). */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_USED},  /* a stripe's writes are serialised by the GIL */
#endif
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "shmwin._core",
    .m_doc = "The native critical sections of shmwin (shmwin/backends/shm/core/).",
    .m_size = sizeof(ModState),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

#pragma GCC visibility push(default)
PyMODINIT_FUNC PyInit__core(void) { return PyModuleDef_Init(&module_def); }
#pragma GCC visibility pop
