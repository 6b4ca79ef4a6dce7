#include "transport/frame.h"

#include <string.h>

#include "base/status.h"
#include "transport/socket.h"

static uint32_t fnv1a(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

void dt__frame_encode(const dt__frame *f, uint8_t out[DT_FRAME_HDR])
{
    memcpy(out, "DTRN", 4);
    out[4] = DT_FRAME_VERSION;
    out[5] = f->type;
    dt__put_u16(out + 6, 0);
    dt__put_u32(out + 8, f->comm_id);
    dt__put_u32(out + 12, (uint32_t)f->tag);
    dt__put_u64(out + 16, f->seq);
    dt__put_u64(out + 24, f->len);
    dt__put_u32(out + 32, f->src);
    dt__put_u32(out + 36, fnv1a(out, 36));
}

dt_status dt__frame_decode(const uint8_t in[DT_FRAME_HDR], uint32_t world_size, dt__frame *f)
{
    if (memcmp(in, "DTRN", 4) != 0)
        return dt__fail(DT_ERR_PROTOCOL, "bad magic %02x%02x%02x%02x", in[0], in[1], in[2], in[3]);
    if (in[4] != DT_FRAME_VERSION)
        return dt__fail(DT_ERR_PROTOCOL, "frame version %d, expected %d", in[4], DT_FRAME_VERSION);
    if (dt__get_u32(in + 36) != fnv1a(in, 36))
        return dt__fail(DT_ERR_PROTOCOL, "header checksum mismatch");
    if (dt__get_u16(in + 6) != 0)
        return dt__fail(DT_ERR_PROTOCOL, "unknown flags 0x%x", dt__get_u16(in + 6));
    f->type = in[5];
    f->comm_id = dt__get_u32(in + 8);
    f->tag = (int32_t)dt__get_u32(in + 12);
    f->seq = dt__get_u64(in + 16);
    f->len = dt__get_u64(in + 24);
    f->src = dt__get_u32(in + 32);
    if (f->type < DT_FRAME_DATA || f->type > DT_FRAME_ACK)
        return dt__fail(DT_ERR_PROTOCOL, "unknown frame type %d", f->type);
    if (f->src >= world_size)
        return dt__fail(DT_ERR_PROTOCOL, "sender rank %u outside the world of %u", f->src, world_size);
    uint64_t max = f->type == DT_FRAME_DATA || f->type == DT_FRAME_DATA_REF ? DT_FRAME_MAX_PAYLOAD
                   : f->type == DT_FRAME_ABORT ? DT_FRAME_MAX_CONTROL : 0;
    if (f->len > max)
        return dt__fail(DT_ERR_PROTOCOL, "payload length %llu exceeds the limit %llu for frame type %d",
                        (unsigned long long)f->len, (unsigned long long)max, f->type);
    return DT_OK;
}
