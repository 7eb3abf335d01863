/*
 * pg_store_writer - group commit on PostgreSQL: the queue, the writer thread
 * (one transaction per batch on its own connection: fencing, seq checks,
 * one multi-row insert, the notifications, the search rows, the sessions'
 * updated_at and the snapshots) and the notifier thread that answers each
 * write in queue order. Private to store/pg/pg_store*.c through
 * pg_store_internal.h; see pg_store.h and store.h for the design.
 */
#include "base/now.h"
#include "store/pg/pg_store.h"
#include "store/pg/pg_store_internal.h"

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
#define PG_STORE_IDLE_CHECK_MS 1000

/* The inputs a person reads (as store_search.c indexes them), told by their prefix. */
#define IS_MESSAGE                                                                       \
    "(left(t, 28) = '{\"type\":\"user-send-message\",' OR left(t, 38) ="                 \
    " '{\"type\":\"brain-send-message-complete\",')"
#define IS_CANCEL "left(t, 22) = '{\"type\":\"user-cancel\",'"
/* json rejects \u0000 when it unescapes: such an input is stored, not indexed. */
#define NO_NUL "strpos(t, '\\u0000') = 0"

const char pg_store__index_sql[] =
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
        PG_STORE_NOTIFY_TEXT_MAX) " THEN ' ' || t ELSE '' END) FROM unnest($1::text[],"
                                  " $2::bigint[], $3::text[]) WITH ORDINALITY AS u(s, q, "
                                  "t,"
                                  " o) ORDER BY o";
/*
 * Each session's row once per batch (SPEC 6.2), as SQLite does: updated_at
 * when it moves by more than a second, messages and busy as its last write
 * in the batch says, the title of its first write with one ('' is none)
 * when the row has none yet; a row with nothing new is not written.
 */
static const char touch_sql[] =
    "UPDATE sessions SET updated_at = CASE WHEN sessions.updated_at < u.t - 1000 THEN"
    " u.t ELSE sessions.updated_at END, messages = u.m, busy = u.b, auto_title ="
    " coalesce(sessions.auto_title, u.ti) FROM (SELECT s, max(t) AS t,"
    " (array_agg(m ORDER BY o DESC))[1] AS m, (array_agg(b ORDER BY o DESC))[1] <> 0"
    " AS b, (array_agg(ti ORDER BY o) FILTER (WHERE ti <> ''))[1] AS ti FROM"
    " unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[])"
    " WITH ORDINALITY AS x(s, t, m, b, ti, o) GROUP BY s) AS u"
    " WHERE sessions.id = u.s AND (sessions.updated_at < u.t - 1000 OR"
    " sessions.messages <> u.m OR sessions.busy <> u.b OR"
    " (sessions.auto_title IS NULL AND u.ti IS NOT NULL))";
static const char snap_sql[] =
    "INSERT INTO snapshots(session_id, seq, state) SELECT * FROM unnest($1::text[],"
    " $2::bigint[], $3::text[]) ON CONFLICT (session_id, seq) DO UPDATE SET state ="
    " excluded.state";
/* Only the newest snapshot is kept: storage grows with inputs alone. */
static const char prune_sql[] =
    "DELETE FROM snapshots d USING (SELECT s, max(q) AS q FROM unnest($1::text[],"
    " $2::bigint[]) AS x(s, q) GROUP BY s) AS u WHERE d.session_id = u.s AND d.seq < u.q";
/* Streamed text (SPEC 3.7): a batch's rows, then what the inputs that end answers remove.
 */
static const char stream_put_sql[] =
    "INSERT INTO stream_text(session_id, message_id, off, text) SELECT * FROM"
    " unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) ON CONFLICT"
    " (session_id, message_id, off) DO UPDATE SET text = excluded.text";
static const char stream_done_sql[] =
    "DELETE FROM stream_text d USING unnest($1::text[], $2::text[]) AS u(s, m)"
    " WHERE d.session_id = u.s AND (u.m = '' OR d.message_id = u.m)";
/* After a commit whose answer was lost: are the batch's rows there? */
static const char verify_sql[] =
    "SELECT count(*) FROM unnest($1::text[], $2::bigint[], $3::text[]) AS u(s, q, t)"
    " JOIN inputs i ON i.session_id = u.s AND i.seq = u.q AND i.input = u.t";

/*
 * The batch's arrays: inputs (sid, seq, text, updated_at), what the rows
 * keep (messages, busy 0/1, title or '') and snapshots.
 */
struct batch_rows {
    struct pg_array s, q, t, u, m, b, ti, ss, sq, st;
    size_t n, snaps;
    /* Streamed text (session, message, offset, text), and the answers ended. */
    struct pg_array xs, xm, xo, xt, ds, dm;
    size_t texts, dones;
};

static void rows_init(struct batch_rows *b)
{
    pg_store__array_init(&b->s, PG_STORE_OID_TEXT);
    pg_store__array_init(&b->q, PG_STORE_OID_INT8);
    pg_store__array_init(&b->t, PG_STORE_OID_TEXT);
    pg_store__array_init(&b->u, PG_STORE_OID_INT8);
    pg_store__array_init(&b->m, PG_STORE_OID_INT8);
    pg_store__array_init(&b->b, PG_STORE_OID_INT8);
    pg_store__array_init(&b->ti, PG_STORE_OID_TEXT);
    pg_store__array_init(&b->ss, PG_STORE_OID_TEXT);
    pg_store__array_init(&b->sq, PG_STORE_OID_INT8);
    pg_store__array_init(&b->st, PG_STORE_OID_TEXT);
    pg_store__array_init(&b->xs, PG_STORE_OID_TEXT);
    pg_store__array_init(&b->xm, PG_STORE_OID_TEXT);
    pg_store__array_init(&b->xo, PG_STORE_OID_INT8);
    pg_store__array_init(&b->xt, PG_STORE_OID_TEXT);
    pg_store__array_init(&b->ds, PG_STORE_OID_TEXT);
    pg_store__array_init(&b->dm, PG_STORE_OID_TEXT);
    b->n = b->snaps = b->texts = b->dones = 0;
}

static void rows_release(struct batch_rows *b)
{
    pg_store__array_release(&b->s);
    pg_store__array_release(&b->q);
    pg_store__array_release(&b->t);
    pg_store__array_release(&b->u);
    pg_store__array_release(&b->m);
    pg_store__array_release(&b->b);
    pg_store__array_release(&b->ti);
    pg_store__array_release(&b->ss);
    pg_store__array_release(&b->sq);
    pg_store__array_release(&b->st);
    pg_store__array_release(&b->xs);
    pg_store__array_release(&b->xm);
    pg_store__array_release(&b->xo);
    pg_store__array_release(&b->xt);
    pg_store__array_release(&b->ds);
    pg_store__array_release(&b->dm);
}

/* A batch of streamed text (w->message_id), judged. */
static int text_add(struct batch_rows *b, const struct store_write *w)
{
    if (pg_store__array_text(&b->xs, w->sid, strlen(w->sid)) ||
        pg_store__array_text(&b->xm, w->message_id, strlen(w->message_id)) ||
        pg_store__array_i64(&b->xo, w->text_offset) ||
        pg_store__array_text(&b->xt, w->input, w->input_len))
        return -ENOMEM;
    b->texts++;
    return 0;
}

static int rows_add(struct batch_rows *b, const struct store_write *w)
{
    if (w->stream_done) {
        if (pg_store__array_text(&b->ds, w->sid, strlen(w->sid)) ||
            pg_store__array_text(&b->dm, w->stream_done, strlen(w->stream_done)))
            return -ENOMEM;
        b->dones++;
    }
    if (pg_store__array_text(&b->s, w->sid, strlen(w->sid)) ||
        pg_store__array_i64(&b->q, w->seq) ||
        pg_store__array_text(&b->t, w->input, w->input_len) ||
        pg_store__array_i64(&b->u, w->updated_at) ||
        pg_store__array_i64(&b->m, w->messages) || pg_store__array_i64(&b->b, w->busy) ||
        pg_store__array_text(&b->ti, w->title ? w->title : "",
                             w->title ? w->title_len : 0))
        return -ENOMEM;
    b->n++;
    if (!w->snapshot)
        return 0;
    if (pg_store__array_text(&b->ss, w->sid, strlen(w->sid)) ||
        pg_store__array_i64(&b->sq, w->seq) ||
        pg_store__array_text(&b->st, w->snapshot, w->snapshot_len))
        return -ENOMEM;
    b->snaps++;
    return 0;
}

static int rows_end(struct batch_rows *b)
{
    return pg_store__array_end(&b->s) || pg_store__array_end(&b->q) ||
                   pg_store__array_end(&b->t) || pg_store__array_end(&b->u) ||
                   pg_store__array_end(&b->m) || pg_store__array_end(&b->b) ||
                   pg_store__array_end(&b->ti) || pg_store__array_end(&b->ss) ||
                   pg_store__array_end(&b->sq) || pg_store__array_end(&b->st) ||
                   pg_store__array_end(&b->xs) || pg_store__array_end(&b->xm) ||
                   pg_store__array_end(&b->xo) || pg_store__array_end(&b->xt) ||
                   pg_store__array_end(&b->ds) || pg_store__array_end(&b->dm)
               ? -ENOMEM
               : 0;
}

/* The most array parameters one statement of the writer takes. */
#define ARRAYS_MAX 5

/* Run `sql` with up to ARRAYS_MAX array parameters (binary), NULL-terminated. */
static int exec_arrays_v(struct pg_store *pg, const char *what, const char *sql,
                         struct pg_array *const *v)
{
    const char *vals[ARRAYS_MAX];
    int lens[ARRAYS_MAX], bin[ARRAYS_MAX] = {1, 1, 1, 1, 1}, n = 0;

    for (; n < ARRAYS_MAX && v[n]; n++) {
        vals[n] = v[n]->b.data;
        lens[n] = (int)v[n]->b.len;
    }
    return pg_store__exec(pg, &pg->w, what, sql, n, vals, lens, bin, NULL);
}

/* Run `sql` with up to three array parameters (binary). */
static int exec_arrays(struct pg_store *pg, const char *what, const char *sql,
                       struct pg_array *a1, struct pg_array *a2, struct pg_array *a3)
{
    struct pg_array *v[4] = {a1, a2, a3, NULL};

    return exec_arrays_v(pg, what, sql, v);
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
        if (pg_store__array_text(a, v[i]->sid, strlen(v[i]->sid)))
            return -ENOMEM;
    return pg_store__array_end(a);
}

/*
 * Judge each write inside the transaction: fenced (-ESTALE) when its
 * session's owners row does not name our node, -ENOENT without a session,
 * -EEXIST/-EINVAL when its seq does not follow the last stored (or the last
 * accepted in this batch). The accepted go into `b`. 0 or the error that
 * fails the transaction.
 */
static int judge(struct pg_store *pg, struct store_write **v, size_t n,
                 struct batch_rows *b)
{
    char node[PG_STORE_NODE_MAX];
    bool fenced = pg_store__node(pg, node);
    PGresult *owned = NULL, *sess = NULL;
    struct pg_array ids;
    int64_t *last = NULL;
    int err;

    pg_store__array_init(&ids, PG_STORE_OID_TEXT);
    if ((err = sids_param(v, n, &ids)))
        goto out_release;
    if (fenced) {
        const char *vals[2] = {ids.b.data, node};
        int lens[2] = {(int)ids.b.len, 0}, bin[2] = {1, 0};

        if ((err = pg_store__exec(pg, &pg->w, "fencing", fence_sql, 2, vals, lens, bin,
                                  &owned)))
            goto out_release;
    }
    {
        const char *vals[1] = {ids.b.data};
        int lens[1] = {(int)ids.b.len}, bin[1] = {1};

        if ((err = pg_store__exec(pg, &pg->w, "checking inputs", check_sql, 1, vals, lens,
                                  bin, &sess)))
            goto out_release;
    }
    last = calloc((size_t)PQntuples(sess) + 1, sizeof(*last));
    if (!last) {
        err = -ENOMEM;
        goto out_release;
    }
    for (int i = 0; i < PQntuples(sess); i++)
        last[i] = pg_store__i64(sess, i, 1);
    for (size_t i = 0; i < n; i++) {
        struct store_write *w = v[i];
        int row = find_row(sess, w->sid);

        if (fenced && find_row(owned, w->sid) < 0) {
            store__set_error(&pg->base, "session '%s' is not owned by node '%s'", w->sid,
                             node);
            w->err = -ESTALE;
        } else if (row < 0) {
            store__set_error(&pg->base, "no session '%s'", w->sid);
            w->err = -ENOENT;
        } else if (w->message_id) {
            if ((err = text_add(b, w)))
                goto out_release;
        } else if (w->seq != last[row] + 1) {
            /* A gap would make the log unloadable: refuse it now. */
            store__set_error(&pg->base, "session '%s': input %lld does not follow %lld",
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
    pg_store__array_release(&ids);
    return err;
}

/* The rows of the accepted writes, inside the transaction. */
static int write_rows(struct pg_store *pg, struct batch_rows *b)
{
    int err;

    /* The text first: an answer ended in this batch takes its last batch too. */
    if (b->texts && (err = exec_arrays_v(pg, "storing streamed text", stream_put_sql,
                                         (struct pg_array *const[]){
                                             &b->xs, &b->xm, &b->xo, &b->xt, NULL})))
        return err;
    if (b->dones && (err = exec_arrays(pg, "removing streamed text", stream_done_sql,
                                       &b->ds, &b->dm, NULL)))
        return err;
    if (!b->n)
        return 0;
    if ((err = exec_arrays(pg, "storing inputs", insert_sql, &b->s, &b->q, &b->t)) ||
        (err = exec_arrays(pg, "notifying", notify_sql, &b->s, &b->q, &b->t)) ||
        (err = exec_arrays(pg, "indexing", pg_store__index_sql, &b->s, &b->q, &b->t)) ||
        (err = exec_arrays_v(
             pg, "updating sessions", touch_sql,
             (struct pg_array *const[]){&b->s, &b->u, &b->m, &b->b, &b->ti, NULL})))
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
static int verify_commit(struct pg_store *pg, struct batch_rows *b)
{
    const char *vals[3] = {b->s.b.data, b->q.b.data, b->t.b.data};
    int lens[3] = {(int)b->s.b.len, (int)b->q.b.len, (int)b->t.b.len}, bin[3] = {1, 1, 1};
    PGresult *r;
    int err;

    if (!b->n)
        return -EIO;
    if ((err = pg_store__exec(pg, &pg->w, "checking a lost commit", verify_sql, 3, vals,
                              lens, bin, &r)))
        return err;
    err = pg_store__i64(r, 0, 0) == (int64_t)b->n ? 0 : -EIO;
    PQclear(r);
    if (err)
        store__set_error(&pg->base, "commit: the connection was lost and the batch is not"
                                    " stored");
    return err;
}

/* synchronous_commit as store_set_durable asked, after each (re)connect. */
static int apply_durable(struct pg_store *pg)
{
    bool durable;
    int err;

    pthread_mutex_lock(&pg->queue.lock);
    durable = pg->durable;
    if (pg->durable_set && !pg->w.fresh) {
        pthread_mutex_unlock(&pg->queue.lock);
        return 0;
    }
    pthread_mutex_unlock(&pg->queue.lock);
    err = pg_store__exec(pg, &pg->w, "synchronous_commit",
                         durable ? "SET synchronous_commit = on"
                                 : "SET synchronous_commit = off",
                         0, NULL, NULL, NULL, NULL);
    if (!err) {
        pthread_mutex_lock(&pg->queue.lock);
        pg->durable_set = pg->durable == durable;
        pg->w.fresh = false;
        pthread_mutex_unlock(&pg->queue.lock);
    }
    return err;
}

/*
 * v[0..n) in one transaction. Writes refused on their own get their err;
 * the others get 0, or the error that failed the transaction (returned,
 * with *in_tx[i] saying which writes it failed).
 */
static int commit_some(struct pg_store *pg, struct store_write **v, size_t n, bool *in_tx)
{
    struct batch_rows b;
    size_t i;
    int err;

    rows_init(&b);
    for (i = 0; i < n; i++)
        v[i]->err = 0;
    if ((err = pg_store__conn_get(pg, &pg->w)) || (err = apply_durable(pg)) ||
        (err = pg_store__begin(pg, &pg->w)))
        goto out_fail;
    if ((err = judge(pg, v, n, &b)) || (err = write_rows(pg, &b))) {
        pg_store__rollback(pg, &pg->w);
        goto out_fail;
    }
    if ((err = pg_store__commit(pg, &pg->w)) && pg_store__conn_lost(&pg->w))
        err = verify_commit(pg, &b);
    if (!err) {
        if (b.n)
            pg_store__wrote(pg);
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
static void commit_batch(struct pg_store *pg, struct store_write **v, size_t n)
{
    bool in_tx[PG_STORE_BATCH_MAX];

    __atomic_add_fetch(&pg->commits, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pg->writes, (int64_t)n, __ATOMIC_RELAXED);
    if (!commit_some(pg, v, n, in_tx) || n == 1 || pg_store__conn_lost(&pg->w))
        return;
    for (size_t i = 0; i < n; i++) {
        bool again;

        if (in_tx[i])
            (void)commit_some(pg, &v[i], 1, &again);
    }
}

/*
 * Wait, the queue's lock held, until something is queued or the store stops. Every
 * PG_STORE_IDLE_CHECK_MS, look at the connection (a lost one shows in
 * health before anyone writes) and, while it is down, reconnect when its
 * backoff allows: service resumes by itself.
 */
static void wait_for_writes(struct pg_store *pg)
{
    while (!pg->queue.head && !pg->queue.stopping) {
        if (!store_queue_wait(&pg->queue, PG_STORE_IDLE_CHECK_MS))
            continue;
        pthread_mutex_unlock(&pg->queue.lock);
        if (pg->w.c && (!PQconsumeInput(pg->w.c) || PQstatus(pg->w.c) != CONNECTION_OK))
            pg_store__conn_drop(pg, &pg->w, PQerrorMessage(pg->w.c));
        if (!pg->w.c && now_mono_ms() >= pg->w.retry_at_ms)
            (void)pg_store__conn_get(pg, &pg->w);
        pthread_mutex_lock(&pg->queue.lock);
    }
}

void *pg_store__writer_main(void *arg)
{
    struct pg_store *pg = arg;
    struct store_write *batch[PG_STORE_BATCH_MAX];

    for (;;) {
        size_t n;

        pthread_mutex_lock(&pg->queue.lock);
        wait_for_writes(pg);
        n = store_queue_take(&pg->queue, batch, PG_STORE_BATCH_MAX);
        pthread_mutex_unlock(&pg->queue.lock);
        if (!n)
            break; /* stopping, and nothing is left */
        commit_batch(pg, batch, n);
        store_notifier_push_batch(&pg->queue.notifier, batch, n);
    }
    store_notifier_end(&pg->queue.notifier);
    return NULL;
}

void pg_store_write_queue(struct store *base, struct store_write *w)
{
    store_queue_push(&pg_store_of(base)->queue, w);
}
