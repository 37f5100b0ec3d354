/* memlat.c -- what one dependent miss costs on this machine: a pointer chase through a
 * buffer of `MiB` (argv[1]) in random order, one 64-byte line per step, so that every load
 * waits for the one before it (no prefetcher, no parallel misses). Prints ns per load.
 * bench_memory.py compiles and runs it beside its random-order hits: the hits are made of
 * such misses, and their lower bound on this machine is a count of them times this.
 *
 *     cc -O2 -o memlat benchmarks/memlat.c && ./memlat 64
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LINE_BYTES 64

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t next_random(uint64_t *state) {  /* xorshift64* */
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 2685821657736338717ULL;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 64;
    size_t lines = (mib << 20) / LINE_BYTES;
    char *buffer = aligned_alloc(LINE_BYTES, lines * LINE_BYTES);
    size_t *order = malloc(lines * sizeof(size_t));
    if (buffer == NULL || order == NULL || lines < 2) return 1;
    uint64_t state = 88172645463325252ULL;
    for (size_t i = 0; i < lines; i++) order[i] = i;
    for (size_t i = lines - 1; i > 0; i--) {  /* one cycle through every line, shuffled */
        size_t j = (size_t)(next_random(&state) % (i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < lines; i++)
        *(void **)(buffer + order[i] * LINE_BYTES) = buffer + order[(i + 1) % lines] * LINE_BYTES;
    void *p = buffer + order[0] * LINE_BYTES;
    size_t steps = lines < 4000000 ? 20000000 : 5 * lines;
    for (size_t i = 0; i < lines; i++) p = *(void **)p;  /* warm: pages faulted, TLB as it will be */
    double start = seconds();
    for (size_t i = 0; i < steps; i++) p = *(void **)p;
    double elapsed = seconds() - start;
    printf("%.1f\n", elapsed / (double)steps * 1e9 + (p == NULL ? 1 : 0));
    return 0;
}
