/* exactlog.c -- a limiter's log rings (Limiter(exact=...)): a rate kept as hit times, exactly,
 * at O(1) amortised a hit, test, stats and refund (issue #30).
 *
 * A log ring's n slots are entries (LOG_TIME: t ns, LOG_HITS: hits); its bucket_ns is the
 * period P. An entry counts while hits > 0 and t >= now - P (as limits' moving window): a hit
 * is forgotten 1 ns after P has passed, never early. The entries are kept in time order in a
 * circular run of `len` slots from `tail` (the oldest), behind the ring's header
 * (layout_words.LOG_HDR_*): the run's position (tail << 32 | len), its running total (>= the
 * sum of its hits), and one "dead" entry (time, hits) that holds the hits expired from the
 * tail for a clock stepped back. So a call never walks the log:
 * - expiry is from the tail: the entries older than now - P leave the run (each once: O(1)
 *   amortised), and every entry left in the run counts (they are in order);
 * - used = the running total less what left, plus the dead entry's hits if it counts at now;
 * - a hit appends at the head; a clock behind the newest entry inserts in order (its hit
 *   shifts only the entries later than it, at most LOG_BEHIND_WALK: further behind, it joins
 *   the entry that many from the head, a later time); n entries in the run: the two oldest merge into
 *   the newer one's time (their hits are forgotten later, never earlier: strict; a rate of at
 *   most n hits a period never merges: every entry in the run holds a hit or more).
 *
 * Clocks that step (issue #33 item 2, as the moving log's, moving.c): a hit never erases hits
 * a clock stepped back still counts. The entries expired at now leave the run into the dead
 * entry, at the newest of their times, holding min(their hits, L) (the dead entry itself, if
 * it counts nothing at now, is one of them; if it counts, it keeps its time). A clock x that
 * counts the dead entry has x <= its time + P, so it also counts every entry of the run (later
 * times): it sees the hits of its window, or at least L. A refund keeps that true: what it
 * gives back joins the dead entry (see log_refund): room at now and later, none behind now. A
 * clock that only moves forward never counts the dead entry again: it sees exactly what it did
 * before.
 *
 * Stores, inside the caller's section ("hit", "refund"): the dead entry before the run
 * drops what expired (counted twice, never lost), the total raised before an entry is written
 * and lowered after one leaves (total >= the run's sum: refuse early, never admit late), an
 * entry written before the position publishes it, a merge's newer entry raised before the
 * oldest leaves. A tear loses at most the call's own hit. Repair (log_repair, from
 * repair_row): the total recomputed from the run. Junk never reaches undefined behaviour: a
 * position past n is a CorruptSegmentError (log_ok), counts saturate.
 */
#include "core.h"

/* The most entries a hit at a clock behind the newest ones shifts: a few processes whose clocks
 * read a little apart stay exact; a clock stepped back far pays this, not the log's length. */
#define LOG_BEHIND_WALK 8
#define LOG_ENTRY(c, hdr, s) ((hdr) + ((c)->head_slots + (s)) * (c)->slot_words)
#define AT(c, hdr, r, i) LOG_ENTRY(c, hdr, ((i) % (r)->n))  /* the run's i-th slot from slot 0 */

static int64_t pos_word(int64_t tail, int64_t len) { return (int64_t)((uint64_t)tail << 32 | (uint64_t)len); }
static int64_t tail_of(int64_t pos) { return (int64_t)((uint64_t)pos >> 32); }
static int64_t len_of(int64_t pos) { return (int64_t)((uint64_t)pos & 0xFFFFFFFFu); }
static int64_t hits_in(int64_t *e) {
    int64_t h = LOAD(e + LOG_HITS);
    return h > 0 ? h : 0;  /* < 0: junk, counts 0 */
}
/* Saturating, as rings.c's (junk in the segment never wraps): kept here, so that this file calls
 * none of rings.c's (which calls this one's). */
static int64_t add_sat(int64_t a, int64_t b) {
    int64_t s;
    return __builtin_add_overflow(a, b, &s) ? (b > 0 ? INT64_MAX : INT64_MIN) : s;
}
static int counts_at(const Ring *r, int64_t t, int64_t hits, int64_t now) {
    return hits > 0 && t >= now - r->bucket_ns;  /* a time ahead of now (a clock behind) counts */
}

/* A log ring's position words within bounds (else the segment is corrupt: hit_row refuses). */
int log_ok(const Ring *r, int64_t *hdr) {
    int64_t pos = LOAD(hdr + LOG_HDR_POS);
    return pos >= 0 && tail_of(pos) < r->n && len_of(pos) <= r->n;
}

/* What the ring counts at now, and what expires from its tail (nothing written). Caller holds
 * the row lock; log_ok held. Walks only the entries that expire. */
int64_t log_used(Core *c, int64_t *hdr, const Ring *r, int64_t now, LogPlace *at) {
    int64_t pos = LOAD(hdr + LOG_HDR_POS), total = LOAD(hdr + LOG_HDR_TOTAL);
    at->tail = tail_of(pos), at->len = len_of(pos), at->gone = 0, at->gone_hits = 0, at->gone_time = INT64_MIN;
    while (at->gone < at->len) {
        int64_t *e = AT(c, hdr, r, at->tail + at->gone), t = LOAD(e + LOG_TIME), hits = hits_in(e);
        if (hits > 0 && t >= now - r->bucket_ns) break;  /* in order: every later entry counts too */
        at->gone_hits = add_sat(at->gone_hits, hits);
        if (hits > 0 && t > at->gone_time) at->gone_time = t;
        at->gone++;
    }
    at->dead_time = LOAD(hdr + LOG_HDR_DEAD_TIME), at->dead_hits = LOAD(hdr + LOG_HDR_DEAD_HITS);
    at->dead_counts = counts_at(r, at->dead_time, at->dead_hits, now);
    int64_t live = total > at->gone_hits ? total - at->gone_hits : 0;
    at->total = total > 0 ? total : 0;
    return at->dead_counts ? add_sat(live, at->dead_hits) : live;
}

/* The entries that expired leave the run into the dead entry (see the top): its hits, capped
 * at L (a dead entry at L may hold fewer hits than expired into it: log_refund never lowers it). */
static void log_expire(int64_t *hdr, const Ring *r, LogPlace *at) {
    int64_t t = at->gone_time, h = add_sat(at->gone_hits, at->dead_hits > 0 ? at->dead_hits : 0);
    if (at->dead_counts || (at->dead_hits > 0 && at->dead_time > t)) t = at->dead_time;  /* later, never sooner */
    if (h > r->limit) h = r->limit;
    if (h > 0 && LOAD(hdr + LOG_HDR_DEAD_TIME) != t) STORE(hdr + LOG_HDR_DEAD_TIME, t);
    if (LOAD(hdr + LOG_HDR_DEAD_HITS) != h) STORE(hdr + LOG_HDR_DEAD_HITS, h);
    if (at->gone == 0) return;
    at->tail = (at->tail + at->gone) % r->n, at->len -= at->gone;
    STORE(hdr + LOG_HDR_POS, pos_word(at->tail, at->len));  /* they left the run */
    at->total = at->total > at->gone_hits ? at->total - at->gone_hits : 0;
    STORE(hdr + LOG_HDR_TOTAL, at->total);
    at->gone = at->gone_hits = 0;
}

/* Bring the ring to rest at now (what expired leaves the run), before a test, a refund or a
 * count. */
void log_settle(Core *Py_UNUSED(c), int64_t *hdr, const Ring *r, LogPlace *at) {
    if (at->gone == 0 && at->dead_hits <= r->limit) return;  /* nothing to move or to cap (junk) */
    log_expire(hdr, r, at);
}

/* Count `cost` hits at now (the ring settled by log_settle at now under the same lock). */
void log_add(Core *c, int64_t *hdr, const Ring *r, int64_t now, int64_t cost, LogPlace *at) {
    int64_t tail = at->tail, len = at->len;
    if (cost <= 0) return;  /* charge(key, 0): nothing to keep (an empty entry would take a slot) */
    STORE(hdr + LOG_HDR_TOTAL, add_sat(at->total, cost));  /* raised first: refuse early, never admit late */
    if (len > LOG_BEHIND_WALK && LOAD(AT(c, hdr, r, tail + len - 1 - LOG_BEHIND_WALK) + LOG_TIME) > now) {
        /* A clock behind more than LOG_BEHIND_WALK entries (in order: all the newest are later):
         * its hits join the entry that many from the head, a later time than now (forgotten
         * later, never earlier: strict), so a hit never shifts more, whatever the log holds. */
        int64_t *later = AT(c, hdr, r, tail + len - LOG_BEHIND_WALK);
        STORE(later + LOG_HITS, add_sat(hits_in(later), cost));
        return;
    }
    if (len == r->n && len == 1) {  /* one slot, holding hits: they join, at the later time */
        int64_t *e = AT(c, hdr, r, tail), t = LOAD(e + LOG_TIME);
        if (now > t) STORE(e + LOG_TIME, now);
        STORE(e + LOG_HITS, add_sat(hits_in(e), cost));
        return;
    }
    if (len == r->n) {  /* the two oldest merge into the newer one's time */
        int64_t *a = AT(c, hdr, r, tail), *b = AT(c, hdr, r, tail + 1);
        STORE(b + LOG_HITS, add_sat(hits_in(b), hits_in(a)));  /* counted twice until a leaves */
        tail = (tail + 1) % r->n, len--;
        STORE(hdr + LOG_HDR_POS, pos_word(tail, len));
        STORE(a + LOG_HITS, 0);  /* out of the run: no reader counts it again */
    }
    int64_t j = len;  /* the new entry's place in the run: after every entry at or before now */
    while (j > 0 && LOAD(AT(c, hdr, r, tail + j - 1) + LOG_TIME) > now) j--;  /* at most LOG_BEHIND_WALK */
    int64_t *head = AT(c, hdr, r, tail + len);
    if (j == len) {  /* the usual case: at the head */
        STORE(head + LOG_HITS, cost);
        STORE(head + LOG_TIME, now);
        STORE(hdr + LOG_HDR_POS, pos_word(tail, len + 1));  /* published */
        return;
    }
    /* A clock behind the newest entry: each later entry moves up one slot, the newest first
     * (into the free slot past the head, then published: a copy counted twice), each copy's
     * hits before its time (an entry's time only ever goes later while copies overlap). */
    int64_t *from = AT(c, hdr, r, tail + len - 1);
    STORE(head + LOG_HITS, hits_in(from));
    STORE(head + LOG_TIME, LOAD(from + LOG_TIME));
    STORE(hdr + LOG_HDR_POS, pos_word(tail, len + 1));
    for (int64_t i = len - 1; i > j; i--) {
        int64_t *to = AT(c, hdr, r, tail + i), *prev = AT(c, hdr, r, tail + i - 1);
        STORE(to + LOG_HITS, hits_in(prev));
        STORE(to + LOG_TIME, LOAD(prev + LOG_TIME));
    }
    int64_t *e = AT(c, hdr, r, tail + j);
    STORE(e + LOG_HITS, cost);
    STORE(e + LOG_TIME, now);
}

/* A log ring's part of "refund" (the ring settled at now): up to `cost` of its counted hits,
 * newest entries first (an entry emptied leaves the run's head). What it gave back.
 * A refund frees room at now and later, never behind now: each hit given back joins the dead
 * entry, at now - P - 1 (counted by every clock behind now, by none at now or later). A merged
 * entry holds hits older than its time, and a clock behind now may still count them: so such a
 * clock sees what it did before the refund (or L), and strictness holds in every interval.
 * If the dead entry counts at now (the clock is behind hits that a later clock saw expire), the
 * refund gives nothing back: a hit taken from the run there would have to stay counted at now.
 * Stores: the dead entry raised before an entry is lowered, an entry before the total (a tear
 * counts a hit twice: refuse early, never admit late). */
int64_t log_refund(Core *c, int64_t *hdr, const Ring *r, int64_t now, int64_t cost, LogPlace *at) {
    int64_t left = cost, total = at->total, dead = at->dead_hits > 0 ? at->dead_hits : 0;
    int64_t behind = now - r->bucket_ns - 1;  /* now >= 0, P >= 1: no overflow */
    if (at->dead_counts) return 0;
    while (left > 0 && at->len > 0) {
        int64_t *e = AT(c, hdr, r, at->tail + at->len - 1), hits = hits_in(e), take = hits < left ? hits : left;
        if (take > 0) {
            /* later, never sooner: the dead entry's own hits count for more clocks, not fewer */
            if (LOAD(hdr + LOG_HDR_DEAD_TIME) != behind) STORE(hdr + LOG_HDR_DEAD_TIME, behind);
            if (dead < r->limit) {  /* at L it already holds what any clock behind can need */
                dead = r->limit - dead < take ? r->limit : dead + take;
                STORE(hdr + LOG_HDR_DEAD_HITS, dead);
            }
            STORE(e + LOG_HITS, hits - take);
            total = total > take ? total - take : 0;
            STORE(hdr + LOG_HDR_TOTAL, total);
            left -= take;
        }
        if (hits - take > 0) break;
        at->len--;
        STORE(hdr + LOG_HDR_POS, pos_word(at->tail, at->len));
    }
    at->total = total;
    return cost - left;
}

/* How long until an entry stamped t leaves, from now (never negative, never wrapped). */
static int64_t leaves_after(const Ring *r, int64_t t, int64_t now) {
    int64_t ahead = t - now;  /* >= -P for a counting entry */
    if (ahead > INT64_MAX - r->bucket_ns - 1) return INT64_MAX;
    return ahead + r->bucket_ns + 1 > 0 ? ahead + r->bucket_ns + 1 : 0;
}

/* A log ring's timing (the ring settled at now; see timing(), rings.c): *reset_ns, until its
 * oldest counted hit leaves (0: none counted); *wait_ns, until `need` of its hits have left
 * (0: need <= 0; -1: it counts fewer). Walks the run from its tail only as far as `need`. */
void log_timing(Core *c, int64_t *hdr, const Ring *r, int64_t now, int64_t need, int64_t *reset_ns,
                int64_t *wait_ns) {
    int64_t pos = LOAD(hdr + LOG_HDR_POS), tail = tail_of(pos), len = len_of(pos);
    int64_t dt = LOAD(hdr + LOG_HDR_DEAD_TIME), dh = LOAD(hdr + LOG_HDR_DEAD_HITS), freed = 0;
    int dead = counts_at(r, dt, dh, now);
    int64_t oldest = len > 0 ? LOAD(AT(c, hdr, r, tail) + LOG_TIME) : INT64_MAX;
    if (dead && dt < oldest) oldest = dt;
    *reset_ns = len > 0 || dead ? leaves_after(r, oldest, now) : 0;
    *wait_ns = need <= 0 ? 0 : -1;
    for (int64_t i = 0; need > 0 && (i < len || dead); i++) {
        int64_t t = INT64_MAX, hits = 0;
        if (i < len) {
            int64_t *e = AT(c, hdr, r, tail + i);
            t = LOAD(e + LOG_TIME), hits = hits_in(e);
        }
        if (dead && dt <= t) {  /* the dead entry leaves before this one: taken in its turn */
            t = dt, hits = dh, dead = 0, i--;
        }
        freed = add_sat(freed, hits);
        if (freed >= need) {
            *wait_ns = leaves_after(r, t, now);
            return;
        }
    }
}

/* The repair of a log ring whose holder died inside "hit" or "refund" (repair_row): its total
 * recomputed from the run (a junk position is left as it is: hit_row refuses the row). */
void log_repair(Core *c, int64_t *hdr, const Ring *r) {
    if (!log_ok(r, hdr)) return;
    int64_t pos = LOAD(hdr + LOG_HDR_POS), total = 0;
    for (int64_t i = 0; i < len_of(pos); i++) total = add_sat(total, hits_in(AT(c, hdr, r, tail_of(pos) + i)));
    STORE(hdr + LOG_HDR_TOTAL, total);
}
