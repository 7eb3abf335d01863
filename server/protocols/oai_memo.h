/*
 * oai_memo - which session a conversation continues (SPEC 4.3 continuity):
 * the fingerprint of a conversation as the client will resend it (its
 * messages and the answer it was given, server/protocols/oai_wire) -> the session it
 * happened in, how many user messages that session had then and the seq of
 * its last input then (for a fork when the session moved on).
 *
 * In memory and bounded (OAI_MEMO_MAX entries, the oldest replaced first):
 * after a restart, or past the bound, a resent conversation starts a new
 * session unless the client names one (X-Reflexor-Session).
 *
 * Depends on server/protocols/oai_wire (the fingerprint) and server/session
 * (SESSION_ID_MAX) only. Thread-safe: one mutex, a leaf (callers may hold a
 * session's lock).
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

/* Conversations remembered at most. */
#define OAI_MEMO_MAX 4096

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
 * Remember `e` (a fingerprint already there is updated). 0 or -ENOMEM (the
 * conversation is then not remembered: its next request starts a session).
 */
int oai_memo_put(struct oai_memo *m, const struct oai_memo_entry *e) RX_WUR;
/* The entry for `fp` copied to *out: true, or false when unknown. */
bool oai_memo_get(struct oai_memo *m, const struct oai_fp *fp,
                  struct oai_memo_entry *out);

#endif
