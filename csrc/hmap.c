/* hmap.c -- linear probing with backward-shift deletion (no tombstones, so
 * long-lived maps with heavy churn -- the page cache -- do not degrade). */
#include "hmap.h"
#include <stdlib.h>
#include <string.h>

static inline size_t slot_of(uint32_t key, size_t cap)
{
    uint32_t h = key * 2654435761u;
    h ^= h >> 15;
    return (size_t)h & (cap - 1);
}

int hm_get(const hm_map *m, uint32_t key, uint64_t *val)
{
    if (m->cap == 0)
        return 0;
    size_t mask = m->cap - 1, i = slot_of(key, m->cap);
    for (;;) {
        uint32_t k = m->keys[i];
        if (k == 0)
            return 0;
        if (k == key + 1) {
            *val = m->vals[i];
            return 1;
        }
        i = (i + 1) & mask;
    }
}

static void raw_insert(uint32_t *keys, uint64_t *vals, size_t cap, uint32_t k1, uint64_t v)
{
    size_t mask = cap - 1, i = slot_of(k1 - 1, cap);
    while (keys[i] != 0)
        i = (i + 1) & mask;
    keys[i] = k1;
    vals[i] = v;
}

static int grow(hm_map *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 64;
    uint32_t *nk = calloc(ncap, sizeof *nk);
    uint64_t *nv = malloc(ncap * sizeof *nv);
    if (!nk || !nv) {
        free(nk);
        free(nv);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i])
            raw_insert(nk, nv, ncap, m->keys[i], m->vals[i]);
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = ncap;
    return 0;
}

int hm_reserve(hm_map *m, size_t more)
{
    while ((m->len + more) * 4 > m->cap * 3)
        if (grow(m) != 0)
            return -1;
    return 0;
}

int hm_put(hm_map *m, uint32_t key, uint64_t val)
{
    if (m->cap) {
        size_t mask = m->cap - 1, i = slot_of(key, m->cap);
        for (;;) {
            uint32_t k = m->keys[i];
            if (k == 0)
                break;
            if (k == key + 1) {
                m->vals[i] = val;
                return 0;
            }
            i = (i + 1) & mask;
        }
    }
    if ((m->len + 1) * 4 > m->cap * 3 && grow(m) != 0)
        return -1;
    raw_insert(m->keys, m->vals, m->cap, key + 1, val);
    m->len++;
    return 0;
}

int hm_del(hm_map *m, uint32_t key)
{
    if (m->cap == 0)
        return 0;
    size_t mask = m->cap - 1, i = slot_of(key, m->cap);
    for (;;) {
        uint32_t k = m->keys[i];
        if (k == 0)
            return 0;
        if (k == key + 1)
            break;
        i = (i + 1) & mask;
    }
    /* Backward shift: pull later members of the probe run into the hole. */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & mask;
        uint32_t k = m->keys[j];
        if (k == 0)
            break;
        size_t home = slot_of(k - 1, m->cap);
        /* Move k into the hole when its home is not in (hole, j]. */
        int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            m->keys[hole] = k;
            m->vals[hole] = m->vals[j];
            hole = j;
        }
    }
    m->keys[hole] = 0;
    m->len--;
    return 1;
}

void hm_clear(hm_map *m)
{
    /* A table a big transaction grew would otherwise stay big, and every
     * later small commit walks the whole of it (hm_slot). */
    if (m->cap > 1024 && m->len * 16 < m->cap) {
        hm_free(m);
        return;
    }
    if (m->len)
        memset(m->keys, 0, m->cap * sizeof *m->keys);
    m->len = 0;
}

void hm_free(hm_map *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}
