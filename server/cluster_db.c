/*
 * cluster_db - the cluster's connections to PostgreSQL: connecting and
 * calling with a deadline (a database that stops answering costs a call
 * no more than its deadline, never the lease's end), and the threads'
 * interruptible sleep. See cluster.h; shared through cluster_internal.h.
 */
#include "server/cluster_internal.h"

#include <poll.h>
#include <string.h>
#include <time.h>

#include "effects/log.h"
#include "base/now.h"

/* ---- connections ------------------------------------------------------------------ */

/* The server's notices (a shutdown, say) go to the log, not to stderr. */
static void on_notice(void *arg, const char *message)
{
    (void)arg;
    log_debug("cluster: postgresql: %.*s", (int)strcspn(message, "\n"), message);
}

PGconn *cluster__connect(const char *conninfo, int64_t deadline_ms)
{
    const char *keys[] = {"dbname",           "connect_timeout",     "keepalives",
                          "keepalives_idle",  "keepalives_interval", "keepalives_count",
                          "tcp_user_timeout", "application_name",    NULL};
    const char *vals[] = {conninfo,           "3", "1", "2", "1", "2", "3000",
                          "reflexor-cluster", NULL};
    PGconn *db = PQconnectStartParams(keys, vals, 1);
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;

    /* libpq's own connect would wait its connect_timeout whatever the
       caller's deadline (a renewal's is the lease's end): poll to it. */
    if (!db || PQstatus(db) == CONNECTION_BAD)
        goto out_fail;
    while (st != PGRES_POLLING_OK) {
        struct pollfd pfd = {PQsocket(db), st == PGRES_POLLING_READING ? POLLIN : POLLOUT,
                             0};
        int64_t left = deadline_ms - now_mono_ms();

        if (st == PGRES_POLLING_FAILED || left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            goto out_fail;
        st = PQconnectPoll(db);
    }
    PQsetNoticeProcessor(db, on_notice, NULL);
    return db;

out_fail:
    PQfinish(db);
    return NULL;
}

/* Wait for the connection's answer until `deadline_ms`. True when it is there. */
static bool answer_by(PGconn *db, int64_t deadline_ms)
{
    while (PQisBusy(db)) {
        struct pollfd pfd = {PQsocket(db), POLLIN, 0};
        int64_t left = deadline_ms - now_mono_ms();

        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0 || !PQconsumeInput(db))
            return false;
    }
    return true;
}

PGresult *cluster__call(struct cluster *c, PGconn **db, const char *sql, int n,
                        const char *const *params, ExecStatusType want,
                        int64_t deadline_ms)
{
    PGresult *r = NULL, *last = NULL;

    if ((*db && PQstatus(*db) != CONNECTION_OK) || now_mono_ms() >= deadline_ms)
        goto out_close;
    if (!*db && !(*db = cluster__connect(c->conninfo, deadline_ms)))
        return NULL;
    if (!PQsendQueryParams(*db, sql, n, NULL, params, NULL, NULL, 0))
        goto out_close;
    /* Every result up to the end: the connection is ready for the next call. */
    for (;;) {
        if (!answer_by(*db, deadline_ms))
            goto out_close;
        if (!(r = PQgetResult(*db)))
            break;
        PQclear(last);
        last = r;
    }
    if (PQresultStatus(last) != want) {
        log_debug("cluster: %s", PQresultErrorMessage(last));
        PQclear(last);
        return NULL;
    }
    return last;

out_close:
    /* Given up or lost: a late answer must never be read as the next call's. */
    PQclear(last);
    PQfinish(*db);
    *db = NULL;
    return NULL;
}

bool cluster__nap(struct cluster *c, int64_t ms)
{
    struct timespec ts;
    bool stop;

    ts = now_deadline(CLOCK_REALTIME, ms * NOW_NS_PER_MS);
    pthread_mutex_lock(&c->slock);
    if (!c->stopping && ms > 0)
        pthread_cond_timedwait(&c->scond, &c->slock, &ts);
    stop = c->stopping;
    pthread_mutex_unlock(&c->slock);
    return stop;
}
