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

/* ---- module state: the exception classes (shmwin.errors) and the Core type ---------------- */

typedef struct {
    PyTypeObject *core_type;
    PyObject *closed, *timeout, *corrupt, *full, *field, *space;  /* WindowClosedError ... */
    PyTypeObject *series_map_type, *series_value_type;  /* role "series" (series.c) */
} ModState;

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

typedef struct {
    PyObject_HEAD
    ModState *st;       /* the module's state: the type holds the module, we hold the type */
    Py_buffer buf;      /* an export of the mmap: it stays mapped while we hold it */
    char *base;
    int closed;         /* set by close(): every entry point raises from then on */
    int busy;           /* calls inside (another thread may close while one waits) */
    int has_buf;
    /* geometry: read from the segment's header at init, the rest derived (coretype.c) */
    int limiter, floats, striped, keyed;
    int role;           /* ROLES: the counter roles' rows hold state, not buckets (counters.c) */
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
    /* a limiter's decisions (limiter.c, note_decision) */
    PyObject *tally;    /* its decisions window: a striped Core of TALLY_FIELDS, or NULL */
    int shadow;         /* 1: hit() answers True whatever it decided (a dry run) */
    /* a tally's last bucket (limiter.c, note_in_stripe): epoch note_e spans [note_lo_ns,
     * note_lo_ns + bucket) in this process's stripe row note_row, at note_b: no division per hit */
    int64_t note_e, note_lo_ns, note_row;
    int64_t *note_b;
    int64_t chunks_off, n_chunks;  /* role "moving-log": the chunk heap (moving.c); else 0 */
    int moving_shift;   /* role "moving-log": log2 of its entries' time quantum (layout_words) */
    int64_t key_bytes;  /* keyed: the key bytes a row stores (a moving log's: a digest) */
    int64_t names_off;  /* a moving log's key names (NAME_ENTRY x NAME_SLOTS), before the index; else -1 */
    int chunks_held;         /* this thread holds LOCK_CHUNKS already (reset): emptying a row takes it not */
} Core;

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
int still_open(Core *c);

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
extern PyType_Spec core_spec;

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
int claim_stripe(Core *c, int64_t *row);

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
int stripe_alive(Core *c, int64_t r);
#define STRIPE(c, r) W((c), (c)->stripes_off + (int64_t)(r) * STRIPE_ENTRY_BYTES)
#define STRIPE_MUTEX(c, r) ((pthread_mutex_t *)((char *)STRIPE((c), (r)) + STRIPE_MUTEX_OFF))

/* ---- the key table: keys (keys.c), index (index.c), space (space.c) ---------------------- */

typedef struct {
    unsigned char bytes[MAX_STORED_KEY];
    int64_t len;
    const char *raw;      /* the key as given (UTF-8 or bytes), while the call holds it */
    Py_ssize_t raw_len;
    int flags;
    uint64_t hash;   /* KEY_HASH_BITS, never 0 */
    int64_t ident;   /* a key row's ident word for it */
} StoredKey;

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

/* keys.c: a key's stored form and hash, rows compared against it, a moving log's key names */
int encode_key(Core *c, PyObject *key, StoredKey *k);
int key_is_text(Core *c, PyObject *key);
int row_holds(char *row, const StoredKey *k);
int row_holds_text(char *row, PyObject *key);
void name_key(Core *c, const StoredKey *k, int64_t r, int64_t gen, int64_t now);

/* index.c: the checked state words, the index; find, insert, rebuild, reclaim, clear, repair */
int64_t load_count(Core *c, int64_t off, int64_t most);
#define KEYS(c) load_count((c), KEYS_OFF, (c)->n_rows)
#define INDEX_USED(c) load_count((c), INDEX_USED_OFF, (c)->key_slots << ((c)->index_levels - 1))
Index index_copy(Core *c, int64_t index);
int current_index(Core *c, Index *x);
int rows_top(Core *c, int64_t *top);
int row_idle(Core *c, int64_t slot, int64_t now);
int find_key(Core *c, const StoredKey *k, int64_t *slot, int64_t *gen);
void repair_keys(Core *c);
int insert_key(Core *c, PyObject *key, const StoredKey *k, int64_t now, int64_t *slot);
int lock_key(Core *c, PyObject *key, int create, int64_t now, int64_t *slot);
int clear_key(Core *c, PyObject *key);
int met_full(Core *c, int apply);
/* on_full's answer once met_full(c, 1) said it answers: admit (uncounted) or refuse. The one
 * place every role's full table is answered from (concurrency's excepted: it always raises). */
static inline int full_allows(const Core *c) { return c->on_full == ON_FULL_ALLOW; }
uint32_t state_tag(const Core *c, int64_t off, uint64_t v);
int64_t load_state(Core *c, int64_t off, int64_t most, const char *what);
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
void cache_drop(Core *c);
PyObject *Core_cache_probes(Core *c, PyObject *key);

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

/* ---- limits' fixed window and sliding window counter, the token bucket (counters.c) ------- */

PyObject *Core_fixed_incr(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_fixed_get(Core *c, PyObject *key);
PyObject *Core_sliding_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_sliding_get(Core *c, PyObject *key);
PyObject *Core_token_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_token_check(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

/* ---- per-key concurrency: holders over live processes (concurrency.c) -------------------- */

int conc_busy(Core *c, int64_t slot);
PyObject *Core_conc_acquire(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_conc_release(Core *c, PyObject *key);
PyObject *Core_conc_count(Core *c, PyObject *key);
PyObject *Core_conc_mine(Core *c, PyObject *key);

/* ---- limits' moving window: hit times in the row and in chunks (moving.c) ---------------- */

#define IS_MOVING(c) ((c)->role == ROLE_MOVING_LOG && (c)->n_chunks >= 0 && (c)->state_words > 0)
void moving_empty(Core *c, char *row, int64_t slot);
void repair_chunks(Core *c);
PyObject *Core_moving_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_moving_get(Core *c, PyObject *key);
PyObject *Core_moving_chunks(Core *c, PyObject *Py_UNUSED(ignored));

/* ---- the host tier of a two-tier limiter: each key's lease (lease.c) ----------------------- */

PyObject *Core_lease_spend(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_lease_install(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_lease_deny(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_lease_refund(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_lease_seal(Core *c, PyObject *key);
PyObject *Core_lease_get(Core *c, PyObject *key);

/* ---- a window's adds (window.c) ------------------------------------------------------------ */

PyObject *Core_add(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_add_and_total(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_add_batch(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

/* ---- a limiter's methods and decisions (limiter.c) ---------------------------------------- */

PyObject *Core_set_tally(Core *c, PyObject *const *args, Py_ssize_t nargs);
PyObject *Core_hit(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_refund(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_charge(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *Core_check(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

/* ---- the methods (methods.c) ------------------------------------------------------------- */

extern PyMethodDef core_methods[];
int parse(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *const *names, int n,
          PyObject **out, const char *fname);
int cost_of(PyObject *obj, int64_t *cost, int64_t at_least);
int ring_rows(Core *c);

#pragma GCC visibility pop

#endif /* SHMWIN_CORE_H */
