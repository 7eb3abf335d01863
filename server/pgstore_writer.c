/*
 * pgstore_writer - group commit on PostgreSQL: the queue, the writer thread
 * (one transaction per batch on its own connection: fencing, seq checks,
 * one multi-row insert, the notifications, the search rows, the sessions'
 * updated_at and the snapshots) and the notifier thread that answers each
 * write in queue order. Private to server/pgstore*.c through
 * pgstore_internal.h; see pgstore.h and store.h for the design.
 */
#include "server/pgstore.h"
#include "server/pgstore_internal.h"
#include "base/now.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#define STR_(x) #x
#define STR(x)  STR_(x)

/* How often the idle writer looks whether its connection is still there. */
#define PGSTORE_IDLE_CHECK_MS 1000

/* The inputs a person reads (as store_search.c indexes them), told by their prefix. */
#define IS_MESSAGE                                                                       \
    "(left(t, 28) = '{\"type\":\"user-send-message\",' OR left(t, 38) ="                 \
    " '{\"type\":\"brain-send-message-complete\",')"
#define IS_CANCEL "left(t, 22) = '{\"type\":\"user-cancel\",'"
/* json rejects \u0000 when it unescapes: such an input is stored, not indexed. */
#define NO_NUL "strpos(t, '\\u0000') = 0"

const char pgstore__index_sql[] =
    "INSERT INTO search_docs(session_id, seq, body) SELECT s, q, b FROM ("
    "SELECT s, q, o, 0 AS k, t::json ->> 'content' AS b FROM unnest($1::text[],"
    " $2::bigint[], $3::text[]) WITH ORDINALITY AS u(s, q, t, o) WHERE " IS_MESSAGE
    " AND " NO_NUL
    " UNION ALL SELECT s, q, o, 1, p.value #>> '{}' FROM unnest($1::text[],"
    " $2::bigint[], $3::text[]) WITH ORDINALITY AS u(s, q, t, o), json_each(CASE "
    "WHEN " IS_CANCEL " AND " NO_NUL
    " AND json_typeof(t::json -> 'partialContents') = 'object' THEN"
    " t::json -> 'partialContents' END) AS p WHERE json_typeof(p.value) = 'string'"
    ") AS x WHERE b <> '' ORDER BY o, k";

static const char fence_sql[] = "SELECT session_id FROM owners WHERE session_id ="
                                " ANY($1::text[]) AND node = $2 FOR SHARE";
/* The key share lock: a delete waits for this batch, a title does not. */
static const char check_sql[] =
    "SELECT s.id, coalesce((SELECT max(seq) FROM inputs i WHERE i.session_id = s.id), 0)"
    " FROM sessions s WHERE s.id = ANY($1::text[]) FOR KEY SHARE OF s";
static const char insert_sql[] =
    "INSERT INTO inputs(session_id, seq, input)"
    " SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])";
static const char notify_sql[] =
    "SELECT pg_notify('rx_log', s || ' ' || q || CASE WHEN octet_length(t) <= " STR(
        PGSTORE_NOTIFY_TEXT_MAX) " THEN ' ' || t ELSE '' END) FROM unnest($1::text[],"
                                 " $2::bigint[], $3::text[]) WITH ORDINALITY AS u(s, q, "
                                 "t,"
                                 " o) ORDER BY o";
/* As in SQLite: updated_at only when it moves by more than a second. */
static const char touch_sql[] =
    "UPDATE sessions SET updated_at = u.t FROM (SELECT s, max(t) AS t FROM"
    " unnest($1::text[], $2::bigint[]) AS x(s, t) GROUP BY s) AS u"
    " WHERE sessions.id = u.s AND sessions.updated_at < u.t - 1000";
static const char snap_sql[] =
    "INSERT INTO snapshots(session_id, seq, state) SELECT * FROM unnest($1::text[],"
    " $2::bigint[], $3::text[]) ON CONFLICT (session_id, seq) DO UPDATE SET state ="
    " excluded.state";
/* Only the newest snapshot is kept: storage grows with inputs alone. */
static const char prune_sql[] =
    "DELETE FROM snapshots d USING (SELECT s, max(q) AS q FROM unnest($1::text[],"
    " $2::bigint[]) AS x(s, q) GROUP BY s) AS u WHERE d.session_id = u.s AND d.seq < u.q";
/* After a commit whose answer was lost: are the batch's rows there? */
static const char verify_sql[] =
    "SELECT count(*) FROM unnest($1::text[], $2::bigint[], $3::text[]) AS u(s, q, t)"
    " JOIN inputs i ON i.session_id = u.s AND i.seq = u.q AND i.input = u.t";

/* The batch's arrays: inputs (sid, seq, text, updated_at) and snapshots. */
struct batch_rows {
    struct pg_array s, q, t, u, ss, sq, st;
    size_t n, snaps;
};

static void rows_init(struct batch_rows *b)
{
    pgstore__array_init(&b->s, PGSTORE_OID_TEXT);
    pgstore__array_init(&b->q, PGSTORE_OID_INT8);
    pgstore__array_init(&b->t, PGSTORE_OID_TEXT);
    pgstore__array_init(&b->u, PGSTORE_OID_INT8);
    pgstore__array_init(&b->ss, PGSTORE_OID_TEXT);
    pgstore__array_init(&b->sq, PGSTORE_OID_INT8);
    pgstore__array_init(&b->st, PGSTORE_OID_TEXT);
    b->n = b->snaps = 0;
}

static void rows_release(struct batch_rows *b)
{
    pgstore__array_release(&b->s);
    pgstore__array_release(&b->q);
    pgstore__array_release(&b->t);
    pgstore__array_release(&b->u);
    pgstore__array_release(&b->ss);
    pgstore__array_release(&b->sq);
    pgstore__array_release(&b->st);
}

static int rows_add(struct batch_rows *b, const struct store_write *w)
{
    if (pgstore__array_text(&b->s, w->sid, strlen(w->sid)) ||
        pgstore__array_i64(&b->q, w->seq) ||
        pgstore__array_text(&b->t, w->input, w->input_len) ||
        pgstore__array_i64(&b->u, w->updated_at))
        return -ENOMEM;
    b->n++;
    if (!w->snapshot)
        return 0;
    if (pgstore__array_text(&b->ss, w->sid, strlen(w->sid)) ||
        pgstore__array_i64(&b->sq, w->seq) ||
        pgstore__array_text(&b->st, w->snapshot, w->snapshot_len))
        return -ENOMEM;
    b->snaps++;
    return 0;
}

static int rows_end(struct batch_rows *b)
{
    return pgstore__array_end(&b->s) || pgstore__array_end(&b->q) ||
                   pgstore__array_end(&b->t) || pgstore__array_end(&b->u) ||
                   pgstore__array_end(&b->ss) || pgstore__array_end(&b->sq) ||
                   pgstore__array_end(&b->st)
               ? -ENOMEM
               : 0;
}

/* Run `sql` with up to three array parameters (binary). */
static int exec_arrays(struct pgstore *pg, const char *what, const char *sql,
                       struct pg_array *a1, struct pg_array *a2, struct pg_array *a3)
{
    struct pg_array *v[3] = {a1, a2, a3};
    const char *vals[3];
    int lens[3], bin[3] = {1, 1, 1}, n = 0;

    for (; n < 3 && v[n]; n++) {
        vals[n] = v[n]->b.data;
        lens[n] = (int)v[n]->b.len;
    }
    return pgstore__exec(pg, &pg->w, what, sql, n, vals, lens, bin, NULL);
}

/* Row of `r` (column 0) naming sid, or -1. */
static int find_row(const PGresult *r, const char *sid)
{
    for (int i = 0; i < PQntuples(r); i++)
        if (!strcmp(PQgetvalue(r, i, 0), sid))
            return i;
    return -1;
}

/* The sessions of v[0..n) as a text[] parameter (duplicates are harmless). */
static int sids_param(struct store_write **v, size_t n, struct pg_array *a)
{
    for (size_t i = 0; i < n; i++)
        if (pgstore__array_text(a, v[i]->sid, strlen(v[i]->sid)))
            return -ENOMEM;
    return pgstore__array_end(a);
}

/*
 * Judge each write inside the transaction: fenced (-ESTALE) when its
 * session's owners row does not name our node, -ENOENT without a session,
 * -EEXIST/-EINVAL when its seq does not follow the last stored (or the last
 * accepted in this batch). The accepted go into `b`. 0 or the error that
 * fails the transaction.
 */
static int judge(struct pgstore *pg, struct store_write **v, size_t n,
                 struct batch_rows *b)
{
    char node[PGSTORE_NODE_MAX];
    bool fenced = pgstore__node(pg, node);
    PGresult *owned = NULL, *sess = NULL;
    struct pg_array ids;
    int64_t *last = NULL;
    int err;

    pgstore__array_init(&ids, PGSTORE_OID_TEXT);
    if ((err = sids_param(v, n, &ids)))
        goto out_release;
    if (fenced) {
        const char *vals[2] = {ids.b.data, node};
        int lens[2] = {(int)ids.b.len, 0}, bin[2] = {1, 0};

        if ((err = pgstore__exec(pg, &pg->w, "fencing", fence_sql, 2, vals, lens, bin,
                                 &owned)))
            goto out_release;
    }
    {
        const char *vals[1] = {ids.b.data};
        int lens[1] = {(int)ids.b.len}, bin[1] = {1};

        if ((err = pgstore__exec(pg, &pg->w, "checking inputs", check_sql, 1, vals, lens,
                                 bin, &sess)))
            goto out_release;
    }
    last = calloc((size_t)PQntuples(sess) + 1, sizeof(*last));
    if (!last) {
        err = -ENOMEM;
        goto out_release;
    }
    for (int i = 0; i < PQntuples(sess); i++)
        last[i] = pgstore__i64(sess, i, 1);
    for (size_t i = 0; i < n; i++) {
        struct store_write *w = v[i];
        int row = find_row(sess, w->sid);

        if (fenced && find_row(owned, w->sid) < 0) {
            pgstore__set_error(pg, "session '%s' is not owned by node '%s'", w->sid,
                               node);
            w->err = -ESTALE;
        } else if (row < 0) {
            pgstore__set_error(pg, "no session '%s'", w->sid);
            w->err = -ENOENT;
        } else if (w->seq != last[row] + 1) {
            /* A gap would make the log unloadable: refuse it now. */
            pgstore__set_error(pg, "session '%s': input %lld does not follow %lld",
                               w->sid, (long long)w->seq, (long long)last[row]);
            w->err = w->seq <= last[row] ? -EEXIST : -EINVAL;
        } else if ((err = rows_add(b, w))) {
            goto out_release;
        } else {
            last[row] = w->seq;
        }
    }
    err = rows_end(b);
out_release:
    free(last);
    PQclear(sess);
    PQclear(owned);
    pgstore__array_release(&ids);
    return err;
}

/* The rows of the accepted writes, inside the transaction. */
static int write_rows(struct pgstore *pg, struct batch_rows *b)
{
    int err;

    if (!b->n)
        return 0;
    if ((err = exec_arrays(pg, "storing inputs", insert_sql, &b->s, &b->q, &b->t)) ||
        (err = exec_arrays(pg, "notifying", notify_sql, &b->s, &b->q, &b->t)) ||
        (err = exec_arrays(pg, "indexing", pgstore__index_sql, &b->s, &b->q, &b->t)) ||
        (err = exec_arrays(pg, "updating sessions", touch_sql, &b->s, &b->u, NULL)))
        return err;
    if (b->snaps &&
        ((err = exec_arrays(pg, "storing snapshots", snap_sql, &b->ss, &b->sq, &b->st)) ||
         (err = exec_arrays(pg, "pruning snapshots", prune_sql, &b->ss, &b->sq, NULL))))
        return err;
    return 0;
}

/*
 * The COMMIT's answer was lost with the connection: it may have committed.
 * Reconnect and look for the rows. 0 (they are there) or -EIO.
 */
static int verify_commit(struct pgstore *pg, struct batch_rows *b)
{
    const char *vals[3] = {b->s.b.data, b->q.b.data, b->t.b.data};
    int lens[3] = {(int)b->s.b.len, (int)b->q.b.len, (int)b->t.b.len}, bin[3] = {1, 1, 1};
    PGresult *r;
    int err;

    if (!b->n)
        return -EIO;
    if ((err = pgstore__exec(pg, &pg->w, "checking a lost commit", verify_sql, 3, vals,
                             lens, bin, &r)))
        return err;
    err = pgstore__i64(r, 0, 0) == (int64_t)b->n ? 0 : -EIO;
    PQclear(r);
    if (err)
        pgstore__set_error(pg, "commit: the connection was lost and the batch is not"
                               " stored");
    return err;
}

/* synchronous_commit as store_set_durable asked, after each (re)connect. */
static int apply_durable(struct pgstore *pg)
{
    bool durable;
    int err;

    pthread_mutex_lock(&pg->qlock);
    durable = pg->durable;
    if (pg->durable_set && !pg->w.fresh) {
        pthread_mutex_unlock(&pg->qlock);
        return 0;
    }
    pthread_mutex_unlock(&pg->qlock);
    err = pgstore__exec(pg, &pg->w, "synchronous_commit",
                        durable ? "SET synchronous_commit = on"
                                : "SET synchronous_commit = off",
                        0, NULL, NULL, NULL, NULL);
    if (!err) {
        pthread_mutex_lock(&pg->qlock);
        pg->durable_set = pg->durable == durable;
        pg->w.fresh = false;
        pthread_mutex_unlock(&pg->qlock);
    }
    return err;
}

/*
 * v[0..n) in one transaction. Writes refused on their own get their err;
 * the others get 0, or the error that failed the transaction (returned,
 * with *in_tx[i] saying which writes it failed).
 */
static int commit_some(struct pgstore *pg, struct store_write **v, size_t n, bool *in_tx)
{
    struct batch_rows b;
    size_t i;
    int err;

    rows_init(&b);
    for (i = 0; i < n; i++)
        v[i]->err = 0;
    if ((err = pgstore__conn_get(pg, &pg->w)) || (err = apply_durable(pg)) ||
        (err = pgstore__begin(pg, &pg->w)))
        goto out_fail;
    if ((err = judge(pg, v, n, &b)) || (err = write_rows(pg, &b))) {
        pgstore__rollback(pg, &pg->w);
        goto out_fail;
    }
    if ((err = pgstore__commit(pg, &pg->w)) && pgstore__conn_lost(&pg->w))
        err = verify_commit(pg, &b);
    if (!err) {
        if (b.n)
            pgstore__wrote(pg);
        goto out_release;
    }
out_fail:
    for (i = 0; i < n; i++) {
        in_tx[i] = !v[i]->err;
        if (!v[i]->err)
            v[i]->err = err;
    }
out_release:
    rows_release(&b);
    return err;
}

/*
 * One batch. When it failed for another reason than a lost connection,
 * each of its writes is tried again alone: a unique violation or an input
 * too big for the room left must not fail the others beside it.
 */
static void commit_batch(struct pgstore *pg, struct store_write **v, size_t n)
{
    bool in_tx[PGSTORE_BATCH_MAX];

    __atomic_add_fetch(&pg->commits, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pg->writes, (int64_t)n, __ATOMIC_RELAXED);
    if (!commit_some(pg, v, n, in_tx) || n == 1 || pgstore__conn_lost(&pg->w))
        return;
    for (size_t i = 0; i < n; i++) {
        bool again;

        if (in_tx[i])
            (void)commit_some(pg, &v[i], 1, &again);
    }
}

/*
 * Wait, qlock held, until something is queued or the store stops. Every
 * PGSTORE_IDLE_CHECK_MS, look at the connection (a lost one shows in
 * health before anyone writes) and, while it is down, reconnect when its
 * backoff allows: service resumes by itself.
 */
static void wait_for_writes(struct pgstore *pg)
{
    while (!pg->head && !pg->stopping) {
        struct timespec until =
            now_deadline(CLOCK_REALTIME, PGSTORE_IDLE_CHECK_MS * NOW_NS_PER_MS);

        if (pthread_cond_timedwait(&pg->queued_cond, &pg->qlock, &until) == 0 ||
            pg->head || pg->stopping)
            continue;
        pthread_mutex_unlock(&pg->qlock);
        if (pg->w.c && (!PQconsumeInput(pg->w.c) || PQstatus(pg->w.c) != CONNECTION_OK))
            pgstore__conn_drop(pg, &pg->w, PQerrorMessage(pg->w.c));
        if (!pg->w.c && pgstore__now_ms() >= pg->w.retry_at_ms)
            (void)pgstore__conn_get(pg, &pg->w);
        pthread_mutex_lock(&pg->qlock);
    }
}

void *pgstore__writer_main(void *arg)
{
    struct pgstore *pg = arg;
    struct store_write *batch[PGSTORE_BATCH_MAX];

    for (;;) {
        size_t n = 0;

        pthread_mutex_lock(&pg->qlock);
        wait_for_writes(pg);
        while (pg->head && n < PGSTORE_BATCH_MAX) {
            batch[n++] = pg->head;
            pg->head = pg->head->next;
        }
        if (!pg->head)
            pg->tail = &pg->head;
        pthread_mutex_unlock(&pg->qlock);
        if (!n)
            break; /* stopping, and nothing is left */
        commit_batch(pg, batch, n);
        /* To the notifier, in order: the writes are linked again as queued. */
        for (size_t i = 0; i + 1 < n; i++)
            batch[i]->next = batch[i + 1];
        store_notifier_push(&pg->notifier, batch[0], batch[n - 1]);
    }
    store_notifier_end(&pg->notifier);
    return NULL;
}

void pgstore_write_queue(struct pgstore *pg, struct store_write *w)
{
    w->next = NULL;
    w->err = 0;
    pthread_mutex_lock(&pg->qlock);
    *pg->tail = w;
    pg->tail = &w->next;
    pthread_cond_signal(&pg->queued_cond);
    pthread_mutex_unlock(&pg->qlock);
}
