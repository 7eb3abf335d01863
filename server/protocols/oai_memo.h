/*
 * oai_memo - which session a conversation continues (SPEC 4.3 continuity):
 * the fingerprint of a conversation as the client will resend it (its
 * messages and the answer it was given, server/protocols/oai_wire) -> the session it
 * happened in, how many user messages that session had then and the seq of
 * its last input then (for a fork when the session moved on).
 *
 * With a store (server/records), the map is the store's records of kind
 * OAI_MEMO_KIND, one per answered turn, deleted with their session: it
 * survives restarts and every node reads the same. A put is written behind
 * (its caller holds the session's lock) and kept meanwhile in a ring in
 * memory, bounded (OAI_MEMO_MAX entries, the oldest replaced first), which
 * a get looks in first. With `--db :memory:` the ring is all there is:
 * after a restart, or past the bound, a resent conversation starts a new
 * session unless the client names one (X-Reflexor-Session).
 *
 * Depends on server/protocols/oai_wire (the fingerprint), server/session
 * (SESSION_ID_MAX), server/records and store/store only. Thread-safe: one
 * mutex, a leaf (callers may hold a session's lock); no store call is made
 * with it held.
 * Ownership: struct oai_memo is caller-allocated (oai_memo_init/_release);
 * entries are copied in and out.
 */
#ifndef OAI_MEMO_H
#define OAI_MEMO_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/protocols/oai_wire.h"
#include "server/session.h"

/* Conversations remembered in memory at most. */
#define OAI_MEMO_MAX 4096
/* The store's records of the map. */
#define OAI_MEMO_KIND "oai.fp"

struct oai_memo_entry {
    struct oai_fp fp;
    char sid[SESSION_ID_MAX + 1];
    size_t n_user; /* the session's user messages when the answer ended */
    int64_t seq;   /* its last input then */
};

struct oai_memo {
    pthread_mutex_t lock;
    struct oai_memo_entry *items; /* OAI_MEMO_MAX slots, allocated on first put */
    size_t len;                   /* slots used */
    size_t next;                  /* the slot the next new entry takes */
};

void oai_memo_init(struct oai_memo *m);
void oai_memo_release(struct oai_memo *m);

/*
 * Remember `e` (a fingerprint already there is updated), and queue it for
 * the store when there is one. 0 or -ENOMEM (the conversation is then not
 * remembered, or only on this node until a restart).
 */
int oai_memo_put(struct oai_memo *m, const struct oai_memo_entry *e) RX_WUR;
/*
 * The entry for `fp` copied to *out, from memory or else from the store
 * (a read; never call it holding a session's lock): true, or false when
 * unknown (or the store cannot be read: logged).
 */
bool oai_memo_get(struct oai_memo *m, const struct oai_fp *fp,
                  struct oai_memo_entry *out);

#endif
