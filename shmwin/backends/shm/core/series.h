/* series.h -- what the files of role "series" share (series.c: the map and its methods;
 * seriesdir.c: its directory, lock and process slots; seriesval.c: a value's cell).
 * Their design, invariants and repair are described at the top of series.c. */
#ifndef SHMWIN_SERIES_H
#define SHMWIN_SERIES_H

#include "core.h"

typedef struct {
    PyObject_HEAD
    ModState *st;
    Py_buffer buf;
    char *base;
    int64_t map_bytes;
    int closed, busy, has_buf;
    PyObject *name;
    int64_t timeout_ns;
    int64_t index_levels;  /* levels of the index: SERIES_INDEX_MIN << (index_levels - 1) == index_slots */
    int64_t max_series, index_slots, n_slots, locks_at, slots_at, index_at, entries_at, entries_bytes, cells_at;
    int64_t slot, lifetime;  /* this process's slot and lifetime, valid while slot_gen == fork_gen */
    uint64_t slot_gen;
} SeriesMap;

typedef struct {
    PyObject_HEAD
    SeriesMap *map;
    int64_t *cell;       /* this value's cell (its first word) */
    int per_lifetime;    /* a gauge's: the cell is this process lifetime's */
    uint64_t gen;        /* fork_gen when the cell was bound (per_lifetime) */
    long long pid;       /* pid_fn()'s answer when it was bound (per_lifetime, pid_fn set) */
    PyObject *rebind;    /* per_lifetime: rebind(self) -> (cell, pid) of this lifetime */
    PyObject *pid_fn;    /* prometheus_client's process_identifier, or NULL: the fork generation */
} SeriesValue;

#define SW(s, off) ((int64_t *)((s)->base + (off)))
#define HDR(s, word) SW((s), (int64_t)(word) * WORD_BYTES)
#define ENTRY(s, at) ((s)->base + (s)->entries_at + (at))
#define EW(s, at, word) ((int64_t *)(ENTRY((s), (at)) + (word) * WORD_BYTES))
#define CELL(s, i) SW((s), (s)->cells_at + (int64_t)(i) * SERIES_CELL_BYTES)
#define SLOT(s, r) SW((s), (s)->slots_at + (int64_t)(r) * STRIPE_ENTRY_BYTES)
#define SLOT_MUTEX(s, r) ((pthread_mutex_t *)((char *)SLOT((s), (r)) + STRIPE_MUTEX_OFF))
#define DIR_MUTEX(s) ((pthread_mutex_t *)((s)->base + (s)->locks_at + SERIES_LOCK_DIR * LOCK_BYTES + LOCK_MUTEX_OFF))
#define PAD8(n) (((n) + 7) & ~(int64_t)7)

/* seriesdir.c: close safety, the directory lock (0 held, -1 error), the directory, slots */
int series_corrupt(SeriesMap *s, const char *what);
int series_enter(SeriesMap *s);
void series_release(SeriesMap *s);
void series_leave(SeriesMap *s);
int series_lock(SeriesMap *s);
#define series_unlock(s) pthread_mutex_unlock(DIR_MUTEX(s))
int series_entry_top(SeriesMap *s, int64_t *top);
int series_entry_ok(SeriesMap *s, int64_t at, int64_t top);
int64_t series_entry_bytes(SeriesMap *s, int64_t at);
int64_t series_find(SeriesMap *s, const char *key, Py_ssize_t len, uint64_t h);
int64_t series_append(SeriesMap *s, const char *key, Py_ssize_t len, uint64_t h, int kind, int64_t slot, int64_t lifetime,
               int64_t pid);
int series_claim(SeriesMap *s, long long owner);
int series_alive(SeriesMap *s, int64_t r, int64_t lt);
void series_read_cell(int64_t *c, double *value, double *stamp);

/* seriesval.c */
extern PyType_Spec series_value_spec;
PyObject *series_value_new(SeriesMap *s, int64_t cell, PyObject *rebind, PyObject *pid_fn, long long pid);

#endif /* SHMWIN_SERIES_H */
