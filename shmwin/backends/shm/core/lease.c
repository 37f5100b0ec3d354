/* lease.c -- the lease type (LeaseCore): the host tier of a two-tier limiter (backend
 * "shm+redis://"): each key's lease of hits taken from Redis, spent by every worker of the host
 * under the key's row lock.
 *
 * The segment is a keyed window of role "lease" (layout_words.py: LEASE_STATE). A key's row
 * holds one lease: k hits (granted) that Redis counted, in every rate, as one entry stamped at
 * the lease's deadline d. The host may spend them at any time in [t0, d]; deadline_ns is d on
 * the host's clock, converted so that it is never later than d (shmwin/backends/twotier.py).
 * Then no interval of a period admits more than the limit across hosts (docs/several-hosts.md).
 *
 *   lease_spend    spend cost hits of the live lease; if it cannot (none, spent, expired), seal
 *                  it (lease = 0: nobody spends it again) and hand its account to the caller,
 *                  who gives the unused part back to Redis and takes a new lease
 *   lease_install  a lease Redis granted: spend the caller's cost of it and publish it; a live
 *                  lease it replaces is sealed and handed back the same way
 *   lease_deny     Redis refused: refuse without a round trip until then
 *   lease_refund   give hits back to the live lease (Limiter.refund)
 *
 * Sealing is what makes a give-back exact: only the one call that sealed a lease gives its
 * unused part back, with the account read under the lock that sealed it, and no spend of it
 * follows. A process that dies between taking a lease in Redis and publishing it here, or
 * between sealing one and giving its part back, strands those hits in Redis until d + P: hits
 * refused, never hits admitted.
 *
 * Junk in a row never reaches undefined behaviour, nor admits a hit: counts outside [0, 2**62),
 * spent above granted, granted above the tightest limit, a deadline further than the longest
 * period from the lease's ask, all read as a lease with nothing left (sealed by the next
 * spend; Redis caps what a give-back says by what it granted). Times are compared, never used
 * as offsets. Nothing here is derived data: the lock's repair has nothing to do.
 */
#include "core.h"

#define LEASE_MAX (INT64_C(1) << 62)

static int64_t *lease_of(Core *c, int64_t slot) { return (int64_t *)(ROW(c, slot) + c->rings_off); }

/* At open (the type's check hook): a lease segment whose rows hold a lease? */
static int is_lease(Core *c) {
    if (c->role == ROLE_LEASE && c->keyed && !c->limiter && c->n_rings == 1 && !c->rings[0].log &&
        c->empty_bytes >= LEASE_STATE_BYTES && c->rings[0].bucket_ns > 0 && c->rings[0].bucket_ns <= MAX_SPAN_NS)
        return 0;
    return not_role(c);
}

typedef struct {
    int64_t lease, granted, spent, deadline_ns, start_ns, grant_us, last_ns, deny_ns, served, leases, refusals;
} Lease;

static int64_t clamp_count(int64_t v) { return v < 0 || v >= LEASE_MAX ? LEASE_MAX : v; }

/* The row's lease, loaded word by word. Caller holds the row lock. */
static void lease_read(Core *c, int64_t slot, Lease *l) {
    const int64_t *w = lease_of(c, slot);
    l->lease = LOAD(w + LEASE_STATE_LEASE);
    l->granted = clamp_count(LOAD(w + LEASE_STATE_GRANTED));
    l->spent = clamp_count(LOAD(w + LEASE_STATE_SPENT));
    l->deadline_ns = LOAD(w + LEASE_STATE_DEADLINE_NS);
    l->start_ns = LOAD(w + LEASE_STATE_START_NS);
    l->grant_us = LOAD(w + LEASE_STATE_GRANT_US);
    l->last_ns = LOAD(w + LEASE_STATE_LAST_NS);
    l->deny_ns = LOAD(w + LEASE_STATE_DENY_NS);
    l->served = LOAD(w + LEASE_STATE_SERVED);
    l->leases = LOAD(w + LEASE_STATE_LEASES);
    l->refusals = LOAD(w + LEASE_STATE_REFUSALS);
    if (l->lease == EMPTY_EPOCH) {  /* an emptied row: no lease ever, every other word 0 */
        l->lease = 0;
        l->deny_ns = 0;
    }
    if (l->lease < 0) l->lease = 0;  /* junk: nothing to spend, nothing to give back */
}

/* The account of a lease: (lease id, granted, spent, ns from its ask to its newest spend, ns
 * from its ask to its deadline, grant time on Redis's clock in µs). Lease id 0: nothing for the
 * caller to give back (none was live); the rest then tells the last lease's use (its size). */
static PyObject *account(const Lease *l) {
    int64_t spent = l->spent > l->granted ? l->granted : l->spent;
    int64_t used_ns = l->last_ns > l->start_ns ? l->last_ns - l->start_ns : 0;
    int64_t life_ns = l->deadline_ns > l->start_ns ? l->deadline_ns - l->start_ns : 0;
    return Py_BuildValue("(LLLLLL)", (long long)l->lease, (long long)l->granted, (long long)spent,
                         (long long)used_ns, (long long)life_ns, (long long)l->grant_us);
}

/* Section "lease_seal": no spend of the live lease from now on; `forget` (lease_seal(): close,
 * clear) also drops a cached refusal. Caller holds the row lock.
 * Invariant between stores: lease = 0 first, after the intent; the account stays in the row
 * for the tools; a refusal dropped or not is a cache either way. Repair: none (a seal torn
 * before its store leaves the lease live, whole). */
static void seal_row(Core *c, int64_t slot, int forget) {
    SECTION("lease_seal");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    STORE(lease_of(c, slot) + LEASE_STATE_LEASE, 0);
    if (forget) STORE(lease_of(c, slot) + LEASE_STATE_DENY_NS, 0);
    END_SECTION();
}

/* Section "lease_spend": spend cost hits of the live lease. Caller holds the row lock and has
 * checked that the lease is live, unexpired, and holds them.
 * Invariant between stores: spent moves first, in one store: a tear leaves the hits counted
 * as spent (refused to others) and the tallies behind (served, last_ns: the account's seal
 * time is then earlier than a spend by at most this one, whose caller died before it was
 * admitted). The key's last write goes last, never backwards. Repair: none. */
static void spend_row(Core *c, int64_t slot, int64_t now, int64_t cost, Lease *l) {
    int64_t *w = lease_of(c, slot);
    SECTION("lease_spend");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    STORE(w + LEASE_STATE_SPENT, l->spent + cost);
    if (now > l->last_ns) STORE(w + LEASE_STATE_LAST_NS, now);
    STORE(w + LEASE_STATE_SERVED, sat_add(l->served < 0 ? 0 : l->served, cost));
    touch_last(ROW(c, slot), now);
    END_SECTION();
}

/* May the lease spend cost at now? Words no lease can hold -- more hits than the tightest limit
 * (the ring's), a deadline further than the longest period from its ask -- read as a lease
 * with nothing left: junk never admits hits Redis did not grant. */
static int spendable(Core *c, const Lease *l, int64_t now, int64_t cost) {
    const Ring *r = &c->rings[0];
    if (l->lease <= 0 || l->granted > r->limit || l->start_ns < 0 || l->start_ns >= MAX_NOW_NS ||
        l->deadline_ns < l->start_ns || l->deadline_ns - l->start_ns > r->bucket_ns)
        return 0;
    return now <= l->deadline_ns && l->spent <= l->granted && cost <= l->granted - l->spent;
}

/* lease_spend(key, cost=1) -> True | False | account: spend cost hits of the host's lease of key
 * (True); else a live lease that cannot serve them (spent, expired, too small) is sealed and its
 * account handed back -- the caller gives its unused part back and takes a new lease in one round
 * trip, whether a refusal of Redis's is cached or not; with no live lease, refuse (False) while
 * that refusal holds, else the last account (lease id 0: none to give back). A full key table:
 * on_full's answer. */
static PyObject *Core_lease_spend(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    PyObject *key, *result = NULL;
    int64_t cost, now = 0, slot;
    Lease l;
    if (enter_key_cost(c, &kc, args, nargs, kwnames, "lease_spend", "cost", &key, &cost, 1) < 0) goto out;
    if (key_lock(c, &kc, key, 1, &now, &slot) < 0) {  /* a full table: on_full answers (or raises) */
        if (met_full(c, 1)) result = Py_NewRef(full_allows(c) ? Py_True : Py_False);
        goto out;
    }
    lease_read(c, slot, &l);
    if (spendable(c, &l, now, cost)) {
        spend_row(c, slot, now, cost, &l);
        result = Py_NewRef(Py_True);
    } else if (l.lease > 0) {  /* spent out or expired: sealed and handed to the caller, even while a
                                * refusal holds (else its unused part stays counted until d + P) */
        seal_row(c, slot, 0);
        result = account(&l);
    } else if (now < l.deny_ns) {
        result = Py_NewRef(Py_False);
    } else {
        result = account(&l);
    }
    key_unlock(c, &kc);
out:
    return key_leave(c, &kc, result);
}

/* Section "lease_install": publish a lease Redis granted, with the caller's cost spent of it.
 * Caller holds the row lock; the lease holds cost and now <= its deadline.
 * Invariant between stores: a live lease it replaces is sealed first; the new lease's words
 * are written while the row holds no live lease (lease = 0), and its id is stored last: a tear
 * anywhere leaves no lease to spend (the new one's hits stranded in Redis until d + P), never
 * a lease spent beyond what Redis granted. Repair: none. */
static void install_row(Core *c, int64_t slot, int64_t now, const Lease *n, Lease *old) {
    int64_t *w = lease_of(c, slot);
    if (old->lease > 0) seal_row(c, slot, 0);
    SECTION("lease_install");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    STORE(w + LEASE_STATE_GRANTED, n->granted);
    STORE(w + LEASE_STATE_SPENT, n->spent);
    STORE(w + LEASE_STATE_DEADLINE_NS, n->deadline_ns);
    STORE(w + LEASE_STATE_START_NS, n->start_ns);
    STORE(w + LEASE_STATE_GRANT_US, n->grant_us);
    STORE(w + LEASE_STATE_LAST_NS, now);
    STORE(w + LEASE_STATE_DENY_NS, 0);
    STORE(w + LEASE_STATE_SERVED, sat_add(old->served < 0 ? 0 : old->served, n->spent));
    STORE(w + LEASE_STATE_LEASES, sat_add(old->leases < 0 ? 0 : old->leases, 1));
    touch_last(ROW(c, slot), n->deadline_ns > now ? n->deadline_ns : now);
    STORE(w + LEASE_STATE_LEASE, n->lease);
    END_SECTION();
}

static int int64_arg(PyObject *obj, const char *what, int64_t lo, int64_t *out) {
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < lo || v >= LEASE_MAX) {
        PyErr_Format(PyExc_ValueError, "lease_install(): %s %lld is out of range", what, v);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* lease_install(key, lease, granted, cost, start_ns, deadline_ns, grant_us) -> (installed,
 * account): publish lease `lease` of `granted` hits with `cost` of them spent now, unless it
 * expired already or does not hold cost (installed False: nothing written; the caller gives
 * it back whole); the account of the lease it replaced (sealed if it was live: id > 0). */
static PyObject *Core_lease_install(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key", "lease", "granted", "cost", "start_ns", "deadline_ns", "grant_us"};
    static const char *const what[] = {"key", "lease id", "granted", "cost", "start_ns", "deadline_ns", "grant_us"};
    PyObject *a[7], *result = NULL;
    int64_t v[7] = {0}, now = 0, slot;
    Lease n, old;
    if (parse(args, nargs, kwnames, names, 7, a, "lease_install") < 0) return NULL;
    for (int i = 0; i < 7; i++) {
        if (a[i] == NULL) {
            PyErr_SetString(PyExc_TypeError, "lease_install() needs key, lease, granted, cost, start_ns, "
                                             "deadline_ns and grant_us");
            return NULL;
        }
        if (i > 0 && int64_arg(a[i], what[i], i == 1 ? 1 : 0, &v[i]) < 0) return NULL;
    }
    if (key_enter(c, &kc) < 0) return NULL;
    if (key_lock(c, &kc, a[0], 1, &now, &slot) < 0) goto out;
    n = (Lease){.lease = v[1], .granted = v[2], .spent = v[3], .start_ns = v[4], .deadline_ns = v[5],
                .grant_us = v[6]};
    int ok = n.spent <= n.granted && now <= n.deadline_ns;
    lease_read(c, slot, &old);
    if (ok) install_row(c, slot, now, &n, &old);
    key_unlock(c, &kc);
    if (!ok) old.lease = 0;  /* nothing sealed */
    PyObject *acc = account(&old);
    if (acc != NULL) result = Py_BuildValue("(ON)", ok ? Py_True : Py_False, acc);
out:
    return key_leave(c, &kc, result);
}

/* Section "lease_deny": refuse without asking Redis until deny_ns (later than now), and count
 * the refusal; until_ns 0: forget a cached refusal (the host gave hits back to Redis after it
 * was answered: it may fit now). Caller holds the row lock. Invariant between stores: deny_ns
 * first (a tear leaves the refusal uncounted: a tally). Repair: none. */
static PyObject *Core_lease_deny(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key", "until_ns"};
    PyObject *a[2], *result = NULL;
    int64_t until, now = 0, slot;
    Lease l;
    if (parse_required(args, nargs, kwnames, names, 2, 2, a, "lease_deny", "key and until_ns") < 0) return NULL;
    if (int64_arg(a[1], "until_ns", 0, &until) < 0) return NULL;
    if (key_enter(c, &kc) < 0) return NULL;
    int got = key_lock(c, &kc, a[0], 0, &now, &slot);
    if (got < 0) goto out;
    if (got > 0) {
        lease_read(c, slot, &l);
        if (until == 0 && l.deny_ns != 0) {
            SECTION("lease_deny");
            STORE(intent_at(c, row_lock(c, slot)), slot);
            STORE(lease_of(c, slot) + LEASE_STATE_DENY_NS, 0);
            END_SECTION();
        } else if (until > l.deny_ns && until > now) {
            SECTION("lease_deny");
            STORE(intent_at(c, row_lock(c, slot)), slot);
            STORE(lease_of(c, slot) + LEASE_STATE_DENY_NS, until);
            STORE(lease_of(c, slot) + LEASE_STATE_REFUSALS, sat_add(l.refusals < 0 ? 0 : l.refusals, 1));
            touch_last(ROW(c, slot), until);
            END_SECTION();
        }
        key_unlock(c, &kc);
    }
    result = Py_NewRef(Py_None);
out:
    return key_leave(c, &kc, result);
}

/* Section "lease_refund": give up to cost hits back to the live lease, most recent first.
 * Caller holds the row lock. One store after the intent (spent); the tally of served hits is
 * not undone. Repair: none. lease_refund(key, cost) -> hits given back. */
static PyObject *Core_lease_refund(Core *c, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    KeyCall kc = KEY_CALL;
    static const char *const names[] = {"key", "cost"};
    PyObject *a[2], *result = NULL;
    int64_t cost, now = 0, slot, back = 0;
    Lease l;
    if (parse_required(args, nargs, kwnames, names, 2, 2, a, "lease_refund", "key and cost") < 0) return NULL;
    if (key_enter(c, &kc) < 0) return NULL;
    if (cost_of(a[1], &cost, 0) < 0) goto out;
    int got = key_lock(c, &kc, a[0], 0, &now, &slot);
    if (got < 0) goto out;
    if (got > 0) {
        lease_read(c, slot, &l);
        if (spendable(c, &l, now, 0)) {
            back = cost < l.spent ? cost : l.spent;
            if (back > 0) {
                SECTION("lease_refund");
                STORE(intent_at(c, row_lock(c, slot)), slot);
                STORE(lease_of(c, slot) + LEASE_STATE_SPENT, l.spent - back);
                END_SECTION();
            }
        }
        key_unlock(c, &kc);
    }
    result = PyLong_FromLongLong((long long)back);
out:
    return key_leave(c, &kc, result);
}

/* The key's lease words, read under its row lock: None if it has no row. seal: then the live
 * lease is sealed (close(): its unused part goes back) and a cached refusal forgotten (clear()),
 * and the answer is the lease's account. */
static PyObject *lease_read_locked(Core *c, PyObject *key, int seal) {
    KeyCall kc = KEY_CALL;
    PyObject *result = NULL;
    int64_t now = 0, slot;
    Lease l;
    if (key_enter(c, &kc) < 0) return NULL;
    int got = key_lock(c, &kc, key, 0, &now, &slot);
    if (got < 0) goto out;
    if (got == 0) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    lease_read(c, slot, &l);
    if (seal && (l.lease > 0 || l.deny_ns != 0)) seal_row(c, slot, 1);
    key_unlock(c, &kc);
    if (seal) {
        result = account(&l);
    } else {
        result = Py_BuildValue("(LLLLLLLLLLL)", (long long)l.lease, (long long)l.granted, (long long)l.spent,
                               (long long)l.deadline_ns, (long long)l.start_ns, (long long)l.grant_us,
                               (long long)l.last_ns, (long long)l.deny_ns, (long long)l.served,
                               (long long)l.leases, (long long)l.refusals);
    }
out:
    return key_leave(c, &kc, result);
}

/* lease_seal(key) -> account or None (no row): seal the live lease of key (close(): its unused
 * part goes back) and forget a cached refusal (clear()). */
static PyObject *Core_lease_seal(Core *c, PyObject *key) { return lease_read_locked(c, key, 1); }

/* lease_get(key) -> None (no row) or (lease, granted, spent, deadline_ns, start_ns, grant_us,
 * last_ns, deny_ns, served, leases, refusals), as the row holds them (lease 0: none live). */
static PyObject *Core_lease_get(Core *c, PyObject *key) { return lease_read_locked(c, key, 0); }

/* ---- the type ----------------------------------------------------------------------------- */

static const RoleHooks lease_hooks = {.role = "lease", .keyed_role = ROLE_LEASE, .state_bytes = LEASE_STATE_BYTES, .check = is_lease};

static PyMethodDef lease_methods[] = {
    METHOD_KW(lease_spend, Core_lease_spend, "key, cost=1",
        "Spend cost hits of key's lease (True); refuse while Redis's refusal holds (False); else seal it: (its "
        "account or None,)."),
    METHOD_KW(lease_install, Core_lease_install, "key, lease, granted, cost, start_ns, deadline_ns, grant_us",
        "Publish a granted lease with cost spent of it: (installed, the replaced lease's account or None)."),
    METHOD_KW(lease_deny, Core_lease_deny, "key, until_ns",
        "Refuse key without asking Redis until until_ns (0: forget a cached refusal)."),
    METHOD_KW(lease_refund, Core_lease_refund, "key, cost", "Give up to cost hits back to key's live lease: how many."),
    METHOD_O(lease_seal, Core_lease_seal, "key", "Seal key's live lease: its account (to give back), or None."),
    METHOD_O(lease_get, Core_lease_get, "key", "key's lease words, or None (no row)."),
    {NULL},
};

ROLE_SPEC(lease_spec, "LeaseCore", Core, lease_hooks, lease_methods,
          "A segment of role lease: each key's lease of hits, and what every segment has (Core).");
