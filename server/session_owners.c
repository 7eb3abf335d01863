/*
 * session_owners - whose the sessions are (SPEC 4.4): a request sees only
 * its principal's (session_table_get_as), and one user's sessions and
 * effects are bounded (limits.user_sessions, limits.user_running_effects)
 * so that nobody starves the others of the session queue or the effect pool.
 *
 * The running effects are counted per owner as the sessions' runtimes
 * report them (session.c: "effect-started", then exactly one end), in a
 * small chained table under its own leaf lock; an owner's count lives while
 * the server does (one per user, not per session).
 */
#include "server/session_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/config.h"
#include "server/session_internal.h"
#include "store/store.h"

struct owner_load {
    struct owner_load *next;
    int running;
    char name[];
};

#define OWNER_BUCKETS (sizeof(((struct session_table *)0)->owners) / sizeof(void *))

static struct owner_load **bucket(struct session_table *t, const char *owner)
{
    uint32_t h = 2166136261u;

    for (const char *p = owner; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return &t->owners[h % OWNER_BUCKETS];
}

/* `owner`'s count, made when `make`; NULL on ENOMEM or when not made. Lock held. */
static struct owner_load *load_of(struct session_table *t, const char *owner, bool make)
{
    struct owner_load **head = bucket(t, owner), *o;

    for (o = *head; o && strcmp(o->name, owner); o = o->next)
        ;
    if (!o && make && (o = calloc(1, sizeof(*o) + strlen(owner) + 1))) {
        strcpy(o->name, owner);
        o->next = *head;
        *head = o;
    }
    return o;
}

void session_table__owner_work(struct session_table *t, const char *owner, int delta)
{
    struct owner_load *o;

    pthread_mutex_lock(&t->owners_lock);
    /* A count that could not be made stays unmade: its user is not limited. */
    if ((o = load_of(t, owner, delta > 0)))
        o->running += delta;
    pthread_mutex_unlock(&t->owners_lock);
}

bool session_table_may_work(struct session_table *t, const struct principal *who)
{
    int max = __atomic_load_n(&t->env.cfg->user_running_effects, __ATOMIC_RELAXED);
    struct owner_load *o;
    bool ok;

    if (!who || who->admin || max <= 0)
        return true;
    pthread_mutex_lock(&t->owners_lock);
    o = load_of(t, who->name, false);
    ok = !o || o->running < max;
    pthread_mutex_unlock(&t->owners_lock);
    return ok;
}

int session_table__owner_has_room(struct session_table *t, const struct principal *who)
{
    int max = __atomic_load_n(&t->env.cfg->user_sessions, __ATOMIC_RELAXED);
    int64_t n = 0;
    int err;

    if (!who || who->admin || max <= 0)
        return 0;
    if (t->env.store) {
        /* Every node's sessions: the store's index on owners counts them. */
        if ((err = store_sessions_owned(t->env.store, who->name, &n)))
            return err;
    } else {
        pthread_mutex_lock(&t->lock);
        for (struct session *s = t->head; s; s = s->next)
            n += !strcmp(s->owner, who->name);
        pthread_mutex_unlock(&t->lock);
    }
    return n >= max ? -EDQUOT : 0;
}

struct session *session_table_get_as(struct session_table *t, const char *id,
                                     const struct principal *who)
{
    struct session *s = session_table_get(t, id);

    /* Another's session answers as one that does not exist. */
    if (s && !principal_sees(who, s->owner)) {
        session_unref(s);
        return NULL;
    }
    return s;
}

void session_table__owners_release(struct session_table *t)
{
    for (size_t i = 0; i < OWNER_BUCKETS; i++)
        while (t->owners[i]) {
            struct owner_load *o = t->owners[i];

            t->owners[i] = o->next;
            free(o);
        }
}
