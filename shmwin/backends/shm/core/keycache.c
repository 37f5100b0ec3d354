/* keycache.c -- this process's way from a key object to its locked row: the key cache
 * first, then the lock-free lookup, then (creating) the insert under the key table's lock.
 */
#include "core.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- the key cache: key object -> (slot, generation), this process only ------------------ *
 * Exact str/bytes keys (their hashes are cached in the objects), in one open-addressed table
 * of 16-byte entries, probed linearly from the key's hash and kept at most 3/4 full: a warm
 * key is found by reading one line of the table (an index in front of the entries cost two
 * dependent misses once the keys outgrow the caches); 100,000 keys take 4 MiB of it.
 * A hit is only a hint: the generation is checked against the row under its lock.
 *
 * A request most often brings its key as a new object, equal to the one cached, which by then
 * is cold: comparing the two would wait for one more miss. So an entry found by its tag (16
 * bits of the key's hash) for another object is checked against the row it points at, whose
 * lines come anyway: a short key's row holds its very text, compared under the row's lock
 * (row_holds_text). A longer key (its row keeps digests) is compared with the cached object,
 * whose lines are asked for together with the row's, so that the two misses overlap. The
 * hash is tagged with the key's type: b"k" and "k" (equal hashes in CPython) are two keys.
 *
 * Flooding. Keys come from clients, and Python's hash of a str is known to anyone who knows
 * the seed (PYTHONHASHSEED=0, as some deployments fix it): by trying names, an attacker finds
 * thousands of keys with the same low 13 bits (8,192 tries a key). Placed by `hash & mask`,
 * they all started at one place and each hit walked the whole run (4,000 such keys: a warm
 * hit 15x a normal key's cost, growing with their number). So a key's place and tag come from
 * its hash mixed with the table's own secret (cache_mix: 128 random bits, drawn anew each
 * time the table is built, so this process's earlier tables tell nothing), and no lookup reads
 * more than PROBE_LIMIT entries: a key that finds no room within them is simply not cached
 * (its hits take the shared index, whose SipHash has the segment's secret key), or makes a
 * table at least half full grow first. With random places, runs of 64 do not form below half
 * full (in 20 simulated fills of 2^18 entries, the first came at 0.58 full at the earliest, at
 * 0.64 on average): normal keys are always cached, and a table grows a little early at most.
 *
 * An entry: | bits 0-47: the key object's address (a strong reference) | 48-63: its tag |
 * then slot and generation (int32 each). Keys at addresses past 48 bits are never cached. */

#define ADDRESS_BITS 48
#define ADDRESS_MASK ((UINT64_C(1) << ADDRESS_BITS) - 1)
#define ENTRY_KEY(e) ((PyObject *)(uintptr_t)((e)->key_tag & ADDRESS_MASK))
#define TAG_OF(hash) ((uint64_t)(hash) >> ADDRESS_BITS)
#define PROBE_LIMIT 64  /* entries a lookup reads at most: 16 lines */

/* Memory for the table. A large one is mapped on its own and marked for huge pages: a probe
 * at a random place then rarely misses the TLB (a page walk is dear, most of all under a VM's
 * nested paging). Both kinds come zeroed: every entry empty (key_tag 0). */
#define HUGE_MIN (2LL << 20)
static void *cache_alloc(size_t bytes) {
    if ((int64_t)bytes < HUGE_MIN) return PyMem_Calloc(1, bytes);
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
#define TABLE_BYTES(c) ((size_t)((c)->cache_mask + 1) * sizeof(CacheEntry))

void cache_drop(Core *c) {
    for (int64_t i = 0; i <= c->cache_mask; i++)
        if (c->cache[i].key_tag != 0) Py_DECREF(ENTRY_KEY(&c->cache[i]));
    if (c->cache != NULL) cache_free(c->cache, TABLE_BYTES(c));
    c->cache = NULL;
    c->cache_mask = -1;
    c->cache_used = 0;
}

/* A new table's secret: 128 bits from the kernel, or (no entropy yet: early boot, a seccomp
 * filter) from the clock, the process and the stack's place, which are not known in advance
 * either. The test build takes it from SHMWIN_CACHE_SECRET="k0:k1" (hex) if set: "0:1" places
 * keys by their hash alone, as before the secret, for the tests of PROBE_LIMIT. */
static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}
/* getrandom(2) by its system call: the wheels are built for glibc 2.17, whose libc has no
 * getrandom() (2.25+); the kernel has had the call since 3.17. Flags 1: GRND_NONBLOCK. */
static int kernel_random(uint64_t k[2]) {
#ifdef SYS_getrandom
    long got = syscall(SYS_getrandom, k, 2 * sizeof *k, 1);
    return got == (long)(2 * sizeof *k) ? 0 : -1;
#else
    (void)k;
    return -1;
#endif
}

static void cache_secret(uint64_t k[2]) {
    if (kernel_random(k) < 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t x = (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
        x ^= (uint64_t)getpid() << 40 ^ (uint64_t)(uintptr_t)k;
        k[0] = splitmix(&x);
        k[1] = splitmix(&x);
    }
#ifdef SHMWIN_TEST
    const char *fixed = getenv("SHMWIN_CACHE_SECRET");
    if (fixed != NULL && *fixed) (void)sscanf(fixed, "%" SCNx64 ":%" SCNx64, &k[0], &k[1]);
#endif
    k[1] |= 1;  /* a multiplier: never 0 */
}

/* The word an entry is placed (its low bits) and tagged (TAG_OF) by: Python's hash, bytes
 * told apart from a str of the same text, then multiplied by the secret into 128 bits whose
 * halves are folded (every bit then depends on every bit of the hash and of the secret). */
static inline uint64_t cache_mix(uint64_t k0, uint64_t k1, PyObject *key, Py_hash_t h) {
    uint64_t typed = (uint64_t)h ^ (PyBytes_CheckExact(key) ? UINT64_C(0x5bd1e9955bd1e995) : 0);
    unsigned __int128 m = (unsigned __int128)(typed ^ k0) * k1;
    return (uint64_t)m ^ (uint64_t)(m >> 64);
}
#define CACHE_HASH(c, key, h) cache_mix((c)->cache_k0, (c)->cache_k1, (key), (h))

static void prefetch_row(Core *c, int64_t s, int64_t now);

/* How cache_probe takes an entry of key's tag that holds another object. */
enum probe_mode {
    PROBE_EQUAL,  /* only if that object equals key (which reads it) */
    PROBE_FETCH,  /* the same, with the entry's row asked for first: the misses overlap */
    PROBE_HIT,    /* a key_is_text() key: on its tag, for the caller to check against the row
                   * (*verified 0); any other key: as PROBE_FETCH */
};

/* An entry e of key's tag holding another object: e if it is to be taken (*verified as
 * cache_probe's), NULL to probe on. Off the path of a key that finds its own object. */
static __attribute__((noinline)) CacheEntry *take_other(Core *c, CacheEntry *e, PyObject *key, enum probe_mode mode,
                                                        int64_t now, int *verified) {
    PyObject *other = ENTRY_KEY(e);
    if (mode == PROBE_HIT && key_is_text(c, key)) {
        *verified = 0;
        return e;
    }
    if (mode != PROBE_EQUAL && e->gen > 0 && e->slot >= 0) {
        prefetch_row(c, e->slot, now);
        __builtin_prefetch(other);               /* its header, and the text a long key */
        __builtin_prefetch((char *)other + 64);  /* has past it (a prefetch never faults) */
    }
    if (Py_TYPE(other) != Py_TYPE(key) || PyObject_RichCompareBool(other, key, Py_EQ) != 1) return NULL;
    *verified = 1;
    return e;
}

/* The entry of key, or the empty entry where it would go, among the PROBE_LIMIT from its place;
 * NULL if none of them is either. *verified: the entry is key's for sure (the same object, or
 * an equal one). */
static CacheEntry *cache_probe(Core *c, PyObject *key, uint64_t hash, enum probe_mode mode, int64_t now,
                               int *verified) {
    uint64_t tag = TAG_OF(hash), mask = (uint64_t)c->cache_mask, i = hash & mask;
    for (int n = 0; n < PROBE_LIMIT; n++, i = (i + 1) & mask) {
        CacheEntry *e = &c->cache[i];
        uint64_t word = e->key_tag;
        if ((PyObject *)(uintptr_t)(word & ADDRESS_MASK) == key) {
            *verified = 1;
            return e;
        }
        if (word == 0) {
            *verified = 0;
            return e;
        }
        if (TAG_OF(word) == tag && take_other(c, e, key, mode, now, verified) != NULL) return e;
    }
    *verified = 0;
    return NULL;
}

/* Exact str/bytes of at most CACHED_KEY_CHARS characters, at an address an entry can hold:
 * the cache never holds big keys alive (a key longer than a row stores -- limits' keys,
 * mostly -- is still worth its lookup saved). */
#define CACHED_KEY_CHARS 128
static int cacheable(PyObject *key) {
    return ((uintptr_t)key & ~(uintptr_t)ADDRESS_MASK) == 0 &&
           ((PyUnicode_CheckExact(key) && PyUnicode_GET_LENGTH(key) <= CACHED_KEY_CHARS) ||
            (PyBytes_CheckExact(key) && PyBytes_GET_SIZE(key) <= CACHED_KEY_CHARS));
}

/* key's live entry, or NULL; mode, now and *verified as cache_probe's. */
static CacheEntry *cache_get(Core *c, PyObject *key, enum probe_mode mode, int64_t now, int *verified) {
    *verified = 0;
    if (c->cache_used == 0 || !cacheable(key)) return NULL;
    Py_hash_t h = PyObject_Hash(key);
    if (h == -1) {
        PyErr_Clear();
        return NULL;
    }
    CacheEntry *e = cache_probe(c, key, CACHE_HASH(c, key, h), mode, now, verified);
    return e != NULL && e->key_tag != 0 && e->gen > 0 ? e : NULL;
}

/* Room for one more entry: the table doubled past 3/4 full (or now, if `now`), with a new
 * secret, every entry placed again by it. One with no room within PROBE_LIMIT of its new place
 * is dropped (a cache only; its key is a str or bytes: no Python code runs as it goes). */
static int cache_grow(Core *c, int now) {
    if (!now && 4 * (c->cache_used + 1) <= 3 * (c->cache_mask + 1)) return 0;
    int64_t size = c->cache_mask < 0 ? 64 : 2 * (c->cache_mask + 1);
    CacheEntry *table = cache_alloc((size_t)size * sizeof(CacheEntry));
    if (table == NULL) return -1;
    uint64_t k[2], mask = (uint64_t)(size - 1);
    cache_secret(k);
    int64_t kept = 0;
    for (int64_t j = 0; j <= c->cache_mask; j++) {
        uint64_t word = c->cache[j].key_tag;
        if (word == 0) continue;
        PyObject *key = ENTRY_KEY(&c->cache[j]);  /* str and bytes keep their hash: no error */
        uint64_t hash = cache_mix(k[0], k[1], key, PyObject_Hash(key)), i = hash & mask;
        int n = 0;
        for (; n < PROBE_LIMIT && table[i].key_tag != 0; n++) i = (i + 1) & mask;
        if (n == PROBE_LIMIT) {
            Py_DECREF(key);
            continue;
        }
        table[i] = c->cache[j];
        table[i].key_tag = (word & ADDRESS_MASK) | TAG_OF(hash) << ADDRESS_BITS;
        kept++;
    }
    if (c->cache != NULL) cache_free(c->cache, TABLE_BYTES(c));
    c->cache = table;
    c->cache_mask = size - 1;
    c->cache_used = kept;
    c->cache_k0 = k[0];
    c->cache_k1 = k[1];
    return 0;
}

void remember(Core *c, PyObject *key, int64_t slot, int64_t gen) {
    if (!cacheable(key) || gen >= INT32_MAX || slot >= INT32_MAX) return;
    if (c->cache_used >= 4 * KEYS(c) + 256) cache_drop(c);  /* churn: start over */
    if (cache_grow(c, 0) < 0) return;  /* a cache only */
    Py_hash_t h = PyObject_Hash(key);
    if (h == -1) {
        PyErr_Clear();  /* a cache only */
        return;
    }
    int verified;
    uint64_t hash = CACHE_HASH(c, key, h);
    CacheEntry *e = cache_probe(c, key, hash, PROBE_EQUAL, 0, &verified);
    if (e == NULL && 2 * c->cache_used >= c->cache_mask + 1) {  /* a long run in a table half full */
        if (cache_grow(c, 1) < 0) return;
        hash = CACHE_HASH(c, key, h);  /* the new table's secret */
        e = cache_probe(c, key, hash, PROBE_EQUAL, 0, &verified);
    }
    if (e == NULL) return;  /* no room within PROBE_LIMIT of its place: not cached */
    if (e->key_tag == 0) {
        e->key_tag = (uint64_t)(uintptr_t)Py_NewRef(key) | TAG_OF(hash) << ADDRESS_BITS;
        c->cache_used++;
    }
    e->slot = (int32_t)slot;
    e->gen = (int32_t)gen;
}

/* key's (slot, generation) in this process's key cache: 1, or 0 if it holds none. No lock is
 * taken and the row is not read: a hint for a reader that takes no row lock (fixedsum.c), which
 * checks the generation around its loads. *verified: the entry holds key's own object or an
 * equal one; else (a short key found by its tag) the caller compares the row's text. */
int cache_hint(Core *c, PyObject *key, int64_t *slot, int64_t *gen, int *verified) {
    CacheEntry *e = cache_get(c, key, PROBE_HIT, 0, verified);
    if (e == NULL) return 0;
    *slot = e->slot;
    *gen = e->gen;
    return 1;
}

void forget(Core *c, PyObject *key) {
    int verified;
    CacheEntry *hint = cache_get(c, key, PROBE_EQUAL, 0, &verified);
    if (hint != NULL) hint->gen = 0;
    PyErr_Clear();  /* a cache only */
}

/* Fetch the lines a section at `now` will touch in row s: its head (key header and ring 0's
 * header) and ring 0's current bucket, in parallel, while the lock is being taken. */
static void prefetch_row(Core *c, int64_t s, int64_t now) {
    char *row = ROW(c, s);
    const Ring *r = &c->rings[0];
    __builtin_prefetch(row, 1);
    if (r->cw) {  /* a limiter's compact ring: its header, and the count of now's epoch */
        __builtin_prefetch(RING(c, row, 0) + LIMITER_RING_WORDS - 1, 1);
        __builtin_prefetch(COUNT_AT(RING(c, row, 0), r, now / r->bucket_ns), 1);
        return;
    }
    __builtin_prefetch(RING(c, row, 0) + c->slot_words, 1);  /* the ring header (packed rows: maybe the next line) */
    if (c->state_words == 0)  /* a counter role's row holds its state, no bucket (a moving log: up to 4096) */
        __builtin_prefetch(BUCKET(c, RING(c, row, 0), r, now / r->bucket_ns), 1);
}

/* Find key and lock its row: 1 holding it (*slot), 0 absent (and not created), -1 error.
 * Bounded: three lock-free tries (the cache's entry, then the cache comparing objects or the
 * shared index), then the insert path, which is definitive under LOCK_KEY_TABLE. */
int lock_key(Core *c, PyObject *key, int create, int64_t now, int64_t *slot) {
    StoredKey k;
    int encoded = 0;
    /* a short key's entry may be taken on its tag (its row holds its text, to compare); a wrong
     * one then costs one more try, comparing objects, before the shared index's two */
    enum probe_mode mode = PROBE_HIT;
    for (int attempt = 0; attempt < 3; attempt++) {
        int64_t s, g;
        int verified;
        CacheEntry *hint = cache_get(c, key, mode, now, &verified);
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
        char *row = ROW(c, s);
        if (LOAD(RGEN(row)) == g && (hint == NULL || verified || row_holds_text(row, key))) {
            if (hint == NULL) remember(c, key, s, g);
            *slot = s;
            return 1;
        }
        lock_give(c, lock);  /* the entry was given to another key meanwhile: look again */
        if (hint != NULL && verified) {
            hint = cache_get(c, key, PROBE_EQUAL, 0, &verified);  /* the table may have moved while we waited */
            if (hint != NULL) hint->gen = 0;
        }
        mode = PROBE_FETCH;  /* comparing objects now: an entry of key's tag may be another key's */
    }
    if (!create) return 0;
    if (!encoded && encode_key(c, key, &k) < 0) return -1;
    int64_t g;
    int got = insert_key(c, key, &k, now, slot, &g);
    if (got > 0) remember(c, key, *slot, g);  /* the key cache is this file's: index.c knows it not */
    return got;
}

/* cache_probes(key) -> how many entries a lookup of key reads in this process's key cache: to
 * its entry, or to the empty one that ends its run, at most PROBE_LIMIT (0: no table, or a key
 * never cached). For the tests and the curious: a flood of keys at one place shows as long probes. */
PyObject *Core_cache_probes(Core *c, PyObject *key) {
    long long reads = 0;
    if (enter(c) < 0) return NULL;
    if (c->cache_used > 0 && cacheable(key)) {
        Py_hash_t h = PyObject_Hash(key);
        if (h == -1) {
            leave(c);
            return NULL;
        }
        uint64_t hash = CACHE_HASH(c, key, h);
        int verified;
        CacheEntry *e = cache_probe(c, key, hash, PROBE_EQUAL, 0, &verified);
        reads = PROBE_LIMIT;
        if (e != NULL) reads = (long long)(((uint64_t)(e - c->cache) - hash) & (uint64_t)c->cache_mask) + 1;
    }
    leave(c);
    return PyLong_FromLongLong(reads);
}
