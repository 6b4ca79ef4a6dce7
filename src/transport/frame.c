#include "transport/frame.h"

#include <string.h>

#include "base/hash.h"
#include "base/status.h"
#include "transport/socket.h"

/* FNV-1a over the header's first bytes, the two halves xor-folded. */
static uint16_t header_check(const uint8_t *p)
{
    uint32_t h = dt__fnv1a32(DT_FNV32_SEED, p, DT_FRAME_HDR - 2);
    return (uint16_t)(h ^ (h >> 16));
}

static void put_u48(uint8_t *p, uint64_t v)
{
    dt__put_u32(p, (uint32_t)v);
    dt__put_u16(p + 4, (uint16_t)(v >> 32));
}

static uint64_t get_u48(const uint8_t *p) { return dt__get_u32(p) | (uint64_t)dt__get_u16(p + 4) << 32; }

void dt__frame_encode(const dt__frame *f, uint8_t out[DT_FRAME_HDR])
{
    memcpy(out, "DT", 2);
    out[2] = DT_FRAME_VERSION;
    out[3] = f->type;
    dt__put_u32(out + 4, f->comm_id);
    dt__put_u32(out + 8, (uint32_t)f->tag);
    dt__put_u32(out + 12, (uint32_t)f->seq);
    put_u48(out + 16, f->len); /* lengths above 2^48 cannot pass the limit check: callers keep to it */
    dt__put_u64(out + 22, f->sig);
    dt__put_u16(out + 30, header_check(out));
}

dt_status dt__frame_decode(const uint8_t in[DT_FRAME_HDR], dt__frame *f)
{
    if (memcmp(in, "DT", 2) != 0)
        return dt__fail(DT_ERR_PROTOCOL, "bad magic %02x%02x", in[0], in[1]);
    if (in[2] != DT_FRAME_VERSION)
        return dt__fail(DT_ERR_PROTOCOL, "frame version %d, expected %d", in[2], DT_FRAME_VERSION);
    if (dt__get_u16(in + 30) != header_check(in))
        return dt__fail(DT_ERR_PROTOCOL, "header checksum mismatch");
    f->type = in[3];
    f->comm_id = dt__get_u32(in + 4);
    f->tag = (int32_t)dt__get_u32(in + 8);
    f->seq = dt__get_u32(in + 12);
    f->len = get_u48(in + 16);
    f->sig = dt__get_u64(in + 22);
    if (f->type < DT_FRAME_DATA || f->type > DT_FRAME_ACK)
        return dt__fail(DT_ERR_PROTOCOL, "unknown frame type %d", f->type);
    uint64_t max = f->type == DT_FRAME_DATA || f->type == DT_FRAME_DATA_REF ? DT_FRAME_MAX_PAYLOAD
                   : f->type == DT_FRAME_ABORT ? DT_FRAME_MAX_CONTROL : 0;
    if (f->len > max)
        return dt__fail(DT_ERR_PROTOCOL, "payload length %llu exceeds the limit %llu for frame type %d",
                        (unsigned long long)f->len, (unsigned long long)max, f->type);
    return DT_OK;
}
