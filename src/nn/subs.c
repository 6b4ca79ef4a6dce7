/* A list of subscribers (see subs.h). */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "nn/subs.h"

dt_status dt__subs_add(dt__subs *s, dt__sub_fn fn, void *user, dt_subscription *token, const char *what)
{
    if (token)
        *token = 0;
    if (!fn)
        return dt__fail(DT_ERR_INVALID, "%s: subscribing a NULL callback", what);
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 4;
        dt__sub *at = realloc(s->at, (size_t)cap * sizeof *at);
        if (!at)
            return dt__fail(DT_ERR_NOMEM, "%s: out of memory for subscriber %d", what, s->n + 1);
        s->at = at;
        s->cap = cap;
    }
    s->at[s->n++] = (dt__sub){fn, user, ++s->last};
    if (token)
        *token = s->last;
    return DT_OK;
}

bool dt__subs_remove(dt__subs *s, dt_subscription token)
{
    for (int i = 0; token > 0 && i < s->n; i++)
        if (s->at[i].token == token) {
            memmove(s->at + i, s->at + i + 1, (size_t)(s->n - i - 1) * sizeof *s->at);
            s->n--;
            return true;
        }
    return false;
}

void dt__subs_free(dt__subs *s)
{
    free(s->at);
    *s = (dt__subs){0};
}
