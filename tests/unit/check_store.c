/*
 * check_store - the input log (store/), once per backend through the one
 * interface of store.h: SQLite (store/sqlite) always, PostgreSQL (store/pg)
 * when RX_PG_URL names a database (`make pgstore-test` starts a throwaway
 * one and runs the suite's "pg" case; without it that case is left out,
 * saying so).
 *
 * Both backends, the same tests (shared_tests[]): what is appended loads back
 * as the same fold, byte for byte; snapshots bound replay and damage is named
 * by session and seq; history pages, state-at-seq, fork, titles, search,
 * import, retention and stats agree with the fold; the sessions list pages;
 * each write of a batch gets its own verdict; threads append side by side.
 *
 * SQLite alone: ":memory:"; a newer schema, a foreign or corrupt file, an
 * unusable directory and a file in use fail with one line naming the file;
 * older schemas upgrade; a full disk or quota, a file removed or replaced;
 * group commit (writes queued together share one transaction and are
 * answered in order; one refused on its own or too big for the room left
 * fails alone; inputs_recent is merged; the index catches up), and over it
 * the session pipeline (server/session.c) answers each session's inputs in
 * order, and puts a session whose batch failed back as its log has it.
 * PostgreSQL alone: its schema made twice and a newer one refused; a unique
 * violation behind the store's back fails one write; fencing (-ESTALE for a
 * session another node owns); the NOTIFY payloads, seen by a LISTEN on a
 * connection of the test's own; and a database killed mid-run (writes -EIO
 * within 10 s, health unavailable) and started again (writes succeed, the
 * store never reopened; needs RX_PG_DIR, the scripts/pgtmp.sh directory).
 *
 * One file over 700 lines on purpose: one suite, its tests run once per
 * backend, and a backend's own cases beside the shared ones they extend.
 *
 * Every SQLite test works in its own temporary directory under /tmp, every
 * PostgreSQL test in a schema of its own (search_path in the URL), made by
 * the checked fixture of its case. The inputs come from gen_input(): a
 * scripted conversation with tool calls and results, errors, streamed
 * answers, cancels with partial text and history compression, all of which
 * the machine accepts.
 */
#include "tests/unit/helper_sm.h"
#include "tests/unit/helper_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include "server/config.h"
#include "server/session.h"
#include "server/session_table.h"
#include "store/store.h"

/*
 * The backend a test case runs on: its checked fixture makes a fresh store
 * location in `url`, and `count`/`exec` run SQL on that store behind its
 * back (to inspect or damage it), in SQL both databases take.
 */
struct backend {
    const char *name;
    void (*setup)(void);
    void (*teardown)(void);
    long long (*count)(const char *sql);
    void (*exec)(const char *sql);
};

static const struct backend *be;
static char url[1024]; /* what store_open is given: a path or a libpq URL */

/* ---- SQLite: a file in a temporary directory --------------------------------- */

static char tmpdir[64];
static char dbpath[128];

/* Run one SQL text on the file directly (to corrupt or inspect it). */
static void raw_sql(const char *path, const char *sql)
{
    sqlite3 *db;
    char *msg = NULL;

    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK, "%s: %s", sql,
                  msg ? msg : "?");
    sqlite3_close(db);
}

static long long raw_count(const char *path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *q;
    long long n = -1;

    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    if (sqlite3_step(q) == SQLITE_ROW)
        n = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return n;
}

static long long sqlite_count(const char *sql)
{
    return raw_count(dbpath, sql);
}

static void sqlite_exec(const char *sql)
{
    raw_sql(dbpath, sql);
}

static const struct backend sqlite_backend;

static void setup(void)
{
    be = &sqlite_backend;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rx-store-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    snprintf(dbpath, sizeof(dbpath), "%s/reflexor.db", tmpdir);
    snprintf(url, sizeof(url), "%s", dbpath);
}

/* Remove everything in the temporary directory (one level) and the directory. */
static void teardown(void)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char p[512];

    if (!d)
        return;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof(p), "%s/%s", tmpdir, e->d_name);
        chmod(p, 0700);
        if (unlink(p))
            rmdir(p);
    }
    closedir(d);
    rmdir(tmpdir);
}

static const struct backend sqlite_backend = {"sqlite", setup, teardown, sqlite_count,
                                              sqlite_exec};

/* ---- PostgreSQL: a schema of its own in RX_PG_URL ------------------------------ */

static char schema[64];
static PGconn *raw; /* the test's own connection, on the test's schema */

static void sql_ok(const char *sql)
{
    PGresult *r = PQexec(raw, sql);

    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK ||
                      PQresultStatus(r) == PGRES_TUPLES_OK,
                  "%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

static long long pg_count(const char *sql)
{
    PGresult *r = PQexec(raw, sql);
    long long n;

    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "%s: %s",
                  sql, PQresultErrorMessage(r));
    n = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return n;
}

static const struct backend pg_backend;

/* A fresh schema for the test, and `url` naming it. */
static void pg_setup(void)
{
    const char *base = getenv("RX_PG_URL");
    static int n;
    char sql[160];

    be = &pg_backend;
    snprintf(schema, sizeof(schema), "t%d_%d_%ld", (int)getpid(), n++, (long)time(NULL));
    snprintf(url, sizeof(url), "%s%soptions=-csearch_path%%3D%s", base,
             strchr(base, '?') ? "&" : "?", schema);
    raw = PQconnectdb(base);
    ck_assert_msg(PQstatus(raw) == CONNECTION_OK, "%s", PQerrorMessage(raw));
    snprintf(sql, sizeof(sql), "CREATE SCHEMA %s", schema);
    sql_ok(sql);
    snprintf(sql, sizeof(sql), "SET search_path = %s", schema);
    sql_ok(sql);
}

static void pg_teardown(void)
{
    if (raw)
        PQfinish(raw);
    raw = NULL;
}

static const struct backend pg_backend = {"postgresql", pg_setup, pg_teardown, pg_count,
                                          sql_ok};

/* The fold of the first n scripted inputs, encoded. */
static char *fold_bytes(int n)
{
    struct rx_state s;
    char *b;

    ck_assert_int_eq(rx_state_init(&s), 0);
    for (int i = 0; i < n; i++) {
        struct rx_input in;
        struct rx_outcome out;

        gen_parse(i, &in);
        ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
        ck_assert_int_eq(out.verdict, RX_ACCEPTED);
        rx_input_release(&in);
    }
    b = state_bytes(&s);
    rx_state_release(&s);
    return b;
}

static struct store *open_ok(const char *path)
{
    struct rx_error err = {""};
    struct store *st = store_open(path, &err);

    ck_assert_msg(st != NULL, "store_open: %s", err.text);
    ck_assert_int_eq(store_is_shared(st), be == &pg_backend);
    return st;
}

/* The session's state encoded, as store_session_load builds it. */
static char *loaded_bytes(struct store *st, const char *sid, int64_t *seq)
{
    struct rx_state s;
    char *b;

    ck_store_ok(st, store_session_load(st, sid, &s, seq));
    b = state_bytes(&s);
    rx_state_release(&s);
    return b;
}

/* store_open must fail with one line naming the path and containing `why`. */
static void open_fails(const char *path, const char *why)
{
    struct rx_error e = {""};
    const char *err = e.text;
    char quoted[300];
    struct store *st = store_open(path, &e);

    ck_assert_msg(st == NULL, "store_open('%s') succeeded", path);
    snprintf(quoted, sizeof(quoted), "'%s': ", path);
    ck_assert_msg(!strncmp(err, quoted, strlen(quoted)), "error does not name %s: %s",
                  quoted, err);
    ck_assert_msg(strstr(err, why) != NULL, "error lacks '%s': %s", why, err);
    ck_assert_ptr_null(strchr(err, '\n'));
}

/* What store_load hands over: ids, titles, owners, seqs and encoded states, in order. */
struct loaded {
    int n;
    char id[8][32];
    char title[8][64]; /* "" for none */
    char owner[8][STORE_OWNER_MAX + 1];
    int64_t created_at[8];
    int64_t seq[8];
    char *state[8];
};

static int collect(void *ctx, const char *sid, int64_t created_at, const char *title,
                   const char *owner, struct rx_state *state, int64_t seq)
{
    struct loaded *l = ctx;

    ck_assert_int_lt(l->n, 8);
    ck_assert(rx_state_check_invariants(state));
    ck_assert_ptr_nonnull(owner);
    snprintf(l->id[l->n], sizeof(l->id[0]), "%s", sid);
    snprintf(l->title[l->n], sizeof(l->title[0]), "%s", title ? title : "");
    snprintf(l->owner[l->n], sizeof(l->owner[0]), "%s", owner);
    l->created_at[l->n] = created_at;
    l->seq[l->n] = seq;
    l->state[l->n] = state_bytes(state);
    l->n++;
    rx_state_release(state);
    return 0;
}

static void loaded_release(struct loaded *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->state[i]);
    l->n = 0;
}

static void free_prefix(char **prefix, int n)
{
    for (int i = 0; i <= n; i++)
        free(prefix[i]);
}

/* ---- round trip -------------------------------------------------------------- */

START_TEST(test_round_trip)
{
    struct store *st = open_ok(url);
    struct loaded l = {0};
    char *want1 = fold_bytes(47), *want2 = fold_bytes(5), *want0 = fold_bytes(0);

    fill_session(st, "s1", 47, 0, NULL);
    fill_session(st, "s2", 5, 0, NULL);
    ck_assert_int_eq(store_create_session(st, "s3", NULL, BASE_MS), 0);
    store_close(st);

    st = open_ok(url);
    ck_store_ok(st, store_load(st, collect, &l));
    ck_assert_int_eq(l.n, 3);
    ck_assert_str_eq(l.id[0], "s1");
    ck_assert_int_eq(l.seq[0], 47);
    ck_assert_int_eq(l.created_at[0], BASE_MS - 1);
    ck_assert_str_eq(l.state[0], want1);
    ck_assert_str_eq(l.id[1], "s2");
    ck_assert_int_eq(l.seq[1], 5);
    ck_assert_str_eq(l.state[1], want2);
    ck_assert_str_eq(l.id[2], "s3");
    ck_assert_int_eq(l.seq[2], 0);
    ck_assert_str_eq(l.state[2], want0);
    loaded_release(&l);
    store_close(st);
    free(want0);
    free(want1);
    free(want2);
    /* Stored (SQLite: WAL mode, and the close checkpointed it into the file). */
    ck_assert_int_eq(be->count("SELECT count(*) FROM inputs"), 52);
    /* ... and SQLite moved every recent input into `inputs`. */
    if (be == &sqlite_backend)
        ck_assert_int_eq(be->count("SELECT count(*) FROM inputs_recent"), 0);
}
END_TEST

START_TEST(test_memory_and_session_load)
{
    struct store *st = open_ok(":memory:");
    struct rx_state s;
    int64_t seq = -1;
    char *want = fold_bytes(13), *got;

    fill_session(st, "m", 13, 4, NULL);
    ck_store_ok(st, store_session_load(st, "m", &s, &seq));
    ck_assert_int_eq(seq, 13);
    got = state_bytes(&s);
    ck_assert_str_eq(got, want);
    rx_state_release(&s);
    ck_assert_int_eq(store_session_load(st, "nope", &s, &seq), -ENOENT);
    free(got);
    free(want);
    store_close(st);
}
END_TEST

/* Refused appends store nothing, and say why. */
START_TEST(test_append_errors)
{
    struct store *st = open_ok(url);
    struct rx_state s;
    struct rx_input in;
    json_t *h = NULL;
    struct rx_error e;
    const char *err = e.text;

    fill_session(st, "s", 3, 0, NULL);
    ck_assert_int_eq(rx_state_init(&s), 0);
    gen_parse(3, &in);
    ck_assert_int_eq(store_append(st, "ghost", 1, &in, &s, 0), -ENOENT);
    ck_assert_int_eq(store_append(st, "s", 3, &in, &s, 0), -EEXIST);
    ck_assert_int_eq(store_append(st, "s", 5, &in, &s, 0), -EINVAL);
    store_last_error(st, &e);
    ck_assert_msg(strstr(err, "input 5 does not follow 3"), "%s", err);
    ck_assert_int_eq(store_history(st, "s", 0, 0, &h), 0);
    ck_assert_int_eq(json_array_size(h), 3);
    json_decref(h);
    ck_assert_int_eq(store_append(st, "s", 4, &in, &s, 0), 0);
    rx_input_release(&in);
    rx_state_release(&s);

    ck_assert_int_eq(store_create_session(st, "s", NULL, 1), -EEXIST);
    ck_assert_int_eq(store_delete_session(st, "ghost"), -ENOENT);
    ck_assert_int_eq(store_delete_session(st, "s"), 0);
    ck_assert_int_eq(store_history(st, "s", 0, 0, &h), -ENOENT);
    ck_assert_int_eq(store_set_durable(st, false), 0);
    ck_assert_int_eq(store_set_durable(st, true), 0);
    store_close(st);
    ck_assert_int_eq(be->count("SELECT count(*) FROM inputs"), 0);
    ck_assert_int_eq(be->count("SELECT count(*) FROM sessions"), 0);
}
END_TEST

/* ---- snapshots --------------------------------------------------------------- */

START_TEST(test_snapshot_bounds_replay)
{
    struct store *st = open_ok(url);
    struct loaded l = {0};
    char *want = fold_bytes(35);
    struct rx_error e;
    const char *err = e.text;

    fill_session(st, "s", 35, 10, NULL);
    store_close(st);
    /* Only the newest snapshot is kept. */
    ck_assert_int_eq(be->count("SELECT count(*) FROM snapshots"), 1);
    ck_assert_int_eq(be->count("SELECT seq FROM snapshots"), 30);

    /* Replay starts at the snapshot: a damaged input before it is never read. */
    be->exec("UPDATE inputs SET input='garbage' WHERE seq=7");
    st = open_ok(url);
    ck_store_ok(st, store_load(st, collect, &l));
    ck_assert_int_eq(l.n, 1);
    ck_assert_int_eq(l.seq[0], 35);
    ck_assert_str_eq(l.state[0], want);
    loaded_release(&l);
    store_close(st);

    /* One after it is, and the error names the session and the seq. */
    be->exec("UPDATE inputs SET input=(SELECT input FROM inputs WHERE seq=31)"
             " WHERE seq=33");
    st = open_ok(url);
    ck_assert_int_eq(store_load(st, collect, &l), -EPROTO);
    ck_assert_int_eq(l.n, 0);
    store_last_error(st, &e);
    ck_assert_msg(strstr(err, "session 's': input 33 does not fold"), "%s", err);
    store_close(st);

    be->exec("UPDATE inputs SET input='{\"type\":\"nope\"}' WHERE seq=33");
    st = open_ok(url);
    ck_assert_int_eq(store_load(st, collect, &l), -EPROTO);
    store_last_error(st, &e);
    ck_assert_msg(strstr(err, "session 's': input 33 is invalid"), "%s", err);
    store_close(st);

    be->exec("DELETE FROM inputs WHERE seq=33");
    st = open_ok(url);
    ck_assert_int_eq(store_load(st, collect, &l), -EPROTO);
    store_last_error(st, &e);
    ck_assert_msg(strstr(err, "session 's': input 33 is missing"), "%s", err);
    store_close(st);

    be->exec("UPDATE snapshots SET state='{\"updatedAt\":\"x\"}'");
    st = open_ok(url);
    ck_assert_int_eq(store_load(st, collect, &l), -EPROTO);
    store_last_error(st, &e);
    ck_assert_msg(strstr(err, "session 's': snapshot at 30 does not decode"), "%s", err);
    store_close(st);
    free(want);
}
END_TEST

/* ---- history, state at, fork -------------------------------------------------- */

START_TEST(test_history)
{
    struct store *st = open_ok(url);
    json_t *h = NULL;

    fill_session(st, "s", 25, 10, NULL);
    ck_assert_int_eq(store_history(st, "s", 0, 0, &h), 0);
    ck_assert_int_eq(json_array_size(h), 25);
    for (int i = 0; i < 25; i++) {
        json_t *e = json_array_get(h, (size_t)i), *want = gen_input(i);

        ck_assert_int_eq(json_integer_value(json_object_get(e, "seq")), i + 1);
        ck_assert_msg(json_equal(json_object_get(e, "input"), want), "input %d", i + 1);
        json_decref(want);
    }
    json_decref(h);
    ck_assert_int_eq(store_history(st, "s", 20, 3, &h), 0);
    ck_assert_int_eq(json_array_size(h), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(h, 0), "seq")),
                     21);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(h, 2), "seq")),
                     23);
    json_decref(h);
    ck_assert_int_eq(store_history(st, "s", 25, 0, &h), 0);
    ck_assert_int_eq(json_array_size(h), 0);
    json_decref(h);
    h = NULL;
    ck_assert_int_eq(store_history(st, "ghost", 0, 0, &h), -ENOENT);
    ck_assert_ptr_null(h);
    store_close(st);
}
END_TEST

START_TEST(test_state_at)
{
    enum { N = 33 };
    struct store *st = open_ok(url);
    char *prefix[N + 1];
    struct rx_state s;

    /* Snapshot at 30: seqs before it fold from scratch, after it from it. */
    fill_session(st, "s", N, 10, prefix);
    for (int k = 0; k <= N; k++) {
        char *got;

        ck_store_ok(st, store_state_at(st, "s", k, &s));
        got = state_bytes(&s);
        ck_assert_msg(!strcmp(got, prefix[k]), "state at %d differs", k);
        free(got);
        rx_state_release(&s);
    }
    ck_assert_int_eq(store_state_at(st, "s", N + 1, &s), -ERANGE);
    ck_assert_int_eq(store_state_at(st, "s", -1, &s), -ERANGE);
    ck_assert_int_eq(store_state_at(st, "ghost", 0, &s), -ENOENT);
    free_prefix(prefix, N);
    store_close(st);
}
END_TEST

START_TEST(test_fork)
{
    enum { N = 26 };
    struct store *st = open_ok(url);
    char *prefix[N + 1], *got;
    struct rx_state s;
    struct rx_input in;
    struct rx_outcome out;
    struct loaded l = {0};
    int64_t seq;
    json_t *h;

    fill_session(st, "s", N, 10, prefix);
    /* At 12 (before the snapshot) and at 23 (after it: the snapshot comes along). */
    ck_assert_int_eq(store_fork(st, "s", 12, "f12", NULL, BASE_MS + 5), 0);
    ck_assert_int_eq(store_fork(st, "s", 23, "f23", NULL, BASE_MS + 6), 0);
    ck_assert_int_eq(store_fork(st, "s", 0, "f0", NULL, BASE_MS + 7), 0);
    ck_assert_int_eq(store_fork(st, "s", N + 1, "bad", NULL, 1), -ERANGE);
    ck_assert_int_eq(store_fork(st, "s", 3, "f12", NULL, 1), -EEXIST);
    ck_assert_int_eq(store_fork(st, "ghost", 0, "f", NULL, 1), -ENOENT);

    ck_store_ok(st, store_session_load(st, "f12", &s, &seq));
    ck_assert_int_eq(seq, 12);
    got = state_bytes(&s);
    ck_assert_str_eq(got, prefix[12]);
    free(got);
    /* The fork goes on by itself: input 13 of the script appends as seq 13. */
    gen_parse(12, &in);
    ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
    ck_assert_int_eq(store_append(st, "f12", 13, &in, &s, 10), 0);
    rx_input_release(&in);
    rx_state_release(&s);
    ck_assert_int_eq(store_history(st, "f12", 0, 0, &h), 0);
    ck_assert_int_eq(json_array_size(h), 13);
    json_decref(h);
    store_close(st);

    st = open_ok(url);
    ck_store_ok(st, store_load(st, collect, &l));
    ck_assert_int_eq(l.n, 4);
    ck_assert_str_eq(l.id[0], "s");
    ck_assert_str_eq(l.state[0], prefix[N]);
    ck_assert_str_eq(l.id[1], "f12");
    ck_assert_str_eq(l.state[1], prefix[13]);
    ck_assert_str_eq(l.id[2], "f23");
    ck_assert_int_eq(l.seq[2], 23);
    ck_assert_str_eq(l.state[2], prefix[23]);
    ck_assert_str_eq(l.id[3], "f0");
    ck_assert_str_eq(l.state[3], prefix[0]);
    loaded_release(&l);
    store_close(st);
    ck_assert_int_eq(be->count("SELECT seq FROM snapshots WHERE session_id='f23'"), 20);
    free_prefix(prefix, N);
}
END_TEST

/* ---- files that must be refused ------------------------------------------------ */

START_TEST(test_newer_schema)
{
    char sql[64], why[128];

    store_close(open_ok(dbpath));
    snprintf(sql, sizeof(sql), "PRAGMA user_version=%d", STORE_SCHEMA_VERSION + 1);
    snprintf(why, sizeof(why),
             "schema version %d is newer than this reflexor supports (%d)",
             STORE_SCHEMA_VERSION + 1, STORE_SCHEMA_VERSION);
    raw_sql(dbpath, sql);
    open_fails(dbpath, why);
    raw_sql(dbpath, "PRAGMA user_version=0");
    open_fails(dbpath, "unknown schema version 0");
}
END_TEST

/*
 * What schema 5 added (the sessions' owners), taken off a file again: the
 * file as schema 4 made it, but for its version number, which the caller sets.
 */
#define SCHEMA_5_OFF "DROP INDEX sessions_owner; ALTER TABLE sessions DROP COLUMN owner;"
/*
 * What schemas 4 and 5 added (the sessions' rows, their owners), taken off a
 * file again: the file as schema 3 made it, but for its version number.
 */
#define SCHEMA_4_OFF                                                                     \
    "DROP TRIGGER sessions_count_insert; DROP TRIGGER sessions_count_delete;"            \
    " DROP TABLE sessions_count; DROP INDEX sessions_page; DROP INDEX sessions_busy;"    \
    " ALTER TABLE sessions DROP COLUMN messages; ALTER TABLE sessions DROP COLUMN busy;" \
    " ALTER TABLE sessions DROP COLUMN auto_title;"                                      \
    " CREATE INDEX sessions_updated ON sessions(updated_at); " SCHEMA_5_OFF

/* A file of schema 1 (no inputs_recent) is upgraded in place and goes on. */
START_TEST(test_schema_1_upgrades)
{
    struct store *st = open_ok(dbpath);
    struct loaded l = {0};
    char *want = fold_bytes(9);

    fill_session(st, "s", 6, 0, NULL);
    store_close(st);
    raw_sql(dbpath, SCHEMA_4_OFF
            "DROP TABLE inputs_recent; DROP TABLE search_fts;"
            " DROP TABLE search_docs; DROP TABLE search_mark; DROP TABLE search_pending;"
            " PRAGMA user_version=1");
    st = open_ok(dbpath);
    {
        struct rx_state s;
        int64_t seq;

        ck_store_ok(st, store_session_load(st, "s", &s, &seq));
        ck_assert_int_eq(seq, 6);
        for (int i = 6; i < 9; i++) {
            struct rx_input in;
            struct rx_outcome out;

            gen_parse(i, &in);
            ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
            ck_store_ok(st, store_append(st, "s", i + 1, &in, &s, 0));
            rx_input_release(&in);
        }
        rx_state_release(&s);
    }
    ck_store_ok(st, store_load(st, collect, &l));
    ck_assert_int_eq(l.seq[0], 9);
    ck_assert_str_eq(l.state[0], want);
    ck_assert_str_eq(l.owner[0], STORE_OWNER_DEFAULT);
    loaded_release(&l);
    store_close(st);
    free(want);
    ck_assert_int_eq(raw_count(dbpath, "PRAGMA user_version"), STORE_SCHEMA_VERSION);
}
END_TEST

START_TEST(test_foreign_database)
{
    raw_sql(dbpath, "CREATE TABLE t(x); INSERT INTO t VALUES(1)");
    open_fails(dbpath, "not a reflexor database");
    /* Refused, not adopted: the file is as it was. */
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM t"), 1);
}
END_TEST

static void write_bytes(const char *path, off_t at, const void *p, size_t n, int flags)
{
    int fd = open(path, O_WRONLY | flags, 0600);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, p, n, at), (ssize_t)n);
    close(fd);
}

START_TEST(test_garbage_file)
{
    char junk[8192];

    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (char)(i * 7 + 3);
    write_bytes(dbpath, 0, junk, sizeof(junk), O_CREAT | O_TRUNC);
    open_fails(dbpath, "not a SQLite database");
    /* Never a silent reset: the bytes are untouched. */
    {
        struct stat sb;

        ck_assert_int_eq(stat(dbpath, &sb), 0);
        ck_assert_int_eq(sb.st_size, sizeof(junk));
    }
}
END_TEST

/* A real database whose pages were damaged after the header. */
START_TEST(test_corrupt_pages)
{
    struct store *st = open_ok(dbpath);
    char junk[4096];

    fill_session(st, "s", 120, 50, NULL);
    store_close(st);
    memset(junk, 0x5a, sizeof(junk));
    write_bytes(dbpath, 4096, junk, sizeof(junk), 0);
    open_fails(dbpath, "corrupt");
}
END_TEST

/*
 * The same damage in a file too big to check at open (the bound lowered to
 * 0 bytes here): open answers at once, and the check after start-up makes
 * the store unusable, with the reason /healthz gives.
 */
START_TEST(test_corrupt_pages_checked_later)
{
    struct store *st = open_ok(dbpath);
    struct rx_error why;
    char junk[4096];
    enum store_health h = STORE_OK;

    fill_session(st, "s", 120, 50, NULL);
    store_close(st);
    memset(junk, 0x5a, sizeof(junk));
    write_bytes(dbpath, 4096, junk, sizeof(junk), 0);
    ck_assert_int_eq(setenv("RX_STORE_CHECK_AT_OPEN_MAX", "0", 1), 0);
    st = store_open(dbpath, &why);
    ck_assert_int_eq(unsetenv("RX_STORE_CHECK_AT_OPEN_MAX"), 0);
    ck_assert_msg(st != NULL, "%s", why.text);
    for (int i = 0; i < 500 && (h = store_health(st, &why)) == STORE_OK; i++)
        usleep(10000);
    ck_assert_int_eq(h, STORE_UNAVAILABLE);
    ck_assert_msg(strstr(why.text, "corrupt"), "%s", why.text);
    store_close(st);
}
END_TEST

START_TEST(test_unusable_directory)
{
    char path[256];

    /* The parent is a regular file: fails for root too. */
    snprintf(path, sizeof(path), "%s/plain", tmpdir);
    write_bytes(path, 0, "x", 1, O_CREAT);
    snprintf(path, sizeof(path), "%s/plain/reflexor.db", tmpdir);
    open_fails(path, "is not a directory");

    snprintf(path, sizeof(path), "%s/missing/reflexor.db", tmpdir);
    open_fails(path, "No such file or directory");

    /* The database path is a directory. */
    snprintf(path, sizeof(path), "%s/adir", tmpdir);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    open_fails(path, "not a regular file");

    /* A read-only directory: root writes anyway, so only a non-root run sees it. */
    if (geteuid() != 0) {
        snprintf(path, sizeof(path), "%s/ro", tmpdir);
        ck_assert_int_eq(mkdir(path, 0500), 0);
        snprintf(path, sizeof(path), "%s/ro/reflexor.db", tmpdir);
        open_fails(path, "is not writable: Permission denied");
    }
    /* /proc refuses new files whoever asks. */
    open_fails("/proc/reflexor-test.db", "cannot open");
}
END_TEST

/* The file is locked by its server: a second opener is told, not let in. */
START_TEST(test_in_use)
{
    struct store *st = open_ok(dbpath);

    fill_session(st, "s", 3, 0, NULL);
    open_fails(dbpath, "in use by another process");
    store_close(st);
    store_close(open_ok(dbpath));
}
END_TEST

/* ---- retention ----------------------------------------------------------------- */

START_TEST(test_gc)
{
    struct store *st = open_ok(url);
    struct loaded l = {0};
    json_t *ids = NULL;
    int64_t inputs = -1, n = 0;
    int sessions = -1;
    struct rx_state s;
    struct rx_input in;

    /* Inputs of "old" and "revived" stamp updated_at up to BASE_MS + 10 * 11. */
    fill_session(st, "old", 12, 5, NULL);
    fill_session(st, "revived", 12, 5, NULL);
    /* Created long ago, but an input arrived after the limit: kept. */
    ck_store_ok(st, store_session_load(st, "revived", &s, &n));
    gen_parse(12, &in);
    in.timestamp = BASE_MS + 100000;
    ck_assert_int_eq(store_append(st, "revived", 13, &in, &s, 5), 0);
    rx_input_release(&in);
    rx_state_release(&s);
    ck_assert_int_eq(store_create_session(st, "empty-old", NULL, BASE_MS - 5), 0);
    ck_assert_int_eq(store_create_session(st, "fresh", NULL, BASE_MS + 200000), 0);

    /* Nothing is older than BASE_MS - 5. */
    ck_assert_int_eq(store_gc(st, BASE_MS - 5, &sessions, &inputs), 0);
    ck_assert_int_eq(sessions, 0);
    ck_assert_int_eq(inputs, 0);

    ck_assert_int_eq(store_gc_list(st, BASE_MS + 50000, &ids, &inputs), 0);
    ck_assert_int_eq(json_array_size(ids), 2);
    ck_assert_str_eq(json_string_value(json_array_get(ids, 0)), "empty-old");
    ck_assert_str_eq(json_string_value(json_array_get(ids, 1)), "old");
    ck_assert_int_eq(inputs, 12);
    json_decref(ids);

    ck_store_ok(st, store_load(st, collect, &l));
    ck_assert_int_eq(l.n, 2);
    ck_assert_str_eq(l.id[0], "revived");
    ck_assert_int_eq(l.seq[0], 13);
    ck_assert_str_eq(l.id[1], "fresh");
    loaded_release(&l);
    ck_assert_int_eq(store_stats(st, &n, NULL), 0);
    ck_assert_int_eq(n, 13);
    store_close(st);
    ck_assert_int_eq(be->count("SELECT count(*) FROM snapshots WHERE session_id='old'"),
                     0);
}
END_TEST

/* ---- threads and size ------------------------------------------------------------ */

struct writer {
    struct store *st;
    char sid[16];
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;

    fill_session(w->st, w->sid, 30, 7, NULL);
    return NULL;
}

/* Sessions append from their own threads; the one connection serialises them. */
START_TEST(test_threads)
{
    struct store *st = open_ok(url);
    struct writer w[4];
    pthread_t t[4];
    struct loaded l = {0};
    char *want = fold_bytes(30);

    ck_assert_int_eq(store_set_durable(st, false), 0);
    for (int i = 0; i < 4; i++) {
        w[i].st = st;
        snprintf(w[i].sid, sizeof(w[i].sid), "t%d", i);
        ck_assert_int_eq(pthread_create(&t[i], NULL, writer_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ck_store_ok(st, store_load(st, collect, &l));
    ck_assert_int_eq(l.n, 4);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(l.seq[i], 30);
        ck_assert_str_eq(l.state[i], want);
    }
    loaded_release(&l);
    free(want);
    store_close(st);
}
END_TEST

/* One row per input: the file grows linearly in the inputs, not in the history. */
START_TEST(test_growth_is_linear)
{
    struct store *st = open_ok(dbpath);
    int64_t n1, b1, n2, b2;

    ck_assert_int_eq(store_set_durable(st, false), 0);
    fill_session(st, "a", 300, 100, NULL);
    ck_assert_int_eq(store_stats(st, &n1, &b1), 0);
    fill_session(st, "b", 600, 100, NULL);
    ck_assert_int_eq(store_stats(st, &n2, &b2), 0);
    ck_assert_int_eq(n1, 300);
    ck_assert_int_eq(n2, 900);
    /* A session twice as long costs about twice the bytes, not four times. */
    ck_assert_msg(b2 - b1 < 3 * b1, "300 inputs: %lld bytes; 600 more: %lld",
                  (long long)b1, (long long)(b2 - b1));
    store_close(st);
}
END_TEST

/* ---- health: a full disk, a file removed or replaced ---------------------------- */

/* User message number i with `len` bytes of text: room runs out fast. */
static void big_input(int i, size_t len, struct rx_input *in)
{
    char id[32], *text = malloc(len + 1);
    const char *field = NULL;
    struct rx_error err = {""};
    json_t *j;

    ck_assert_ptr_nonnull(text);
    memset(text, 'x', len);
    text[len] = '\0';
    snprintf(id, sizeof(id), "b%d", i);
    j = json_pack("{s:s, s:I, s:s, s:s}", "type", "user-send-message", "timestamp",
                  (json_int_t)(BASE_MS + i), "messageId", id, "content", text);
    free(text);
    ck_assert_ptr_nonnull(j);
    ck_assert_msg(rx_input_parse(j, in, &field, &err) == 0, "%s", err.text);
    json_decref(j);
}

/* Append big inputs after `from` until the store refuses one: its errno. */
static int append_until_refused(struct store *st, const char *sid, int from, int *stored)
{
    struct rx_state s;
    int err = 0, i;

    ck_assert_int_eq(rx_state_init(&s), 0);
    for (i = from; i < from + 2000 && !err; i++) {
        struct rx_input in;

        big_input(i, 2000, &in);
        err = store_append(st, sid, i + 1, &in, &s, 0);
        rx_input_release(&in);
    }
    rx_state_release(&s);
    *stored = err ? i - 1 : i;
    return err;
}

static void expect_health(struct store *st, enum store_health want, const char *why_has)
{
    struct rx_error why = {""};

    ck_assert_str_eq(store_health_name(store_health(st, &why)), store_health_name(want));
    if (why_has)
        ck_assert_msg(strstr(why.text, why_has), "'%s' lacks '%s'", why.text, why_has);
    else
        ck_assert_str_eq(why.text, "");
}

static void expect_history(struct store *st, const char *sid, size_t n)
{
    json_t *h = NULL;

    ck_store_ok(st, store_history(st, sid, 0, 0, &h));
    ck_assert_uint_eq(json_array_size(h), n);
    json_decref(h);
}

/* The quota: -ENOSPC with nothing stored, health "full" until a write fits. */
START_TEST(test_quota_full)
{
    struct store *st = open_ok(dbpath), *mem = open_ok(":memory:");
    struct rx_state s;
    struct rx_input in;
    int stored;

    expect_health(mem, STORE_OK, NULL);
    store_close(mem);
    ck_store_ok(st, store_create_session(st, "s", NULL, 1));
    ck_assert_int_eq(store_set_max_bytes(st, -1), -EINVAL);
    /* Room for the schema (the full-text index is a dozen pages) and some inputs. */
    ck_store_ok(st, store_set_max_bytes(st, 262144));
    expect_health(st, STORE_OK, NULL);
    ck_assert_int_eq(append_until_refused(st, "s", 0, &stored), -ENOSPC);
    ck_assert_int_gt(stored, 0);
    expect_health(st, STORE_FULL, "262144");
    expect_history(st, "s", (size_t)stored);
    ck_assert_int_eq(store_fork(st, "s", stored, "f", NULL, 2), -ENOSPC);
    ck_assert_int_eq(store_history(st, "f", 0, 0, &(json_t *){NULL}), -ENOENT);
    /* Room again: the next write is stored and the store is healthy. */
    ck_store_ok(st, store_set_max_bytes(st, 0));
    ck_assert_int_eq(rx_state_init(&s), 0);
    big_input(stored, 2000, &in);
    ck_store_ok(st, store_append(st, "s", stored + 1, &in, &s, 0));
    rx_input_release(&in);
    rx_state_release(&s);
    expect_health(st, STORE_OK, NULL);
    store_close(st);
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM inputs"), stored + 1);
}
END_TEST

/* A removed database file: every write is -EIO at once; reads go on. */
START_TEST(test_file_removed)
{
    struct store *st = open_ok(dbpath);
    struct rx_error e = {""};
    int stored;
    int64_t inputs;

    fill_session(st, "s", 3, 0, NULL);
    expect_health(st, STORE_OK, NULL);
    ck_assert_int_eq(unlink(dbpath), 0);
    expect_health(st, STORE_UNAVAILABLE, "database file was removed");
    ck_assert_int_eq(append_until_refused(st, "s", 3, &stored), -EIO);
    ck_assert_int_eq(stored, 3);
    store_last_error(st, &e);
    ck_assert_msg(strstr(e.text, "removed"), "%s", e.text);
    ck_assert_int_eq(store_create_session(st, "t", NULL, 1), -EIO);
    ck_assert_int_eq(store_delete_session(st, "s"), -EIO);
    ck_assert_int_eq(store_fork(st, "s", 1, "f", NULL, 1), -EIO);
    ck_assert_int_eq(store_gc(st, INT64_MAX, NULL, NULL), -EIO);
    expect_history(st, "s", 3);
    ck_store_ok(st, store_stats(st, &inputs, NULL));
    ck_assert_int_eq(inputs, 3);
    /* Sticky: a file back at the path is not the one written to. */
    raw_sql(dbpath, "CREATE TABLE t(x)");
    expect_health(st, STORE_UNAVAILABLE, "removed");
    store_close(st);
    /* Its WAL is not left to be replayed onto the new file. */
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM t"), 0);
    unlink(dbpath);
    st = open_ok(dbpath);
    expect_health(st, STORE_OK, NULL);
    store_close(st);
}
END_TEST

/* Another file renamed over the database, the database renamed away, or its
   WAL removed: -EIO, and nobody's file is damaged at close. */
START_TEST(test_file_replaced)
{
    struct store *st = open_ok(dbpath);
    char other[160], wal[160];
    int stored;

    fill_session(st, "s", 2, 0, NULL);
    snprintf(other, sizeof(other), "%s.new", dbpath);
    raw_sql(other, "CREATE TABLE t(x)");
    ck_assert_int_eq(rename(other, dbpath), 0);
    ck_assert_int_eq(append_until_refused(st, "s", 2, &stored), -EIO);
    ck_assert_int_eq(stored, 2);
    expect_health(st, STORE_UNAVAILABLE, "replaced");
    store_close(st);
    /* The file put there is left as it was, and no WAL of ours is beside it. */
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM t"), 0);
    snprintf(wal, sizeof(wal), "%s-wal", dbpath);
    ck_assert_int_eq(access(wal, F_OK), -1);

    /* Renamed away: what was committed follows the file, WAL included. */
    ck_assert_int_eq(unlink(dbpath), 0);
    st = open_ok(dbpath);
    fill_session(st, "s", 2, 0, NULL);
    snprintf(other, sizeof(other), "%s.bak", dbpath);
    ck_assert_int_eq(rename(dbpath, other), 0);
    ck_assert_int_eq(store_create_session(st, "t", NULL, 1), -EIO);
    expect_health(st, STORE_UNAVAILABLE, "removed");
    store_close(st);
    ck_assert_int_eq(raw_count(other, "SELECT (SELECT count(*) FROM inputs)"
                                      " + (SELECT count(*) FROM inputs_recent)"),
                     2);
    ck_assert_int_eq(access(wal, F_OK), -1);

    st = open_ok(dbpath);
    fill_session(st, "s", 2, 0, NULL);
    ck_assert_int_eq(unlink(wal), 0);
    ck_assert_int_eq(store_create_session(st, "t", NULL, 1), -EIO);
    expect_health(st, STORE_UNAVAILABLE, "write-ahead log was removed");
    store_close(st);
}
END_TEST

/* ---- group commit --------------------------------------------------------------- */

/*
 * Holding the writer: another connection takes the database's write lock, a
 * first write is queued and taken (its commit waits for the lock), then what
 * is queued meanwhile is the next batch, all of it (STORE_BATCH_MAX is far
 * above what the tests queue). Released within the writer's busy timeout.
 */
struct held {
    sqlite3 *db;
    int64_t commits; /* before the first write */
};

/* A write queued straight to the store that notes when it is answered. */
struct rec {
    struct store_write w; /* first */
    struct rx_buf text;
    int order; /* among the answers, from 0 */
    int err;
};

static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rec_cond = PTHREAD_COND_INITIALIZER;
static int rec_n;

static void rec_done(struct store_write *w, int err)
{
    struct rec *r = (struct rec *)w;

    pthread_mutex_lock(&rec_lock);
    r->err = err;
    r->order = rec_n++;
    pthread_cond_broadcast(&rec_cond);
    pthread_mutex_unlock(&rec_lock);
}

static void recs_wait(int n)
{
    pthread_mutex_lock(&rec_lock);
    while (rec_n < n)
        pthread_cond_wait(&rec_cond, &rec_lock);
    pthread_mutex_unlock(&rec_lock);
}

/* Fill `w` with scripted input i as number `seq` of `sid`, encoded into `text`. */
static void write_fill(struct store_write *w, struct rx_buf *text, const char *sid,
                       int64_t seq, int i)
{
    struct rx_input in;

    gen_parse(i, &in);
    rx_buf_init(text, RX_BUF_SMALL_MAX);
    ck_assert_int_eq(rx_input_encode(&in, text), 0);
    w->sid = sid;
    w->seq = seq;
    w->updated_at = in.timestamp;
    w->input = text->data;
    w->input_len = text->len;
    rx_input_release(&in);
}

/* Take the write lock from the side, queue `first` and wait until it is taken. */
static void hold_writer(struct store *st, struct held *h, struct store_write *first)
{
    int64_t c;

    ck_assert_int_eq(sqlite3_open(dbpath, &h->db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(h->db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    store_commit_counts(st, &h->commits, NULL);
    store_write_queue(st, first);
    do {
        usleep(1000);
        store_commit_counts(st, &c, NULL);
    } while (c == h->commits);
}

static void release_writer(struct held *h)
{
    ck_assert_int_eq(sqlite3_exec(h->db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h->db);
}

/* Several sessions' inputs queued together: one commit, answered in order. */
START_TEST(test_group_one_commit)
{
    static const struct {
        const char *sid;
        int seq;
    } q[] = {{"a", 2}, {"b", 1}, {"c", 1}, {"b", 2}, {"a", 3}, {"c", 2}, {"b", 3}};
    enum { N = sizeof(q) / sizeof(q[0]) };
    struct store *st = open_ok(dbpath);
    struct rec r[N + 1];
    struct held h;
    struct loaded l = {0};
    int64_t commits, writes;
    char *want2 = fold_bytes(2), *want3 = fold_bytes(3);

    rec_n = 0;
    for (int i = 0; i < 3; i++)
        ck_store_ok(st, store_create_session(st, (const char *[]){"a", "b", "c"}[i], NULL,
                                             BASE_MS + i));
    memset(r, 0, sizeof(r));
    write_fill(&r[N].w, &r[N].text, "a", 1, 0);
    r[N].w.done = rec_done;
    hold_writer(st, &h, &r[N].w);
    for (int i = 0; i < N; i++) {
        write_fill(&r[i].w, &r[i].text, q[i].sid, q[i].seq, q[i].seq - 1);
        r[i].w.done = rec_done;
        store_write_queue(st, &r[i].w);
    }
    release_writer(&h);
    recs_wait(N + 1);
    /* All of them in the second transaction, answered in the order queued. */
    store_commit_counts(st, &commits, &writes);
    ck_assert_int_eq(commits, 2);
    ck_assert_int_eq(writes, 1 + N);
    ck_assert_int_eq(r[N].err, 0);
    ck_assert_int_eq(r[N].order, 0);
    rx_buf_release(&r[N].text);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(r[i].err, 0);
        ck_assert_int_eq(r[i].order, i + 1);
        rx_buf_release(&r[i].text);
    }
    ck_store_ok(st, store_load(st, collect, &l));
    ck_assert_int_eq(l.n, 3);
    ck_assert_int_eq(l.seq[0], 3);
    ck_assert_str_eq(l.state[0], want3);
    ck_assert_int_eq(l.seq[1], 3);
    ck_assert_str_eq(l.state[1], want3);
    ck_assert_int_eq(l.seq[2], 2);
    ck_assert_str_eq(l.state[2], want2);
    loaded_release(&l);
    store_close(st);
    free(want2);
    free(want3);
}
END_TEST

/* A write refused on its own (no session, a seq that does not follow) does
   not fail the others of its transaction. */
START_TEST(test_group_refused_alone)
{
    static const struct {
        const char *sid;
        int seq, err;
    } q[] = {{"ghost", 1, -ENOENT}, {"a", 1, -EEXIST}, {"a", 3, -EINVAL},
             {"b", 1, 0},           {"a", 2, 0},       {"b", 2, 0}};
    enum { N = sizeof(q) / sizeof(q[0]) };
    struct store *st = open_ok(dbpath);
    struct rec r[N + 1];
    struct held h;
    int64_t commits;

    rec_n = 0;
    ck_store_ok(st, store_create_session(st, "a", NULL, BASE_MS));
    ck_store_ok(st, store_create_session(st, "b", NULL, BASE_MS));
    memset(r, 0, sizeof(r));
    write_fill(&r[N].w, &r[N].text, "a", 1, 0);
    r[N].w.done = rec_done;
    hold_writer(st, &h, &r[N].w);
    for (int i = 0; i < N; i++) {
        write_fill(&r[i].w, &r[i].text, q[i].sid, q[i].seq, q[i].seq - 1);
        r[i].w.done = rec_done;
        store_write_queue(st, &r[i].w);
    }
    release_writer(&h);
    recs_wait(N + 1);
    store_commit_counts(st, &commits, NULL);
    ck_assert_int_eq(commits, 2);
    ck_assert_int_eq(r[N].err, 0);
    rx_buf_release(&r[N].text);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(r[i].err == q[i].err, "write %d: %d, not %d", i, r[i].err,
                      q[i].err);
        rx_buf_release(&r[i].text);
    }
    expect_history(st, "a", 2);
    expect_history(st, "b", 2);
    expect_health(st, STORE_OK, NULL);
    store_close(st);
}
END_TEST

/* Past the quota: the batch is tried again write by write, so only the input
   too big is refused (and the one after it in its session, which no longer
   follows); the small ones beside it are stored. */
START_TEST(test_group_full_alone)
{
    struct store *st = open_ok(dbpath);
    struct rec r[5];
    struct rx_input big;
    struct held h;
    int64_t bytes;

    rec_n = 0;
    ck_store_ok(st, store_create_session(st, "s", NULL, BASE_MS));
    ck_store_ok(st, store_create_session(st, "t", NULL, BASE_MS));
    ck_store_ok(st, store_stats(st, NULL, &bytes));
    ck_store_ok(st, store_set_max_bytes(st, bytes + 64 * 1024));
    memset(r, 0, sizeof(r));
    write_fill(&r[4].w, &r[4].text, "t", 1, 0);
    r[4].w.done = rec_done;
    hold_writer(st, &h, &r[4].w);
    /* s 1: 400 KB, past the quota; s 2 after it; t 2 and t 3: small. */
    big_input(0, 400 * 1024, &big);
    rx_buf_init(&r[0].text, RX_BUF_STATE_MAX);
    ck_assert_int_eq(rx_input_encode(&big, &r[0].text), 0);
    r[0].w = (struct store_write){.sid = "s",
                                  .seq = 1,
                                  .updated_at = big.timestamp,
                                  .input = r[0].text.data,
                                  .input_len = r[0].text.len};
    rx_input_release(&big);
    write_fill(&r[1].w, &r[1].text, "s", 2, 1);
    write_fill(&r[2].w, &r[2].text, "t", 2, 1);
    write_fill(&r[3].w, &r[3].text, "t", 3, 2);
    for (int i = 0; i < 4; i++) {
        r[i].w.done = rec_done;
        store_write_queue(st, &r[i].w);
    }
    release_writer(&h);
    recs_wait(5);
    ck_assert_int_eq(r[4].err, 0);
    rx_buf_release(&r[4].text);
    ck_assert_int_eq(r[0].err, -ENOSPC);
    ck_assert_int_eq(r[1].err, -EINVAL);
    ck_assert_int_eq(r[2].err, 0);
    ck_assert_int_eq(r[3].err, 0);
    for (int i = 0; i < 4; i++)
        rx_buf_release(&r[i].text);
    expect_history(st, "s", 0);
    expect_history(st, "t", 3);
    store_close(st);
}
END_TEST

/*
 * Inputs are committed to inputs_recent and moved into `inputs` in bulk:
 * reads see one log across both, at every moment; what a process left in
 * inputs_recent is moved at the next open, and the log goes on from there.
 */
START_TEST(test_recent_merge)
{
    enum { N = 8192 + 300 };
    struct store *st = open_ok(dbpath);
    char *want = fold_bytes(N), *got;
    struct loaded l = {0};
    struct rx_state s;
    struct rx_input in;
    struct rx_outcome out;
    int64_t seq, n;
    json_t *h = NULL;

    ck_store_ok(st, store_set_durable(st, false));
    fill_session(st, "a", N, 1000, NULL);
    /* Moved once on the way: the first STORE_RECENT_MERGE are in `inputs`. */
    ck_assert_int_ge(raw_count(dbpath, "SELECT count(*) FROM inputs"), 8192);
    ck_assert_int_gt(raw_count(dbpath, "SELECT count(*) FROM inputs_recent"), 0);
    /* One history across both, in order. */
    ck_store_ok(st, store_history(st, "a", 8100, 200, &h));
    ck_assert_int_eq(json_array_size(h), 200);
    for (size_t i = 0; i < 200; i++)
        ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(h, i), "seq")),
                         8101 + (int)i);
    json_decref(h);
    ck_store_ok(st, store_stats(st, &n, NULL));
    ck_assert_int_eq(n, N);
    ck_store_ok(st, store_state_at(st, "a", N, &s));
    got = state_bytes(&s);
    ck_assert_str_eq(got, want);
    free(got);
    rx_state_release(&s);
    store_close(st);

    /* As a process killed mid-way leaves it: the newest inputs still recent. */
    raw_sql(dbpath, "INSERT INTO inputs_recent SELECT session_id, seq, input FROM inputs"
                    " WHERE seq>8400; DELETE FROM inputs WHERE seq>8400");
    st = open_ok(dbpath);
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM inputs_recent"), 0);
    ck_store_ok(st, store_load(st, collect, &l));
    ck_assert_int_eq(l.seq[0], N);
    ck_assert_str_eq(l.state[0], want);
    loaded_release(&l);
    /* The log goes on where it was: N + 1 follows, N again does not. */
    ck_store_ok(st, store_session_load(st, "a", &s, &seq));
    gen_parse(N, &in);
    ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
    ck_assert_int_eq(store_append(st, "a", N, &in, &s, 0), -EEXIST);
    ck_store_ok(st, store_append(st, "a", N + 1, &in, &s, 0));
    rx_input_release(&in);
    rx_state_release(&s);
    /* Deleted with both tables' rows. */
    ck_store_ok(st, store_delete_session(st, "a"));
    store_close(st);
    ck_assert_int_eq(raw_count(dbpath, "SELECT (SELECT count(*) FROM inputs)"
                                       " + (SELECT count(*) FROM inputs_recent)"),
                     0);
    free(want);
}
END_TEST

/* ---- the session pipeline over the store ------------------------------------------ */

/* What a session_done_fn got, and in which order. */
struct answer {
    bool answered;
    int err;
    int order;
    struct submit_result res;
};

static void answer_done(void *arg, int err, const struct submit_result *res)
{
    struct answer *a = arg;

    pthread_mutex_lock(&rec_lock);
    a->answered = true;
    a->err = err;
    a->res = *res;
    a->order = rec_n++;
    pthread_cond_broadcast(&rec_cond);
    pthread_mutex_unlock(&rec_lock);
}

/* A client's user message with id `mid` (NEW input). */
static void user_message(const char *mid, struct rx_input *in)
{
    json_t *j = json_pack("{s:s, s:s, s:s}", "type", "user-send-message", "messageId",
                          mid, "content", "hello");
    const char *field = NULL;
    struct rx_error err = {""};

    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(rx_input_parse(j, in, &field, &err), 0);
    json_decref(j);
}

/* submit_start a user message; it must be on its way (SESSION_PENDING). */
static void submit_pending(struct session *s, const char *mid, struct answer *a)
{
    struct submit_result res;
    struct rx_input in;

    user_message(mid, &in);
    ck_assert_int_eq(session_submit_start(s, &in, NULL, &res, answer_done, a),
                     SESSION_PENDING);
    rx_input_release(&in);
}

/* The session's state in memory is the log's, byte for byte, at `seq`. */
static void expect_state_is_log(struct store *st, struct session *s, int64_t seq)
{
    struct rx_state logged;
    struct rx_buf mem;
    int64_t n = -1;
    char *want;

    ck_store_ok(st, store_session_load(st, session_id(s), &logged, &n));
    ck_assert_int_eq(n, seq);
    want = state_bytes(&logged);
    rx_state_release(&logged);
    rx_buf_init(&mem, RX_BUF_STATE_MAX);
    ck_assert_int_eq(session_state_encode(s, &mem), 0);
    ck_assert_int_eq(rx_buf_putc(&mem, '\0'), 0);
    ck_assert_str_eq(mem.data, want);
    rx_buf_release(&mem);
    free(want);
}

struct pipeline_fixture {
    struct config cfg;
    struct store *st;
    struct session_table *t;
    struct session *x, *y;
};

static void pipeline_open(struct pipeline_fixture *f, int snapshot_every)
{
    struct submit_result res;
    struct rx_input in;

    rec_n = 0;
    ck_assert_int_eq(config_init(&f->cfg), 0);
    f->cfg.effects = false;
    f->cfg.snapshot_every = snapshot_every;
    f->st = open_ok(dbpath);
    f->t = session_table_create(&(struct session_env){.cfg = &f->cfg, .store = f->st});
    ck_assert_ptr_nonnull(f->t);
    ck_assert_int_eq(session_table_create_session(f->t, "x", NULL, &f->x), 0);
    ck_assert_int_eq(session_table_create_session(f->t, "y", NULL, &f->y), 0);
    /* One input each, the synchronous way: nothing else on its way. */
    user_message("x0", &in);
    ck_assert_int_eq(session_submit(f->x, &in, NULL, &res), 0);
    ck_assert_int_eq(res.seq, 1);
    rx_input_release(&in);
    user_message("y0", &in);
    ck_assert_int_eq(session_submit(f->y, &in, NULL, &res), 0);
    rx_input_release(&in);
    ck_store_ok(f->st, store_create_session(f->st, "h", NULL, BASE_MS));
}

static void pipeline_close(struct pipeline_fixture *f)
{
    session_unref(f->x);
    session_unref(f->y);
    session_table_destroy(f->t);
    store_close(f->st);
    config_release(&f->cfg);
}

/* Inputs of two sessions on their way together: one commit, each answered in
   its session's order with its seq, snapshots where due, memory = the log. */
START_TEST(test_pipeline_batches)
{
    static const char *const mids[] = {"x1", "y1", "x2", "x3", "y2"};
    enum { N = sizeof(mids) / sizeof(mids[0]) };
    struct pipeline_fixture f;
    struct answer a[N + 1];
    int64_t c0, c1;
    struct held h;
    struct rec r;

    pipeline_open(&f, 3);
    memset(a, 0, sizeof(a));
    memset(&r, 0, sizeof(r));
    write_fill(&r.w, &r.text, "h", 1, 0);
    r.w.done = rec_done;
    hold_writer(f.st, &h, &r.w);
    store_commit_counts(f.st, &c0, NULL);
    for (int i = 0; i < N; i++)
        submit_pending(mids[i][0] == 'x' ? f.x : f.y, mids[i], &a[i]);
    /* The same message again while the first is on its way: "unchanged",
       answered after it. */
    submit_pending(f.x, "x3", &a[N]);
    release_writer(&h);
    recs_wait(N + 2);
    store_commit_counts(f.st, &c1, NULL);
    ck_assert_int_eq(c1 - c0, 1);
    ck_assert_int_eq(r.err, 0);
    ck_assert_int_eq(r.order, 0);
    rx_buf_release(&r.text);
    for (int i = 0; i <= N; i++) {
        ck_assert_int_eq(a[i].err, 0);
        /* In the log's order; the repeat right after the x3 it waited for. */
        ck_assert_int_eq(a[i].order, 1 + (i == N ? 4 : i == 4 ? 5 : i));
    }
    ck_assert_int_eq(a[0].res.seq, 2); /* x1 */
    ck_assert_int_eq(a[1].res.seq, 2); /* y1 */
    ck_assert_int_eq(a[3].res.seq, 4); /* x3 */
    ck_assert_int_eq(a[N].res.verdict, RX_UNCHANGED);
    ck_assert_int_eq(a[N].res.seq, 4);
    expect_state_is_log(f.st, f.x, 4);
    expect_state_is_log(f.st, f.y, 3);
    pipeline_close(&f);
    /* Every third input of a session left a snapshot: x at 3, y at 3. */
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM snapshots"), 2);
    ck_assert_int_eq(raw_count(dbpath, "SELECT min(seq) FROM snapshots"), 3);
}
END_TEST

/* A batch that fails: every input of it, and every one applied after them,
   answers the store's error; each session is put back as its log has it;
   nothing of them was published as stored. */
START_TEST(test_pipeline_failed_batch_restores)
{
    static const char *const mids[] = {"x1", "y1", "x2", "x3", "y2"};
    enum { N = sizeof(mids) / sizeof(mids[0]) };
    struct pipeline_fixture f;
    struct answer a[N + 1];
    struct submit_result res;
    struct rx_input in;
    struct held h;
    struct rec r;

    pipeline_open(&f, 0);
    memset(a, 0, sizeof(a));
    memset(&r, 0, sizeof(r));
    write_fill(&r.w, &r.text, "h", 1, 0);
    r.w.done = rec_done;
    hold_writer(f.st, &h, &r.w);
    for (int i = 0; i < N; i++)
        submit_pending(mids[i][0] == 'x' ? f.x : f.y, mids[i], &a[i]);
    submit_pending(f.x, "x3", &a[N]); /* judged on x3, which will not be stored */
    /* The file goes away: the next transaction fails, sticky. */
    ck_assert_int_eq(unlink(dbpath), 0);
    release_writer(&h);
    recs_wait(N + 2);
    ck_assert_int_eq(r.err, -EIO); /* committed, but the file was gone */
    rx_buf_release(&r.text);
    for (int i = 0; i <= N; i++) {
        ck_assert_msg(a[i].err == -EIO, "answer %d: %d", i, a[i].err);
        ck_assert_int_eq(a[i].order, 1 + (i == N ? 4 : i == 4 ? 5 : i));
    }
    expect_state_is_log(f.st, f.x, 1);
    expect_state_is_log(f.st, f.y, 1);
    /* The next input finds the store unusable: refused, and undone again. */
    user_message("x9", &in);
    ck_assert_int_eq(session_submit(f.x, &in, NULL, &res), -EIO);
    rx_input_release(&in);
    expect_state_is_log(f.st, f.x, 1);
    pipeline_close(&f);
}
END_TEST

/* ---- the full-text index, titles and import (schema 3) -------------------------- */

/* Append the user message `text` as input `seq` of `sid`, whose state is *s. */
static void say(struct store *st, const char *sid, struct rx_state *s, int64_t seq,
                const char *text)
{
    const char *field = NULL;
    struct rx_error err = {""};
    struct rx_outcome out;
    struct rx_input in;
    char id[32];
    json_t *j;

    snprintf(id, sizeof(id), "m%lld", (long long)seq);
    j = json_pack("{s:s, s:I, s:s, s:s}", "type", "user-send-message", "timestamp",
                  (json_int_t)(s->updated_at ? s->updated_at + 1 : BASE_MS), "messageId",
                  id, "content", text);
    ck_assert_msg(rx_input_parse(j, &in, &field, &err) == 0, "%s", err.text);
    json_decref(j);
    ck_assert_int_eq(rx_machine_apply(s, &in, &out), 0);
    ck_assert_int_eq(out.verdict, RX_ACCEPTED);
    ck_store_ok(st, store_append(st, sid, seq, &in, s, 0));
    rx_input_release(&in);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The sessions store_search finds for the words of `q`, sorted, comma-joined. */
static const char *found(struct store *st, const char *q)
{
    static char out[512];
    char buf[256], *save = NULL, *w;
    const char *words[STORE_SEARCH_WORDS_MAX], *ids[64];
    size_t n = 0, k = 0, i;
    json_t *arr = NULL, *v;

    snprintf(buf, sizeof(buf), "%s", q);
    for (w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save))
        words[n++] = w;
    ck_store_ok(st, store_search(st, words, n, &arr));
    json_array_foreach(arr, i, v)
    {
        ck_assert_uint_lt(k, 64);
        ids[k++] = json_string_value(v);
    }
    qsort(ids, k, sizeof(ids[0]), str_cmp);
    out[0] = '\0';
    for (i = 0; i < k; i++)
        snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s", i ? "," : "",
                 ids[i]);
    json_decref(arr);
    return out;
}

/* Sessions with states, created in the store. */
static void new_sessions(struct store *st, struct rx_state *s, const char *const *ids,
                         size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ck_store_ok(st, store_create_session(st, ids[i], NULL, BASE_MS - 1));
        ck_assert_int_eq(rx_state_init(&s[i]), 0);
    }
}

static void release_states(struct rx_state *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        rx_state_release(&s[i]);
}

/*
 * Messages are found by every word, each anywhere in the session, case and
 * diacritics folded, the last word as a prefix; a search sees each committed
 * input (the index catches up first), and after a restart too.
 */
START_TEST(test_search_index)
{
    static const char *const ids[] = {"a", "b", "c"};
    struct store *st = open_ok(dbpath);
    struct rx_state s[3];

    new_sessions(st, s, ids, 3);
    say(st, "a", &s[0], 1, "Hello brave new world");
    say(st, "b", &s[1], 1, "hello there");
    say(st, "c", &s[2], 1, "Nothing to see");
    ck_assert_str_eq(found(st, "hello"), "a,b");
    say(st, "c", &s[2], 2, "the world is BRAVE, isn't it?");
    say(st, "b", &s[1], 2, "caf\xc3\xa9 cr\xc3\xa8me");
    ck_assert_str_eq(found(st, "HELLO"), "a,b");
    ck_assert_str_eq(found(st, "brave world"), "a,c");
    ck_assert_str_eq(found(st, "hello world"), "a");
    ck_assert_str_eq(found(st, "wor"), "a,c");
    ck_assert_str_eq(found(st, "wor hello"), "");
    ck_assert_str_eq(found(st, "cafe"), "b");
    ck_assert_str_eq(found(st, "\"isn't\""), "c");
    ck_assert_str_eq(found(st, "zebra"), "");
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM search_docs"), 5);
    ck_assert_int_eq(raw_count(dbpath, "SELECT upto FROM search_mark"), 5);
    {
        const char *none[1] = {"x"};
        json_t *arr = NULL;

        ck_assert_int_eq(store_search(st, none, 0, &arr), -EINVAL);
        ck_assert_int_eq(store_search(st, none, STORE_SEARCH_WORDS_MAX + 1, &arr),
                         -EINVAL);
    }
    store_close(st);
    /* The close moved every input into `inputs`, indexed; the mark starts over. */
    ck_assert_int_eq(raw_count(dbpath, "SELECT upto FROM search_mark"), 0);
    st = open_ok(dbpath);
    ck_assert_str_eq(found(st, "brave"), "a,c");
    store_close(st);
    release_states(s, 3);
}
END_TEST

/* A title given is stored with the session, searchable, and comes back at load. */
START_TEST(test_titles)
{
    static const char *const ids[] = {"t"};
    struct store *st = open_ok(url);
    struct loaded l = {0};
    struct rx_state s[1];
    char *title = NULL;

    new_sessions(st, s, ids, 1);
    say(st, "t", &s[0], 1, "first words");
    ck_store_ok(st, store_session_title(st, "t", &title));
    ck_assert_ptr_null(title);
    ck_store_ok(st, store_set_title(st, "t", "Quarterly Plans"));
    ck_assert_int_eq(store_set_title(st, "ghost", "x"), -ENOENT);
    ck_assert_int_eq(store_session_title(st, "ghost", &title), -ENOENT);
    ck_store_ok(st, store_session_title(st, "t", &title));
    ck_assert_str_eq(title, "Quarterly Plans");
    free(title);
    ck_assert_str_eq(found(st, "quarterly"), "t");
    ck_store_ok(st, store_set_title(st, "t", "Other name"));
    ck_assert_str_eq(found(st, "quarterly"), "");
    ck_assert_str_eq(found(st, "other first"), "t");
    store_close(st);

    st = open_ok(url);
    ck_store_ok(st, store_load(st, collect, &l));
    ck_assert_int_eq(l.n, 1);
    ck_assert_str_eq(l.title[0], "Other name");
    loaded_release(&l);
    ck_store_ok(st, store_set_title(st, "t", NULL));
    ck_assert_str_eq(found(st, "other"), "");
    ck_store_ok(st, store_session_title(st, "t", &title));
    ck_assert_ptr_null(title);
    /* Listed (and loaded) with the title from its first message instead. */
    ck_store_ok(st, store_load(st, collect, &l));
    ck_assert_str_eq(l.title[0], "first words");
    loaded_release(&l);
    store_close(st);
    release_states(s, 1);
}
END_TEST

/* A fork takes its part of the index and the title; delete and retention clean it. */
START_TEST(test_index_follows_the_log)
{
    static const char *const ids[] = {"a", "b"};
    struct store *st = open_ok(dbpath);
    struct rx_state s[2];
    char *title = NULL;
    int removed = 0;

    new_sessions(st, s, ids, 2);
    say(st, "a", &s[0], 1, "alpha words");
    say(st, "a", &s[0], 2, "beta words");
    say(st, "b", &s[1], 1, "alpha gamma");
    ck_store_ok(st, store_set_title(st, "a", "Named"));
    ck_store_ok(st, store_fork(st, "a", 1, "fa", NULL, BASE_MS + 100));
    ck_assert_str_eq(found(st, "alpha"), "a,b,fa");
    ck_assert_str_eq(found(st, "beta"), "a");
    ck_assert_str_eq(found(st, "named"), "a,fa");
    ck_store_ok(st, store_session_title(st, "fa", &title));
    ck_assert_str_eq(title, "Named");
    free(title);
    ck_store_ok(st, store_delete_session(st, "b"));
    ck_assert_str_eq(found(st, "gamma"), "");
    ck_assert_int_eq(
        raw_count(dbpath, "SELECT count(*) FROM search_docs WHERE session_id='b'"), 0);
    ck_store_ok(st, store_gc(st, INT64_MAX, &removed, NULL));
    ck_assert_int_eq(removed, 2);
    ck_assert_str_eq(found(st, "alpha"), "");
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM search_docs"), 0);
    store_close(st);
    release_states(s, 2);
}
END_TEST

/*
 * Rows deleted at the end of inputs_recent free their rowids for the next
 * inputs: the mark comes down with them, so those inputs are indexed too.
 */
START_TEST(test_index_mark_after_delete)
{
    static const char *const ids[] = {"a", "b"};
    struct store *st = open_ok(dbpath);
    struct rx_state s[2];

    new_sessions(st, s, ids, 2);
    say(st, "a", &s[0], 1, "one");
    say(st, "b", &s[1], 1, "two");
    ck_assert_str_eq(found(st, "two"), "b"); /* indexed up to b's row */
    ck_store_ok(st, store_delete_session(st, "b"));
    ck_assert_int_eq(raw_count(dbpath, "SELECT upto FROM search_mark"), 1);
    say(st, "a", &s[0], 2, "three");
    ck_assert_str_eq(found(st, "three"), "a");
    store_close(st);
    release_states(s, 2);
}
END_TEST

/*
 * Ranges of `inputs` an older version moved there before it indexed them
 * (search_pending) are indexed before a search; a session deleted meanwhile
 * leaves nothing behind.
 */
START_TEST(test_index_deferred)
{
    static const char *const ids[] = {"a", "b"};
    struct store *st = open_ok(dbpath);
    struct rx_state s[2];

    new_sessions(st, s, ids, 2);
    say(st, "a", &s[0], 1, "late words");
    say(st, "b", &s[1], 1, "gone words");
    store_close(st); /* the commits indexed them; the close merges */
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM search_pending"), 0);
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM search_docs"), 2);
    /* What a version that did not index its commits left behind. */
    raw_sql(dbpath, "DELETE FROM search_docs; INSERT INTO search_pending SELECT"
                    " session_id, min(seq), max(seq) FROM inputs GROUP BY session_id");
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM search_pending"), 2);
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM search_docs"), 0);
    st = open_ok(dbpath);
    ck_store_ok(st, store_delete_session(st, "b"));
    ck_assert_int_eq(
        raw_count(dbpath, "SELECT count(*) FROM search_pending WHERE session_id='b'"), 0);
    ck_assert_str_eq(found(st, "late"), "a");
    ck_assert_str_eq(found(st, "gone"), "");
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM search_pending"), 0);
    store_close(st);
    release_states(s, 2);
}
END_TEST

/* The writer indexes by itself once it has had nothing to commit for a moment. */
START_TEST(test_index_when_idle)
{
    static const char *const ids[] = {"a"};
    struct store *st = open_ok(dbpath);
    struct rx_state s[1];
    int waited = 0;

    new_sessions(st, s, ids, 1);
    say(st, "a", &s[0], 1, "indexed while idle");
    while (raw_count(dbpath, "SELECT count(*) FROM search_docs") != 1 && waited < 10000) {
        usleep(20000);
        waited += 20;
    }
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM search_docs"), 1);
    ck_assert_int_eq(raw_count(dbpath, "SELECT upto FROM search_mark"), 1);
    store_close(st);
    release_states(s, 1);
}
END_TEST

/* A file of schema 2 gets the index at open, filled from its log and titles. */
START_TEST(test_schema_2_upgrades)
{
    static const char *const ids[] = {"s"};
    struct store *st = open_ok(dbpath);
    struct rx_state s[1];

    new_sessions(st, s, ids, 1);
    say(st, "s", &s[0], 1, "upgrade me please");
    ck_store_ok(st, store_set_title(st, "s", "Old Title"));
    store_close(st);
    raw_sql(dbpath, SCHEMA_4_OFF
            "DROP TABLE search_fts; DROP TABLE search_docs;"
            " DROP TABLE search_mark; DROP TABLE search_pending; PRAGMA user_version=2");
    st = open_ok(dbpath);
    ck_assert_int_eq(raw_count(dbpath, "PRAGMA user_version"), STORE_SCHEMA_VERSION);
    ck_assert_str_eq(found(st, "upgrade"), "s");
    ck_assert_str_eq(found(st, "old title"), "s");
    say(st, "s", &s[0], 2, "after the upgrade");
    ck_assert_str_eq(found(st, "after"), "s");
    store_close(st);
    release_states(s, 1);
}
END_TEST

/*
 * The first n generated inputs folded into `s` (initialised here), each
 * encoded into enc[i] with texts[i] pointing at it, and the state they make
 * encoded into `sb`, `snap` pointing at it: a log to import. The caller
 * releases enc[], sb and s.
 */
static void gen_log(int n, struct rx_state *s, struct rx_buf *enc,
                    struct store_text *texts, struct rx_buf *sb, struct store_text *snap)
{
    ck_assert_int_eq(rx_state_init(s), 0);
    for (int i = 0; i < n; i++) {
        struct rx_input in;
        struct rx_outcome out;

        gen_parse(i, &in);
        ck_assert_int_eq(rx_machine_apply(s, &in, &out), 0);
        rx_buf_init(&enc[i], RX_BUF_SMALL_MAX);
        ck_assert_int_eq(rx_input_encode(&in, &enc[i]), 0);
        texts[i] = (struct store_text){enc[i].data, enc[i].len};
        rx_input_release(&in);
    }
    rx_buf_init(sb, RX_BUF_STATE_MAX);
    ck_assert_int_eq(rx_state_encode(s, sb), 0);
    *snap = (struct store_text){sb->data, sb->len};
}

/* An imported log is stored whole, folds as it was, and is indexed at once. */
START_TEST(test_import)
{
    enum { N = 30 };
    struct store_text texts[N], snap;
    struct rx_buf enc[N], sb;
    struct loaded l = {0};
    struct rx_state s;
    char *want = fold_bytes(N), *got;
    int64_t seq;
    struct store *st = open_ok(url);

    gen_log(N, &s, enc, texts, &sb, &snap);
    ck_store_ok(st,
                store_import(st, "imp", NULL, BASE_MS, "Imported chat", texts, N, &snap));
    ck_assert_int_eq(store_import(st, "imp", NULL, BASE_MS, NULL, texts, N, &snap),
                     -EEXIST);
    ck_assert_str_eq(found(st, "thanks"), "imp");
    ck_assert_str_eq(found(st, "imported"), "imp");
    rx_state_release(&s);
    ck_store_ok(st, store_session_load(st, "imp", &s, &seq));
    ck_assert_int_eq(seq, N);
    got = state_bytes(&s);
    ck_assert_str_eq(got, want);
    free(got);
    rx_state_release(&s);
    store_close(st);

    st = open_ok(url);
    ck_store_ok(st, store_load(st, collect, &l));
    ck_assert_int_eq(l.n, 1);
    ck_assert_str_eq(l.title[0], "Imported chat");
    ck_assert_int_eq(l.seq[0], N);
    ck_assert_str_eq(l.state[0], want);
    loaded_release(&l);
    /* It goes on like any session: the next input appends as N + 1. */
    ck_store_ok(st, store_session_load(st, "imp", &s, &seq));
    say(st, "imp", &s, N + 1, "one more");
    rx_state_release(&s);
    ck_assert_str_eq(found(st, "more"), "imp");
    store_close(st);
    for (int i = 0; i < N; i++)
        rx_buf_release(&enc[i]);
    rx_buf_release(&sb);
    free(want);
}
END_TEST

/* ---- PostgreSQL alone, and the tests both backends share from here ---------- */

START_TEST(test_schema)
{
    struct rx_error err = {""};
    struct store *st;
    int64_t n = -1, bytes = -1;

    st = open_ok(url);
    store_close(st);
    st = open_ok(url); /* the second open finds the schema made */
    ck_store_ok(st, store_stats(st, &n, &bytes));
    ck_assert_int_eq(n, 0);
    ck_assert_int_gt(bytes, 0);
    store_close(st);
    sql_ok("UPDATE rx_meta SET v = 99 WHERE k = 'version'");
    ck_assert_ptr_null(store_open(url, &err));
    ck_assert_msg(strstr(err.text, "newer") && !strchr(err.text, '\n'), "%s", err.text);
    ck_assert_int_eq(
        store_open("postgresql:///nosuchdb?host=/nonexistent&password=s3cret", &err) ==
            NULL,
        1);
    ck_assert_msg(!strstr(err.text, "s3cret"), "password in '%s'", err.text);
    ck_assert_ptr_nonnull(strstr(err.text, "nosuchdb"));
}
END_TEST

#define N_LOG 40

START_TEST(test_log)
{
    char *prefix[N_LOG + 1], *b, *title = NULL;
    struct store *st;
    struct rx_buf page;
    struct rx_state s;
    json_t *h = NULL, *ids = NULL;
    int64_t seq = 0, last = 0, inputs = 0, created = 0;
    const char *w1[] = {"WHAT", "1"}, *w2[] = {"secret"}, *w3[] = {"THAN"};

    st = open_ok(url);
    fill_session(st, "a", N_LOG, 7, prefix);
    ck_store_ok(st, store_session_created(st, "a", &created));
    ck_assert_int_eq(created, BASE_MS - 1);
    ck_assert_int_eq(store_session_created(st, "zz", &created), -ENOENT);
    b = loaded_bytes(st, "a", &seq);
    ck_assert_int_eq(seq, N_LOG);
    ck_assert_str_eq(b, prefix[N_LOG]);
    free(b);
    /* history pages: 15 + 15 + 10, then empty */
    rx_buf_init(&page, RX_BUF_STATE_MAX);
    for (int64_t after = 0, k = 0; k < 4; k++) {
        rx_buf_reset(&page);
        ck_store_ok(st, store_history_page(st, "a", after, 15, &page, &last));
        h = json_loadb(page.data, page.len, 0, NULL);
        ck_assert_ptr_nonnull(h);
        ck_assert_int_eq(json_array_size(h), k < 2 ? 15 : k == 2 ? 10 : 0);
        if (json_array_size(h))
            ck_assert_int_eq(
                json_integer_value(json_object_get(json_array_get(h, 0), "seq")),
                after + 1);
        json_decref(h);
        after = last;
    }
    rx_buf_release(&page);
    ck_store_ok(st, store_history(st, "a", 0, 0, &h));
    ck_assert_int_eq(json_array_size(h), N_LOG);
    json_decref(h);
    ck_assert_int_eq(store_history(st, "nope", 0, 0, &h), -ENOENT);
    /* state at every seq, snapshots or not */
    for (int k = 0; k <= N_LOG; k += 3) {
        ck_store_ok(st, store_state_at(st, "a", k, &s));
        b = state_bytes(&s);
        ck_assert_str_eq(b, prefix[k]);
        free(b);
        rx_state_release(&s);
    }
    ck_assert_int_eq(store_state_at(st, "a", N_LOG + 1, &s), -ERANGE);
    /* fork at 12: its own log from there */
    ck_store_ok(st, store_set_title(st, "a", "Secret plans"));
    ck_store_ok(st, store_fork(st, "a", 12, "f", NULL, BASE_MS));
    ck_assert_int_eq(store_fork(st, "a", 12, "f", NULL, BASE_MS), -EEXIST);
    ck_assert_int_eq(store_fork(st, "a", N_LOG + 1, "g", NULL, BASE_MS), -ERANGE);
    ck_assert_int_eq(store_fork(st, "nope", 0, "g", NULL, BASE_MS), -ENOENT);
    b = loaded_bytes(st, "f", &seq);
    ck_assert_int_eq(seq, 12);
    ck_assert_str_eq(b, prefix[12]);
    free(b);
    ck_store_ok(st, store_session_title(st, "f", &title));
    ck_assert_str_eq(title, "Secret plans");
    free(title);
    /* search: words anywhere in the session, case folded, last one a prefix */
    ck_store_ok(st, store_search(st, w1, 2, &ids));
    ck_assert_int_eq(json_array_size(ids), 2); /* a and its fork */
    json_decref(ids);
    ck_store_ok(st, store_search(st, w2, 1, &ids));
    ck_assert_int_eq(json_array_size(ids), 2);
    json_decref(ids);
    ck_store_ok(st, store_set_title(st, "f", NULL));
    ck_store_ok(st, store_search(st, w2, 1, &ids));
    ck_assert_int_eq(json_array_size(ids), 1);
    json_decref(ids);
    ck_store_ok(st, store_search(st, w3, 1, &ids)); /* "thanks": a prefix */
    ck_assert_int_eq(json_array_size(ids), 2);
    json_decref(ids);
    ck_assert_int_eq(store_set_title(st, "nope", "x"), -ENOENT);
    /* import: the log of `a`, read back, as a new session */
    {
        struct store_text v[N_LOG];
        struct store_text snap;
        json_t *e;

        ck_store_ok(st, store_history(st, "a", 0, 0, &h));
        for (int k = 0; k < N_LOG; k++) {
            e = json_object_get(json_array_get(h, (size_t)k), "input");
            v[k].data = json_dumps(e, JSON_COMPACT | JSON_PRESERVE_ORDER);
            v[k].len = strlen(v[k].data);
        }
        snap.data = prefix[N_LOG];
        snap.len = strlen(prefix[N_LOG]);
        ck_store_ok(st,
                    store_import(st, "imp", NULL, BASE_MS, "Imported", v, N_LOG, &snap));
        ck_assert_int_eq(store_import(st, "imp", NULL, BASE_MS, NULL, v, 1, NULL),
                         -EEXIST);
        for (int k = 0; k < N_LOG; k++)
            free((void *)v[k].data);
        json_decref(h);
        b = loaded_bytes(st, "imp", &seq);
        ck_assert_int_eq(seq, N_LOG);
        ck_assert_str_eq(b, prefix[N_LOG]);
        free(b);
    }
    ck_store_ok(st, store_stats(st, &inputs, NULL));
    ck_assert_int_eq(inputs, N_LOG + 12 + N_LOG);
    /* retention: `a` was created at BASE_MS - 1 and its inputs came within a
       second (updated_at moves by more than one only), `f` and `imp` at BASE_MS */
    ck_store_ok(st, store_gc_list(st, BASE_MS, &ids, &inputs));
    ck_assert_int_eq(json_array_size(ids), 1);
    ck_assert_str_eq(json_string_value(json_array_get(ids, 0)), "a");
    ck_assert_int_eq(inputs, N_LOG);
    json_decref(ids);
    ck_assert_int_eq(store_session_load(st, "a", &s, &seq), -ENOENT);
    ck_store_ok(st, store_delete_session(st, "f"));
    ck_assert_int_eq(store_delete_session(st, "f"), -ENOENT);
    ck_store_ok(st, store_stats(st, &inputs, NULL));
    ck_assert_int_eq(inputs, N_LOG);
    store_close(st);
    for (int k = 0; k <= N_LOG; k++)
        free(prefix[k]);
}
END_TEST

/* A write queued by the test and its answer. */
struct qw {
    struct store_write w;
    char text[512];
    int err;
    bool done;
};

static pthread_mutex_t qw_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qw_cond = PTHREAD_COND_INITIALIZER;

static void qw_done(struct store_write *w, int err)
{
    struct qw *q = (struct qw *)w;

    pthread_mutex_lock(&qw_lock);
    q->err = err;
    q->done = true;
    pthread_cond_broadcast(&qw_cond);
    pthread_mutex_unlock(&qw_lock);
}

/* Input i of the script, encoded, as write `q` of session sid at seq. */
static void qw_init(struct qw *q, const char *sid, int64_t seq, int i)
{
    json_t *j = gen_input(i);
    char *t = json_dumps(j, JSON_COMPACT);

    memset(q, 0, sizeof(*q));
    snprintf(q->text, sizeof(q->text), "%s", t);
    free(t);
    json_decref(j);
    q->w.sid = sid;
    q->w.seq = seq;
    q->w.updated_at = BASE_MS + seq;
    q->w.input = q->text;
    q->w.input_len = strlen(q->text);
    q->w.done = qw_done;
}

static void qw_wait(struct qw *v, size_t n)
{
    pthread_mutex_lock(&qw_lock);
    for (size_t i = 0; i < n; i++)
        while (!v[i].done)
            pthread_cond_wait(&qw_cond, &qw_lock);
    pthread_mutex_unlock(&qw_lock);
}

START_TEST(test_batch_verdicts)
{
    struct qw v[7];
    struct store *st;
    int64_t seq;
    char *b;

    st = open_ok(url);
    ck_store_ok(st, store_create_session(st, "s1", NULL, BASE_MS));
    ck_store_ok(st, store_create_session(st, "s2", NULL, BASE_MS));
    /* Queued together: each gets its own verdict, the good ones are stored. */
    qw_init(&v[0], "s1", 1, 0);
    qw_init(&v[1], "s2", 5, 0); /* does not follow 0 */
    qw_init(&v[2], "s1", 2, 1);
    qw_init(&v[3], "s3", 1, 0); /* no such session */
    qw_init(&v[4], "s1", 2, 1); /* taken */
    qw_init(&v[5], "s2", 1, 0);
    qw_init(&v[6], "s1", 3, 2);
    for (int i = 0; i < 7; i++)
        store_write_queue(st, &v[i].w);
    qw_wait(v, 7);
    ck_assert_int_eq(v[0].err, 0);
    ck_assert_int_eq(v[1].err, -EINVAL);
    ck_assert_int_eq(v[2].err, 0);
    ck_assert_int_eq(v[3].err, -ENOENT);
    ck_assert_int_eq(v[4].err, -EEXIST);
    ck_assert_int_eq(v[5].err, 0);
    ck_assert_int_eq(v[6].err, 0);
    free(loaded_bytes(st, "s1", &seq));
    ck_assert_int_eq(seq, 3);
    b = loaded_bytes(st, "s2", &seq);
    ck_assert_int_eq(seq, 1);
    free(b);
    store_close(st);
}
END_TEST

/*
 * A row put there behind the store's back (another writer: PostgreSQL is
 * shared): a unique violation in the batch fails that write alone.
 */
START_TEST(test_batch_unique_violation)
{
    struct qw v[2];
    struct store *st = open_ok(url);

    fill_session(st, "s1", 3, 0, NULL);
    fill_session(st, "s2", 1, 0, NULL);
    sql_ok("INSERT INTO inputs VALUES ('s2', 2, '{}')");
    qw_init(&v[0], "s2", 2, 1);
    qw_init(&v[1], "s1", 4, 3);
    store_write_queue(st, &v[0].w);
    store_write_queue(st, &v[1].w);
    qw_wait(v, 2);
    ck_assert_int_eq(v[0].err, -EEXIST);
    ck_assert_int_eq(v[1].err, 0);
    store_close(st);
}
END_TEST

START_TEST(test_fencing)
{
    struct qw v[3];
    struct store *st;

    st = open_ok(url);
    ck_store_ok(st, store_create_session(st, "free", NULL, BASE_MS)); /* no owners row */
    store_set_node(st, "node-a");
    ck_store_ok(st, store_create_session(st, "mine", NULL, BASE_MS));
    ck_store_ok(st, store_create_session(st, "theirs", NULL, BASE_MS));
    sql_ok("UPDATE owners SET node = 'node-b' WHERE session_id = 'theirs'");
    qw_init(&v[0], "mine", 1, 0);
    qw_init(&v[1], "theirs", 1, 0);
    qw_init(&v[2], "free", 1, 0);
    for (int i = 0; i < 3; i++)
        store_write_queue(st, &v[i].w);
    qw_wait(v, 3);
    ck_assert_int_eq(v[0].err, 0);
    ck_assert_int_eq(v[1].err, -ESTALE);
    ck_assert_int_eq(v[2].err, -ESTALE);
    /* Taken back: writes go on. Without a node nothing is checked. */
    sql_ok("UPDATE owners SET node = 'node-a' WHERE session_id = 'theirs'");
    qw_init(&v[0], "theirs", 1, 0);
    store_write_queue(st, &v[0].w);
    qw_wait(v, 1);
    ck_assert_int_eq(v[0].err, 0);
    store_set_node(st, NULL);
    qw_init(&v[0], "free", 1, 0);
    store_write_queue(st, &v[0].w);
    qw_wait(v, 1);
    ck_assert_int_eq(v[0].err, 0);
    store_close(st);
}
END_TEST

/* The next notification on `raw` within 5 s: "<channel>|<payload>", malloc'd. */
static char *next_notify(void)
{
    int64_t until = (int64_t)time(NULL) + 5;

    for (;;) {
        PGnotify *n;
        struct pollfd p = {.fd = PQsocket(raw), .events = POLLIN};

        ck_assert_int_eq(PQconsumeInput(raw), 1);
        if ((n = PQnotifies(raw))) {
            char *s = NULL;

            ck_assert_int_ge(asprintf(&s, "%s|%s", n->relname, n->extra), 0);
            PQfreemem(n);
            return s;
        }
        ck_assert_msg(time(NULL) < until, "no notification within 5 s");
        (void)poll(&p, 1, 200);
    }
}

static void expect_notify(const char *want)
{
    char *got = next_notify();

    ck_assert_str_eq(got, want);
    free(got);
}

START_TEST(test_notify)
{
    struct store *st;
    struct rx_input in;
    struct rx_state s;
    struct rx_outcome out;
    char want[600], *big;
    struct qw w;

    st = open_ok(url);
    sql_ok("LISTEN rx_log");
    sql_ok("LISTEN rx_sess");
    ck_store_ok(st, store_create_session(st, "n1", NULL, BASE_MS));
    expect_notify("rx_sess|created n1");
    ck_assert_int_eq(rx_state_init(&s), 0);
    gen_parse(0, &in);
    ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
    ck_store_ok(st, store_append(st, "n1", 1, &in, &s, 0));
    rx_input_release(&in);
    rx_state_release(&s);
    qw_init(&w, "n1", 1, 0);
    snprintf(want, sizeof(want), "rx_log|n1 1 %s", w.text);
    expect_notify(want);
    /* An input over PG_STORE_NOTIFY_TEXT_MAX: the seq alone. */
    big = malloc(9000);
    ck_assert_ptr_nonnull(big);
    memset(big, 'x', 8999);
    big[8999] = '\0';
    {
        char *text = NULL;

        ck_assert_int_ge(asprintf(&text,
                                  "{\"type\":\"user-send-message\",\"timestamp\":%lld,"
                                  "\"messageId\":\"m2\",\"content\":\"%s\"}",
                                  BASE_MS + 5, big),
                         0);
        qw_init(&w, "n1", 2, 0);
        w.w.input = text;
        w.w.input_len = strlen(text);
        store_write_queue(st, &w.w);
        qw_wait(&w, 1);
        ck_assert_int_eq(w.err, 0);
        expect_notify("rx_log|n1 2");
        free(text);
    }
    free(big);
    ck_store_ok(st, store_set_title(st, "n1", "T"));
    expect_notify("rx_sess|title n1");
    ck_store_ok(st, store_fork(st, "n1", 1, "n2", NULL, BASE_MS));
    expect_notify("rx_sess|created n2");
    ck_store_ok(st, store_delete_session(st, "n1"));
    expect_notify("rx_sess|deleted n1");
    store_close(st);
}
END_TEST

/* Append input `i` of the script as seq i+1 of `sid` (no state needed: no snapshot). */
static int append_raw(struct store *st, const char *sid, int i)
{
    struct qw w;

    qw_init(&w, sid, i + 1, i);
    store_write_queue(st, &w.w);
    qw_wait(&w, 1);
    return w.err;
}

static void pgtmp(const char *cmd)
{
    char line[512];

    snprintf(line, sizeof(line), "scripts/pgtmp.sh %s '%s' >/dev/null", cmd,
             getenv("RX_PG_DIR"));
    ck_assert_msg(system(line) == 0, "%s failed", line);
}

START_TEST(test_connection_loss)
{
    struct rx_error why = {""};
    struct store *st;
    time_t t0;
    int err, i = 1;

    if (!getenv("RX_PG_DIR")) {
        fprintf(stderr, "check_store: skipped (%s): RX_PG_DIR is not set\n", __func__);
        return;
    }
    st = open_ok(url);
    ck_store_ok(st, store_create_session(st, "k", NULL, BASE_MS));
    ck_store_ok(st, append_raw(st, "k", 0));
    PQfinish(raw); /* the cluster goes away under it too */
    raw = NULL;
    pgtmp("kill");
    t0 = time(NULL);
    err = append_raw(st, "k", i);
    store_last_error(st, &why);
    ck_assert_msg(err == -EIO, "%d %s", err, why.text);
    ck_assert_int_le(time(NULL) - t0, 10);
    ck_assert_int_eq(store_health(st, &why), STORE_UNAVAILABLE);
    ck_assert_msg(strstr(why.text, "unreachable"), "%s", why.text);
    ck_assert_int_eq(store_create_session(st, "k2", NULL, BASE_MS), -EIO);
    t0 = time(NULL);
    ck_assert_int_eq(store_session_load(st, "k", &(struct rx_state){0}, &(int64_t){0}),
                     -EIO);
    ck_assert_int_le(time(NULL) - t0, 10);
    pgtmp("start");
    /* Back by itself: health first (the idle writer reconnects), then writes. */
    t0 = time(NULL);
    while (store_health(st, NULL) != STORE_OK && time(NULL) - t0 < 15)
        usleep(100000);
    ck_assert_int_eq(store_health(st, NULL), STORE_OK);
    ck_store_ok(st, append_raw(st, "k", i));
    ck_store_ok(st, store_create_session(st, "k2", NULL, BASE_MS));
    free(loaded_bytes(st, "k", &(int64_t){0}));
    store_close(st);
}
END_TEST

/* The sessions list pages in (created_at, id) order, titles and times along. */
START_TEST(test_list_pages)
{
    static const char *const ids[] = {"b", "a", "c", "e", "d"};
    static const int64_t created[] = {2, 2, 1, 3, 3};
    static const char *const order = "c,a,b,d,e";
    struct store_list l = {0};
    struct store_cursor at;
    struct store *st = open_ok(url);
    char got[64] = "";

    for (int i = 0; i < 5; i++)
        ck_store_ok(st, store_create_session(st, ids[i], NULL, BASE_MS + created[i]));
    ck_store_ok(st, store_set_title(st, "a", "Named"));
    ck_store_ok(st, store_list_sessions(st, NULL, 2, &l));
    ck_assert_uint_eq(l.n, 2);
    while (l.n < 5) {
        size_t n = l.n;

        at = (struct store_cursor){l.v[n - 1].created_at, l.v[n - 1].id};
        ck_store_ok(st, store_list_sessions(st, &at, 2, &l));
        ck_assert_uint_gt(l.n, n);
    }
    at = (struct store_cursor){l.v[4].created_at, l.v[4].id};
    ck_store_ok(st, store_list_sessions(st, &at, 2, &l));
    ck_assert_uint_eq(l.n, 5); /* past the last: nothing more */
    for (size_t i = 0; i < l.n; i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", i ? "," : "",
                 l.v[i].id);
    ck_assert_str_eq(got, order);
    ck_assert_str_eq(l.v[1].title, "Named");
    ck_assert_ptr_null(l.v[0].title);
    ck_assert_int_eq(l.v[0].created_at, BASE_MS + 1);
    ck_assert_int_eq(l.v[0].updated_at, BASE_MS + 1);
    store_list_release(&l);
    ck_assert_uint_eq(l.n, 0);
    /* 0: all of them at once. */
    ck_store_ok(st, store_list_sessions(st, NULL, 0, &l));
    ck_assert_uint_eq(l.n, 5);
    store_list_release(&l);
    store_close(st);
}
END_TEST

/* ---- the sessions' rows: messages, busy, titles, pages (SPEC 6.2) ---------------- */

/* The ids of a list, comma-joined, in its order. */
static const char *list_ids(const struct store_list *l)
{
    static char out[1024];

    out[0] = '\0';
    for (size_t i = 0; i < l->n; i++)
        snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s", i ? "," : "",
                 l->v[i].id);
    return out;
}

/*
 * The sessions store_sessions_page lists for the words of `q` ("" for none),
 * of `owner` only (NULL: everyone's).
 */
static const char *owned_page_ids(struct store *st, const char *owner, const char *q,
                                  int64_t before, size_t limit)
{
    const char *words[STORE_SEARCH_WORDS_MAX];
    char buf[256], *save = NULL, *w;
    struct store_list l = {0};
    const char *ids;
    size_t n = 0;

    snprintf(buf, sizeof(buf), "%s", q);
    for (w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save))
        words[n++] = w;
    ck_store_ok(st, store_sessions_page(st, owner, words, n, before, limit, &l));
    for (size_t i = 0; owner && i < l.n; i++)
        ck_assert_str_eq(l.v[i].owner, owner);
    ids = list_ids(&l);
    store_list_release(&l);
    return ids;
}

static const char *page_ids(struct store *st, const char *q, int64_t before, size_t limit)
{
    return owned_page_ids(st, NULL, q, before, limit);
}

/* The busy set, sorted, comma-joined. */
static const char *busy_ids(struct store *st)
{
    static char out[1024];
    struct store_list l = {0};
    const char *ids[64];

    ck_store_ok(st, store_sessions_busy(st, &l));
    ck_assert_uint_le(l.n, 64);
    for (size_t i = 0; i < l.n; i++)
        ids[i] = l.v[i].id;
    qsort(ids, l.n, sizeof(ids[0]), str_cmp);
    out[0] = '\0';
    for (size_t i = 0; i < l.n; i++)
        snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s", i ? "," : "",
                 ids[i]);
    store_list_release(&l);
    return out;
}

static bool is_busy(struct store *st, const char *sid)
{
    char want[64], all[1100];

    snprintf(want, sizeof(want), ",%s,", sid);
    snprintf(all, sizeof(all), ",%s,", busy_ids(st));
    return strstr(all, want) != NULL;
}

/* The row of `sid`: its messages and title (NULL: none) as store_session_info says. */
static void expect_row(struct store *st, const char *sid, int64_t messages, bool busy,
                       const char *title)
{
    struct store_session_info info = {0};

    ck_store_ok(st, store_session_info(st, sid, &info));
    ck_assert_str_eq(info.id, sid);
    ck_assert_int_eq(info.messages, messages);
    if (title)
        ck_assert_pstr_eq(info.title, title);
    else
        ck_assert_ptr_null(info.title);
    store_session_info_release(&info);
    ck_assert_msg(is_busy(st, sid) == busy, "%s busy: %s", sid, busy_ids(st));
}

/* The row a state makes: what the machine says of it. */
static void expect_row_of(struct store *st, const char *sid, const struct rx_state *s)
{
    const char *t = NULL;
    size_t n = rx_state_title(s, &t);
    char title[128];

    snprintf(title, sizeof(title), "%.*s", (int)n, n ? t : "");
    expect_row(st, sid, (int64_t)(s->user.len + s->assistant.len), rx_effects_any(s),
               n ? title : NULL);
}

/* Writes to one session, and the row they leave. */
static const struct rows_case {
    struct {
        int64_t messages;
        bool busy;
        const char *title;
    } w[3];
    size_t n;
    int64_t messages;
    bool busy;
    const char *title;
} rows_cases[] = {
    {{{1, true, "Hello"}}, 1, 1, true, "Hello"},
    /* busy goes back to 0; a later write without a title keeps the first's */
    {{{1, true, "Hello"}, {2, false, NULL}}, 2, 2, false, "Hello"},
    /* the title is kept once set */
    {{{1, true, "First"}, {2, true, "Second"}}, 2, 2, true, "First"},
    {{{0, false, NULL}}, 1, 0, false, NULL},
    /* "" is no title */
    {{{3, false, NULL}, {3, true, ""}, {4, true, "Late"}}, 3, 4, true, "Late"},
};

/*
 * The writer keeps each session's row as its last write says, the title of
 * its first write with one, whether the writes share a batch or not; and
 * updated_at follows the last write.
 */
START_TEST(test_rows_written)
{
    const struct rows_case *c = &rows_cases[_i];
    static const char *const sids[] = {"together", "apart"};
    struct store *st = open_ok(url);
    struct qw v[3];

    for (int mode = 0; mode < 2; mode++) {
        const char *sid = sids[mode];
        struct store_session_info info = {0};

        ck_store_ok(st, store_create_session(st, sid, NULL, BASE_MS));
        for (size_t i = 0; i < c->n; i++) {
            qw_init(&v[i], sid, (int64_t)i + 1, (int)i);
            v[i].w.updated_at = BASE_MS + 5000 * ((int64_t)i + 1);
            v[i].w.messages = c->w[i].messages;
            v[i].w.busy = c->w[i].busy;
            v[i].w.title = c->w[i].title;
            v[i].w.title_len = c->w[i].title ? strlen(c->w[i].title) : 0;
            store_write_queue(st, &v[i].w);
            if (mode == 1)
                qw_wait(&v[i], 1);
        }
        qw_wait(v, c->n);
        for (size_t i = 0; i < c->n; i++)
            ck_assert_int_eq(v[i].err, 0);
        expect_row(st, sid, c->messages, c->busy, c->title);
        ck_store_ok(st, store_session_info(st, sid, &info));
        ck_assert_int_eq(info.updated_at, BASE_MS + 5000 * (int64_t)c->n);
        ck_assert_int_eq(info.created_at, BASE_MS);
        store_session_info_release(&info);
    }
    store_close(st);
    /* Kept across a restart. */
    st = open_ok(url);
    expect_row(st, "apart", c->messages, c->busy, c->title);
    store_close(st);
}
END_TEST

/* Sessions whose updated_at (their creation) orders the pages below. */
static const struct {
    const char *id;
    int64_t at;
} page_sessions[] = {{"a", 5}, {"b", 3}, {"c", 3}, {"d", 3}, {"e", 1}, {"f", 7}};

/* A page: newest first, `limit` rows and the ties of the last, before excluded. */
static const struct {
    int64_t before; /* from BASE_MS; -1: none */
    size_t limit;
    const char *want;
} page_cases[] = {
    {-1, 1, "f"}, {-1, 2, "f,a"}, {5, 2, "d,c,b"},   {5, 1, "d,c,b"},
    {3, 5, "e"},  {1, 3, ""},     {7, 3, "a,d,c,b"}, {-1, 10, "f,a,d,c,b,e"},
};

START_TEST(test_sessions_page)
{
    struct store *st = open_ok(url);
    struct store_list l = {0};
    int64_t before = page_cases[_i].before;
    const char *words[1] = {"x"};

    for (size_t i = 0; i < sizeof(page_sessions) / sizeof(page_sessions[0]); i++)
        ck_store_ok(st, store_create_session(st, page_sessions[i].id, NULL,
                                             BASE_MS + page_sessions[i].at));
    ck_assert_str_eq(
        page_ids(st, "", before < 0 ? -1 : BASE_MS + before, page_cases[_i].limit),
        page_cases[_i].want);
    ck_assert_int_eq(store_sessions_page(st, NULL, words, 0, -1, 0, &l), -EINVAL);
    ck_assert_int_eq(
        store_sessions_page(st, NULL, words, STORE_SEARCH_WORDS_MAX + 1, -1, 1, &l),
        -EINVAL);
    ck_assert_uint_eq(l.n, 0);
    store_close(st);
}
END_TEST

/*
 * With words, a page lists only what the search finds, in the same order
 * and cut; a row's title is the one a person gave, else its first message's.
 */
START_TEST(test_sessions_page_words)
{
    static const char *const ids[] = {"a", "b", "c"};
    struct store *st = open_ok(url);
    struct store_list l = {0};
    struct rx_state s[3];

    for (size_t i = 0; i < 3; i++) {
        ck_store_ok(st, store_create_session(st, ids[i], NULL, BASE_MS + 1 + (int64_t)i));
        ck_assert_int_eq(rx_state_init(&s[i]), 0);
    }
    say(st, "a", &s[0], 1, "hello world\nsecond line");
    say(st, "b", &s[1], 1, "hello there");
    say(st, "c", &s[2], 1, "nothing to see");
    ck_assert_str_eq(page_ids(st, "hello", -1, 10), "b,a");
    ck_assert_str_eq(page_ids(st, "hello", -1, 1), "b");
    ck_assert_str_eq(page_ids(st, "hello", BASE_MS + 2, 10), "a");
    ck_assert_str_eq(page_ids(st, "hello wor", -1, 10), "a");
    ck_assert_str_eq(page_ids(st, "HELL", -1, 10), "b,a");
    ck_assert_str_eq(page_ids(st, "zebra", -1, 10), "");
    ck_assert_str_eq(page_ids(st, "", -1, 10), "c,b,a");
    /* store_append carried the row: one message, the first line as the title. */
    expect_row_of(st, "a", &s[0]);
    expect_row(st, "a", 1, rx_effects_any(&s[0]), "hello world");
    ck_store_ok(st, store_set_title(st, "a", "Named"));
    expect_row(st, "a", 1, rx_effects_any(&s[0]), "Named");
    ck_assert_str_eq(page_ids(st, "named", -1, 10), "a");
    ck_store_ok(st, store_sessions_page(st, NULL, NULL, 0, -1, 10, &l));
    ck_assert_uint_eq(l.n, 3);
    ck_assert_str_eq(l.v[2].title, "Named");
    ck_assert_int_eq(l.v[2].messages, 1);
    ck_assert_int_eq(l.v[2].created_at, BASE_MS + 1);
    store_list_release(&l);
    store_close(st);
    release_states(s, 3);
}
END_TEST

/* The busy set follows the writes; the count follows creates and deletes. */
START_TEST(test_sessions_busy_count)
{
    static const char *const ids[] = {"a", "b", "c"};
    struct store *st = open_ok(url);
    struct store_session_info info = {0};
    int64_t n = -1;
    struct qw v[3];

    ck_store_ok(st, store_sessions_count(st, &n));
    ck_assert_int_eq(n, 0);
    for (size_t i = 0; i < 3; i++)
        ck_store_ok(st, store_create_session(st, ids[i], NULL, BASE_MS));
    ck_assert_str_eq(busy_ids(st), "");
    for (size_t i = 0; i < 3; i++) {
        qw_init(&v[i], ids[i], 1, 0);
        v[i].w.busy = i < 2;
        v[i].w.messages = 1;
        store_write_queue(st, &v[i].w);
    }
    qw_wait(v, 3);
    ck_assert_str_eq(busy_ids(st), "a,b");
    qw_init(&v[0], "a", 2, 1);
    v[0].w.messages = 2;
    store_write_queue(st, &v[0].w);
    qw_wait(v, 1);
    ck_assert_int_eq(v[0].err, 0);
    ck_assert_str_eq(busy_ids(st), "b");
    ck_store_ok(st, store_sessions_count(st, &n));
    ck_assert_int_eq(n, 3);
    ck_store_ok(st, store_delete_session(st, "b"));
    ck_assert_str_eq(busy_ids(st), "");
    ck_store_ok(st, store_sessions_count(st, &n));
    ck_assert_int_eq(n, 2);
    ck_store_ok(st, store_fork(st, "a", 1, "fa", NULL, BASE_MS + 9));
    ck_store_ok(st, store_sessions_count(st, &n));
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(store_session_info(st, "b", &info), -ENOENT);
    ck_store_ok(st, store_session_info(st, "a", &info));
    ck_assert_int_eq(info.messages, 2);
    store_session_info_release(&info);
    ck_store_ok(st, store_gc(st, INT64_MAX, NULL, NULL));
    ck_store_ok(st, store_sessions_count(st, &n));
    ck_assert_int_eq(n, 0);
    store_close(st);
}
END_TEST

/* Import and fork fill the row from the state: its snapshot, its fold, its seq. */
START_TEST(test_rows_import_fork)
{
    enum { N = 30 };
    struct store_text texts[N], snap;
    struct rx_buf enc[N], sb;
    struct rx_state s, at;
    struct store *st = open_ok(url);

    gen_log(N, &s, enc, texts, &sb, &snap);
    ck_store_ok(st, store_import(st, "snap", NULL, BASE_MS, NULL, texts, N, &snap));
    ck_store_ok(st, store_import(st, "fold", NULL, BASE_MS, NULL, texts, N, NULL));
    ck_store_ok(st, store_import(st, "part", NULL, BASE_MS, NULL, texts, 3, NULL));
    ck_assert_int_gt(s.user.len + s.assistant.len, 1);
    expect_row_of(st, "snap", &s);
    expect_row_of(st, "fold", &s);
    for (int64_t k = 0; k <= N; k += 5) {
        char fid[16];

        snprintf(fid, sizeof(fid), "f%lld", (long long)k);
        ck_store_ok(st, store_fork(st, "fold", k, fid, NULL, BASE_MS + 1));
        ck_store_ok(st, store_state_at(st, "fold", k, &at));
        expect_row_of(st, fid, &at);
        rx_state_release(&at);
    }
    ck_store_ok(st, store_state_at(st, "fold", 3, &at));
    expect_row_of(st, "part", &at);
    rx_state_release(&at);
    rx_state_release(&s);
    store_close(st);
    for (int i = 0; i < N; i++)
        rx_buf_release(&enc[i]);
    rx_buf_release(&sb);
}
END_TEST

/* ---- owners (SPEC 4.4) ------------------------------------------------------------ */

/* The owner store_session_info gives `sid`. */
static void expect_owner(struct store *st, const char *sid, const char *owner)
{
    struct store_session_info info = {0};

    ck_store_ok(st, store_session_info(st, sid, &info));
    ck_assert_str_eq(info.owner, owner);
    store_session_info_release(&info);
    ck_assert_ptr_null(info.owner);
}

/* How many sessions `owner` has, as store_sessions_owned says. */
static int64_t owned(struct store *st, const char *owner)
{
    int64_t n = -1;

    ck_store_ok(st, store_sessions_owned(st, owner, &n));
    return n;
}

/* Another owner's sessions among page_sessions, at the same times (ties included). */
static const struct {
    const char *id;
    int64_t at;
} other_sessions[] = {{"a0", 5}, {"c0", 3}, {"z", 3}, {"e0", 1}, {"g", 7}, {"h", 9}};

/*
 * One owner's page is the page of its sessions alone: the same order, the
 * same cut and ties, whatever another owner has at the same times.
 */
START_TEST(test_sessions_page_owned)
{
    struct store *st = open_ok(url);
    int64_t before = page_cases[_i].before;

    for (size_t i = 0; i < sizeof(page_sessions) / sizeof(page_sessions[0]); i++)
        ck_store_ok(st, store_create_session(st, page_sessions[i].id, "alice",
                                             BASE_MS + page_sessions[i].at));
    for (size_t i = 0; i < sizeof(other_sessions) / sizeof(other_sessions[0]); i++)
        ck_store_ok(st, store_create_session(st, other_sessions[i].id, "bob",
                                             BASE_MS + other_sessions[i].at));
    ck_assert_str_eq(owned_page_ids(st, "alice", "", before < 0 ? -1 : BASE_MS + before,
                                    page_cases[_i].limit),
                     page_cases[_i].want);
    ck_assert_str_eq(owned_page_ids(st, "bob", "", -1, 3), "h,g,a0");
    ck_assert_str_eq(owned_page_ids(st, "bob", "", BASE_MS + 5, 1), "z,c0");
    ck_assert_str_eq(owned_page_ids(st, "carol", "", -1, 10), "");
    ck_assert_str_eq(page_ids(st, "", BASE_MS + 5, 2), "z,d,c0,c,b");
    store_close(st);
}
END_TEST

/*
 * Every session has an owner: the one it was made with (create, fork,
 * import), "admin" when none was given; every listing gives it, a page and
 * a count can be of one owner's, and a bad owner is refused before anything
 * is stored.
 */
START_TEST(test_owners)
{
    enum { N = 6 };
    static const char *const who[] = {"a1", "alice", "b1", "bob", "n1", "admin"};
    struct store_text texts[N], snap;
    struct rx_buf enc[N], sb;
    struct rx_state s[2], g;
    struct store_list l = {0};
    struct loaded ld = {0};
    char long_owner[STORE_OWNER_MAX + 1], too_long[STORE_OWNER_MAX + 2];
    int64_t n = -1;
    struct qw v[1];

    struct store *st = open_ok(url);
    ck_store_ok(st, store_create_session(st, "a1", "alice", BASE_MS + 1));
    ck_store_ok(st, store_create_session(st, "b1", "bob", BASE_MS + 2));
    ck_store_ok(st, store_create_session(st, "n1", NULL, BASE_MS + 3));
    for (size_t i = 0; i < 6; i += 2)
        expect_owner(st, who[i], who[i + 1]);
    /* 1 to STORE_OWNER_MAX bytes. */
    memset(too_long, 'o', sizeof(too_long) - 1);
    too_long[sizeof(too_long) - 1] = '\0';
    memcpy(long_owner, too_long, STORE_OWNER_MAX); /* the most there may be */
    long_owner[STORE_OWNER_MAX] = '\0';
    ck_assert_int_eq(store_create_session(st, "x", "", BASE_MS), -EINVAL);
    ck_assert_int_eq(store_create_session(st, "x", too_long, BASE_MS), -EINVAL);
    ck_assert_int_eq(store_session_info(st, "x", &(struct store_session_info){0}),
                     -ENOENT);
    ck_store_ok(st, store_create_session(st, "long", long_owner, BASE_MS + 4));
    expect_owner(st, "long", long_owner);
    /* Counts. */
    ck_assert_int_eq(owned(st, "alice"), 1);
    ck_assert_int_eq(owned(st, "admin"), 1);
    ck_assert_int_eq(owned(st, long_owner), 1);
    ck_assert_int_eq(owned(st, "nobody"), 0);
    ck_assert_int_eq(owned(st, NULL), 4);
    ck_assert_int_eq(store_sessions_owned(st, "", &n), -EINVAL);
    ck_assert_int_eq(store_sessions_page(st, "", NULL, 0, -1, 1, &l), -EINVAL);
    ck_assert_uint_eq(l.n, 0);
    /* The list in (created_at, id) order, and the busy set, say whose. */
    ck_store_ok(st, store_list_sessions(st, NULL, 0, &l));
    ck_assert_uint_eq(l.n, 4);
    for (size_t i = 0; i < 3; i++) {
        ck_assert_str_eq(l.v[i].id, who[2 * i]);
        ck_assert_str_eq(l.v[i].owner, who[2 * i + 1]);
    }
    store_list_release(&l);
    qw_init(&v[0], "b1", 1, 0);
    v[0].w.busy = true;
    store_write_queue(st, &v[0].w);
    qw_wait(v, 1);
    ck_assert_int_eq(v[0].err, 0);
    ck_store_ok(st, store_sessions_busy(st, &l));
    ck_assert_uint_eq(l.n, 1);
    ck_assert_str_eq(l.v[0].owner, "bob");
    store_list_release(&l);
    /* A fork and an import belong to whoever made them, not to the source's owner. */
    ck_store_ok(st, store_fork(st, "a1", 0, "fork-b", "bob", BASE_MS + 5));
    ck_store_ok(st, store_fork(st, "a1", 0, "fork-n", NULL, BASE_MS + 6));
    ck_assert_int_eq(store_fork(st, "a1", 0, "fork-x", "", BASE_MS), -EINVAL);
    ck_assert_int_eq(store_fork(st, "a1", 0, "fork-x", too_long, BASE_MS), -EINVAL);
    expect_owner(st, "fork-b", "bob");
    expect_owner(st, "fork-n", "admin");
    gen_log(N, &g, enc, texts, &sb, &snap);
    ck_store_ok(st, store_import(st, "imp-b", "bob", BASE_MS + 7, NULL, texts, N, &snap));
    ck_store_ok(st, store_import(st, "imp-n", NULL, BASE_MS + 8, NULL, texts, N, NULL));
    ck_assert_int_eq(store_import(st, "imp-x", "", BASE_MS, NULL, texts, N, NULL),
                     -EINVAL);
    ck_assert_int_eq(store_session_info(st, "fork-x", &(struct store_session_info){0}),
                     -ENOENT);
    ck_assert_int_eq(store_session_info(st, "imp-x", &(struct store_session_info){0}),
                     -ENOENT);
    expect_owner(st, "imp-b", "bob");
    expect_owner(st, "imp-n", "admin");
    ck_assert_int_eq(owned(st, "bob"), 3);
    ck_assert_int_eq(owned(st, "admin"), 3);
    ck_assert_int_eq(owned(st, NULL), 8);
    /* One owner's page, with and without words, paged with `before`. */
    ck_assert_int_eq(rx_state_init(&s[0]), 0);
    ck_assert_int_eq(rx_state_init(&s[1]), 0);
    say(st, "a1", &s[0], 1, "hello from alice");
    say(st, "n1", &s[1], 1, "hello from admin");
    ck_assert_str_eq(owned_page_ids(st, "bob", "", -1, 10), "imp-b,fork-b,b1");
    ck_assert_str_eq(owned_page_ids(st, "bob", "", BASE_MS + 7, 1), "fork-b");
    ck_assert_str_eq(owned_page_ids(st, "admin", "", -1, 2), "imp-n,fork-n");
    ck_assert_str_eq(owned_page_ids(st, "admin", "", BASE_MS + 6, 2), "n1");
    ck_assert_str_eq(owned_page_ids(st, "alice", "hello", -1, 10), "a1");
    ck_assert_str_eq(owned_page_ids(st, "admin", "hello", -1, 10), "n1");
    ck_assert_str_eq(owned_page_ids(st, "bob", "hello", -1, 10), "");
    ck_assert_str_eq(owned_page_ids(st, NULL, "hello", -1, 10), "n1,a1");
    ck_assert_str_eq(owned_page_ids(st, "admin", "hello", BASE_MS + 4, 10), "n1");
    ck_assert_str_eq(owned_page_ids(st, "admin", "hello", BASE_MS + 3, 10), "");
    ck_assert_str_eq(owned_page_ids(st, "admin", "hel", -1, 1), "n1");
    /* Kept across a restart, and given to store_load's callback. */
    store_close(st);
    st = open_ok(url);
    expect_owner(st, "b1", "bob");
    ck_assert_int_eq(owned(st, "bob"), 3);
    ck_store_ok(st, store_load(st, collect, &ld));
    ck_assert_int_eq(ld.n, 8);
    for (int i = 0; i < ld.n; i++) {
        struct store_session_info info = {0};

        ck_store_ok(st, store_session_info(st, ld.id[i], &info));
        ck_assert_str_eq(ld.owner[i], info.owner);
        store_session_info_release(&info);
    }
    loaded_release(&ld);
    store_close(st);
    release_states(s, 2);
    rx_state_release(&g);
    for (int i = 0; i < N; i++)
        rx_buf_release(&enc[i]);
    rx_buf_release(&sb);
}
END_TEST

/* How many descriptors the process holds now. */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    ck_assert_ptr_nonnull(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

struct load_count {
    int n, refuse_at, fds_first, fds_last;
};

static int count_one(void *ctx, const char *sid, int64_t created_at, const char *title,
                     const char *owner, struct rx_state *state, int64_t seq)
{
    struct load_count *c = ctx;

    (void)sid, (void)created_at, (void)title, (void)owner, (void)seq;
    rx_state_release(state);
    if (++c->n == 1)
        c->fds_first = open_fds();
    c->fds_last = open_fds();
    return c->n == c->refuse_at ? -ENFILE : 0;
}

/*
 * store_load holds no descriptor per session, and a session the callback
 * refuses (the server at its limit) is named in the error, not left blank.
 */
START_TEST(test_load_refused_named)
{
    struct store *st = open_ok(url);
    struct load_count c = {0};
    struct rx_error why = {""};
    char sid[16];

    for (int i = 0; i < 60; i++) {
        snprintf(sid, sizeof(sid), "s%02d", i);
        ck_store_ok(st, store_create_session(st, sid, NULL, BASE_MS + i));
    }
    ck_store_ok(st, store_load(st, count_one, &c));
    ck_assert_int_eq(c.n, 60);
    ck_assert_int_eq(c.fds_last, c.fds_first);
    c = (struct load_count){.refuse_at = 41};
    ck_assert_int_eq(store_load(st, count_one, &c), -ENFILE);
    store_last_error(st, &why);
    ck_assert_msg(strstr(why.text, "'s40'") && strstr(why.text, "41 of 60") &&
                      strstr(why.text, strerror(ENFILE)),
                  "%s", why.text);
    store_close(st);
}
END_TEST

/*
 * A file of schema 3 (no rows) is upgraded at open: every session's row is
 * computed from its log, once, and the busy ones are found without loading.
 */
START_TEST(test_rows_upgrade)
{
    static const char *const ids[] = {"said", "named"};
    struct store *st = open_ok(dbpath);
    struct rx_state s[2], g;
    int64_t n = 0, seq;

    fill_session(st, "script", 23, 10, NULL);
    fill_session(st, "short", 3, 0, NULL);
    new_sessions(st, s, ids, 2);
    say(st, "said", &s[0], 1, "  upgrade my row please");
    say(st, "named", &s[1], 1, "a question");
    ck_store_ok(st, store_set_title(st, "named", "Given"));
    ck_store_ok(st, store_create_session(st, "empty", NULL, BASE_MS));
    store_close(st);
    raw_sql(dbpath, SCHEMA_4_OFF "PRAGMA user_version=3");
    ck_assert_int_eq(raw_count(dbpath,
                               "SELECT count(*) FROM pragma_table_info('sessions')"
                               " WHERE name='messages'"),
                     0);
    st = open_ok(dbpath);
    ck_assert_int_eq(raw_count(dbpath, "PRAGMA user_version"), STORE_SCHEMA_VERSION);
    ck_assert_int_eq(
        raw_count(dbpath, "SELECT count(*) FROM sqlite_master WHERE name='sessions_due'"),
        0);
    for (int i = 0; i < 2; i++) {
        const char *sid = i ? "short" : "script";

        ck_store_ok(st, store_session_load(st, sid, &g, &seq));
        expect_row_of(st, sid, &g);
        rx_state_release(&g);
    }
    expect_row_of(st, "said", &s[0]);
    expect_row(st, "said", 1, rx_effects_any(&s[0]), "upgrade my row please");
    expect_row(st, "named", 1, rx_effects_any(&s[1]), "Given");
    expect_row(st, "empty", 0, false, NULL);
    ck_assert_str_ne(busy_ids(st), "");
    ck_store_ok(st, store_sessions_count(st, &n));
    ck_assert_int_eq(n, 5);
    ck_store_ok(st, store_sessions_owned(st, STORE_OWNER_DEFAULT, &n));
    ck_assert_int_eq(n, 5);
    expect_owner(st, "said", STORE_OWNER_DEFAULT);
    ck_assert_str_eq(page_ids(st, "upgrade", -1, 5), "said");
    /* And it goes on: a write moves the row as any other. */
    say(st, "said", &s[0], 2, "more");
    expect_row_of(st, "said", &s[0]);
    store_close(st);
    /* Once: a second open has nothing to upgrade. */
    st = open_ok(dbpath);
    expect_row_of(st, "said", &s[0]);
    store_close(st);
    release_states(s, 2);
}
END_TEST

/*
 * A file of schema 4 (no owners) is upgraded at open: every session belongs
 * to "admin", with its row, title and log as they were; one owner's page and
 * count are served by the new index; new sessions take their owner.
 */
START_TEST(test_schema_4_upgrades)
{
    static const char *const ids[] = {"said"};
    struct store *st = open_ok(dbpath);
    struct loaded l = {0};
    struct rx_state s[1];
    int64_t n = -1;

    fill_session(st, "script", 12, 5, NULL);
    new_sessions(st, s, ids, 1);
    say(st, "said", &s[0], 1, "who owns me");
    ck_store_ok(st, store_create_session(st, "empty", "bob", BASE_MS));
    store_close(st);
    raw_sql(dbpath, SCHEMA_5_OFF "PRAGMA user_version=4");
    ck_assert_int_eq(raw_count(dbpath,
                               "SELECT count(*) FROM pragma_table_info('sessions')"
                               " WHERE name='owner'"),
                     0);
    st = open_ok(dbpath);
    ck_assert_int_eq(raw_count(dbpath, "PRAGMA user_version"), STORE_SCHEMA_VERSION);
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM sqlite_master"
                                       " WHERE name='sessions_owner'"),
                     1);
    for (size_t i = 0; i < 3; i++)
        expect_owner(st, (const char *[]){"script", "said", "empty"}[i],
                     STORE_OWNER_DEFAULT);
    expect_row(st, "said", 1, rx_effects_any(&s[0]), "who owns me");
    ck_store_ok(st, store_sessions_owned(st, STORE_OWNER_DEFAULT, &n));
    ck_assert_int_eq(n, 3);
    ck_store_ok(st, store_sessions_owned(st, "bob", &n));
    ck_assert_int_eq(n, 0);
    ck_assert_str_eq(owned_page_ids(st, STORE_OWNER_DEFAULT, "owns", -1, 5), "said");
    ck_store_ok(st, store_load(st, collect, &l));
    ck_assert_int_eq(l.n, 3);
    for (int i = 0; i < l.n; i++)
        ck_assert_str_eq(l.owner[i], STORE_OWNER_DEFAULT);
    ck_assert_str_eq(l.id[1], "script");
    ck_assert_int_eq(l.seq[1], 12);
    loaded_release(&l);
    ck_store_ok(st, store_create_session(st, "new", "bob", BASE_MS + 1));
    say(st, "said", &s[0], 2, "still mine");
    store_close(st);
    /* Once: a second open finds schema 5 and changes nothing. */
    st = open_ok(dbpath);
    expect_owner(st, "new", "bob");
    expect_owner(st, "said", STORE_OWNER_DEFAULT);
    ck_assert_str_eq(owned_page_ids(st, "bob", "", -1, 5), "new");
    store_close(st);
    release_states(s, 1);
}
END_TEST

/* A user message of session `sid` as stored text, for writes queued by hand. */
static void message_text(char *out, size_t n, int64_t seq, const char *content)
{
    snprintf(out, n,
             "{\"type\":\"user-send-message\",\"timestamp\":%lld,\"messageId\":\"m%lld\","
             "\"content\":\"%s\"}",
             (long long)(BASE_MS + seq), (long long)seq, content);
}

/* Sessions k0 .. k<n-1>, one message each ("<word> k<i>"), committed together. */
static void many_said(struct store *st, const char *prefix, int n, const char *word)
{
    struct qw *v = calloc((size_t)n, sizeof(*v));
    char(*sids)[16] = calloc((size_t)n, sizeof(*sids));
    char content[64];

    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(sids);
    for (int i = 0; i < n; i++) {
        snprintf(sids[i], sizeof(sids[i]), "%s%d", prefix, i);
        ck_store_ok(st, store_create_session(st, sids[i], NULL, BASE_MS));
    }
    for (int i = 0; i < n; i++) {
        qw_init(&v[i], sids[i], 1, 0);
        snprintf(content, sizeof(content), "%s %s", word, sids[i]);
        message_text(v[i].text, sizeof(v[i].text), 1, content);
        v[i].w.input_len = strlen(v[i].text);
        store_write_queue(st, &v[i].w);
    }
    qw_wait(v, (size_t)n);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(v[i].err, 0);
    free(v);
    free(sids);
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/*
 * SPEC 6.2: a search finds every session whose input was acknowledged
 * before it began, even when thousands of ranges an older version left
 * unindexed wait (the old catch-up stopped after 4 096 of them), and the
 * inputs written just before it too.
 */
START_TEST(test_search_complete)
{
    enum { OLD = 6000, FRESH = 300 };
    struct store *st = open_ok(dbpath);
    struct store_list l = {0};
    const char *words[1] = {"giraffe"};
    double t0;
    json_t *ids = NULL;

    ck_store_ok(st, store_set_durable(st, false));
    many_said(st, "k", OLD, "giraffe");
    store_close(st);
    /* What a version that indexed only when idle left: one range a session. */
    raw_sql(dbpath, "DELETE FROM search_docs; INSERT INTO search_pending SELECT"
                    " session_id, min(seq), max(seq) FROM inputs GROUP BY session_id");
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM search_pending"), OLD);
    st = open_ok(dbpath);
    ck_store_ok(st, store_set_durable(st, false));
    many_said(st, "n", FRESH, "giraffe");
    t0 = now_ms();
    ck_store_ok(st, store_search(st, words, 1, &ids));
    fprintf(stderr, "check_store: a search over %d pending ranges took %.1f ms\n", OLD,
            now_ms() - t0);
    ck_assert_uint_eq(json_array_size(ids), OLD + FRESH);
    json_decref(ids);
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM search_pending"), 0);
    /* Written just before: found at once, by a search and by a page. */
    many_said(st, "z", 50, "zebra");
    t0 = now_ms();
    ck_store_ok(
        st, store_sessions_page(st, NULL, (const char *[]){"zebra"}, 1, -1, 1000, &l));
    fprintf(stderr, "check_store: a page of 50 among %d sessions took %.1f ms\n",
            OLD + FRESH + 50, now_ms() - t0);
    ck_assert_uint_eq(l.n, 50);
    store_list_release(&l);
    store_close(st);
}
END_TEST

/*
 * PostgreSQL: a schema 1 database (no rows) is upgraded at open, each
 * session's row computed from its log, and the busy ones found.
 */
START_TEST(test_pg_rows_upgrade)
{
    static const char *const ids[] = {"said"};
    struct store *st = open_ok(url);
    struct rx_state s[1], g;
    int64_t seq;

    fill_session(st, "script", 23, 10, NULL);
    new_sessions(st, s, ids, 1);
    say(st, "said", &s[0], 1, "upgrade my row");
    ck_store_ok(st, store_create_session(st, "empty", NULL, BASE_MS));
    store_close(st);
    sql_ok("DROP INDEX sessions_page; DROP INDEX sessions_busy;"
           " ALTER TABLE sessions DROP COLUMN messages, DROP COLUMN busy,"
           " DROP COLUMN auto_title, DROP COLUMN owner;"
           " CREATE INDEX sessions_updated ON sessions(updated_at);"
           " UPDATE rx_meta SET v = 1 WHERE k = 'version'");
    st = open_ok(url);
    ck_assert_int_eq(pg_count("SELECT v FROM rx_meta WHERE k = 'version'"), 4);
    ck_assert_int_eq(pg_count("SELECT count(*) FROM sessions_due"), 0);
    ck_store_ok(st, store_session_load(st, "script", &g, &seq));
    expect_row_of(st, "script", &g);
    rx_state_release(&g);
    expect_row(st, "said", 1, rx_effects_any(&s[0]), "upgrade my row");
    expect_row(st, "empty", 0, false, NULL);
    ck_assert_str_eq(page_ids(st, "", -1, 1), "empty");
    expect_owner(st, "script", STORE_OWNER_DEFAULT);
    ck_assert_str_eq(owned_page_ids(st, STORE_OWNER_DEFAULT, "", -1, 1), "empty");
    store_close(st);
    release_states(s, 1);
}
END_TEST

/*
 * PostgreSQL: a schema 2 database (no owners) is upgraded at open: its
 * sessions belong to "admin", the index serves one owner's page, and new
 * sessions take the owner they are given.
 */
START_TEST(test_pg_owner_upgrade)
{
    struct store *st = open_ok(url);
    int64_t n = -1;

    fill_session(st, "old", 5, 0, NULL);
    ck_store_ok(st, store_create_session(st, "empty", "bob", BASE_MS));
    store_close(st);
    sql_ok("ALTER TABLE sessions DROP COLUMN owner;"
           " UPDATE rx_meta SET v = 2 WHERE k = 'version'");
    ck_assert_int_eq(
        pg_count("SELECT count(*) FROM pg_indexes"
                 " WHERE indexname = 'sessions_owner' AND schemaname = current_schema()"),
        0);
    st = open_ok(url);
    ck_assert_int_eq(pg_count("SELECT v FROM rx_meta WHERE k = 'version'"), 4);
    ck_assert_int_eq(
        pg_count("SELECT count(*) FROM pg_indexes"
                 " WHERE indexname = 'sessions_owner' AND schemaname = current_schema()"),
        1);
    expect_owner(st, "old", STORE_OWNER_DEFAULT);
    expect_owner(st, "empty", STORE_OWNER_DEFAULT);
    expect_row(st, "empty", 0, false, NULL);
    ck_store_ok(st, store_sessions_owned(st, STORE_OWNER_DEFAULT, &n));
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(owned_page_ids(st, STORE_OWNER_DEFAULT, "", -1, 1), "empty");
    ck_store_ok(st, store_create_session(st, "new", "bob", BASE_MS + 1));
    expect_owner(st, "new", "bob");
    store_close(st);
    /* Once: the next open finds version 3. */
    st = open_ok(url);
    expect_owner(st, "new", "bob");
    store_close(st);
}
END_TEST

/*
 * PostgreSQL: the cluster's scan reads a node's own sessions by the owners
 * index, made with the schema and, when a database from before lacks it,
 * at the next open (bench/scale_pg.sh: without it every scan read every
 * owners row).
 */
START_TEST(test_pg_owners_index)
{
    static const char *const exists =
        "SELECT count(*) FROM pg_indexes WHERE indexname = 'owners_node'"
        " AND schemaname = current_schema()";
    struct store *st = open_ok(url);
    bool indexed = false;
    PGresult *r;

    store_close(st);
    ck_assert_int_eq(pg_count(exists), 1);
    sql_ok("DROP INDEX owners_node");
    ck_assert_int_eq(pg_count(exists), 0);
    st = open_ok(url);
    ck_assert_int_eq(pg_count(exists), 1);
    store_close(st);
    /* The scan's query uses it (a table this small would be read whole). */
    sql_ok("SET enable_seqscan = off");
    r = PQexec(raw, "EXPLAIN SELECT session_id FROM owners WHERE node = 'n'");
    ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    for (int i = 0; i < PQntuples(r); i++)
        indexed = indexed || strstr(PQgetvalue(r, i, 0), "owners_node");
    ck_assert_msg(indexed, "plan: %s", PQntuples(r) ? PQgetvalue(r, 0, 0) : "(none)");
    PQclear(r);
    sql_ok("RESET enable_seqscan");
}
END_TEST

/* ---- streamed text (SPEC 3.7) ------------------------------------------------ */

/* A batch of message mid's streamed text at `off`, as write `q`. */
static void qw_text(struct qw *q, const char *sid, const char *mid, int64_t off,
                    const char *text)
{
    memset(q, 0, sizeof(*q));
    snprintf(q->text, sizeof(q->text), "%s", text);
    q->w.sid = sid;
    q->w.message_id = mid;
    q->w.text_offset = off;
    q->w.input = q->text;
    q->w.input_len = strlen(q->text);
    q->w.done = qw_done;
}

/* The streamed text kept of (sid, mid), NUL-terminated (malloc'd). */
static char *kept_text(struct store *st, const char *sid, const char *mid)
{
    struct rx_buf b;
    char *t;

    rx_buf_init(&b, 1u << 20);
    ck_store_ok(st, store_stream_text(st, sid, mid, &b));
    t = strndup(b.data ? b.data : "", b.len);
    rx_buf_release(&b);
    return t;
}

static void kept_is(struct store *st, const char *sid, const char *mid, const char *want)
{
    char *t = kept_text(st, sid, mid);

    ck_assert_str_eq(t, want);
    free(t);
}

START_TEST(test_stream_text)
{
    struct qw v[8];
    struct store *st = open_ok(url);
    int64_t batches, bytes;

    fill_session(st, "s1", 3, 0, NULL);
    fill_session(st, "s2", 1, 0, NULL);
    kept_is(st, "s1", "m1", "");
    /* Batches of two answers, a session gone, an answer streamed again. */
    qw_text(&v[0], "s1", "m1", 0, "Hello, ");
    qw_text(&v[1], "s1", "m2", 0, "other");
    qw_text(&v[2], "s1", "m1", 7, "world");
    qw_text(&v[3], "nosuch", "m1", 0, "lost");
    qw_text(&v[4], "s2", "m1", 0, "s2's");
    for (int i = 0; i < 5; i++)
        store_write_queue(st, &v[i].w);
    qw_wait(v, 5);
    ck_assert_int_eq(v[0].err, 0);
    ck_assert_int_eq(v[2].err, 0);
    ck_assert_int_eq(v[3].err, -ENOENT);
    kept_is(st, "s1", "m1", "Hello, world");
    kept_is(st, "s1", "m2", "other");
    kept_is(st, "s2", "m1", "s2's");
    kept_is(st, "nosuch", "m1", "");
    ck_assert_int_eq(
        be->count("SELECT count(*) FROM stream_text WHERE session_id = 'nosuch'"), 0);
    /* The same batch again replaces itself; one past a gap is not read. */
    qw_text(&v[0], "s1", "m1", 0, "Hello, ");
    qw_text(&v[1], "s1", "m1", 40, "after a gap");
    store_write_queue(st, &v[0].w);
    store_write_queue(st, &v[1].w);
    qw_wait(v, 2);
    ck_assert_int_eq(v[0].err + v[1].err, 0);
    kept_is(st, "s1", "m1", "Hello, world");
    /* A fork copies none; the input that ends m1 removes its batches with it. */
    ck_store_ok(st, store_fork(st, "s1", 3, "f1", NULL, BASE_MS + 5));
    ck_assert_int_eq(
        be->count("SELECT count(*) FROM stream_text WHERE session_id = 'f1'"), 0);
    qw_text(&v[0], "s1", "m1", 12, "!");
    qw_init(&v[1], "s1", 4, 3);
    v[1].w.stream_done = "m1";
    store_write_queue(st, &v[0].w);
    store_write_queue(st, &v[1].w);
    qw_wait(v, 2);
    ck_assert_int_eq(v[0].err, 0);
    ck_assert_int_eq(v[1].err, 0);
    kept_is(st, "s1", "m1", "");
    kept_is(st, "s1", "m2", "other");
    ck_assert_int_eq(be->count("SELECT count(*) FROM stream_text WHERE session_id = 's1'"
                               " AND message_id = 'm1'"),
                     0);
    /* A refused input removes nothing; "" ends every answer of the session. */
    qw_init(&v[0], "s2", 7, 3);
    v[0].w.stream_done = "";
    store_write_queue(st, &v[0].w);
    qw_wait(v, 1);
    ck_assert_int_eq(v[0].err, -EINVAL);
    kept_is(st, "s2", "m1", "s2's");
    qw_init(&v[0], "s1", 5, 4);
    v[0].w.stream_done = "";
    store_write_queue(st, &v[0].w);
    qw_wait(v, 1);
    ck_assert_int_eq(v[0].err, 0);
    kept_is(st, "s1", "m2", "");
    /* A session's batches go with it. */
    ck_store_ok(st, store_delete_session(st, "s2"));
    ck_assert_int_eq(be->count("SELECT count(*) FROM stream_text"), 0);
    store_stream_counts(st, &batches, &bytes);
    ck_assert_int_eq(batches, 8);
    ck_assert_int_eq(bytes, 7 + 5 + 5 + 4 + 4 + 7 + 11 + 1);
    store_close(st);
    /* Kept across a reopen (the log is all there is after kill -9). */
    st = open_ok(url);
    kept_is(st, "s1", "m1", "");
    store_close(st);
}
END_TEST

/* Both backends run these, through the same store.h. */
static void add_shared(TCase *tc)
{
    const TTest *const shared[] = {
        test_round_trip,
        test_append_errors,
        test_snapshot_bounds_replay,
        test_history,
        test_state_at,
        test_fork,
        test_titles,
        test_import,
        test_gc,
        test_threads,
        test_log,
        test_batch_verdicts,
        test_list_pages,
        test_sessions_page_words,
        test_sessions_busy_count,
        test_rows_import_fork,
        test_owners,
        test_load_refused_named,
        test_stream_text,
    };

    for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++)
        tcase_add_test(tc, shared[i]);
    tcase_add_loop_test(tc, test_rows_written, 0,
                        sizeof(rows_cases) / sizeof(rows_cases[0]));
    tcase_add_loop_test(tc, test_sessions_page, 0,
                        sizeof(page_cases) / sizeof(page_cases[0]));
    tcase_add_loop_test(tc, test_sessions_page_owned, 0,
                        sizeof(page_cases) / sizeof(page_cases[0]));
}

/* The records' tests (at the end of the file), on both backends. */
static void add_records(TCase *tc);

Suite *store_suite(void);

Suite *store_suite(void)
{
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("log");
    TCase *files = tcase_create("files");
    TCase *more = tcase_create("retention");
    TCase *health = tcase_create("health");
    TCase *group = tcase_create("group");
    TCase *pg;

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_checked_fixture(files, setup, teardown);
    tcase_add_checked_fixture(more, setup, teardown);
    tcase_add_checked_fixture(health, setup, teardown);
    tcase_set_timeout(health, 60);
    tcase_set_timeout(tc, 60);
    tcase_set_timeout(files, 60);
    tcase_set_timeout(more, 60);
    add_shared(tc);
    add_records(tc);
    tcase_add_test(tc, test_memory_and_session_load);
    tcase_add_test(tc, test_search_index);
    tcase_add_test(tc, test_index_follows_the_log);
    tcase_add_test(tc, test_index_mark_after_delete);
    tcase_add_test(tc, test_index_deferred);
    tcase_add_test(tc, test_index_when_idle);
    tcase_add_test(files, test_newer_schema);
    tcase_add_test(files, test_schema_1_upgrades);
    tcase_add_test(files, test_foreign_database);
    tcase_add_test(files, test_garbage_file);
    tcase_add_test(files, test_corrupt_pages);
    tcase_add_test(files, test_corrupt_pages_checked_later);
    tcase_add_test(files, test_unusable_directory);
    tcase_add_test(files, test_in_use);
    tcase_add_test(files, test_schema_2_upgrades);
    tcase_add_test(files, test_rows_upgrade);
    tcase_add_test(files, test_schema_4_upgrades);
    tcase_add_test(more, test_growth_is_linear);
    tcase_add_test(more, test_search_complete);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, files);
    tcase_add_test(health, test_quota_full);
    tcase_add_test(health, test_file_removed);
    tcase_add_test(health, test_file_replaced);
    suite_add_tcase(s, more);
    suite_add_tcase(s, health);
    tcase_add_checked_fixture(group, setup, teardown);
    tcase_set_timeout(group, 60);
    tcase_add_test(group, test_group_one_commit);
    tcase_add_test(group, test_group_refused_alone);
    tcase_add_test(group, test_group_full_alone);
    tcase_add_test(group, test_recent_merge);
    tcase_add_test(group, test_pipeline_batches);
    tcase_add_test(group, test_pipeline_failed_batch_restores);
    suite_add_tcase(s, group);
    /* PostgreSQL: the shared tests and its own, when a database is given. */
    if (!getenv("RX_PG_URL") || !*getenv("RX_PG_URL")) {
        fprintf(stderr, "check_store: the PostgreSQL case is skipped: RX_PG_URL is not "
                        "set; make pgstore-test starts a PostgreSQL\n");
        return s;
    }
    /* Made only now: a case never added to the suite would leak. */
    pg = tcase_create("pg");
    tcase_add_checked_fixture(pg, pg_setup, pg_teardown);
    tcase_set_timeout(pg, 60);
    add_shared(pg);
    add_records(pg);
    tcase_add_test(pg, test_schema);
    tcase_add_test(pg, test_batch_unique_violation);
    tcase_add_test(pg, test_fencing);
    tcase_add_test(pg, test_notify);
    tcase_add_test(pg, test_connection_loss);
    tcase_add_test(pg, test_pg_rows_upgrade);
    tcase_add_test(pg, test_pg_owner_upgrade);
    tcase_add_test(pg, test_pg_owners_index);
    suite_add_tcase(s, pg);
    return s;
}

/* ---- records (store_record_*): both backends ---------------------------------- */

/* One step of the records script: an operation and what it must give. */
struct record_row {
    char op; /* 'p'ut, 'g'et, 'd'elete */
    const char *kind, *key, *sid, *text;
    int err;
    const char *want_sid; /* 'g': the session read back (NULL: none) */
};

static const struct record_row record_rows[] = {
    {'p', "oai.fp", "k1", "rec-a", "{\"v\":1}", 0, NULL},
    {'g', "oai.fp", "k1", NULL, "{\"v\":1}", 0, "rec-a"},
    /* Overwritten, and moved to another session. */
    {'p', "oai.fp", "k1", "rec-b", "{\"v\":2}", 0, NULL},
    {'g', "oai.fp", "k1", NULL, "{\"v\":2}", 0, "rec-b"},
    /* Same key, other kind: another record. */
    {'p', "lg.thread", "k1", "rec-a", "{}", 0, NULL},
    {'g', "lg.thread", "k1", NULL, "{}", 0, "rec-a"},
    {'g', "oai.fp", "k1", NULL, "{\"v\":2}", 0, "rec-b"},
    /* Belonging to no session; empty text. */
    {'p', "free", "k", NULL, "", 0, NULL},
    {'g', "free", "k", NULL, "", 0, NULL},
    /* No such session: nothing stored. */
    {'p', "oai.fp", "k2", "rec-none", "{}", -ENOENT, NULL},
    {'g', "oai.fp", "k2", NULL, NULL, -ENOENT, NULL},
    /* Names out of bounds. */
    {'p', "", "k", NULL, "{}", -EINVAL, NULL},
    {'p', "oai.fp", "", NULL, "{}", -EINVAL, NULL},
    {'p', "a-kind-name-longer-than-32-bytes!", "k", NULL, "{}", -EINVAL, NULL},
    {'g', "oai.fp", "", NULL, NULL, -EINVAL, NULL},
    {'d', "oai.fp", "k9", NULL, NULL, -ENOENT, NULL},
    {'d', "free", "k", NULL, NULL, 0, NULL},
    {'g', "free", "k", NULL, NULL, -ENOENT, NULL},
    {'d', "free", "k", NULL, NULL, -ENOENT, NULL},
};

static void record_step(struct store *st, const struct record_row *r, size_t i)
{
    struct store_record got = {0};
    int err;

    switch (r->op) {
    case 'p':
        err = store_record_put(st, r->kind, r->key, r->sid, r->text, strlen(r->text));
        break;
    case 'd':
        err = store_record_delete(st, r->kind, r->key);
        break;
    default:
        err = store_record_get(st, r->kind, r->key, &got);
        if (!err) {
            ck_assert_str_eq(got.key, r->key);
            ck_assert_str_eq(got.text, r->text);
            ck_assert_uint_eq(got.len, strlen(r->text));
            if (r->want_sid)
                ck_assert_str_eq(got.sid, r->want_sid);
            else
                ck_assert_ptr_null(got.sid);
            store_record_release(&got);
        }
    }
    ck_assert_msg(err == r->err, "row %zu (%c %s/%s): %d, want %d", i, r->op, r->kind,
                  r->key, err, r->err);
}

START_TEST(test_records)
{
    struct store *st = open_ok(url);
    struct store_record got = {0};

    ck_store_ok(st, store_create_session(st, "rec-a", NULL, BASE_MS));
    ck_store_ok(st, store_create_session(st, "rec-b", NULL, BASE_MS));
    for (size_t i = 0; i < sizeof(record_rows) / sizeof(record_rows[0]); i++)
        record_step(st, &record_rows[i], i);
    /* Committed: a store opened anew (a restart, another node) reads them. */
    store_close(st);
    st = open_ok(url);
    ck_store_ok(st, store_record_get(st, "oai.fp", "k1", &got));
    ck_assert_str_eq(got.text, "{\"v\":2}");
    store_record_release(&got);
    store_close(st);
}
END_TEST

/* The keys listed, comma-separated, one page after `after` of at most `limit`. */
static void records_page(struct store *st, const char *kind, const char *sid,
                         const char *after, size_t limit, const char *want)
{
    struct store_records l = {0};
    char got[256] = "";

    ck_store_ok(st, store_record_list(st, kind, sid, after, limit, &l));
    for (size_t i = 0; i < l.n; i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", i ? "," : "",
                 l.v[i].key);
    ck_assert_msg(!strcmp(got, want), "page after '%s': '%s', want '%s'",
                  after ? after : "", got, want);
    store_records_release(&l);
    ck_assert_uint_eq(l.n, 0);
}

/* The pages of a listing, in key order (bytewise), by session or of a whole kind. */
static const struct {
    const char *sid, *after;
    size_t limit;
    const char *want;
} record_pages[] = {
    {"rec-a", NULL, 2, "r/0,r/1"},
    {"rec-a", "r/1", 2, "r/3,r/B"},
    {"rec-a", "r/B", 2, "r/a"},
    {"rec-a", "r/a", 2, ""},
    {"rec-a", NULL, 0, "r/0,r/1,r/3,r/B,r/a"},
    {"rec-b", NULL, 0, "r/2"},
    {NULL, NULL, 3, "r/0,r/1,r/2"},
    {NULL, "r/2", 0, "r/3,r/B,r/a"},
};

START_TEST(test_records_list)
{
    struct store *st = open_ok(url);
    const char *keys[] = {"r/a", "r/0", "r/B", "r/3", "r/1"};

    ck_store_ok(st, store_create_session(st, "rec-a", NULL, BASE_MS));
    ck_store_ok(st, store_create_session(st, "rec-b", NULL, BASE_MS));
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        ck_store_ok(st, store_record_put(st, "run", keys[i], "rec-a", "{}", 2));
    ck_store_ok(st, store_record_put(st, "run", "r/2", "rec-b", "{}", 2));
    ck_store_ok(st, store_record_put(st, "other", "r/5", "rec-a", "{}", 2));
    for (size_t i = 0; i < sizeof(record_pages) / sizeof(record_pages[0]); i++)
        records_page(st, "run", record_pages[i].sid, record_pages[i].after,
                     record_pages[i].limit, record_pages[i].want);
    records_page(st, "none", NULL, NULL, 0, "");
    store_close(st);
}
END_TEST

/* A session's records go with it: deleted, or removed by retention. */
START_TEST(test_records_go_with_session)
{
    struct store *st = open_ok(url);
    struct store_record got = {0};
    int sessions = 0;

    ck_store_ok(st, store_create_session(st, "rec-a", NULL, BASE_MS + 1000));
    ck_store_ok(st, store_create_session(st, "rec-old", NULL, BASE_MS - 1000));
    ck_store_ok(st, store_create_session(st, "rec-keep", NULL, BASE_MS + 1000));
    ck_store_ok(st, store_record_put(st, "k", "a1", "rec-a", "1", 1));
    ck_store_ok(st, store_record_put(st, "k", "a2", "rec-a", "2", 1));
    ck_store_ok(st, store_record_put(st, "k", "old", "rec-old", "3", 1));
    ck_store_ok(st, store_record_put(st, "k", "keep", "rec-keep", "4", 1));
    ck_store_ok(st, store_record_put(st, "k", "none", NULL, "5", 1));
    ck_store_ok(st, store_delete_session(st, "rec-a"));
    ck_assert_int_eq(store_record_get(st, "k", "a1", &got), -ENOENT);
    ck_assert_int_eq(store_record_get(st, "k", "a2", &got), -ENOENT);
    ck_store_ok(st, store_gc(st, BASE_MS, &sessions, NULL));
    ck_assert_int_eq(sessions, 1);
    ck_assert_int_eq(store_record_get(st, "k", "old", &got), -ENOENT);
    records_page(st, "k", NULL, NULL, 0, "keep,none");
    ck_assert_int_eq(be->count("SELECT count(*) FROM records"), 2);
    /* A session created again under a deleted id starts with none. */
    ck_store_ok(st, store_create_session(st, "rec-a", NULL, BASE_MS + 2000));
    records_page(st, "k", "rec-a", NULL, 0, "");
    store_close(st);
}
END_TEST

/* The records' tests, beside the shared ones on both backends. */
static void add_records(TCase *tc)
{
    tcase_add_test(tc, test_records);
    tcase_add_test(tc, test_records_list);
    tcase_add_test(tc, test_records_go_with_session);
}
