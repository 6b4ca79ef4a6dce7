/* The tools' reader of a user's JSON text (configs, --set values, trace,
 * log and rank-table files): the whole text must be one value, only
 * whitespace after it.  cJSON_Parse alone stops at the end of the first
 * value, so "10,000" would read as 10 and a config with junk after its
 * closing brace as the object before it.  (The library's readers use
 * src/base/json.h, the same call: the tools see only include/.) */
#ifndef DT_TOOLS_JSON_WHOLE_H
#define DT_TOOLS_JSON_WHOLE_H

#include <cjson/cJSON.h>

/* The value, or NULL (cJSON_GetErrorPtr() then points at the first byte
 * that is not part of it: the bad byte, or the junk after the value). */
static inline cJSON *dt_json_parse_whole(const char *text)
{
    return text ? cJSON_ParseWithOpts(text, NULL, 1) : NULL;
}

#endif
