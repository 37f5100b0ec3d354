/* core.h -- the internal header of shmwin._core: what its files share (see module.c's map).
 *
 * Every name declared here is hidden (never exported from the extension, never interposed
 * by another library's symbol of the same name); only PyInit__core is visible.
 */
#ifndef SHMWIN_CORE_H
#define SHMWIN_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "layout.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shmwin segments are little-endian"
#endif

#pragma GCC visibility push(hidden)

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

#define NS 1000000000LL

/* ---- fail points: the test build's only (-DSHMWIN_TEST; see module.c) ------------------- *
 * In the test build, SECTION(name) starts counting the stores of a section when a fail
 * point names it, and the n-th store raises the fail point's signal in this process. The
 * production build has none of it: STORE is one atomic store, and no branch is left. */
#ifdef SHMWIN_TEST
extern int fp_armed;   /* a section name is set */
extern long fp_left;   /* stores left in the running section; 0 = not counting */
void fp_enter(const char *section);
void fp_fire(void);
extern int fp_nospace;  /* nospace(True): every reservation fails as on a full /dev/shm */
extern long long fp_lock_waits;  /* lock_waits(): this process's sleeps on a held lock */
#define NOSPACE_FOR_TEST() fp_nospace
#define SECTION(name) do { if (fp_armed) fp_enter(name); } while (0)
#define END_SECTION() (fp_left = 0)
#define FAILPOINT() do { if (fp_left > 0 && --fp_left == 0) fp_fire(); } while (0)
#else
#define NOSPACE_FOR_TEST() 0
#define SECTION(name) ((void)0)
#define END_SECTION() ((void)0)
#define FAILPOINT() ((void)0)
#endif

/* Shared words: acquire loads, release stores (ordered; never torn: 8-byte aligned). */
#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) do { __atomic_store_n((p), (v), __ATOMIC_RELEASE); FAILPOINT(); } while (0)

/* ---- module state: the exception classes (shmwin.errors) and the types ------------------- */

#define MAX_ROLE_TYPES 16  /* module.c's role -> type table, at most */

typedef struct {
    PyTypeObject *core_type;     /* the base: what every segment has */
    PyTypeObject *window_type;   /* a window's (a limiter's tally must be one) */
    PyTypeObject *role_types[MAX_ROLE_TYPES];  /* module.c's table's, in its order */
    PyObject *closed, *timeout, *corrupt, *full, *field, *space;  /* WindowClosedError ... */
    PyObject *moved;  /* WindowMovedError (live.c) */
    PyTypeObject *series_map_type, *series_value_type;  /* role "series" (series.c) */
} ModState;
/* a reference added here is added to module.c's MODSTATE_EACH too (its traverse and clear) */

int series_add_types(PyObject *m, ModState *st);  /* series.c: SeriesMap and SeriesValue */

/* ---- the Core object: one mapped segment as this process sees it ------------------------ */

typedef struct {
    int64_t hdr;        /* word offset of the ring's header slot within a row */
    int64_t n;          /* bucket slots (a log ring: entries) */
    int64_t bucket_ns;  /* a log ring: the period */
    int64_t limit;      /* limiter rings only */
    int log;            /* a limiter ring kept as hit times (see "log rings", rings.c) */
    int cw;             /* a limiter's compact ring: bytes per count (4 or 8); 0: a ring of slots */
} Ring;

struct CacheEntry;
typedef struct RoleHooks RoleHooks;
typedef struct StoredKey StoredKey;

typedef struct {
    PyObject_HEAD
    const RoleHooks *hooks;  /* its role's, set by its type at open: what the shared code asks of it */
    ModState *st;       /* the module's state: the type holds the module, we hold the type */
    Py_buffer buf;      /* an export of the mmap: it stays mapped while we hold it */
    char *base;
    int closed;         /* set by close(): every entry point raises from then on */
    int busy;           /* calls inside (another thread may close while one waits) */
    int has_buf;
    /* geometry: read from the segment's header at init, the rest derived (coretype.c) */
    int limiter, floats, striped, keyed;
    int role;           /* the header's role word, as read (the type was picked by it: module.c) */
    int64_t state_words; /* a counter role's: its rows are the key header and these words, no ring */
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
    int on_full;        /* ON_FULL_RAISE, _ALLOW or _DENY (layout.h): met_full, full_allows */
    int64_t min_limit;
    PyObject *clock;    /* NULL: CLOCK_MONOTONIC natively; else called before any lock */
    PyObject *fields;   /* {name: word index within a slot} */
    struct CacheEntry *cache;  /* keys this process has seen: see keycache.c */
    int64_t cache_mask, cache_used;
    uint64_t cache_k0, cache_k1;  /* the table's secret, which places its keys: see keycache.c */
    PyObject *claim;    /* striped: callable() -> (pid, start ticks) of this process */
    PyObject *name;
    /* this process's stripe */
    int64_t n_stripes;  /* keyed: a concurrency's process stripes (else 0) */
    int64_t stripe_claim; /* keyed: this process's stripe's claims word when it took it */
    int64_t stripe_row; /* 0: the shared row under LOCK_SHARED_ROW */
    int64_t stripe_owner;
    uint64_t stripe_gen;
    int64_t retry_ns;   /* when to look for a free stripe again */
    int64_t tight_until_ns;  /* keyed: no memory for a larger index seen; until then, no rebuild to grow */
    int64_t punched_ns;      /* keyed: the rebuild (its rebuilt_ns) whose replaced index copies we punched */
    int64_t chunks_off, n_chunks;  /* role "moving-log": the chunk heap (moving.c); else 0 */
    int moving_shift;   /* role "moving-log": log2 of its entries' time quantum (layout_words) */
    int64_t key_bytes;  /* keyed: the key bytes a row stores (a moving log's: a digest) */
    int64_t names_off;  /* a moving log's key names (NAME_ENTRY x NAME_SLOTS), before the index; else -1 */
    int all_held;       /* this thread holds every lock (reset): emptying a row takes none (a moving log's chunks) */
    int64_t live_gen;   /* the header's live_gen this core's limits were read at (live.c); 0: the ring table's */
    PyObject *on_moved; /* a limiter's: callable(method name) -> the method to call instead, once moved (live.c) */
} Core;

/* ---- a role: its type, and the hooks the shared code calls it through ------------------- *
 * Every segment is one object of the base type Core (coretype.c: mapping, header, key table,
 * key cache, locks, stripes, close safety; the methods every segment has, methods.c) or of a
 * role's heap type, a subtype of Core with the role's methods. _core.open() reads the header's
 * kind and role words and builds the type module.c's table names for them; each type hands
 * its RoleHooks to core_init, so the shared code (index.c, locks.c, rings.c, coretype.c) asks
 * the role what it needs instead of testing role words in methods.
 *
 * How a role adds its type (a role word of layout_words.ROLES, say ROLE_SERIES, in x.c):
 *   1. its hooks, every member optional (NULL / 0: what a plain window of rings does):
 *        static const RoleHooks series_hooks = {.role = "series", .keyed_role = ROLE_SERIES, ...};
 *   2. its methods (METH_FASTCALL | METH_KEYWORDS for hot ones; each keyed one runs
 *      key_enter ... key_leave, below), in a table of METHOD_* entries (methods.h)
 *   3. its spec and its init (core_init with its hooks, which ROLE_SPEC writes), Core's size (or a larger struct whose first member is the Core: object
 *      fields of its own then need its Py_tp_traverse and Py_tp_clear, each ending in Core's
 *      (core_traverse, core_clear), and Py_TPFLAGS_HAVE_GC, which a type with its own traverse
 *      does not inherit: see DeciderObject), and the flags every type here has; ROLE_SPEC
 *      (below) writes it:
 *        ROLE_SPEC(series_spec, "SeriesCore", Core, series_hooks, series_methods, "...");
 *   4. one row of module.c's role_types table, {KIND_WINDOW, ROLE_SERIES, &series_spec}, and
 *      `extern PyType_Spec series_spec;` with the others below; the type's name in
 *      shmwin/_core.pyi (class SeriesCore(Core)), its file in module.c's map and in
 *      docs/internals.md (tests/unit/test_core_file_map.py checks both), and a test that
 *      _core.open builds it for its segments.
 * A role test (c->role, ROLE_*) belongs in its header or check hook only: the file map's test
 * fails a method that makes one. Core is Py_TPFLAGS_BASETYPE; module.c creates each type with
 * Core as its base. */

struct RoleHooks {
    const char *role;      /* its word in errors: "window %R is not a <role> segment" */
    int keyed_role;        /* the role word of the keyed windows it serves, checked first (0: its header hook checks) */
    int64_t state_bytes;   /* a keyed row's state after its key header, instead of rings; 0: rings */
    int state_zeroed;      /* an empty state is all zeros (else its first word is EMPTY_EPOCH) */
    int64_t live_max;      /* a non-limiter whose one limit changes in place (live.c): its most; 0: none */
    int log_rings;         /* a window role whose rings may be logs (a limiter's may, whatever its role) */
    int chunk_heap;        /* its segment may hold a chunk heap after its rows (a moving log) */
    /* the role's own words of the header, read before the rows are placed (state size, key
     * bytes, a chunk heap; the window's and limiter's: is it theirs?): 0, or -1 with a ValueError set */
    int (*header)(Core *c, const ShmwinHeader *h);
    /* once the layout is derived and fits the mapping: is the segment the role's? 0, or -1
     * with a ValueError set (not_role(c) says the usual) */
    int (*check)(Core *c);
    /* a row emptied (inserted, cleared, reset, reclaimed): what it gives back beyond its
     * words (a moving log's chunks). Set: rows are emptied so even when dropped idle. */
    void (*empty)(Core *c, char *row, int64_t slot);
    /* a key just inserted in row r, under LOCK_KEY_TABLE (a moving log names it: key names) */
    void (*inserted)(Core *c, const StoredKey *k, int64_t r, int64_t gen, int64_t now);
    /* a key never idle while this says so, whatever its age (a concurrency's live holders) */
    int (*busy)(Core *c, int64_t slot);
    /* a holder of lock i died inside its section: the role's repair (slot: the intent row of
     * a key row lock, checked to be one of i's rows; -1 for a lock of no row) */
    void (*repair)(Core *c, int i, int64_t slot);
    int late_lock;         /* a lock taken after the row locks (reset's order), or 0: none */
};

/* a role type's flags: its GC support (traverse, clear) is Core's, inherited with the flag */
#define ROLE_TYPE_FLAGS (Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE)

/* The role types' own fields (a role with none uses Core as it is):
 * a window's core (WindowCore, window.c), and where it last counted a decision when it is a
 * limiter's tally (limiter.c, note_in_stripe): epoch e spans [lo_ns, lo_ns + bucket) in this
 * process's stripe row `row`, at b: no division per hit. */
typedef struct {
    int64_t e, lo_ns, row;
    int64_t *b;
} TallyNote;
typedef struct {
    Core core;
    TallyNote note;
} WindowObject;
#define TALLY_NOTE(c) (&((WindowObject *)(c))->note)  /* c: a WindowCore (set_tally checked it) */

/* A deciding role's core (LimiterCore, TokenBucketCore): a Core and its decisions (limiter.c). */
typedef struct {
    Core core;
    PyObject *tally;    /* its decisions window: a striped WindowCore of TALLY_FIELDS, or NULL */
    int shadow;         /* 1: hit() answers True whatever it decided (a dry run) */
} DeciderObject;
#define DECIDER(c) ((DeciderObject *)(c))  /* c: a LimiterCore or a TokenBucketCore */

/* Step 3 of the recipe above, written once: a role type's spec, "shmwin._core.<type_name>",
 * its doc, its methods, and its init, <spec>_init: core_init with the role's hooks. ROLE_SPEC
 * for a role with no object field of its own (`object`: Core, or a struct whose first member is
 * the Core: Core's GC support, inherited); DECIDER_SPEC for a deciding role (DeciderObject: its
 * tally is an object field, so its own traverse and clear, and Py_TPFLAGS_HAVE_GC, which a type
 * with its own traverse does not inherit). A type with other slots writes its spec out. */
#define ROLE_TYPE(spec, type_name, object, hooks, more_flags, ...)                                          \
    static int spec##_init(Core *c, PyObject *args, PyObject *kw) { return core_init(c, args, kw, &(hooks)); } \
    PyType_Spec spec = {.name = "shmwin._core." type_name, .basicsize = sizeof(object),                   \
                        .flags = ROLE_TYPE_FLAGS | (more_flags), .slots = (PyType_Slot[]){__VA_ARGS__, {0, NULL}}}
#define ROLE_SLOTS(spec, methods, doc) {Py_tp_doc, doc}, {Py_tp_init, spec##_init}, {Py_tp_methods, methods}
#define ROLE_SPEC(spec, type_name, object, hooks, methods, doc) \
    ROLE_TYPE(spec, type_name, object, hooks, 0, ROLE_SLOTS(spec, methods, doc))
#define DECIDER_SPEC(spec, type_name, hooks, methods, doc)                                         \
    ROLE_TYPE(spec, type_name, DeciderObject, hooks, Py_TPFLAGS_HAVE_GC, ROLE_SLOTS(spec, methods, doc), \
              {Py_tp_traverse, decider_traverse}, {Py_tp_clear, decider_clear})

#define W(c, off) ((int64_t *)((c)->base + (off)))
#define ROW(c, r) ((c)->base + (c)->rows_off + (int64_t)(r) * (c)->row_bytes)
#define RING(c, row, i) ((int64_t *)((row) + (c)->rings[i].hdr * WORD_BYTES))
/* The slot of bucket epoch e >= 0 in the ring whose first header slot is hdr. Limiter rings
 * have two header slots: (head epoch, running total), then (tail epoch, unused). */
#define BUCKET(c, hdr, r, e) ((hdr) + ((c)->head_slots + (e) % (r)->n) * (c)->slot_words)
/* A limiter's compact ring (rings.c, "the limiter's compact rings"): its header words, then
 * n counts of r->cw bytes, the count of epoch e in slot e % n. */
#define HEAD(hdr) ((hdr) + LIMITER_RING_HEAD)
#define TOTAL(hdr) ((hdr) + LIMITER_RING_TOTAL)
#define ZEROED(hdr) ((hdr) + LIMITER_RING_ZEROED)
#define LTAIL(hdr) ((hdr) + LIMITER_RING_TAIL)
#define COUNT_AT(hdr, r, e) ((char *)((hdr) + LIMITER_RING_WORDS) + ((e) % (r)->n) * (r)->cw)
/* A keyed row's key header words. */
#define RGEN(row) ((int64_t *)(row) + KEY_ROW_GEN)
#define RLAST(row) ((int64_t *)(row) + KEY_ROW_LAST_NS)
#define RIDENT(row) ((int64_t *)(row) + KEY_ROW_IDENT)  /* hash | len << 40 | flags << 48; 0: no key */
#define RKEY(row) ((char *)(row) + KEY_ROW_KEY_OFF)
#define IDENT_HASH(w) ((w) & KEY_HASH_MASK)
/* A key's newest write, kept no earlier than `at`: a writer whose clock was read before a wait
 * (or lags) never moves it back, or the key would look idle -- and be dropped by a rebuild or
 * reclaim -- while its windows still hold the later writes. Caller holds the row lock. */
static inline void touch_last(char *row, int64_t at) {
    if (__atomic_load_n(RLAST(row), __ATOMIC_ACQUIRE) < at) STORE(RLAST(row), at);
}

/* ---- process-wide state (threads.c): per process, never per module or interpreter -------- */

extern uint64_t fork_gen;         /* bumped in a forked child: stripes are per process */
extern int64_t timens_offset_ns;  /* this process's time namespace's monotonic offset */
int64_t read_timens_offset(void);
void after_fork_child(void);
int start_thread(void *(*main)(void *));
enum { KEEP_TAKE = 1, KEEP_GIVE = 2 };
int keeper(int op, pthread_mutex_t *m);
int keeper_take_first(char *first, int64_t stride, int64_t n, int64_t *at);
void reserve_ahead(Core *c, int64_t from, int64_t to);
int reserved_ahead(Core *c, int64_t from, int64_t to);
void reserver_forget(Core *c);
PyObject *reserver_counts_dict(void);
#define AHEAD_MIN_ROWS 4096    /* tables this large grow by a sixteenth, their next pages prefetched */

/* ---- time and locks (locks.c); the few the hot paths take are inline here ------------------ */

static inline int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS + ts.tv_nsec;
}

/* The host's monotonic time: what every time a segment holds is read on (threads.c). */
static inline int64_t host_mono_ns(void) { return mono_ns() - timens_offset_ns; }

int call_clock(Core *c, int64_t *now);

/* Now, read once per call before any lock is taken: CLOCK_MONOTONIC natively, or the
 * injected clock (Python code, which must never run under a lock). */
static inline int now_ns(Core *c, int64_t *now) {
    if (c->clock != NULL) return call_clock(c, now);
    *now = host_mono_ns();
    return 0;
}

static inline pthread_mutex_t *mutex_at(Core *c, int i) {
    return (pthread_mutex_t *)(c->base + c->locks_off + (int64_t)i * LOCK_BYTES);
}
static inline int64_t *intent_at(Core *c, int i) {
    return W(c, c->locks_off + (int64_t)i * LOCK_BYTES + LOCK_INTENT_OFF);
}
/* Lock i's seq (format 12): odd while a section that changes a fixed window's row in place runs
 * under lock i, or died in one; fixedsum.c reads rows without the lock against it. Not fail points. */
static inline int64_t *seq_at(Core *c, int i) { return W(c, c->locks_off + (int64_t)i * LOCK_BYTES + LOCK_SEQ_OFF); }
#define SEQ_STORE(c, i, v) __atomic_store_n(seq_at((c), (i)), (int64_t)(v), __ATOMIC_RELEASE)
static inline void seq_open(Core *c, int i) { SEQ_STORE(c, i, (uint64_t)LOAD(seq_at(c, i)) | 1); }
static inline void seq_close(Core *c, int i) { SEQ_STORE(c, i, ((uint64_t)LOAD(seq_at(c, i)) | 1) + 1); }
static inline int row_lock(Core *c, int64_t slot) {
    return FIRST_KEY_LOCK + (int)(slot % c->n_key_locks);
}

int lock_take_slow(Core *c, int i, int interruptible, int rc);

/* Take lock i: 0 held (repaired if its last holder died inside), -1 error, not held.
 * `interruptible`: nothing else is held, so a pending signal may raise while it waits. */
static inline int lock_take_ex(Core *c, int i, int interruptible) {
    int rc = pthread_mutex_trylock(mutex_at(c, i));
    if (__builtin_expect(rc == 0 && !c->closed, 1)) return 0;
    return lock_take_slow(c, i, interruptible, rc);
}
#define lock_take(c, i) lock_take_ex((c), (i), 0)
static inline void lock_give(Core *c, int i) { pthread_mutex_unlock(mutex_at(c, i)); }

int init_mutexes(Py_buffer *b, Py_ssize_t off, Py_ssize_t count, Py_ssize_t stride, Py_ssize_t mutex_off,
                 Py_ssize_t intent_off);

/* ---- the Core's life (coretype.c) ------------------------------------------------------- */

int closed_error(Core *c);
void release_map(Core *c);
/* After anything that may have run other threads (a claim callback, a wait): still open? */
static inline int still_open(Core *c) {
    if (!c->closed) return 0;
    PyErr_Format(c->st->closed, "window %R was closed during the call", c->name);
    return -1;
}

/* Entry and exit of every method: no memory is touched after close(). */
static inline int enter(Core *c) {
    if (c->closed) return closed_error(c);
    c->busy++;
    return 0;
}
static inline void leave(Core *c) {
    c->busy--;
    if (c->closed) release_map(c);
}
int fits(int64_t off, int64_t count, int64_t size, int64_t limit);
int core_init(Core *c, PyObject *args, PyObject *kw, const RoleHooks *hooks);
int core_traverse(Core *c, visitproc visit, void *arg);  /* a type with object fields of its own: */
int core_clear(Core *c);                                  /* its slots end in these */
int not_role(Core *c);
extern const RoleHooks plain_hooks;
extern PyType_Spec core_spec;
/* the role types (module.c's table): one per file that defines it */
extern PyType_Spec window_spec, limiter_spec, fixed_window_spec, sliding_counter_spec, token_bucket_spec,
    concurrency_spec, moving_log_spec, lease_spec, distribution_spec, counter_cache_spec;
int role_has_type(int kind, int role);
/* limits' fixed windows (counters.c), summed over a storage's by FixedSum (fixedsum.c) */
int fixed_units_at(Core *c, PyObject *key, int64_t now, int64_t *units);
int is_fixed_core(PyObject *o);
int fixedsum_add_type(PyObject *m);

/* ---- rows, stripes, log rings, the limiter (rings.c) ------------------------------------- */

typedef struct {
    int allowed;
    int64_t used[MAX_RINGS];
    int64_t reset_ns[MAX_RINGS];
    int64_t wait_ns;           /* -1: never (cost above a limit) */
} Verdict;

void empty_rings(Core *c, char *row);
int64_t sat_add(int64_t a, int64_t b);
int64_t sat_sub(int64_t a, int64_t b);
int64_t span_ns(const Ring *r);
int add_row(Core *c, char *row, int64_t now, int f, int64_t n, double d);
/* a limiter's (or token bucket's) decision, counted in its tally if it has one (limiter.c) */
void note_decision(Core *c, int64_t now, int allowed, int near);
int tally_ready(Core *c);
enum { COMMIT_FORCE = 2 };  /* hit_row's commit: count whatever the rates hold (charge) */
int hit_row(Core *c, int64_t slot, int64_t now, int64_t cost, int commit, Verdict *v);
int64_t refund_row(Core *c, int64_t slot, int64_t now, int64_t cost);
void timing(Core *c, int64_t slot, int64_t now, int64_t cost, Verdict *v);
void repair_row(Core *c, int64_t slot);

/* ---- a limiter's log rings (exactlog.c) --------------------------------------------------- */

typedef struct {
    int64_t tail, len, total;    /* the run (its position and running total), as read or last written */
    int64_t gone, gone_hits;     /* entries expiring from its tail at now, and their hits */
    int64_t gone_time;           /* the newest of their times (INT64_MIN: none held hits) */
    int64_t dead_time, dead_hits;  /* the dead entry, as read */
    int dead_counts;             /* whether it counts at now (a clock behind it) */
} LogPlace;

int log_ok(const Ring *r, int64_t *hdr);
int64_t log_used(Core *c, int64_t *hdr, const Ring *r, int64_t now, LogPlace *at);
void log_settle(Core *c, int64_t *hdr, const Ring *r, LogPlace *at);
void log_add(Core *c, int64_t *hdr, const Ring *r, int64_t now, int64_t cost, LogPlace *at);
int64_t log_refund(Core *c, int64_t *hdr, const Ring *r, int64_t now, int64_t cost, LogPlace *at);
void log_timing(Core *c, int64_t *hdr, const Ring *r, int64_t now, int64_t need, int64_t *reset_ns,
                int64_t *wait_ns);
void log_repair(Core *c, int64_t *hdr, const Ring *r);
int claim_stripe(Core *c, int64_t *row);
/* A claimed stripe's (or metrics slot's) display words: its owner's pid, then when it was
 * claimed (host monotonic ns). Two stores, each a fail point of the caller's section. */
void stripe_stamp(int64_t *e, int64_t pid);

/* This process's stripe row, or 0 for the shared row (claimed at first use, after a fork,
 * and at most once a second while every stripe is taken: claim_stripe). */
static inline int stripe_of(Core *c, int64_t *row) {
    if (c->stripe_gen == fork_gen && (c->stripe_row > 0 || mono_ns() < c->retry_ns)) {
        *row = c->stripe_row;
        return 0;
    }
    return claim_stripe(c, row);
}
void give_stripe(Core *c);
int64_t drop_stripe(Core *c);
int stripe_alive(Core *c, int64_t r);
#define STRIPE(c, r) W((c), (c)->stripes_off + (int64_t)(r) * STRIPE_ENTRY_BYTES)
#define STRIPE_MUTEX(c, r) ((pthread_mutex_t *)((char *)STRIPE((c), (r)) + STRIPE_MUTEX_OFF))

/* ---- the key table: keys (keys.c), index (index.c), space (space.c) ---------------------- */

struct StoredKey {
    unsigned char bytes[MAX_STORED_KEY];
    int64_t len;
    const char *raw;      /* the key as given (UTF-8 or bytes), while the call holds it */
    Py_ssize_t raw_len;
    int flags;
    uint64_t hash;   /* KEY_HASH_BITS, never 0 */
    int64_t ident;   /* a key row's ident word for it */
};

typedef struct {
    int64_t *base;   /* entry 0 */
    int64_t slots;   /* a power of two */
    int64_t index;   /* 2 x level + copy */
} Index;

#define KEYWORD(c, off) W((c), (off))     /* the key table's state words in the header */
#define ENT(x, p) ((x)->base + (p) * INDEX_ENTRY_WORDS)
/* An index entry's place word: its key's hash and row, loaded and stored as one. */
#define EPLACE(e) ((e) + INDEX_ENTRY_PLACE)
#define PLACE(hash, row) ((int64_t)((uint64_t)(hash) << ENTRY_ROW_BITS | (uint64_t)(row)))
#define PLACE_HASH(w) ((int64_t)((uint64_t)(w) >> ENTRY_ROW_BITS))
#define PLACE_ROW(w) ((w) & ENTRY_ROW_MASK)
#define PROBE(x, h, p, i) \
    for (int64_t i = 0, p = (int64_t)((h) & (uint64_t)((x)->slots - 1)); i < MAX_PROBES && i < (x)->slots; \
         i++, p = (p + 1) & ((x)->slots - 1))

/* keys.c: a key's stored form and hash, rows compared against it */
int encode_key(Core *c, PyObject *key, StoredKey *k);
int key_is_text(Core *c, PyObject *key);
int row_holds(char *row, const StoredKey *k);
int row_holds_text(char *row, PyObject *key);

/* words.c: the key table's checked state words, the index's copies */
int64_t load_count(Core *c, int64_t off, int64_t most);
#define KEYS(c) load_count((c), KEYS_OFF, (c)->n_rows)
#define INDEX_USED(c) load_count((c), INDEX_USED_OFF, (c)->key_slots << ((c)->index_levels - 1))
Index index_copy(Core *c, int64_t index);
int current_index(Core *c, Index *x);
int rows_top(Core *c, int64_t *top);
/* a heap's two checked state words (rows or chunks): what heap_top loads and names in its error */
typedef struct { int64_t top_off, reserved_off; const char *top_word, *reserved_word, *heap, *unit; } HeapWords;
int heap_top(Core *c, const HeapWords *h, int64_t most, int64_t *top);

/* index.c: the index; find, insert, rebuild, reclaim, clear, and their repair */
int row_idle(Core *c, int64_t slot, int64_t now);
int find_key(Core *c, const StoredKey *k, int64_t *slot, int64_t *gen);
void repair_keys(Core *c);
/* A repair's marks, a zeroed byte per row (or chunk) below top; NULL, the error cleared, if its
 * heap's words could not be read (ok 0) or there is no memory: the next caller meets the damage. */
static inline unsigned char *repair_marks(int ok, int64_t top) {
    unsigned char *marks = ok ? PyMem_Calloc((size_t)(top > 0 ? top : 1), 1) : NULL;
    if (marks == NULL) PyErr_Clear();
    return marks;
}
int insert_key(Core *c, PyObject *key, const StoredKey *k, int64_t now, int64_t *slot, int64_t *gen);
int lock_key(Core *c, PyObject *key, int create, int64_t now, int64_t *slot);
int clear_key(Core *c, PyObject *key);
int met_full(Core *c, int apply);
/* on_full's answer once met_full(c, 1) said it answers: admit (uncounted) or refuse. The one
 * place every role's full table is answered from (concurrency's excepted: it always raises). */
static inline int full_allows(const Core *c) { return c->on_full == ON_FULL_ALLOW; }
uint32_t state_tag(const Core *c, int64_t off, uint64_t v);  /* words.c */
int64_t load_state(Core *c, int64_t off, int64_t most, const char *what);  /* words.c */
#define store_state(c, off, v) \
    STORE(KEYWORD(c, off), (int64_t)((uint64_t)state_tag((c), (off), (uint64_t)(v)) << 32 | (uint64_t)(v)))

/* space.c: memory for the heap's rows and the index's copies, reserved before it is written */
int space_error(Core *c, int err, const char *what);
int take_row(Core *c, int64_t *r, int *from_free);
int reserve_index(Core *c, const Index *x);
void punch_replaced(Core *c, int64_t now);

/* ---- the key cache (keycache.c) --------------------------------------------------------- */

typedef struct CacheEntry {
    uint64_t key_tag;   /* the key object (a strong reference) and 16 bits of its hash: keycache.c */
    int32_t slot, gen;  /* gen 0: stale, look the key up again */
} CacheEntry;

void remember(Core *c, PyObject *key, int64_t slot, int64_t gen);
void forget(Core *c, PyObject *key);
int cache_hint(Core *c, PyObject *key, int64_t *slot, int64_t *gen, int *verified);
void cache_drop(Core *c);
PyObject *Core_cache_probes(Core *c, PyObject *key);

/* ---- live limits (live.c) ---------------------------------------------------------------- */

int live_reload(Core *c);
PyObject *moved_retry_slow(Core *c, const char *method, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames);
/* A limiter method's answer; NULL once moved: what the backend's hook says instead (live.c). */
static inline PyObject *moved_retry(Core *c, PyObject *result, const char *method, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames) {
    return __builtin_expect(result != NULL, 1) ? result : moved_retry_slow(c, method, args, nargs, kwnames);
}
PyObject *Core_set_limits(Core *c, PyObject *limits);
PyObject *Core_retire(Core *c, PyObject *Py_UNUSED(ignored));
PyObject *Core_unretire(Core *c, PyObject *Py_UNUSED(ignored));
PyObject *Core_live(Core *c, PyObject *Py_UNUSED(ignored));
PyObject *Core_set_on_moved(Core *c, PyObject *hook);
#define LIVE_METHODS                                                                                     \
    METHOD_O(set_limits, Core_set_limits, "limits",                                                      \
        "Every process's limits from its next call: (limit per ring, changed wall ns); the new generation."), \
    METHOD_NOARGS(retire, Core_retire, "Mark the segment replaced under its name: every call raises WindowMovedError."), \
    METHOD_NOARGS(unretire, Core_unretire, "A failed move's roll back: the segment live again, its limits as they were."), \
    METHOD_NOARGS(live, Core_live, "(generation word, changed wall ns, the limits in force) as this process sees them."), \
    METHOD_O(set_on_moved, Core_set_on_moved, "hook", "hook(method name) -> the method to call instead once moved (or None).")

/* ---- a keyed method's prologue and epilogue (inline: the hot path pays no call) --------- *
 * Every keyed method runs: parse its arguments -> key_enter -> its own checks -> key_lock (now,
 * then the key's row lock) -> its section -> key_unlock -> build its answer -> key_leave.
 * key_leave gives back whatever is still held, so no error path leaves a row locked or the
 * Core entered; the answer is built after key_unlock, never under a segment lock. */
typedef struct {
    int entered;  /* enter() succeeded: leave() is owed */
    int lock;     /* the row lock this call holds, or -1 */
} KeyCall;
#define KEY_CALL {0, -1}

static inline int key_enter(Core *c, KeyCall *kc) {
    if (enter(c) < 0) return -1;
    kc->entered = 1;
    return 0;
}
/* The key's row locked, now (read by the caller) its time: 1 held, 0 no such key (create 0:
 * nothing made), -1 error (a full table: met_full says whether on_full answers it). */
static inline int key_lock_at(Core *c, KeyCall *kc, PyObject *key, int create, int64_t now, int64_t *slot) {
    int got = lock_key(c, key, create, now, slot);
    if (got > 0) kc->lock = row_lock(c, *slot);
    /* live limits (live.c): one load, under the row lock (a retired segment's counts are
     * read under it: no hit counts there after); the newest limits from each next call */
    if (__builtin_expect(got >= 0 && LOAD(W(c, LIVE_GEN_OFF)) != c->live_gen, 0) && live_reload(c) < 0) return -1;
    return got;
}
/* Now read once, before any lock (an injected clock is Python code), then the row locked. */
static inline int key_lock(Core *c, KeyCall *kc, PyObject *key, int create, int64_t *now, int64_t *slot) {
    if (now_ns(c, now) < 0) return -1;
    return key_lock_at(c, kc, key, create, *now, slot);
}
static inline void key_unlock(Core *c, KeyCall *kc) {
    if (kc->lock >= 0) lock_give(c, kc->lock);
    kc->lock = -1;
}
static inline PyObject *key_leave(Core *c, KeyCall *kc, PyObject *result) {
    key_unlock(c, kc);
    if (kc->entered) leave(c);
    return result;
}

/* ---- a limiter's decisions (limiter.c): its tally, which a token bucket keeps too ---------- */

PyObject *Core_set_tally(Core *c, PyObject *const *args, Py_ssize_t nargs);
int decider_traverse(Core *c, visitproc visit, void *arg);
int decider_clear(Core *c);
/* what every decider's table holds: its tally, and its live limits (live.c) */
#define DECIDER_METHODS                                                                                         \
    METHOD_POS(set_tally, Core_set_tally, "tally, shadow", "Count decisions in tally (or None); shadow: hit() always True."), \
    LIVE_METHODS

/* ---- the methods (methods.c): a table's entries and the argument helpers ------------------ */

#include "methods.h"

#pragma GCC visibility pop

#endif /* SHMWIN_CORE_H */
