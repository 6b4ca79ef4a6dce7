#include "base/boot_id.h"

#include <stdio.h>
#include <string.h>

void dt__boot_id(char *out, size_t len)
{
    if (!out || !len)
        return;
    out[0] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f)
        return;
    if (!fgets(out, (int)len, f))
        out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}
