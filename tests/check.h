/* A tiny test harness: each test program prints "PASS name" or
 * "FAIL name: why" per check, and exits non-zero if any failed. tests/run
 * counts the lines. */
#ifndef SS_CHECK_H
#define SS_CHECK_H
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failed;

#define CHECK(cond, name, ...) do {                                   \
        if (cond) { printf("PASS %s\n", name); }                      \
        else { printf("FAIL %s: ", name); printf(__VA_ARGS__);        \
               printf(" (%s:%d)\n", __FILE__, __LINE__); check_failed++; } \
        fflush(stdout);                                               \
    } while (0)

/* The largest |a[i] - b[i]|. */
static inline double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

#define CHECK_DONE() return check_failed ? 1 : 0
#endif
