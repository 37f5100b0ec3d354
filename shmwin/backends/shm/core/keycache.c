/* keycache.c -- this process's way from a key object to its locked row: the key cache
 * first, then the lock-free lookup, then (creating) the insert under the key table's lock.
 */
#include "core.h"

#include <sys/mman.h>

/* ---- the key cache: key object -> (slot, generation), this process only ------------------ *
 * Exact str/bytes keys (their hashes are cached in the objects), laid out as CPython's dict
 * is: a small int32 index, open-addressed by hash, into entries kept in insertion order --
 * so the index stays in cache and keys seen in a steady order are read sequentially. A hit
 * is only a hint: the generation is checked against the row under the row's lock. */


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

void cache_drop(Core *c) {
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

/* Exact str/bytes of at most CACHED_KEY_CHARS characters: the cache never holds big keys alive
 * (a key longer than a row stores -- limits' keys, mostly -- is still worth its lookup saved). */
#define CACHED_KEY_CHARS 128
static int cacheable(PyObject *key) {
    return (PyUnicode_CheckExact(key) && PyUnicode_GET_LENGTH(key) <= CACHED_KEY_CHARS) ||
           (PyBytes_CheckExact(key) && PyBytes_GET_SIZE(key) <= CACHED_KEY_CHARS);
}

CacheEntry *cache_get(Core *c, PyObject *key) {
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

void remember(Core *c, PyObject *key, int64_t slot, int64_t gen) {
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

void forget(Core *c, PyObject *key) {
    CacheEntry *hint = cache_get(c, key);
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
 * Bounded: two lock-free tries, then the insert path, which is definitive under LOCK_KEY_TABLE. */
int lock_key(Core *c, PyObject *key, int create, int64_t now, int64_t *slot) {
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
        if (LOAD(RGEN(ROW(c, s))) == g) {
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
