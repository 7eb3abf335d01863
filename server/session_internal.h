/*
 * session_internal - what server/session.c, server/session_pipeline.c,
 * server/session_table.c and the table's helpers (session_feed.c,
 * session_search.c, session_resident.c) share. Private to those files.
 * Depends on server/session, session_table, session_feed, principal, msgstream, sse,
 * effects/runtime and state_machine/; its files also on server/run, event,
 * metrics, config, session_follow and session_import, store/store.h, base/,
 * effects/toolkit and effects/log.
 *
 * Lock order (docs/ARCHITECTURE.md): table -> session -> store. A session's
 * lock is taken under the table's lock only to read, cancel or ask whether
 * it may be evicted (the store is read with neither held: a load); inputs are
 * queued to the store under a session's lock (so its log keeps their order),
 * but nobody waits for a commit with it held: the store's notifier thread
 * takes it afterwards, with no store lock held, to publish what became
 * durable; SSE locks (list -> channel -> client -> MHD) are taken inside any of them
 * and never the other way round.
 * Ownership: a struct session is refcounted (session_create gives the first
 * reference; session_destroy frees one never listed) and owns its state,
 * title, pending inputs, streams and scratch buffer; the table holds one
 * reference to each listed session. session_restore takes `state` (moved in).
 */
#ifndef SESSION_INTERNAL_H
#define SESSION_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "effects/runtime.h"
#include "server/msgstream.h"
#include "server/principal.h"
#include "server/session.h"
#include "server/session_feed.h"
#include "server/session_table.h"
#include "server/sse.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_state.h"

struct pending;
struct run;

struct session {
    struct session *next, *prev; /* in the table's list, last touched first */
    struct session *chain;       /* in the table's bucket of `hash` */
    struct session_table *table;
    uint32_t hash;        /* rx_index_hash(id) */
    int refs;             /* atomic */
    pthread_mutex_t lock; /* guards everything below */
    int waiting;          /* clients' inputs, arrival to answer (atomic) */
    bool deleted;
    bool deleting;         /* this node is deleting it (table's lock): a notice of the
                              deletion from the log leaves it to this node */
    bool follower;         /* another node owns it (session_follow.h) */
    bool broken;           /* its log could not be read back after a failed write */
    struct rx_state state; /* every input applied, durable or on its way */
    int64_t last_stamp;
    int64_t seq; /* accepted inputs that are durable and published */
    /*
     * Group commit (session_pipeline.c, "the pipeline"): inputs applied but not yet
     * durable wait in `pending`, oldest first, and are published in that
     * order once the store answers. seq <= applied; both equal when nothing
     * is on its way ("settled"), which is when effects are reconciled.
     */
    int64_t applied;         /* accepted inputs applied to `state` */
    struct pending *pending; /* on their way to the log, oldest first */
    struct pending *pend_last;
    pthread_cond_t moved;  /* broadcast when the pipeline moves or opens */
    uint64_t gen;          /* bumped when `state` is rebuilt from the log */
    int fail_err;          /* why: what inputs applied before then answer */
    int readers;           /* waiting for a settled state to show */
    int fx_waiting;        /* effects' inputs waiting to go alone */
    bool exclusive;        /* an effect's input is on its way: it goes alone */
    bool settle_due;       /* effects need a settle: no new input until then */
    bool reconcile_due;    /* a reconcile failed (ENOMEM): session_table_reconcile_due */
    bool recovering;       /* read from the log, its calls in doubt not yet marked:
                              no reconcile until session_recover has (SPEC 3.7) */
    bool recover_due;      /* recovery waits for a tool not known yet: try again */
    int64_t recover_since; /* monotonic ms of the first try */
    bool rebuilt;          /* rebuilt since the last settle */
    const struct effect *last_cause; /* of the last input published */
    size_t
        snapshot_bytes; /* the last snapshot's size (session_pipeline.c snapshot_due) */
    size_t logged_since_snapshot; /* bytes of inputs logged since */
    int64_t created_at;
    int64_t touched_ms; /* monotonic ms of its last session_table_get (table's lock) */
    size_t bytes;       /* what its state holds, about (session_resident.c) */
    bool counted;       /* its bytes are in the table's total (listed, not stopped) */
    char *title;        /* given by a person (rename, import) or from the first message */
    char owner[PRINCIPAL_NAME_MAX + 1]; /* the principal it belongs to (SPEC 4.4) */
    /* The sessions feed (session_feed.c): what it last announced, and when. */
    size_t feed_count;           /* messageCount announced */
    bool feed_title;             /* the title changed since */
    bool feed_due;               /* waiting in the feed's list (feed_next: its lock) */
    int64_t feed_at_ms;          /* monotonic ms of the last announcement */
    struct session *feed_next;   /* in the feed's list of held-back updates */
    struct sse_channel ch;       /* whole states */
    struct sse_channel patch_ch; /* JSON Patches (?mode=patch) */
    struct msgstream *streams;   /* answers being streamed */
    struct runtime *rt;
    struct rx_buf scratch; /* event encoding */
    struct run *runs;      /* the lane of client protocol runs (server/run), head first */
    char id[]; /* sized to the id (at most SESSION_ID_MAX): 28 bytes less for a UUID */
};

struct table_loading;
struct owner_load;

struct session_table {
    struct session_env env;
    struct session_feed feed;   /* GET .../events */
    pthread_mutex_t title_lock; /* one rename at a time: store, then memory */
    pthread_mutex_t lock;       /* guards the list, the buckets and the counts */
    /* The resident set (session_resident.c): the sessions in memory, last
       touched first; with a store, the others are loaded on first touch. */
    struct session *head, *tail;
    struct table_loading *loading; /* ids being read from the store */
    pthread_cond_t loaded;         /* broadcast when a load ends */
    size_t bytes;                  /* atomic: the resident sessions' `bytes` */
    int64_t stored;                /* atomic: sessions in the store, as counted here */
    bool count_due;           /* atomic: a shared store's count is still to be read */
    int64_t loads, evictions; /* atomic: totals, for /metrics */
    /* id -> session: a POST finds its session in O(1) among 100 000 (chained,
       grown to keep at most about two sessions a bucket). */
    struct session **buckets;
    size_t nbuckets; /* a power of two */
    size_t count;
    int live;          /* sessions not yet freed, in the table or not */
    int reconcile_due; /* atomic: some session's reconcile is to be tried again */
    /* Effects running per owner (limits.user_running_effects): a leaf lock. */
    pthread_mutex_t owners_lock;
    struct owner_load *owners[64];
    pthread_cond_t all_freed;
};

/* ---- session_owners.c: whose sessions they are (SPEC 4.4) ---- */

/* An effect of one of `owner`'s sessions started (+1) or ended (-1). Any lock held. */
void session_table__owner_work(struct session_table *t, const char *owner, int delta);
/*
 * limits.user_sessions: may `who` make one more session? 0, -EDQUOT (at the
 * limit) or the store's -EIO. Takes the table's lock (no store): none held.
 */
int session_table__owner_has_room(struct session_table *t, const struct principal *who);
/* Free the owners' counts (session_table_destroy). */
void session_table__owners_release(struct session_table *t);

/* ---- session_table.c, for session_resident.c ---- */

/* Whether `id` may name a session: plain characters, 1 to SESSION_ID_MAX. */
bool session_id_is_plain(const char *id);

/* A session to list (session_table__add). */
struct table_add {
    const char *id;
    const char *owner;      /* its principal; NULL: PRINCIPAL_ADMIN */
    int64_t created_at;     /* of a rebuilt one; a fresh one is made now */
    const char *title;      /* given by a person, or from its first message; NULL: none */
    struct rx_state *state; /* rebuilt (moved in on success); NULL: fresh, stored now */
    int64_t seq;            /* inputs folded into `state` */
    bool follower;          /* another node owns it (session_follow.h) */
    bool quiet;             /* loaded, not made: the sessions feed is not told */
};
/*
 * List a session (a fresh one is recorded in the store first). 0 and a new
 * reference in *out (when not NULL); -EINVAL (id not plain), -EEXIST,
 * -ENFILE (limits.max_sessions, only with no store), -ENOMEM, or the
 * store's -ENOSPC / -EIO. On failure `state` is still the caller's.
 */
int session_table__add(struct session_table *t, const struct table_add *a,
                       struct session **out) RX_WUR;

/* ---- session_resident.c: the table's index and the resident set ---- */

/* The listed session `id`, or NULL. Table's lock held. */
struct session *session_table__find(struct session_table *t, const char *id);
/* List `s` (touched now; its bytes counted). Table's lock held. */
void session_table__link(struct session_table *t, struct session *s);
/* Unlist `s`. Table's lock held. */
void session_table__unlink(struct session_table *t, struct session *s);
/*
 * A new reference to `id`, read from the store when it is not in memory
 * (the one load of it: a touch racing it waits for it), or NULL (unknown,
 * or the store could not read it: logged). Takes the table's lock, not
 * held across the store's reads.
 */
struct session *session_table__touch(struct session_table *t, const char *id);
/*
 * Evict idle sessions: those untouched for sessions.idle_ms, and the least
 * recently touched while more than limits.resident_sessions or
 * limits.resident_bytes are in memory. Never one with work in flight
 * (session__is_idle). Nothing without a store. Returns how many left.
 */
size_t session_table__evict(struct session_table *t);
/* Whether `s` may leave memory now. Both locks held (table, then session). */
bool session__is_idle(struct session *s);
/* `s` holds `bytes` now (and its table's total follows). Lock held. */
void session__resize(struct session *s, size_t bytes);

/* A new session of `t` with one reference, not yet in the table; `id` is a
   checked one (at most SESSION_ID_MAX bytes). NULL on ENOMEM. */
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
/*
 * Whether its effects may start or stream now: this node owns it and, in a
 * cluster, its lease holds (session_env.may_act). Lock held.
 */
bool session_may_act(const struct session *s);
/* A session left the table: take no more input, cancel effects, end streams. */
void session_stop(struct session *s);
/* Start the effects its state wants now, without waiting for an input. */
void session_reconcile(struct session *s);
/*
 * A session whose state was read from the log (a restart's or a touch's
 * load, a takeover, a fork, an import): its tool calls that started and
 * have no result may have acted (SPEC 3.7). Those whose tool is not safe to
 * repeat (toolkit_is_idempotent) are marked in doubt, one toolkit-call-in-
 * doubt input each, before anything is reconciled; then its effects are
 * reconciled, so the safe ones run again under their key. A follower (another
 * node owns it) is left to its owner. No lock held.
 */
void session_recover(struct session *s);
/* How long recovery waits for the tools of started calls to be known (an MCP
   server starting); past it an unknown tool counts as not safe to repeat. */
#define SESSION_RECOVER_WAIT_MS 30000
/*
 * Reconcile its effects with its state (runtime_reconcile; `cause` as
 * there), if it may act. A reconcile that fails (out of memory, no worker)
 * leaves effects the state wants unstarted, and nothing else would start
 * them before the next input: the session is marked, and the housekeeping
 * thread tries again (session_table_reconcile_due). Lock held.
 */
void session__reconcile(struct session *s, const struct effect *cause);

/* session.c, for session_pipeline.c. Lock held for each. */

/* Send each frame made (NULL: could not be encoded, logged) to `ch`, at once. */
void session_publish_frames(struct session *s, struct sse_channel *ch,
                            struct sse_frame *const *f, size_t n);
/* Set the title from the first user message, once; tell the sessions feed. */
void session_set_title(struct session *s);
/*
 * Durable streamed text (SPEC 3.7; session.c). text_save_due queues a batch
 * of each streaming answer whose batch is due (250 ms or 4 KiB since the
 * last). text_load puts what the store kept of `m`'s text back into it
 * (after a restart, a load, a takeover), logged when it cannot. Lock held.
 */
void session__text_save_due(struct session *s);
void session__text_load(struct session *s, struct msgstream *m);

/* A buffer for a streaming answer's text, owned by s->streams. NULL on ENOMEM. */
struct msgstream *session_stream_open(struct session *s, const char *id);

/*
 * session_submit_start for a client protocol's run (server/run): as a
 * client's input, and run__applied(run, seq) is called under the lock the
 * moment it is applied, before any of its consequences are published.
 */
int session__submit_run(struct session *s, struct rx_input *in, struct run *run,
                        struct submit_result *res, session_done_fn done,
                        void *arg) RX_WUR;

/* session_pipeline.c, for session_follow.c: an input committed by the owner,
   applied and published as the owner did. 0, -EPROTO (does not fold) or
   -ENOMEM. Lock held. */
int session__follow_apply(struct session *s, struct rx_input *in);

/* session_pipeline.c, for session.c. */

/* Wait, lock held, until nothing is on its way (the state shown is durable). */
void session_settle_wait(struct session *s);

#endif
