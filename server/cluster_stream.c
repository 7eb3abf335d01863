/*
 * cluster_stream - the listen thread (the log's commits, tokens and sessions
 * of the other nodes, applied to this node's followers) and the relay thread
 * (this node's answer tokens to the others). See cluster.h.
 */
#include "server/cluster_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "base/now.h"
#include "server/session.h"
#include "server/session_follow.h"
#include "server/session_table.h"
#include "store/store.h"
#include "state_machine/rx_buf.h"

/* Bytes of deltas waiting to be relayed past which new ones are dropped. */
#define RELAY_QUEUE_MAX (4u << 20)
/* The most text one rx_tok notification carries (PostgreSQL's limit: 8000). */
#define RELAY_TEXT_MAX 7000

struct relay_item {
    struct relay_item *next;
    char *sid, *mid;
    bool reasoning;
    size_t offset, len;
    char *text;
};

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
    /* Not in memory: its next touch reads it whole, this input too (SPEC 6.2). */
    if (!(s = session_table_peek(c->table, p)))
        return;
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
    if (*end || !(s = session_table_peek(c->table, f[0])))
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
    char node[RX_UUID_LEN];
    PGresult *r;
    bool mine;

    cluster__node(c, node);
    pthread_mutex_lock(&c->api_lock);
    r = cluster__call(
        c, &c->api, "SELECT 1 FROM owners WHERE session_id = $1 AND node = $2", 2,
        (const char *[]){sid, node}, PGRES_TUPLES_OK, now_mono_ms() + CLUSTER_DB_WAIT_MS);
    pthread_mutex_unlock(&c->api_lock);
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

/* A resync's walk over the sessions in memory: catch up, forget what the log lost. */
struct resync {
    struct cluster *c;
    bool failed; /* something could not be read: try again later */
};

static void resync_one(struct session *s, void *arg)
{
    struct resync *rs = arg;
    const char *id = session_id(s);
    int64_t created;
    int err = store_session_created(rs->c->store, id, &created);

    if (err == -ENOENT) {
        session_table_forget(rs->c->table, id); /* deleted meanwhile */
        return;
    }
    if (err || session_follow_catchup(s)) {
        log_warn("cluster: session %s: cannot catch up with the log yet", id);
        rs->failed = true;
    }
}

/*
 * After a gap in the notifications (the listen connection was lost): what
 * was missed, from the database, for the sessions in memory (SPEC 6.2: the
 * others are read whole at their next touch). False when some of it could
 * not be read: the caller tries again.
 */
static bool resync(struct cluster *c)
{
    struct resync rs = {c, false};

    if (session_table_each(c->table, resync_one, &rs))
        rs.failed = true;
    return !rs.failed;
}

static PGconn *listen_connect(struct cluster *c)
{
    PGconn *db = cluster__connect(c->conninfo, now_mono_ms() + CLUSTER_DB_WAIT_MS);
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
    return db;
}

void *cluster__listen_main(void *arg)
{
    struct cluster *c = arg;
    PGconn *db = NULL;
    int64_t backoff = 100, resync_at = -1; /* -1: none due */

    for (;;) {
        struct pollfd pfd;
        PGnotify *n;

        if (!db && !(db = listen_connect(c))) {
            if (cluster__nap(c, backoff))
                break;
            backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
            continue;
        }
        if (resync_at < 0 && backoff) /* just (re)connected, LISTEN on */
            resync_at = 0;
        backoff = 0;
        /* After LISTEN, so nothing committed since is missed; again until
           everything could be read (the database may be half back). */
        if (resync_at >= 0 && now_mono_ms() >= resync_at)
            resync_at = resync(c) ? -1 : now_mono_ms() + 1000;
        pfd.fd = PQsocket(db);
        pfd.events = POLLIN;
        if (poll(&pfd, 1, 250) < 0 || !PQconsumeInput(db)) {
            log_warn("cluster: listen connection lost: %s", PQerrorMessage(db));
            PQfinish(db);
            db = NULL;
            backoff = 100;
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
        if (cluster__nap(c, 0))
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
static bool relay_stopping(struct cluster *c)
{
    bool stop;

    pthread_mutex_lock(&c->qlock);
    stop = c->qstop;
    pthread_mutex_unlock(&c->qlock);
    return stop;
}

static void relay_send(struct cluster *c, PGconn **db, struct relay_item *list)
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
        r = cluster__call(c, db, "SELECT pg_notify('rx_tok', $1)", 1,
                          (const char *[]){b.data}, PGRES_TUPLES_OK,
                          now_mono_ms() + CLUSTER_DB_WAIT_MS);
        /* Tokens are best effort (the completed message is the truth): when
           the database does not take one, or the node stops, drop the rest
           rather than wait a deadline for each. */
        if (!r || relay_stopping(c))
            break;
        PQclear(r);
    }
    rx_buf_release(&b);
    while (list) {
        struct relay_item *nx = list->next;

        item_free(list);
        list = nx;
    }
}

void *cluster__relay_main(void *arg)
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
        if (list)
            relay_send(c, &db, list);
        if (stop)
            break;
    }
    PQfinish(db);
    return NULL;
}

void cluster__relay_drain(struct cluster *c)
{
    for (struct relay_item *it = c->qhead, *nx; it; it = nx) {
        nx = it->next;
        item_free(it);
    }
    c->qhead = NULL;
    c->qtail = &c->qhead;
}
