/* hmap.h -- open-addressing hash map from uint32 keys to uint64 values
 * (hm_ prefix).  Used for page number -> buffer pointer and page number ->
 * log offset.  Not thread-safe: the caller serializes access. */
#ifndef QS_HMAP_H
#define QS_HMAP_H
#include <stddef.h>
#include <stdint.h>

typedef struct hm_map {
    uint32_t *keys;     /* key + 1; 0 marks an empty slot */
    uint64_t *vals;
    size_t cap;         /* power of two, or 0 before first insert */
    size_t len;
} hm_map;

/* An empty map needs no allocation: zero-initialize it. */

/* Looks key up: returns 1 and sets *val when present, else 0. */
int hm_get(const hm_map *m, uint32_t key, uint64_t *val);

/* Inserts or replaces.  Returns 0, or -1 when growing the table failed
 * (the map is then unchanged). */
int hm_put(hm_map *m, uint32_t key, uint64_t val);

/* Makes room for `more` new keys, so that many hm_put calls cannot fail.
 * Returns 0, or -1 when growing failed (the map is then unchanged). */
int hm_reserve(hm_map *m, size_t more);

/* Removes key; returns 1 when it was present, else 0. */
int hm_del(hm_map *m, uint32_t key);

/* Removes everything.  Keeps the table's memory unless the table is much
 * larger than what it held (then it is freed, and regrown on demand). */
void hm_clear(hm_map *m);

/* Releases the table; the map is empty and reusable afterwards. */
void hm_free(hm_map *m);

/* Iteration: slot indexes 0..cap-1; hm_slot returns 1 and fills key/val for
 * an occupied slot.  Do not insert while iterating (deleting the current
 * slot may move a later entry into it: re-examine the same index). */
static inline int hm_slot(const hm_map *m, size_t i, uint32_t *key, uint64_t *val)
{
    if (i >= m->cap || m->keys[i] == 0)
        return 0;
    *key = m->keys[i] - 1;
    *val = m->vals[i];
    return 1;
}

#endif
