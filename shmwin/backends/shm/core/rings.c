/* rings.c -- rows and their rings: the window's add, log rings, and the
 * limiter's check-and-count with its repair.
 *
 * A row (layout.py, "Rows") holds one ring per resolution or rate; a ring is its header
 * slot(s), then n buckets of (epoch, value per field). Unkeyed striped windows give each
 * process its own row (its stripe, stripes.c), written lock-free; every other row is written
 * under its lock. Each section below says what holds between its stores and what a repair recomputes.
 */
#include "core.h"

#include <math.h>
#include <stdlib.h>

/* ---- rows ------------------------------------------------------------------------------- */

void empty_rings(Core *c, char *row) {
    if (c->hooks->empty != NULL) {  /* the role's own (a moving log: its entries zeroed, its chunks given back) */
        c->hooks->empty(c, row, (row - ROW(c, 0)) / c->row_bytes);
        return;
    }
    memcpy(row + c->rings_off, c->empty, (size_t)c->empty_bytes);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    FAILPOINT();
}

/* Counts read from the segment are added saturating: junk there never wraps (nor is UB). */
int64_t sat_add(int64_t a, int64_t b) {
    int64_t s;
    return __builtin_add_overflow(a, b, &s) ? (b > 0 ? INT64_MAX : INT64_MIN) : s;
}
int64_t sat_sub(int64_t a, int64_t b) {
    int64_t s;
    return __builtin_sub_overflow(a, b, &s) ? (b < 0 ? INT64_MAX : INT64_MIN) : s;
}

/* A ring's span (n x bucket_ns), saturating: a header may describe any ring its checksum covers. */
int64_t span_ns(const Ring *r) {
    int64_t span;
    return __builtin_mul_overflow(r->n, r->bucket_ns, &span) ? INT64_MAX : span;
}

/* Add n (int or double bits) at `now` to field word f (SLOT_VALUES + the field's index) of
 * every ring of a row.
 * Caller is the row's only writer (its stripe's process, or the holder of its lock).
 * Invariant between stores: a bucket is zeroed before it is stamped, so a lock-free reader
 * that sees the new epoch sees no old value; a tear loses only the call's own add. */
int add_row(Core *c, char *row, int64_t now, int f, int64_t n, double d) {
    int64_t *slot[MAX_RINGS], epoch[MAX_RINGS];
    for (int i = 0; i < c->n_rings; i++) {  /* check everything before writing anything */
        const Ring *r = &c->rings[i];
        epoch[i] = now / r->bucket_ns;
        slot[i] = BUCKET(c, RING(c, row, i), r, epoch[i]);
        int64_t bits = LOAD(slot[i] + SLOT_EPOCH) < epoch[i] ? 0 : LOAD(slot[i] + f), out;
        double sum;
        memcpy(&sum, &bits, 8);
        if (c->floats ? !isfinite(sum + d) : __builtin_add_overflow(bits, n, &out)) {
            PyErr_Format(PyExc_OverflowError, "this add would overflow the window's %s value",
                         c->floats ? "float64" : "int64");
            return -1;
        }
    }
    for (int i = 0; i < c->n_rings; i++) {
        int64_t *s = slot[i];
        if (LOAD(s + SLOT_EPOCH) < epoch[i]) {  /* a stale slot: recycle it (a newer one is kept: a lagging clock) */
            for (int k = 0; k < c->n_fields; k++) STORE(s + SLOT_VALUES + k, 0);
            STORE(s + SLOT_EPOCH, epoch[i]);
        }
        if (c->floats) {
            double v;
            int64_t bits = LOAD(s + f);
            memcpy(&v, &bits, 8);
            v += d;
            memcpy(&bits, &v, 8);
            STORE(s + f, bits);
        } else {
            STORE(s + f, LOAD(s + f) + n);
        }
    }
    return 0;
}

/* ---- log rings: exactlog.c ------------------------------------------------------------- */

/* ---- the limiter's compact rings ----------------------------------------------------------
 * A limiter's bucket ring (layout.py, "Limiter rings") is a header -- head, total, zeroed,
 * tail -- then n counts of r->cw bytes (4 when the ring's limit fits COUNT32_MAX: a count never
 * exceeds it, hit_row counts only what fits) and no epochs: slot s holds the count of the
 * one epoch e == s (mod n) in (head - n, head]. That count is *clean* -- the epoch's own, and
 * in the total -- iff e <= zeroed; the slot of an epoch in (zeroed, head] is *stale*: it may
 * still hold the count of an epoch n or more before, already taken out of the total.
 * At rest (no section running) zeroed == head: every slot is clean, total is their sum, and
 * tail is at most the oldest clean epoch holding hits (EMPTY: none holds any). head EMPTY:
 * nothing counted (counts a torn reset left are zeroed before the ring is used again). */

/* A limiter ring's head epoch: EMPTY, or one a clock can reach, whose epoch maths (head - n,
 * (head + n) x bucket_ns) cannot overflow. */
static int head_ok(const Ring *r, int64_t head) {
    return head == EMPTY_EPOCH || (head >= 0 && head <= INT64_MAX / r->bucket_ns - 2 * r->n);
}

/* The count of epoch e >= 0 (in its slot, whichever epoch that slot is of). */
static int64_t count_load(const Ring *r, int64_t *hdr, int64_t e) {
    char *p = COUNT_AT(hdr, r, e);
    return r->cw == COUNT32_BYTES ? (int64_t)LOAD((int32_t *)p) : LOAD((int64_t *)p);
}

static void count_store(const Ring *r, int64_t *hdr, int64_t e, int64_t v) {
    char *p = COUNT_AT(hdr, r, e);
    if (r->cw == COUNT32_BYTES) STORE((int32_t *)p, (int32_t)(v > COUNT32_MAX ? COUNT32_MAX : v < 0 ? 0 : v));
    else STORE((int64_t *)p, v);
}

/* The newest clean epoch of a ring whose head is `head` (EMPTY: none is clean). Any zeroed
 * word (junk too) gives an epoch in [.., head]: loops from it stay within one lap. */
static int64_t clean_top(int64_t *hdr, int64_t head) {
    int64_t zeroed = LOAD(ZEROED(hdr));
    if (head == EMPTY_EPOCH || zeroed == EMPTY_EPOCH) return EMPTY_EPOCH;
    return zeroed < head ? zeroed : head;
}

/* The counts of epochs in (from, to] that are >= 0 (to - from <= n: one lap at most); a
 * negative count is junk and counts 0, the sum saturates. */
static int64_t sum_counts(const Ring *r, int64_t *hdr, int64_t from, int64_t to) {
    int64_t total = 0;
    for (int64_t e = from < -1 ? 0 : from + 1; e <= to; e++) {
        int64_t hits = count_load(r, hdr, e);
        if (hits > 0) total = sat_add(total, hits);
    }
    return total;
}

/* A ring's running total, recomputed from its clean counts (junk totals). head passed head_ok(). */
static int64_t ring_sum(const Ring *r, int64_t *hdr, int64_t head) {
    int64_t top = clean_top(hdr, head);
    return top == EMPTY_EPOCH ? 0 : sum_counts(r, hdr, head - r->n, top);
}

/* Zero the counts of epochs in (max(top, to - n), to] (top EMPTY: every slot), then say so:
 * zeroed = to. Each count goes to 0 in one store; a count already 0 is not written. */
static void zero_stale(const Ring *r, int64_t *hdr, int64_t top, int64_t to) {
    int64_t from = top == EMPTY_EPOCH || top < to - r->n ? to - r->n : top;
    for (int64_t e = from < -1 ? 0 : from + 1; e <= to; e++)
        if (count_load(r, hdr, e) != 0) count_store(r, hdr, e, 0);
    STORE(ZEROED(hdr), to);
}

#define GHOST(hdr) ((hdr) + LIMITER_RING_GHOST)

/* ---- a clock stepped back: the ring's ghost ----------------------------------------------
 * A head move to e drops the clean counts of epochs <= e - n: out of the window of a clock at
 * or past the head, but not of a clock behind it (a wall clock NTP stepped back, a process
 * whose clock lags), which counts at the head and so sees every count of the ring. What a move
 * drops is kept as one ghost word: the newest dropped epoch holding hits, g (mod 2**32: read
 * back against the head as g or later), and their hits, merged into the ghost already kept
 * (at the newer epoch: older hits count longer, refused early) and capped at L - total (L:
 * the limit; total: the clean counts the move keeps). A clock x behind the head counts the
 * ghost iff g > x - n, i.e. iff g is in its window; a clock at or past the head never does.
 * Why that keeps the guarantee (never more than L hits in any period, in any clock's frame):
 * if x saw total' + ghost' >= min(its hits, L) before a move, it sees after it
 * total' - dropped + min(ghost' + dropped, L - total' + dropped) = min(total' + ghost', L)
 * >= min(its hits, L); a hit counted at the head is in the ring, seen by every clock behind.
 * The word is written before the head moves (the dropped counts still in the window): a tear
 * leaves them counted twice (refused early, never admitted late); the next move merges again. */

/* The ghost word's epoch (g or later: the epoch is kept mod 2**32) for a ring whose head is head. */
static int64_t ghost_epoch(uint64_t word, int64_t head) {
    uint32_t back = (uint32_t)((uint64_t)head - (word >> GHOST_EPOCH_SHIFT));  /* head - g, mod 2**32 */
    return (int64_t)back > head ? 0 : head - (int64_t)back;  /* epochs are >= 0 (junk: 0) */
}

/* The ghost's hits a clock at epoch clock_e (behind head, not EMPTY) counts: 0 unless the
 * ghost's epoch is in its window; GHOST_HITS_MAX says "at least that": the limit, if more. */
static int64_t ghost_seen(const Ring *r, int64_t *hdr, int64_t head, int64_t clock_e) {
    uint64_t word = (uint64_t)LOAD(GHOST(hdr));
    int64_t hits = (int64_t)(word & GHOST_HITS_MAX);
    if (hits == 0 || ghost_epoch(word, head) <= clock_e - r->n) return 0;
    return hits == GHOST_HITS_MAX && r->limit > hits ? r->limit : hits;
}

/* The clean counts a head move from head to e drops (epochs in (head - n, min(e - n, top)]):
 * their sum (saturating; a negative count is junk, 0), and *newest, the newest holding hits. */
static int64_t dropped_counts(const Ring *r, int64_t *hdr, int64_t head, int64_t top, int64_t e,
                              int64_t *newest) {
    int64_t total = 0, to = e - r->n < top ? e - r->n : top;
    *newest = EMPTY_EPOCH;
    if (head == EMPTY_EPOCH || top == EMPTY_EPOCH) return 0;
    for (int64_t d = to; d > head - r->n && d >= 0; d--) {
        int64_t hits = count_load(r, hdr, d);
        if (hits <= 0) continue;
        if (*newest == EMPTY_EPOCH) *newest = d;
        total = sat_add(total, hits);
    }
    return total;
}

/* Merge `hits` dropped at epoch `newest` into the ghost of a ring whose head is `head` (the
 * move's old head), capped at L - kept (kept: the clean counts that stay); one store. */
static void ghost_keep(const Ring *r, int64_t *hdr, int64_t head, int64_t hits, int64_t newest, int64_t kept) {
    uint64_t word = (uint64_t)LOAD(GHOST(hdr));
    int64_t held = (int64_t)(word & GHOST_HITS_MAX), cap = sat_sub(r->limit, kept);
    if (held > 0) {
        int64_t g = ghost_epoch(word, head);
        if (g > newest) newest = g;
        hits = sat_add(hits, held == GHOST_HITS_MAX && r->limit > held ? r->limit : held);
    }
    if (hits > cap) hits = cap;
    if (hits < 0) hits = 0;
    if (hits > GHOST_HITS_MAX) hits = GHOST_HITS_MAX;
    uint64_t now_word = hits == 0 ? 0 : (uint64_t)newest << GHOST_EPOCH_SHIFT | (uint64_t)hits;
    if (now_word != word) STORE(GHOST(hdr), (int64_t)now_word);
}

/* Part of section "hit": move a ring's head from `head` to e (> head, or head EMPTY). Stores
 * in order: the ghost (the clean counts that leave the window, kept for a clock behind);
 * head = e (the counts of the epochs (old head, e] are now stale, still in the total: too
 * high); total lowered by the clean counts that left the window (or, for a ring not at rest
 * -- a torn reset, junk --, set to the sum of the clean counts that stay); each stale count
 * zeroed; zeroed = e. After each store: total >= the sum of the clean counts, and a clock
 * behind the head sees no fewer hits (up to L) than before the move. */
static void advance(const Ring *r, int64_t *hdr, int64_t head, int64_t e) {
    int64_t top = clean_top(hdr, head), total, kept = e - r->n;  /* epochs > kept stay in the window */
    int64_t newest, left = dropped_counts(r, hdr, head, top, e, &newest);
    if (head != EMPTY_EPOCH && top == head && e - head < r->n)
        total = sat_sub(LOAD(TOTAL(hdr)), left);  /* those that left */
    else  /* not at rest: the clean counts that stay (top != EMPTY: head is not EMPTY either) */
        total = top == EMPTY_EPOCH || top <= kept ? 0
                : sum_counts(r, hdr, kept > head - r->n ? kept : head - r->n, top);
    if (left > 0) ghost_keep(r, hdr, head, left, newest, total < 0 ? 0 : total);
    STORE(HEAD(hdr), e);
    STORE(TOTAL(hdr), total);
    if (total == 0 && LOAD(LTAIL(hdr)) != EMPTY_EPOCH) STORE(LTAIL(hdr), EMPTY_EPOCH);
    zero_stale(r, hdr, top, e);
}

/* ---- the limiter's check-and-count ------------------------------------------------------ */

/* Section "hit": advance every ring to now, compare, count in all or none (commit 1), or in
 * all whatever they hold (COMMIT_FORCE: charge()), or none (commit 0: a test). Caller holds the
 * row lock. Running totals and tails are derived data; counts are primary.
 * Invariant between stores: for each compact ring, total >= the sum of its clean counts
 * (see "the limiter's compact rings" above) -- a head moves before its total is lowered and
 * its stale counts are zeroed, and totals rise before counts -- so a tear leaves totals too
 * high (refuse early), never too low (admit late), and at worst loses the call's own hit.
 * The tail is set before a first hit lands, moved forward lazily by timing().
 * Repair (repair_row): zero the stale counts, zeroed = head, total = the sum of the counts. */
int hit_row(Core *c, int64_t slot, int64_t now, int64_t cost, int commit, Verdict *v) {
    char *row = ROW(c, slot);
    int64_t epoch[MAX_RINGS], total[MAX_RINGS];  /* total: a compact ring's, without its ghost */
    LogPlace at[MAX_RINGS];
    unsigned logs = 0;  /* bit i: ring i is a log ring (read once: the stores below are to the segment) */
    for (int i = 0; i < c->n_rings; i++) {  /* junk a clock never reaches: epoch maths would overflow */
        if (c->rings[i].log) {
            logs |= 1u << i;
            if (log_ok(&c->rings[i], RING(c, row, i))) continue;
            PyErr_Format(c->st->corrupt, "window %R: key row %lld holds an impossible log position: the segment "
                         "is corrupt", c->name, (long long)slot);
            return -1;
        }
        int64_t head = LOAD(HEAD(RING(c, row, i)));
        if (!head_ok(&c->rings[i], head)) {
            PyErr_Format(c->st->corrupt, "window %R: key row %lld holds an impossible epoch %lld: the segment "
                         "is corrupt", c->name, (long long)slot, (long long)head);
            return -1;
        }
    }
    SECTION("hit");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    v->allowed = 1;
    for (int i = 0; i < c->n_rings; i++) {
        const Ring *r = &c->rings[i];
        int64_t *hdr = RING(c, row, i), e = now / r->bucket_ns;
        if (logs & 1u << i) {
            epoch[i] = 0;  /* unused: a log ring keeps times, not buckets */
            v->used[i] = log_used(c, hdr, r, now, &at[i]);
            if (cost > r->limit || v->used[i] > r->limit - cost) v->allowed = 0;
            continue;
        }
        int64_t head = LOAD(HEAD(hdr)), clock_e = e;
        if (head != EMPTY_EPOCH && e < head) e = head;  /* a clock behind the head: count later */
        epoch[i] = e;
        if (head != e) advance(r, hdr, head, e);
        else if (LOAD(ZEROED(hdr)) != e) {  /* not at rest (a torn reset, junk): bring it to rest */
            zero_stale(r, hdr, clean_top(hdr, e), e);
            STORE(TOTAL(hdr), ring_sum(r, hdr, e));
        }
        total[i] = LOAD(TOTAL(hdr));
        if (total[i] < 0) {  /* junk: recompute the derived total from the counts */
            total[i] = ring_sum(r, hdr, e);
            STORE(TOTAL(hdr), total[i]);
        }
        /* a clock behind the head also counts the hits the head's moves dropped in its window */
        v->used[i] = clock_e < e ? sat_add(total[i], ghost_seen(r, hdr, e, clock_e)) : total[i];
        if (cost > r->limit || v->used[i] > r->limit - cost) v->allowed = 0;  /* no overflow */
    }
    int counting = (v->allowed && commit) || commit == COMMIT_FORCE;
    for (int i = 0; i < c->n_rings; i++)  /* what expired leaves each log ring, counted or not */
        if (logs & 1u << i) log_settle(c, RING(c, row, i), &c->rings[i], &at[i]);
    if (counting) {
        for (int i = 0; i < c->n_rings; i++) {
            if (logs & 1u << i) continue;
            int64_t *hdr = RING(c, row, i);
            if (LOAD(LTAIL(hdr)) == EMPTY_EPOCH) STORE(LTAIL(hdr), epoch[i]);
            v->used[i] = sat_add(v->used[i], cost);
            STORE(TOTAL(hdr), sat_add(total[i], cost));
        }
        for (int i = 0; i < c->n_rings; i++) {
            if (logs & 1u << i) {
                log_add(c, RING(c, row, i), &c->rings[i], now, cost, &at[i]);
                v->used[i] += cost;
                continue;
            }
            const Ring *r = &c->rings[i];
            int64_t *hdr = RING(c, row, i), hits = count_load(r, hdr, epoch[i]);
            count_store(r, hdr, epoch[i], sat_add(hits < 0 ? 0 : hits, cost));
        }
        touch_last(row, now);
    }
    END_SECTION();
    return 0;
}

/* Section "refund": give back up to `cost` of the hits a key holds, its most recent first, in
 * every rate (each gives back what it holds, up to cost); what the rate that gave most gave.
 * Caller holds the row lock, after hit_row (commit 0) brought every ring to rest at now.
 * Invariant between stores: a ring's counts are lowered before its total, so its total stays
 * >= the sum of its clean counts (refuse early, never admit late); a log entry's hits go down
 * in one store. Repair: repair_row's (counts are primary, totals recomputed). */
int64_t refund_row(Core *c, int64_t slot, int64_t now, int64_t cost) {
    char *row = ROW(c, slot);
    int64_t most = 0;
    SECTION("refund");
    STORE(intent_at(c, row_lock(c, slot)), slot);
    for (int i = 0; i < c->n_rings; i++) {
        const Ring *r = &c->rings[i];
        int64_t *hdr = RING(c, row, i), left = cost, head;
        if (r->log) {
            LogPlace at;
            (void)log_used(c, hdr, r, now, &at);  /* at rest (hit_row): nothing expires */
            left -= log_refund(c, hdr, r, now, cost, &at);
        } else if ((head = LOAD(HEAD(hdr))) != EMPTY_EPOCH) {
            int64_t top = clean_top(hdr, head);
            for (int64_t e = top; left > 0 && top != EMPTY_EPOCH && e > head - r->n && e >= 0; e--) {
                int64_t hits = count_load(r, hdr, e), take;
                if (hits <= 0) continue;  /* < 0: junk, counts 0 */
                take = hits < left ? hits : left;
                count_store(r, hdr, e, hits - take);
                left -= take;
            }
            if (left < cost) {
                int64_t total = sat_sub(LOAD(TOTAL(hdr)), cost - left);
                STORE(TOTAL(hdr), total < 0 ? 0 : total);
            }
        }
        if (cost - left > most) most = cost - left;
    }
    END_SECTION();
    return most;
}

/* When each rate's oldest counted hit is forgotten, and when `cost` would fit. Caller holds
 * the row lock, after hit_row (every ring at rest). Scans start at the ring's tail, which then
 * moves forward to the oldest clean epoch found holding hits (one store of derived data: any
 * lower bound is valid), so repeated calls cost O(1) and a ring's counts are passed over at
 * most once per lap. */
void timing(Core *c, int64_t slot, int64_t now, int64_t cost, Verdict *v) {
    char *row = ROW(c, slot);
    v->wait_ns = 0;
    for (int i = 0; i < c->n_rings; i++) {
        const Ring *r = &c->rings[i];
        int64_t *hdr = RING(c, row, i);
        int64_t need = cost > r->limit - v->used[i] ? sat_sub(v->used[i], r->limit - cost) : 0;
        int64_t freed = 0, blocks = !v->allowed && need > 0;
        v->reset_ns[i] = 0;
        if (blocks && cost > r->limit) v->wait_ns = -1;
        if (r->log) {
            int64_t wait;
            log_timing(c, hdr, r, now, blocks && v->wait_ns >= 0 ? need : 0, &v->reset_ns[i], &wait);
            if (wait > v->wait_ns && v->wait_ns >= 0) v->wait_ns = wait;
            continue;
        }
        int64_t head = LOAD(HEAD(hdr)), tail = LOAD(LTAIL(hdr));
        if (!head_ok(r, head) || head == EMPTY_EPOCH) continue;
        if (now / r->bucket_ns < head) {  /* a clock behind: the ghost it counts leaves first */
            int64_t ghost = ghost_seen(r, hdr, head, now / r->bucket_ns);
            if (ghost > 0) {
                int64_t leaves = (ghost_epoch((uint64_t)LOAD(GHOST(hdr)), head) + r->n) * r->bucket_ns - now;
                v->reset_ns[i] = leaves > 0 ? leaves : 0;
                freed = ghost;
                if (blocks && v->wait_ns >= 0 && freed >= need && v->reset_ns[i] > v->wait_ns)
                    v->wait_ns = v->reset_ns[i];
            }
        }
        if (tail == EMPTY_EPOCH || (freed > 0 && (!blocks || v->wait_ns < 0 || freed >= need))) continue;
        int64_t top = clean_top(hdr, head), from = head - r->n + 1;
        if (top == EMPTY_EPOCH) continue;
        for (int64_t e = tail > from ? tail : from; e <= top; e++) {
            int64_t hits;
            if (e < 0 || (hits = count_load(r, hdr, e)) <= 0) continue;  /* < 0: junk */
            int64_t leaves = (e + r->n) * r->bucket_ns - now;
            if (leaves < 0) leaves = 0;
            if (freed == 0 && e != tail) STORE(LTAIL(hdr), e);
            if (v->reset_ns[i] == 0) v->reset_ns[i] = leaves;
            freed = sat_add(freed, hits);
            if (!blocks || v->wait_ns < 0) break;
            if (freed >= need) {
                if (leaves > v->wait_ns) v->wait_ns = leaves;
                break;
            }
        }
    }
}

/* Section "repair": a limiter's row whose holder died inside "hit" (its lock's intent names
 * it). Counts are primary, each written in one store; a ring's stale counts (of epochs in
 * (zeroed, head]) are zeroed and zeroed set to head, which brings it to rest; its total is
 * then recomputed from its counts and its tail set to a lower bound. A tear here leaves the
 * ring as a torn "hit" would (total >= the clean counts), and the next holder repairs again.
 * Caller holds the row's lock, in lock_take's repair. */
void repair_row(Core *c, int64_t slot) {
    char *row = ROW(c, slot);
    SECTION("repair");
    for (int i = 0; i < c->n_rings; i++) {
        const Ring *r = &c->rings[i];
        if (r->log) {
            log_repair(c, RING(c, row, i), r);  /* its running total, from its entries */
            continue;
        }
        int64_t *hdr = RING(c, row, i), head = LOAD(HEAD(hdr));
        if (!head_ok(r, head) || head == EMPTY_EPOCH) continue;  /* junk: hit_row refuses the row; EMPTY: unused */
        if (LOAD(ZEROED(hdr)) != head) zero_stale(r, hdr, clean_top(hdr, head), head);
        int64_t total = sum_counts(r, hdr, head - r->n, head);
        STORE(TOTAL(hdr), total);
        STORE(LTAIL(hdr), total ? head - r->n + 1 : EMPTY_EPOCH);  /* a lower bound */
    }
    END_SECTION();
}
