/* A layout as one JSON object of its keys, and back (dtrain/layout.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/layout/layout_internal.h"

dt_status dt_layout_from_json(dt_layout *l, const char *json)
{
    if (!l || !json)
        return dt__fail(DT_ERR_INVALID, "layout from JSON: %s is NULL", l ? "the text" : "the layout");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root)
        return dt__fail(DT_ERR_INVALID, "layout: not valid JSON (near byte %ld)", end ? (long)(end - json) : -1L);
    dt_status s = DT_OK;
    if (!cJSON_IsObject(root))
        s = dt__fail(DT_ERR_INVALID, "layout: the JSON must be an object of layout keys");
    dt_layout next = *l; /* all or nothing: l changes only when every key is good */
    for (const cJSON *it = root->child; s == DT_OK && it; it = it->next) {
        const dt__layout_key *k = dt__layout_find(it->string);
        if (!k) {
            s = dt__layout_unknown(it->string);
            break;
        }
        for (const cJSON *before = root->child; before != it; before = before->next)
            if (!strcmp(before->string, it->string)) {
                s = dt__fail(DT_ERR_INVALID, "key '%s' is given twice", it->string);
                break;
            }
        if (s == DT_OK)
            s = dt__layout_put(&next, k, it);
    }
    cJSON_Delete(root);
    if (s == DT_OK)
        *l = next;
    return s;
}

char *dt_layout_to_json(const dt_layout *l)
{
    size_t n;
    const dt__layout_key *t = dt__layout_table(&n);
    cJSON *j = cJSON_CreateObject();
    bool ok = j != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        const char *at = (const char *)l + t[i].off;
        char text[64];
        switch (t[i].kind) {
        case DT__LK_INT: ok = cJSON_AddNumberToObject(j, t[i].key, *(const int *)at) != NULL; break;
        case DT__LK_NUM: ok = cJSON_AddNumberToObject(j, t[i].key, *(const double *)at) != NULL; break;
        case DT__LK_BOOL: ok = cJSON_AddBoolToObject(j, t[i].key, *(const bool *)at) != NULL; break;
        case DT__LK_CHOICE:
            /* an enum outside its choices is written as its number, which
             * from_json refuses naming the key */
            if (dt_layout_get(l, t[i].key, text, sizeof text) == DT_OK)
                ok = cJSON_AddStringToObject(j, t[i].key, text) != NULL;
            else
                ok = cJSON_AddNumberToObject(j, t[i].key, *(const int *)at) != NULL;
            break;
        case DT__LK_STR:
            snprintf(text, sizeof text, "%.*s", (int)t[i].size, at);
            ok = cJSON_AddStringToObject(j, t[i].key, text) != NULL;
            break;
        }
    }
    char *out = ok ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return out;
}
