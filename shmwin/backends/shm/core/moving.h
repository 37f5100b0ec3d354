/* moving.h -- what the files of role "moving-log" share (moving.c: a key's run of hit times
 * and its methods; chunks.c: the chunk heap those runs spill into). Their design, invariants
 * and repair are described at the top of moving.c and chunks.c. */
#ifndef SHMWIN_MOVING_H
#define SHMWIN_MOVING_H

#include "core.h"

#pragma GCC visibility push(hidden)  /* as core.h: nothing here leaves the module */

static inline int64_t *mstate(Core *c, char *row) { return (int64_t *)(row + c->rings_off); }
static inline int64_t *inline_at(int64_t *st) { return (int64_t *)((char *)st + MOVING_STATE_ENTRIES_OFF); }
static inline char *chunk_at(Core *c, int64_t i) { return c->base + c->chunks_off + i * CHUNK_BYTES; }
static inline uint32_t *cnext(char *ch) { return (uint32_t *)(ch + CHUNK_NEXT_OFF); }
static inline uint32_t *cowner(char *ch) { return (uint32_t *)(ch + CHUNK_OWNER_OFF); }
static inline int64_t *centries(char *ch) { return (int64_t *)(ch + CHUNK_ENTRIES_OFF); }
static inline int64_t hits_of(int64_t w) { return (int64_t)((uint64_t)w & MOVING_HITS_MAX); }
/* The longest chain a key can hold: a key's run holds at most n counting entries, its dead
 * entry, one emptied by a merge and the one being written (n + 3), every chunk whole but the
 * oldest: ceil((n + 3) / CHUNK_ENTRIES) + 1 chunks (moving.c takes no chunk past that). */
static inline int64_t max_chain(Core *c) {
    return (c->rings[0].n + 3 + CHUNK_ENTRIES - 1) / CHUNK_ENTRIES + 1;
}
/* A moving log's chain word (layout_words.MOVING_STATE): the shape of a key's run. */
typedef struct {
    int64_t first, last;  /* its oldest and newest chunks (-1: none) */
    int64_t tail, inl;    /* the run's first entry in the oldest chunk; its entries in the row */
} Shape;
static inline Shape shape_of(int64_t word) {
    uint64_t w = (uint64_t)word;
    Shape s = {(int64_t)(w & MOVING_LINK_MASK) - 1, (int64_t)(w >> MOVING_LAST_SHIFT & MOVING_LINK_MASK) - 1,
               (int64_t)(w >> MOVING_TAIL_SHIFT & 3), (int64_t)(w >> MOVING_INLINE_SHIFT & 3)};
    return s;
}
static inline int64_t shape_word(const Shape *s) {
    uint64_t w = (uint64_t)s->inl << MOVING_INLINE_SHIFT;
    if (s->first >= 0)
        w |= (uint64_t)(s->first + 1) | (uint64_t)(s->last + 1) << MOVING_LAST_SHIFT | (uint64_t)s->tail << MOVING_TAIL_SHIFT;
    return (int64_t)w;
}
/* A shape no store of moving.c makes: a chunk end without the other, a tail or inline count
 * past its entries, bits above the inline count. */
static inline int shape_junk(int64_t word) {
    Shape s = shape_of(word);
    return (s.first < 0) != (s.last < 0) || s.tail >= CHUNK_ENTRIES || s.inl > MOVING_INLINE ||
           (s.first < 0 && s.tail != 0) || ((uint64_t)word >> (MOVING_INLINE_SHIFT + 2)) != 0;
}
int chunks_top(Core *c, int64_t *top);
int64_t chain_next(Core *c, int64_t slot, int64_t v, int64_t top, int64_t *steps);
int64_t junk_chain(Core *c, int64_t slot, int64_t v);
int append_chunk(Core *c, int64_t slot, const int64_t words[CHUNK_ENTRIES], int64_t *got);
void unlink_chunks(Core *c, int64_t slot, int64_t count, int64_t shape);
void moving_empty(Core *c, char *row, int64_t slot);
void repair_chunks(Core *c);
PyObject *Core_moving_chunks(Core *c, PyObject *Py_UNUSED(ignored));

#pragma GCC visibility pop

#endif /* SHMWIN_MOVING_H */
