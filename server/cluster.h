/*
 * cluster - many Reflexor nodes on one PostgreSQL log (SPEC 6.1).
 *
 * Every node keeps every session in memory. Each session has one owner, the
 * node that applies its inputs and runs its effects; on every other node it
 * is a follower, a replica fed from the committed log (session_follow.h).
 *
 * Leases. A node is an incarnation: a fresh id in the table `nodes` with an
 * expiry (PostgreSQL's clock) that its lease thread renews every
 * lease_ms / 4. The `owners` row of a session names the incarnation that
 * owns it. A node takes a session (claim) only when the row names no live
 * incarnation: a node that died (its lease lapsed) is taken over within
 * lease_ms plus one scan. A node whose renewal fails stops acting as an
 * owner when its own lease would have lapsed (measured from the start of its
 * last successful renewal, on its monotonic clock, so never later than
 * PostgreSQL lets anyone else in): its effects are cancelled and its
 * sessions become followers. If its row did lapse, it comes back as a new
 * incarnation and claims what is orphaned like anyone else.
 *
 * Fencing. Claiming updates the owners row; every transaction of the log
 * that writes a session's inputs first takes a share lock on that row and
 * writes only if it names this incarnation (store/pg). So a claim
 * waits for a stale owner's commit in flight, and the new owner reads the
 * log after its claim committed: a stale owner that wakes up cannot write.
 *
 * Streams. The log's commits notify `rx_log` (store/pg): the listen
 * thread applies each committed input to its follower sessions, in commit
 * order, and they publish it like the owner does (same seq, same event ids).
 * Tokens of answers being streamed are relayed on `rx_tok` by the owner
 * once the answer's start is committed: "<sid> <mid> <t|r> <offset> <text>";
 * a follower appends what lies past its own length. Session creation,
 * deletion and renames come on `rx_sess`. After a lost listen connection the
 * node resynchronises from the log.
 *
 * Inputs to a follower (server/api): the node forwards the request to the
 * owner (its advertised URL) and answers with the owner's answer; with no
 * live owner it claims the session first and applies the input itself.
 *
 * Depends on libpq, libcurl, server/session_table and server/session_follow.
 * Threads: lease (renew, scan, claim), listen, relay; the locks are in
 * cluster_internal.h. Every call to the database is bounded in time, and
 * none is made with a session's lock held but a follower's catch-up.
 * Ownership: struct cluster is a heap object (cluster_start/cluster_stop);
 * strings handed out are malloc'd copies the caller frees.
 */
#ifndef CLUSTER_H
#define CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state_machine/rx_common.h"

struct cluster;
struct config;
struct session_table;
struct store;

/*
 * Register this node (a new incarnation) on the database of `cfg->db_path`
 * and fence `st` with it. Sessions loaded after this are followers until
 * cluster_run. 0 and *out, or -EIO / -ENOMEM with `err` set.
 */
int cluster_start(const struct config *cfg, struct store *st, struct cluster **out,
                  struct rx_error *err) RX_WUR;
/*
 * Start following the log on the loaded table; from here a touch claims a
 * session no live node owns. 0 or -ENOMEM.
 */
int cluster_run(struct cluster *c, struct session_table *t) RX_WUR;
/*
 * Advertise this node at cfg->cluster_advertise or http://127.0.0.1:`port`
 * (once it listens): where the others relay inputs for its sessions. Until
 * then they answer 503 and the client retries. Then start the lease thread,
 * whose first turn claims the orphans in flight at once (not before the
 * node listens: it loads each it claims). 0 or -ENOMEM.
 */
int cluster_advertise(struct cluster *c, int port) RX_WUR;
/* Stop the threads, give up the leases (others take over at once), free. NULL ok. */
void cluster_stop(struct cluster *c);

/* The URL this node is reached at (borrowed; "" before cluster_advertise). */
const char *cluster_url(struct cluster *c);
/*
 * Where an input for follower `sid` goes: 0 with *url (malloc'd) the live
 * owner's advertised URL; -ENOENT when no live node owns it: then
 * cluster_claim it; -EIO when the database cannot say.
 */
int cluster_owner_url(struct cluster *c, const char *sid, char **url) RX_WUR;
/*
 * Take `sid` over now if no live node owns it: 0 when this node owns it
 * (and the session caught up from the log, its effects resumed), -EBUSY when
 * a live node does, -ENOENT (no such session), -EIO.
 */
int cluster_claim(struct cluster *c, const char *sid) RX_WUR;

/*
 * session_env.touched (`cluster` is the struct cluster): a session loaded
 * on a touch is claimed when no live node owns it (cluster_claim; a live
 * owner keeps it). Blocks on the database, at most its usual wait.
 */
void cluster_touched(void *cluster, const char *sid);

/*
 * Relay a streamed delta of answer `mid` of owned session `sid` (text, or
 * reasoning; `cluster` is the struct cluster: this is session_env.relay)
 * at byte `offset` to the other nodes. Queued, never blocks; a
 * full queue drops (followers get the whole text with the answer's
 * completion). Any thread.
 */
void cluster_relay(void *cluster, const char *sid, const char *mid, bool reasoning,
                   size_t offset, const char *delta, size_t len);

/*
 * Whether this node's lease holds now, on its own clock (session_env.may_act;
 * `cluster` is the struct cluster). Never blocks: no database call.
 */
bool cluster_may_act(void *cluster);

/* The database's and the lease's health for /healthz: true when this node may own. */
bool cluster_healthy(struct cluster *c, struct rx_error *why);

#endif
