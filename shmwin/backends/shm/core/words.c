/* words.c -- the key table's state words, checked where they are loaded, and the index's
 * copies: what index.c, space.c and chunks.c read of the table before they touch its memory
 * (layout.py, "Key table"). No lock is taken here: each reader says which lock it holds.
 */
#include "core.h"

/* ---- the key table's state words: checked where they are loaded ------------------------ *
 * They lie outside the header's checksum and change under LOCK_KEY_TABLE while others read them
 * lock-free. Three decide where memory is touched -- the index descriptor, rows_top and
 * rows_reserved -- and the file is sparse: a value within bounds but past what was reserved
 * would send a reader into a hole, where a fault on a full /dev/shm is a SIGBUS. So each of
 * the three carries its own check, written in the same store: value | tag << 32, the tag a
 * mix of the value, the word's offset and the segment's hash key (layout.state_word). Junk
 * fails it (a zeroed or flipped word, a copy of another word) and is a CorruptSegmentError.
 * The other words only count (keys, index_used) or time (rebuilt_ns): clamped where loaded. */
uint32_t state_tag(const Core *c, int64_t off, uint64_t v) {
    uint64_t x = (v | (uint64_t)off << 32) ^ c->hk0;
    x *= c->hk1 | 1;
    x ^= x >> 32;
    x *= 0x9e3779b97f4a7c15ULL;
    return (uint32_t)(x >> 32);
}
/* A checked state word's value, in [0, most]; -1 with CorruptSegmentError set if it fails. */
int64_t load_state(Core *c, int64_t off, int64_t most, const char *what) {
    uint64_t w = (uint64_t)LOAD(KEYWORD(c, off)), v = w & 0xFFFFFFFFu;
    if ((uint32_t)(w >> 32) == state_tag(c, off, v) && v <= (uint64_t)most) return (int64_t)v;
    PyErr_Format(c->st->corrupt, "window %R: its key table's %s word (%lld) fails its check: the segment "
                 "is corrupt", c->name, what, (long long)w);
    return -1;
}

/* A counting state word, clamped to [0, most]: junk there miscounts, never overflows. */
int64_t load_count(Core *c, int64_t off, int64_t most) {
    int64_t v = LOAD(KEYWORD(c, off));
    return v < 0 ? 0 : v > most ? most : v;
}

Index index_copy(Core *c, int64_t index) {
    int64_t level = index >> 1, copy = index & 1;
    Index x = {W(c, c->keys_off + KEY_ENTRY_BYTES * c->key_slots *
                        (2 * ((1LL << level) - 1) + copy * (1LL << level))),
               c->key_slots << level, index};
    return x;
}

/* The published index; a junk descriptor is an error, never a wild read. */
int current_index(Core *c, Index *x) {
    int64_t d = load_state(c, INDEX_OFF, 2 * c->index_levels - 1, "index descriptor");
    if (d < 0) return -1;
    *x = index_copy(c, d);
    return 0;
}

/* What may be followed in a heap of rows or chunks: those handed out, every one reserved. 0, or
 * -1 with a CorruptSegmentError. The top word is loaded first: a writer stores the reserved word
 * before it, so top <= reserved. Lock-free: each caller says which lock it holds. */
int heap_top(Core *c, const HeapWords *h, int64_t most, int64_t *top) {
    int64_t t = load_state(c, h->top_off, most, h->top_word), reserved;
    if (t < 0 || (reserved = load_state(c, h->reserved_off, most, h->reserved_word)) < 0) return -1;
    if (t > reserved) {
        PyErr_Format(c->st->corrupt, "window %R: its %s hands out %lld %s but reserved only %lld: "
                     "the segment is corrupt", c->name, h->heap, (long long)t, h->unit, (long long)reserved);
        return -1;
    }
    *top = t;
    return 0;
}

/* Rows that may be followed (the key table's heap of rows). */
int rows_top(Core *c, int64_t *top) {
    static const HeapWords rows = {ROWS_TOP_OFF, ROWS_RESERVED_OFF, "rows_top", "rows_reserved", "key table", "rows"};
    return heap_top(c, &rows, c->n_rows, top);
}
