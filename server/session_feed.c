/*
 * session_feed - the sessions list, live. See session_feed.h.
 */
#include "server/session_feed.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "effects/log.h"
#include "base/now.h"
#include "server/event.h"
#include "server/session_internal.h"

/* How often the thread looks at held-back updates while there are some. */
#define FEED_POLL_MS 100

/* One owner's followers (session_feed.h). */
struct feed_room {
    struct feed_room *next;
    struct sse_channel ch;
    char owner[];
};

/* `owner`'s room, or NULL; made when `make` (NULL then on ENOMEM). */
static struct feed_room *room_of(struct session_feed *f, const char *owner, bool make)
{
    struct feed_room *r;

    pthread_mutex_lock(&f->lock);
    for (r = f->rooms; r && strcmp(r->owner, owner); r = r->next)
        ;
    if (!r && make && (r = malloc(sizeof(*r) + strlen(owner) + 1))) {
        strcpy(r->owner, owner);
        sse_channel_init(&r->ch, f->queue_max);
        r->next = f->rooms;
        f->rooms = r;
    }
    pthread_mutex_unlock(&f->lock);
    return r;
}

/* Does anyone follow the sessions of `owner` (NULL: not known)? */
static bool followed(struct session_feed *f, const char *owner)
{
    struct feed_room *r;

    if (sse_channel_has_clients(&f->ch))
        return true;
    return owner && (r = room_of(f, owner, false)) && sse_channel_has_clients(&r->ch);
}

/* `fr` to those who follow every session and to `owner`'s room. */
static void publish(struct session_feed *f, const char *owner, struct sse_frame *fr)
{
    struct feed_room *r = owner ? room_of(f, owner, false) : NULL;

    sse_channel_publish(&f->ch, fr);
    if (r)
        sse_channel_publish(&r->ch, fr);
}

void session_feed_entry(struct session *s, struct event_session *e)
{
    e->id = s->id;
    e->created_at = s->created_at;
    e->updated_at = s->state.updated_at ? s->state.updated_at : s->created_at;
    e->title = s->title ? s->title : SESSION_FEED_UNTITLED;
    e->message_count = (int64_t)(s->state.user.len + s->state.assistant.len);
}

/* Send the session's entry as `type` and note what was sent. Lock held. */
static void announce(struct session_feed *f, struct session *s, const char *type)
{
    struct event_session e;
    struct sse_frame *fr;

    session_feed_entry(s, &e);
    fr = event_session(type, &e);
    if (fr)
        publish(f, s->owner, fr);
    else
        log_warn("session %s: cannot encode a %s event", s->id, type);
    sse_frame_unref(fr);
    s->feed_count = (size_t)e.message_count;
    s->feed_title = false;
    s->feed_at_ms = now_mono_ms();
}

/* Anything the feed has not told yet? Lock held. */
static bool changed(const struct session *s)
{
    return s->feed_title || s->feed_count != s->state.user.len + s->state.assistant.len;
}

void session_feed_created(struct session_feed *f, struct session *s)
{
    pthread_mutex_lock(&s->lock);
    if (followed(f, s->owner))
        announce(f, s, "session-created");
    else
        s->feed_count = s->state.user.len + s->state.assistant.len;
    pthread_mutex_unlock(&s->lock);
}

void session_feed_changed(struct session_feed *f, struct session *s)
{
    if (!changed(s) || s->feed_due)
        return; /* nothing new, or a held-back update will carry it */
    if (!followed(f, s->owner)) {
        /* Nobody to tell: a client that joins later reads the list itself. */
        s->feed_count = s->state.user.len + s->state.assistant.len;
        s->feed_title = false;
        return;
    }
    if (now_mono_ms() - s->feed_at_ms >= SESSION_FEED_COALESCE_MS) {
        announce(f, s, "session-updated");
        return;
    }
    /* Inside the window: the thread sends it when the window ends. */
    pthread_mutex_lock(&f->lock);
    if (!f->stop) {
        session_ref(s);
        s->feed_due = true;
        s->feed_next = f->due;
        f->due = s;
        pthread_cond_signal(&f->wake);
    }
    pthread_mutex_unlock(&f->lock);
}

void session_feed_deleted(struct session_feed *f, const char *id, const char *owner)
{
    struct sse_frame *fr;

    if (!followed(f, owner))
        return;
    fr = event_session_deleted(id);
    if (fr)
        publish(f, owner, fr);
    else
        log_warn("session %s: cannot encode a session-deleted event", id);
    sse_frame_unref(fr);
}

/*
 * Send the held-back updates whose window ended; keep the others. The
 * session's lock is taken with no other held; a deleted session is dropped
 * without a word (its session-deleted follows its stop). Returns the
 * sessions still waiting. Each dropped session's reference is let go here,
 * with no lock held (it may be the last).
 */
static struct session *flush_due(struct session_feed *f, struct session *list)
{
    struct session *keep = NULL, *s, *next;
    int64_t now = now_mono_ms();

    for (s = list; s; s = next) {
        bool done = true;

        next = s->feed_next;
        pthread_mutex_lock(&s->lock);
        if (!s->deleted && changed(s)) {
            if (now - s->feed_at_ms >= SESSION_FEED_COALESCE_MS)
                announce(f, s, "session-updated");
            else
                done = false;
        }
        if (done)
            s->feed_due = false;
        pthread_mutex_unlock(&s->lock);
        if (done) {
            session_unref(s);
        } else {
            s->feed_next = keep;
            keep = s;
        }
    }
    return keep;
}

static void *feed_main(void *arg)
{
    struct session_feed *f = arg;

    pthread_mutex_lock(&f->lock);
    while (!f->stop) {
        struct session *list = f->due, *keep;
        struct timespec ts;

        if (!list) {
            pthread_cond_wait(&f->wake, &f->lock);
            continue;
        }
        f->due = NULL;
        pthread_mutex_unlock(&f->lock);
        keep = flush_due(f, list);
        pthread_mutex_lock(&f->lock);
        while (keep) {
            struct session *s = keep;

            keep = s->feed_next;
            s->feed_next = f->due;
            f->due = s;
        }
        if (f->due && !f->stop) {
            ts = now_deadline(CLOCK_REALTIME, FEED_POLL_MS * NOW_NS_PER_MS);
            pthread_cond_timedwait(&f->wake, &f->lock, &ts);
        }
    }
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

int session_feed_init(struct session_feed *f, size_t queue_max, int retry_ms)
{
    int rc;

    memset(f, 0, sizeof(*f));
    sse_channel_init(&f->ch, queue_max);
    f->queue_max = queue_max;
    f->retry_ms = retry_ms;
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->wake, NULL);
    if ((rc = pthread_create(&f->thread, NULL, feed_main, f))) {
        pthread_cond_destroy(&f->wake);
        pthread_mutex_destroy(&f->lock);
        sse_channel_release(&f->ch);
        return -rc;
    }
    f->started = true;
    return 0;
}

void session_feed_stop(struct session_feed *f)
{
    struct session *list;

    pthread_mutex_lock(&f->lock);
    f->stop = true;
    pthread_cond_signal(&f->wake);
    list = f->due;
    f->due = NULL;
    pthread_mutex_unlock(&f->lock);
    if (f->started) {
        pthread_join(f->thread, NULL);
        f->started = false;
    }
    /* What the thread kept back when it stopped is in `due` again. */
    pthread_mutex_lock(&f->lock);
    while (f->due) {
        struct session *s = f->due;

        f->due = s->feed_next;
        s->feed_next = list;
        list = s;
    }
    pthread_mutex_unlock(&f->lock);
    while (list) {
        struct session *s = list;

        list = s->feed_next;
        pthread_mutex_lock(&s->lock);
        s->feed_due = false;
        pthread_mutex_unlock(&s->lock);
        session_unref(s);
    }
}

void session_feed_release(struct session_feed *f)
{
    session_feed_stop(f);
    sse_channel_release(&f->ch);
    while (f->rooms) {
        struct feed_room *r = f->rooms;

        f->rooms = r->next;
        sse_channel_release(&r->ch);
        free(r);
    }
    pthread_cond_destroy(&f->wake);
    pthread_mutex_destroy(&f->lock);
}

void *session_feed_subscribe(struct session_feed *f, const char *owner,
                             session_attach_fn attach, void *arg)
{
    struct sse_frame *first = sse_retry_frame(f->retry_ms);
    struct feed_room *room = owner ? room_of(f, owner, true) : NULL;
    void *r = NULL;

    if (first && (!owner || room))
        r = attach(arg, owner ? &room->ch : &f->ch, &first, 1, false);
    sse_frame_unref(first);
    return r;
}
