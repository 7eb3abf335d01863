/*
 * cluster - many nodes on one PostgreSQL log. See cluster.h; the design and
 * its failure cases are in docs/ARCHITECTURE.md, "Beyond one machine".
 */
#include "server/cluster.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "effects/idgen.h"
#include "effects/log.h"
#include "effects/now.h"
#include "server/config.h"
#include "server/session.h"
#include "server/session_follow.h"
#include "server/session_table.h"
#include "server/store.h"

/* Bytes of deltas waiting to be relayed past which new ones are dropped. */
#define RELAY_QUEUE_MAX (4u << 20)
/* The most text one rx_tok notification carries (PostgreSQL's limit: 8000). */
#define RELAY_TEXT_MAX 7000
/* Orphans one scan claims: a node that comes up does not stall on thousands. */
#define CLAIM_BATCH "256"

struct relay_item {
    struct relay_item *next;
    char *sid, *mid;
    bool reasoning;
    size_t offset, len;
    char *text;
};

struct cluster {
    const struct config *cfg;
    struct store *store;
    struct session_table *table;
    char *conninfo;
    char *url; /* advertised; NULL until cluster_run */

    pthread_mutex_t lock; /* guards ctl, node, lease_until, why */
    PGconn *ctl;          /* leases and claims */
    char node[RX_UUID_LEN];
    int64_t lease_until; /* monotonic ms: this node may own until then */
    char why[RX_ERR_LEN];

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

/* ---- connections ------------------------------------------------------------------ */

/* The server's notices (a shutdown, say) go to the log, not to stderr. */
static void on_notice(void *arg, const char *message)
{
    (void)arg;
    log_debug("cluster: postgresql: %.*s", (int)strcspn(message, "\n"), message);
}

/*
 * A connection to the log's database whose waits are bounded: connect in 5 s,
 * a dead peer noticed by keepalives and tcp_user_timeout within ~10 s.
 */
static PGconn *db_connect(const char *conninfo)
{
    const char *keys[] = {"dbname",           "connect_timeout",     "keepalives",
                          "keepalives_idle",  "keepalives_interval", "keepalives_count",
                          "tcp_user_timeout", "application_name",    NULL};
    const char *vals[] = {conninfo,           "5", "1", "2", "2", "3", "9000",
                          "reflexor-cluster", NULL};
    PGconn *db = PQconnectdbParams(keys, vals, 1);

    if (db && PQstatus(db) != CONNECTION_OK) {
        PQfinish(db);
        return NULL;
    }
    if (db)
        PQsetNoticeProcessor(db, on_notice, NULL);
    return db;
}

/* One statement with text parameters; its result (PQclear it) or NULL. */
static PGresult *db_exec(PGconn *db, const char *sql, int n, const char *const *params,
                         ExecStatusType want)
{
    PGresult *r;

    if (!db)
        return NULL;
    r = PQexecParams(db, sql, n, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != want) {
        log_debug("cluster: %s", PQerrorMessage(db));
        PQclear(r);
        return NULL;
    }
    return r;
}

/* The control connection, reconnected when lost. Lock held. */
static PGconn *ctl_conn(struct cluster *c)
{
    if (c->ctl && PQstatus(c->ctl) == CONNECTION_OK)
        return c->ctl;
    PQfinish(c->ctl);
    c->ctl = db_connect(c->conninfo);
    return c->ctl;
}

/* ---- leases ----------------------------------------------------------------------- */

/* A new incarnation: a fresh id with a lease. Lock held. 0 or -EIO. */
static int node_register(struct cluster *c)
{
    char lease[24], fresh[RX_UUID_LEN];
    int64_t t0 = now_mono_ms();
    PGresult *r;

    idgen_uuid(fresh);
    snprintf(lease, sizeof(lease), "%d", c->cfg->cluster_lease_ms);
    r = db_exec(ctl_conn(c),
                "INSERT INTO nodes(id, url, expires_at) VALUES($1, $2,"
                " clock_timestamp() + $3::int * interval '1 millisecond')",
                3, (const char *[]){fresh, c->url, lease}, PGRES_COMMAND_OK);
    if (!r)
        return -EIO;
    PQclear(r);
    memcpy(c->node, fresh, sizeof(fresh));
    c->lease_until = t0 + c->cfg->cluster_lease_ms;
    store_set_node(c->store, c->node);
    log_info("cluster: node %s, lease %d ms", c->node, c->cfg->cluster_lease_ms);
    return 0;
}

/*
 * Renew the lease: 1 renewed, 0 lapsed (this incarnation is over), -EIO
 * (the database cannot say). Lock held.
 */
static int node_renew(struct cluster *c)
{
    char lease[24];
    int64_t t0 = now_mono_ms();
    PGresult *r;
    int n;

    snprintf(lease, sizeof(lease), "%d", c->cfg->cluster_lease_ms);
    r = db_exec(
        ctl_conn(c),
        "UPDATE nodes SET expires_at = clock_timestamp() + $2::int * interval"
        " '1 millisecond', url = $3 WHERE id = $1 AND expires_at > clock_timestamp()",
        3, (const char *[]){c->node, lease, c->url}, PGRES_COMMAND_OK);
    if (!r)
        return -EIO;
    n = atoi(PQcmdTuples(r));
    PQclear(r);
    if (n)
        c->lease_until = t0 + c->cfg->cluster_lease_ms;
    return n ? 1 : 0;
}

/* Whether this node may act as an owner now (its lease has not lapsed). */
static bool lease_valid(struct cluster *c)
{
    bool ok;

    pthread_mutex_lock(&c->lock);
    ok = now_mono_ms() < c->lease_until;
    pthread_mutex_unlock(&c->lock);
    return ok;
}

/* ---- claims ----------------------------------------------------------------------- */

/*
 * Make the owners row of `sid` name this node, when it names no live one.
 * The update waits for a stale owner's write in flight (its share lock on
 * the row) and the caller reads the log after: fencing. 0, -EBUSY (a live
 * node owns it), -ENOENT, -EIO. Lock held.
 */
static int claim_row(struct cluster *c, const char *sid)
{
    PGresult *r = db_exec(
        ctl_conn(c),
        "INSERT INTO owners(session_id, node, since)"
        " SELECT $1, $2, clock_timestamp() WHERE EXISTS (SELECT 1 FROM sessions WHERE"
        " id = $1) AND EXISTS (SELECT 1 FROM nodes WHERE id = $2 AND expires_at >"
        " clock_timestamp())"
        " ON CONFLICT (session_id) DO UPDATE SET node = EXCLUDED.node, since ="
        " EXCLUDED.since WHERE owners.node = EXCLUDED.node OR NOT EXISTS (SELECT 1 FROM"
        " nodes n WHERE n.id = owners.node AND n.expires_at > clock_timestamp())"
        " RETURNING 1",
        2, (const char *[]){sid, c->node}, PGRES_TUPLES_OK);
    int n;

    if (!r)
        return -EIO;
    n = PQntuples(r);
    PQclear(r);
    return n ? 0 : -EBUSY;
}

/* After a claim committed: the session in memory follows the log, then acts. */
static int take(struct cluster *c, const char *sid)
{
    struct session *s = session_table_get(c->table, sid);
    int err;

    if (!s) {
        /* Made elsewhere, not heard of yet: read it now. */
        if ((err = session_table_adopt(c->table, sid)) && err != -EEXIST)
            return err;
        if (!(s = session_table_get(c->table, sid)))
            return -ENOENT;
    }
    err = session_take(s);
    session_unref(s);
    return err;
}

int cluster_claim(struct cluster *c, const char *sid)
{
    int err;

    if (!lease_valid(c))
        return -EIO;
    pthread_mutex_lock(&c->lock);
    err = claim_row(c, sid);
    pthread_mutex_unlock(&c->lock);
    if (err == -EBUSY) {
        struct session *s = session_table_get(c->table, sid);

        if (!s)
            return -ENOENT;
        session_unref(s);
    }
    return err ? err : take(c, sid);
}

int cluster_owner_url(struct cluster *c, const char *sid, char **url)
{
    PGresult *r;
    int err = -ENOENT;

    *url = NULL;
    pthread_mutex_lock(&c->lock);
    r = db_exec(ctl_conn(c),
                "SELECT n.url FROM owners o JOIN nodes n ON n.id = o.node WHERE"
                " o.session_id = $1 AND n.expires_at > clock_timestamp() AND n.id <> $2",
                2, (const char *[]){sid, c->node}, PGRES_TUPLES_OK);
    pthread_mutex_unlock(&c->lock);
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

/* The table's view brought in line with the owners rows: take, or drop. */
static void align_one(struct session *s, void *arg)
{
    const struct owned *o = arg;
    const char *id = session_id(s);
    bool mine = o->n && bsearch(&id, o->ids, o->n, sizeof(char *), cmp_str);

    if (mine) {
        /* Also an owned one that a failed write left broken: it reloads. */
        int err = session_take(s);

        if (err)
            log_warn("cluster: session %s: cannot take it over yet: %s", id,
                     strerror(-err));
    } else if (!session_is_follower(s)) {
        session_drop(s);
    }
}

/* Result rows' first column as strings (malloc'd). */
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

/* Claim orphans (no owner, or one whose lease lapsed), then align the table. */
static void scan(struct cluster *c)
{
    struct owned orphans = {NULL, 0}, mine = {NULL, 0};
    PGresult *r;

    pthread_mutex_lock(&c->lock);
    r = db_exec(ctl_conn(c),
                "SELECT s.id FROM sessions s LEFT JOIN owners o ON o.session_id = s.id"
                " WHERE o.node IS NULL OR NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id ="
                " o.node AND n.expires_at > clock_timestamp()) ORDER BY random() "
                "LIMIT " CLAIM_BATCH,
                0, NULL, PGRES_TUPLES_OK);
    if (r && !rows_strings(r, &orphans))
        for (size_t i = 0; i < orphans.n; i++)
            (void)claim_row(c, orphans.ids[i]);
    PQclear(r);
    r = db_exec(ctl_conn(c), "SELECT session_id FROM owners WHERE node = $1", 1,
                (const char *[]){c->node}, PGRES_TUPLES_OK);
    pthread_mutex_unlock(&c->lock);
    if (r && !rows_strings(r, &mine)) {
        /* Sessions this node now owns but has not heard of: read them first. */
        for (size_t i = 0; i < orphans.n; i++) {
            struct session *s;

            if (!bsearch(&orphans.ids[i], mine.ids, mine.n, sizeof(char *), cmp_str))
                continue;
            if ((s = session_table_get(c->table, orphans.ids[i])))
                session_unref(s);
            else if (session_table_adopt(c->table, orphans.ids[i]) < 0)
                log_warn("cluster: session %s: cannot read it", orphans.ids[i]);
        }
        if (session_table_each(c->table, align_one, &mine))
            log_warn("cluster: out of memory aligning sessions");
    }
    PQclear(r);
    owned_free(&orphans);
    owned_free(&mine);
}

/* Sleep up to `ms`, or until stop. True when stopping. */
static bool nap(struct cluster *c, int64_t ms)
{
    struct timespec ts;
    bool stop;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&c->slock);
    if (!c->stopping)
        pthread_cond_timedwait(&c->scond, &c->slock, &ts);
    stop = c->stopping;
    pthread_mutex_unlock(&c->slock);
    return stop;
}

static void *lease_main(void *arg)
{
    struct cluster *c = arg;
    int64_t period = c->cfg->cluster_lease_ms / 4;
    bool owning = true;

    do {
        int rc;

        pthread_mutex_lock(&c->lock);
        rc = node_renew(c);
        if (rc == 0 && owning) {
            log_warn("cluster: node %s: lease lapsed; its sessions go to others",
                     c->node);
        }
        if (rc == 0 && node_register(c))
            rc = -EIO;
        else if (rc == 0)
            rc = 1;
        if (rc < 0)
            snprintf(c->why, sizeof(c->why), "the database does not answer: %s",
                     c->ctl ? PQerrorMessage(c->ctl) : "cannot connect");
        else
            c->why[0] = '\0';
        pthread_mutex_unlock(&c->lock);
        if (rc < 0 || !lease_valid(c)) {
            /* Nothing says this node still owns anything: stop acting. */
            if (owning && !lease_valid(c)) {
                log_warn("cluster: no lease: every session becomes a follower");
                if (session_table_each(c->table, drop_one, NULL))
                    log_warn("cluster: out of memory dropping sessions");
                owning = false;
            }
            continue;
        }
        owning = true;
        scan(c);
    } while (!nap(c, period));
    return NULL;
}

/* ---- the listen thread: the log's commits, tokens and sessions of others ---------- */

/* "<sid> <seq>[ <text>]" */
static void on_log(struct cluster *c, char *p)
{
    char *sp = strchr(p, ' '), *text;
    struct session *s;
    int64_t seq;

    if (!sp)
        return;
    *sp = '\0';
    seq = strtoll(sp + 1, &text, 10);
    text = *text == ' ' ? text + 1 : NULL;
    if (!(s = session_table_get(c->table, p))) {
        /* Not heard of yet: reading it whole takes this input too. */
        if (session_table_adopt(c->table, p) < 0)
            log_debug("cluster: input %lld of unknown session %s", (long long)seq, p);
        return;
    }
    if (session_follow_input(s, seq, text, text ? strlen(text) : 0))
        log_warn("cluster: session %s: cannot follow input %lld", p, (long long)seq);
    session_unref(s);
}

/* "<sid> <mid> <t|r> <offset> <text>" */
static void on_token(struct cluster *c, char *p)
{
    char *f[4], *rest = p, *end;
    struct session *s;
    size_t off;

    for (int i = 0; i < 4; i++) {
        f[i] = rest;
        if (!(rest = strchr(rest, ' ')))
            return;
        *rest++ = '\0';
    }
    off = strtoull(f[3], &end, 10);
    if (*end || !(s = session_table_get(c->table, f[0])))
        return;
    session_follow_token(s, f[1], f[2][0] == 'r', off, rest, strlen(rest));
    session_unref(s);
}

/*
 * Whether this node made the session (its owners row names it): then the
 * table lists it as the owner's, and adopting it as a follower would race.
 */
static bool made_here(struct cluster *c, const char *sid)
{
    PGresult *r;
    bool mine;

    pthread_mutex_lock(&c->lock);
    r = db_exec(ctl_conn(c), "SELECT 1 FROM owners WHERE session_id = $1 AND node = $2",
                2, (const char *[]){sid, c->node}, PGRES_TUPLES_OK);
    pthread_mutex_unlock(&c->lock);
    mine = r && PQntuples(r);
    PQclear(r);
    return mine;
}

/* "created|deleted|title <sid>" */
static void on_session(struct cluster *c, char *p)
{
    char *sid = strchr(p, ' ');

    if (!sid)
        return;
    *sid++ = '\0';
    if (!strcmp(p, "created")) {
        int err = made_here(c, sid) ? 0 : session_table_adopt(c->table, sid);

        if (err && err != -EEXIST)
            log_warn("cluster: session %s made elsewhere: cannot read it", sid);
    } else if (!strcmp(p, "deleted")) {
        session_table_forget(c->table, sid);
    } else if (!strcmp(p, "title")) {
        session_table_retitle(c->table, sid);
    }
}

static void catchup_one(struct session *s, void *arg)
{
    (void)arg;
    if (session_follow_catchup(s))
        log_warn("cluster: session %s: cannot catch up with the log", session_id(s));
}

/* After a gap in the notifications: what was missed, from the database. */
static void resync(struct cluster *c, PGconn *db)
{
    PGresult *r = db_exec(db, "SELECT id FROM sessions", 0, NULL, PGRES_TUPLES_OK);

    for (int i = 0; r && i < PQntuples(r); i++) {
        struct session *s = session_table_get(c->table, PQgetvalue(r, i, 0));

        if (s)
            session_unref(s);
        else if (session_table_adopt(c->table, PQgetvalue(r, i, 0)) < 0)
            log_warn("cluster: session %s: cannot read it", PQgetvalue(r, i, 0));
    }
    PQclear(r);
    if (session_table_each(c->table, catchup_one, NULL))
        log_warn("cluster: out of memory catching up");
}

static PGconn *listen_connect(struct cluster *c)
{
    PGconn *db = db_connect(c->conninfo);
    PGresult *r;

    if (!db)
        return NULL;
    r = PQexec(db, "LISTEN rx_log; LISTEN rx_tok; LISTEN rx_sess");
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        PQclear(r);
        PQfinish(db);
        return NULL;
    }
    PQclear(r);
    resync(c, db);
    return db;
}

static void *listen_main(void *arg)
{
    struct cluster *c = arg;
    PGconn *db = NULL;
    int64_t backoff = 100;

    for (;;) {
        struct pollfd pfd;
        PGnotify *n;

        if (!db && !(db = listen_connect(c))) {
            if (nap(c, backoff))
                break;
            backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
            continue;
        }
        backoff = 100;
        pfd.fd = PQsocket(db);
        pfd.events = POLLIN;
        if (poll(&pfd, 1, 250) < 0 || !PQconsumeInput(db)) {
            log_warn("cluster: listen connection lost: %s", PQerrorMessage(db));
            PQfinish(db);
            db = NULL;
            continue;
        }
        while ((n = PQnotifies(db))) {
            if (!strcmp(n->relname, "rx_log"))
                on_log(c, n->extra);
            else if (!strcmp(n->relname, "rx_tok"))
                on_token(c, n->extra);
            else if (!strcmp(n->relname, "rx_sess"))
                on_session(c, n->extra);
            PQfreemem(n);
        }
        if (nap(c, 0))
            break;
    }
    PQfinish(db);
    return NULL;
}

/* ---- the relay thread: owned answers' tokens to the other nodes ------------------- */

static void item_free(struct relay_item *it)
{
    free(it->sid);
    free(it->mid);
    free(it->text);
    free(it);
}

void cluster_relay(void *cluster, const char *sid, const char *mid, bool reasoning,
                   size_t offset, const char *delta, size_t len)
{
    struct cluster *c = cluster;
    struct relay_item *it;

    if (!len || len > RELAY_TEXT_MAX)
        return; /* too long for one notification: the completion carries it */
    pthread_mutex_lock(&c->qlock);
    if (c->qbytes + len > RELAY_QUEUE_MAX || !(it = calloc(1, sizeof(*it)))) {
        pthread_mutex_unlock(&c->qlock);
        return;
    }
    it->sid = strdup(sid);
    it->mid = strdup(mid);
    it->text = strndup(delta, len);
    it->reasoning = reasoning;
    it->offset = offset;
    it->len = len;
    if (!it->sid || !it->mid || !it->text) {
        pthread_mutex_unlock(&c->qlock);
        item_free(it);
        return;
    }
    *c->qtail = it;
    c->qtail = &it->next;
    c->qbytes += len;
    pthread_cond_signal(&c->qcond);
    pthread_mutex_unlock(&c->qlock);
}

/* Deltas that follow each other in one answer go as one notification. */
static void relay_send(PGconn *db, struct relay_item *list)
{
    struct rx_buf b;

    rx_buf_init(&b, RELAY_TEXT_MAX + 512);
    while (list) {
        struct relay_item *it = list, *nx;
        size_t end = it->offset + it->len;
        PGresult *r;

        rx_buf_reset(&b);
        if (rx_buf_printf(&b, "%s %s %c %zu ", it->sid, it->mid,
                          it->reasoning ? 'r' : 't', it->offset) ||
            rx_buf_append(&b, it->text, it->len))
            break;
        list = it->next;
        while ((nx = list) && nx->offset == end && nx->reasoning == it->reasoning &&
               !strcmp(nx->sid, it->sid) && !strcmp(nx->mid, it->mid) &&
               b.len + nx->len <= RELAY_TEXT_MAX &&
               !rx_buf_append(&b, nx->text, nx->len)) {
            end += nx->len;
            list = nx->next;
            item_free(nx);
        }
        item_free(it);
        if (rx_buf_putc(&b, '\0'))
            break;
        r = db_exec(db, "SELECT pg_notify('rx_tok', $1)", 1, (const char *[]){b.data},
                    PGRES_TUPLES_OK);
        PQclear(r);
    }
    rx_buf_release(&b);
    while (list) {
        struct relay_item *nx = list->next;

        item_free(list);
        list = nx;
    }
}

static void *relay_main(void *arg)
{
    struct cluster *c = arg;
    PGconn *db = NULL;

    for (;;) {
        struct relay_item *list;
        bool stop;

        pthread_mutex_lock(&c->qlock);
        while (!c->qhead && !c->qstop)
            pthread_cond_wait(&c->qcond, &c->qlock);
        list = c->qhead;
        c->qhead = NULL;
        c->qtail = &c->qhead;
        c->qbytes = 0;
        stop = c->qstop;
        pthread_mutex_unlock(&c->qlock);
        if (list) {
            if (!db || PQstatus(db) != CONNECTION_OK) {
                PQfinish(db);
                db = db_connect(c->conninfo);
            }
            relay_send(db, list);
        }
        if (stop)
            break;
    }
    PQfinish(db);
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
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->slock, NULL);
    pthread_cond_init(&c->scond, NULL);
    pthread_mutex_init(&c->qlock, NULL);
    pthread_cond_init(&c->qcond, NULL);
    pthread_mutex_lock(&c->lock);
    rc = node_register(c);
    pthread_mutex_unlock(&c->lock);
    if (rc) {
        rx_error_set(err, -EIO, "cluster: cannot register this node: %s",
                     c->ctl ? PQerrorMessage(c->ctl) : "cannot connect");
        cluster_stop(c);
        return -EIO;
    }
    *out = c;
    return 0;
}

int cluster_run(struct cluster *c, struct session_table *t, int port)
{
    char buf[96];

    c->table = t;
    if (*c->cfg->cluster_advertise) {
        c->url = strdup(c->cfg->cluster_advertise);
    } else {
        snprintf(buf, sizeof(buf), "http://127.0.0.1:%d", port);
        c->url = strdup(buf);
    }
    if (!c->url)
        return -ENOMEM;
    /* cluster_stop joins what started, whatever failed after it. */
    if (pthread_create(&c->listen_thread, NULL, listen_main, c))
        return -ENOMEM;
    c->started |= 1;
    if (pthread_create(&c->relay_thread, NULL, relay_main, c))
        return -ENOMEM;
    c->started |= 2;
    if (pthread_create(&c->lease_thread, NULL, lease_main, c))
        return -ENOMEM;
    c->started |= 4;
    return 0;
}

const char *cluster_url(struct cluster *c)
{
    return c->url;
}

const char *cluster_node(struct cluster *c)
{
    return c->node;
}

bool cluster_healthy(struct cluster *c, struct rx_error *why)
{
    bool ok;

    pthread_mutex_lock(&c->lock);
    ok = now_mono_ms() < c->lease_until;
    if (why)
        snprintf(why->text, sizeof(why->text), "%s",
                 ok ? "" : (*c->why ? c->why : "this node's lease lapsed"));
    pthread_mutex_unlock(&c->lock);
    return ok;
}

void cluster_stop(struct cluster *c)
{
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
    pthread_mutex_lock(&c->lock);
    r = c->ctl ? db_exec(c->ctl, "DELETE FROM nodes WHERE id = $1", 1,
                         (const char *[]){c->node}, PGRES_COMMAND_OK)
               : NULL;
    PQclear(r);
    PQfinish(c->ctl);
    pthread_mutex_unlock(&c->lock);
    for (struct relay_item *it = c->qhead, *nx; it; it = nx) {
        nx = it->next;
        item_free(it);
    }
    pthread_cond_destroy(&c->qcond);
    pthread_mutex_destroy(&c->qlock);
    pthread_cond_destroy(&c->scond);
    pthread_mutex_destroy(&c->slock);
    pthread_mutex_destroy(&c->lock);
    free(c->url);
    free(c->conninfo);
    free(c);
}
