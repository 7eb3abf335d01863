/*
 * pg_store_admin - the writes beside group commit: creating, deleting,
 * forking, importing and renaming sessions, and retention. Each is one
 * transaction on the admin connection (`a`, under alock): none waits for a
 * batch of inputs to commit, nor a batch for them, except on the rows they
 * share (a delete waits for the batch holding its session's key share
 * lock, then sees the batch's rows). Private to store/pg/pg_store*.c through
 * pg_store_internal.h; see pg_store.h.
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

/* A new session's owners row, when fencing: it names this node. */
static const char owner_sql[] =
    "INSERT INTO owners(session_id, node, since) VALUES($1, $2, now())"
    " ON CONFLICT (session_id) DO UPDATE SET node = excluded.node, since = "
    "excluded.since";
static const char created_sql[] = "SELECT pg_notify('rx_sess', 'created ' || $1::text)";

/* Run `sql` with text parameters on the admin connection. alock held. */
static int run(struct pg_store *pg, const char *what, const char *sql, int n,
               const char *const *vals, PGresult **out)
{
    return pg_store__exec(pg, &pg->a, what, sql, n, vals, NULL, NULL, out);
}

/* The rows affected by a command: PQcmdTuples as a number. */
static int64_t changed(PGresult *r)
{
    return strtoll(PQcmdTuples(r), NULL, 10);
}

/* Insert `sid`'s owners row when fencing, and say it was created. In the transaction. */
static int announce_created(struct pg_store *pg, const char *sid)
{
    char node[PG_STORE_NODE_MAX];
    const char *vals[2] = {sid, node};
    int err;

    if (pg_store__node(pg, node) &&
        (err = run(pg, "naming the session's owner", owner_sql, 2, vals, NULL)))
        return err;
    return run(pg, "notifying", created_sql, 1, vals, NULL);
}

/* The end of a transaction: COMMIT when err is 0, else ROLLBACK. alock held. */
static int finish(struct pg_store *pg, int err)
{
    if (!err)
        return pg_store__commit(pg, &pg->a);
    pg_store__rollback(pg, &pg->a);
    return err;
}

/* The end of one that made session `sid` (create, fork, import): announced first. */
static int finish_created(struct pg_store *pg, const char *sid, int err)
{
    if (!err)
        err = announce_created(pg, sid);
    return finish(pg, err);
}

/*
 * A new session's row: `sql` with `vals` (vals[0] its id), the id named in
 * the error when it is taken. In the transaction.
 */
static int insert_session(struct pg_store *pg, const char *what, const char *sql, int n,
                          const char *const *vals)
{
    int err = run(pg, what, sql, n, vals, NULL);

    if (err == -EEXIST)
        store__set_error(&pg->base, "session '%s' exists", vals[0]);
    return err;
}

int pg_store_create_session(struct store *base, const char *sid, const char *owner,
                            int64_t created_at)
{
    struct pg_store *pg = pg_store_of(base);
    char at[24];
    const char *vals[3] = {sid, pg_store__fmt_i64(at, created_at), owner};
    int err;

    pthread_mutex_lock(&pg->alock);
    if ((err = pg_store__begin(pg, &pg->a)))
        goto out_unlock;
    err = insert_session(pg, "creating a session",
                         "INSERT INTO sessions(id, created_at, updated_at, owner)"
                         " VALUES($1, $2, $2, $3)",
                         3, vals);
    err = finish_created(pg, sid, err);
out_unlock:
    pthread_mutex_unlock(&pg->alock);
    return err;
}

/*
 * The rows of the sessions in `ids` (a text[] parameter, binary), their
 * owners rows, and a "deleted" notification for each. After their sessions
 * rows were deleted: each statement sees what a batch that held them
 * committed meanwhile. alock held, in the transaction.
 */
static int delete_rows(struct pg_store *pg, const struct pg_array *ids)
{
    static const char *const sql[] = {
        "DELETE FROM inputs WHERE session_id = ANY($1::text[])",
        "DELETE FROM snapshots WHERE session_id = ANY($1::text[])",
        "DELETE FROM search_docs WHERE session_id = ANY($1::text[])",
        "DELETE FROM owners WHERE session_id = ANY($1::text[])",
        "SELECT pg_notify('rx_sess', 'deleted ' || x) FROM unnest($1::text[]) AS x",
    };
    const char *vals[1] = {ids->b.data};
    int lens[1] = {(int)ids->b.len}, bin[1] = {1}, err;

    for (size_t i = 0; i < sizeof(sql) / sizeof(sql[0]); i++)
        if ((err = pg_store__exec(pg, &pg->a, "deleting sessions", sql[i], 1, vals, lens,
                                  bin, NULL)))
            return err;
    return 0;
}

int pg_store_delete_session(struct store *base, const char *sid)
{
    struct pg_store *pg = pg_store_of(base);
    const char *vals[1] = {sid};
    struct pg_array ids;
    PGresult *r = NULL;
    int err;

    pg_store__array_init(&ids, PG_STORE_OID_TEXT);
    if ((err = pg_store__array_text(&ids, sid, strlen(sid))) ||
        (err = pg_store__array_end(&ids)))
        goto out_release;
    pthread_mutex_lock(&pg->alock);
    if ((err = pg_store__begin(pg, &pg->a)))
        goto out_unlock;
    /* First, alone: it waits for a batch that holds the row, then the rest sees it. */
    err =
        run(pg, "deleting a session", "DELETE FROM sessions WHERE id = $1", 1, vals, &r);
    if (!err && !changed(r)) {
        store__set_error(&pg->base, "no session '%s'", sid);
        err = -ENOENT;
    }
    if (!err)
        err = delete_rows(pg, &ids);
    err = finish(pg, err);
out_unlock:
    pthread_mutex_unlock(&pg->alock);
out_release:
    PQclear(r);
    pg_store__array_release(&ids);
    return err;
}

/* The fork's row as of the source's state at `at` (SPEC 6.2). In the transaction. */
static int fork_row(struct pg_store *pg, const char *sid, int64_t at, const char *new_sid)
{
    struct store_row row = {0};
    struct rx_state s;
    int64_t reached;
    int err = pg_store__build_state(pg, &pg->a, sid, at, &s, &reached);

    if (err)
        return err;
    if ((err = store__row_of(&s, &row)))
        store__set_error(&pg->base, "out of memory forking");
    rx_state_release(&s);
    if (!err)
        err = pg_store__row_put(pg, new_sid, &row);
    store__row_release(&row);
    return err;
}

int pg_store_fork(struct store *base, const char *sid, int64_t at, const char *new_sid,
                  const char *owner, int64_t created_at)
{
    struct pg_store *pg = pg_store_of(base);
    static const char *const copies[] = {
        "INSERT INTO inputs(session_id, seq, input) SELECT $2, seq, input FROM inputs"
        " WHERE session_id = $1 AND seq <= $3 ORDER BY seq",
        "INSERT INTO snapshots(session_id, seq, state) SELECT $2, seq, state FROM"
        " snapshots WHERE session_id = $1 AND seq <= $3 ORDER BY seq DESC LIMIT 1",
        "INSERT INTO search_docs(session_id, seq, body) SELECT $2, seq, body FROM"
        " search_docs WHERE session_id = $1 AND seq <= $3 ORDER BY id",
    };
    char at_s[24], created_s[24];
    const char *vals[3] = {sid, new_sid, pg_store__fmt_i64(at_s, at)};
    const char *insert_vals[4] = {new_sid, sid, pg_store__fmt_i64(created_s, created_at),
                                  owner};
    PGresult *r = NULL;
    int64_t last;
    int err;

    pthread_mutex_lock(&pg->alock);
    if ((err = pg_store__begin(pg, &pg->a)))
        goto out_unlock;
    if ((err =
             run(pg, "reading the session",
                 "SELECT coalesce((SELECT max(seq) FROM inputs WHERE session_id = $1), 0)"
                 " FROM sessions WHERE id = $1 FOR KEY SHARE",
                 1, vals, &r)))
        goto out_finish;
    if (!PQntuples(r)) {
        store__set_error(&pg->base, "no session '%s'", sid);
        err = -ENOENT;
        goto out_finish;
    }
    last = pg_store__i64(r, 0, 0);
    if ((err = pg_store__seq_in_log(pg, sid, at, last)))
        goto out_finish;
    if ((err = insert_session(pg, "creating the fork",
                              "INSERT INTO sessions(id, created_at, updated_at, title,"
                              " owner) SELECT $1, $3, $3, title, $4 FROM sessions"
                              " WHERE id = $2",
                              4, insert_vals)))
        goto out_finish;
    for (size_t i = 0; !err && i < sizeof(copies) / sizeof(copies[0]); i++)
        err = run(pg, "copying the log", copies[i], 3, vals, NULL);
    if (!err)
        err = fork_row(pg, sid, at, new_sid);
out_finish:
    err = finish_created(pg, new_sid, err);
out_unlock:
    pthread_mutex_unlock(&pg->alock);
    PQclear(r);
    return err;
}

int pg_store_gc_list(struct store *base, int64_t older_than_ms, json_t **removed_ids,
                     int64_t *removed_inputs)
{
    struct pg_store *pg = pg_store_of(base);
    char older[24];
    const char *vals[1] = {pg_store__fmt_i64(older, older_than_ms)};
    json_t *list = json_array();
    struct pg_array ids;
    PGresult *r = NULL, *count = NULL;
    int64_t inputs = 0;
    int err;

    pg_store__array_init(&ids, PG_STORE_OID_TEXT);
    if (!list)
        return -ENOMEM;
    pthread_mutex_lock(&pg->alock);
    if ((err = pg_store__begin(pg, &pg->a)))
        goto out_unlock;
    /* FOR UPDATE: waits for a batch writing to one of them, then sees its rows. */
    if ((err = run(pg, "listing expired sessions",
                   "SELECT id FROM sessions WHERE updated_at < $1 ORDER BY created_at, id"
                   " FOR UPDATE",
                   1, vals, &r)))
        goto out_finish;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *id = PQgetvalue(r, i, 0);

        if (pg_store__array_text(&ids, id, strlen(id)) ||
            json_array_append_new(list, json_string(id))) {
            store__set_error(&pg->base, "out of memory listing expired sessions");
            err = -ENOMEM;
            goto out_finish;
        }
    }
    if (!PQntuples(r) || (err = pg_store__array_end(&ids)))
        goto out_finish;
    {
        const char *av[1] = {ids.b.data};
        int lens[1] = {(int)ids.b.len}, bin[1] = {1};

        if ((err = pg_store__exec(pg, &pg->a, "counting expired inputs",
                                  "SELECT count(*) FROM inputs WHERE session_id ="
                                  " ANY($1::text[])",
                                  1, av, lens, bin, &count)) ||
            (err = pg_store__exec(pg, &pg->a, "deleting expired sessions",
                                  "DELETE FROM sessions WHERE id = ANY($1::text[])", 1,
                                  av, lens, bin, NULL)) ||
            (err = delete_rows(pg, &ids)))
            goto out_finish;
        inputs = pg_store__i64(count, 0, 0);
    }
out_finish:
    err = finish(pg, err);
out_unlock:
    pthread_mutex_unlock(&pg->alock);
    if (!err) {
        if (removed_inputs)
            *removed_inputs = inputs;
        if (removed_ids) {
            *removed_ids = list;
            list = NULL;
        }
    }
    json_decref(list);
    PQclear(count);
    PQclear(r);
    pg_store__array_release(&ids);
    return err;
}

/* The title row of the index (seq 0): replaced by `title` (NULL or "": none). */
static int title_doc(struct pg_store *pg, const char *sid, const char *title)
{
    const char *vals[2] = {sid, title};
    int err;

    if ((err = run(pg, "indexing a title",
                   "DELETE FROM search_docs WHERE session_id = $1 AND seq = 0", 1, vals,
                   NULL)))
        return err;
    if (!title || !*title)
        return 0;
    return run(pg, "indexing a title",
               "INSERT INTO search_docs(session_id, seq, body) VALUES($1, 0, $2)", 2,
               vals, NULL);
}

int pg_store_set_title(struct store *base, const char *sid, const char *title)
{
    struct pg_store *pg = pg_store_of(base);
    const char *vals[2] = {sid, title};
    PGresult *r = NULL;
    int err;

    pthread_mutex_lock(&pg->alock);
    if ((err = pg_store__begin(pg, &pg->a)))
        goto out_unlock;
    err = run(pg, "renaming a session", "UPDATE sessions SET title = $2 WHERE id = $1", 2,
              vals, &r);
    if (!err && !changed(r)) {
        store__set_error(&pg->base, "no session '%s'", sid);
        err = -ENOENT;
    }
    if (!err)
        err = title_doc(pg, sid, title);
    if (!err)
        err = run(pg, "notifying", "SELECT pg_notify('rx_sess', 'title ' || $1::text)", 1,
                  vals, NULL);
    err = finish(pg, err);
out_unlock:
    pthread_mutex_unlock(&pg->alock);
    PQclear(r);
    return err;
}

/* The imported log as the writer's three arrays (sid, seq, text). */
static int import_arrays(const char *sid, const struct store_text *v, size_t n,
                         struct pg_array a[3])
{
    for (size_t i = 0; i < n; i++)
        if (pg_store__array_text(&a[0], sid, strlen(sid)) ||
            pg_store__array_i64(&a[1], (int64_t)i + 1) ||
            pg_store__array_text(&a[2], v[i].data, v[i].len))
            return -ENOMEM;
    return pg_store__array_end(&a[0]) || pg_store__array_end(&a[1]) ||
                   pg_store__array_end(&a[2])
               ? -ENOMEM
               : 0;
}

/* The inputs, their search rows and the snapshot. In the transaction. */
static int import_rows(struct pg_store *pg, const char *sid, const struct store_text *v,
                       size_t n, const struct store_text *snapshot)
{
    struct pg_array a[3];
    const char *vals[3];
    int lens[3], bin[3] = {1, 1, 1}, err;

    pg_store__array_init(&a[0], PG_STORE_OID_TEXT);
    pg_store__array_init(&a[1], PG_STORE_OID_INT8);
    pg_store__array_init(&a[2], PG_STORE_OID_TEXT);
    if ((err = import_arrays(sid, v, n, a))) {
        store__set_error(&pg->base, "out of memory importing a session");
        goto out_release;
    }
    for (int i = 0; i < 3; i++) {
        vals[i] = a[i].b.data;
        lens[i] = (int)a[i].b.len;
    }
    if ((err = pg_store__exec(pg, &pg->a, "importing inputs",
                              "INSERT INTO inputs(session_id, seq, input) SELECT * FROM"
                              " unnest($1::text[], $2::bigint[], $3::text[])",
                              3, vals, lens, bin, NULL)) ||
        (err = pg_store__exec(pg, &pg->a, "indexing inputs", pg_store__index_sql, 3, vals,
                              lens, bin, NULL)))
        goto out_release;
    if (snapshot && n) {
        char seq[24];
        const char *sv[3] = {sid, pg_store__fmt_i64(seq, (int64_t)n), NULL};
        int sl[3] = {0, 0, (int)snapshot->len}, sb[3] = {0, 0, 1};

        /* Binary text is the bytes as they are: no NUL needed. */
        sv[2] = snapshot->data;
        err = pg_store__exec(pg, &pg->a, "importing a snapshot",
                             "INSERT INTO snapshots(session_id, seq, state)"
                             " VALUES($1, $2, $3::text)",
                             3, sv, sl, sb, NULL);
    }
out_release:
    for (int i = 0; i < 3; i++)
        pg_store__array_release(&a[i]);
    return err;
}

int pg_store_import(struct store *base, const char *sid, const char *owner,
                    int64_t created_at, const char *title,
                    const struct store_text *inputs, size_t n,
                    const struct store_text *snapshot)
{
    struct pg_store *pg = pg_store_of(base);
    struct store_row row = {0};
    char at[24], m[24];
    const char *vals[7] = {
        sid, pg_store__fmt_i64(at, created_at), title, NULL, NULL, NULL, owner};
    /* Folded before the admin connection is taken: nobody waits for it. */
    int err = store__row_of_log(base, sid, inputs, n, snapshot, &row);

    if (err)
        return err;
    vals[3] = pg_store__fmt_i64(m, row.messages);
    vals[4] = row.busy ? "t" : "f";
    vals[5] = row.title;
    pthread_mutex_lock(&pg->alock);
    if ((err = pg_store__begin(pg, &pg->a)))
        goto out_unlock;
    err =
        insert_session(pg, "importing a session",
                       "INSERT INTO sessions(id, created_at, updated_at, title, messages,"
                       " busy, auto_title, owner) VALUES($1, $2, $2, $3, $4, $5, $6, $7)",
                       7, vals);
    if (!err)
        err = title_doc(pg, sid, title);
    if (!err)
        err = import_rows(pg, sid, inputs, n, snapshot);
    err = finish_created(pg, sid, err);
out_unlock:
    pthread_mutex_unlock(&pg->alock);
    store__row_release(&row);
    return err;
}
