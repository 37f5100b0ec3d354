/* shmwin._core -- every write to a shmwin segment, each one uninterruptible call.
 *
 * Why native: a critical section written in Python can be cut between two stores by a
 * signal handler that raises (KeyboardInterrupt, a SIGALRM request timeout), and it pays
 * interpreter prices for every word. Here no Python code runs while a segment lock is held,
 * and the GIL is released only while a call waits for a contended mutex. Readers (sums over
 * buckets) stay numpy, in Python.
 *
 * The files, one concern each (core.h, the internal header, declares what they share; the
 * inline prologue and epilogue of every keyed method, key_enter ... key_leave, are there):
 *
 *   module.c       this map; the module (PEP 489 multi-phase init, PEP 630 module state: the
 *                  exception classes and the Core type); init_locks, init_stripes, LAYOUT;
 *                  the test build's fail points
 *   core.h         what the files share: the Core's fields, STORE/SECTION, the inline hot paths
 *   layout.h       GENERATED from shmwin/layout_words.py: every offset, word index, flag and
 *                  lock number of the binary format, with _Static_asserts on each
 *   coretype.c     the Core type: the geometry read from the segment's header and derived,
 *                  close safety (enter/leave), the type's slots
 *   methods.c      argument helpers; the methods every segment has (clear, reset, find, the
 *                  stripes', close); the method table
 *   window.c       a window's adds: add, add_and_total, add_batch
 *   limiter.c      a limiter's hit, check, refund, charge; its decisions' tally
 *   counters.c     limits' fixed window and sliding window counter; the token bucket
 *   concurrency.c  per-key concurrency: holders over live processes
 *   moving.c       limits' moving window: each key's hit times, in its row and in chunks
 *   lease.c        a two-tier limiter's host tier (shm+redis://): each key's lease of hits from
 *                  Redis, spent, sealed, installed under the key's row lock
 *   rings.c        rows: the window's add, log rings, the limiter's check-and-count and its
 *                  repair
 *   stripes.c      the unkeyed striped window's per-process rows: claimed, given back, alive
 *   keys.c         a key's stored form and hash (SipHash-1-3), rows compared with it, key names
 *   index.c        keyed segments' table: checked state words, the index; find, insert,
 *                  rebuild, reclaim, clear and their rollback repair
 *   space.c        the memory the table grows into: rows and index copies reserved, holes
 *                  punched
 *   keycache.c     this process's way from a key object to its locked row
 *   locks.c        time, the robust mutexes and bounded waits, and the dispatch of EOWNERDEAD
 *                  repairs
 *   series.h       role "series": what its three files share (SeriesMap, SeriesValue)
 *   series.c       role "series": prometheus_client's values of one app; the SeriesMap type
 *   seriesdir.c    a series segment's directory (lock, find, append, repair), its slots
 *   seriesval.c    SeriesValue: one prometheus_client value's cell (inc, set, get)
 *   threads.c      per process: the fork generation, the time namespace's offset, the keeper
 *                  and the reserver threads
 *
 * Who calls whom (a -> b: a file calls a function that b defines; calls through core.h's
 * inline helpers not drawn). tests/unit/test_core_file_map.py holds this map, and the one in
 * docs/internals.md, to the files and their calls. The circles left (index.c <-> keys.c,
 * keycache.c, space.c, concurrency.c, moving.c) are mostly run-time role checks (a row
 * emptied, a key's idleness), which per-role types would turn into hooks:
 *
 * CALLS-BEGIN
 *   concurrency.c -> coretype.c index.c methods.c rings.c stripes.c threads.c
 *   coretype.c -> keycache.c rings.c stripes.c threads.c
 *   counters.c -> index.c limiter.c methods.c rings.c
 *   index.c -> concurrency.c keycache.c keys.c moving.c rings.c space.c
 *   keycache.c -> index.c keys.c
 *   keys.c -> index.c
 *   lease.c -> index.c methods.c rings.c
 *   limiter.c -> index.c methods.c rings.c
 *   locks.c -> coretype.c index.c moving.c rings.c
 *   methods.c -> coretype.c index.c keys.c rings.c stripes.c
 *   module.c -> locks.c series.c threads.c
 *   moving.c -> index.c methods.c space.c
 *   rings.c -> moving.c
 *   series.c -> coretype.c seriesdir.c seriesval.c
 *   seriesdir.c -> threads.c
 *   seriesval.c ->
 *   space.c -> index.c threads.c
 *   stripes.c -> coretype.c threads.c
 *   threads.c ->
 *   window.c -> index.c keycache.c methods.c rings.c
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

static PyObject *failpoint_fired(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(x)) { return PyBool_FromLong(fp_fired); }

static PyObject *nospace(PyObject *Py_UNUSED(m), PyObject *on) {
    int v = PyObject_IsTrue(on);
    if (v < 0) return NULL;
    fp_nospace = v;
    Py_RETURN_NONE;
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
     "failpoint_fired($module, /)\n--\n\nDid the armed fail point fire?"},                        \
    {"nospace", nospace, METH_O,                                                                  \
     "nospace($module, on, /)\n--\n\nThe test build's: every reservation of this process fails "   \
     "as on a full /dev/shm (ENOSPC), so that reclaim runs without filling one."},
#else
#define FAILPOINT_METHODS
#endif

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

static int module_traverse(PyObject *m, visitproc visit, void *arg) {
    ModState *st = PyModule_GetState(m);
    Py_VISIT(st->core_type);
    Py_VISIT(st->closed);
    Py_VISIT(st->timeout);
    Py_VISIT(st->corrupt);
    Py_VISIT(st->full);
    Py_VISIT(st->field);
    Py_VISIT(st->space);
    Py_VISIT(st->series_map_type);
    Py_VISIT(st->series_value_type);
    return 0;
}

static int module_clear(PyObject *m) {
    ModState *st = PyModule_GetState(m);
    Py_CLEAR(st->core_type);
    Py_CLEAR(st->closed);
    Py_CLEAR(st->timeout);
    Py_CLEAR(st->corrupt);
    Py_CLEAR(st->full);
    Py_CLEAR(st->field);
    Py_CLEAR(st->space);
    Py_CLEAR(st->series_map_type);
    Py_CLEAR(st->series_value_type);
    return 0;
}

static void module_free(void *m) { module_clear((PyObject *)m); }

/* The exception classes, from shmwin.errors (the one errors module): the module's state. */
static int take_errors(ModState *st) {
    static const char *names[] = {"WindowClosedError", "LockTimeoutError", "CorruptSegmentError",
                                  "KeyTableFullError", "UnknownFieldError", "OutOfSpaceError"};
    PyObject **slots[] = {&st->closed, &st->timeout, &st->corrupt, &st->full, &st->field, &st->space};
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
 * against layout_words.constants(): what this build was compiled with. */
static PyObject *layout_names(void) {
    PyObject *d = PyDict_New(), *v;
#define ADD_NAME(name)                                                                    \
    if (d != NULL) {                                                                      \
        v = PyLong_FromLongLong((long long)(name));                                       \
        if (v == NULL || PyDict_SetItemString(d, #name, v) < 0) Py_CLEAR(d);              \
        Py_XDECREF(v);                                                                    \
    }
    SHMWIN_LAYOUT_NAMES(ADD_NAME)
#undef ADD_NAME
    if (d == NULL) return NULL;
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
    if (series_add_types(m, st) < 0) return -1;
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
