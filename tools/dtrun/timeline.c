/* dtrun --timeline FILE: each rank writes FILE.rank<R>.json (src/base/trace.c:
 * one event a line, each line of an event starting with {"ph"); here they
 * become one Chrome trace, one process per rank.  A rank writes its file as
 * it goes (each time a thread's buffer fills a chunk of events), so a rank
 * that was killed still gives all but its last events: dtrun names those
 * ranks, and those without a file. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrun.h"

/* Copy the event lines of one rank's file; returns whether it was complete
 * (its footer line, written when the rank stopped tracing, is there). */
static bool copy_events(FILE *in, FILE *out, long *total)
{
    bool complete = false;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, in)) > 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
            line[--len] = '\0';
        if (len > 0 && line[len - 1] == ',')
            line[--len] = '\0';
        complete = complete || strncmp(line, "],\"displayTimeUnit\"", 19) == 0;
        if (strncmp(line, "{\"ph\"", 5) != 0 || line[len - 1] != '}')
            continue; /* the header, the footer, or a line cut short */
        fprintf(out, "%s%s", *total ? ",\n" : "", line);
        (*total)++;
    }
    free(line);
    return complete;
}

int dtrun_timeline_merge(const char *prefix, const char *file, int first, int n)
{
    if (first < 0 || n <= 0)
        return 0;
    char tmp[4200], path[4200], missing[512] = "", cut[512] = "";
    size_t used = 0, used_cut = 0;
    snprintf(tmp, sizeof tmp, "%s.tmp%d", file, (int)getpid());
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fprintf(stderr, "dtrun: --timeline: cannot write %s\n", tmp);
        return 1;
    }
    fprintf(out, "{\"traceEvents\":[\n");
    long total = 0;
    int ranks = 0;
    for (int r = first; r < first + n; r++) {
        snprintf(path, sizeof path, "%s.rank%d.json", prefix, r);
        FILE *in = fopen(path, "r");
        if (!in) {
            if (used < sizeof missing)
                used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d", used ? ", " : "", r);
            continue;
        }
        if (!copy_events(in, out, &total) && used_cut < sizeof cut)
            used_cut += (size_t)snprintf(cut + used_cut, sizeof cut - used_cut, "%s%d", used_cut ? ", " : "", r);
        fclose(in);
        unlink(path);
        ranks++;
    }
    fprintf(out, "\n],\"displayTimeUnit\":\"ms\"}\n");
    if (fclose(out) != 0 || rename(tmp, file) != 0) {
        fprintf(stderr, "dtrun: --timeline: cannot write %s\n", file);
        unlink(tmp);
        return 1;
    }
    fprintf(stderr, "dtrun: timeline of %d rank%s (%ld events) in %s: open it in https://ui.perfetto.dev or "
            "chrome://tracing%s%s%s%s%s%s\n",
            ranks, ranks == 1 ? "" : "s", total, file, missing[0] ? (strchr(missing, ',') ? "; no timeline from ranks " : "; no timeline from rank ") : "", missing,
            missing[0] ? " (it ended before writing any)" : "", cut[0] ? "; cut short (the rank did not exit normally; "
            "its last events are missing): rank(s) " : "", cut, cut[0] ? "" : "");
    return 0;
}
