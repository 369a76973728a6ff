/*
 * check.h - the unit tests' one assertion: prints the failed condition with file:line and
 * counts it; a test's main returns check_verdict(), so its exit code is its verdict.
 */
#ifndef HVDC_TEST_CHECK_H
#define HVDC_TEST_CHECK_H

#include <stdio.h>

static int check_failures = 0;
static int check_count = 0;

#define CHECK_TRUE(cond, ...)                                                                \
    do {                                                                                     \
        check_count++;                                                                       \
        if (!(cond)) {                                                                       \
            check_failures++;                                                                \
            fprintf(stderr, "%s:%d: FAILED %s: ", __FILE__, __LINE__, #cond);                \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, "\n");                                                           \
        }                                                                                    \
    } while (0)

static inline int check_verdict(const char *name) {
    printf("%s: %d checks, %d failed: %s\n", name, check_count, check_failures,
           check_failures ? "FAIL" : "OK");
    return check_failures ? 1 : 0;
}

#endif
