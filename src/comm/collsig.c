/* Collective signatures: every public collective call is summarised in 64
 * bits, which its messages carry in the frame header (transport/frame.h) and
 * its shared-memory rounds next to their READY flag (transport/shm_arena.h), so
 * that a receiver notices at once, and always, when the sender is in another
 * call (docs/failures.md):
 *
 *   bits 56..63  kind (1 barrier ... 10 allreduce_half; 0: no signature)
 *   bits 52..55  reduction op + 1 (0: none)
 *   bits 48..51  dtype + 1 (0: none)
 *   bits 32..47  root + 1, low 16 bits (0: none)
 *   bits  0..31  count xor (count >> 32), low 32 bits
 *
 * Kind, op and dtype are exact; the count is exact below 2^32 elements and
 * the root below 65535, which is what a report can name; a difference in
 * the higher bits alone still changes the folded count or root almost
 * always. */
#include <stdio.h>
#include <string.h>

#include "comm/coll.h"

static const char *const kinds[] = {NULL,      "barrier", "broadcast", "reduce",   "allreduce",     "reduce_scatter",
                                    "allgather", "gather",  "scatter",   "alltoall", "allreduce_half"};
enum { NKINDS = sizeof kinds / sizeof kinds[0] };

uint64_t dt__coll_sig(const char *op, size_t count, dt_dtype t, int redop, int root)
{
    uint64_t kind = 0;
    for (int i = 1; i < NKINDS && !kind; i++)
        if (!strcmp(op, kinds[i]))
            kind = (uint64_t)i;
    if (!kind)
        return 0;
    uint64_t n = (uint64_t)count;
    return kind << 56 | (uint64_t)((redop + 1) & 0xf) << 52 | (uint64_t)(((int)t + 1) & 0xf) << 48 |
           (uint64_t)((root + 1) & 0xffff) << 32 | (uint32_t)(n ^ (n >> 32));
}

void dt__coll_sig_name(uint64_t sig, char *buf, size_t len)
{
    unsigned kind = (unsigned)(sig >> 56);
    int redop = (int)((sig >> 52) & 0xf) - 1, dtype = (int)((sig >> 48) & 0xf) - 1;
    int root = (int)((sig >> 32) & 0xffff) - 1;
    unsigned long long count = (uint32_t)sig;
    if (kind == 0 || kind >= NKINDS) {
        snprintf(buf, len, "an unknown collective (signature %016llx)", (unsigned long long)sig);
        return;
    }
    if (kind == 1) {
        snprintf(buf, len, "barrier()");
        return;
    }
    const char *dt = dtype >= 0 ? dt_dtype_name((dt_dtype)dtype) : NULL;
    const char *op = redop >= 0 ? dt_redop_name((dt_redop)redop) : NULL;
    int n = snprintf(buf, len, "%s(%llu x %s", kinds[kind], count, dt ? dt : "?");
    if (redop >= 0 && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, ", %s", op ? op : "?");
    if (root >= 0 && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, ", root %d", root);
    if (n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ")");
}
