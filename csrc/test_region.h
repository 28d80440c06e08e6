/* test_region.h -- for the C tests that drive a region NAME-shm directly
 * (test_shm.c, test_qres.c): its path and a fresh one to attach to. */
#ifndef TEST_REGION_H
#define TEST_REGION_H
#include "test_common.h"
#include "shm.h"

static char tc_region_path[700];

/* Creates the region at tc_region_path, alone, as a casket's first opener
 * would, and lets others in: 0, or -1 (reported; nothing left open). */
static inline int tc_region_init(sh_region *r)
{
    int alone = 0, rc = sh_open(r, tc_region_path, 0644, 1.0, &alone);
    if (rc != 0 || !alone) {
        printf("  tc_region_init(%s): %s, alone %d\n", tc_region_path, qs_strerror(rc), alone);
        if (rc == 0)
            sh_close(r);
        return -1;
    }
    sh_commit cm = {.salt = 7, .log_end = 4096, .seq = 1};
    sh_init(r, &cm, 1);
    if ((rc = sh_share(r)) != 0) {
        printf("  sh_share: %s\n", qs_strerror(rc));
        sh_close(r);
        return -1;
    }
    return 0;
}

/* Attaches to the region at tc_region_path that another handle made (for a
 * child): 0, or -1 (nothing left open). */
static inline int tc_region_attach(sh_region *r)
{
    int alone = 0;
    if (sh_open(r, tc_region_path, 0644, 2.0, &alone) != 0)
        return -1;
    if (alone) {
        sh_close(r);
        return -1;
    }
    return 0;
}

#endif
