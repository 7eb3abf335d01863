/*
 * pg_store_conn - the store's connections to PostgreSQL: connecting with
 * bounded waits, reconnecting with backoff, and the one way a statement is
 * run (bounded in time, its error turned into an errno), transactions and
 * results. See pg_store.h; shared through pg_store_internal.h.
 */
#include "base/now.h"
#include "store/pg/pg_store_internal.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

/* ---- connections ------------------------------------------------------------ */

/*
 * Connect. Our bounds first, the caller's string after: expanded in place
 * of dbname, its own settings win. connect_timeout bounds a connection
 * attempt; keepalives and tcp_user_timeout a peer that vanished (TCP; a
 * Unix socket fails at once). Together every wait stays under 10 s.
 */
static PGconn *connect_db(const char *conninfo)
{
    static const char *const keys[] = {
        "connect_timeout",     "keepalives",       "keepalives_idle",
        "keepalives_interval", "keepalives_count", "tcp_user_timeout",
        "application_name",    "dbname",           NULL};
    const char *vals[] = {"5", "1", "3", "1", "3", "8000", "reflexor", conninfo, NULL};

    return PQconnectdbParams(keys, vals, 1);
}

static void ignore_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

void pg_store__conn_drop(struct pg_store *pg, struct pg_conn *pc, const char *why)
{
    /* `why` may be libpq's own message of this connection: said before it goes. */
    pg_store__mark_down(pg, pc->name, why);
    PQfinish(pc->c);
    pc->c = NULL;
    /* The first attempt again at once (a restarted server is back), then backoff. */
    pc->retry_at_ms = 0;
    pc->backoff_ms = PG_STORE_BACKOFF_MIN_MS;
}

bool pg_store__conn_lost(const struct pg_conn *pc)
{
    return !pc->c || PQstatus(pc->c) != CONNECTION_OK;
}

int pg_store__conn_get(struct pg_store *pg, struct pg_conn *pc)
{
    char msg[RX_ERR_LEN];
    PGconn *c;

    if (pc->c && PQstatus(pc->c) == CONNECTION_OK)
        return 0;
    if (pc->c)
        pg_store__conn_drop(pg, pc, PQerrorMessage(pc->c));
    if (now_mono_ms() < pc->retry_at_ms) {
        /* Down, and not yet time to try: fail fast with the reason. */
        pthread_mutex_lock(&pg->base.hlock);
        snprintf(pg->base.err, sizeof(pg->base.err), "%s", pg->why);
        pthread_mutex_unlock(&pg->base.hlock);
        return -EIO;
    }
    c = connect_db(pg->conninfo);
    if (!c || PQstatus(c) != CONNECTION_OK) {
        snprintf(msg, sizeof(msg), "%s", c ? PQerrorMessage(c) : "out of memory");
        PQfinish(c);
        pc->retry_at_ms = now_mono_ms() + pc->backoff_ms;
        pc->backoff_ms = pc->backoff_ms * 2 > PG_STORE_BACKOFF_MAX_MS
                             ? PG_STORE_BACKOFF_MAX_MS
                             : pc->backoff_ms * 2;
        pg_store__mark_down(pg, pc->name, msg);
        return -EIO;
    }
    /* Notices (a table that exists, an empty query) are not errors: not on stderr. */
    PQsetNoticeProcessor(c, ignore_notice, NULL);
    pc->c = c;
    pc->fresh = true;
    pc->retry_at_ms = 0;
    pc->backoff_ms = PG_STORE_BACKOFF_MIN_MS;
    pg_store__mark_up(pg);
    return 0;
}

/* SQLSTATEs of a server going away: class 08 and the shutdowns of 57P0x. */
static bool state_is_lost(const char *state)
{
    return state && (!strncmp(state, "08", 2) || !strncmp(state, "57P0", 4));
}

/*
 * PQexecParams with a deadline: a database that stops answering (frozen, or
 * a network that swallows packets, which keepalives do not see on a Unix
 * socket) costs a call at most PG_STORE_CALL_MS, not forever: a parked POST
 * gets its 503 and shutdown can drain. NULL on a timeout: the connection is
 * then unusable (its answer may still come) and the caller drops it. A
 * connection found lost gives an error result with no SQLSTATE, as libpq's
 * own errors do, so the caller may send a BEGIN or a read again.
 */
static PGresult *exec_by(PGconn *c, const char *sql, int n, const char *const *vals,
                         const int *lens, const int *bin)
{
    int64_t deadline = now_mono_ms() + PG_STORE_CALL_MS;
    PGresult *r, *last = NULL;

    if (!PQsendQueryParams(c, sql, n, NULL, vals, lens, bin, 0))
        return PQmakeEmptyPGresult(c, PGRES_FATAL_ERROR);
    for (;;) {
        while (PQisBusy(c)) {
            struct pollfd pfd = {PQsocket(c), POLLIN, 0};
            int64_t left = deadline - now_mono_ms();
            int ready = left > 0 ? poll(&pfd, 1, (int)left) : 0;

            if (ready < 0 && errno == EINTR)
                continue;
            if (ready <= 0) { /* no answer in time */
                PQclear(last);
                return NULL;
            }
            if (!PQconsumeInput(c)) { /* lost: an error like libpq's own */
                PQclear(last);
                return PQmakeEmptyPGresult(c, PGRES_FATAL_ERROR);
            }
        }
        if (!(r = PQgetResult(c)))
            return last;
        PQclear(last);
        last = r;
    }
}

/* Statements that change nothing until a later one commits: safe to send again. */
static bool resendable(const char *sql)
{
    return !strncmp(sql, "BEGIN", 5) || !strncmp(sql, "SELECT", 6);
}

int pg_store__exec(struct pg_store *pg, struct pg_conn *pc, const char *what,
                   const char *sql, int n, const char *const *vals, const int *lens,
                   const int *bin, PGresult **out)
{
    ExecStatusType status;
    char msg[RX_ERR_LEN], code[6] = "";
    const char *state = NULL;
    PGresult *r;
    bool idle;
    int err;

    if (out)
        *out = NULL;
    if ((err = pg_store__conn_get(pg, pc)))
        return err;
    idle =
        PQtransactionStatus(pc->c) == PQTRANS_IDLE; /* before: a dead one says UNKNOWN */
    r = exec_by(pc->c, sql, n, vals, lens, bin);
    if (!r) {
        store__set_error(&pg->base, "%s: the database did not answer within %d ms", what,
                         PG_STORE_CALL_MS);
        pg_store__conn_drop(pg, pc, "the database does not answer");
        return -EIO;
    }
    status = PQresultStatus(r);
    /* A connection that died while idle (the server restarted since the last
       call) is only found dead now. Nothing of a transaction was lost with
       it, so a BEGIN or a read goes again once, on a fresh connection,
       instead of failing the first request after every restart. */
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK && resendable(sql) &&
        (!r || !PQresultErrorField(r, PG_DIAG_SQLSTATE) ||
         state_is_lost(PQresultErrorField(r, PG_DIAG_SQLSTATE))) &&
        idle) {
        PQclear(r);
        pg_store__conn_drop(pg, pc, "the connection was lost; trying again");
        if ((err = pg_store__conn_get(pg, pc)))
            return err;
        if (!(r = exec_by(pc->c, sql, n, vals, lens, bin))) {
            pg_store__conn_drop(pg, pc, "the database does not answer");
            return -EIO;
        }
        status = PQresultStatus(r);
    }
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
        if (out)
            *out = r;
        else
            PQclear(r);
        return 0;
    }
    /* Copied: the result is cleared before it is looked at. */
    if (r && PQresultErrorField(r, PG_DIAG_SQLSTATE)) {
        snprintf(code, sizeof(code), "%s", PQresultErrorField(r, PG_DIAG_SQLSTATE));
        state = code;
    }
    snprintf(msg, sizeof(msg), "%s",
             r && *PQresultErrorMessage(r) ? PQresultErrorMessage(r)
                                           : PQerrorMessage(pc->c));
    pg_store__one_line(msg);
    if (state && !strcmp(state, "23505"))
        err = -EEXIST;
    else if (state && !strcmp(state, "53100"))
        err = -ENOSPC;
    else
        err = -EIO;
    PQclear(r);
    store__set_error(&pg->base, "%s: %s", what, msg);
    /* An error libpq made itself (no SQLSTATE: "server closed the connection
       unexpectedly", a broken socket) may leave PQstatus OK: the connection
       is no better for it. Drop it; the next call reconnects. */
    if (pg_store__conn_lost(pc) || state_is_lost(state) || !state) {
        pg_store__conn_drop(pg, pc, msg);
        store__set_error(&pg->base, "%s: %s", what, msg);
        return -EIO;
    }
    if (err == -ENOSPC) {
        pthread_mutex_lock(&pg->base.hlock);
        pg->full = true;
        snprintf(pg->why, sizeof(pg->why), "%s", pg->base.err);
        pthread_mutex_unlock(&pg->base.hlock);
    }
    return err;
}

int pg_store__begin(struct pg_store *pg, struct pg_conn *pc)
{
    return pg_store__exec(pg, pc, "begin", "BEGIN", 0, NULL, NULL, NULL, NULL);
}

int pg_store__commit(struct pg_store *pg, struct pg_conn *pc)
{
    return pg_store__exec(pg, pc, "commit", "COMMIT", 0, NULL, NULL, NULL, NULL);
}

void pg_store__rollback(struct pg_store *pg, struct pg_conn *pc)
{
    PGresult *r;

    /* A failed ROLLBACK changes nothing: the next use sees the loss. */
    if (!pc->c || PQstatus(pc->c) != CONNECTION_OK ||
        PQtransactionStatus(pc->c) == PQTRANS_IDLE)
        return;
    if ((r = exec_by(pc->c, "ROLLBACK", 0, NULL, NULL, NULL)))
        PQclear(r);
    else
        pg_store__conn_drop(pg, pc, "the database does not answer");
}

bool pg_store__node(struct pg_store *pg, char *out)
{
    bool fenced;

    pthread_mutex_lock(&pg->base.hlock);
    fenced = pg->fenced;
    memcpy(out, pg->node, PG_STORE_NODE_MAX);
    pthread_mutex_unlock(&pg->base.hlock);
    return fenced;
}

/* ---- results ---------------------------------------------------------------- */

int pg_store__seq_in_log(struct pg_store *pg, const char *sid, int64_t seq, int64_t last)
{
    if (seq >= 0 && seq <= last)
        return 0;
    store__set_error(&pg->base, "session '%s': seq %lld is not in 0..%lld", sid,
                     (long long)seq, (long long)last);
    return -ERANGE;
}

int64_t pg_store__i64(const PGresult *r, int row, int col)
{
    return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

const char *pg_store__fmt_i64(char *buf, int64_t n)
{
    snprintf(buf, 24, "%lld", (long long)n);
    return buf;
}
