/*
 * pg_store_read - the reads on PostgreSQL: folding a session's log into its
 * state (session load, state-at), the sessions listed, history pages,
 * titles, search and stats, on the reader's connection (`r`, under rlock), so a long read
 * holds up no commit. A read that spans queries runs in one REPEATABLE
 * READ transaction: one snapshot of the log. Private to store/pg
 * through pg_store_internal.h; see pg_store.h.
 */
#include "store/pg/pg_store.h"
#include "store/pg/pg_store_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "state_machine/rx_buf.h"

/* Run `sql` with text parameters on the reader's connection. rlock held. */
static int run(struct pg_store *pg, const char *what, const char *sql, int n,
               const char *const *vals, PGresult **out)
{
    return pg_store__exec(pg, &pg->r, what, sql, n, vals, NULL, NULL, out);
}

static int read_begin(struct pg_store *pg)
{
    return run(pg, "begin reading", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0,
               NULL, NULL);
}

static void read_end(struct pg_store *pg)
{
    pg_store__rollback(pg, &pg->r); /* read only: nothing to keep */
}

/* 0 with the session's creation time (may be NULL), -ENOENT or -EIO. rlock held. */
static int session_get(struct pg_store *pg, const char *sid, int64_t *created_at)
{
    const char *vals[1] = {sid};
    PGresult *r;
    int err = run(pg, "session lookup", "SELECT created_at FROM sessions WHERE id = $1",
                  1, vals, &r);

    if (err)
        return err;
    if (!PQntuples(r)) {
        store__set_error(&pg->base, "no session '%s'", sid);
        err = -ENOENT;
    } else if (created_at) {
        *created_at = pg_store__i64(r, 0, 0);
    }
    PQclear(r);
    return err;
}

/* ---- folding ------------------------------------------------------------------ */

/* The newest snapshot at or before `upto` into *s (or the initial state), its seq. */
static int start_state(struct pg_store *pg, struct pg_conn *pc, const char *sid,
                       int64_t upto, struct rx_state *s, int64_t *seq)
{
    char upto_s[24];
    const char *vals[2] = {sid, pg_store__fmt_i64(upto_s, upto)};
    PGresult *r;
    int err;

    if ((err = pg_store__exec(pg, pc, "reading a snapshot",
                              "SELECT seq, state FROM snapshots WHERE session_id = $1"
                              " AND seq <= $2 ORDER BY seq DESC LIMIT 1",
                              2, vals, NULL, NULL, &r)))
        return err;
    *seq = 0;
    if (!PQntuples(r)) {
        PQclear(r);
        if ((err = rx_state_init(s)))
            store__set_error(&pg->base, "out of memory");
        return err;
    }
    *seq = pg_store__i64(r, 0, 0);
    err = store__snapshot_decode(&pg->base, sid, *seq, PQgetvalue(r, 0, 1),
                                 (size_t)PQgetlength(r, 0, 1), s);
    PQclear(r);
    return err;
}

/* The inputs after the snapshot must follow without gap. */
int pg_store__build_state(struct pg_store *pg, struct pg_conn *pc, const char *sid,
                          int64_t upto, struct rx_state *out, int64_t *reached)
{
    char from_s[24], upto_s[24];
    const char *vals[3] = {sid, from_s, pg_store__fmt_i64(upto_s, upto)};
    struct rx_state s;
    PGresult *r = NULL;
    int64_t seq;
    int err;

    if ((err = start_state(pg, pc, sid, upto, &s, &seq)))
        return err;
    pg_store__fmt_i64(from_s, seq);
    if ((err = pg_store__exec(pg, pc, "reading inputs",
                              "SELECT seq, input FROM inputs WHERE session_id = $1"
                              " AND seq > $2 AND seq <= $3 ORDER BY seq",
                              3, vals, NULL, NULL, &r)))
        goto out_release;
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t row = pg_store__i64(r, i, 0);

        if (row != seq + 1) {
            store__set_error(&pg->base, "session '%s': input %lld is missing", sid,
                             (long long)(seq + 1));
            err = -EPROTO;
            goto out_release;
        }
        if ((err = store__fold_one(&pg->base, sid, row, PQgetvalue(r, i, 1),
                                   (size_t)PQgetlength(r, i, 1), &s)))
            goto out_release;
        seq = row;
    }
    PQclear(r);
    *out = s;
    *reached = seq;
    return 0;

out_release:
    PQclear(r);
    rx_state_release(&s);
    return err;
}

/* One page of the sessions (store_list_sessions). */
int pg_store_list_sessions(struct store *base, const struct store_cursor *after,
                           size_t limit, struct store_list *out)
{
    struct pg_store *pg = pg_store_of(base);
    char created_s[24], limit_s[24];
    /* LIMIT NULL: every row. */
    const char *vals[3] = {
        pg_store__fmt_i64(created_s, after ? after->created_at : INT64_MIN),
        after ? after->id : "",
        limit ? pg_store__fmt_i64(limit_s, (int64_t)limit) : NULL};
    PGresult *r = NULL;
    int err;

    pthread_mutex_lock(&pg->rlock);
    err = run(pg, "listing sessions",
              "SELECT " PG_STORE_ROW_COLUMNS " FROM sessions"
              " WHERE (created_at, id) > ($1::bigint, $2::text)"
              " ORDER BY created_at, id LIMIT $3::bigint",
              3, vals, &r);
    pthread_mutex_unlock(&pg->rlock);
    if (!err)
        err = pg_store__list_rows(r, out);
    PQclear(r);
    return err;
}

int pg_store_session_load(struct store *base, const char *sid, struct rx_state *out,
                          int64_t *seq)
{
    struct pg_store *pg = pg_store_of(base);
    int err;

    pthread_mutex_lock(&pg->rlock);
    if (!(err = read_begin(pg)) && !(err = session_get(pg, sid, NULL)))
        err = pg_store__build_state(pg, &pg->r, sid, INT64_MAX, out, seq);
    read_end(pg);
    pthread_mutex_unlock(&pg->rlock);
    return err;
}

int pg_store_session_created(struct store *base, const char *sid, int64_t *created_at)
{
    struct pg_store *pg = pg_store_of(base);
    int err;

    pthread_mutex_lock(&pg->rlock);
    err = session_get(pg, sid, created_at);
    pthread_mutex_unlock(&pg->rlock);
    return err;
}

/* ---- streamed text (SPEC 3.7) ------------------------------------------------------ */

int pg_store_stream_text(struct store *base, const char *sid, const char *message_id,
                         struct rx_buf *out)
{
    struct pg_store *pg = pg_store_of(base);
    const char *vals[2] = {sid, message_id};
    PGresult *r = NULL;
    int64_t at = 0;
    int err;

    pthread_mutex_lock(&pg->rlock);
    err = pg_store__exec(pg, &pg->r, "reading streamed text",
                         "SELECT off, text FROM stream_text WHERE session_id = $1"
                         " AND message_id = $2 ORDER BY off",
                         2, vals, NULL, NULL, &r);
    pthread_mutex_unlock(&pg->rlock);
    for (int i = 0; !err && i < PQntuples(r); i++) {
        int64_t off = pg_store__i64(r, i, 0), len = PQgetlength(r, i, 1);

        if (off > at)
            break; /* a gap: what follows it cannot be told */
        if (off + len <= at)
            continue;
        if ((err = rx_buf_append(out, PQgetvalue(r, i, 1) + (at - off),
                                 (size_t)(off + len - at))))
            store__set_error(&pg->base, "session '%s': streamed text of %s: %s", sid,
                             message_id, err == -E2BIG ? "too big" : "out of memory");
        at = off + len;
    }
    PQclear(r);
    return err;
}

/* ---- time travel ------------------------------------------------------------------ */

/* Append rows of `r` to the page; *full when the page is as big as pages get. */
static int page_rows(struct pg_store *pg, const char *sid, PGresult *r,
                     struct rx_buf *out, size_t start, size_t *rows, int64_t *after,
                     bool *full)
{
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t seq = pg_store__i64(r, i, 0);
        int err = store__history_row(&pg->base, sid, out, start, *rows, seq,
                                     PQgetvalue(r, i, 1), (size_t)PQgetlength(r, i, 1));

        if (err == 1) {
            *full = true;
            return 0;
        }
        if (err)
            return err;
        (*rows)++;
        *after = seq;
    }
    return 0;
}

int pg_store_history_page(struct store *base, const char *sid, int64_t after_seq,
                          int limit, struct rx_buf *out, int64_t *last)
{
    struct pg_store *pg = pg_store_of(base);
    size_t start = out->len, rows = 0;
    bool full = false;
    int err;

    pthread_mutex_lock(&pg->rlock);
    if (!(err = read_begin(pg)) && !(err = session_get(pg, sid, NULL)) &&
        rx_buf_putc(out, '['))
        err = -ENOMEM;
    /* In chunks: a page is cut by its bytes, and a log may be long. */
    while (!err && !full && (limit <= 0 || rows < (size_t)limit)) {
        size_t want = limit > 0 && (size_t)limit - rows < PG_STORE_HISTORY_CHUNK
                          ? (size_t)limit - rows
                          : PG_STORE_HISTORY_CHUNK;
        char after_s[24], want_s[24];
        const char *vals[3] = {sid, pg_store__fmt_i64(after_s, after_seq),
                               pg_store__fmt_i64(want_s, (int64_t)want)};
        PGresult *r;
        int got;

        if ((err = run(pg, "reading history",
                       "SELECT seq, input FROM inputs WHERE session_id = $1 AND seq > $2"
                       " ORDER BY seq LIMIT $3",
                       3, vals, &r)))
            break;
        got = PQntuples(r);
        err = page_rows(pg, sid, r, out, start, &rows, &after_seq, &full);
        PQclear(r);
        if ((size_t)got < want)
            break;
    }
    err = store__history_end(&pg->base, sid, out, start, err, after_seq, last);
    read_end(pg);
    pthread_mutex_unlock(&pg->rlock);
    return err;
}

int pg_store_state_at(struct store *base, const char *sid, int64_t seq,
                      struct rx_state *out)
{
    struct pg_store *pg = pg_store_of(base);
    const char *vals[1] = {sid};
    int64_t reached, last;
    PGresult *r = NULL;
    int err;

    pthread_mutex_lock(&pg->rlock);
    if ((err = read_begin(pg)) || (err = session_get(pg, sid, NULL)) ||
        (err = run(pg, "reading the last seq",
                   "SELECT coalesce(max(seq), 0) FROM inputs WHERE session_id = $1", 1,
                   vals, &r)))
        goto out_end;
    last = pg_store__i64(r, 0, 0);
    if ((err = pg_store__seq_in_log(pg, sid, seq, last)))
        goto out_end;
    err = pg_store__build_state(pg, &pg->r, sid, seq, out, &reached);
out_end:
    PQclear(r);
    read_end(pg);
    pthread_mutex_unlock(&pg->rlock);
    return err;
}

/* ---- titles, search, stats ---------------------------------------------------- */

int pg_store_session_title(struct store *base, const char *sid, char **out)
{
    struct pg_store *pg = pg_store_of(base);
    const char *vals[1] = {sid};
    PGresult *r;
    int err;

    *out = NULL;
    pthread_mutex_lock(&pg->rlock);
    err = run(pg, "reading a title", "SELECT title FROM sessions WHERE id = $1", 1, vals,
              &r);
    pthread_mutex_unlock(&pg->rlock);
    if (err)
        return err;
    if (!PQntuples(r)) {
        store__set_error(&pg->base, "no session '%s'", sid);
        err = -ENOENT;
    } else if (!PQgetisnull(r, 0, 0) && !(*out = strdup(PQgetvalue(r, 0, 0)))) {
        err = -ENOMEM;
    }
    PQclear(r);
    return err;
}

/*
 * One SELECT per word, intersected: a session matches when each word is in
 * one of its texts. A word is a phrase of its tokens ('simple': case folded,
 * no stemming); the last word's last token also matches as a prefix. The
 * words are bound ($1...), never spliced into the SQL.
 */
int pg_store__search_sql(size_t n, size_t first, struct rx_buf *sql)
{
    for (size_t i = 0; i < n; i++)
        if (rx_buf_printf(
                sql,
                "%sSELECT DISTINCT session_id FROM search_docs WHERE words @@ %s"
                "phraseto_tsquery('simple', $%zu)%s",
                i ? " INTERSECT " : "", i + 1 == n ? "regexp_replace(" : "", i + first,
                i + 1 == n ? "::text, '''$', ''':*')::tsquery" : ""))
            return -ENOMEM;
    return 0;
}

int pg_store_search(struct store *base, const char *const *words, size_t n, json_t **out)
{
    struct pg_store *pg = pg_store_of(base);
    struct rx_buf sql;
    json_t *ids = NULL;
    PGresult *r = NULL;
    int err;

    rx_buf_init(&sql, RX_BUF_SMALL_MAX);
    if ((err = pg_store__search_sql(n, 1, &sql)) || !(ids = json_array())) {
        err = -ENOMEM;
        goto out_release;
    }
    pthread_mutex_lock(&pg->rlock);
    err = run(pg, "searching", sql.data, (int)n, words, &r);
    pthread_mutex_unlock(&pg->rlock);
    for (int i = 0; !err && i < PQntuples(r); i++)
        if (json_array_append_new(ids, json_string(PQgetvalue(r, i, 0))))
            err = -ENOMEM;
    if (err == -ENOMEM)
        store__set_error(&pg->base, "out of memory searching");
out_release:
    PQclear(r);
    rx_buf_release(&sql);
    if (err) {
        json_decref(ids);
        return err;
    }
    *out = ids;
    return 0;
}

int pg_store_stats(struct store *base, int64_t *inputs, int64_t *bytes)
{
    struct pg_store *pg = pg_store_of(base);
    PGresult *r;
    int err;

    pthread_mutex_lock(&pg->rlock);
    err =
        run(pg, "reading sizes",
            "SELECT (SELECT count(*) FROM inputs), pg_total_relation_size('inputs')"
            " + pg_total_relation_size('sessions') + pg_total_relation_size('snapshots')"
            " + pg_total_relation_size('search_docs')",
            0, NULL, &r);
    pthread_mutex_unlock(&pg->rlock);
    if (err)
        return err;
    if (inputs)
        *inputs = pg_store__i64(r, 0, 0);
    if (bytes)
        *bytes = pg_store__i64(r, 0, 1);
    PQclear(r);
    return 0;
}
