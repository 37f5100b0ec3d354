/* stripes.c -- the unkeyed striped window's per-process rows (its stripes): claiming one for
 * this process, giving it back, and whether another process's is still held.
 *
 * Each process writes only its own stripe, lock-free; readers sum every stripe. A stripe's
 * liveness is a robust mutex its owner holds (through the keeper thread) for its lifetime, so
 * a dead owner's stripe is adopted, counts and all, by the next process that claims one.
 */
#include "core.h"

/* ---- stripes: the unkeyed striped window's per-process rows -------------------------- */

/* The display words of a row just claimed (here, a concurrency's stripe, a metrics slot):
 * written after the claim is won, before the word that publishes it. */
void stripe_stamp(int64_t *e, int64_t pid) {
    STORE(e + STRIPE_OWNER_PID, pid);
    STORE(e + STRIPE_CLAIMED_NS, host_mono_ns());
}

/* Section "claim": under LOCK_STRIPE_TABLE, take the first row whose liveness mutex the keeper
 * can take (free, or its owner dead): 1 and *row, 0 if every row is live, -1 error.
 * rows_in_use grows before the owner is written, so a tear only makes readers sum a row
 * too many; the owner word goes last. */
static int claim_row(Core *c, int64_t owner, int64_t start, int64_t *row) {
    int64_t n = c->n_rows - 1, *in_use = W(c, ROWS_IN_USE_OFF);
    int got = 0;
    if (n < 1) return 0;
    if (lock_take_ex(c, LOCK_STRIPE_TABLE, 1) < 0) return -1;
    if (c->stripe_gen == fork_gen && c->stripe_row > 0) {
        /* another thread of this process claimed while this one ran the Python callback or waited
         * for the table lock: share its row (the GIL serialises their adds). A second claim would
         * keep a row locked by the keeper that close() never gives back: unmapped, it is a robust
         * list entry in freed memory, and the keeper's next unlock faults. */
        *row = c->stripe_row;
        lock_give(c, LOCK_STRIPE_TABLE);
        return 1;
    }
    int64_t j = 0;
    int rc = keeper_take_first((char *)STRIPE_MUTEX(c, 1), STRIPE_ENTRY_BYTES, n, &j);
    int64_t r = 1 + j;  /* stripe rows start at 1 */
    if (rc == 0) {
        int64_t *e = STRIPE(c, r);
        SECTION("claim");
        if (LOAD(in_use) < r + 1) STORE(in_use, r + 1);
        STORE(e + STRIPE_OWNER_START, start);
        stripe_stamp(e, owner);
        STORE(e + STRIPE_OWNER, owner);
        END_SECTION();
        *row = r;
        got = 1;
    } else if (rc != EBUSY) {  /* EBUSY: every stripe has a live owner (never shared) */
        PyErr_Format(c->st->corrupt, "window %R: stripe %lld's liveness lock is unusable (error %d)",
                     c->name, (long long)r, rc);
        got = -1;
    }
    lock_give(c, LOCK_STRIPE_TABLE);
    return got;
}

/* Give our stripe's liveness mutex back (the row's data stays, counted): before close()
 * unmaps, or when the stripe is released. Only the process that took it holds it. */
/* Hand this process's stripe back (release_stripe(), and a Core freed unclosed): its owner word
 * cleared under the stripe table's lock if that lock comes (the word is for display: what frees
 * the row is the liveness mutex the keeper lets go of, whatever the lock did), data kept. The row,
 * 0 if this Core held none; an error of the lock stays set for the caller. */
int64_t drop_stripe(Core *c) {
    int64_t row = c->stripe_row;
    int mine = c->stripe_gen == fork_gen && row > 0 && c->base != NULL;
    if (mine && lock_take(c, LOCK_STRIPE_TABLE) == 0) {
        int64_t *e = STRIPE(c, row);
        if (LOAD(e + STRIPE_OWNER) == c->stripe_owner) STORE(e + STRIPE_OWNER, 0);
        give_stripe(c);
        lock_give(c, LOCK_STRIPE_TABLE);
    }
    give_stripe(c);
    return mine ? row : 0;
}

void give_stripe(Core *c) {
    if (c->stripe_gen == fork_gen && c->stripe_row > 0 && c->base != NULL)
        keeper(KEEP_GIVE, STRIPE_MUTEX(c, c->stripe_row));
    c->stripe_gen = 0;
    c->stripe_row = 0;
}

/* stripe_of() (core.h) when this process has no stripe (after a fork, or at first use): ask
 * Python's callback for (pid, start ticks) -- for display only -- and claim in C, so the
 * claim and this record of it cannot be separated by an exception. */
int claim_stripe(Core *c, int64_t *row) {
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
int stripe_alive(Core *c, int64_t r) {
    pthread_mutex_t *m = STRIPE_MUTEX(c, r);
    if (c->stripe_gen == fork_gen && c->stripe_row == r) return 1;  /* ours */
    int rc = pthread_mutex_trylock(m);
    if (rc == EBUSY) return 1;
    if (rc == EOWNERDEAD) rc = pthread_mutex_consistent(m);
    if (rc == 0) pthread_mutex_unlock(m);
    return 0;
}
