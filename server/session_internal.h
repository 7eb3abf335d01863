/*
 * session_internal - what server/session.c and server/session_table.c share.
 * Private to those two files.
 *
 * Lock order (docs/ARCHITECTURE.md): table -> session -> store. A session's
 * lock is taken under the table's lock only to read or cancel; the store is
 * called under a session's lock (an input is durable before anyone hears of
 * it); SSE locks (fan-out -> client -> MHD) are taken inside any of them and
 * never the other way round.
 */
#ifndef SESSION_INTERNAL_H
#define SESSION_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "effects/runtime.h"
#include "server/msgstream.h"
#include "server/session.h"
#include "server/session_table.h"
#include "server/sse.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_state.h"

struct session {
    struct session *next; /* in the table */
    struct session_table *table;
    char id[SESSION_ID_MAX + 1];
    int refs;             /* atomic */
    pthread_mutex_t lock; /* guards everything below */
    int waiting;          /* inputs queued on the lock (atomic) */
    bool deleted;
    struct rx_state state;
    int64_t last_stamp;
    int64_t seq; /* accepted inputs so far */
    int64_t created_at;
    char *title;
    struct sse_channel ch;       /* whole states */
    struct sse_channel patch_ch; /* JSON Patches (?mode=patch) */
    struct msgstream *streams;   /* answers being streamed */
    struct runtime *rt;
    struct rx_buf scratch; /* event encoding */
};

struct session_table {
    struct session_env env;
    pthread_mutex_t lock; /* guards the list and the counts */
    struct session *head;
    size_t count;
    int live; /* sessions not yet freed, in the table or not */
    pthread_cond_t all_freed;
};

/* A new session of `t` with one reference, not yet in the table. NULL on ENOMEM. */
struct session *session_create(struct session_table *t, const char *id);
/* Free a session that was never listed (its effects never started). */
void session_destroy(struct session *s);
/*
 * Take a state rebuilt from the log (moved in), `seq` inputs folded: answers
 * that were streaming get a buffer again, so the brain resumes them under
 * the same id.
 */
void session_restore(struct session *s, struct rx_state *state, int64_t seq,
                     int64_t created_at);
/* A session left the table: take no more input, cancel effects, end streams. */
void session_stop(struct session *s);
/* Start the effects its state wants now, without waiting for an input. */
void session_reconcile(struct session *s);

#endif
