/* shmwin._core -- every write to a shmwin segment, each one uninterruptible call.
 *
 * Why native: a critical section written in Python can be cut between two
 * stores by a signal handler that raises (KeyboardInterrupt, a SIGALRM request
 * timeout), and it pays interpreter prices for every word. Here no Python code
 * runs while a segment lock is held, and the GIL is released only while a call
 * waits for a contended mutex. Readers (sums over buckets) stay numpy, in Python.
 *
 * The byte layout is the table at the top of layout.py. This file takes every
 * offset from the Core constructor (computed there) and owns only the constants
 * it exports as module attributes; tests assert both sides agree.
 *
 * Crash consistency. Locks are robust process-shared mutexes: a holder that dies
 * hands the next locker EOWNERDEAD, and that locker repairs before marking the
 * mutex consistent. Each section below says what may be torn between its stores
 * and how the repair recomputes it. Stores are ordered so that a tear can only
 * make a limiter refuse early, never admit late. Every store goes through STORE(),
 * which is also the test-only fail point: SHMWIN_FAILPOINT="section:n:signal"
 * raises `signal` in this process right after the n-th store of `section`.
 *
 * Close safety. Every entry point raises WindowClosedError once close() ran; the
 * mapping is kept (our buffer export) until no call of any thread is inside.
 *
 * Junk safety. Anyone who can write the segment can write any word of it, and a bit can
 * flip: no word read from it is trusted with memory or arithmetic. Words that say where
 * memory is touched are checked where they are loaded (the key table's checked words, row
 * numbers against rows_top, epochs against what a clock reaches, generations below MAX_GEN);
 * counts are clamped, or added saturating or with __builtin_*_overflow. A word that fails is
 * a CorruptSegmentError, or (a count) a refusal: never undefined behaviour, never a fault.
 * scripts/checks.d/50-sanitizers.sh holds the core to it (tests/integration/test_bad_words.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shmwin segments are little-endian"
#endif

/* ---- layout constants (layout.py holds the same; test_layout asserts it) --------- */

#define WORD 8
#define LOCK_BYTES 64          /* lock table entry: the mutex, then ...          */
#define LOCK_INTENT_OFF 56     /* ... i64 intent: the row (or key entry) a section works on */
#define KEY_ENTRY_BYTES 32     /* index entry: gen, hash, row, - */
#define KEY_HEADER_BYTES 128   /* a keyed row's key header: gen, last ns, hash, len|flags<<32, key[96] */
#define KEY_BYTES_OFF 32       /* the key's bytes within it */
#define MAX_STORED_KEY 96
#define LONG_PREFIX 80         /* long keys: 80 bytes of prefix + a 16-byte digest */
#define FLAG_STR 1
#define FLAG_DIGEST 2
#define STRIPE_ENTRY_BYTES 128 /* stripe entry: owner pid, start ticks, pid, claimed ns; ... */
#define STRIPE_MUTEX_OFF 64    /* ... its liveness mutex, held by the owner's keeper thread */
#define ROWS_IN_USE_OFF 1024
#define INDEX_OFF 1032         /* keyed: the key table's state words, under LOCK_KEYS */
#define INDEX_USED_OFF 1040
#define KEYS_OFF 1048
#define ROWS_TOP_OFF 1056
#define ROWS_RESERVED_OFF 1064
#define FREE_HEAD_OFF 1072
#define REBUILT_NS_OFF 1080
#define EMPTY_EPOCH INT64_MIN
#define MAX_NOW_NS (INT64_C(1) << 62)  /* the latest clock reading taken (clock.MAX_NOW_NS) */
#define MAX_RINGS 8
#define MAX_LOG_ENTRIES 4096   /* entries of a log ring (layout.MAX_LOG_ENTRIES) */
#define MAX_PROBES 256
#define LOCK_STRIPES 0         /* unkeyed: the stripe table; keyed: key insertion */
#define LOCK_KEYS 0
#define LOCK_ROW0 1            /* unkeyed: the shared row 0 */
#define FIRST_KEY_LOCK 2

_Static_assert(sizeof(pthread_mutex_t) <= LOCK_INTENT_OFF, "a mutex must fit before the intent word");

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPINS 64               /* trylocks before sleeping: the holder is usually ~0.1 us from done */
#define SLICE_NS 100000000LL   /* wait in slices: check the holder and signals between them */
#define NS 1000000000LL
#ifdef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE_OR_NONE MADV_POPULATE_WRITE
#else
#define MADV_POPULATE_WRITE_OR_NONE 23  /* Linux 5.14+; older kernels answer EINVAL */
#endif

/* ---- errors (the classes live in errors.py; set_errors() hands them over) ---------- */

static PyObject *ErrClosed, *ErrTimeout, *ErrCorrupt, *ErrFull, *ErrField, *ErrSpace;

/* ---- fail points (test only; one predictable branch per store otherwise) ----------- */

static int fp_armed;           /* a section name is set */
static char fp_section[32];
static long fp_after;          /* fire after this many stores of the section */
static int fp_signal;          /* what to raise in this process then */
static long fp_left;           /* stores left in the running section; 0 = not counting */
static int fp_fired;

static void fp_enter(const char *section) {
    fp_left = strcmp(section, fp_section) == 0 ? fp_after : 0;
}

static void fp_fire(void) {
    fp_fired = 1;
    fp_armed = 0;
    raise(fp_signal);   /* SIGKILL ends us here; a Python handler runs after this call returns */
}

#define SECTION(name) do { if (fp_armed) fp_enter(name); } while (0)
#define END_SECTION() (fp_left = 0)
#define FAILPOINT() do { if (fp_left > 0 && --fp_left == 0) fp_fire(); } while (0)

/* Shared words: relaxed loads, release stores (ordered; never torn: 8-byte aligned). */
#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) do { __atomic_store_n((p), (v), __ATOMIC_RELEASE); FAILPOINT(); } while (0)

/* ---- process-wide state -------------------------------------------------------------- */

static uint64_t fork_gen = 1;  /* bumped in a forked child: stripes are per process */
static void keeper_after_fork(void);
static void reserver_after_fork(void);
static int64_t read_timens_offset(void);
static int64_t timens_offset_ns;
static void after_fork_child(void) {
    fork_gen++;
    timens_offset_ns = read_timens_offset();
    keeper_after_fork();
    reserver_after_fork();
}

/* A plain C thread of this process (detached, small stack, every signal blocked: signals
 * stay Python's main thread's): 0 or a pthread error code. */
static int start_thread(void *(*main)(void *)) {
    pthread_t t;
    pthread_attr_t attr;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    int err = pthread_create(&t, &attr, main, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return err;
}

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS + ts.tv_nsec;
}

/* A process in a time namespace (a container started with one, a CRIU restore) reads
 * CLOCK_MONOTONIC shifted by its namespace's offset, so two processes of one host could
 * stamp one window with clocks seconds apart. Every time a segment holds is the host's
 * (the initial namespace's): this process's offset, from /proc/self/timens_offsets
 * ("monotonic <s> <ns>"), is taken off. Read at import and again in a forked child (whose
 * namespace may be new); open/read/close are async-signal-safe. 0 without the file. */
static int64_t timens_offset_ns = 0;

static int64_t read_timens_offset(void) {
    char buf[256];
    int fd = open("/proc/self/timens_offsets", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *line = buf;
    while (line != NULL) {
        long long s, ns;  /* offsets are bounded (|s| < 2**31): no overflow below */
        if (strncmp(line, "monotonic", 9) == 0 && sscanf(line + 9, "%lld %lld", &s, &ns) == 2 &&
            s > -(1LL << 31) && s < (1LL << 31) && ns >= 0 && ns < NS)
            return (int64_t)s * NS + ns;
        line = strchr(line, '\n');
        if (line != NULL) line++;
    }
    return 0;
}

/* The host's monotonic time: what every time a segment holds is read on. */
static int64_t host_mono_ns(void) { return mono_ns() - timens_offset_ns; }

/* ---- SipHash-1-3 with the segment's secret key: key hashes callers cannot aim ------ */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                     \
    do {                                                             \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);    \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                       \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                       \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);    \
    } while (0)

static uint64_t siphash13(uint64_t k0, uint64_t k1, const unsigned char *m, size_t len) {
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    uint64_t last = (uint64_t)len << 56, w;
    const unsigned char *end = m + (len & ~(size_t)7);
    for (; m != end; m += 8) {
        memcpy(&w, m, 8);
        v3 ^= w; SIPROUND; v0 ^= w;
    }
    for (size_t i = 0; i < (len & 7); i++) last |= (uint64_t)m[i] << (8 * i);
    v3 ^= last; SIPROUND; v0 ^= last;
    v2 ^= 0xff; SIPROUND; SIPROUND; SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- the Core object: one mapped segment as this process sees it ------------------- */

typedef struct {
    int64_t hdr;        /* word offset of the ring's header slot within a row */
    int64_t n;          /* bucket slots (a log ring: entries) */
    int64_t bucket_ns;  /* a log ring: the period */
    int64_t limit;      /* limiter rings only */
    int log;            /* a limiter ring kept as hit times (see "log rings") */
} Ring;

typedef struct {
    PyObject_HEAD
    Py_buffer buf;      /* an export of the mmap: it stays mapped while we hold it */
    char *base;
    int closed;         /* set by close(): every entry point raises from then on */
    int busy;           /* calls inside (another thread may close while one waits) */
    int has_buf;
    /* geometry, from layout.Layout */
    int limiter, floats, striped, keyed;
    int n_fields, slot_words, head_slots, n_rings, n_locks, n_key_locks;
    Ring rings[MAX_RINGS];
    int64_t locks_off, stripes_off, keys_off, rows_off, row_bytes, n_rows, key_slots;
    int64_t index_levels;  /* keyed: index copies 2 x level + copy < 2 x index_levels */
    int64_t map_bytes;     /* the mapping's length (the segment file's size, mostly sparse) */
    int fd;                /* keyed: the segment, to reserve memory as the table grows; else -1 */
    int64_t rings_off;  /* byte offset of the first ring header within a row */
    int64_t idle_ns;
    uint64_t hk0, hk1;  /* the segment's hash key */
    char *empty;        /* a row's rings as they are when empty (EMPTY epochs, zeros) */
    int64_t empty_bytes;
    /* policy */
    int64_t timeout_ns;
    int on_full;        /* 0 raise KeyTableFullError, 1 allow, 2 deny */
    int64_t min_limit;
    PyObject *clock;    /* NULL: CLOCK_MONOTONIC natively; else called before any lock */
    PyObject *fields;   /* {name: word index within a slot} */
    struct CacheEntry *cache;  /* keys this process has seen: see "the key cache" */
    int32_t *cache_index;
    int64_t cache_mask, cache_used, cache_room;
    PyObject *claim;    /* striped: callable() -> a stripe row for this process, or 0 */
    PyObject *name;
    /* this process's stripe */
    int64_t stripe_row; /* 0: the shared row under LOCK_ROW0 */
    int64_t stripe_owner;
    uint64_t stripe_gen;
    int64_t retry_ns;   /* when to look for a free stripe again */
} Core;

#define W(c, off) ((int64_t *)((c)->base + (off)))
#define ROW(c, r) ((c)->base + (c)->rows_off + (int64_t)(r) * (c)->row_bytes)
#define ENTRY(c, s) ((int64_t *)((c)->base + (c)->keys_off + (int64_t)(s) * KEY_ENTRY_BYTES))
#define RING(c, row, i) ((int64_t *)((row) + (c)->rings[i].hdr * WORD))
/* The slot of bucket epoch e >= 0 in the ring whose first header slot is hdr. Limiter rings
 * have two header slots: (head epoch, running total), then (tail epoch, unused). */
#define BUCKET(c, hdr, r, e) ((hdr) + ((c)->head_slots + (e) % (r)->n) * (c)->slot_words)
#define TAIL(c, hdr) ((hdr) + (c)->slot_words)

static pthread_mutex_t *mutex_at(Core *c, int i) {
    return (pthread_mutex_t *)(c->base + c->locks_off + (int64_t)i * LOCK_BYTES);
}
static int64_t *intent_at(Core *c, int i) {
    return W(c, c->locks_off + (int64_t)i * LOCK_BYTES + LOCK_INTENT_OFF);
}
static int row_lock(Core *c, int64_t slot) { return FIRST_KEY_LOCK + (int)(slot % c->n_key_locks); }

/* Entry and exit of every method: no memory is touched after close(). */
static void give_stripe(Core *c);
static void reserver_forget(Core *c);
static void release_map(Core *c) {
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
static int enter(Core *c) {
    if (c->closed) {
        PyErr_Format(ErrClosed, "window %R is closed", c->name);
        return -1;
    }
    c->busy++;
    return 0;
}
static void leave(Core *c) {
    c->busy--;
    if (c->closed) release_map(c);
}
static int still_open(Core *c) {  /* after anything that may have run other threads */
    if (!c->closed) return 0;
    PyErr_Format(ErrClosed, "window %R was closed during the call", c->name);
    return -1;
}

/* ---- time ----------------------------------------------------------------------------- */

/* Now, read once per call before any lock is taken: CLOCK_MONOTONIC natively, or the
 * injected clock (Python code, which must never run under a lock). Two callers can then
 * reach a row in the other order than they read the clock; the sections handle a lagging
 * reading (a limiter counts it in the newer head bucket: later, never earlier; a window
 * adds to the newer bucket of its slot instead of rolling it back). */
static int now_ns(Core *c, int64_t *now) {
    if (c->clock == NULL) {
        *now = host_mono_ns();
        return 0;
    }
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

/* ---- locks ----------------------------------------------------------------------------- */

static void repair(Core *c, int i);

static void lock_give(Core *c, int i) { pthread_mutex_unlock(mutex_at(c, i)); }

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

/* A wait that timed out a slice: is the lock word still a plausible owner? */
/* A wait that timed out a slice. A free word (0) or a new holder: just wait again. The kernel
 * flags a dead holder itself (EOWNERDEAD), so a holder is never judged dead from here: a
 * thread id that kill() cannot find may live in another PID namespace. Only a word that is
 * held yet names no thread at all is junk; anything else waits until the deadline. */
static int holder_check(Core *c, int i, int64_t deadline, int *junk_slices) {
    unsigned word = __atomic_load_n((unsigned *)mutex_at(c, i), __ATOMIC_RELAXED);
    int tid = (int)(word & 0x3FFFFFFF);
    *junk_slices = word != 0 && tid == 0 && !(word & 0x40000000) ? *junk_slices + 1 : 0;
    if (*junk_slices >= 2) {  /* seen twice, a slice apart: not a transient */
        PyErr_Format(ErrCorrupt, "lock %d of window %R holds the word 0x%x, which names no thread: "
                     "the segment's lock table is corrupt", i, c->name, word);
        return -1;
    }
    if (mono_ns() < deadline) return 0;
    int visible = tid == 0 || kill(tid, 0) == 0 || errno != ESRCH;
    PyErr_Format(ErrTimeout, "lock %d of window %R has been held by thread %d for more than %lld ms (%s)",
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

/* Take lock i: 0 held (repaired if its last holder died inside), -1 error, not held. */
static int lock_take_ex(Core *c, int i, int interruptible) {
    pthread_mutex_t *m = mutex_at(c, i);
    int rc = pthread_mutex_trylock(m);
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
        PyErr_Format(ErrCorrupt, "lock %d of window %R is unusable (error %d)", i, c->name, rc);
        return -1;
    }
    if (c->closed) {  /* closed by another thread while we waited: the map is still ours */
        lock_give(c, i);
        return still_open(c);
    }
    return 0;
}
#define lock_take(c, i) lock_take_ex((c), (i), 0)

/* ---- rows ------------------------------------------------------------------------------- */

static void empty_rings(Core *c, char *row) {
    memcpy(row + c->rings_off, c->empty, (size_t)c->empty_bytes);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    FAILPOINT();
}

/* Counts read from the segment are added saturating: junk there never wraps (nor is UB). */
static int64_t sat_add(int64_t a, int64_t b) {
    int64_t s;
    return __builtin_add_overflow(a, b, &s) ? (b > 0 ? INT64_MAX : INT64_MIN) : s;
}
static int64_t sat_sub(int64_t a, int64_t b) {
    int64_t s;
    return __builtin_sub_overflow(a, b, &s) ? (b < 0 ? INT64_MAX : INT64_MIN) : s;
}

/* A ring's span (n x bucket_ns), saturating: a header may describe any ring its checksum covers. */
static int64_t span_ns(const Ring *r) {
    int64_t span;
    return __builtin_mul_overflow(r->n, r->bucket_ns, &span) ? INT64_MAX : span;
}

/* A limiter ring's head epoch: EMPTY, or one a clock can reach, whose epoch maths (head - n,
 * (head + n) x bucket_ns) cannot overflow. */
static int head_ok(const Ring *r, int64_t head) {
    return head == EMPTY_EPOCH || (head >= 0 && head <= INT64_MAX / r->bucket_ns - 2 * r->n);
}

/* A limiter ring's running total, recomputed from its live buckets (repair, and junk totals).
 * head passed head_ok(); hits are never negative, so a negative one is junk and counts 0. */
static int64_t ring_sum(Core *c, int64_t *hdr, const Ring *r, int64_t head) {
    int64_t total = 0;
    if (head == EMPTY_EPOCH) return 0;
    for (int64_t s = 0; s < r->n; s++) {
        int64_t *b = hdr + (c->head_slots + s) * c->slot_words, e = LOAD(b), hits = LOAD(b + 1);
        if (e != EMPTY_EPOCH && e > head - r->n && e <= head && hits > 0) total = sat_add(total, hits);
    }
    return total;
}

/* Add n (int or double bits) at `now` to field word f of every ring of a row.
 * Caller is the row's only writer (its stripe's process, or the holder of its lock).
 * Invariant between stores: a bucket is zeroed before it is stamped, so a lock-free reader
 * that sees the new epoch sees no old value; a tear loses only the call's own add. */
static int add_row(Core *c, char *row, int64_t now, int f, int64_t n, double d) {
    int64_t *slot[MAX_RINGS], epoch[MAX_RINGS];
    for (int i = 0; i < c->n_rings; i++) {  /* check everything before writing anything */
        const Ring *r = &c->rings[i];
        epoch[i] = now / r->bucket_ns;
        slot[i] = BUCKET(c, RING(c, row, i), r, epoch[i]);
        int64_t bits = LOAD(slot[i]) < epoch[i] ? 0 : LOAD(slot[i] + f), out;
        double sum;
        memcpy(&sum, &bits, 8);
        if (c->floats ? !isfinite(sum + d) : __builtin_add_overflow(bits, n, &out)) {
            PyErr_Format(PyExc_OverflowError, "this add would overflow the window's %s value",
                         c->floats ? "float64" : "int64");
            return -1;
        }
    }
    for (int i = 0; i < c->n_rings; i++) {
        int64_t *s = slot[i];
        if (LOAD(s) < epoch[i]) {  /* a stale slot: recycle it (a newer one is kept: a lagging clock) */
            for (int k = 1; k <= c->n_fields; k++) STORE(s + k, 0);
            STORE(s, epoch[i]);
        }
        if (c->floats) {
            double v;
            int64_t bits = LOAD(s + f);
            memcpy(&v, &bits, 8);
            v += d;
            memcpy(&bits, &v, 8);
            STORE(s + f, bits);
        } else {
            STORE(s + f, LOAD(s + f) + n);
        }
    }
    return 0;
}

/* ---- the keeper: liveness the kernel certifies ---------------------------------------- *
 * A stripe is never adopted while its owner lives, whatever /proc shows (hidepid, another
 * uid, another PID namespace): each stripe entry holds a robust mutex that its owner process
 * keeps locked for as long as it writes the row. Locks belong to threads, and any Python
 * thread may end, so one plain C thread per process -- the keeper -- takes and gives them
 * back on request. When the owner dies, the kernel marks the mutex owner-dead, and only then
 * (or when it is free) can a claimer take it. The failure mode is "slower", never "shared".
 * A mutex is always given back before its mapping goes away (its robust-list links live in
 * it). After fork() the child has no keeper (and holds nothing): the next request starts one. */

enum { KEEP_TAKE = 1, KEEP_GIVE = 2 };
static pthread_mutex_t keep_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t keep_cv = PTHREAD_COND_INITIALIZER;
static int keep_started, keep_state;  /* state: 0 idle, 1 request posted, 2 answered */
static int keep_op, keep_rc;
static pthread_mutex_t *keep_arg;

static void *keeper_main(void *unused) {
    (void)unused;
    pthread_mutex_lock(&keep_mu);
    for (;;) {
        while (keep_state != 1) pthread_cond_wait(&keep_cv, &keep_mu);
        if (keep_op == KEEP_TAKE) {
            keep_rc = pthread_mutex_trylock(keep_arg);
            if (keep_rc == EOWNERDEAD) keep_rc = pthread_mutex_consistent(keep_arg);  /* a dead owner's */
        } else {
            keep_rc = pthread_mutex_unlock(keep_arg);
        }
        keep_state = 2;
        pthread_cond_broadcast(&keep_cv);
    }
    return NULL;
}

static void keeper_after_fork(void) {  /* the child: no keeper thread, nothing held */
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    keep_mu = mu;
    keep_cv = cv;
    keep_started = keep_state = 0;
}

/* Ask the keeper to take (trylock; 0 = now ours) or give back a mutex: a pthread code. */
static int keeper(int op, pthread_mutex_t *m) {
    pthread_mutex_lock(&keep_mu);
    if (!keep_started) {
        int err = start_thread(keeper_main);
        if (err != 0) {
            pthread_mutex_unlock(&keep_mu);
            return err;
        }
        keep_started = 1;
    }
    while (keep_state != 0) pthread_cond_wait(&keep_cv, &keep_mu);
    keep_op = op;
    keep_arg = m;
    keep_state = 1;
    pthread_cond_broadcast(&keep_cv);
    while (keep_state != 2) pthread_cond_wait(&keep_cv, &keep_mu);
    int rc = keep_rc;
    keep_state = 0;
    pthread_cond_broadcast(&keep_cv);
    pthread_mutex_unlock(&keep_mu);
    return rc;
}

/* ---- the reserver: the kernel's part of a growing table, done ahead ------------------- *
 * A page of /dev/shm that a segment has not used yet costs microseconds to get (allocated,
 * zeroed, charged to the cgroup, mapped): on a VM, more than all the rest of a new key's
 * first hit. So a large table has this process's reserver thread get the pages of its next
 * chunk of rows as soon as one is reserved -- posix_fallocate, then MADV_POPULATE_WRITE --
 * while the keys fill this one. (The next index copy is not fetched ahead: which level a
 * rebuild writes depends on how many keys went idle, and a copy got for nothing would stay
 * held; measured, it gained nothing either.) The reserver writes no byte of the segment and no shared word: it
 * is a prefetch of kernel work, and a crash anywhere in it leaves only allocated pages that
 * a later reserve covers anyway. When the table reaches those pages, the foreground
 * reserves them without a syscall if the reserver got exactly them; otherwise (not done
 * yet: it waits; not started: it cancels; failed) it reserves them itself, as always. The
 * reserver never takes the last of /dev/shm: it runs only while the file system has 8
 * times the job free, and a failed posix_fallocate gives back what it took. A few jobs at
 * a time per process; close() cancels or waits for its own. */

enum { JOB_IDLE, JOB_POSTED, JOB_RUNNING, JOB_DONE };
#define AHEAD_MIN_ROWS 4096    /* tables this large grow by a quarter, their next pages prefetched */
#define JOBS 4
typedef struct {
    int state, ok;
    const void *owner;         /* the Core the job is for (compared, never followed) */
    int fd;                    /* a dup of the segment's fd while posted or running, else -1 */
    char *addr;                /* [from, to) as mapped in this process */
    int64_t from, to;          /* byte offsets in the segment */
} Job;
static pthread_mutex_t jobs_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jobs_cv = PTHREAD_COND_INITIALIZER;
static int reserver_started;
static Job jobs[JOBS] = {{.fd = -1}, {.fd = -1}, {.fd = -1}, {.fd = -1}};
static long long jobs_posted, jobs_done, jobs_used;  /* for tests: see reserver_counts() */

static Job *next_job(void) {
    for (int i = 0; i < JOBS; i++)
        if (jobs[i].state == JOB_POSTED) return &jobs[i];
    return NULL;
}

static void *reserver_main(void *unused) {
    (void)unused;
    pthread_mutex_lock(&jobs_mu);
    for (;;) {
        Job *j;
        while ((j = next_job()) == NULL) pthread_cond_wait(&jobs_cv, &jobs_mu);
        j->state = JOB_RUNNING;
        int fd = j->fd;
        char *addr = j->addr;
        int64_t from = j->from, len = j->to - j->from;
        pthread_mutex_unlock(&jobs_mu);
        struct statvfs fs;
        int ok = fstatvfs(fd, &fs) == 0 && (int64_t)fs.f_bavail * (int64_t)fs.f_frsize >= 8 * len &&
                 posix_fallocate(fd, from, len) == 0;
        if (ok) (void)madvise(addr, (size_t)len, MADV_POPULATE_WRITE_OR_NONE);
        pthread_mutex_lock(&jobs_mu);
        j->fd = -1;  /* first: a fork's child never closes a number reused meanwhile */
        close(fd);
        j->ok = ok;
        jobs_done += ok;
        j->state = JOB_DONE;
        pthread_cond_broadcast(&jobs_cv);
    }
    return NULL;
}

static void reserver_after_fork(void) {  /* the child: no reserver thread, no jobs */
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    jobs_mu = mu;
    jobs_cv = cv;
    reserver_started = 0;
    jobs_posted = jobs_done = jobs_used = 0;
    for (int i = 0; i < JOBS; i++) {
        if (jobs[i].fd >= 0) close(jobs[i].fd);  /* the child's copy of a job's descriptor */
        jobs[i] = (Job){.fd = -1};
    }
}

/* Ask the reserver for bytes [from, to) of c's segment: in a free job, or in place of one
 * done and never claimed (a hint only); nothing if every job is posted or running. */
static void reserve_ahead(Core *c, int64_t from, int64_t to) {
    pthread_mutex_lock(&jobs_mu);
    Job *j = NULL;
    for (int i = 0; i < JOBS && j == NULL; i++)
        if (jobs[i].state == JOB_IDLE) j = &jobs[i];
    for (int i = 0; i < JOBS && j == NULL; i++)
        if (jobs[i].state == JOB_DONE) j = &jobs[i];
    if (j == NULL || from >= to) goto out;
    if (!reserver_started) {
        if (start_thread(reserver_main) != 0) goto out;
        reserver_started = 1;
    }
    int fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0);  /* the reserver's own, never inherited by an exec */
    if (fd < 0) goto out;
    *j = (Job){JOB_POSTED, 0, c, fd, c->base + from, from, to};
    jobs_posted++;
    pthread_cond_broadcast(&jobs_cv);
out:
    pthread_mutex_unlock(&jobs_mu);
}

/* Did the reserver get all of [from, to) of c's segment? Each of c's jobs that meets the
 * range is settled first: waited for if running, cancelled if not started (the caller then
 * does that work itself), and let go once done. */
static int reserved_ahead(Core *c, int64_t from, int64_t to) {
    int got = 0;
    pthread_mutex_lock(&jobs_mu);
    for (int i = 0; i < JOBS; i++) {
        Job *j = &jobs[i];
        if (j->owner != c || j->state == JOB_IDLE) continue;
        if (!(from == 0 && to == 0) && (j->to <= from || to <= j->from)) continue;  /* (0, 0): all */
        if (j->state == JOB_POSTED) {
            close(j->fd);
            j->fd = -1;
            j->state = JOB_IDLE;
        }
        while (j->state == JOB_RUNNING) pthread_cond_wait(&jobs_cv, &jobs_mu);
        if (j->state == JOB_DONE) {
            if (j->ok && j->from <= from && to <= j->to) got = 1;
            j->state = JOB_IDLE;
        }
        j->owner = NULL;
    }
    jobs_used += got;
    pthread_mutex_unlock(&jobs_mu);
    return got;
}

/* Before c's mapping may go: no job of c's is left posted, running or done. */
static void reserver_forget(Core *c) { (void)reserved_ahead(c, 0, 0); }

/* ---- stripes: the unkeyed striped window's per-process rows -------------------------- */

#define STRIPE(c, r) W((c), (c)->stripes_off + (int64_t)(r) * STRIPE_ENTRY_BYTES)
#define STRIPE_MUTEX(c, r) \
    ((pthread_mutex_t *)((char *)STRIPE((c), (r)) + STRIPE_MUTEX_OFF))

/* Section "claim": under LOCK_STRIPES, take the first row whose liveness mutex the keeper
 * can take (free, or its owner dead): 1 and *row, 0 if every row is live, -1 error.
 * rows_in_use grows before the owner is written, so a tear only makes readers sum a row
 * too many; the owner word goes last. */
static int claim_row(Core *c, int64_t owner, int64_t start, int64_t *row) {
    int64_t n = c->n_rows - 1, *in_use = W(c, ROWS_IN_USE_OFF);
    int got = 0;
    if (n < 1) return 0;
    if (lock_take_ex(c, LOCK_STRIPES, 1) < 0) return -1;
    for (int64_t j = 0; j < n && !got; j++) {
        int64_t r = 1 + j;
        int rc = keeper(KEEP_TAKE, STRIPE_MUTEX(c, r));
        if (rc == EBUSY) continue;  /* a live owner: never shared */
        if (rc != 0) {
            PyErr_Format(ErrCorrupt, "window %R: stripe %lld's liveness lock is unusable (error %d)",
                         c->name, (long long)r, rc);
            got = -1;
            break;
        }
        int64_t *e = STRIPE(c, r);
        SECTION("claim");
        if (LOAD(in_use) < r + 1) STORE(in_use, r + 1);
        STORE(e + 1, start);
        STORE(e + 2, owner);
        STORE(e + 3, host_mono_ns());
        STORE(e, owner);
        END_SECTION();
        *row = r;
        got = 1;
    }
    lock_give(c, LOCK_STRIPES);
    return got;
}

/* Give our stripe's liveness mutex back (the row's data stays, counted): before close()
 * unmaps, or when the stripe is released. Only the process that took it holds it. */
static void give_stripe(Core *c) {
    if (c->stripe_gen == fork_gen && c->stripe_row > 0 && c->base != NULL)
        keeper(KEEP_GIVE, STRIPE_MUTEX(c, c->stripe_row));
    c->stripe_gen = 0;
    c->stripe_row = 0;
}

/* This process's stripe row, or 0 for the shared row. After a fork or at first use, ask
 * Python's callback for (pid, start ticks) -- for display only -- and claim in C, so the
 * claim and this record of it cannot be separated by an exception. */
static int stripe_of(Core *c, int64_t *row) {
    if (c->stripe_gen == fork_gen && (c->stripe_row > 0 || mono_ns() < c->retry_ns)) {
        *row = c->stripe_row;
        return 0;
    }
    long long owner, start;
    PyObject *v = PyObject_CallNoArgs(c->claim);
    int64_t got = 0;
    if (v == NULL) return -1;
    if (!PyArg_ParseTuple(v, "LL", &owner, &start) || still_open(c) < 0 ||
        claim_row(c, owner, start, &got) < 0) {
        Py_DECREF(v);
        return -1;
    }
    Py_DECREF(v);
    c->stripe_row = got;
    c->stripe_owner = owner;
    c->stripe_gen = fork_gen;
    c->retry_ns = mono_ns() + NS;  /* every stripe taken: look again in a second */
    *row = got;
    return 0;
}

/* Is stripe r's owner alive? Probed by taking its mutex in this thread for an instant. */
static int stripe_alive(Core *c, int64_t r) {
    pthread_mutex_t *m = STRIPE_MUTEX(c, r);
    if (c->stripe_gen == fork_gen && c->stripe_row == r) return 1;  /* ours */
    int rc = pthread_mutex_trylock(m);
    if (rc == EBUSY) return 1;
    if (rc == EOWNERDEAD) rc = pthread_mutex_consistent(m);
    if (rc == 0) pthread_mutex_unlock(m);
    return 0;
}

/* ---- keys ------------------------------------------------------------------------------ */

typedef struct {
    unsigned char bytes[MAX_STORED_KEY];
    int64_t len;
    int flags;
    uint64_t hash;
} StoredKey;

/* The bytes a key is stored as, and its hash: str -> UTF-8, bytes as is (exactly those two
 * types, as documented: a bytearray or memoryview could change under the key cache); long
 * keys keep a prefix and a 128-bit keyed digest of the whole. */
static int encode_key(Core *c, PyObject *key, StoredKey *k) {
    const char *raw;
    Py_ssize_t len;
    k->flags = 0;
    if (PyUnicode_Check(key)) {
        raw = PyUnicode_AsUTF8AndSize(key, &len);
        if (raw == NULL) return -1;
        k->flags = FLAG_STR;
    } else if (PyBytes_Check(key)) {
        raw = PyBytes_AS_STRING(key);
        len = PyBytes_GET_SIZE(key);
    } else {
        PyErr_Format(PyExc_TypeError, "a key is a str or bytes, not %.100s", Py_TYPE(key)->tp_name);
        return -1;
    }
    if (len <= MAX_STORED_KEY) {
        memcpy(k->bytes, raw, (size_t)len);
        k->len = len;
    } else {
        uint64_t d0 = siphash13(c->hk0, c->hk1, (const unsigned char *)raw, (size_t)len);
        uint64_t d1 = siphash13(c->hk1, c->hk0 ^ 0x9e3779b97f4a7c15ULL, (const unsigned char *)raw,
                                (size_t)len);
        memcpy(k->bytes, raw, LONG_PREFIX);
        memcpy(k->bytes + LONG_PREFIX, &d0, 8);
        memcpy(k->bytes + LONG_PREFIX + 8, &d1, 8);
        k->len = MAX_STORED_KEY;
        k->flags |= FLAG_DIGEST;
    }
    uint64_t h = siphash13(c->hk0 ^ (uint64_t)k->flags, c->hk1, k->bytes, (size_t)k->len) >> 1;
    k->hash = h ? h : 1;  /* fits an i64, never 0: 0 marks an entry with no key */
    return 0;
}

/* ---- the key table: an index over a heap of rows (layout.py, "Key table") ------------ *
 * The index maps a key's hash to the heap row that holds the key's identity (its header)
 * and its counts. Everything here runs under LOCK_KEYS except find_key, which is lock-free:
 * what it finds is a hint, confirmed by the row's generation under the row's lock. Row
 * generations only change under LOCK_KEYS and only go up (in absolute value), so a cached
 * (row, generation) can never name another key. */

#define E_GEN 0                /* index entry words */
#define E_HASH 1
#define E_ROW 2
#define ENTRY_WORDS (KEY_ENTRY_BYTES / WORD)
#define RGEN(row) ((int64_t *)(row))          /* a keyed row's key header words */
#define RLAST(row) ((int64_t *)(row) + 1)
#define RHASH(row) ((int64_t *)(row) + 2)
#define RLEN(row) ((int64_t *)(row) + 3)
#define RKEY(row) ((char *)(row) + KEY_BYTES_OFF)
#define KEYWORD(c, off) W((c), (off))     /* the key table's state words in the header */
#define MAX_GEN (INT64_C(1) << 62)  /* a generation's size never gets near it: beyond is junk */

/* ---- the key table's state words: checked where they are loaded ------------------------ *
 * They lie outside the header's checksum and change under LOCK_KEYS while others read them
 * lock-free. Three decide where memory is touched -- the index descriptor, rows_top and
 * rows_reserved -- and the file is sparse: a value within bounds but past what was reserved
 * would send a reader into a hole, where a fault on a full /dev/shm is a SIGBUS. So each of
 * the three carries its own check, written in the same store: value | tag << 32, the tag a
 * mix of the value, the word's offset and the segment's hash key (layout.state_word). Junk
 * fails it (a zeroed or flipped word, a copy of another word) and is a CorruptSegmentError.
 * The other words only count (keys, index_used) or time (rebuilt_ns): clamped where loaded. */
static uint32_t state_tag(const Core *c, int64_t off, uint64_t v) {
    uint64_t x = (v | (uint64_t)off << 32) ^ c->hk0;
    x *= c->hk1 | 1;
    x ^= x >> 32;
    x *= 0x9e3779b97f4a7c15ULL;
    return (uint32_t)(x >> 32);
}
#define STORE_STATE(c, off, v) \
    STORE(KEYWORD(c, off), (int64_t)((uint64_t)state_tag((c), (off), (uint64_t)(v)) << 32 | (uint64_t)(v)))

/* A checked state word's value, in [0, most]; -1 with CorruptSegmentError set if it fails. */
static int64_t load_state(Core *c, int64_t off, int64_t most, const char *what) {
    uint64_t w = (uint64_t)LOAD(KEYWORD(c, off)), v = w & 0xFFFFFFFFu;
    if ((uint32_t)(w >> 32) == state_tag(c, off, v) && v <= (uint64_t)most) return (int64_t)v;
    PyErr_Format(ErrCorrupt, "window %R: its key table's %s word (%lld) fails its check: the segment "
                 "is corrupt", c->name, what, (long long)w);
    return -1;
}

/* A counting state word, clamped to [0, most]: junk there miscounts, never overflows. */
static int64_t load_count(Core *c, int64_t off, int64_t most) {
    int64_t v = LOAD(KEYWORD(c, off));
    return v < 0 ? 0 : v > most ? most : v;
}
#define KEYS(c) load_count((c), KEYS_OFF, (c)->n_rows)
#define INDEX_USED(c) load_count((c), INDEX_USED_OFF, (c)->key_slots << ((c)->index_levels - 1))

/* Under LOCK_KEYS, before an insert counts on them: the counting words within their bounds
 * (at most a key per row; at most every entry of the index used), as attach checks them. */
static int counts_ok(Core *c, int64_t slots) {
    int64_t keys = LOAD(KEYWORD(c, KEYS_OFF)), used = LOAD(KEYWORD(c, INDEX_USED_OFF));
    if (keys >= 0 && keys <= c->n_rows && used >= 0 && used <= slots) return 0;
    PyErr_Format(ErrCorrupt, "window %R: its key table counts %lld keys in %lld index entries, out of "
                 "range: the segment is corrupt", c->name, (long long)keys, (long long)used);
    return -1;
}

typedef struct {
    int64_t *base;   /* entry 0 */
    int64_t slots;   /* a power of two */
    int64_t index;   /* 2 x level + copy */
} Index;

static Index index_copy(Core *c, int64_t index) {
    int64_t level = index >> 1, copy = index & 1;
    Index x = {W(c, c->keys_off + KEY_ENTRY_BYTES * c->key_slots *
                        (2 * ((1LL << level) - 1) + copy * (1LL << level))),
               c->key_slots << level, index};
    return x;
}

/* The published index; a junk descriptor is an error, never a wild read. */
static int current_index(Core *c, Index *x) {
    int64_t d = load_state(c, INDEX_OFF, 2 * c->index_levels - 1, "index descriptor");
    if (d < 0) return -1;
    *x = index_copy(c, d);
    return 0;
}
#define ENT(x, p) ((x)->base + (p) * ENTRY_WORDS)
#define PROBE(x, h, p, i) \
    for (int64_t i = 0, p = (int64_t)((h) & (uint64_t)((x)->slots - 1)); i < MAX_PROBES && i < (x)->slots; \
         i++, p = (p + 1) & ((x)->slots - 1))

/* Rows that may be followed: those handed out, every one reserved. 0, or -1 with an error.
 * rows_top is loaded first: a writer stores rows_reserved before it, so top <= reserved. */
static int rows_top(Core *c, int64_t *top) {
    int64_t t = load_state(c, ROWS_TOP_OFF, c->n_rows, "rows_top"), reserved;
    if (t < 0 || (reserved = load_state(c, ROWS_RESERVED_OFF, c->n_rows, "rows_reserved")) < 0) return -1;
    if (t > reserved) {
        PyErr_Format(ErrCorrupt, "window %R: its key table hands out %lld rows but reserved only %lld: "
                     "the segment is corrupt", c->name, (long long)t, (long long)reserved);
        return -1;
    }
    *top = t;
    return 0;
}

static int row_holds(char *row, const StoredKey *k) {
    return LOAD(RHASH(row)) == (int64_t)k->hash && LOAD(RLEN(row)) == (k->len | (int64_t)k->flags << 32) &&
           memcmp(RKEY(row), k->bytes, (size_t)k->len) == 0;
}

/* Lock-free lookup: 1 and (row, generation) if found, 0 if not, -1 error. An entry being
 * written (negative generation) or pointing at a row that no longer holds it never matches. */
static int find_key(Core *c, const StoredKey *k, int64_t *slot, int64_t *gen) {
    Index x;
    int64_t top;
    if (current_index(c, &x) < 0 || rows_top(c, &top) < 0) return -1;
    PROBE(&x, k->hash, p, i) {
        int64_t *e = ENT(&x, p), g = LOAD(e + E_GEN);
        if (g == 0) return 0;  /* never used: the key would have been placed here or before */
        if (g < 0 || g >= MAX_GEN || LOAD(e + E_HASH) != (int64_t)k->hash) continue;
        int64_t r = LOAD(e + E_ROW);
        if (r < 0 || r >= top) continue;
        char *row = ROW(c, r);
        if (LOAD(RGEN(row)) == g && row_holds(row, k) && LOAD(e + E_GEN) == g) {
            *slot = r;
            *gen = g;
            return 1;
        }
    }
    return 0;
}

/* now - last > idle_ns, without the subtraction: a junk last_ns never overflows it (now >= 0). */
static int idle(Core *c, int64_t slot, int64_t now) {
    return LOAD(RLAST(ROW(c, slot))) < now - c->idle_ns;
}

/* The row entry e points at if it holds a key whose row agrees (generation and hash), else -1. */
static int64_t live_row(Core *c, int64_t *e, int64_t top) {
    int64_t g = LOAD(e + E_GEN), h = LOAD(e + E_HASH), r = LOAD(e + E_ROW);
    if (g <= 0 || g >= MAX_GEN || h == 0 || r < 0 || r >= top) return -1;
    char *row = ROW(c, r);
    return LOAD(RGEN(row)) == g && LOAD(RHASH(row)) == h ? r : -1;
}

/* OutOfSpaceError(errno, message): the segment could not grow; nothing was written. */
static int space_error(Core *c, int err, const char *what) {
    PyObject *msg = PyUnicode_FromFormat("no room in /dev/shm for %s in window %R (%s): free some "
                                         "space, or give the window a capacity and an on_full policy",
                                         what, c->name, strerror(err));
    PyObject *args = msg ? Py_BuildValue("(iN)", err, msg) : NULL;
    if (args != NULL) {
        PyErr_SetObject(ErrSpace, args);
        Py_DECREF(args);
    }
    return -1;
}

/* The heap's next size after `have` rows: half again (at least 8) while small, then a
 * quarter, with the next quarter prefetched by the reserver. */
static int64_t grown(Core *c, int64_t have) {
    int64_t want = have + (have >= AHEAD_MIN_ROWS ? have / 4 : have / 2 > 8 ? have / 2 : 8);
    return want > c->n_rows ? c->n_rows : want;
}

/* Rows [from, to) as page-aligned byte offsets in the segment; 0 <= from <= to <= n_rows
 * (from checked words only), so no product passes the mapping's size. */
static void row_pages(Core *c, int64_t from, int64_t to, int64_t *lo, int64_t *hi) {
    *lo = c->rows_off + from * c->row_bytes;
    *hi = c->rows_off + to * c->row_bytes;
    *lo -= *lo % 4096;
    *hi = (*hi + 4095) / 4096 * 4096;
    if (*hi > c->map_bytes) *hi = c->map_bytes;
}

/* Reserve heap rows up to at least `need` (posix_fallocate: a full /dev/shm is an error now,
 * never a SIGBUS later), unless the reserver already did. */
static int reserve_rows(Core *c, int64_t have, int64_t need) {
    int64_t want = grown(c, have), from, to;
    if (want < need) want = need > c->n_rows ? c->n_rows : need;
    row_pages(c, have, want, &from, &to);
    if (!reserved_ahead(c, from, to)) {
        int err = posix_fallocate(c->fd, from, to - from);
        if (err != 0) return space_error(c, err, "more keys");
        /* Map the new rows into this process in one call rather than one fault per page
         * (Linux 5.14+; elsewhere, or if it fails, the pages simply fault in as touched). */
        (void)madvise(c->base + from, (size_t)(to - from), MADV_POPULATE_WRITE_OR_NONE);
    }
    STORE_STATE(c, ROWS_RESERVED_OFF, want);
    if (want >= AHEAD_MIN_ROWS && want < c->n_rows) {
        row_pages(c, want, grown(c, want), &from, &to);
        reserve_ahead(c, from, to);
    }
    return 0;
}

/* An index copy's bytes in the segment, page-aligned. */
static void index_pages(Core *c, const Index *x, int64_t *lo, int64_t *hi) {
    *lo = (char *)x->base - c->base;
    *hi = *lo + x->slots * KEY_ENTRY_BYTES;
    *lo -= *lo % 4096;
}

/* Reserve the memory of an index copy before writing it. */
static int reserve_index(Core *c, const Index *x) {
    int64_t from, to;
    index_pages(c, x, &from, &to);
    int err = posix_fallocate(c->fd, from, to - from);
    if (err != 0) return space_error(c, err, "a larger key index");
    (void)madvise(c->base + from, (size_t)(to - from), MADV_POPULATE_WRITE_OR_NONE);  /* as rows */
    return 0;
}

/* The index level a rebuild keeping `kept` keys writes: a load of at most 1/4. */
static int64_t level_for(Core *c, int64_t kept) {
    int64_t level = 0;
    while (level + 1 < c->index_levels && (c->key_slots << level) < 4 * (kept + 1)) level++;
    return level;
}

/* Section "rebuild": a new index holding every key whose row is not idle, in the copy
 * nobody reads, sized for a load of at most 1/4; idle keys' rows go to the free list.
 * Caller holds LOCK_KEYS. Order: dropped rows are unpublished (negative generation, under
 * their row locks) first, so no writer counts into a key the new index forgets; the new
 * index is published with one store; the free list is written last. A tear anywhere is
 * undone by the repair (repair_keys): it keeps the current index and frees unreferenced rows;
 * a failure midway finishes the drops in the current index (drop_marked).
 * Each key's row is read once, in the first pass (its lines fetched a few entries ahead):
 * what that pass decides is kept in `fate`, which the later passes follow. Under LOCK_KEYS
 * no row's generation changes but by this section's own stores, so the decision holds. */
enum { FATE_NONE, FATE_KEEP, FATE_DROP };
#define AHEAD 8                /* entries ahead whose rows (or new places) are fetched early */

/* A rebuild that fails (a row lock timed out, no room for the new index) after unpublishing
 * idle rows finishes dropping them from the current index instead: each entry becomes a
 * tombstone, as clear() leaves, and its row goes to the free list. Nothing counted is lost
 * (they were idle) and no row is left unpublished yet named. Entries before `upto` only. */
static void drop_marked(Core *c, Index *cur, const unsigned char *fate, int64_t upto) {
    int64_t head = LOAD(KEYWORD(c, FREE_HEAD_OFF)), keys = KEYS(c);
    for (int64_t p = 0; p < upto; p++) {
        if (fate[p] != FATE_DROP) continue;
        int64_t *e = ENT(cur, p), g = LOAD(e + E_GEN), r = LOAD(e + E_ROW);
        char *row = ROW(c, r);
        STORE(e + E_HASH, 0);
        STORE(e + E_GEN, g + 1);  /* a tombstone: probing goes on past it */
        STORE(RHASH(row), 0);
        STORE(RLAST(row), head);
        STORE(RGEN(row), g + 1);  /* free: positive again, holding no key */
        head = r + 1;
        keys--;
    }
    STORE(KEYWORD(c, FREE_HEAD_OFF), head);
    STORE(KEYWORD(c, KEYS_OFF), keys > 0 ? keys : 0);
}

static int rebuild(Core *c, int64_t now) {
    Index cur, next;
    int64_t top, kept = 0;
    if (current_index(c, &cur) < 0 || rows_top(c, &top) < 0) return -1;
    unsigned char *fate = PyMem_Calloc((size_t)cur.slots, 1);
    if (fate == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    SECTION("rebuild");
    for (int64_t p = 0; p < cur.slots; p++) {  /* count, and drop the idle */
        if (p + AHEAD < cur.slots) {
            int64_t ahead = LOAD(ENT(&cur, p + AHEAD) + E_ROW);
            if (ahead >= 0 && ahead < top) __builtin_prefetch(ROW(c, ahead), 0);
        }
        int64_t *e = ENT(&cur, p), r = live_row(c, e, top);
        if (r < 0) continue;
        if (idle(c, r, now)) {
            int lock = row_lock(c, r);
            if (lock_take(c, lock) < 0) {
                drop_marked(c, &cur, fate, p);
                END_SECTION();
                PyMem_Free(fate);
                return -1;
            }
            if (idle(c, r, now) && live_row(c, e, top) == r) {
                STORE(RGEN(ROW(c, r)), -LOAD(e + E_GEN));  /* writers caching it stop matching */
                lock_give(c, lock);
                fate[p] = FATE_DROP;
                continue;
            }
            lock_give(c, lock);
        }
        fate[p] = FATE_KEEP;
        kept++;
    }
    next = index_copy(c, 2 * level_for(c, kept) + ((cur.index & 1) ^ 1));
    if (reserve_index(c, &next) < 0) {  /* nothing published */
        drop_marked(c, &cur, fate, cur.slots);
        END_SECTION();
        PyMem_Free(fate);
        return -1;
    }
    STORE(intent_at(c, LOCK_KEYS), -1);
    memset(next.base, 0, (size_t)(next.slots * KEY_ENTRY_BYTES));
    FAILPOINT();
    for (int64_t p = 0; p < cur.slots; p++) {
        if (p + AHEAD < cur.slots && fate[p + AHEAD] == FATE_KEEP)
            __builtin_prefetch(ENT(&next, (uint64_t)LOAD(ENT(&cur, p + AHEAD) + E_HASH) & (uint64_t)(next.slots - 1)), 1);
        if (fate[p] != FATE_KEEP) continue;
        int64_t *e = ENT(&cur, p);
        PROBE(&next, (uint64_t)LOAD(e + E_HASH), q, i) {
            int64_t *f = ENT(&next, q);
            if (LOAD(f + E_GEN) != 0) continue;
            STORE(f + E_ROW, LOAD(e + E_ROW));
            STORE(f + E_HASH, LOAD(e + E_HASH));
            STORE(f + E_GEN, LOAD(e + E_GEN));
            break;
        }
    }
    STORE(KEYWORD(c, INDEX_USED_OFF), kept);
    STORE(KEYWORD(c, KEYS_OFF), kept);
    STORE(KEYWORD(c, REBUILT_NS_OFF), now);
    STORE_STATE(c, INDEX_OFF, next.index);  /* published */
    int64_t head = LOAD(KEYWORD(c, FREE_HEAD_OFF));
    for (int64_t p = 0; p < cur.slots; p++) {  /* the dropped rows: negative, named by cur */
        if (fate[p] != FATE_DROP) continue;
        int64_t *e = ENT(&cur, p), g = LOAD(e + E_GEN), r = LOAD(e + E_ROW);
        char *row = ROW(c, r);
        STORE(RHASH(row), 0);
        STORE(RLAST(row), head);
        STORE(RGEN(row), g + 1);  /* free: positive again, holding no key */
        head = r + 1;
    }
    STORE(KEYWORD(c, FREE_HEAD_OFF), head);
    END_SECTION();
    PyMem_Free(fate);
    return 0;
}

/* Section "rollback" -- the repair of LOCK_KEYS after its holder died inside "insert" or
 * "rebuild": keep the current index, turn every entry that does not agree with its row into a
 * tombstone, and rebuild the free list from the rows no entry names. The keys so dropped were
 * being inserted (nothing counted yet) or idle (nothing live). Bounded by the table's size.
 * A junk generation (MAX_GEN or more in size) makes its entry a tombstone like any other; its
 * row is left out, named and freed by none, rather than given a generation computed from junk. */
static void repair_keys(Core *c) {
    Index x;
    int64_t top, used = 0, keys = 0, head = 0;
    if (current_index(c, &x) < 0 || rows_top(c, &top) < 0) {
        PyErr_Clear();  /* reported to the next caller by find_key */
        return;
    }
    unsigned char *named = PyMem_Calloc((size_t)(top > 0 ? top : 1), 1);
    if (named == NULL) {
        PyErr_Clear();
        return;
    }
    SECTION("rollback");
    for (int64_t p = 0; p < x.slots; p++) {
        int64_t *e = ENT(&x, p), g = LOAD(e + E_GEN);
        if (g == 0) continue;
        used++;
        if (LOAD(e + E_HASH) == 0 && g > 0) continue;  /* a tombstone */
        int64_t r = live_row(c, e, top);
        if (r < 0 || named[r]) {
            STORE(e + E_HASH, 0);
            STORE(e + E_GEN, g <= -MAX_GEN || g >= MAX_GEN ? 1 : g < 0 ? -g : g);  /* junk: any tombstone */
            continue;
        }
        named[r] = 1;
        keys++;
    }
    for (int64_t r = top - 1; r >= 0; r--) {
        if (named[r]) continue;
        char *row = ROW(c, r);
        int64_t g = LOAD(RGEN(row));
        if (g <= -MAX_GEN || g >= MAX_GEN) continue;  /* junk: the row is left out, named and free by none */
        STORE(RGEN(row), -((g < 0 ? -g : g) + 1));  /* whoever cached it stops matching */
        STORE(RHASH(row), 0);
        STORE(RLAST(row), head);
        STORE(RGEN(row), (g < 0 ? -g : g) + 2);  /* free: positive, holding no key */
        head = r + 1;
    }
    STORE_STATE(c, ROWS_TOP_OFF, top);
    STORE(KEYWORD(c, FREE_HEAD_OFF), head);
    STORE(KEYWORD(c, INDEX_USED_OFF), used);
    STORE(KEYWORD(c, KEYS_OFF), keys);
    END_SECTION();
    PyMem_Free(named);
}

/* A row for a new key: the free list's first, else the next on the heap (reserved now).
 * Nothing is stored: assign() takes it, in its section. */
static int take_row(Core *c, int64_t *r, int *from_free) {
    int64_t head = LOAD(KEYWORD(c, FREE_HEAD_OFF)), top;
    if (rows_top(c, &top) < 0) return -1;
    if (head > 0 && head <= top) {  /* a junk head abandons the free list, never strays */
        *r = head - 1;
        *from_free = 1;
        return 0;
    }
    if (top >= c->n_rows) {
        PyErr_Format(ErrFull, "window %R has handed out all %lld rows", c->name, (long long)c->n_rows);
        return -1;
    }
    /* top <= reserved (rows_top checked it): the heap grows one step past what it holds */
    int64_t reserved = load_state(c, ROWS_RESERVED_OFF, c->n_rows, "rows_reserved");
    if (reserved < 0 || (top >= reserved && reserve_rows(c, reserved, top + 1) < 0)) return -1;
    *r = top;
    *from_free = 0;
    return 0;
}

enum { PLACE_NEW, PLACE_TOMB, PLACE_IDLE };

/* Section "insert": give key k the index entry p and the row r (free, the heap's next, or
 * the idle key's that p held). Caller holds LOCK_KEYS and the row's lock. The row's
 * generation and the entry's are negative from the first stores to the last ones, so if the
 * inserter dies midway no writer that cached the row's old key writes it, lookups skip the
 * entry, and the repair drops both. */
static int64_t assign(Core *c, Index *x, int64_t p, int place, int64_t r, int from_free,
                      const StoredKey *k, int64_t now) {
    int64_t *e = ENT(x, p), *row = (int64_t *)ROW(c, r);
    int64_t old = LOAD(RGEN(row)), next = LOAD(RLAST(row)), used = INDEX_USED(c), keys = KEYS(c);
    if (old <= -MAX_GEN || old >= MAX_GEN) {  /* checked before anything is written */
        PyErr_Format(ErrCorrupt, "window %R: key row %lld holds an impossible generation %lld: the "
                     "segment is corrupt", c->name, (long long)r, (long long)old);
        return -1;
    }
    int64_t gen = (old < 0 ? -old : old) + 1;
    SECTION("insert");
    STORE(intent_at(c, LOCK_KEYS), p);
    STORE(RGEN(row), -gen);  /* first: a writer that cached the row's old key no longer matches */
    STORE(e + E_GEN, -gen);
    if (from_free) STORE(KEYWORD(c, FREE_HEAD_OFF), next);
    else if (place != PLACE_IDLE) STORE_STATE(c, ROWS_TOP_OFF, r + 1);
    STORE(RHASH(row), 0);
    memset(RKEY(row), 0, MAX_STORED_KEY);
    memcpy(RKEY(row), k->bytes, (size_t)k->len);
    FAILPOINT();
    STORE(RLEN(row), k->len | (int64_t)k->flags << 32);
    STORE(RHASH(row), (int64_t)k->hash);
    empty_rings(c, (char *)row);
    STORE(RLAST(row), now);
    STORE(RGEN(row), gen);
    STORE(e + E_ROW, r);
    STORE(e + E_HASH, (int64_t)k->hash);
    STORE(e + E_GEN, gen);  /* published */
    if (place == PLACE_NEW) STORE(KEYWORD(c, INDEX_USED_OFF), used + 1);
    if (place != PLACE_IDLE) STORE(KEYWORD(c, KEYS_OFF), keys + 1);
    END_SECTION();
    return gen;  /* > 0; -1: an error, nothing written */
}

/* ---- the key cache: key object -> (slot, generation), this process only ------------------ *
 * Exact str/bytes keys (their hashes are cached in the objects), laid out as CPython's dict
 * is: a small int32 index, open-addressed by hash, into entries kept in insertion order --
 * so the index stays in cache and keys seen in a steady order are read sequentially. A hit
 * is only a hint: the generation is checked against the row under the row's lock. */

typedef struct CacheEntry {
    PyObject *key;      /* a strong reference */
    Py_hash_t hash;
    int32_t slot, gen;  /* gen 0: stale, look the key up again */
} CacheEntry;

/* Memory for the cache's arrays. Large ones are mapped on their own and marked for huge
 * pages: a probe at a random place then rarely misses the TLB (a page walk is dear, most of
 * all under a VM's nested paging). */
#define HUGE_MIN (2LL << 20)
static void *cache_alloc(size_t bytes) {
    if ((int64_t)bytes < HUGE_MIN) return PyMem_Malloc(bytes);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}
static void cache_free(void *p, size_t bytes) {
    if (p == NULL) return;
    if ((int64_t)bytes < HUGE_MIN) PyMem_Free(p);
    else munmap(p, bytes);
}
#define INDEX_BYTES(c) ((size_t)((c)->cache_mask + 1) * sizeof(int32_t))
#define ENTRIES_BYTES(c) ((size_t)(c)->cache_room * sizeof(CacheEntry))

static void cache_drop(Core *c) {
    for (int64_t i = 0; i < c->cache_used; i++) Py_DECREF(c->cache[i].key);
    cache_free(c->cache, ENTRIES_BYTES(c));
    cache_free(c->cache_index, INDEX_BYTES(c));
    c->cache = NULL;
    c->cache_index = NULL;
    c->cache_mask = -1;
    c->cache_used = c->cache_room = 0;
}

/* The index position of key (found), or of the empty place where it would go. */
static int64_t cache_probe(Core *c, PyObject *key, Py_hash_t h) {
    for (int64_t i = h & c->cache_mask;; i = (i + 1) & c->cache_mask) {
        int32_t at = c->cache_index[i];
        if (at < 0) return i;
        CacheEntry *e = &c->cache[at];
        if (e->key == key || (e->hash == h && Py_TYPE(e->key) == Py_TYPE(key) &&
                              PyObject_RichCompareBool(e->key, key, Py_EQ) == 1))
            return i;
    }
}

/* Exact str/bytes of at most MAX_STORED_KEY characters: the cache never holds big keys alive. */
static int cacheable(PyObject *key) {
    return (PyUnicode_CheckExact(key) && PyUnicode_GET_LENGTH(key) <= MAX_STORED_KEY) ||
           (PyBytes_CheckExact(key) && PyBytes_GET_SIZE(key) <= MAX_STORED_KEY);
}

static CacheEntry *cache_get(Core *c, PyObject *key) {
    if (c->cache_used == 0 || !cacheable(key)) return NULL;
    int32_t at = c->cache_index[cache_probe(c, key, PyObject_Hash(key))];
    return at >= 0 && c->cache[at].gen > 0 ? &c->cache[at] : NULL;
}

static int cache_grow(Core *c) {
    if (c->cache_used == c->cache_room) {
        int64_t room = c->cache_room ? 2 * c->cache_room : 32;
        CacheEntry *more = cache_alloc((size_t)room * sizeof(CacheEntry));
        if (more == NULL) return -1;
        if (c->cache_used > 0) memcpy(more, c->cache, (size_t)c->cache_used * sizeof(CacheEntry));
        cache_free(c->cache, ENTRIES_BYTES(c));
        c->cache = more;
        c->cache_room = room;
    }
    /* keep the index at most a quarter full: a miss (every new key) then rarely reads an entry */
    if (4 * (c->cache_used + 1) > c->cache_mask + 1) {
        int64_t size = c->cache_mask < 0 ? 64 : 2 * (c->cache_mask + 1);
        int32_t *index = cache_alloc((size_t)size * sizeof(int32_t));
        if (index == NULL) return -1;
        memset(index, 0xff, (size_t)size * sizeof(int32_t));
        cache_free(c->cache_index, c->cache_index ? INDEX_BYTES(c) : 0);
        c->cache_index = index;
        c->cache_mask = size - 1;
        for (int64_t j = 0; j < c->cache_used; j++) {
            int64_t i = c->cache[j].hash & c->cache_mask;
            while (index[i] >= 0) i = (i + 1) & c->cache_mask;
            index[i] = (int32_t)j;
        }
    }
    return 0;
}

static void remember(Core *c, PyObject *key, int64_t slot, int64_t gen) {
    if (!cacheable(key) || gen >= INT32_MAX || slot >= INT32_MAX) return;
    if (c->cache_used >= 4 * KEYS(c) + 256) cache_drop(c);  /* churn: start over */
    if (cache_grow(c) < 0) return;  /* a cache only */
    Py_hash_t h = PyObject_Hash(key);
    int64_t i = cache_probe(c, key, h);
    if (c->cache_index[i] < 0) {
        c->cache_index[i] = (int32_t)c->cache_used;
        c->cache[c->cache_used++] = (CacheEntry){Py_NewRef(key), h, 0, 0};
    }
    c->cache[c->cache_index[i]].slot = (int32_t)slot;
    c->cache[c->cache_index[i]].gen = (int32_t)gen;
}

/* Where k goes in index x: the first entry on its probe path that is never used, a tombstone,
 * or (if idle_ok) an idle key's, whose row k then takes. -1 if the path is full. Without
 * idle_ok no other key's row is read: a new key costs only the index lines it probes. */
static int64_t place_of(Core *c, Index *x, int64_t top, const StoredKey *k, int64_t now, int idle_ok,
                        int *place) {
    PROBE(x, k->hash, p, i) {
        int64_t *e = ENT(x, p), g = LOAD(e + E_GEN);
        if (g == 0 || (g > 0 && LOAD(e + E_HASH) == 0)) {
            *place = g == 0 ? PLACE_NEW : PLACE_TOMB;
            return p;
        }
        int64_t r = idle_ok ? live_row(c, e, top) : -1;
        if (r >= 0 && idle(c, r, now)) {
            *place = PLACE_IDLE;
            return p;
        }
        r = LOAD(e + E_ROW);
        if (g > 0 && LOAD(e + E_HASH) == (int64_t)k->hash && r >= 0 && r < top && row_holds(ROW(c, r), k)) {
            /* k's entry, whose row says another generation: under LOCK_KEYS only junk does that */
            PyErr_Format(ErrCorrupt, "window %R: key entry %lld and its row %lld disagree on the "
                         "key's generation: the segment is corrupt", c->name, (long long)p, (long long)r);
            *place = -1;
            return -2;
        }
    }
    return -1;
}

/* May a rebuild run to make room at `now`? At most once a second (or a span, if shorter) of
 * this caller's clock: a table full of live keys must not turn every refused insert into a
 * scan, and no key can have gone idle sooner. */
static int may_rebuild(Core *c, int64_t now) {
    int64_t last = LOAD(KEYWORD(c, REBUILT_NS_OFF)), since;
    if (__builtin_sub_overflow(now, last, &since)) return 1;  /* junk: a long time ago */
    return since >= (c->idle_ns < NS ? c->idle_ns : NS) || since < 0;
}

static void forget(Core *c, PyObject *key) {
    CacheEntry *hint = cache_get(c, key);
    if (hint != NULL) hint->gen = 0;
    PyErr_Clear();  /* a cache only */
}

/* Insert k under LOCK_KEYS: 1 holding the row lock of *slot, -1 error (nothing held). */
static int insert_key(Core *c, PyObject *key, const StoredKey *k, int64_t now, int64_t *slot) {
    if (lock_take_ex(c, LOCK_KEYS, 1) < 0) return -1;
    int rebuilt = 0;
    for (int attempt = 0; attempt < 8; attempt++) {
        int64_t r, g;
        int found = find_key(c, k, &r, &g), place, from_free = 0;
        if (found < 0) goto fail;
        if (found) {  /* inserted meanwhile by another process: definitive under LOCK_KEYS */
            int lock = row_lock(c, r);
            if (lock_take(c, lock) < 0) goto fail;
            if (LOAD(RGEN(ROW(c, r))) == g) {
                lock_give(c, LOCK_KEYS);
                remember(c, key, r, g);
                *slot = r;
                return 1;
            }
            lock_give(c, lock);
            PyErr_Format(ErrCorrupt, "window %R: key row %lld changed generation under the key "
                         "table lock: the segment is corrupt", c->name, (long long)r);
            goto fail;
        }
        Index x;
        int64_t p = -1, top;
        if (current_index(c, &x) < 0 || rows_top(c, &top) < 0 || counts_ok(c, x.slots) < 0) goto fail;
        if (2 * (INDEX_USED(c) + 1) <= x.slots) {
            /* An idle key's entry is taken only when there is no other room: a full table or
             * probe path. Otherwise idle keys wait for the next rebuild, which frees their rows
             * (at most every slots/4 inserts), and a new key reads no other key's row. */
            p = place_of(c, &x, top, k, now, 0, &place);
            if (p == -1 || (p >= 0 && KEYS(c) >= c->n_rows)) p = place_of(c, &x, top, k, now, 1, &place);
        }
        if (p == -2) goto fail;
        int full = p >= 0 && place != PLACE_IDLE && KEYS(c) >= c->n_rows;
        if (p < 0 || full) {  /* the index needs room, or the table holds `capacity` keys */
            if (!rebuilt && (!full || may_rebuild(c, now))) {
                if (rebuild(c, now) < 0) goto fail;
                rebuilt = 1;
                continue;
            }
            if (full || p < 0) {
                lock_give(c, LOCK_KEYS);
                PyErr_Format(ErrFull, "no room for key %R in window %R: it holds %lld live keys, its "
                             "capacity. Give it a larger capacity (or none: the table then grows)",
                             key, c->name, (long long)KEYS(c));
                return -1;
            }
        }
        if (place == PLACE_IDLE) r = LOAD(ENT(&x, p) + E_ROW);
        else if (take_row(c, &r, &from_free) < 0) goto fail;
        int lock = row_lock(c, r);
        if (lock_take(c, lock) < 0) goto fail;
        if (place == PLACE_IDLE && (live_row(c, ENT(&x, p), top) != r || !idle(c, r, now))) {
            lock_give(c, lock);  /* written while we waited for its lock: look again */
            continue;
        }
        g = assign(c, &x, p, place, r, from_free, k, now);
        if (g < 0) {
            lock_give(c, lock);
            goto fail;
        }
        lock_give(c, LOCK_KEYS);
        remember(c, key, r, g);
        *slot = r;
        return 1;
    }
    PyErr_Format(ErrFull, "no room for key %R in window %R: every place for it kept being taken",
                 key, c->name);
fail:
    lock_give(c, LOCK_KEYS);
    return -1;
}

/* Fetch the lines a section at `now` will touch in row s: its head (key header and ring 0's
 * header) and ring 0's current bucket, in parallel, while the lock is being taken. */
static void prefetch_row(Core *c, int64_t s, int64_t now) {
    char *row = ROW(c, s);
    const Ring *r = &c->rings[0];
    __builtin_prefetch(row, 1);
    __builtin_prefetch(BUCKET(c, RING(c, row, 0), r, now / r->bucket_ns), 1);
}

/* Find key and lock its row: 1 holding it (*slot), 0 absent (and not created), -1 error.
 * Bounded: two lock-free tries, then the insert path, which is definitive under LOCK_KEYS. */
static int lock_key(Core *c, PyObject *key, int create, int64_t now, int64_t *slot) {
    StoredKey k;
    int encoded = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        int64_t s, g;
        CacheEntry *hint = cache_get(c, key);
        if (hint != NULL) {
            s = hint->slot;
            g = hint->gen;
        } else {
            if (!encoded && encode_key(c, key, &k) < 0) return -1;
            encoded = 1;
            int found = find_key(c, &k, &s, &g);
            if (found < 0) return -1;
            if (!found) break;
        }
        prefetch_row(c, s, now);
        int lock = row_lock(c, s);
        if (lock_take_ex(c, lock, 1) < 0) return -1;
        if (LOAD((int64_t *)ROW(c, s)) == g) {
            if (hint == NULL) remember(c, key, s, g);
            *slot = s;
            return 1;
        }
        lock_give(c, lock);  /* the entry was given to another key meanwhile: look again */
        if (hint != NULL) {
            hint = cache_get(c, key);  /* the table may have moved while we waited */
            if (hint != NULL) hint->gen = 0;
        }
    }
    if (!create) return 0;
    if (!encoded && encode_key(c, key, &k) < 0) return -1;
    return insert_key(c, key, &k, now, slot);
}

/* ---- log rings: a rate kept as hit times, exactly ------------------------------------------
 * A log ring's slots are entries (t_ns, hits) in no order; its bucket_ns is the period P. An
 * entry counts while hits > 0 and t >= now - P (as in limits' moving window): a hit is
 * forgotten 1 ns after P has passed. A new hit
 * takes a slot that counts nothing. If every slot counts, the two oldest entries are merged
 * into the newer one's time: their hits are forgotten later, never earlier (strict, no longer
 * exact). A rate of at most n hits per period never merges: each entry holds a hit or more.
 * Nothing is derived, so a tear loses at most the call's own hit, or (mid-merge) counts the
 * oldest entry's hits twice until they leave: refusals early, never admissions late. */
#define LOG_ENTRY(c, hdr, s) ((hdr) + ((c)->head_slots + (s)) * (c)->slot_words)

typedef struct {
    int64_t free_slot, oldest, second;  /* slots; -1: none */
} LogPlace;

static int log_counts(const Ring *r, int64_t t, int64_t hits, int64_t now) {
    return hits > 0 && t >= now - r->bucket_ns;  /* a time ahead of now (a clock behind) counts */
}

/* Hits a log ring counts at now (saturating: junk never wraps), and where a new hit goes. */
static int64_t log_scan(Core *c, int64_t *hdr, const Ring *r, int64_t now, LogPlace *at) {
    int64_t used = 0, t_oldest = INT64_MAX, t_second = INT64_MAX;
    at->free_slot = at->oldest = at->second = -1;
    for (int64_t s = 0; s < r->n; s++) {
        int64_t *e = LOG_ENTRY(c, hdr, s), t = LOAD(e), hits = LOAD(e + 1);
        if (!log_counts(r, t, hits, now)) {
            if (at->free_slot < 0) at->free_slot = s;
            continue;
        }
        used = hits > INT64_MAX - used ? INT64_MAX : used + hits;
        if (t < t_oldest) {
            t_second = t_oldest, at->second = at->oldest;
            t_oldest = t, at->oldest = s;
        } else if (t < t_second) {
            t_second = t, at->second = s;
        }
    }
    return used;
}

/* Count `cost` hits at now in a log ring, placed by a log_scan at now under the same lock. */
static void log_add(Core *c, int64_t *hdr, int64_t now, int64_t cost, const LogPlace *at) {
    int64_t slot = at->free_slot;
    if (slot < 0 && at->second < 0) {  /* one entry, counting: the new hits join it, at now */
        int64_t *e = LOG_ENTRY(c, hdr, at->oldest), hits = LOAD(e + 1);
        STORE(e, now);  /* first: the old hits leave later, never sooner */
        STORE(e + 1, hits > INT64_MAX - cost ? INT64_MAX : hits + cost);
        return;
    }
    if (slot < 0) {  /* every entry counts: the oldest joins the second oldest */
        int64_t *a = LOG_ENTRY(c, hdr, at->oldest), *b = LOG_ENTRY(c, hdr, at->second);
        int64_t ha = LOAD(a + 1), hb = LOAD(b + 1);
        STORE(b + 1, ha > INT64_MAX - hb ? INT64_MAX : ha + hb);
        STORE(a + 1, 0);
        slot = at->oldest;
    }
    int64_t *e = LOG_ENTRY(c, hdr, slot);
    if (LOAD(e + 1) != 0) STORE(e + 1, 0);  /* an entry that left: emptied before restamped */
    STORE(e, now);
    STORE(e + 1, cost);
}

static int by_time(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* How long until an entry stamped t leaves, from now (never negative, never wrapped). */
static int64_t log_leaves(const Ring *r, int64_t t, int64_t now) {
    int64_t ahead = t - now;  /* >= -P for a counting entry */
    if (ahead > INT64_MAX - r->bucket_ns - 1) return INT64_MAX;
    return ahead + r->bucket_ns + 1 > 0 ? ahead + r->bucket_ns + 1 : 0;
}

/* A log ring's timing (see timing()): *reset_ns, until its oldest counted hit leaves (0: none
 * counted); *wait_ns, until `need` of its hits have left (0: need <= 0; -1: it counts fewer, or
 * no memory to sort them). Caller holds the row lock. */
static void log_timing(Core *c, int64_t *hdr, const Ring *r, int64_t now, int64_t need,
                       int64_t *reset_ns, int64_t *wait_ns) {
    int64_t oldest = INT64_MAX, live = 0;
    for (int64_t s = 0; s < r->n; s++) {
        int64_t *e = LOG_ENTRY(c, hdr, s), t = LOAD(e);
        if (!log_counts(r, t, LOAD(e + 1), now)) continue;
        live++;
        if (t < oldest) oldest = t;
    }
    *reset_ns = live ? log_leaves(r, oldest, now) : 0;
    *wait_ns = need <= 0 ? 0 : -1;
    if (need <= 0 || live == 0) return;
    int64_t *sorted = PyMem_Malloc((size_t)live * 2 * sizeof(int64_t)), n = 0, freed = 0;
    if (sorted == NULL) return;
    for (int64_t s = 0; s < r->n && n < live; s++) {
        int64_t *e = LOG_ENTRY(c, hdr, s), t = LOAD(e), hits = LOAD(e + 1);
        if (!log_counts(r, t, hits, now)) continue;
        sorted[2 * n] = t, sorted[2 * n + 1] = hits;
        n++;
    }
    qsort(sorted, (size_t)n, 2 * sizeof(int64_t), by_time);
    for (int64_t j = 0; j < n; j++) {
        freed = sorted[2 * j + 1] > INT64_MAX - freed ? INT64_MAX : freed + sorted[2 * j + 1];
        if (freed >= need) {
            *wait_ns = log_leaves(r, sorted[2 * j], now);
            break;
        }
    }
    PyMem_Free(sorted);
}

/* ---- the limiter's check-and-count ------------------------------------------------------ */

typedef struct {
    int allowed;
    int64_t used[MAX_RINGS];
    int64_t reset_ns[MAX_RINGS];
    int64_t wait_ns;           /* -1: never (cost above a limit) */
} Verdict;

/* Section "hit": advance every ring to now, compare, count in all or none. Caller holds the
 * row lock. Running totals and tails are derived data: the repair recomputes them.
 * Order: a head moves before its total is lowered, and totals rise before buckets, so a
 * tear leaves totals too high (refuse early), never too low (admit late).
 * The tail is a lower bound on the oldest live bucket holding hits, or EMPTY when no live
 * bucket holds any: set before a first hit lands, moved forward lazily by timing(). */
static int hit_row(Core *c, int64_t slot, int64_t now, int64_t cost, int commit, Verdict *v) {
    char *row = ROW(c, slot);
    int64_t epoch[MAX_RINGS];
    LogPlace at[MAX_RINGS];
    for (int i = 0; i < c->n_rings; i++) {  /* junk a clock never reaches: epoch maths would overflow */
        int64_t head = LOAD(RING(c, row, i));
        if (!c->rings[i].log && !head_ok(&c->rings[i], head)) {
            PyErr_Format(ErrCorrupt, "window %R: key row %lld holds an impossible epoch %lld: the segment "
                         "is corrupt", c->name, (long long)slot, (long long)head);
            return -1;
        }
    }
    SECTION("hit");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    v->allowed = 1;
    for (int i = 0; i < c->n_rings; i++) {
        const Ring *r = &c->rings[i];
        int64_t *hdr = RING(c, row, i), head = LOAD(hdr), e = now / r->bucket_ns;
        if (r->log) {
            v->used[i] = log_scan(c, hdr, r, now, &at[i]);
            if (cost > r->limit || v->used[i] > r->limit - cost) v->allowed = 0;
            continue;
        }
        if (head != EMPTY_EPOCH && e < head) e = head;  /* a clock behind the head: count later */
        epoch[i] = e;
        if (head != e) {
            int64_t total = 0;
            if (head != EMPTY_EPOCH && e - head < r->n) {
                total = LOAD(hdr + 1);
                for (int64_t gone = head - r->n + 1; gone <= e - r->n; gone++) {
                    int64_t *b = BUCKET(c, hdr, r, gone < 0 ? 0 : gone);
                    if (gone >= 0 && LOAD(b) == gone) total = sat_sub(total, LOAD(b + 1));
                }
            }
            STORE(hdr, e);
            STORE(hdr + 1, total);
            if (total == 0 && LOAD(TAIL(c, hdr)) != EMPTY_EPOCH) STORE(TAIL(c, hdr), EMPTY_EPOCH);
        }
        v->used[i] = LOAD(hdr + 1);
        if (v->used[i] < 0) {  /* junk: recompute the derived total from the buckets */
            v->used[i] = ring_sum(c, hdr, r, e);
            STORE(hdr + 1, v->used[i]);
        }
        if (cost > r->limit || v->used[i] > r->limit - cost) v->allowed = 0;  /* no overflow */
    }
    if (v->allowed && commit) {
        for (int i = 0; i < c->n_rings; i++) {
            if (c->rings[i].log) continue;
            if (LOAD(TAIL(c, RING(c, row, i))) == EMPTY_EPOCH) STORE(TAIL(c, RING(c, row, i)), epoch[i]);
            v->used[i] += cost;
            STORE(RING(c, row, i) + 1, v->used[i]);
        }
        for (int i = 0; i < c->n_rings; i++) {
            if (c->rings[i].log) {
                log_add(c, RING(c, row, i), now, cost, &at[i]);
                v->used[i] += cost;
                continue;
            }
            int64_t *b = BUCKET(c, RING(c, row, i), &c->rings[i], epoch[i]);
            if (LOAD(b) != epoch[i]) {
                STORE(b + 1, 0);
                STORE(b, epoch[i]);
            }
            STORE(b + 1, sat_add(LOAD(b + 1), cost));
        }
        STORE((int64_t *)row + 1, now);
    }
    END_SECTION();
    return 0;
}

/* When each rate's oldest counted hit is forgotten, and when `cost` would fit. Caller holds
 * the row lock. Scans start at the ring's tail, which then moves forward to the oldest bucket
 * found holding hits (one store of derived data: any lower bound is valid), so repeated
 * calls cost O(1) and a ring's buckets are passed over at most once per lap. */
static void timing(Core *c, int64_t slot, int64_t now, int64_t cost, Verdict *v) {
    char *row = ROW(c, slot);
    v->wait_ns = 0;
    for (int i = 0; i < c->n_rings; i++) {
        const Ring *r = &c->rings[i];
        int64_t *hdr = RING(c, row, i), head = LOAD(hdr);
        int64_t need = cost > r->limit - v->used[i] ? sat_sub(v->used[i], r->limit - cost) : 0;
        int64_t freed = 0, blocks = !v->allowed && need > 0;
        v->reset_ns[i] = 0;
        if (blocks && cost > r->limit) v->wait_ns = -1;
        if (r->log) {
            int64_t wait;
            log_timing(c, hdr, r, now, blocks && v->wait_ns >= 0 ? need : 0, &v->reset_ns[i], &wait);
            if (wait > v->wait_ns && v->wait_ns >= 0) v->wait_ns = wait;
            continue;
        }
        int64_t tail = LOAD(TAIL(c, hdr)), from = head - r->n + 1;
        if (head == EMPTY_EPOCH || tail == EMPTY_EPOCH) continue;
        for (int64_t e = tail > from ? tail : from, left = head - e + 1; left > 0; e++, left--) {
            int64_t *b = BUCKET(c, hdr, r, e < 0 ? 0 : e), hits;
            if (e < 0 || LOAD(b) != e || (hits = LOAD(b + 1)) <= 0) continue;  /* < 0: junk */
            int64_t leaves = (e + r->n) * r->bucket_ns - now;
            if (leaves < 0) leaves = 0;
            if (freed == 0 && e != tail) STORE(TAIL(c, hdr), e);
            if (v->reset_ns[i] == 0) v->reset_ns[i] = leaves;
            freed = sat_add(freed, hits);
            if (!blocks || v->wait_ns < 0) break;
            if (freed >= need) {
                if (leaves > v->wait_ns) v->wait_ns = leaves;
                break;
            }
        }
    }
}

/* ---- argument helpers ------------------------------------------------------------------ */

/* Positional-or-keyword arguments of a METH_FASTCALL|METH_KEYWORDS call, by name. */
static int parse(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *const *names,
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
        *f = 1;
        return 0;
    }
    PyObject *w = PyDict_GetItemWithError(c->fields, field);
    if (w == NULL) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyObject *known = PyDict_Keys(c->fields);
            PyErr_Clear();
            if (known != NULL) {
                PyErr_Format(ErrField, "unknown field %R; this window's fields are %R", field, known);
                Py_DECREF(known);
            }
        }
        return -1;
    }
    long word = PyLong_AsLong(w);
    if (word < 1 || word > c->n_fields) {  /* the fields dict is the constructor's: words 1..n_fields */
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
static int cost_of(PyObject *obj, int64_t *cost, int64_t at_least) {
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
static PyObject *Core_add(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"n", "field", "key"};
    PyObject *a[3];
    int64_t n, now = 0, row, slot;
    double d;
    int f, rc = -1;
    if (nargs == 0 && kwnames == NULL) {
        a[0] = a[1] = a[2] = NULL;
    } else if (parse(args, nargs, kwnames, names, 3, a, "add") < 0) {
        return NULL;
    }
    if (enter(c) < 0) return NULL;
    if (amount(c, a[0], &n, &d) < 0 || field_word(c, a[1], &f) < 0) goto out;
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
        int got = lock_key(c, a[2], 1, now, &slot);
        if (got < 0) goto out;
        char *r = ROW(c, slot);
        SECTION("add_keyed");
        STORE(intent_at(c, row_lock(c, slot)), slot);
        rc = add_row(c, r, now, f, n, d);
        if (rc == 0) STORE((int64_t *)r + 1, now);
        END_SECTION();
        lock_give(c, row_lock(c, slot));
        goto out;
    }
    if (c->striped) {
        if (stripe_of(c, &row) < 0) goto out;
        if (row > 0) {  /* lock-free: only this process writes its stripe (under the GIL) */
            SECTION("add_striped");
            rc = add_row(c, ROW(c, row), now, f, n, d);
            END_SECTION();
            goto out;
        }
    }
    if (lock_take_ex(c, LOCK_ROW0, 1) < 0) goto out;
    SECTION("add_locked");
    rc = add_row(c, ROW(c, 0), now, f, n, d);
    END_SECTION();
    lock_give(c, LOCK_ROW0);
out:
    leave(c);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

/* add_and_total(n=1, field=None, key=None) -> the key's total over its longest ring,
 * this add included, with no other add to the key in between (keyed windows). */
static PyObject *Core_add_and_total(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"n", "field", "key"};
    PyObject *a[3], *result = NULL;
    int64_t n, now = 0, slot;
    double d;
    int f;
    if (parse(args, nargs, kwnames, names, 3, a, "add_and_total") < 0 || enter(c) < 0) return NULL;
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
    if (lock_key(c, a[2], 1, now, &slot) < 0) goto out;
    char *row = ROW(c, slot);
    SECTION("add_keyed");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    int rc = add_row(c, row, now, f, n, d);
    if (rc == 0) STORE((int64_t *)row + 1, now);
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
            if (k < 0 || LOAD(b) != k) continue;
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
    lock_give(c, row_lock(c, slot));
out:
    leave(c);
    return result;
}

/* add_batch(items, field=None, key=None): add (ring, epoch, value) triples, computed by
 * add_many(), in one section ("add_batch"). Items whose slot already holds a newer epoch
 * are outside the window by now and are dropped. */
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

static int add_items(Core *c, char *row, int f, const Item *items, Py_ssize_t m) {
    for (Py_ssize_t j = 0; j < m; j++) {  /* overflow: check all, then write */
        int64_t *s = item_slot(c, row, &items[j]), v = LOAD(s) == items[j].epoch ? LOAD(s + f) : 0, out;
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
        if (LOAD(s) > items[j].epoch) continue;
        if (LOAD(s) < items[j].epoch) {
            for (int k = 1; k <= c->n_fields; k++) STORE(s + k, 0);
            STORE(s, items[j].epoch);
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
        if (lock_key(c, a[2], 1, now, &row) < 0) goto out;
        lock = row_lock(c, row);
    } else if (c->striped && stripe_of(c, &row) < 0) {
        goto out;
    }
    if (!c->keyed && row == 0) {
        if (lock_take_ex(c, LOCK_ROW0, 1) < 0) goto out;
        lock = LOCK_ROW0;
    }
    SECTION("add_batch");
    if (c->keyed) STORE(intent_at(c, lock), row);
    rc = add_items(c, ROW(c, row), f, items, m);
    if (rc == 0 && c->keyed) STORE((int64_t *)ROW(c, row) + 1, now);
    END_SECTION();
    if (lock >= 0) lock_give(c, lock);
out:
    PyMem_Free(items);
    leave(c);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

/* hit(key, cost=1) -> bool: count cost hits if every rate allows them, else nothing. */
static PyObject *Core_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
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
    if (enter(c) < 0) return NULL;
    if (cost_of(a[1], &cost, 1) < 0) goto out;
    if (now_ns(c, &now) < 0) goto out;
    int got = lock_key(c, a[0], 1, now, &slot);
    if (got < 0) {
        if (c->on_full && PyErr_ExceptionMatches(ErrFull)) {
            PyErr_Clear();
            result = c->on_full == 1 ? Py_True : Py_False;
            Py_INCREF(result);
        }
        goto out;
    }
    int rc = hit_row(c, slot, now, cost, 1, &v);
    lock_give(c, row_lock(c, slot));
    if (rc == 0) result = Py_NewRef(v.allowed ? Py_True : Py_False);
out:
    leave(c);
    return result;
}

/* check(key, cost, commit, detail=True) -> (allowed, used, reset_ns, wait_ns | None): hit()
 * (commit) or test() from the running totals, O(1); with detail, also when each rate's oldest
 * hit leaves and when cost would fit, for stats() and acquire(): scans from the oldest bucket
 * that stop at the first one answering. */
static PyObject *Core_check(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"key", "cost", "commit", "detail"};
    PyObject *a[4], *result = NULL;
    int64_t cost, now = 0, slot;
    Verdict v;
    int commit, detail;
    memset(&v, 0, sizeof v);
    if (parse(args, nargs, kwnames, names, 4, a, "check") < 0) return NULL;
    if (a[0] == NULL || a[2] == NULL) {
        PyErr_SetString(PyExc_TypeError, "check() needs key and commit");
        return NULL;
    }
    if (enter(c) < 0) return NULL;
    commit = PyObject_IsTrue(a[2]);
    detail = a[3] == NULL ? 1 : PyObject_IsTrue(a[3]);
    if (commit < 0 || detail < 0 || cost_of(a[1], &cost, commit ? 1 : 0) < 0) goto out;
    if (now_ns(c, &now) < 0) goto out;
    int got = lock_key(c, a[0], commit, now, &slot);
    if (got < 0) {
        if (!(c->on_full && PyErr_ExceptionMatches(ErrFull))) goto out;
        PyErr_Clear();
        v.allowed = c->on_full == 1;
        v.wait_ns = -1;
    } else if (got == 0) {  /* never seen: nothing counted */
        v.allowed = cost <= c->min_limit;
        v.wait_ns = v.allowed ? 0 : -1;
    } else {
        int rc = hit_row(c, slot, now, cost, commit, &v);
        if (rc == 0 && detail) timing(c, slot, now, cost, &v);
        lock_give(c, row_lock(c, slot));
        if (rc < 0) goto out;
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
    leave(c);
    return result;
}

/* clear(key): forget key and every count of it (section "clear"), under LOCK_KEYS and the
 * key's row lock: the row is unpublished first (writers caching it stop matching), emptied,
 * its index entry made a tombstone, and the row put on the free list. A tear is finished by
 * the repair: the entry no longer agrees with its row, so both are dropped. */
static int clear_key(Core *c, PyObject *key) {
    StoredKey k;
    int64_t r, g;
    Index x;
    if (encode_key(c, key, &k) < 0 || lock_take_ex(c, LOCK_KEYS, 1) < 0) return -1;
    int found = find_key(c, &k, &r, &g);
    if (found > 0 && current_index(c, &x) < 0) found = -1;  /* (a word spoiled meanwhile) */
    if (found <= 0) {
        lock_give(c, LOCK_KEYS);
        return found;
    }
    int lock = row_lock(c, r);
    if (lock_take(c, lock) < 0) {
        lock_give(c, LOCK_KEYS);
        return -1;
    }
    char *row = ROW(c, r);
    int64_t *e = NULL;
    PROBE(&x, k.hash, p, i) {
        int64_t *f = ENT(&x, p);
        if (LOAD(f + E_GEN) == g && LOAD(f + E_ROW) == r) {
            e = f;
            break;
        }
    }
    int64_t keys = KEYS(c), head = LOAD(KEYWORD(c, FREE_HEAD_OFF));
    SECTION("clear");
    STORE(intent_at(c, lock), r);
    STORE(RGEN(row), -(g + 1));  /* first: no writer counts into it from now on */
    empty_rings(c, row);
    if (e != NULL) {
        STORE(e + E_HASH, 0);  /* a tombstone: probing goes on past it */
        STORE(e + E_GEN, g + 1);
    }
    STORE(RHASH(row), 0);
    STORE(RLAST(row), head);
    STORE(RGEN(row), g + 2);  /* free */
    STORE(KEYWORD(c, FREE_HEAD_OFF), r + 1);
    STORE(KEYWORD(c, KEYS_OFF), keys > 0 ? keys - 1 : 0);
    END_SECTION();
    lock_give(c, lock);
    lock_give(c, LOCK_KEYS);
    forget(c, key);
    return 1;
}

static PyObject *Core_clear(Core *c, PyObject *key) {
    int got = -1;
    if (enter(c) < 0) return NULL;
    if (!c->keyed) PyErr_Format(PyExc_ValueError, "window %R is not keyed", c->name);
    else got = clear_key(c, key);
    leave(c);
    if (got < 0) return NULL;
    Py_RETURN_NONE;
}

/* reset(): empty every row for everyone, all locks held in order (section "reset"). Striped
 * rows are written lock-free by their owners: adds racing with a reset may be dropped. */
static PyObject *Core_reset(Core *c, PyObject *Py_UNUSED(ignored)) {
    int held = 0;
    if (enter(c) < 0) return NULL;
    for (; held < c->n_locks; held++)
        if (lock_take_ex(c, held, held == 0) < 0) break;
    int64_t rows = c->n_rows;
    if (held == c->n_locks && (!c->keyed || rows_top(c, &rows) == 0)) {
        SECTION("reset");
        for (int64_t r = 0; r < rows; r++) empty_rings(c, ROW(c, r));
        END_SECTION();
    }
    while (held-- > 0) lock_give(c, held);
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

/* free_stripes() -> how many freed: under LOCK_STRIPES, clear the owner of every claimed
 * row whose owner is gone (its liveness mutex free or owner-dead). Data stays, counted. */
static PyObject *Core_free_stripes(Core *c, PyObject *Py_UNUSED(ignored)) {
    long long freed = 0;
    if (enter(c) < 0) return NULL;
    if (c->striped && lock_take(c, LOCK_STRIPES) == 0) {
        for (int64_t r = 1; r < c->n_rows; r++) {
            int64_t *e = STRIPE(c, r);
            if (LOAD(e) != 0 && !stripe_alive(c, r)) {
                STORE(e, 0);
                freed++;
            }
        }
        lock_give(c, LOCK_STRIPES);
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
        if (LOAD(e) == 0) continue;
        PyObject *t = Py_BuildValue("(LLO)", (long long)r, (long long)LOAD(e + 2),
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
    if (mine && lock_take(c, LOCK_STRIPES) == 0) {
        int64_t *e = STRIPE(c, row);
        if (LOAD(e) == c->stripe_owner) STORE(e, 0);
        give_stripe(c);
        lock_give(c, LOCK_STRIPES);
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
    if (c->busy == 0) cache_drop(c);  /* else a call inside may still hold an entry */
    release_map(c);
    Py_RETURN_NONE;
}

/* ---- repair: what EOWNERDEAD means for each lock ---------------------------------------- */

/* Called holding lock i, which the kernel says a dead holder left mid-section.
 *  - LOCK_KEYS (keyed): the intent entry may be half-published: roll it back.
 *  - a key row lock of a limiter: the intent row's running totals may be torn: recompute
 *    them from its buckets (buckets are primary, totals derived).
 *  - anything else: every section's stores are ordered so that a tear is harmless
 *    (a window's add lost only its own count; a stripe claim wrote its owner last). */
static void repair(Core *c, int i) {
    int64_t slot = LOAD(intent_at(c, i));
    if (!c->keyed) return;
    if (i == LOCK_KEYS) {
        repair_keys(c);
        return;
    }
    int64_t top;
    if (rows_top(c, &top) < 0) {
        PyErr_Clear();  /* the next caller meets it in find_key; a cached row is still reserved */
        return;
    }
    if (slot < 0 || slot >= top) return;
    if (i < FIRST_KEY_LOCK || !c->limiter || row_lock(c, slot) != i) return;
    char *row = ROW(c, slot);
    SECTION("repair");
    for (int r = 0; r < c->n_rings; r++) {
        if (c->rings[r].log) continue;  /* nothing derived: every entry says what it counts */
        int64_t *hdr = RING(c, row, r), head = LOAD(hdr);
        if (!head_ok(&c->rings[r], head)) continue;  /* junk: hit_row refuses the row */
        int64_t total = ring_sum(c, hdr, &c->rings[r], head);
        STORE(TAIL(c, hdr), total ? head - c->rings[r].n + 1 : EMPTY_EPOCH);  /* a lower bound */
        STORE(hdr + 1, total);
    }
    END_SECTION();
}

/* ---- type plumbing ------------------------------------------------------------------------ */

/* Does [off, off + count x size) lie within [0, limit)? Checked: junk never wraps around. */
static int fits(int64_t off, int64_t count, int64_t size, int64_t limit) {
    int64_t bytes, end;
    return off >= 0 && count >= 0 && size >= 0 && !__builtin_mul_overflow(count, size, &bytes) &&
           !__builtin_add_overflow(off, bytes, &end) && end <= limit;
}

/* Every offset the Core is given lies in the mapping, every ring in its row: no section can
 * then reach outside them. (layout.py computes them; this is the core's own check.) */
static int layout_fits(Core *c) {
    int64_t len = c->map_bytes;
    if (!fits(c->rows_off, c->n_rows, c->row_bytes, len) || c->n_rows < 1 || c->n_fields < 1 ||
        c->slot_words <= c->n_fields || c->head_slots != (c->limiter ? 2 : 1) || c->idle_ns < 1 ||
        !fits(c->locks_off, c->n_locks, LOCK_BYTES, len) ||
        c->n_locks < (c->keyed ? FIRST_KEY_LOCK + c->n_key_locks : FIRST_KEY_LOCK) ||
        c->rings_off < 0 || !fits(c->rings_off, 1, c->empty_bytes, c->row_bytes))
        return 0;
    for (int i = 0; i < c->n_rings; i++)
        if (c->rings[i].hdr < 0 || c->rings[i].hdr > c->row_bytes / WORD ||
            !fits(c->rings[i].hdr * WORD, c->head_slots + c->rings[i].n, (int64_t)c->slot_words * WORD, c->row_bytes))
            return 0;
    if (!c->keyed) return fits(c->stripes_off, c->n_rows, STRIPE_ENTRY_BYTES, len);
    return c->index_levels >= 1 && c->index_levels <= 40 && c->key_slots >= 1 && c->key_slots <= (1 << 20) &&
           (c->key_slots & (c->key_slots - 1)) == 0 && c->rings_off >= KEY_HEADER_BYTES &&
           c->n_rows <= UINT32_MAX && fits(c->keys_off, 2 * ((INT64_C(1) << c->index_levels) - 1),
                                           c->key_slots * KEY_ENTRY_BYTES, c->rows_off);
}

static int Core_init(Core *c, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"buffer", "name", "limiter", "floats", "striped", "keyed", "n_fields",
                             "slot_words", "head_slots", "rings", "locks_off", "n_locks", "n_key_locks",
                             "stripes_off", "keys_off", "rows_off", "row_bytes", "n_rows",
                             "key_slots", "rings_off", "idle_ns", "hash_key", "empty_row",
                             "timeout_ns", "on_full", "clock", "fields", "claim", "index_levels", "fd",
                             NULL};
    PyObject *buffer, *name, *rings, *clock, *fields, *claim;
    Py_buffer empty;
    unsigned long long hk0_hk1[2];
    const char *hash_key;
    Py_ssize_t hash_len;
    if (c->has_buf || c->base) {
        PyErr_SetString(PyExc_RuntimeError, "Core is already initialised");
        return -1;
    }
    c->fd = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OUppppiiiOLiiLLLLLLLLy#y*LiOOOLi", kwlist, &buffer, &name,
                                     &c->limiter, &c->floats, &c->striped, &c->keyed, &c->n_fields,
                                     &c->slot_words, &c->head_slots, &rings, &c->locks_off, &c->n_locks,
                                     &c->n_key_locks, &c->stripes_off, &c->keys_off, &c->rows_off,
                                     &c->row_bytes, &c->n_rows, &c->key_slots, &c->rings_off,
                                     &c->idle_ns, &hash_key, &hash_len, &empty, &c->timeout_ns,
                                     &c->on_full, &clock, &fields, &claim, &c->index_levels, &c->fd))
        return -1;
    if (!c->keyed) c->fd = -1;  /* only a keyed table grows */
    else if (c->fd < 0 || (c->fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0)) < 0) {  /* our own (we close it), never an exec's */
        PyErr_SetString(PyExc_ValueError, "Core: a keyed window needs the segment's file descriptor");
        c->fd = -1;
        return -1;
    }
    c->empty = PyMem_Malloc((size_t)empty.len);
    if (c->empty != NULL) memcpy(c->empty, empty.buf, (size_t)empty.len);
    c->empty_bytes = empty.len;
    PyBuffer_Release(&empty);
    if (c->empty == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (hash_len != 16 || !PyTuple_Check(rings) || PyTuple_GET_SIZE(rings) < 1 ||
        PyTuple_GET_SIZE(rings) > MAX_RINGS || !PyDict_Check(fields) || c->n_key_locks < (c->keyed ? 1 : 0)) {
        PyErr_SetString(PyExc_ValueError, "Core: bad geometry");
        return -1;
    }
    memcpy(hk0_hk1, hash_key, 16);
    c->hk0 = hk0_hk1[0];
    c->hk1 = hk0_hk1[1];
    c->n_rings = (int)PyTuple_GET_SIZE(rings);
    c->min_limit = INT64_MAX;
    for (int i = 0; i < c->n_rings; i++) {
        Ring *r = &c->rings[i];
        r->log = 0;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(rings, i), "LLLL|p", &r->hdr, &r->n, &r->bucket_ns, &r->limit,
                              &r->log))
            return -1;
        if (r->n < 1 || r->n > INT32_MAX || r->bucket_ns < 1 || r->limit < 0 ||
            (r->log && (!c->limiter || r->n > MAX_LOG_ENTRIES))) {
            PyErr_SetString(PyExc_ValueError, "Core: bad ring");
            return -1;
        }
        if (r->limit < c->min_limit) c->min_limit = r->limit;
    }
    if (PyObject_GetBuffer(buffer, &c->buf, PyBUF_WRITABLE) < 0) return -1;
    c->has_buf = 1;
    c->base = c->buf.buf;
    c->map_bytes = c->buf.len;
    if (!layout_fits(c)) {
        PyErr_SetString(PyExc_ValueError, "Core: the layout does not fit the mapping");
        return -1;
    }
    if (c->timeout_ns < 0) {
        PyErr_SetString(PyExc_ValueError, "Core: a lock timeout cannot be negative");
        return -1;
    }
    if (c->timeout_ns > NS << 31) c->timeout_ns = NS << 31;  /* 68 years: now + it never overflows */
    c->clock = clock == Py_None ? NULL : Py_NewRef(clock);
    c->fields = Py_NewRef(fields);
    c->claim = Py_NewRef(claim);
    c->name = Py_NewRef(name);
    c->cache = NULL;
    c->cache_index = NULL;
    c->cache_mask = -1;
    return 0;
}

static int Core_traverse(Core *c, visitproc visit, void *arg) {
    Py_VISIT(c->clock);
    Py_VISIT(c->claim);
    Py_VISIT(c->fields);
    return 0;
}

static int Core_clear_refs(Core *c) {
    Py_CLEAR(c->clock);
    Py_CLEAR(c->claim);
    Py_CLEAR(c->fields);
    return 0;
}

static void Core_dealloc(Core *c) {
    PyObject_GC_UnTrack(c);
    c->closed = 1;
    c->busy = 0;
    release_map(c);
    Core_clear_refs(c);
    Py_CLEAR(c->name);
    cache_drop(c);
    PyMem_Free(c->empty);
    if (c->fd >= 0) close(c->fd);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *Core_get_closed(Core *c, void *Py_UNUSED(x)) { return PyBool_FromLong(c->closed); }
static PyObject *Core_get_cached(Core *c, void *Py_UNUSED(x)) { return PyLong_FromLongLong(c->cache_used); }

static PyGetSetDef Core_getset[] = {
    {"closed", (getter)Core_get_closed, NULL, "close() was called", NULL},
    {"cached", (getter)Core_get_cached, NULL, "how many keys this process's key cache holds", NULL},
    {NULL},
};

static PyMethodDef Core_methods[] = {
    {"add", (PyCFunction)(void (*)(void))Core_add, METH_FASTCALL | METH_KEYWORDS,
     "add(n=1, field=None, key=None): count n in the current bucket"},
    {"add_and_total", (PyCFunction)(void (*)(void))Core_add_and_total, METH_FASTCALL | METH_KEYWORDS,
     "add_and_total(n=1, field=None, key=None) -> total: add, and the key's total with it"},
    {"add_batch", (PyCFunction)(void (*)(void))Core_add_batch, METH_FASTCALL | METH_KEYWORDS,
     "add_batch(items, field=None, key=None): add (ring, epoch, value) triples in one section"},
    {"hit", (PyCFunction)(void (*)(void))Core_hit, METH_FASTCALL | METH_KEYWORDS,
     "hit(key, cost=1) -> bool: count if every rate allows"},
    {"check", (PyCFunction)(void (*)(void))Core_check, METH_FASTCALL | METH_KEYWORDS,
     "check(key, cost, commit) -> (allowed, used, reset_ns, wait_ns or None)"},
    {"clear", (PyCFunction)Core_clear, METH_O, "clear(key): forget key's counts"},
    {"reset", (PyCFunction)Core_reset, METH_NOARGS, "reset(): empty every row"},
    {"find", (PyCFunction)Core_find, METH_O, "find(key) -> (slot, generation) or None"},
    {"free_stripes", (PyCFunction)Core_free_stripes, METH_NOARGS, "free_stripes() -> rows of dead owners freed"},
    {"stripe_owners", (PyCFunction)Core_stripe_owners, METH_NOARGS, "stripe_owners() -> [(row, pid, alive)]"},
    {"release_stripe", (PyCFunction)Core_release_stripe, METH_NOARGS,
     "release_stripe() -> the row handed back, or 0"},
    {"close", (PyCFunction)Core_close, METH_NOARGS, "close(): stop touching the mapping"},
    {NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmwin._core.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Every write to one mapped shmwin segment (see layout.py for the format).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_traverse = (traverseproc)Core_traverse,
    .tp_clear = (inquiry)Core_clear_refs,
    .tp_methods = Core_methods,
    .tp_getset = Core_getset,
};

/* ---- module functions ---------------------------------------------------------------------- */

static PyObject *set_errors(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *e[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &e[0], &e[1], &e[2], &e[3], &e[4], &e[5])) return NULL;
    Py_XSETREF(ErrClosed, Py_NewRef(e[0]));
    Py_XSETREF(ErrTimeout, Py_NewRef(e[1]));
    Py_XSETREF(ErrCorrupt, Py_NewRef(e[2]));
    Py_XSETREF(ErrFull, Py_NewRef(e[3]));
    Py_XSETREF(ErrField, Py_NewRef(e[4]));
    Py_XSETREF(ErrSpace, Py_NewRef(e[5]));
    Py_RETURN_NONE;
}

/* init_stripes(buffer, offset, count): a new stripe table, every liveness mutex free. */
static PyObject *init_stripes(PyObject *Py_UNUSED(m), PyObject *args) {
    Py_buffer b;
    Py_ssize_t off, count;
    pthread_mutexattr_t attr;
    if (!PyArg_ParseTuple(args, "w*nn", &b, &off, &count)) return NULL;
    if (!fits(off, count, STRIPE_ENTRY_BYTES, b.len)) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "init_stripes: the stripe table does not fit");
        return NULL;
    }
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    for (Py_ssize_t i = 0; i < count; i++) {
        char *at = (char *)b.buf + off + i * STRIPE_ENTRY_BYTES;
        memset(at, 0, STRIPE_ENTRY_BYTES);
        pthread_mutex_init((pthread_mutex_t *)(at + STRIPE_MUTEX_OFF), &attr);
    }
    pthread_mutexattr_destroy(&attr);
    PyBuffer_Release(&b);
    Py_RETURN_NONE;
}

static PyObject *init_locks(PyObject *Py_UNUSED(m), PyObject *args) {
    Py_buffer b;
    Py_ssize_t off, count;
    pthread_mutexattr_t attr;
    if (!PyArg_ParseTuple(args, "w*nn", &b, &off, &count)) return NULL;
    if (!fits(off, count, LOCK_BYTES, b.len)) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "init_locks: the lock table does not fit");
        return NULL;
    }
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    for (Py_ssize_t i = 0; i < count; i++) {
        char *at = (char *)b.buf + off + i * LOCK_BYTES;
        memset(at, 0, LOCK_BYTES);
        int64_t minus_one = -1;
        memcpy(at + LOCK_INTENT_OFF, &minus_one, 8);
        pthread_mutex_init((pthread_mutex_t *)at, &attr);
    }
    pthread_mutexattr_destroy(&attr);
    PyBuffer_Release(&b);
    Py_RETURN_NONE;
}

static PyObject *failpoint(PyObject *Py_UNUSED(m), PyObject *args) {
    const char *section = "";
    long after = 0;
    int sig = SIGKILL;
    if (!PyArg_ParseTuple(args, "|sli", &section, &after, &sig)) return NULL;
    snprintf(fp_section, sizeof fp_section, "%s", section);
    fp_after = after;
    fp_signal = sig;
    fp_armed = *section != '\0' && after > 0;
    fp_fired = 0;
    fp_left = 0;
    Py_RETURN_NONE;
}

static PyObject *failpoint_fired(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(x)) { return PyBool_FromLong(fp_fired); }

/* The offset this process's CLOCK_MONOTONIC is read with (its time namespace's), in ns. */
static PyObject *timens_offset(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(x)) {
    return PyLong_FromLongLong(timens_offset_ns);
}

/* This process's reserver so far (tests and benchmarks): jobs posted, done, used. */
static PyObject *reserver_counts(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(x)) {
    pthread_mutex_lock(&jobs_mu);
    PyObject *v = Py_BuildValue("{sLsLsL}", "posted", jobs_posted, "done", jobs_done, "used", jobs_used);
    pthread_mutex_unlock(&jobs_mu);
    return v;
}

static PyMethodDef module_methods[] = {
    {"set_errors", set_errors, METH_VARARGS, "set_errors(closed, timeout, corrupt, full, field, space)"},
    {"init_locks", init_locks, METH_VARARGS, "init_locks(buffer, offset, count): robust mutexes"},
    {"init_stripes", init_stripes, METH_VARARGS, "init_stripes(buffer, offset, count): a free stripe table"},
    {"failpoint", failpoint, METH_VARARGS,
     "failpoint(section, n, signal): test only -- raise signal after the n-th store of section"},
    {"failpoint_fired", failpoint_fired, METH_NOARGS, "did the armed fail point fire?"},
    {"timens_offset", timens_offset, METH_NOARGS,
     "timens_offset(): ns this process's CLOCK_MONOTONIC is ahead of the host's (time namespace)"},
    {"reserver_counts", reserver_counts, METH_NOARGS,
     "this process's row reserver: {'posted', 'done', 'used'} jobs (see 'the reserver')"},
    {NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "shmwin._core",
                                    "The native critical sections of shmwin.", -1, module_methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__core(void) {
    PyObject *m;
    if (PyType_Ready(&CoreType) < 0 || (m = PyModule_Create(&module)) == NULL) return NULL;
    pthread_atfork(NULL, NULL, after_fork_child);
    timens_offset_ns = read_timens_offset();
    const char *env = getenv("SHMWIN_FAILPOINT");  /* "section:n:signal", for child processes */
    if (env && *env) {
        char section[32];
        long after;
        int sig;
        if (sscanf(env, "%31[^:]:%ld:%d", section, &after, &sig) == 3) {
            snprintf(fp_section, sizeof fp_section, "%s", section);
            fp_after = after;
            fp_signal = sig;
            fp_armed = after > 0;
        }
    }
    if (PyModule_AddObjectRef(m, "Core", (PyObject *)&CoreType) < 0 ||
        PyModule_AddIntConstant(m, "LOCK_BYTES", LOCK_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "LOCK_INTENT_OFF", LOCK_INTENT_OFF) < 0 ||
        PyModule_AddIntConstant(m, "KEY_ENTRY_BYTES", KEY_ENTRY_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "KEY_BYTES_OFF", KEY_BYTES_OFF) < 0 ||
        PyModule_AddIntConstant(m, "MAX_STORED_KEY", MAX_STORED_KEY) < 0 ||
        PyModule_AddIntConstant(m, "KEY_HEADER_BYTES", KEY_HEADER_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "INDEX_OFF", INDEX_OFF) < 0 ||
        PyModule_AddIntConstant(m, "ROWS_TOP_OFF", ROWS_TOP_OFF) < 0 ||
        PyModule_AddIntConstant(m, "FREE_HEAD_OFF", FREE_HEAD_OFF) < 0 ||
        PyModule_AddIntConstant(m, "STRIPE_ENTRY_BYTES", STRIPE_ENTRY_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "STRIPE_MUTEX_OFF", STRIPE_MUTEX_OFF) < 0 ||
        PyModule_AddIntConstant(m, "ROWS_IN_USE_OFF", ROWS_IN_USE_OFF) < 0 ||
        PyModule_AddIntConstant(m, "MAX_RINGS", MAX_RINGS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_PROBES", MAX_PROBES) < 0 ||
        PyModule_AddIntConstant(m, "FIRST_KEY_LOCK", FIRST_KEY_LOCK) < 0 ||
        PyModule_AddIntConstant(m, "MUTEX_BYTES", (long)sizeof(pthread_mutex_t)) < 0 ||
        PyModule_AddObject(m, "EMPTY_EPOCH", PyLong_FromLongLong(EMPTY_EPOCH)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
