#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "nn/row_set.h"

dt_status dt__row_set_init(dt__row_set *s, int64_t rows)
{
    memset(s, 0, sizeof *s);
    s->rows = rows;
    s->sorted = true;
    if (!(s->bits = calloc((size_t)((rows + 63) / 64), sizeof *s->bits)))
        return dt__fail(DT_ERR_NOMEM, "out of memory for the touched-row bits of %lld rows", (long long)rows);
    return DT_OK;
}

dt_status dt__row_set_add(dt__row_set *s, const int64_t *rows, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t r = rows[i];
        uint64_t bit = 1ull << (r & 63);
        if (s->bits[r >> 6] & bit)
            continue;
        if (s->n == s->cap) {
            int64_t cap = s->cap ? 2 * s->cap : 1024;
            int64_t *grown = realloc(s->ids, (size_t)cap * sizeof *grown);
            if (!grown)
                return dt__fail(DT_ERR_NOMEM, "out of memory recording touched rows");
            s->ids = grown;
            s->cap = cap;
        }
        s->bits[r >> 6] |= bit;
        s->sorted = s->sorted && (s->n == 0 || s->ids[s->n - 1] < r);
        s->ids[s->n++] = r;
    }
    return DT_OK;
}

/* LSD radix sort, 11 bits a pass over the bits rows needs (two passes for
 * 2^20 rows): a step's few thousand ids in a few microseconds. */
dt_status dt__row_set_sort(dt__row_set *s)
{
    if (s->sorted)
        return DT_OK;
    int64_t *tmp = malloc((size_t)s->n * sizeof *tmp), *from = s->ids, *to = tmp;
    if (!tmp)
        return dt__fail(DT_ERR_NOMEM, "out of memory sorting touched rows");
    int bits = 1;
    while (bits < 63 && (s->rows - 1) >> bits)
        bits++;
    for (int shift = 0; shift < bits; shift += 11) {
        int64_t count[2048 + 1] = {0};
        for (int64_t i = 0; i < s->n; i++)
            count[((from[i] >> shift) & 2047) + 1]++;
        for (int d = 0; d < 2048; d++)
            count[d + 1] += count[d];
        for (int64_t i = 0; i < s->n; i++)
            to[count[(from[i] >> shift) & 2047]++] = from[i];
        int64_t *t = from;
        from = to;
        to = t;
    }
    if (from != s->ids)
        memcpy(s->ids, from, (size_t)s->n * sizeof *s->ids);
    free(tmp);
    s->sorted = true;
    return DT_OK;
}

void dt__row_set_clear(dt__row_set *s)
{
    if (s->all)
        memset(s->bits, 0, (size_t)((s->rows + 63) / 64) * sizeof *s->bits);
    else
        for (int64_t i = 0; i < s->n; i++)
            s->bits[s->ids[i] >> 6] = 0; /* the word: every bit set in it is a recorded row */
    s->n = 0;
    s->sorted = true;
    s->all = false;
}

void dt__row_set_free(dt__row_set *s)
{
    free(s->bits);
    free(s->ids);
    memset(s, 0, sizeof *s);
}
