/* concurrency.c -- the concurrency type (ConcurrencyCore): at most `limit` holders of a key,
 * over live processes.
 *
 * The segment is keyed, role "concurrency" (format_rows.py: CONC_STATE, CONC_HOLDER): its one
 * ring gives the limit as created (the ring's limit; live.c's words once changed, read at each
 * call as a limiter's) and the idle time (its span), and each key's row holds, after its key
 * header, a top word and one holder entry per process stripe: (stripe r | slots << 32, claim).
 * A stripe's holder has one entry per key (its slots counted in it), so n_stripes entries hold
 * every holder there can be, whatever the limit: a limit changes in place, lower or higher,
 * and a slot taken before the change stays in its entry, for its release or its holder's death.
 * The top word bounds the entries looked at: every entry from it on is free (taking one there
 * stores the top first; a release that frees the last lowers it after), so a call reads as
 * many entries as the key ever had holders at once, not n_stripes. Who a holder is, is the kernel's word, as for the
 * stripes of a striped window (rings.c, "the keeper" in threads.c): the segment has a stripe
 * table of n_stripes process entries; a process takes one for its Core at its first call -- its
 * keeper thread holds that stripe's robust liveness mutex, and the stripe's claims word goes
 * up by one -- and a holder entry names the stripe and the claims word it saw. The entry
 * counts while that stripe's claims word is the same and its mutex is held (stripe_alive):
 * the moment the holder dies (SIGKILL too) its mutex turns owner-dead, and its slots are free.
 * A Core that closes gives its stripe back: its slots go with it.
 *
 * A live holder is never dropped: its stripe's claims word cannot change while its keeper holds
 * the mutex. A dead one may be counted a moment longer (a new claimer holds the mutex before it
 * bumps the claims word): refusals early, never a holder too many.
 *
 * Junk never reaches undefined behaviour: an entry naming no stripe, or slots outside
 * 1..MAX_CONCURRENCY, is a CorruptSegmentError; a junk top word, every entry looked at (and keeps the key from being reclaimed as idle).
 */
#include "core.h"

#include <unistd.h>

#define HOLDER(st, i) ((st) + CONC_STATE_BYTES / WORD_BYTES + (int64_t)(i) * (CONC_HOLDER_BYTES / WORD_BYTES))
#define HOLDER_ROW(w) ((w) & 0xffffffffLL)
#define HOLDER_SLOTS(w) ((int64_t)((uint64_t)(w) >> 32))
#define HOLDER_WORD(r, n) ((int64_t)((uint64_t)(n) << 32 | (uint64_t)(r)))

static int64_t *state_of(Core *c, int64_t slot) { return (int64_t *)(ROW(c, slot) + c->rings_off); }
static int64_t limit_of(Core *c) { return c->rings[0].limit; }  /* in force (live.c reloads it) */
/* its holder entries: as many as the row's state holds (conc_header: the row's size says it) */
static int64_t entries_of(Core *c) { return (c->state_words * WORD_BYTES - CONC_STATE_BYTES) / CONC_HOLDER_BYTES; }

/* The entries to look at: up to the row's top word; junk there, every one (more, never fewer). */
static int64_t top_of(Core *c, int64_t *st) {
    int64_t top = LOAD(st + CONC_STATE_TOP);
    return top >= 0 && top <= entries_of(c) ? top : entries_of(c);
}

/* At open (the type's check hook): a concurrency segment whose rows hold its holders? */
static int is_conc(Core *c) {
    if (c->role == ROLE_CONCURRENCY && c->keyed && !c->limiter && c->n_rings == 1 && c->n_stripes >= 1 &&
        c->n_stripes <= MAX_STRIPES && limit_of(c) >= 1 && limit_of(c) <= MAX_CONCURRENCY &&
        entries_of(c) >= 1 && entries_of(c) <= MAX_STRIPES &&
        c->state_words == (CONC_STATE_BYTES + entries_of(c) * CONC_HOLDER_BYTES) / WORD_BYTES &&
        c->empty_bytes >= c->state_words * WORD_BYTES)
        return 0;
    return not_role(c);
}

/* The header hook: a row's state is a top word and its holder entries, as many as the row
 * holds after its key header (the Python side's layout.holders_in_row: no word counts them),
 * at most MAX_STRIPES (read_holders' dead list). */
static int conc_header(Core *c, const ShmwinHeader *h) {
    int64_t limit = h->ring_table[0].limit;
    int64_t room = c->row_bytes - (KEY_ROW_KEY_OFF + c->key_bytes) - CONC_STATE_BYTES;
    int64_t entries = room < 0 ? 0 : room / CONC_HOLDER_BYTES;
    if (entries > MAX_STRIPES) entries = MAX_STRIPES;
    if (h->n_rings != 1 || limit < 1 || limit > MAX_CONCURRENCY || c->n_stripes < 1 || c->n_stripes > MAX_STRIPES ||
        entries < 1) {
        PyErr_SetString(PyExc_ValueError, "Core: the segment's header holds an impossible concurrency limit or row");
        return -1;
    }
    c->state_words = (CONC_STATE_BYTES + entries * CONC_HOLDER_BYTES) / WORD_BYTES;
    return 0;
}

/* ---- this process's stripe: its identity in holder entries -------------------------------- */

/* Section "conc_claim": the first stripe whose liveness mutex the keeper can take (free, or
 * its owner dead) becomes this Core's; its claims word goes up by one, the claim's identity.
 * No lock: the mutex decides (only its holder writes the entry). Invariant between stores:
 * the display words go first, the claims word after them -- until it is stored, the old
 * claim's holders are counted (alive, their claims word): more holders, never fewer -- and
 * the owner word last. Repair: none; a claimer that dies leaves the mutex owner-dead, so the
 * next claimer takes the stripe, and every entry naming it is dead. */
static int claim_conc_stripe(Core *c) {
    int64_t j = 0;
    int rc = keeper_take_first((char *)STRIPE_MUTEX(c, 1), STRIPE_ENTRY_BYTES, c->n_stripes, &j);
    int64_t r = 1 + j;  /* stripe rows start at 1 */
    if (rc == EBUSY) {
        PyErr_Format(c->st->full, "concurrency %R: every one of its %lld process stripes is held by a live process",
                     c->name, (long long)c->n_stripes);
        return -1;
    }
    if (rc != 0) {
        PyErr_Format(c->st->corrupt, "window %R: stripe %lld's liveness lock is unusable (error %d)",
                     c->name, (long long)r, rc);
        return -1;
    }
    int64_t *e = STRIPE(c, r), claims = LOAD(e + STRIPE_CLAIMS), pid = (int64_t)getpid();
    claims = claims >= 0 && claims < MAX_GEN - 1 ? claims + 1 : 1;  /* junk: start again */
    SECTION("conc_claim");
    stripe_stamp(e, pid);
    STORE(e + STRIPE_CLAIMS, claims);
    STORE(e + STRIPE_OWNER, pid);
    END_SECTION();
    c->stripe_row = r;
    c->stripe_claim = claims;
    c->stripe_gen = fork_gen;
    return 0;
}

/* This Core's stripe (claimed at first use, and again in a forked child). */
static int my_stripe(Core *c) {
    if (c->stripe_gen == fork_gen && c->stripe_row > 0) return 0;
    return claim_conc_stripe(c);
}

/* ---- holder entries ------------------------------------------------------------------------ */

/* Holder entry h: 1 a live process's (*slots its slots), 0 free or dead, -1 junk (an error set
 * if `raise`). Caller holds the row lock, or reads a hint (conc_busy's first look). */
static int holder_live(Core *c, int64_t slot, int64_t *h, int64_t *slots, int raise) {
    int64_t w = LOAD(h + CONC_HOLDER_STRIPE), claim = LOAD(h + CONC_HOLDER_CLAIM);
    int64_t r = HOLDER_ROW(w), n = HOLDER_SLOTS(w);
    *slots = 0;
    if (w == 0) return 0;
    if (r < 1 || r > c->n_stripes || n < 1 || n > MAX_CONCURRENCY) {  /* n may pass a lowered limit */
        if (raise) {  /* PyErr_Format has no %#llx: the word in hex made here */
            char hex[24];
            snprintf(hex, sizeof hex, "%#llx", (unsigned long long)w);
            PyErr_Format(c->st->corrupt, "window %R: key row %lld holds an impossible holder entry %s: "
                         "the segment is corrupt", c->name, (long long)slot, hex);
        }
        return -1;
    }
    *slots = n;
    if (c->stripe_gen == fork_gen && c->stripe_row == r) return claim == c->stripe_claim;  /* ours, or before us */
    return LOAD(STRIPE(c, r) + STRIPE_CLAIMS) == claim && stripe_alive(c, r);
}

/* Is this entry ours (this Core's stripe and claim)? */
static int is_mine(Core *c, int64_t *h) {
    return c->stripe_gen == fork_gen && c->stripe_row > 0 &&
           HOLDER_ROW(LOAD(h + CONC_HOLDER_STRIPE)) == c->stripe_row && LOAD(h + CONC_HOLDER_CLAIM) == c->stripe_claim;
}

/* Does the key's row hold a live process's slot (or junk, kept to be looked at)? The busy hook
 * of the key table's idle(): a key with holders is never idle, whatever its age. */
static int conc_busy(Core *c, int64_t slot) {
    if (c->state_words < 1 || entries_of(c) < 1 || entries_of(c) > MAX_STRIPES) return 0;
    int64_t *st = state_of(c, slot), n, top = top_of(c, st);
    for (int64_t i = 0; i < top; i++)
        if (holder_live(c, slot, HOLDER(st, i), &n, 0) != 0) return 1;
    return 0;
}

typedef struct {
    int64_t held;       /* slots of live holders */
    int64_t mine;       /* our entry, or -1 */
    int64_t free_at;    /* a free entry below the top, or -1 */
    int64_t top;        /* the row's top word, as read (junk: every entry) */
    int64_t n_dead;
    int64_t dead[MAX_STRIPES];
} Holders;

/* The key's holders, checked. Caller holds the row lock. */
static int read_holders(Core *c, int64_t slot, Holders *hs) {
    int64_t *st = state_of(c, slot), n;
    hs->held = 0, hs->mine = hs->free_at = -1, hs->n_dead = 0, hs->top = top_of(c, st);
    for (int64_t i = 0; i < hs->top; i++) {
        int64_t *h = HOLDER(st, i);
        int live = holder_live(c, slot, h, &n, 1);
        if (live < 0) return -1;
        if (live == 0 && LOAD(h + CONC_HOLDER_STRIPE) != 0) hs->dead[hs->n_dead++] = i;
        else if (live == 0 && hs->free_at < 0) hs->free_at = i;
        if (live == 0) continue;
        hs->held = sat_add(hs->held, n);
        if (is_mine(c, h)) hs->mine = i;
    }
    return 0;
}

/* Section "conc_acquire": drop the entries of dead holders, then take a slot for this process
 * if the live holders' slots leave room under the limit in force (a lowered limit: none until
 * enough were given back; slots held past it are kept, never taken away). Caller holds the row
 * lock. Invariant between stores: the live holders' slots never pass the limit -- dead entries
 * are cleared one store each (they counted nothing), and the slot taken is the last store: our
 * entry's count, one store, or a free entry's claim word, then its stripe word (the entry
 * counts from that store on; a tear before it leaves a free entry); a free entry at the top is
 * preceded by the top word past it (every entry from the top on is free: a tear after it leaves
 * one more free entry looked at). The key's last write goes after, never backwards. Repair:
 * none (nothing derived; a dead holder's entries are the next acquire's to clear). */
static int acquire_row(Core *c, int64_t slot, int64_t now, int *allowed, int64_t *held) {
    int64_t *st = state_of(c, slot);
    Holders hs;
    if (read_holders(c, slot, &hs) < 0) return -1;
    /* every entry a live holder's, none ours: the row's holder entries (its capacity, fewer than
     * the stripes, a limit raised past it) bound the processes holding the key at once: refused,
     * never a slot without an entry */
    int no_room = hs.mine < 0 && hs.free_at < 0 && hs.n_dead == 0 && hs.top >= entries_of(c);
    *allowed = hs.held < limit_of(c) && !no_room;
    *held = hs.held;
    if (!*allowed && hs.n_dead == 0) return 0;
    SECTION("conc_acquire");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    for (int64_t k = 0; k < hs.n_dead; k++) {
        STORE(HOLDER(st, hs.dead[k]) + CONC_HOLDER_STRIPE, 0);
        if (hs.free_at < 0) hs.free_at = hs.dead[k];
    }
    if (*allowed) {
        if (hs.mine >= 0) {
            int64_t *h = HOLDER(st, hs.mine);
            int64_t n = HOLDER_SLOTS(LOAD(h + CONC_HOLDER_STRIPE));
            STORE(h + CONC_HOLDER_STRIPE, HOLDER_WORD(c->stripe_row, n + 1));
        } else {  /* a free entry below the top, a dead one's, or the top's (checked above) */
            if (hs.free_at < 0) {
                hs.free_at = hs.top;
                STORE(st + CONC_STATE_TOP, hs.top + 1);
            }
            int64_t *h = HOLDER(st, hs.free_at);
            STORE(h + CONC_HOLDER_CLAIM, c->stripe_claim);
            STORE(h + CONC_HOLDER_STRIPE, HOLDER_WORD(c->stripe_row, 1));
        }
        *held = hs.held + 1;
        touch_last(ROW(c, slot), now);
    }
    END_SECTION();
    return 0;
}

/* Section "conc_release": give back one of this process's slots of the key: one store (its
 * entry's count, or 0: a free entry); an entry freed just under the top lowers the top past the
 * free entries under it (after: a tear leaves the top higher, more entries looked at, never
 * fewer); then the key's last write (never backwards). Caller holds the row lock. 1 released,
 * 0 nothing of ours there. Repair: none. */
static int release_row(Core *c, int64_t slot, int64_t now) {
    int64_t *st = state_of(c, slot);
    Holders hs;
    if (read_holders(c, slot, &hs) < 0) return -1;
    if (hs.mine < 0) return 0;
    int64_t *h = HOLDER(st, hs.mine);
    int64_t n = HOLDER_SLOTS(LOAD(h + CONC_HOLDER_STRIPE)), top = hs.mine;
    SECTION("conc_release");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    STORE(h + CONC_HOLDER_STRIPE, n > 1 ? HOLDER_WORD(c->stripe_row, n - 1) : 0);
    if (n == 1 && hs.mine == hs.top - 1 && LOAD(st + CONC_STATE_TOP) == hs.top) {
        while (top > 0 && LOAD(HOLDER(st, top - 1) + CONC_HOLDER_STRIPE) == 0) top--;
        STORE(st + CONC_STATE_TOP, top);
    }
    touch_last(ROW(c, slot), now);
    END_SECTION();
    return 1;
}

/* conc_acquire(key) -> (taken, holders after): take one slot of the key for this process if
 * its live holders leave room under the limit; never waits (the caller's loop does). */
static PyObject *Core_conc_acquire(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key"};
    PyObject *a[1], *result = NULL;
    int64_t now = 0, slot, held = 0;
    int allowed = 0;
    if (parse(args, nargs, kwnames, names, 1, a, "conc_acquire") < 0) return NULL;
    if (a[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "conc_acquire() needs a key");
        return NULL;
    }
    if (key_enter(c, &kc) < 0) return NULL;
    if (now_ns(c, &now) < 0 || my_stripe(c) < 0 || still_open(c) < 0) goto out;
    if (key_lock_at(c, &kc, a[0], 1, now, &slot) < 0) {
        /* counted in full_count, and raised whatever on_full says: a slot admitted without a
         * holder entry could never be given back (release finds none), and a refusal reads as
         * a slot that is busy, which the caller would wait on until its timeout */
        met_full(c, 0);
        goto out;
    }
    int rc = acquire_row(c, slot, now, &allowed, &held);
    key_unlock(c, &kc);
    if (rc == 0) result = Py_BuildValue("(OL)", allowed ? Py_True : Py_False, (long long)held);
out:
    return key_leave(c, &kc, result);
}

/* conc_release(key) -> bool: one of this process's slots of the key given back; False if it
 * holds none (the caller raises). */
static PyObject *Core_conc_release(Core *c, PyObject *key) {
    KeyCall kc = KEY_CALL;
    PyObject *result = NULL;
    int64_t now = 0, slot;
    if (key_enter(c, &kc) < 0) return NULL;
    if (now_ns(c, &now) < 0) goto out;
    if (c->stripe_gen != fork_gen || c->stripe_row <= 0) {  /* never acquired here: nothing to give */
        result = Py_NewRef(Py_False);
        goto out;
    }
    /* the row locked without key_lock_at's look at the live words: a release gives back what a
     * limit never needs, so it goes on in a segment replaced under its name (a reset's: the
     * slots it holds there count nowhere, but its holder's release is a plain one, not an error) */
    int got = lock_key(c, key, 0, now, &slot);
    if (got > 0) kc.lock = row_lock(c, slot);
    if (got <= 0) {
        if (got == 0) result = Py_NewRef(Py_False);
        goto out;
    }
    int rc = release_row(c, slot, now);
    key_unlock(c, &kc);
    if (rc >= 0) result = Py_NewRef(rc ? Py_True : Py_False);
out:
    return key_leave(c, &kc, result);
}

/* The key's holders, read under its row lock: (live holders' slots, this Core's). */
static PyObject *holders_of(Core *c, PyObject *key) {
    KeyCall kc = KEY_CALL;
    PyObject *result = NULL;
    int64_t now = 0, slot, mine = 0;
    Holders hs;
    if (key_enter(c, &kc) < 0) return NULL;
    if (now_ns(c, &now) < 0) goto out;
    int got = key_lock_at(c, &kc, key, 0, now, &slot);
    if (got < 0) goto out;
    if (got == 0) {
        result = Py_BuildValue("(ii)", 0, 0);
        goto out;
    }
    int rc = read_holders(c, slot, &hs);
    if (rc == 0 && hs.mine >= 0) mine = HOLDER_SLOTS(LOAD(HOLDER(state_of(c, slot), hs.mine) + CONC_HOLDER_STRIPE));
    key_unlock(c, &kc);
    if (rc == 0) result = Py_BuildValue("(LL)", (long long)hs.held, (long long)mine);
out:
    return key_leave(c, &kc, result);
}

/* One of holders_of's two counts: 0, the live holders' slots; 1, this Core's. */
static PyObject *holders_item(Core *c, PyObject *key, Py_ssize_t i) {
    PyObject *both = holders_of(c, key);
    if (both == NULL) return NULL;
    PyObject *item = Py_NewRef(PyTuple_GET_ITEM(both, i));
    Py_DECREF(both);
    return item;
}

/* conc_count(key) -> slots held now by live processes. */
static PyObject *Core_conc_count(Core *c, PyObject *key) { return holders_item(c, key, 0); }

/* conc_mine(key) -> slots of the key this Core holds. */
static PyObject *Core_conc_mine(Core *c, PyObject *key) { return holders_item(c, key, 1); }

/* The empty hook: a row handed to a new key (its last key idle, no live holder: conc_busy)
 * ends as an empty row's copy would -- every stripe word 0, the top 0 -- but only the entries
 * under its top word are written (those from it on are free already), so a new key touches
 * its row's first words, not 16 x n_stripes bytes. A claim word is read only beside a stripe
 * word that is not 0: left as it is. One fail point after, as a copied row has. */
static void conc_empty(Core *c, char *row, int64_t Py_UNUSED(slot)) {
    int64_t *st = (int64_t *)(row + c->rings_off), top = top_of(c, st);
    for (int64_t i = 0; i < top; i++) {
        int64_t *h = HOLDER(st, i) + CONC_HOLDER_STRIPE;
        if (LOAD(h) != 0) __atomic_store_n(h, 0, __ATOMIC_RELEASE);
    }
    __atomic_store_n(st + CONC_STATE_TOP, 0, __ATOMIC_RELEASE);
    FAILPOINT();
}

/* ---- the type ----------------------------------------------------------------------------- */

static const RoleHooks conc_hooks = {.role = "concurrency", .keyed_role = ROLE_CONCURRENCY, .state_zeroed = 1,
                                     .live_max = MAX_CONCURRENCY,
                                     .header = conc_header, .check = is_conc, .empty = conc_empty,
                                     .busy = conc_busy};

static PyMethodDef conc_methods[] = {
    METHOD_KW(conc_acquire, Core_conc_acquire, "key",
        "Take one of key's slots for this process if its live holders leave room: (taken, holders after)."),
    METHOD_O(conc_release, Core_conc_release, "key", "Give back one of this process's slots of key: False if it holds none."),
    METHOD_O(conc_count, Core_conc_count, "key", "Slots of key held now by live processes."),
    METHOD_O(conc_mine, Core_conc_mine, "key", "Slots of key this process (this Core) holds."),
    LIVE_METHODS,  /* its limit changes in place (live.c; shmwin/concurrency.py), or it moves (a reset) */
    {NULL},
};

ROLE_SPEC(concurrency_spec, "ConcurrencyCore", Core, conc_hooks, conc_methods,
          "A segment of role concurrency: each key's holders, and what every segment has (Core).");
