/*
 * sqlite_store_search - the SQLite store's full-text index (schema 3) and
 * what uses it: titles, search, and import (a whole log in one transaction).
 * Private helpers come from sqlite_store_internal.h; see store.h.
 *
 * The index is two tables: search_docs, one row per text a person reads (the
 * session, the input's seq and the text; seq 0 holds the title a person
 * gave), and search_fts, an FTS5 table over it with external content (the
 * text is kept once, in search_docs) and no column sizes (nothing ranks). Triggers keep
 * the two in step, so whoever writes search_docs (rename, fork, delete, retention,
 * import, the catch-up below) keeps the index right without touching it.
 *
 * A search finds every input acknowledged before it began (SPEC 6.2): it
 * first indexes what is left (sqlite_store__index_sync), and that is
 * bounded: the commit that finds STORE_INDEX_EVERY rows of inputs_recent
 * unindexed indexes them in its own transaction (sqlite_store__index_batch),
 * a merge indexes the tail before it moves it, and the idle writer indexes
 * the rest. So a search indexes at most about 1024 rows first (a few ms),
 * whatever was written before it, where the old catch-up (4 096 ranges at
 * most, the rest when idle) missed most of a busy restart's sessions.
 * Why not every commit: an FTS5 segment per transaction cost about 30% of
 * the writer's throughput (bench/durable.sh, 100 sessions with fsync:
 * 20.3k -> 13.9k POST/s); one segment per 1024 rows costs little
 * (see the commit message for the figures). Why not only when idle: a
 * saturated writer is never idle, and the first search after a bulk load
 * or a busy hour would index all of it: seconds to minutes, where SPEC 6.2
 * wants 50 ms.
 * What older versions left unindexed is known two ways: the rows of
 * inputs_recent past a mark (search_mark, the last rowid indexed), and the
 * seq ranges of `inputs` that a merge moved there unindexed
 * (search_pending: the merge only notes them). That backlog is indexed in
 * steps (sqlite_store__index_step, many ranges per statement), each moving
 * the mark or dropping ranges in the same transaction: by the writer after
 * STORE_INDEX_IDLE_MS with nothing to commit, whole by a search before it
 * reads and by a fork before it copies the index. Inputs written straight
 * into `inputs` (import) are indexed in their own transaction.
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

/* A search's catch-up: rows per step. */
#define STORE_INDEX_SYNC_ROWS 16384
/* Rows a pending range is reckoned to hold, to size a step in ranges. */
#define STORE_INDEX_RANGE_ROWS 16

const char sqlite_store__search_schema_sql[] =
    "CREATE TABLE search_docs(id INTEGER PRIMARY KEY, session_id TEXT NOT NULL,"
    " seq INTEGER NOT NULL, body TEXT NOT NULL);"
    "CREATE INDEX search_docs_session ON search_docs(session_id, seq);"
    "CREATE VIRTUAL TABLE search_fts USING fts5(body, content='search_docs',"
    " content_rowid='id', columnsize=0);"
    "CREATE TRIGGER search_docs_insert AFTER INSERT ON search_docs BEGIN"
    " INSERT INTO search_fts(rowid, body) VALUES(new.id, new.body); END;"
    "CREATE TRIGGER search_docs_delete AFTER DELETE ON search_docs BEGIN"
    " INSERT INTO search_fts(search_fts, rowid, body) VALUES('delete', old.id, old.body);"
    " END;"
    "CREATE TABLE search_mark(upto INTEGER NOT NULL);"
    "INSERT INTO search_mark VALUES(0);"
    "CREATE TABLE search_pending(session_id TEXT NOT NULL, lo INTEGER NOT NULL,"
    " hi INTEGER NOT NULL);";

/* Every stored input, wherever it is (see STORE_RECENT_SQL in store.c). */
#define STORE_LOG_ROWS                                                                   \
    "(SELECT session_id, seq, input FROM inputs WHERE json_valid(input) UNION ALL"       \
    " SELECT session_id, seq, input FROM inputs_recent WHERE json_valid(input))"

/*
 * The same rows sqlite_store__index_input makes, from a whole log at once. A row
 * that is not JSON is left out here: loading the log says so, with its
 * session and seq, better than an upgrade could.
 */
const char sqlite_store__search_backfill_sql[] =
    "INSERT INTO search_docs(session_id, seq, body) SELECT id, 0, title FROM sessions"
    " WHERE title IS NOT NULL AND title != '';"
    "INSERT INTO search_docs(session_id, seq, body) SELECT session_id, seq, b FROM"
    " (SELECT session_id, seq, json_extract(input, '$.content') AS b FROM " STORE_LOG_ROWS
    " WHERE json_extract(input, '$.type') IN"
    " ('user-send-message', 'brain-send-message-complete'))"
    " WHERE b != '' ORDER BY session_id, seq;"
    "INSERT INTO search_docs(session_id, seq, body) SELECT l.session_id, l.seq, p.value"
    " FROM (SELECT * FROM " STORE_LOG_ROWS " WHERE json_extract(input, '$.type') ="
    " 'user-cancel') AS l, json_each(l.input, '$.partialContents') AS p"
    " WHERE p.type = 'text' AND p.value != '' ORDER BY l.session_id, l.seq;"
    "UPDATE search_mark SET upto=(SELECT coalesce(max(rowid), 0) FROM inputs_recent);";

/* What rx_input_encode writes first: the type, so a compare tells it. */
#define TYPE_PREFIX(name) "{\"type\":\"" name "\","

static bool has_prefix(const char *text, size_t len, const char *prefix, size_t n)
{
    return len > n && !memcmp(text, prefix, n);
}

/* Only messages and cancels are parsed (json_extract / json_each). */
int sqlite_store__index_input(struct sqlite_store *st, const char *sid, int64_t seq,
                              const char *text, size_t len)
{
    static const char user[] = TYPE_PREFIX("user-send-message");
    static const char done[] = TYPE_PREFIX("brain-send-message-complete");
    static const char cancel[] = TYPE_PREFIX("user-cancel");
    int id, rc;

    if (has_prefix(text, len, user, sizeof(user) - 1) ||
        has_prefix(text, len, done, sizeof(done) - 1))
        id = Q_DOCS_CONTENT;
    else if (has_prefix(text, len, cancel, sizeof(cancel) - 1))
        id = Q_DOCS_PARTIALS;
    else
        return 0;
    rc = sqlite_store__put_row(&st->w, id, sid, seq, text, len);
    return rc ? sqlite_store__sql_fail(st, &st->w, rc, "indexing an input") : 0;
}

/* One integer from a statement of the writer's connection without parameters. */
static int writer_i64(struct sqlite_store *st, int id, int64_t *out)
{
    return sqlite_store__query_i64(st, &st->w, id, NULL, out);
}

/* Run a statement binding (sid, lo, hi) or, sid NULL, (lo, hi). 0 or an errno. */
static int index_run(struct sqlite_store *st, int id, const char *sid, int64_t lo,
                     int64_t hi)
{
    sqlite3_stmt *q = sqlite_store__stmt(&st->w, id);
    int i = 1, rc;

    if (sid)
        sqlite_store__bind_text(q, i++, sid, strlen(sid));
    sqlite3_bind_int64(q, i++, lo);
    sqlite3_bind_int64(q, i, hi);
    rc = sqlite_store__run(q);
    return rc ? sqlite_store__sql_fail(st, &st->w, rc, "indexing inputs") : 0;
}

/*
 * Ranges a merge left, the first `ranges` of them at once: three statements
 * however many ranges (a restart after a run of many sessions leaves one per
 * session). *found: there were some.
 */
static int index_pending(struct sqlite_store *st, int64_t ranges, bool *found)
{
    static const int ids[] = {Q_PENDING_CONTENT, Q_PENDING_PARTIALS, Q_PENDING_DONE};
    int64_t any;
    int rc, err;

    if ((err = writer_i64(st, Q_PENDING_ANY, &any)) || !(*found = any))
        return err;
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        sqlite3_stmt *q = sqlite_store__stmt(&st->w, ids[i]);

        sqlite3_bind_int64(q, 1, ranges);
        if ((rc = sqlite_store__run(q)))
            return sqlite_store__sql_fail(st, &st->w, rc, "indexing inputs");
    }
    return 0;
}

/* Index the rows of inputs_recent in (mark, upto] and move the mark there. */
static int index_recent(struct sqlite_store *st, int64_t mark, int64_t upto)
{
    sqlite3_stmt *q;
    int rc, err;

    if ((err = index_run(st, Q_INDEX_CONTENT, NULL, mark, upto)) ||
        (err = index_run(st, Q_INDEX_PARTIALS, NULL, mark, upto)))
        return err;
    q = sqlite_store__stmt(&st->w, Q_INDEX_MARK_SET);
    sqlite3_bind_int64(q, 1, upto);
    rc = sqlite_store__run(q);
    return rc ? sqlite_store__sql_fail(st, &st->w, rc, "indexing inputs") : 0;
}

int sqlite_store__index_step(struct sqlite_store *st, int64_t max_rows, bool *more)
{
    int64_t mark, top, upto;
    bool found;
    int err;

    *more = false;
    /* A range holds a few rows of one session (a merge notes each session's). */
    if ((err = index_pending(st, max_rows / STORE_INDEX_RANGE_ROWS + 1, &found)) ||
        (*more = found))
        return err;
    if ((err = writer_i64(st, Q_INDEX_MARK, &mark)) ||
        (err = writer_i64(st, Q_RECENT_TOP, &top)) || top <= mark)
        return err;
    upto = top - mark > max_rows ? mark + max_rows : top;
    if ((err = index_recent(st, mark, upto)))
        return err;
    *more = upto < top;
    return 0;
}

int sqlite_store__index_batch(struct sqlite_store *st, int64_t min_rows)
{
    int64_t mark, top;
    int err;

    if ((err = writer_i64(st, Q_INDEX_MARK, &mark)) ||
        (err = writer_i64(st, Q_RECENT_TOP, &top)) || top - mark < min_rows ||
        top <= mark)
        return err;
    return index_recent(st, mark, top);
}

int sqlite_store__index_all(struct sqlite_store *st)
{
    bool more = true;
    int err = 0;

    while (!err && more)
        err = sqlite_store__index_step(st, INT64_MAX / 2, &more);
    return err;
}

int sqlite_store__index_defer(struct sqlite_store *st)
{
    int rc = sqlite_store__run(sqlite_store__stmt(&st->w, Q_PENDING_ADD));

    return rc ? sqlite_store__sql_fail(st, &st->w, rc, "noting unindexed inputs") : 0;
}

int sqlite_store__index_clamp(struct sqlite_store *st)
{
    int rc = sqlite_store__run(sqlite_store__stmt(&st->w, Q_INDEX_MARK_CLAMP));

    return rc ? sqlite_store__sql_fail(st, &st->w, rc, "moving the index mark") : 0;
}

/* One step in a transaction of its own: 1 (more may remain), 0 (none) or an errno. */
static int index_one(struct sqlite_store *st, int64_t max_rows)
{
    bool more = false;
    int err;

    if ((err = sqlite_store__tx_begin(st)))
        return err;
    if ((err = sqlite_store__index_step(st, max_rows, &more))) {
        sqlite_store__tx_rollback(st);
        return err;
    }
    if ((err = sqlite_store__tx_commit(st)))
        return err;
    if (!more)
        st->unindexed = 0; /* caught up: the writer's count starts over */
    return more;
}

int sqlite_store__index_idle(struct sqlite_store *st)
{
    return index_one(st, STORE_INDEX_CHUNK);
}

/*
 * Before a search: the whole backlog, a step at a time, the writer's lock
 * let go between steps so commits go on. No bound on the steps: every batch
 * indexes its own rows (sqlite_store__index_batch), so nothing committed
 * meanwhile adds to the backlog, which only shrinks: what an older version
 * or an upgrade left. A step takes more rows than the idle writer's (fewer
 * transactions for a long backlog). A store that cannot write still
 * answers from the index as it is.
 */
void sqlite_store__index_sync(struct sqlite_store *st)
{
    for (;;) {
        int r;

        pthread_mutex_lock(&st->lock);
        r = index_one(st, STORE_INDEX_SYNC_ROWS);
        pthread_mutex_unlock(&st->lock);
        if (r <= 0)
            return;
    }
}

/* ---- titles ------------------------------------------------------------------ */

/* The title row of `sid` in the index: replaced by `title` (NULL: dropped). lock held. */
static int title_doc(struct sqlite_store *st, const char *sid, const char *title)
{
    sqlite3_stmt *q = sqlite_store__stmt(&st->w, Q_DOCS_TITLE_DELETE);
    int rc;

    sqlite_store__bind_text(q, 1, sid, strlen(sid));
    if ((rc = sqlite_store__run(q)))
        return sqlite_store__sql_fail(st, &st->w, rc, "indexing a title");
    if (!title || !*title)
        return 0;
    q = sqlite_store__stmt(&st->w, Q_DOCS_TITLE_INSERT);
    sqlite_store__bind_text(q, 1, sid, strlen(sid));
    sqlite_store__bind_text(q, 2, title, strlen(title));
    rc = sqlite_store__run(q);
    return rc ? sqlite_store__sql_fail(st, &st->w, rc, "indexing a title") : 0;
}

/* A title to give, or a log to import: the arguments of its transaction. */
struct title_args {
    const char *sid, *title, *owner; /* owner: import's */
    int64_t created_at;
    const struct store_text *inputs, *snapshot;
    size_t n;
    const struct store_row *row; /* import: what its row keeps of its state */
};

static int title_rows(struct sqlite_store *st, void *arg)
{
    struct title_args *a = arg;
    sqlite3_stmt *q = sqlite_store__stmt(&st->w, Q_SESSION_TITLE_SET);
    int rc;

    sqlite_store__bind_text(q, 1, a->sid, strlen(a->sid));
    if (a->title)
        sqlite_store__bind_text(q, 2, a->title, strlen(a->title));
    if ((rc = sqlite_store__run(q)))
        return sqlite_store__sql_fail(st, &st->w, rc, "renaming a session");
    if (!sqlite3_changes(st->w.db)) {
        store__set_error(&st->base, "no session '%s'", a->sid);
        return -ENOENT;
    }
    return title_doc(st, a->sid, a->title);
}

int sqlite_store_set_title(struct store *base, const char *sid, const char *title)
{
    struct title_args a = {.sid = sid, .title = title};

    return sqlite_store__write_tx(sqlite_store_of(base), title_rows, NULL, &a);
}

int sqlite_store_session_title(struct store *base, const char *sid, char **out)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c = sqlite_store__reader_lock(st);
    sqlite3_stmt *q = sqlite_store__stmt(c, Q_SESSION_TITLE_GET);
    const char *t;
    int rc, err = 0;

    *out = NULL;
    sqlite_store__bind_text(q, 1, sid, strlen(sid));
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        t = (const char *)sqlite3_column_text(q, 0);
        if (t && !(*out = strdup(t)))
            err = -ENOMEM;
    } else if (rc == SQLITE_DONE) {
        store__set_error(&st->base, "no session '%s'", sid);
        err = -ENOENT;
    } else {
        err = sqlite_store__sql_fail(st, c, rc, "reading a title");
    }
    sqlite_store__done(q);
    sqlite_store__reader_unlock(st);
    return err;
}

/* ---- search ------------------------------------------------------------------ */

/* One word as an FTS5 string: quoted, quotes doubled, `*` for a prefix. */
static int put_fts_string(struct rx_buf *b, const char *word, bool prefix)
{
    if (rx_buf_putc(b, '"'))
        return -ENOMEM;
    for (const char *p = word; *p; p++)
        if ((*p == '"' && rx_buf_putc(b, '"')) || rx_buf_putc(b, *p))
            return -ENOMEM;
    return rx_buf_puts(b, prefix ? "\"*" : "\"") ? -ENOMEM : 0;
}

/*
 * One SELECT per word, intersected: a session matches when each word is in
 * one of its texts, not necessarily all in the same one. The words are
 * bound, never spliced into the SQL.
 */
int sqlite_store__search_sql(size_t n, struct rx_buf *sql)
{
    for (size_t i = 0; i < n; i++)
        if (rx_buf_printf(sql,
                          "%sSELECT %ssearch_docs.session_id FROM search_fts JOIN"
                          " search_docs ON search_docs.id = search_fts.rowid"
                          " WHERE search_fts MATCH ?%zu",
                          i ? " INTERSECT " : "", n == 1 ? "DISTINCT " : "", i + 1))
            return -ENOMEM;
    return 0;
}

int sqlite_store__search_bind(sqlite3_stmt *q, const char *const *words, size_t n)
{
    struct rx_buf m;
    int err = 0;

    rx_buf_init(&m, RX_BUF_SMALL_MAX);
    for (size_t i = 0; i < n && !err; i++) {
        rx_buf_reset(&m);
        if ((err = put_fts_string(&m, words[i], i + 1 == n)))
            break;
        if (sqlite3_bind_text(q, (int)i + 1, m.data, (int)m.len, SQLITE_TRANSIENT))
            err = -ENOMEM;
    }
    rx_buf_release(&m);
    return err;
}

/* Run the prepared search, binding the words, into `ids`. c's lock held. */
static int search_run(struct sqlite_store *st, struct store_conn *c, sqlite3_stmt *q,
                      const char *const *words, size_t n, json_t *ids)
{
    int rc, err = sqlite_store__search_bind(q, words, n);

    if (err)
        return err;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW)
        if (json_array_append_new(ids,
                                  json_string((const char *)sqlite3_column_text(q, 0))))
            return -ENOMEM;
    return rc == SQLITE_DONE ? 0 : sqlite_store__sql_fail(st, c, rc, "searching");
}

int sqlite_store_search(struct store *base, const char *const *words, size_t n,
                        json_t **out)
{
    struct sqlite_store *st = sqlite_store_of(base);
    struct store_conn *c;
    sqlite3_stmt *q = NULL;
    struct rx_buf sql;
    json_t *ids;
    int rc, err;

    sqlite_store__index_sync(st);
    rx_buf_init(&sql, RX_BUF_SMALL_MAX);
    ids = json_array();
    err = ids ? sqlite_store__search_sql(n, &sql) : -ENOMEM;
    if (err)
        goto out_release;
    c = sqlite_store__reader_lock(st);
    if (!(err = sqlite_store__read_begin(st, c))) {
        rc = sqlite3_prepare_v2(c->db, sql.data, (int)sql.len, &q, NULL);
        err = rc ? sqlite_store__sql_fail(st, c, rc, "preparing a search")
                 : search_run(st, c, q, words, n, ids);
        sqlite3_finalize(q);
    }
    sqlite_store__read_end(c);
    sqlite_store__reader_unlock(st);
    if (err == -ENOMEM)
        store__set_error(&st->base, "out of memory searching");

out_release:
    rx_buf_release(&sql);
    if (err) {
        json_decref(ids);
        return err;
    }
    *out = ids;
    return 0;
}

/* ---- import ------------------------------------------------------------------ */

/* The rows of an imported log, inside the transaction. lock held. */
static int import_rows(struct sqlite_store *st, const char *sid,
                       const struct store_text *v, size_t n,
                       const struct store_text *snapshot)
{
    int rc, err;

    for (size_t i = 0; i < n; i++) {
        if ((rc = sqlite_store__put_row(&st->w, Q_INPUT_INSERT, sid, (int64_t)i + 1,
                                        v[i].data, v[i].len)))
            return sqlite_store__sql_fail(st, &st->w, rc, "importing an input");
        if ((err =
                 sqlite_store__index_input(st, sid, (int64_t)i + 1, v[i].data, v[i].len)))
            return err;
    }
    if (snapshot && n &&
        (rc = sqlite_store__put_row(&st->w, Q_SNAPSHOT_INSERT, sid, (int64_t)n,
                                    snapshot->data, snapshot->len)))
        return sqlite_store__sql_fail(st, &st->w, rc, "importing a snapshot");
    return 0;
}

/*
 * One transaction for the whole log, straight into `inputs` (ordered by
 * session, where the rows of a whole session belong), so a crash half-way
 * leaves nothing. It holds the writer's lock while it runs: a long import
 * delays the next commit by about the time it takes (milliseconds per
 * thousand inputs).
 */
static int import_session(struct sqlite_store *st, void *arg)
{
    struct title_args *a = arg;
    sqlite3_stmt *q = sqlite_store__stmt(&st->w, Q_SESSION_IMPORT);
    int rc, err;

    sqlite_store__bind_text(q, 1, a->sid, strlen(a->sid));
    sqlite3_bind_int64(q, 2, a->created_at);
    sqlite3_bind_int64(q, 3, a->created_at);
    if (a->title)
        sqlite_store__bind_text(q, 4, a->title, strlen(a->title));
    sqlite3_bind_int64(q, 5, a->row->messages);
    sqlite3_bind_int(q, 6, a->row->busy);
    if (a->row->title)
        sqlite_store__bind_text(q, 7, a->row->title, strlen(a->row->title));
    sqlite_store__bind_text(q, 8, a->owner, strlen(a->owner));
    if ((rc = sqlite_store__run(q)))
        return sqlite_store__sql_fail(st, &st->w, rc, "importing a session");
    if ((err = title_doc(st, a->sid, a->title)))
        return err;
    return import_rows(st, a->sid, a->inputs, a->n, a->snapshot);
}

int sqlite_store_import(struct store *base, const char *sid, const char *owner,
                        int64_t created_at, const char *title,
                        const struct store_text *inputs, size_t n,
                        const struct store_text *snapshot)
{
    struct store_row row = {0};
    struct title_args a = {sid, title, owner, created_at, inputs, snapshot, n, &row};
    /* Folded before the writer's lock is taken: commits do not wait for it. */
    int err = store__row_of_log(base, sid, inputs, n, snapshot, &row);

    if (!err)
        err = sqlite_store__write_tx(sqlite_store_of(base), import_session, NULL, &a);
    store__row_release(&row);
    return err;
}
