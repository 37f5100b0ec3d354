/* A preloaded shim for scripts/checks.d/50-sanitizers.sh (never part of the package): it writes
 * each UndefinedBehaviorSanitizer report to a file of its own, SHMWIN_UBSAN_REPORTS/ubsan.PID.
 *
 * Why: the sanitizer run's core is built with ASan and UBSan at once, and every Python process
 * preloads gcc's libasan. libasan then owns the report path (__sanitizer_set_report_path), so
 * UBSAN_OPTIONS=log_path is ignored and a UBSan report goes to stderr only -- where a test that
 * reads its child's output, or a child whose stderr nobody reads, would lose it. libubsan calls
 * the weak __ubsan_on_report() on every report; a preloaded definition comes first in the
 * lookup, so this one is called, and the job fails on any file it leaves (as on ASan's). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void __ubsan_get_current_report_data(const char **kind, const char **message, const char **file,
                                     unsigned *line, unsigned *column, char **address);
void __ubsan_on_report(void);

void __ubsan_on_report(void) {
    const char *kind = "?", *message = "?", *file = "?";
    unsigned line = 0, column = 0;
    char *address = NULL;
    char path[4096];
    const char *dir = getenv("SHMWIN_UBSAN_REPORTS");
    FILE *out;

    if (dir == NULL) return;
    __ubsan_get_current_report_data(&kind, &message, &file, &line, &column, &address);
    snprintf(path, sizeof path, "%s/ubsan.%d", dir, (int)getpid());
    out = fopen(path, "a");
    if (out == NULL) return;
    fprintf(out, "%s:%u:%u: runtime error (%s): %s\n", file, line, column, kind, message);
    fclose(out);
}
