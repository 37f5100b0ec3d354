/* threads.c -- what is per process, not per segment: the fork generation, the time
 * namespace's offset, and this process's two C threads, the keeper and the reserver.
 *
 * This state is process-wide on purpose, and stays static: the keeper holds robust mutexes
 * for this *process* (the kernel marks them owner-dead when the process dies), stripes belong
 * to processes, and a fork resets all of it in the child (after_fork_child). It is why the
 * module declares itself unfit for several interpreters of one process (module.c).
 */
#include "core.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#ifdef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE_OR_NONE MADV_POPULATE_WRITE
#else
#define MADV_POPULATE_WRITE_OR_NONE 23  /* Linux 5.14+; older kernels answer EINVAL */
#endif

uint64_t fork_gen = 1;  /* bumped in a forked child: stripes are per process */
static void keeper_after_fork(void);
static void reserver_after_fork(void);

/* Registered with pthread_atfork by the module's exec (once per process). */
void after_fork_child(void) {
    fork_gen++;
    timens_offset_ns = read_timens_offset();
    keeper_after_fork();
    reserver_after_fork();
}

/* A plain C thread of this process (detached, small stack, every signal blocked: signals
 * stay Python's main thread's): 0 or a pthread error code. */
int start_thread(void *(*main)(void *)) {
    pthread_t t;
    pthread_attr_t attr;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    int err = pthread_create(&t, &attr, main, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return err;
}

/* A fork's child: a thread's mutex and condition as new, since the thread that held or waited
 * on them stayed in the parent (both threads below start anew in the child, on first use). */
static void fresh_sync(pthread_mutex_t *mu, pthread_cond_t *cv) {
    pthread_mutex_t new_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t new_cv = PTHREAD_COND_INITIALIZER;
    *mu = new_mu;
    *cv = new_cv;
}

/* A process in a time namespace (a container started with one, a CRIU restore) reads
 * CLOCK_MONOTONIC shifted by its namespace's offset, so two processes of one host could
 * stamp one window with clocks seconds apart. Every time a segment holds is the host's
 * (the initial namespace's): this process's offset, from /proc/self/timens_offsets
 * ("monotonic <s> <ns>"), is taken off. Read at import and again in a forked child (whose
 * namespace may be new); open/read/close are async-signal-safe. 0 without the file. */
int64_t timens_offset_ns = 0;

int64_t read_timens_offset(void) {
    char buf[256];
    int fd = open("/proc/self/timens_offsets", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *line = buf;
    while (line != NULL) {
        long long s, ns;  /* offsets are bounded (|s| < 2**31): no overflow below */
        if (strncmp(line, "monotonic", 9) == 0 && sscanf(line + 9, "%lld %lld", &s, &ns) == 2 &&
            s > -(1LL << 31) && s < (1LL << 31) && ns >= 0 && ns < NS)
            return (int64_t)s * NS + ns;
        line = strchr(line, '\n');
        if (line != NULL) line++;
    }
    return 0;
}

/* ---- the keeper: liveness the kernel certifies ---------------------------------------- *
 * A stripe is never adopted while its owner lives, whatever /proc shows (hidepid, another
 * uid, another PID namespace): each stripe entry holds a robust mutex that its owner process
 * keeps locked for as long as it writes the row. Locks belong to threads, and any Python
 * thread may end, so one plain C thread per process -- the keeper -- takes and gives them
 * back on request. When the owner dies, the kernel marks the mutex owner-dead, and only then
 * (or when it is free) can a claimer take it. The failure mode is "slower", never "shared".
 * A mutex is always given back before its mapping goes away (its robust-list links live in
 * it). After fork() the child has no keeper (and holds nothing): the next request starts one. */

static pthread_mutex_t keep_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t keep_cv = PTHREAD_COND_INITIALIZER;
static int keep_started, keep_state;  /* state: 0 idle, 1 request posted, 2 answered */
static int keep_op, keep_rc;
static pthread_mutex_t *keep_arg;

static void *keeper_main(void *unused) {
    (void)unused;
    pthread_mutex_lock(&keep_mu);
    for (;;) {
        while (keep_state != 1) pthread_cond_wait(&keep_cv, &keep_mu);
        if (keep_op == KEEP_TAKE) {
            keep_rc = pthread_mutex_trylock(keep_arg);
            if (keep_rc == EOWNERDEAD) keep_rc = pthread_mutex_consistent(keep_arg);  /* a dead owner's */
        } else {
            keep_rc = pthread_mutex_unlock(keep_arg);
        }
        keep_state = 2;
        pthread_cond_broadcast(&keep_cv);
    }
    return NULL;
}

static void keeper_after_fork(void) {  /* the child: no keeper thread, nothing held */
    fresh_sync(&keep_mu, &keep_cv);
    keep_started = keep_state = 0;
}

/* Ask the keeper to take (trylock; 0 = now ours) or give back a mutex: a pthread code. */
int keeper(int op, pthread_mutex_t *m) {
    pthread_mutex_lock(&keep_mu);
    if (!keep_started) {
        int err = start_thread(keeper_main);
        if (err != 0) {
            pthread_mutex_unlock(&keep_mu);
            return err;
        }
        keep_started = 1;
    }
    while (keep_state != 0) pthread_cond_wait(&keep_cv, &keep_mu);
    keep_op = op;
    keep_arg = m;
    keep_state = 1;
    pthread_cond_broadcast(&keep_cv);
    while (keep_state != 2) pthread_cond_wait(&keep_cv, &keep_mu);
    int rc = keep_rc;
    keep_state = 0;
    pthread_cond_broadcast(&keep_cv);
    pthread_mutex_unlock(&keep_mu);
    return rc;
}

/* A process's claim of a stripe or slot, for the three tables of them (stripes.c, concurrency.c,
 * seriesdir.c): the keeper takes the first of n liveness mutexes, the i-th at first + i *
 * stride bytes, that is free (never locked, or its owner dead; a live owner's is never
 * shared). 0 with *at = i; EBUSY when every one has a live owner; another pthread code with
 * *at = the index of the mutex that is unusable. */
int keeper_take_first(char *first, int64_t stride, int64_t n, int64_t *at) {
    for (int64_t i = 0; i < n; i++) {
        int rc = keeper(KEEP_TAKE, (pthread_mutex_t *)(void *)(first + i * stride));
        if (rc == EBUSY) continue;
        *at = i;
        return rc;
    }
    return EBUSY;
}

/* The display words of a row just claimed by keeper_take_first (a window's or a concurrency's
 * stripe, a metrics slot): its owner's pid, then when (host monotonic ns). Written after the
 * claim is won, before the word that publishes it; each store a fail point of the caller's
 * section. */
void stripe_stamp(int64_t *e, int64_t pid) {
    STORE(e + STRIPE_OWNER_PID, pid);
    STORE(e + STRIPE_CLAIMED_NS, host_mono_ns());
}

/* ---- the reserver: the kernel's part of a growing table, done ahead ------------------- *
 * A page of /dev/shm that a segment has not used yet costs microseconds to get (allocated,
 * zeroed, charged to the cgroup, mapped): on a VM, more than all the rest of a new key's
 * first hit. So a large table has this process's reserver thread get the pages of its next
 * chunk of rows as soon as one is reserved -- posix_fallocate, then MADV_POPULATE_WRITE --
 * while the keys fill this one. (The next index copy is not fetched ahead: which level a
 * rebuild writes depends on how many keys went idle, and a copy got for nothing would stay
 * held; measured, it gained nothing either.) The reserver writes no byte of the segment and no shared word: it
 * is a prefetch of kernel work, and a crash anywhere in it leaves only allocated pages that
 * a later reserve covers anyway. When the table reaches those pages, the foreground
 * reserves them without a syscall if the reserver got exactly them; otherwise (not done
 * yet: it waits; not started: it cancels; failed) it reserves them itself, as always. The
 * reserver never takes the last of /dev/shm: it runs only while the file system has 8
 * times the job free, and a failed posix_fallocate gives back what it took. A few jobs at
 * a time per process; close() cancels or waits for its own. */

enum { JOB_IDLE, JOB_POSTED, JOB_RUNNING, JOB_DONE };
#define JOBS 4
typedef struct {
    int state, ok;
    const void *owner;         /* the Core the job is for (compared, never followed) */
    int fd;                    /* a dup of the segment's fd while posted or running, else -1 */
    char *addr;                /* [from, to) as mapped in this process */
    int64_t from, to;          /* byte offsets in the segment */
} Job;
static pthread_mutex_t jobs_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jobs_cv = PTHREAD_COND_INITIALIZER;
static int reserver_started;
static Job jobs[JOBS] = {{.fd = -1}, {.fd = -1}, {.fd = -1}, {.fd = -1}};
static long long jobs_posted, jobs_done, jobs_used;  /* for tests: see reserver_counts() */

static Job *next_job(void) {
    for (int i = 0; i < JOBS; i++)
        if (jobs[i].state == JOB_POSTED) return &jobs[i];
    return NULL;
}

static void *reserver_main(void *unused) {
    (void)unused;
    pthread_mutex_lock(&jobs_mu);
    for (;;) {
        Job *j;
        while ((j = next_job()) == NULL) pthread_cond_wait(&jobs_cv, &jobs_mu);
        j->state = JOB_RUNNING;
        int fd = j->fd;
        char *addr = j->addr;
        int64_t from = j->from, len = j->to - j->from;
        pthread_mutex_unlock(&jobs_mu);
        struct statvfs fs;
        int ok = fstatvfs(fd, &fs) == 0 && (int64_t)fs.f_bavail * (int64_t)fs.f_frsize >= 8 * len &&
                 posix_fallocate(fd, from, len) == 0;
        if (ok) (void)madvise(addr, (size_t)len, MADV_POPULATE_WRITE_OR_NONE);
        pthread_mutex_lock(&jobs_mu);
        j->fd = -1;  /* first: a fork's child never closes a number reused meanwhile */
        close(fd);
        j->ok = ok;
        jobs_done += ok;
        j->state = JOB_DONE;
        pthread_cond_broadcast(&jobs_cv);
    }
    return NULL;
}

static void reserver_after_fork(void) {  /* the child: no reserver thread, no jobs */
    fresh_sync(&jobs_mu, &jobs_cv);
    reserver_started = 0;
    jobs_posted = jobs_done = jobs_used = 0;
    for (int i = 0; i < JOBS; i++) {
        if (jobs[i].fd >= 0) close(jobs[i].fd);  /* the child's copy of a job's descriptor */
        jobs[i] = (Job){.fd = -1};
    }
}

/* Ask the reserver for bytes [from, to) of c's segment: in a free job, or in place of one
 * done and never claimed (a hint only); nothing if every job is posted or running. */
void reserve_ahead(Core *c, int64_t from, int64_t to) {
    pthread_mutex_lock(&jobs_mu);
    Job *j = NULL;
    for (int i = 0; i < JOBS && j == NULL; i++)
        if (jobs[i].state == JOB_IDLE) j = &jobs[i];
    for (int i = 0; i < JOBS && j == NULL; i++)
        if (jobs[i].state == JOB_DONE) j = &jobs[i];
    if (j == NULL || from >= to) goto out;
    if (!reserver_started) {
        if (start_thread(reserver_main) != 0) goto out;
        reserver_started = 1;
    }
    int fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0);  /* the reserver's own, never inherited by an exec */
    if (fd < 0) goto out;
    *j = (Job){JOB_POSTED, 0, c, fd, c->base + from, from, to};
    jobs_posted++;
    pthread_cond_broadcast(&jobs_cv);
out:
    pthread_mutex_unlock(&jobs_mu);
}

/* Did the reserver get all of [from, to) of c's segment? Each of c's jobs that meets the
 * range is settled first: waited for if running, cancelled if not started (the caller then
 * does that work itself), and let go once done. */
int reserved_ahead(Core *c, int64_t from, int64_t to) {
    int got = 0;
    pthread_mutex_lock(&jobs_mu);
    for (int i = 0; i < JOBS; i++) {
        Job *j = &jobs[i];
        if (j->owner != c || j->state == JOB_IDLE) continue;
        if (!(from == 0 && to == 0) && (j->to <= from || to <= j->from)) continue;  /* (0, 0): all */
        if (j->state == JOB_POSTED) {
            close(j->fd);
            j->fd = -1;
            j->state = JOB_IDLE;
        }
        while (j->state == JOB_RUNNING) pthread_cond_wait(&jobs_cv, &jobs_mu);
        if (j->state == JOB_DONE) {
            if (j->ok && j->from <= from && to <= j->to) got = 1;
            j->state = JOB_IDLE;
        }
        j->owner = NULL;
    }
    jobs_used += got;
    pthread_mutex_unlock(&jobs_mu);
    return got;
}

/* Before c's mapping may go: no job of c's is left posted, running or done. */
void reserver_forget(Core *c) { (void)reserved_ahead(c, 0, 0); }

/* This process's reserver so far (tests and benchmarks): jobs posted, done, used. */
PyObject *reserver_counts_dict(void) {
    pthread_mutex_lock(&jobs_mu);
    PyObject *v = Py_BuildValue("{sLsLsL}", "posted", jobs_posted, "done", jobs_done, "used", jobs_used);
    pthread_mutex_unlock(&jobs_mu);
    return v;
}
