/* A list of subscribers, each a callback and its user pointer under a
 * token: the parameter registry's gradient-ready subscribers (params.c) and
 * a model's block hooks (model.c).  The owner walks it in order when an
 * event fires; it changes only between events (never from inside one), so
 * walking needs no copy.  Tokens count up from 1 and are never reused
 * within a list, so a stale token removes nothing. */
#ifndef DT_NN_SUBS_H
#define DT_NN_SUBS_H

#include <stdbool.h>

#include "dtrain/nn.h"

/* The callback's type is the owner's: it casts to and from this one (a
 * conversion between function pointer types that C allows). */
typedef void (*dt__sub_fn)(void);

typedef struct {
    dt__sub_fn fn;
    void *user;
    dt_subscription token;
} dt__sub;

typedef struct {
    dt__sub *at;
    int n, cap;
    dt_subscription last; /* the last token handed out */
} dt__subs;

/* Append (fn, user); *token names it.  `what` names the list in an error. */
dt_status dt__subs_add(dt__subs *s, dt__sub_fn fn, void *user, dt_subscription *token, const char *what);
/* Remove the subscriber `token` names (keeping the others' order); false
 * when there is none (0, already removed, another list's). */
bool dt__subs_remove(dt__subs *s, dt_subscription token);
void dt__subs_free(dt__subs *s);

#endif
