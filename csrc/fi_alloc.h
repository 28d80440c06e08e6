/*
 * fi_alloc.h -- allocation failure injection for test_alloc.c.
 *
 * Not part of the library.  The Makefile compiles a second copy of the
 * library's objects with `-include fi_alloc.h` (into $(BUILD)/fi/) and links
 * only build/test_alloc against them: every malloc, calloc, realloc, strdup,
 * strndup (and posix_memalign, aligned_alloc, reallocarray, in case the
 * library starts using them) in the library then calls a counting wrapper
 * qs_fi_*() defined in test_alloc.c, which can make the Nth call fail.  free
 * stays libc's free.  The wrappers get the call site (__FILE__, __LINE__) so
 * the test can say which allocation it made fail.
 *
 * The system headers the library uses are included first, so that no
 * declaration in them is rewritten by the macros below.
 *
 * test_alloc.c itself includes this header with QS_FI_DECLARE_ONLY defined:
 * it gets the prototypes, not the renaming.
 */
#ifndef QS_FI_ALLOC_H
#define QS_FI_ALLOC_H

#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

void *qs_fi_malloc(size_t n, const char *file, int line);
void *qs_fi_calloc(size_t n, size_t size, const char *file, int line);
void *qs_fi_realloc(void *p, size_t n, const char *file, int line);
void *qs_fi_reallocarray(void *p, size_t n, size_t size, const char *file, int line);
char *qs_fi_strdup(const char *s, const char *file, int line);
char *qs_fi_strndup(const char *s, size_t n, const char *file, int line);
int qs_fi_posix_memalign(void **p, size_t align, size_t n, const char *file, int line);
void *qs_fi_aligned_alloc(size_t align, size_t n, const char *file, int line);

#ifndef QS_FI_DECLARE_ONLY
#undef malloc
#undef calloc
#undef realloc
#undef reallocarray
#undef strdup
#undef strndup
#undef posix_memalign
#undef aligned_alloc
#define malloc(n) qs_fi_malloc((n), __FILE__, __LINE__)
#define calloc(n, size) qs_fi_calloc((n), (size), __FILE__, __LINE__)
#define realloc(p, n) qs_fi_realloc((p), (n), __FILE__, __LINE__)
#define reallocarray(p, n, size) qs_fi_reallocarray((p), (n), (size), __FILE__, __LINE__)
#define strdup(s) qs_fi_strdup((s), __FILE__, __LINE__)
#define strndup(s, n) qs_fi_strndup((s), (n), __FILE__, __LINE__)
#define posix_memalign(p, align, n) qs_fi_posix_memalign((p), (align), (n), __FILE__, __LINE__)
#define aligned_alloc(align, n) qs_fi_aligned_alloc((align), (n), __FILE__, __LINE__)
#endif

#endif /* QS_FI_ALLOC_H */
