/* CRC-32 (the gzip/zlib polynomial, reflected) of checkpoint bytes.  ISA-L's
 * crc32_gzip_refl (Debian's libisal-dev) gives zlib's values about 6x faster
 * (37 MiB: 1.6 ms against 9.5 ms on a Xeon, bench/RESULTS.md), which matters
 * for a memory snapshot every step; zlib computes it where ISA-L is absent. */
#include <zlib.h>

#include "ckpt/ckpt_internal.h"

#ifdef DT_HAVE_ISAL
#include <isa-l/crc.h>
#endif

uint32_t dt__crc32_zlib(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    uLong c = crc;
    while (len > 0) { /* crc32_z takes size_t, but older zlib builds cap uInt: chunks are safe everywhere */
        uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;
        c = crc32(c, p, n);
        p += n;
        len -= n;
    }
    return (uint32_t)c;
}

bool dt__crc32_isal(uint32_t crc, const void *data, size_t len, uint32_t *out)
{
#ifdef DT_HAVE_ISAL
    *out = crc32_gzip_refl(crc, data, (uint64_t)len);
    return true;
#else
    (void)crc, (void)data, (void)len, (void)out;
    return false;
#endif
}

uint32_t dt__crc32(uint32_t crc, const void *data, size_t len)
{
    uint32_t fast;
    return dt__crc32_isal(crc, data, len, &fast) ? fast : dt__crc32_zlib(crc, data, len);
}

uint32_t dt__crc32_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b)
{
    return (uint32_t)crc32_combine(crc_a, crc_b, (z_off_t)len_b);
}

uint32_t dt__crc32_combine_gen(size_t len_b)
{
    return (uint32_t)crc32_combine_gen((z_off_t)len_b);
}

uint32_t dt__crc32_combine_op(uint32_t crc_a, uint32_t crc_b, uint32_t op)
{
    return (uint32_t)crc32_combine_op(crc_a, crc_b, op);
}
