/*
 * session_feed - the sessions list, live: one process-wide SSE channel
 * (GET <prefix>/events) that tells every tab when a session is created,
 * changes (its title, or a message added) or is deleted, so a list shown in
 * one tab follows what another does.
 *
 * Events (event.c): session-created and session-updated carry the list entry
 * (id, createdAt, updatedAt, title, messageCount), session-deleted the id. A
 * session's updates are coalesced: at most one per SESSION_FEED_COALESCE_MS,
 * the last one carrying the newest values; a change inside the window is
 * sent when it ends, by the feed's own thread. Per session the order is
 * created, updated..., deleted. Nothing is replayed: a client that
 * (re)connects reads GET .../sessions after the stream opened.
 *
 * Users (SPEC 4.4): a principal hears only of its own sessions. Each owner
 * with a follower has a room, a channel of its own, made on its first
 * subscriber and kept until the feed is released (one per user, not per
 * session); an event goes to its session's owner's room and to `ch`, the
 * channel of those that follow every session (admins).
 *
 * Depends on server/sse, server/event and the session's fields
 * (session_internal.h); takes no table lock. Locks: the feed's `lock` is a
 * leaf, taken under a session's lock (to queue a deferred update) or alone
 * (the thread); the thread takes a session's lock with no other held.
 * Ownership: struct session_feed is part of the session table
 * (session_feed_init / _release). A session waiting in the feed's list holds
 * a reference, dropped once its update is sent or it is deleted.
 */
#ifndef SESSION_FEED_H
#define SESSION_FEED_H

#include <pthread.h>
#include <stdbool.h>

#include "server/event.h"
#include "server/session.h"
#include "server/sse.h"

/* At most one session-updated per session in this many milliseconds. */
#define SESSION_FEED_COALESCE_MS 1000
/* The title a session has no title for yet, as the list shows it. */
#define SESSION_FEED_UNTITLED "New chat"

struct feed_room;

struct session_feed {
    struct sse_channel ch; /* every session's events (admins) */
    size_t queue_max;
    int retry_ms;
    pthread_mutex_t lock;    /* guards everything below */
    struct feed_room *rooms; /* one per owner followed; never freed until release */
    pthread_cond_t wake;
    struct session *due; /* sessions with an update held back (s->feed_next) */
    pthread_t thread;
    bool started, stop;
};

/* A feed with no clients, and its thread. 0 or a negative errno. */
int session_feed_init(struct session_feed *f, size_t queue_max, int retry_ms) RX_WUR;
/* Stop the thread and drop every reference it held (before the table waits for its
   sessions); later changes are not held back. Idempotent. */
void session_feed_stop(struct session_feed *f);
/* session_feed_stop, then end the streams and free. */
void session_feed_release(struct session_feed *f);

/* A session joined the table (the table's lock held, not the session's). */
void session_feed_created(struct session_feed *f, struct session *s);
/*
 * The session's title or messages may have changed: announce it now, or
 * once the coalescing window ends. The session's lock held.
 */
void session_feed_changed(struct session_feed *f, struct session *s);
/*
 * A session left the table, deleted (after session_stop). `owner` NULL (not
 * known: a session swept from the store alone) tells only those who follow
 * every session.
 */
void session_feed_deleted(struct session_feed *f, const char *id, const char *owner);
/*
 * Follow the feed of `owner`'s sessions (NULL: every session): the retry
 * line, then live events. What `attach` returned, or NULL on ENOMEM.
 */
void *session_feed_subscribe(struct session_feed *f, const char *owner,
                             session_attach_fn attach, void *arg);

/* The session's list entry as the feed and GET .../sessions show it. Lock held. */
void session_feed_entry(struct session *s, struct event_session *e);

#endif
