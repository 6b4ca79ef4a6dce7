/* JSON text parsed whole.  cJSON_Parse stops at the end of the first value
 * and ignores what follows, so "10,000" reads as 10 and a config file with
 * junk after its closing brace as the object before it; every reader of a
 * user's text (configs, --set values, checkpoints' headers and manifests,
 * traces, rank tables, hardware files, logs) goes through this instead,
 * which allows only whitespace after the value. */
#ifndef DT_BASE_JSON_H
#define DT_BASE_JSON_H

#include <cjson/cJSON.h>

/* The value text holds, or NULL (cJSON_GetErrorPtr() then points at the
 * first byte that is not part of it: the bad byte, or the junk after it). */
static inline cJSON *dt__json_parse(const char *text)
{
    return text ? cJSON_ParseWithOpts(text, NULL, 1) : NULL;
}

#endif
