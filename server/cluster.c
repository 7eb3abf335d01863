/*
 * cluster - many nodes on one PostgreSQL log: connections, leases, claims,
 * start and stop. The listen and relay threads are in cluster_stream.c. See
 * cluster.h; the design and its failure cases are in docs/ARCHITECTURE.md,
 * "Beyond one machine".
 */
#include "server/cluster_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "base/idgen.h"
#include "effects/log.h"
#include "base/now.h"
#include "server/config.h"
#include "server/session.h"
#include "server/session_follow.h"
#include "server/session_table.h"
#include "store/store.h"

/* Orphans one scan claims: a node that comes up does not stall on thousands. */
#define CLAIM_BATCH "256"

/* ---- this node ------------------------------------------------------------------- */

void cluster__node(struct cluster *c, char out[RX_UUID_LEN])
{
    pthread_mutex_lock(&c->hlock);
    memcpy(out, c->node, RX_UUID_LEN);
    pthread_mutex_unlock(&c->hlock);
}

/* ---- leases ----------------------------------------------------------------------- */

/*
 * How long a renewal counts for on this node: the lease less a tenth, so
 * that this node stops acting as an owner before PostgreSQL's clock lets
 * another node in (the renewal's start is measured here, its expiry there).
 */
static int64_t lease_span(const struct cluster *c)
{
    return c->cfg->cluster_lease_ms - c->cfg->cluster_lease_ms / 10;
}

static void lease_text(const struct cluster *c, char out[24])
{
    snprintf(out, 24, "%d", c->cfg->cluster_lease_ms);
}

/* A new incarnation: a fresh id with a lease. ctl_lock held. 0 or -EIO. */
static int node_register(struct cluster *c)
{
    char lease[24], fresh[RX_UUID_LEN], *url;
    int64_t t0 = now_mono_ms();
    PGresult *r;

    idgen_uuid(fresh);
    lease_text(c, lease);
    pthread_mutex_lock(&c->hlock);
    url = c->url ? strdup(c->url) : NULL;
    pthread_mutex_unlock(&c->hlock);
    /* Incarnations long dead go too: their sessions are orphans either way. */
    r = cluster__call(
        c, &c->ctl,
        "WITH gone AS (DELETE FROM nodes WHERE expires_at < clock_timestamp()"
        " - interval '1 minute') INSERT INTO nodes(id, url, expires_at)"
        " VALUES($1, $2, clock_timestamp() + $3::int * interval '1"
        " millisecond')",
        3, (const char *[]){fresh, url, lease}, PGRES_COMMAND_OK,
        t0 + CLUSTER_DB_WAIT_MS);
    free(url);
    if (!r)
        return -EIO;
    PQclear(r);
    pthread_mutex_lock(&c->hlock);
    memcpy(c->node, fresh, sizeof(fresh));
    c->lease_until = t0 + lease_span(c);
    pthread_mutex_unlock(&c->hlock);
    store_set_node(c->store, fresh);
    log_info("cluster: node %s, lease %d ms", fresh, c->cfg->cluster_lease_ms);
    return 0;
}

/*
 * Renew the lease, waiting no longer than it lasts: 1 renewed, 0 lapsed
 * (this incarnation is over), -EIO (the database does not say in time).
 * ctl_lock held.
 */
static int node_renew(struct cluster *c)
{
    char lease[24], node[RX_UUID_LEN], *url;
    int64_t t0 = now_mono_ms(), until;
    PGresult *r;
    int n;

    lease_text(c, lease);
    pthread_mutex_lock(&c->hlock);
    memcpy(node, c->node, sizeof(node));
    url = c->url ? strdup(c->url) : NULL;
    until = c->lease_until;
    pthread_mutex_unlock(&c->hlock);
    r = cluster__call(
        c, &c->ctl,
        "UPDATE nodes SET expires_at = clock_timestamp() + $2::int * interval"
        " '1 millisecond', url = $3 WHERE id = $1 AND expires_at >"
        " clock_timestamp()",
        3, (const char *[]){node, lease, url}, PGRES_COMMAND_OK,
        until > t0 + CLUSTER_DB_WAIT_MS ? t0 + CLUSTER_DB_WAIT_MS
        : until > t0 + 100              ? until
                                        : t0 + 100);
    free(url);
    if (!r) {
        pthread_mutex_lock(&c->hlock);
        snprintf(c->why, sizeof(c->why), "the database does not answer in time");
        pthread_mutex_unlock(&c->hlock);
        return -EIO;
    }
    n = atoi(PQcmdTuples(r));
    PQclear(r);
    pthread_mutex_lock(&c->hlock);
    if (n)
        c->lease_until = t0 + lease_span(c);
    c->why[0] = '\0';
    pthread_mutex_unlock(&c->hlock);
    return n ? 1 : 0;
}

/*
 * The deadline of the lease thread's calls: CLUSTER_DB_WAIT_MS, and never
 * past the lease's end, where the thread must be free to drop everything.
 */
static int64_t scan_deadline(struct cluster *c)
{
    int64_t d = now_mono_ms() + CLUSTER_DB_WAIT_MS, until;

    pthread_mutex_lock(&c->hlock);
    until = c->lease_until;
    pthread_mutex_unlock(&c->hlock);
    return until < d ? until : d;
}

/* Monotonic ms until this node's lease lapses (<= 0: it has). */
static int64_t lease_left(struct cluster *c)
{
    int64_t left;

    pthread_mutex_lock(&c->hlock);
    left = c->lease_until - now_mono_ms();
    pthread_mutex_unlock(&c->hlock);
    return left;
}

/* ---- claims ----------------------------------------------------------------------- */

/*
 * Make the owners row of `sid` name this node, when it names no live one.
 * The update waits for a stale owner's write in flight (its share lock on
 * the row) and the caller reads the log after: fencing. 0, -EBUSY (a live
 * node owns it, or the session is gone), -EIO. The connection's lock held.
 */
static int claim_row(struct cluster *c, PGconn **db, const char *sid, int64_t deadline_ms)
{
    char node[RX_UUID_LEN];
    PGresult *r;
    int n;

    cluster__node(c, node);
    r = cluster__call(
        c, db,
        "INSERT INTO owners(session_id, node, since)"
        " SELECT $1, $2, clock_timestamp() WHERE EXISTS (SELECT 1 FROM sessions WHERE"
        " id = $1) AND EXISTS (SELECT 1 FROM nodes WHERE id = $2 AND expires_at >"
        " clock_timestamp())"
        " ON CONFLICT (session_id) DO UPDATE SET node = EXCLUDED.node, since ="
        " EXCLUDED.since WHERE owners.node = EXCLUDED.node OR NOT EXISTS (SELECT 1 FROM"
        " nodes n WHERE n.id = owners.node AND n.expires_at > clock_timestamp())"
        " RETURNING 1",
        2, (const char *[]){sid, node}, PGRES_TUPLES_OK, deadline_ms);
    if (!r)
        return -EIO;
    n = PQntuples(r);
    PQclear(r);
    return n ? 0 : -EBUSY;
}

/* After a claim committed: the session in memory follows the log, then acts. */
static int take(struct cluster *c, const char *sid)
{
    /* Not in memory (made elsewhere, or cold): read it now. */
    struct session *s = session_table_get(c->table, sid);
    int err;

    if (!s)
        return -ENOENT;
    err = session_take(s);
    session_unref(s);
    return err;
}

int cluster_claim(struct cluster *c, const char *sid)
{
    int err;

    if (lease_left(c) <= 0)
        return -EIO;
    pthread_mutex_lock(&c->api_lock);
    err = claim_row(c, &c->api, sid, now_mono_ms() + CLUSTER_DB_WAIT_MS);
    pthread_mutex_unlock(&c->api_lock);
    if (err == -EBUSY) {
        struct session *s = session_table_get(c->table, sid);

        if (!s)
            return -ENOENT;
        session_unref(s);
    }
    return err ? err : take(c, sid);
}

void cluster_touched(void *cluster, const char *sid)
{
    struct cluster *c = cluster;
    int err;

    /* Before cluster_run (the start-up's loads) the scan claims: it runs first. */
    if (!__atomic_load_n(&c->table, __ATOMIC_ACQUIRE))
        return;
    err = cluster_claim(c, sid);

    if (err && err != -EBUSY && err != -ENOENT)
        log_debug("cluster: session %s: not claimed on its touch: %s", sid,
                  strerror(-err));
}

int cluster_owner_url(struct cluster *c, const char *sid, char **url)
{
    char node[RX_UUID_LEN];
    PGresult *r;
    int err = -ENOENT;

    *url = NULL;
    cluster__node(c, node);
    pthread_mutex_lock(&c->api_lock);
    r = cluster__call(
        c, &c->api,
        "SELECT n.url FROM owners o JOIN nodes n ON n.id = o.node WHERE"
        " o.session_id = $1 AND n.expires_at > clock_timestamp() AND n.id <> $2",
        2, (const char *[]){sid, node}, PGRES_TUPLES_OK,
        now_mono_ms() + CLUSTER_DB_WAIT_MS);
    pthread_mutex_unlock(&c->api_lock);
    if (!r)
        return -EIO;
    if (PQntuples(r) && !PQgetisnull(r, 0, 0))
        err = (*url = strdup(PQgetvalue(r, 0, 0))) ? 0 : -ENOMEM;
    PQclear(r);
    return err;
}

/* ---- the lease thread: renew, then own what is ours and nobody's ------------------- */

/* The sessions the owners table gives this node, sorted for bsearch. */
struct owned {
    char **ids;
    size_t n;
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void drop_one(struct session *s, void *arg)
{
    (void)arg;
    session_drop(s);
}

/*
 * Whether another node's row names `sid` now: the list of this node's
 * sessions was read before, and a session made here since is in the table
 * but not in that list. ctl_lock held.
 */
static bool owned_elsewhere(struct cluster *c, const char *sid)
{
    char node[RX_UUID_LEN];
    PGresult *r;
    bool other;

    cluster__node(c, node);
    r = cluster__call(c, &c->ctl,
                      "SELECT 1 FROM owners WHERE session_id = $1 AND node <> $2", 2,
                      (const char *[]){sid, node}, PGRES_TUPLES_OK, scan_deadline(c));
    other = r && PQntuples(r);
    PQclear(r);
    return other;
}

struct align {
    struct cluster *c;
    const struct owned *mine;
};

/* The table's view brought in line with the owners rows: take, or drop. */
static void align_one(struct session *s, void *arg)
{
    const struct align *a = arg;
    const struct owned *o = a->mine;
    const char *id = session_id(s);
    bool mine = o->n && bsearch(&id, o->ids, o->n, sizeof(char *), cmp_str);

    if (mine) {
        /* Also an owned one that a failed write left broken: it reloads. */
        int err = session_take(s);

        if (err)
            log_warn("cluster: session %s: cannot take it over yet: %s", id,
                     strerror(-err));
    } else if (!session_is_follower(s) && owned_elsewhere(a->c, id)) {
        session_drop(s);
    }
}

/* Result rows' first column as strings (malloc'd), sorted. */
static int rows_strings(PGresult *r, struct owned *o)
{
    o->n = 0;
    if (!(o->ids = calloc((size_t)PQntuples(r) + 1, sizeof(char *))))
        return -ENOMEM;
    for (int i = 0; i < PQntuples(r); i++)
        if (!(o->ids[o->n++] = strdup(PQgetvalue(r, i, 0))))
            return -ENOMEM;
    qsort(o->ids, o->n, sizeof(char *), cmp_str);
    return 0;
}

static void owned_free(struct owned *o)
{
    for (size_t i = 0; i < o->n; i++)
        free(o->ids[i]);
    free(o->ids);
    o->ids = NULL;
    o->n = 0;
}

/*
 * During a long scan: renew once half the lease is gone, as the lease
 * thread's loop would (ctl_lock held). False when the lease lapsed: this
 * node owns nothing now, the others claim what it claimed.
 */
static bool keep_lease(struct cluster *c)
{
    int rc;

    if (lease_left(c) > c->cfg->cluster_lease_ms / 2)
        return true;
    rc = node_renew(c);
    return rc > 0 || (rc < 0 && lease_left(c) > 0); /* slow, not lapsed: go on */
}

/* Claim orphans (no owner, or one whose lease lapsed), then align the table. */
static void scan(struct cluster *c)
{
    struct owned orphans = {NULL, 0}, mine = {NULL, 0};
    char node[RX_UUID_LEN];
    PGresult *r;

    cluster__node(c, node);
    pthread_mutex_lock(&c->ctl_lock);
    r = cluster__call(c, &c->ctl,
                      "SELECT s.id FROM sessions s LEFT JOIN owners o ON o.session_id ="
                      " s.id WHERE s.busy AND (o.node IS NULL OR NOT EXISTS (SELECT 1"
                      " FROM nodes n WHERE n.id = o.node AND n.expires_at >"
                      " clock_timestamp())) ORDER BY random() LIMIT " CLAIM_BATCH,
                      0, NULL, PGRES_TUPLES_OK, scan_deadline(c));
    if (r && !rows_strings(r, &orphans))
        for (size_t i = 0; i < orphans.n && lease_left(c) > 0; i++)
            (void)claim_row(c, &c->ctl, orphans.ids[i], scan_deadline(c));
    PQclear(r);
    r = cluster__call(c, &c->ctl, "SELECT session_id FROM owners WHERE node = $1", 1,
                      (const char *[]){node}, PGRES_TUPLES_OK, scan_deadline(c));
    if (r && !rows_strings(r, &mine)) {
        /* Sessions this node now owns but has not heard of: read them first,
           the lease kept meanwhile (a batch of loads from a large store can
           take longer than it lasts). */
        for (size_t i = 0; i < orphans.n && keep_lease(c); i++) {
            struct session *s;

            if (!bsearch(&orphans.ids[i], mine.ids, mine.n, sizeof(char *), cmp_str))
                continue;
            if ((s = session_table_get(c->table, orphans.ids[i])))
                session_unref(s);
            else
                log_warn("cluster: session %s: cannot read it", orphans.ids[i]);
        }
        if (session_table_each(c->table, align_one, &(struct align){c, &mine}))
            log_warn("cluster: out of memory aligning sessions");
    }
    pthread_mutex_unlock(&c->ctl_lock);
    PQclear(r);
    owned_free(&orphans);
    owned_free(&mine);
}

/*
 * Renew every lease_ms / 4, and wake at the lease's end whatever the
 * database does: a node that cannot renew in time stops acting as an owner
 * at that moment (its calls are bounded by it), before anyone may claim.
 */
static void *lease_main(void *arg)
{
    struct cluster *c = arg;
    int64_t period = c->cfg->cluster_lease_ms / 4;
    bool owning = true;

    do {
        int rc;

        pthread_mutex_lock(&c->ctl_lock);
        rc = node_renew(c);
        if (rc == 0) {
            log_warn("cluster: this node's lease lapsed; it comes back as a new node");
            if (node_register(c))
                rc = -EIO;
        }
        pthread_mutex_unlock(&c->ctl_lock);
        if (lease_left(c) <= 0) {
            if (owning) {
                log_warn("cluster: no lease: every session becomes a follower");
                if (session_table_each(c->table, drop_one, NULL))
                    log_warn("cluster: out of memory dropping sessions");
            }
            owning = false;
            continue;
        }
        owning = true;
        if (rc >= 0)
            scan(c);
    } while (!cluster__nap(c, lease_left(c) > 0 && lease_left(c) < period ? lease_left(c)
                                                                          : period));
    return NULL;
}

/* ---- start and stop --------------------------------------------------------------- */

int cluster_start(const struct config *cfg, struct store *st, struct cluster **out,
                  struct rx_error *err)
{
    struct cluster *c = calloc(1, sizeof(*c));
    int rc;

    if (!c || !(c->conninfo = strdup(cfg->db_path))) {
        free(c);
        return rx_error_set(err, -ENOMEM, "cluster: out of memory");
    }
    c->cfg = cfg;
    c->store = st;
    c->qtail = &c->qhead;
    pthread_mutex_init(&c->ctl_lock, NULL);
    pthread_mutex_init(&c->api_lock, NULL);
    pthread_mutex_init(&c->hlock, NULL);
    pthread_mutex_init(&c->slock, NULL);
    pthread_cond_init(&c->scond, NULL);
    pthread_mutex_init(&c->qlock, NULL);
    pthread_cond_init(&c->qcond, NULL);
    pthread_mutex_lock(&c->ctl_lock);
    rc = node_register(c);
    pthread_mutex_unlock(&c->ctl_lock);
    if (rc) {
        rx_error_set(err, -EIO, "cluster: cannot register this node on '%s'",
                     "the database");
        cluster_stop(c);
        return -EIO;
    }
    *out = c;
    return 0;
}

int cluster_run(struct cluster *c, struct session_table *t)
{
    __atomic_store_n(&c->table, t, __ATOMIC_RELEASE);
    /* cluster_stop joins what started, whatever failed after it. */
    if (pthread_create(&c->listen_thread, NULL, cluster__listen_main, c))
        return -ENOMEM;
    c->started |= 1;
    if (pthread_create(&c->relay_thread, NULL, cluster__relay_main, c))
        return -ENOMEM;
    c->started |= 2;
    return 0;
}

int cluster_advertise(struct cluster *c, int port)
{
    char buf[96], *url;

    if (*c->cfg->cluster_advertise) {
        url = strdup(c->cfg->cluster_advertise);
    } else {
        snprintf(buf, sizeof(buf), "http://127.0.0.1:%d", port);
        url = strdup(buf);
    }
    if (!url)
        return -ENOMEM;
    pthread_mutex_lock(&c->hlock);
    free(c->url);
    c->url = url;
    pthread_mutex_unlock(&c->hlock);
    /* Written now, not at the next renewal: others relay to it from now on. */
    pthread_mutex_lock(&c->ctl_lock);
    if (node_renew(c) < 0)
        log_warn("cluster: cannot advertise %s yet; the next renewal will", url);
    pthread_mutex_unlock(&c->ctl_lock);
    /*
     * What is nobody's is owned from the lease thread's first turn, at once,
     * not after a lease period; but only now that the node listens. Its scan
     * loads each session in flight it claims (up to CLAIM_BATCH) under
     * ctl_lock: run before, in cluster_run, of three nodes started at once
     * on 100 000 stored chats, 100 in flight, the two that claimed listened
     * 0.2 s after the one that claimed none (bench/scale_pg.sh). Meanwhile a
     * touch claims what it loads (cluster_touched). Once only: SIGHUP does
     * not advertise again.
     */
    if (!(c->started & 4)) {
        if (pthread_create(&c->lease_thread, NULL, lease_main, c))
            return -ENOMEM;
        c->started |= 4;
    }
    return 0;
}

const char *cluster_url(struct cluster *c)
{
    const char *url;

    pthread_mutex_lock(&c->hlock);
    url = c->url ? c->url : "";
    pthread_mutex_unlock(&c->hlock);
    return url; /* set once before serving; freed only by cluster_stop */
}

bool cluster_may_act(void *cluster)
{
    return lease_left(cluster) > 0;
}

bool cluster_healthy(struct cluster *c, struct rx_error *why)
{
    bool ok;

    pthread_mutex_lock(&c->hlock);
    ok = now_mono_ms() < c->lease_until;
    if (why)
        snprintf(why->text, sizeof(why->text), "%s",
                 ok ? "" : (*c->why ? c->why : "this node's lease lapsed"));
    pthread_mutex_unlock(&c->hlock);
    return ok;
}

void cluster_stop(struct cluster *c)
{
    char node[RX_UUID_LEN];
    PGresult *r;

    if (!c)
        return;
    pthread_mutex_lock(&c->slock);
    c->stopping = true;
    pthread_cond_broadcast(&c->scond);
    pthread_mutex_unlock(&c->slock);
    pthread_mutex_lock(&c->qlock);
    c->qstop = true;
    pthread_cond_broadcast(&c->qcond);
    pthread_mutex_unlock(&c->qlock);
    if (c->started & 1)
        pthread_join(c->listen_thread, NULL);
    if (c->started & 2)
        pthread_join(c->relay_thread, NULL);
    if (c->started & 4)
        pthread_join(c->lease_thread, NULL);
    /* Leave at once: the others take the sessions over at their next scan. */
    cluster__node(c, node);
    r = c->ctl ? cluster__call(c, &c->ctl, "DELETE FROM nodes WHERE id = $1", 1,
                               (const char *[]){node}, PGRES_COMMAND_OK,
                               now_mono_ms() + CLUSTER_DB_WAIT_MS)
               : NULL;
    PQclear(r);
    PQfinish(c->ctl);
    PQfinish(c->api);
    cluster__relay_drain(c);
    pthread_cond_destroy(&c->qcond);
    pthread_mutex_destroy(&c->qlock);
    pthread_cond_destroy(&c->scond);
    pthread_mutex_destroy(&c->slock);
    pthread_mutex_destroy(&c->hlock);
    pthread_mutex_destroy(&c->api_lock);
    pthread_mutex_destroy(&c->ctl_lock);
    free(c->url);
    free(c->conninfo);
    free(c);
}
