/* locks.c -- time, the segment's robust mutexes, waits, and what EOWNERDEAD repairs.
 *
 * Locks are robust process-shared mutexes in the segment's lock table: a holder that dies
 * hands the next locker EOWNERDEAD, and that locker repairs before marking the mutex
 * consistent (repair(), below, sends it to the section's own repair). A wait is bounded
 * (the window's lock timeout) and runs with the GIL released, in slices between which the
 * holder and pending signals are looked at.
 */
#include "core.h"

#include <signal.h>

#define SPINS 64               /* trylocks before sleeping: the holder is usually ~0.1 us from done */
#define SLICE_NS 100000000LL   /* wait in slices: check the holder and signals between them */

/* ---- time ------------------------------------------------------------------------------ */

/* The injected clock's reading (now_ns() in core.h reads CLOCK_MONOTONIC natively). Two
 * callers can reach a row in the other order than they read the clock; the sections handle a
 * lagging reading (a limiter counts it in the newer head bucket: later, never earlier; a window
 * adds to the newer bucket of its slot instead of rolling it back). */
int call_clock(Core *c, int64_t *now) {
    PyObject *v = PyObject_CallNoArgs(c->clock);
    if (v == NULL) return -1;
    if (PyFloat_Check(v)) {  /* time-mocking libraries hand out floats */
        double d = PyFloat_AS_DOUBLE(v);
        if (!(d >= 0 && d < (double)MAX_NOW_NS)) {
            PyErr_Format(PyExc_ValueError, "the clock returned %R ns, not a time", v);
            Py_DECREF(v);
            return -1;
        }
        Py_DECREF(v);
        *now = (int64_t)d;
        return 0;
    }
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (x < 0) {
        PyErr_Format(PyExc_ValueError, "the clock returned %lld ns: monotonic time is never negative", x);
        return -1;
    }
    if (x >= MAX_NOW_NS) {
        PyErr_Format(PyExc_ValueError, "the clock returned %lld ns: shmwin takes 0 to 2**62 ns "
                     "(146 years of uptime)", x);
        return -1;
    }
    *now = x;
    return 0;
}

/* ---- locks ------------------------------------------------------------------------------- */

/* One bounded wait for a mutex, until a CLOCK_MONOTONIC deadline. */
static int timed_lock(pthread_mutex_t *m, const struct timespec *until) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 30)
    return pthread_mutex_clocklock(m, CLOCK_MONOTONIC, until);
#else  /* older libcs: a CLOCK_REALTIME deadline, the same distance away */
    struct timespec real;
    int64_t left = (int64_t)until->tv_sec * NS + until->tv_nsec - mono_ns(), at;
    clock_gettime(CLOCK_REALTIME, &real);
    at = (int64_t)real.tv_sec * NS + real.tv_nsec + (left > 0 ? left : 0);
    real.tv_sec = at / NS;
    real.tv_nsec = at % NS;
    return pthread_mutex_timedlock(m, &real);
#endif
}

/* A wait that timed out a slice. A free word (0) or a new holder: just wait again. The kernel
 * flags a dead holder itself (EOWNERDEAD), so a holder is never judged dead from here: a
 * thread id that kill() cannot find may live in another PID namespace. Only a word that is
 * held yet names no thread at all is junk; anything else waits until the deadline. */
static int holder_check(Core *c, int i, int64_t deadline, int *junk_slices) {
    unsigned word = __atomic_load_n((unsigned *)mutex_at(c, i), __ATOMIC_RELAXED);
    int tid = (int)(word & 0x3FFFFFFF);
    *junk_slices = word != 0 && tid == 0 && !(word & 0x40000000) ? *junk_slices + 1 : 0;
    if (*junk_slices >= 2) {  /* seen twice, a slice apart: not a transient */
        PyErr_Format(c->st->corrupt, "lock %d of window %R holds the word 0x%x, which names no thread: "
                     "the segment's lock table is corrupt", i, c->name, word);
        return -1;
    }
    if (mono_ns() < deadline) return 0;
    int visible = tid == 0 || kill(tid, 0) == 0 || errno != ESRCH;
    PyErr_Format(c->st->timeout, "lock %d of window %R has been held by thread %d for more than %lld ms (%s)",
                 i, c->name, tid, (long long)(c->timeout_ns / 1000000),
                 visible ? "a live thread: stopped in a debugger, or SIGSTOPped?"
                         : "a thread this process cannot see: in another PID namespace, or dead "
                           "without the kernel noticing, which means a corrupt lock table");
    return -1;
}

/* Block (GIL released) until lock i is ours: a pthread code, or -1 with an error set.
 * `interruptible`: nothing else is held, so a pending signal may raise here. */
static int lock_wait(Core *c, int i, int interruptible) {
    pthread_mutex_t *m = mutex_at(c, i);
    int64_t deadline = mono_ns() + c->timeout_ns;
    int junk_slices = 0;
#ifdef SHMWIN_TEST
    fp_lock_waits++;  /* lock_waits(): the fail-point harness proves its checks never got here */
#endif
    for (;;) {
        int64_t until = mono_ns() + SLICE_NS;
        struct timespec ts;
        if (until > deadline) until = deadline;
        ts.tv_sec = until / NS;
        ts.tv_nsec = until % NS;
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = timed_lock(m, &ts);
        Py_END_ALLOW_THREADS
        if (rc != ETIMEDOUT) return rc;
        if (holder_check(c, i, deadline, &junk_slices) < 0) return -1;
        if (interruptible && PyErr_CheckSignals() < 0) return -1;
    }
}

/* ---- repair: what EOWNERDEAD means for each lock ---------------------------------------- *
 * Called holding lock i, which the kernel says a dead holder left mid-section.
 *  - LOCK_KEY_TABLE (keyed): the intent entry may be half-published: roll it back
 *    (repair_keys, index.c, section "rollback").
 *  - any other lock of a role whose hooks repair (core.h, RoleHooks.repair), which the role does:
 *    LOCK_CHUNKS of a moving log: rebuild the chunk free list from every row's chain
 *    (repair_chunks, moving.c, section "chunk_repair"); a key row lock of a limiter: the
 *    intent row's running totals may be torn: recompute them from its buckets (repair_row,
 *    rings.c: buckets are primary, totals derived).
 *  - anything else: every section's stores are ordered so that a tear is harmless
 *    (a window's add lost only its own count; a stripe claim wrote its owner last; a torn
 *    add_batch or reset left each slot it reached whole, and the rest as they were). */
static void repair(Core *c, int i) {
    int64_t slot = LOAD(intent_at(c, i));
    if (!c->keyed) return;
    if (i == LOCK_KEY_TABLE) {
        repair_keys(c);
        return;
    }
    if (c->hooks->repair == NULL) return;
    if (i < FIRST_KEY_LOCK) {  /* a lock of no row: the role's own (a moving log's LOCK_CHUNKS) */
        c->hooks->repair(c, i, -1);
        return;
    }
    int64_t top;
    if (rows_top(c, &top) < 0) {
        PyErr_Clear();  /* the next caller meets it in find_key; a cached row is still reserved */
        return;
    }
    if (slot < 0 || slot >= top || row_lock(c, slot) != i) return;
    c->hooks->repair(c, i, slot);  /* a limiter's row: its running totals (rings.c) */
}

/* lock_take_ex() (core.h) past its first trylock, which answered rc. */
int lock_take_slow(Core *c, int i, int interruptible, int rc) {
    pthread_mutex_t *m = mutex_at(c, i);
    for (int spin = 0; rc == EBUSY && spin < SPINS; spin++) {
        CPU_RELAX();
        rc = pthread_mutex_trylock(m);
    }
    if (rc == EBUSY) rc = lock_wait(c, i, interruptible);
    if (rc == -1) return -1;
    if (rc == EOWNERDEAD) {
        repair(c, i);
        pthread_mutex_consistent(m);
        rc = 0;
    }
    if (rc != 0) {
        PyErr_Format(c->st->corrupt, "lock %d of window %R is unusable (error %d)", i, c->name, rc);
        return -1;
    }
    if (c->closed) {  /* closed by another thread while we waited: the map is still ours */
        lock_give(c, i);
        return still_open(c);
    }
    return 0;
}

/* `count` records of `stride` bytes from `off` in b, each zeroed with a free robust process-
 * shared mutex at `mutex_off` and, if intent_off >= 0, the word there set to -1 (no intent):
 * a new lock table or stripe table. 0, or -1 with ValueError if the table does not fit. */
int init_mutexes(Py_buffer *b, Py_ssize_t off, Py_ssize_t count, Py_ssize_t stride, Py_ssize_t mutex_off,
                 Py_ssize_t intent_off) {
    pthread_mutexattr_t attr;
    if (!fits(off, count, stride, b->len)) {
        PyErr_SetString(PyExc_ValueError, "the table does not fit the buffer");
        return -1;
    }
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    for (Py_ssize_t i = 0; i < count; i++) {
        char *at = (char *)b->buf + off + i * stride;
        memset(at, 0, (size_t)stride);
        if (intent_off >= 0) {
            int64_t none = -1;
            memcpy(at + intent_off, &none, sizeof none);
        }
        pthread_mutex_init((pthread_mutex_t *)(at + mutex_off), &attr);
    }
    pthread_mutexattr_destroy(&attr);
    return 0;
}
