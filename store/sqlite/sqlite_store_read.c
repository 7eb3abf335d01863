/*
 * sqlite_store_read - the SQLite store's reads and the maintenance beside
 * them: folding a session's log into its state (session load, state-at),
 * the sessions listed, history pages, fork, retention (gc) and stats. Reads
 * go through the read-only connection (sqlite_store__reader_lock), so they
 * never wait for a commit; fork and gc write on the writer's connection under
 * its lock, between two commits. Private helpers come from
 * sqlite_store_internal.h; see store.h.
 */
#include "store/store.h"
#include "store/sqlite/sqlite_store_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "state_machine/rx_buf.h"

/* The inputs after the snapshot must follow each other without gap. */
int sqlite_store__build_state(struct sqlite_store *st, struct store_conn *c,
                              const char *sid, int64_t upto, struct rx_state *out,
                              int64_t *reached)
{
    struct rx_state s;
    sqlite3_stmt *q;
    int64_t seq = 0;
    int rc, err = 0;

    q = sqlite_store__stmt(c, Q_SNAPSHOT_AT);
    sqlite_store__bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, upto);
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        seq = sqlite3_column_int64(q, 0);
        err = store__snapshot_decode(&st->base, sid, seq,
                                     (const char *)sqlite3_column_text(q, 1),
                                     (size_t)sqlite3_column_bytes(q, 1), &s);
    } else if (rc == SQLITE_DONE) {
        if ((err = rx_state_init(&s)))
            store__set_error(&st->base, "out of memory");
    } else {
        err = sqlite_store__sql_fail(st, c, rc, "reading a snapshot");
    }
    sqlite_store__done(q);
    if (err)
        return err;

    q = sqlite_store__stmt(c, Q_INPUTS_RANGE);
    sqlite_store__bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, seq);
    sqlite3_bind_int64(q, 3, upto);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t row = sqlite3_column_int64(q, 0);

        if (row != seq + 1) {
            store__set_error(&st->base, "session '%s': input %lld is missing", sid,
                             (long long)(seq + 1));
            err = -EPROTO;
            break;
        }
        err =
            store__fold_one(&st->base, sid, row, (const char *)sqlite3_column_text(q, 1),
                            (size_t)sqlite3_column_bytes(q, 1), &s);
        if (err)
            break;
        seq = row;
    }
    if (!err && rc != SQLITE_DONE)
        err = sqlite_store__sql_fail(st, c, rc, "reading inputs");
    sqlite_store__done(q);
    if (err) {
        rx_state_release(&s);
        return err;
    }
    *out = s;
    *reached = seq;
    return 0;
}

/* One page of the sessions (store_list_sessions). */
int sqlite_store_list_sessions(struct store *base, const struct store_cursor *after,
                               size_t limit, struct store_list *out)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c = sqlite_store__reader_lock(st);
    sqlite3_stmt *q = sqlite_store__stmt(c, Q_SESSION_PAGE);
    const char *id = after ? after->id : "";
    int err;

    sqlite3_bind_int64(q, 1, after ? after->created_at : INT64_MIN);
    sqlite_store__bind_text(q, 2, id, strlen(id));
    sqlite3_bind_int64(q, 3, limit ? (int64_t)limit : -1);
    err = sqlite_store__list_rows(st, c, q, out);
    sqlite_store__done(q);
    sqlite_store__reader_unlock(st);
    return err;
}

int sqlite_store_session_load(struct store *base, const char *sid, struct rx_state *out,
                              int64_t *seq)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c = sqlite_store__reader_lock(st);
    int err = sqlite_store__read_begin(st, c);

    if (!err)
        err = sqlite_store__session_get(st, c, sid, NULL);
    if (!err)
        err = sqlite_store__build_state(st, c, sid, INT64_MAX, out, seq);
    sqlite_store__read_end(c);
    sqlite_store__reader_unlock(st);
    return err;
}

/* ---- streamed text (SPEC 3.7) ------------------------------------------------------ */

int sqlite_store_stream_text(struct store *base, const char *sid, const char *message_id,
                             struct rx_buf *out)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c = sqlite_store__reader_lock(st);
    sqlite3_stmt *q = sqlite_store__stmt(c, Q_STREAM_READ);
    int64_t at = 0;
    int rc, err = 0;

    sqlite_store__bind_text(q, 1, sid, strlen(sid));
    sqlite_store__bind_text(q, 2, message_id, strlen(message_id));
    /* One statement reads one snapshot: no transaction of its own needed. */
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t off = sqlite3_column_int64(q, 0);
        const char *text = (const char *)sqlite3_column_text(q, 1);
        int64_t len = sqlite3_column_bytes(q, 1);

        if (off > at)
            break; /* a gap: what follows it cannot be told */
        if (off + len <= at)
            continue;
        if ((err = rx_buf_append(out, text + (at - off), (size_t)(off + len - at)))) {
            store__set_error(&st->base, "session '%s': streamed text of %s: %s", sid,
                             message_id, err == -E2BIG ? "too big" : "out of memory");
            break;
        }
        at = off + len;
    }
    if (!err && rc != SQLITE_ROW && rc != SQLITE_DONE)
        err = sqlite_store__sql_fail(st, c, rc, "reading streamed text");
    sqlite_store__done(q);
    sqlite_store__reader_unlock(st);
    return err;
}

/* ---- time travel ------------------------------------------------------------------ */

int sqlite_store_history_page(struct store *base, const char *sid, int64_t after_seq,
                              int limit, struct rx_buf *out, int64_t *last)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c = sqlite_store__reader_lock(st);
    size_t start = out->len, rows = 0;
    sqlite3_stmt *q = NULL;
    bool full = false;
    int rc = SQLITE_DONE, err = sqlite_store__read_begin(st, c);

    if (!err)
        err = sqlite_store__session_get(st, c, sid, NULL);
    if (!err)
        err = rx_buf_putc(out, '[');
    if (!err) {
        q = sqlite_store__stmt(c, Q_HISTORY);
        sqlite_store__bind_text(q, 1, sid, strlen(sid));
        sqlite3_bind_int64(q, 2, after_seq);
        sqlite3_bind_int64(q, 3, limit > 0 ? limit : -1);
    }
    while (!err && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t seq = sqlite3_column_int64(q, 0);
        const char *text = (const char *)sqlite3_column_text(q, 1);
        size_t len = (size_t)sqlite3_column_bytes(q, 1);

        err = store__history_row(&st->base, sid, out, start, rows, seq, text, len);
        if (err == 1) {
            err = 0;
            full = true; /* the page is as big as pages get: the client asks on */
            break;
        }
        if (err)
            break;
        rows++;
        after_seq = seq;
    }
    if (!err && !full && rc != SQLITE_DONE)
        err = sqlite_store__sql_fail(st, c, rc, "reading history");
    if (q)
        sqlite_store__done(q);
    err = store__history_end(&st->base, sid, out, start, err, after_seq, last);
    sqlite_store__read_end(c);
    sqlite_store__reader_unlock(st);
    return err;
}

/* -ERANGE unless 0 <= seq <= the session's last seq. c's lock held. */
static int check_seq(struct sqlite_store *st, struct store_conn *c, const char *sid,
                     int64_t seq)
{
    int64_t last;
    int err = sqlite_store__query_i64(st, c, Q_LAST_SEQ, sid, &last);

    if (err)
        return err;
    if (seq < 0 || seq > last) {
        store__set_error(&st->base, "session '%s': seq %lld is not in 0..%lld", sid,
                         (long long)seq, (long long)last);
        return -ERANGE;
    }
    return 0;
}

int sqlite_store_state_at(struct store *base, const char *sid, int64_t seq,
                          struct rx_state *out)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c = sqlite_store__reader_lock(st);
    int64_t reached;
    int err = sqlite_store__read_begin(st, c);

    if (!err && !(err = sqlite_store__session_get(st, c, sid, NULL)) &&
        !(err = check_seq(st, c, sid, seq)))
        err = sqlite_store__build_state(st, c, sid, seq, out, &reached);
    sqlite_store__read_end(c);
    sqlite_store__reader_unlock(st);
    return err;
}

/* A fork to make: the arguments of its transaction. */
struct fork_args {
    const char *sid, *new_sid, *owner;
    int64_t at, created_at;
};

/* The fork's row as of its state at `at` (SPEC 6.2). In the transaction. */
static int fork_row(struct sqlite_store *st, const struct fork_args *a)
{
    struct store_row row = {0};
    struct rx_state s;
    int64_t reached;
    int err = sqlite_store__build_state(st, &st->w, a->sid, a->at, &s, &reached);

    if (err)
        return err;
    if ((err = store__row_of(&s, &row)))
        store__set_error(&st->base, "out of memory forking");
    rx_state_release(&s);
    if (!err)
        err = sqlite_store__row_put(st, a->new_sid, &row);
    store__row_release(&row);
    return err;
}

static int fork_rows(struct sqlite_store *st, void *arg)
{
    static const int copies[] = {Q_FORK_INPUTS, Q_FORK_SNAPSHOT, Q_FORK_DOCS,
                                 Q_FORK_TITLE};
    struct fork_args *a = arg;
    struct store_conn *c = &st->w;
    int rc, err;

    /* The source's recent inputs are indexed first: the fork copies the index. */
    if ((err = sqlite_store__session_get(st, c, a->sid, NULL)) ||
        (err = check_seq(st, c, a->sid, a->at)) || (err = sqlite_store__index_all(st)) ||
        (err = sqlite_store__insert_session(st, a->new_sid, a->owner, a->created_at,
                                            "creating the fork")))
        return err;
    for (size_t i = 0; i < sizeof(copies) / sizeof(copies[0]); i++) {
        sqlite3_stmt *q = sqlite_store__stmt(c, copies[i]);

        sqlite_store__bind_text(q, 1, a->new_sid, strlen(a->new_sid));
        sqlite_store__bind_text(q, 2, a->sid, strlen(a->sid));
        sqlite3_bind_int64(q, 3, a->at);
        if ((rc = sqlite_store__run(q)))
            return sqlite_store__sql_fail(st, c, rc, "copying the log");
    }
    return fork_row(st, a);
}

int sqlite_store_fork(struct store *base, const char *sid, int64_t at,
                      const char *new_sid, const char *owner, int64_t created_at)
{
    struct fork_args a = {sid, new_sid, owner, at, created_at};

    return sqlite_store__write_tx(sqlite_store_of(base), fork_rows, NULL, &a);
}

/* ---- retention and size ------------------------------------------------------------ */

/* The expired ids (when `ids`) and their input count. lock held, in a transaction. */
static int list_expired(struct sqlite_store *st, int64_t older_than_ms, json_t *ids,
                        int64_t *inputs)
{
    sqlite3_stmt *q = sqlite_store__stmt(&st->w, Q_EXPIRED);
    int rc, err = 0;

    *inputs = 0;
    sqlite3_bind_int64(q, 1, older_than_ms);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        *inputs += sqlite3_column_int64(q, 1);
        if (json_array_append_new(ids,
                                  json_string((const char *)sqlite3_column_text(q, 0)))) {
            store__set_error(&st->base, "out of memory listing expired sessions");
            err = -ENOMEM;
            break;
        }
    }
    if (!err && rc != SQLITE_DONE)
        err = sqlite_store__sql_fail(st, &st->w, rc, "listing expired sessions");
    sqlite_store__done(q);
    return err;
}

/* Retention's transaction: what it is given and what it found. */
struct gc_args {
    int64_t older_than_ms;
    json_t *ids; /* the expired ids */
    int64_t inputs;
};

static int gc_rows(struct sqlite_store *st, void *arg)
{
    static const int deletes[] = {Q_GC_INPUTS, Q_GC_RECENT,  Q_GC_SNAPSHOTS,
                                  Q_GC_DOCS,   Q_GC_PENDING, Q_GC_SESSIONS};
    struct gc_args *a = arg;
    int rc, err;

    if ((err = list_expired(st, a->older_than_ms, a->ids, &a->inputs)))
        return err;
    for (size_t i = 0; i < sizeof(deletes) / sizeof(deletes[0]); i++) {
        sqlite3_stmt *q = sqlite_store__stmt(&st->w, deletes[i]);

        sqlite3_bind_int64(q, 1, a->older_than_ms);
        if ((rc = sqlite_store__run(q)))
            return sqlite_store__sql_fail(st, &st->w, rc, "deleting expired sessions");
    }
    return sqlite_store__index_clamp(st);
}

/* No row of them is left: forget their last seqs. */
static int gc_forget(struct sqlite_store *st, void *arg)
{
    struct gc_args *a = arg;

    for (size_t i = 0; i < json_array_size(a->ids); i++)
        sqlite_store__last_drop(&st->last, json_string_value(json_array_get(a->ids, i)));
    return 0;
}

int sqlite_store_gc_list(struct store *base, int64_t older_than_ms, json_t **removed_ids,
                         int64_t *removed_inputs)
{
    struct gc_args a = {older_than_ms, json_array(), 0};
    int err;

    if (!a.ids)
        return -ENOMEM;
    /* A failed try may have listed some: they were not removed. */
    err = sqlite_store__write_tx(sqlite_store_of(base), gc_rows, gc_forget, &a);
    if (!err && removed_inputs)
        *removed_inputs = a.inputs;
    if (!err && removed_ids) {
        *removed_ids = a.ids;
        a.ids = NULL;
    }
    json_decref(a.ids);
    return err;
}

int sqlite_store_stats(struct store *base, int64_t *inputs, int64_t *bytes)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c = sqlite_store__reader_lock(st);
    int64_t n = 0, pages = 0, size = 0, free_pages = 0;
    int err = sqlite_store__read_begin(st, c);

    if (!err && !(err = sqlite_store__query_i64(st, c, Q_COUNT_INPUTS, NULL, &n)) &&
        !(err = sqlite_store__query_i64(st, c, Q_PAGE_COUNT, NULL, &pages)) &&
        !(err = sqlite_store__query_i64(st, c, Q_PAGE_SIZE, NULL, &size)) &&
        !(err = sqlite_store__query_i64(st, c, Q_FREELIST, NULL, &free_pages))) {
        if (inputs)
            *inputs = n;
        if (bytes)
            *bytes = (pages - free_pages) * size;
    }
    sqlite_store__read_end(c);
    sqlite_store__reader_unlock(st);
    return err;
}
