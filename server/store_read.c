/*
 * store_read - the store's reads and the maintenance beside them: folding a
 * session's log into its state (load, state-at, session load), history,
 * fork, retention (gc) and stats. Reads go through the read-only connection
 * (store__reader_lock), so they never wait for a commit; fork and gc write on
 * the writer's connection under its lock, between two commits. Private
 * helpers come from store_internal.h; see store.h.
 */
#include "server/store.h"
#include "server/store_internal.h"
#include "server/pgstore.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_machine.h"
#include "state_machine/rx_json.h"

/* Room for one history row's framing: {"seq":N,"input":...}, */
#define STORE_HISTORY_ROW_OVERHEAD 40

/* One session id, its creation time and given title, as store_load lists them. */
struct store_entry {
    char *id;
    char *title; /* NULL: none given */
    int64_t created_at;
};

/* ---- folding ------------------------------------------------------------------ */

int store_input_parse(const char *text, size_t len, struct rx_input *in,
                      struct rx_error *why)
{
    struct rx_error e = {""}, je;
    const char *field = NULL;
    json_t *j;
    int err = rx_json_parse(text, len, 0, &j, &je);

    if (err == -ENOMEM)
        return rx_error_set(why, -ENOMEM, "could not be read: out of memory");
    if (err)
        return rx_error_set(why, -EPROTO, "is not JSON: %s", je.text);
    err = rx_input_parse(j, in, &field, &e);
    json_decref(j);
    if (err == -ENOMEM)
        return rx_error_set(why, -ENOMEM, "could not be read: out of memory");
    if (err)
        return rx_error_set(why, -EPROTO, "is invalid: %s",
                            e.text[0] ? e.text
                            : field   ? field
                                      : "?");
    return 0;
}

int store_input_fold(const char *text, size_t len, struct rx_state *s,
                     struct rx_error *why)
{
    struct rx_outcome out;
    struct rx_input in;
    int err = store_input_parse(text, len, &in, why);

    if (err)
        return err;
    err = rx_machine_apply(s, &in, &out);
    rx_input_release(&in);
    if (err)
        return rx_error_set(why, -ENOMEM, "could not be read: out of memory");
    if (out.verdict != RX_ACCEPTED)
        return rx_error_set(why, -EPROTO, "does not fold (%s: %s)",
                            rx_verdict_name(out.verdict), rx_reason_name(out.reason));
    return 0;
}

/* Apply one stored input (its JSON text) to s. 0, -EPROTO with the error set, -ENOMEM. */
static int fold_one(struct store *st, const char *sid, int64_t seq, const char *text,
                    size_t len, struct rx_state *s)
{
    struct rx_error why = {""};
    int err = store_input_fold(text, len, s, &why);

    if (err)
        store__set_error(st, "session '%s': input %lld %s", sid, (long long)seq,
                         why.text);
    return err;
}

/*
 * Build a session's state as of input `upto` (INT64_MAX: the newest) into
 * `out`, with the seq reached in *reached: the newest snapshot at or before
 * `upto`, then the inputs after it, which must follow each other without gap.
 * On failure `out` needs no release. c's lock held, in a read transaction.
 */
static int build_state(struct store *st, struct store_conn *c, const char *sid,
                       int64_t upto, struct rx_state *out, int64_t *reached)
{
    struct rx_error why = {""};
    struct rx_state s;
    sqlite3_stmt *q;
    int64_t seq = 0;
    int rc, err = 0;

    q = store__stmt(c, Q_SNAPSHOT_AT);
    store__bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, upto);
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        struct rx_error je;
        json_t *j;

        err = rx_json_parse((const char *)sqlite3_column_text(q, 1),
                            (size_t)sqlite3_column_bytes(q, 1), 0, &j, &je);
        seq = sqlite3_column_int64(q, 0);
        if (!err)
            err = rx_state_decode(j, &s, &why);
        json_decref(j);
        if (err == -ENOMEM) {
            store__set_error(st, "session '%s': out of memory decoding a snapshot", sid);
        } else if (err) {
            store__set_error(st, "session '%s': snapshot at %lld does not decode: %s",
                             sid, (long long)seq, j ? why.text : je.text);
            err = -EPROTO;
        }
    } else if (rc == SQLITE_DONE) {
        if ((err = rx_state_init(&s)))
            store__set_error(st, "out of memory");
    } else {
        err = store__sql_fail(st, c, rc, "reading a snapshot");
    }
    store__done(q);
    if (err)
        return err;

    q = store__stmt(c, Q_INPUTS_RANGE);
    store__bind_text(q, 1, sid, strlen(sid));
    sqlite3_bind_int64(q, 2, seq);
    sqlite3_bind_int64(q, 3, upto);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t row = sqlite3_column_int64(q, 0);

        if (row != seq + 1) {
            store__set_error(st, "session '%s': input %lld is missing", sid,
                             (long long)(seq + 1));
            err = -EPROTO;
            break;
        }
        err = fold_one(st, sid, row, (const char *)sqlite3_column_text(q, 1),
                       (size_t)sqlite3_column_bytes(q, 1), &s);
        if (err)
            break;
        seq = row;
    }
    if (!err && rc != SQLITE_DONE)
        err = store__sql_fail(st, c, rc, "reading inputs");
    store__done(q);
    if (err) {
        rx_state_release(&s);
        return err;
    }
    *out = s;
    *reached = seq;
    return 0;
}

static void entries_free(struct store_entry *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].id);
        free(v[i].title);
    }
    free(v);
}

/* The sessions, oldest first, copied out so no lock is held while each runs. */
static int list_sessions(struct store *st, struct store_conn *c, struct store_entry **out,
                         size_t *n_out)
{
    struct store_entry *v = NULL, *grown;
    size_t n = 0, cap = 0;
    sqlite3_stmt *q = store__stmt(c, Q_SESSION_LIST);
    int rc, err = 0;

    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            grown = realloc(v, cap * sizeof(*v));
            if (!grown) {
                err = -ENOMEM;
                break;
            }
            v = grown;
        }
        v[n].id = strdup((const char *)sqlite3_column_text(q, 0));
        v[n].created_at = sqlite3_column_int64(q, 1);
        v[n].title = sqlite3_column_type(q, 2) == SQLITE_NULL
                         ? NULL
                         : strdup((const char *)sqlite3_column_text(q, 2));
        if (!v[n].id || (sqlite3_column_type(q, 2) != SQLITE_NULL && !v[n].title)) {
            free(v[n].id);
            free(v[n].title);
            err = -ENOMEM;
            break;
        }
        n++;
    }
    if (!err && rc != SQLITE_DONE)
        err = store__sql_fail(st, c, rc, "listing sessions");
    else if (err)
        store__set_error(st, "out of memory listing sessions");
    store__done(q);
    if (err) {
        entries_free(v, n);
        return err;
    }
    *out = v;
    *n_out = n;
    return 0;
}

int store_load(struct store *st, store_each_fn each, void *ctx)
{
    if (st->pg)
        return pgstore_load(st->pg, each, ctx);
    struct store_entry *v = NULL;
    struct store_conn *c;
    size_t n = 0, i;
    int err;

    c = store__reader_lock(st);
    err = list_sessions(st, c, &v, &n);
    store__reader_unlock(st);
    for (i = 0; !err && i < n; i++) {
        struct rx_state s;
        int64_t seq;

        c = store__reader_lock(st);
        if (!(err = store__read_begin(st, c)))
            err = build_state(st, c, v[i].id, INT64_MAX, &s, &seq);
        store__read_end(c);
        store__reader_unlock(st);
        if (err)
            break;
        err = each(ctx, v[i].id, v[i].created_at, v[i].title, &s, seq);
        if (err)
            rx_state_release(&s);
    }
    entries_free(v, n);
    return err;
}

int store_session_load(struct store *st, const char *sid, struct rx_state *out,
                       int64_t *seq)
{
    if (st->pg)
        return pgstore_session_load(st->pg, sid, out, seq);
    struct store_conn *c = store__reader_lock(st);
    int err = store__read_begin(st, c);

    if (!err)
        err = store__session_get(st, c, sid, NULL);
    if (!err)
        err = build_state(st, c, sid, INT64_MAX, out, seq);
    store__read_end(c);
    store__reader_unlock(st);
    return err;
}

/* ---- time travel ------------------------------------------------------------------ */

int store_history_page(struct store *st, const char *sid, int64_t after_seq, int limit,
                       struct rx_buf *out, int64_t *last)
{
    if (st->pg)
        return pgstore_history_page(st->pg, sid, after_seq, limit, out, last);
    struct store_conn *c = store__reader_lock(st);
    size_t start = out->len, rows = 0;
    sqlite3_stmt *q = NULL;
    bool full = false;
    int rc = SQLITE_DONE, err = store__read_begin(st, c);

    if (!err)
        err = store__session_get(st, c, sid, NULL);
    if (!err)
        err = rx_buf_putc(out, '[');
    if (!err) {
        q = store__stmt(c, Q_HISTORY);
        store__bind_text(q, 1, sid, strlen(sid));
        sqlite3_bind_int64(q, 2, after_seq);
        sqlite3_bind_int64(q, 3, limit > 0 ? limit : -1);
    }
    while (!err && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t seq = sqlite3_column_int64(q, 0);
        const char *text = (const char *)sqlite3_column_text(q, 1);
        size_t len = (size_t)sqlite3_column_bytes(q, 1);

        if (rows && out->len - start + len + STORE_HISTORY_ROW_OVERHEAD >
                        STORE_HISTORY_PAGE_MAX) {
            full = true; /* the page is as big as pages get: the client asks on */
            break;
        }
        /* The stored text is rx_input_encode's compact JSON, copied as it is;
           a row that cannot be an object is damage, not an input. */
        if (!text || len < 2 || text[0] != '{' || text[len - 1] != '}') {
            store__set_error(st, "session '%s': input %lld is not JSON", sid,
                             (long long)seq);
            err = -EPROTO;
            break;
        }
        err = (rows ? rx_buf_putc(out, ',') : 0) ||
              rx_buf_printf(out, "{\"seq\":%lld,\"input\":", (long long)seq) ||
              rx_buf_append(out, text, len) || rx_buf_putc(out, '}');
        if (err)
            err = -ENOMEM;
        rows++;
        after_seq = seq;
    }
    if (!err && !full && rc != SQLITE_DONE)
        err = store__sql_fail(st, c, rc, "reading history");
    if (q)
        store__done(q);
    if (!err && rx_buf_putc(out, ']'))
        err = -ENOMEM;
    if (err == -ENOMEM)
        store__set_error(st, "session '%s': out of memory reading history", sid);
    if (err)
        rx_buf_truncate(out, start);
    else
        *last = after_seq;
    store__read_end(c);
    store__reader_unlock(st);
    return err;
}

int store_history_text(struct store *st, const char *sid, int64_t after_seq, int limit,
                       struct rx_buf *out)
{
    int64_t last;

    return store_history_page(st, sid, after_seq, limit, out, &last);
}

int store_history(struct store *st, const char *sid, int64_t after_seq, int limit,
                  json_t **out)
{
    struct rx_buf b;
    json_t *arr = NULL;
    int err;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    err = store_history_text(st, sid, after_seq, limit, &b);
    if (!err && (err = rx_json_parse(b.data, b.len, 0, &arr, NULL)) == -EINVAL) {
        store__set_error(st, "session '%s': history is not JSON", sid);
        err = -EPROTO;
    } else if (err == -ENOMEM) {
        store__set_error(st, "out of memory");
    }
    rx_buf_release(&b);
    if (!err)
        *out = arr;
    return err;
}

/* -ERANGE unless 0 <= seq <= the session's last seq. c's lock held. */
static int check_seq(struct store *st, struct store_conn *c, const char *sid, int64_t seq)
{
    int64_t last;
    int err = store__query_i64(st, c, Q_LAST_SEQ, sid, &last);

    if (err)
        return err;
    if (seq < 0 || seq > last) {
        store__set_error(st, "session '%s': seq %lld is not in 0..%lld", sid,
                         (long long)seq, (long long)last);
        return -ERANGE;
    }
    return 0;
}

int store_state_at(struct store *st, const char *sid, int64_t seq, struct rx_state *out)
{
    if (st->pg)
        return pgstore_state_at(st->pg, sid, seq, out);
    struct store_conn *c = store__reader_lock(st);
    int64_t reached;
    int err = store__read_begin(st, c);

    if (!err && !(err = store__session_get(st, c, sid, NULL)) &&
        !(err = check_seq(st, c, sid, seq)))
        err = build_state(st, c, sid, seq, out, &reached);
    store__read_end(c);
    store__reader_unlock(st);
    return err;
}

int store_fork(struct store *st, const char *sid, int64_t at, const char *new_sid,
               int64_t created_at)
{
    if (st->pg)
        return pgstore_fork(st->pg, sid, at, new_sid, created_at);
    static const int copies[] = {Q_FORK_INPUTS, Q_FORK_SNAPSHOT, Q_FORK_DOCS,
                                 Q_FORK_TITLE};
    struct store_conn *c = &st->w;
    sqlite3_stmt *q;
    int rc, err;

    pthread_mutex_lock(&st->lock);
    if ((err = store__tx_begin(st)))
        goto out_unlock;
    /* The source's recent inputs are indexed first: the fork copies the index. */
    if ((err = store__session_get(st, c, sid, NULL)) ||
        (err = check_seq(st, c, sid, at)) || (err = store__index_all(st)))
        goto out_rollback;
    q = store__stmt(c, Q_SESSION_INSERT);
    store__bind_text(q, 1, new_sid, strlen(new_sid));
    sqlite3_bind_int64(q, 2, created_at);
    if ((rc = store__run(q))) {
        err = store__sql_fail(st, c, rc, "creating the fork");
        goto out_rollback;
    }
    for (size_t i = 0; i < sizeof(copies) / sizeof(copies[0]); i++) {
        q = store__stmt(c, copies[i]);
        store__bind_text(q, 1, new_sid, strlen(new_sid));
        store__bind_text(q, 2, sid, strlen(sid));
        sqlite3_bind_int64(q, 3, at);
        if ((rc = store__run(q))) {
            err = store__sql_fail(st, c, rc, "copying the log");
            goto out_rollback;
        }
    }
    err = store__tx_commit(st);
    goto out_unlock;

out_rollback:
    store__tx_rollback(st);
out_unlock:
    pthread_mutex_unlock(&st->lock);
    return err;
}

/* ---- retention and size ------------------------------------------------------------ */

/* The expired ids (when `ids`) and their input count. lock held, in a transaction. */
static int list_expired(struct store *st, int64_t older_than_ms, json_t *ids,
                        int64_t *inputs)
{
    sqlite3_stmt *q = store__stmt(&st->w, Q_EXPIRED);
    int rc, err = 0;

    *inputs = 0;
    sqlite3_bind_int64(q, 1, older_than_ms);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        *inputs += sqlite3_column_int64(q, 1);
        if (json_array_append_new(ids,
                                  json_string((const char *)sqlite3_column_text(q, 0)))) {
            store__set_error(st, "out of memory listing expired sessions");
            err = -ENOMEM;
            break;
        }
    }
    if (!err && rc != SQLITE_DONE)
        err = store__sql_fail(st, &st->w, rc, "listing expired sessions");
    store__done(q);
    return err;
}

int store_gc_list(struct store *st, int64_t older_than_ms, json_t **removed_ids,
                  int64_t *removed_inputs)
{
    if (st->pg)
        return pgstore_gc_list(st->pg, older_than_ms, removed_ids, removed_inputs);
    static const int deletes[] = {Q_GC_INPUTS, Q_GC_RECENT,  Q_GC_SNAPSHOTS,
                                  Q_GC_DOCS,   Q_GC_PENDING, Q_GC_SESSIONS};
    json_t *ids = json_array();
    int64_t inputs = 0;
    int rc, err;

    if (!ids)
        return -ENOMEM;
    pthread_mutex_lock(&st->lock);
    if ((err = store__tx_begin(st)))
        goto out_unlock;
    if ((err = list_expired(st, older_than_ms, ids, &inputs)))
        goto out_rollback;
    for (size_t i = 0; i < sizeof(deletes) / sizeof(deletes[0]); i++) {
        sqlite3_stmt *q = store__stmt(&st->w, deletes[i]);

        sqlite3_bind_int64(q, 1, older_than_ms);
        if ((rc = store__run(q))) {
            err = store__sql_fail(st, &st->w, rc, "deleting expired sessions");
            goto out_rollback;
        }
    }
    if ((err = store__index_clamp(st)))
        goto out_rollback;
    if ((err = store__tx_commit(st)))
        goto out_unlock;
    for (size_t i = 0; i < json_array_size(ids); i++)
        store__last_drop(&st->last, json_string_value(json_array_get(ids, i)));
    if (removed_inputs)
        *removed_inputs = inputs;
    if (removed_ids) {
        *removed_ids = ids;
        ids = NULL;
    }
    goto out_unlock;

out_rollback:
    store__tx_rollback(st);
out_unlock:
    pthread_mutex_unlock(&st->lock);
    json_decref(ids);
    return err;
}

int store_gc(struct store *st, int64_t older_than_ms, int *removed_sessions,
             int64_t *removed_inputs)
{
    json_t *ids = NULL;
    int err = store_gc_list(st, older_than_ms, &ids, removed_inputs);

    if (!err && removed_sessions)
        *removed_sessions = (int)json_array_size(ids);
    json_decref(ids);
    return err;
}

int store_stats(struct store *st, int64_t *inputs, int64_t *bytes)
{
    if (st->pg)
        return pgstore_stats(st->pg, inputs, bytes);
    struct store_conn *c = store__reader_lock(st);
    int64_t n = 0, pages = 0, size = 0, free_pages = 0;
    int err = store__read_begin(st, c);

    if (!err && !(err = store__query_i64(st, c, Q_COUNT_INPUTS, NULL, &n)) &&
        !(err = store__query_i64(st, c, Q_PAGE_COUNT, NULL, &pages)) &&
        !(err = store__query_i64(st, c, Q_PAGE_SIZE, NULL, &size)) &&
        !(err = store__query_i64(st, c, Q_FREELIST, NULL, &free_pages))) {
        if (inputs)
            *inputs = n;
        if (bytes)
            *bytes = (pages - free_pages) * size;
    }
    store__read_end(c);
    store__reader_unlock(st);
    return err;
}
