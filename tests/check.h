/* Minimal assertion helpers for the C unit tests: every failed check prints
 * both values and the location; main returns non-zero if any failed. */
#ifndef DT_TESTS_CHECK_H
#define DT_TESTS_CHECK_H

#include <stdio.h>

static int check_failures, check_count;

#define EXPECT(cond)                                                                     \
    do {                                                                                 \
        check_count++;                                                                   \
        if (!(cond)) {                                                                   \
            check_failures++;                                                            \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);          \
        }                                                                                \
    } while (0)

#define EXPECT_EQ(got, want)                                                             \
    do {                                                                                 \
        long long g_ = (long long)(got), w_ = (long long)(want);                         \
        check_count++;                                                                   \
        if (g_ != w_) {                                                                  \
            check_failures++;                                                            \
            fprintf(stderr, "%s:%d: %s is %lld, expected %lld\n", __FILE__, __LINE__,    \
                    #got, g_, w_);                                                       \
        }                                                                                \
    } while (0)

#define EXPECT_STATUS(got, want)                                                         \
    do {                                                                                 \
        dt_status g_ = (got);                                                            \
        check_count++;                                                                   \
        if (g_ != (want)) {                                                              \
            check_failures++;                                                            \
            fprintf(stderr, "%s:%d: %s returned %s (%s), expected %s\n", __FILE__,       \
                    __LINE__, #got, dt_status_name(g_), dt_last_error(),                 \
                    dt_status_name(want));                                               \
        }                                                                                \
    } while (0)

#define EXPECT_CONTAINS(text, part)                                                      \
    do {                                                                                 \
        check_count++;                                                                   \
        if (!strstr((text), (part))) {                                                   \
            check_failures++;                                                            \
            fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__,         \
                    __LINE__, (text), (part));                                           \
        }                                                                                \
    } while (0)

#define CHECK_DONE(name)                                                                 \
    (printf("%s: %d checks, %d failed\n", (name), check_count, check_failures),          \
     check_failures ? 1 : 0)

#endif
