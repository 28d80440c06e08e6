/*
 * leak_seed.c -- seed 001's leaking C program, kept as it was written, for
 * the leak harness's negative control (make leak-control): the harness's
 * round loop stands in for the seed's `while(1) leak();`, bounded by -n.
 * Built with -fno-builtin-malloc: the compiler would otherwise drop a
 * malloc whose result is never used, and there would be nothing to catch
 * (and without sibling calls, so that valgrind's stack names leak()).
 * Never linked into the library or the real harness.
 */
#include <stdlib.h>

void leak(void);

void leak(void)
{
    void *m;
    m = malloc(1);
    (void)m;
    return;
}
