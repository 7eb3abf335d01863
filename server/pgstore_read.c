/*
 * pgstore_read - the reads on PostgreSQL: folding a session's log into its
 * state (load, session load, state-at), history pages, titles, search and
 * stats, on the reader's connection (`r`, under rlock), so a long read
 * holds up no commit. A read that spans queries runs in one REPEATABLE
 * READ transaction: one snapshot of the log. Private to server/pgstore*.c
 * through pgstore_internal.h; see pgstore.h.
 */
#include "server/pgstore.h"
#include "server/pgstore_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_machine.h"
#include "state_machine/rx_json.h"

/* Room for one history row's framing: {"seq":N,"input":...}, */
#define PGSTORE_HISTORY_ROW_OVERHEAD 40

/* Run `sql` with text parameters on the reader's connection. rlock held. */
static int run(struct pgstore *pg, const char *what, const char *sql, int n,
               const char *const *vals, PGresult **out)
{
    return pgstore__exec(pg, &pg->r, what, sql, n, vals, NULL, NULL, out);
}

static int read_begin(struct pgstore *pg)
{
    return run(pg, "begin reading", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0,
               NULL, NULL);
}

static void read_end(struct pgstore *pg)
{
    pgstore__rollback(pg, &pg->r); /* read only: nothing to keep */
}

/* 0 with the session's creation time (may be NULL), -ENOENT or -EIO. rlock held. */
static int session_get(struct pgstore *pg, const char *sid, int64_t *created_at)
{
    const char *vals[1] = {sid};
    PGresult *r;
    int err = run(pg, "session lookup", "SELECT created_at FROM sessions WHERE id = $1",
                  1, vals, &r);

    if (err)
        return err;
    if (!PQntuples(r)) {
        pgstore__set_error(pg, "no session '%s'", sid);
        err = -ENOENT;
    } else if (created_at) {
        *created_at = pgstore__i64(r, 0, 0);
    }
    PQclear(r);
    return err;
}

/* ---- folding ------------------------------------------------------------------ */

/* Apply one stored input (its JSON text) to s. 0, -EPROTO with the error set, -ENOMEM. */
static int fold_one(struct pgstore *pg, const char *sid, int64_t seq, const char *text,
                    size_t len, struct rx_state *s)
{
    struct rx_error why = {""};
    int err = store_input_fold(text, len, s, &why);

    if (err)
        pgstore__set_error(pg, "session '%s': input %lld %s", sid, (long long)seq,
                           why.text);
    return err;
}

/* The newest snapshot at or before `upto` into *s (or the initial state), its seq. */
static int start_state(struct pgstore *pg, const char *sid, int64_t upto,
                       struct rx_state *s, int64_t *seq)
{
    char upto_s[24];
    const char *vals[2] = {sid, pgstore__fmt_i64(upto_s, upto)};
    struct rx_error why = {""}, je;
    PGresult *r;
    json_t *j;
    int err;

    if ((err = run(pg, "reading a snapshot",
                   "SELECT seq, state FROM snapshots WHERE session_id = $1 AND seq <= $2"
                   " ORDER BY seq DESC LIMIT 1",
                   2, vals, &r)))
        return err;
    *seq = 0;
    if (!PQntuples(r)) {
        PQclear(r);
        if ((err = rx_state_init(s)))
            pgstore__set_error(pg, "out of memory");
        return err;
    }
    *seq = pgstore__i64(r, 0, 0);
    err = rx_json_parse(PQgetvalue(r, 0, 1), (size_t)PQgetlength(r, 0, 1), 0, &j, &je);
    if (!err)
        err = rx_state_decode(j, s, &why);
    json_decref(j);
    if (err == -ENOMEM) {
        pgstore__set_error(pg, "session '%s': out of memory decoding a snapshot", sid);
    } else if (err) {
        pgstore__set_error(pg, "session '%s': snapshot at %lld does not decode: %s", sid,
                           (long long)*seq, j ? why.text : je.text);
        err = -EPROTO;
    }
    PQclear(r);
    return err;
}

/*
 * A session's state as of input `upto` (INT64_MAX: the newest) into `out`,
 * with the seq reached: the newest snapshot at or before it, then the
 * inputs after it, without gap. On failure `out` needs no release. rlock
 * held, in a read transaction.
 */
static int build_state(struct pgstore *pg, const char *sid, int64_t upto,
                       struct rx_state *out, int64_t *reached)
{
    char from_s[24], upto_s[24];
    const char *vals[3] = {sid, from_s, pgstore__fmt_i64(upto_s, upto)};
    struct rx_state s;
    PGresult *r = NULL;
    int64_t seq;
    int err;

    if ((err = start_state(pg, sid, upto, &s, &seq)))
        return err;
    pgstore__fmt_i64(from_s, seq);
    if ((err = run(pg, "reading inputs",
                   "SELECT seq, input FROM inputs WHERE session_id = $1 AND seq > $2"
                   " AND seq <= $3 ORDER BY seq",
                   3, vals, &r)))
        goto out_release;
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t row = pgstore__i64(r, i, 0);

        if (row != seq + 1) {
            pgstore__set_error(pg, "session '%s': input %lld is missing", sid,
                               (long long)(seq + 1));
            err = -EPROTO;
            goto out_release;
        }
        if ((err = fold_one(pg, sid, row, PQgetvalue(r, i, 1),
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

int pgstore_load(struct pgstore *pg, store_each_fn each, void *ctx)
{
    PGresult *list = NULL;
    int err;

    /* The list first, then each session in a read of its own: no lock is held
       while the callback runs. */
    pthread_mutex_lock(&pg->rlock);
    err = run(pg, "listing sessions",
              "SELECT id, created_at, title FROM sessions ORDER BY created_at, id", 0,
              NULL, &list);
    pthread_mutex_unlock(&pg->rlock);
    for (int i = 0; !err && i < PQntuples(list); i++) {
        const char *sid = PQgetvalue(list, i, 0);
        struct rx_state s;
        int64_t seq;

        pthread_mutex_lock(&pg->rlock);
        if (!(err = read_begin(pg)))
            err = build_state(pg, sid, INT64_MAX, &s, &seq);
        read_end(pg);
        pthread_mutex_unlock(&pg->rlock);
        if (err)
            break;
        err = each(ctx, sid, pgstore__i64(list, i, 1),
                   PQgetisnull(list, i, 2) ? NULL : PQgetvalue(list, i, 2), &s, seq);
        if (err)
            rx_state_release(&s);
    }
    PQclear(list);
    return err;
}

int pgstore_session_load(struct pgstore *pg, const char *sid, struct rx_state *out,
                         int64_t *seq)
{
    int err;

    pthread_mutex_lock(&pg->rlock);
    if (!(err = read_begin(pg)) && !(err = session_get(pg, sid, NULL)))
        err = build_state(pg, sid, INT64_MAX, out, seq);
    read_end(pg);
    pthread_mutex_unlock(&pg->rlock);
    return err;
}

int pgstore_session_created(struct pgstore *pg, const char *sid, int64_t *created_at)
{
    int err;

    pthread_mutex_lock(&pg->rlock);
    err = session_get(pg, sid, created_at);
    pthread_mutex_unlock(&pg->rlock);
    return err;
}

/* ---- time travel ------------------------------------------------------------------ */

/* Append rows of `r` to the page; *full when the page is as big as pages get. */
static int page_rows(struct pgstore *pg, const char *sid, PGresult *r, struct rx_buf *out,
                     size_t start, size_t *rows, int64_t *after, bool *full)
{
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t seq = pgstore__i64(r, i, 0);
        const char *text = PQgetvalue(r, i, 1);
        size_t len = (size_t)PQgetlength(r, i, 1);

        if (*rows && out->len - start + len + PGSTORE_HISTORY_ROW_OVERHEAD >
                         STORE_HISTORY_PAGE_MAX) {
            *full = true;
            return 0;
        }
        /* rx_input_encode's compact JSON, copied as it is. */
        if (len < 2 || text[0] != '{' || text[len - 1] != '}') {
            pgstore__set_error(pg, "session '%s': input %lld is not JSON", sid,
                               (long long)seq);
            return -EPROTO;
        }
        if ((*rows && rx_buf_putc(out, ',')) ||
            rx_buf_printf(out, "{\"seq\":%lld,\"input\":", (long long)seq) ||
            rx_buf_append(out, text, len) || rx_buf_putc(out, '}'))
            return -ENOMEM;
        (*rows)++;
        *after = seq;
    }
    return 0;
}

int pgstore_history_page(struct pgstore *pg, const char *sid, int64_t after_seq,
                         int limit, struct rx_buf *out, int64_t *last)
{
    size_t start = out->len, rows = 0;
    bool full = false;
    int err;

    pthread_mutex_lock(&pg->rlock);
    if (!(err = read_begin(pg)) && !(err = session_get(pg, sid, NULL)) &&
        rx_buf_putc(out, '['))
        err = -ENOMEM;
    /* In chunks: a page is cut by its bytes, and a log may be long. */
    while (!err && !full && (limit <= 0 || rows < (size_t)limit)) {
        size_t want = limit > 0 && (size_t)limit - rows < PGSTORE_HISTORY_CHUNK
                          ? (size_t)limit - rows
                          : PGSTORE_HISTORY_CHUNK;
        char after_s[24], want_s[24];
        const char *vals[3] = {sid, pgstore__fmt_i64(after_s, after_seq),
                               pgstore__fmt_i64(want_s, (int64_t)want)};
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
    if (!err && rx_buf_putc(out, ']'))
        err = -ENOMEM;
    if (err == -ENOMEM)
        pgstore__set_error(pg, "session '%s': out of memory reading history", sid);
    if (err)
        rx_buf_truncate(out, start);
    else
        *last = after_seq;
    read_end(pg);
    pthread_mutex_unlock(&pg->rlock);
    return err;
}

int pgstore_state_at(struct pgstore *pg, const char *sid, int64_t seq,
                     struct rx_state *out)
{
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
    last = pgstore__i64(r, 0, 0);
    if ((err = pgstore__seq_in_log(pg, sid, seq, last)))
        goto out_end;
    err = build_state(pg, sid, seq, out, &reached);
out_end:
    PQclear(r);
    read_end(pg);
    pthread_mutex_unlock(&pg->rlock);
    return err;
}

/* ---- titles, search, stats ---------------------------------------------------- */

int pgstore_session_title(struct pgstore *pg, const char *sid, char **out)
{
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
        pgstore__set_error(pg, "no session '%s'", sid);
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
static int search_sql(size_t n, struct rx_buf *sql)
{
    for (size_t i = 0; i < n; i++)
        if (rx_buf_printf(
                sql,
                "%sSELECT DISTINCT session_id FROM search_docs WHERE words @@ %s"
                "phraseto_tsquery('simple', $%zu)%s",
                i ? " INTERSECT " : "", i + 1 == n ? "regexp_replace(" : "", i + 1,
                i + 1 == n ? "::text, '''$', ''':*')::tsquery" : ""))
            return -ENOMEM;
    return 0;
}

int pgstore_search(struct pgstore *pg, const char *const *words, size_t n, json_t **out)
{
    struct rx_buf sql;
    json_t *ids = NULL;
    PGresult *r = NULL;
    int err;

    if (!n || n > STORE_SEARCH_WORDS_MAX)
        return -EINVAL;
    rx_buf_init(&sql, RX_BUF_SMALL_MAX);
    if ((err = search_sql(n, &sql)) || !(ids = json_array())) {
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
        pgstore__set_error(pg, "out of memory searching");
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

int pgstore_stats(struct pgstore *pg, int64_t *inputs, int64_t *bytes)
{
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
        *inputs = pgstore__i64(r, 0, 0);
    if (bytes)
        *bytes = pgstore__i64(r, 0, 1);
    PQclear(r);
    return 0;
}
