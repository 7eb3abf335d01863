/*
 * cluster_internal - what server/cluster.c (leases, claims, start and stop),
 * server/cluster_db.c (connections and calls with a deadline) and
 * server/cluster_stream.c (the listen and relay threads) share. Private to
 * those files; everyone else uses cluster.h.
 *
 * Locks, none held across another: `ctl_lock` (the lease thread's
 * connection: renewals, scans), `api_lock` (the connection for lookups and
 * claims from requests and the listen thread), `hlock` (a leaf: node id,
 * lease, reason, URL: never held across I/O, so /healthz never waits for
 * the database), `slock` (stopping), `qlock` (the relay queue, a leaf).
 * Depends on server/cluster and libpq; its files also on server/config, the
 * sessions (server/session, session_table, session_follow), store/store.h,
 * base/, effects/log and state_machine/.
 * Every call to the database is bounded in time (db_call): a database that
 * hangs costs a request at most DB_WAIT_MS, and never the lease's deadline.
 * Ownership: struct cluster (cluster_start/cluster_stop) owns conninfo, url,
 * its connections, threads and relay queue; cfg, store and table are
 * borrowed. cluster__connect's connection and cluster__call's result are the
 * caller's (PQfinish, PQclear).
 */
#ifndef CLUSTER_INTERNAL_H
#define CLUSTER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "server/cluster.h"
#include "state_machine/rx_common.h"

/* The longest a lookup or claim may wait for the database. */
#define CLUSTER_DB_WAIT_MS 3000

struct relay_item;
struct session_table;

struct cluster {
    const struct config *cfg;
    struct store *store;
    struct session_table *table;
    char *conninfo;

    pthread_mutex_t ctl_lock; /* guards ctl */
    PGconn *ctl;
    pthread_mutex_t api_lock; /* guards api */
    PGconn *api;

    pthread_mutex_t hlock; /* a leaf: guards node, lease_until, why, url */
    char node[RX_UUID_LEN];
    int64_t lease_until; /* monotonic ms: this node may own until then */
    char why[RX_ERR_LEN];
    char *url; /* advertised; NULL until cluster_advertise */

    pthread_mutex_t slock; /* guards stopping; scond wakes the sleepers */
    pthread_cond_t scond;
    bool stopping;
    pthread_t lease_thread, listen_thread, relay_thread;
    unsigned started; /* bits: listen 1, relay 2, lease 4 */

    pthread_mutex_t qlock; /* a leaf: the relay queue */
    pthread_cond_t qcond;
    struct relay_item *qhead, **qtail;
    size_t qbytes;
    bool qstop;
};

/* ---- cluster_db.c ---- */

/*
 * A connection, made by monotonic `deadline_ms` (NULL when it cannot be),
 * whose keepalives notice a dead peer within seconds.
 */
PGconn *cluster__connect(const char *conninfo, int64_t deadline_ms);
/*
 * One statement with text parameters on *db (connected first when NULL), its
 * result (PQclear it) or NULL; given up at monotonic `deadline_ms`, and then
 * the connection is closed (*db NULL): a late answer must not be read as the
 * next one's. The caller holds *db's lock.
 */
PGresult *cluster__call(struct cluster *c, PGconn **db, const char *sql, int n,
                        const char *const *params, ExecStatusType want,
                        int64_t deadline_ms);
/* Sleep up to `ms`, or until stop. True when stopping. */
bool cluster__nap(struct cluster *c, int64_t ms);

/* ---- cluster.c ---- */

/* This incarnation's id, copied into `out`. */
void cluster__node(struct cluster *c, char out[RX_UUID_LEN]);

/* ---- cluster_stream.c: the threads' bodies; arg is the struct cluster ---- */

void *cluster__listen_main(void *arg);
void *cluster__relay_main(void *arg);
/* Free what the relay queue still holds (after its thread ended). */
void cluster__relay_drain(struct cluster *c);

#endif
