/* batchsort.c -- the order a batch of putdups is applied in (bs_ prefix):
 * an LSD radix sort on the first 8 key bytes, then a merge sort of each run
 * of equal prefixes by the whole key.  Apart from records.c because it is
 * a pure function of the keys -- no casket, no tree -- and so is tested
 * alone, against a reference sort (test_batchsort.c). */
#include "batchsort.h"
#include "qstore.h"
#include <stdlib.h>
#include <string.h>

static int cmp_full(const uint8_t *keys, const uint64_t *koff, const bs_ent *x, const bs_ent *y)
{
    size_t xl = koff[x->idx + 1] - koff[x->idx], yl = koff[y->idx + 1] - koff[y->idx];
    size_t n = xl < yl ? xl : yl;
    int r = n ? memcmp(keys + koff[x->idx], keys + koff[y->idx], n) : 0;
    if (r == 0 && xl != yl)
        r = xl < yl ? -1 : 1;
    if (r == 0)
        r = x->idx < y->idx ? -1 : x->idx > y->idx;
    return r;
}

static void merge_sort(const uint8_t *keys, const uint64_t *koff, bs_ent *v, bs_ent *tmp,
                       size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(keys, koff, v, tmp, h);
    merge_sort(keys, koff, v + h, tmp, n - h);
    if (cmp_full(keys, koff, &v[h - 1], &v[h]) <= 0)
        return;
    memcpy(tmp, v, n * sizeof *v);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        v[k++] = cmp_full(keys, koff, &tmp[i], &tmp[j]) <= 0 ? tmp[i++] : tmp[j++];
    while (i < h)
        v[k++] = tmp[i++];
    while (j < n)
        v[k++] = tmp[j++];
}

int bs_sort(size_t n, const uint8_t *keys, const uint64_t *koff, bs_ent **out)
{
    bs_ent *v = malloc(n * sizeof *v), *tmp = malloc(n * sizeof *tmp);
    size_t *count = calloc(65536, sizeof *count);
    if (!v || !tmp || !count) {
        free(v);
        free(tmp);
        free(count);
        return QS_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const uint8_t *k = keys + koff[i];
        size_t kl = koff[i + 1] - koff[i];
        uint64_t p = 0;
        for (size_t b = 0; b < 8; b++)
            p = (p << 8) | (b < kl ? k[b] : 0);
        v[i].prefix = p;
        v[i].idx = (uint32_t)i;
    }
    /* LSD radix sort on the prefix, 16 bits a pass (stable). */
    for (int shift = 0; shift < 64; shift += 16) {
        memset(count, 0, 65536 * sizeof *count);
        for (size_t i = 0; i < n; i++)
            count[(v[i].prefix >> shift) & 0xffff]++;
        if (count[(v[0].prefix >> shift) & 0xffff] == n)
            continue;
        size_t sum = 0;
        for (size_t d = 0; d < 65536; d++) {
            size_t t = count[d];
            count[d] = sum;
            sum += t;
        }
        for (size_t i = 0; i < n; i++)
            tmp[count[(v[i].prefix >> shift) & 0xffff]++] = v[i];
        bs_ent *sw = v;
        v = tmp;
        tmp = sw;
    }
    /* Equal prefixes: order by the whole key (runs are usually sorted). */
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && v[j].prefix == v[i].prefix)
            j++;
        if (j - i > 1)
            merge_sort(keys, koff, v + i, tmp, j - i);
        i = j;
    }
    free(tmp);
    free(count);
    *out = v;
    return 0;
}
