/*
 * check_store - the SQLite input log (server/store): what is appended loads
 * back as the same fold, byte for byte; snapshots bound replay; history,
 * state-at-seq and fork agree with the fold; a newer schema, a foreign or
 * corrupt file, an unusable directory and a file in use fail with one line
 * naming the file; retention removes only what is older than the limit.
 *
 * Every test works in its own temporary directory under /tmp (checked
 * fixture), removed afterwards. The inputs come from gen_input(): a scripted
 * conversation with tool calls and results, errors, streamed answers, cancels
 * with partial text and history compression, all of which the machine accepts.
 */
#include "tests/unit/helper_sm.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "server/store.h"

#define BASE_MS 1700000000000LL

/* The call must return 0; otherwise fail with the store's own sentence. */
#define ck_store_ok(st, call)                                                            \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        struct rx_error err_ = {""};                                                     \
                                                                                         \
        if (rc_)                                                                         \
            store_last_error(st, &err_);                                                 \
        ck_assert_msg(rc_ == 0, "%s: %d (%s)", #call, rc_, err_.text);                   \
    } while (0)

static char tmpdir[64];
static char dbpath[128];

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rx-store-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    snprintf(dbpath, sizeof(dbpath), "%s/reflexor.db", tmpdir);
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

/*
 * Input number i (0-based) of the scripted conversation: rounds of six, each a
 * user question, a tool call, its result or error, an answer started, then
 * completed or cancelled mid-way, then a plain message or a compression.
 * NEW reference.
 */
static json_t *gen_input(int i)
{
    int r = i / 6, k = i % 6;
    long long ts = BASE_MS + 10LL * i, t0 = BASE_MS + 60LL * r;
    char id[32], cid[32], aid[32], text[64], params[64];
    json_t *j = NULL;

    snprintf(id, sizeof(id), "u%d", r);
    snprintf(cid, sizeof(cid), "c%d", r);
    snprintf(aid, sizeof(aid), "a%d", r);
    switch (k) {
    case 0:
        snprintf(text, sizeof(text), "what is %d+1? \xc3\xbc \"q\"", r);
        j = json_pack("{s:s, s:I, s:s, s:s}", "type", "user-send-message", "timestamp",
                      ts, "messageId", id, "content", text);
        break;
    case 1:
        snprintf(params, sizeof(params), "{\"expression\":\"%d+1\"}", r);
        j = json_pack("{s:s, s:I, s:I, s:{s:{s:s, s:s}}}", "type", "brain-call-tools",
                      "timestamp", ts, "calledBrainAt", t0, "toolCalls", cid, "name",
                      "calculator", "parameters", params);
        break;
    case 2:
        snprintf(text, sizeof(text), "%d", r + 1);
        j = json_pack("{s:s, s:I, s:s, s:s}", "type",
                      r % 3 ? "toolkit-respond" : "toolkit-error", "timestamp", ts,
                      "toolCallId", cid, r % 3 ? "result" : "error", text);
        break;
    case 3:
        j = json_pack("{s:s, s:I, s:I, s:s}", "type", "brain-send-message-start",
                      "timestamp", ts, "calledBrainAt", ts - 10, "messageId", aid);
        break;
    case 4:
        if (r % 4 == 3) {
            j = json_pack("{s:s, s:I, s:{s:s}}", "type", "user-cancel", "timestamp", ts,
                          "partialContents", aid, "it is");
        } else {
            snprintf(text, sizeof(text), "it is %d", r + 1);
            j = json_pack("{s:s, s:I, s:I, s:s, s:s}", "type",
                          "brain-send-message-complete", "timestamp", ts, "calledBrainAt",
                          ts - 20, "messageId", aid, "content", text);
        }
        break;
    default:
        if (r % 5 == 4) {
            snprintf(text, sizeof(text), "summary up to round %d", r);
            j = json_pack("{s:s, s:I, s:I, s:s, s:I}", "type", "brain-compress-history",
                          "timestamp", ts, "calledBrainAt", ts, "summary", text, "cutAt",
                          t0);
        } else {
            snprintf(id, sizeof(id), "u%db", r);
            j = json_pack("{s:s, s:I, s:s, s:s}", "type", "user-send-message",
                          "timestamp", ts, "messageId", id, "content", "thanks");
        }
    }
    ck_assert_ptr_nonnull(j);
    return j;
}

static void gen_parse(int i, struct rx_input *in)
{
    json_t *j = gen_input(i);
    const char *field = NULL;
    struct rx_error err = {""};

    ck_assert_msg(rx_input_parse(j, in, &field, &err) == 0, "input %d: %s", i, err.text);
    json_decref(j);
}

/*
 * A session of `n` inputs, appended to the store one by one as a server would:
 * apply, then append with the state after. `prefix`, when not NULL, gets the
 * encoding of the fold after every prefix (prefix[k] = state after k inputs).
 */
static void fill_session(struct store *st, const char *sid, int n, int snapshot_every,
                         char **prefix)
{
    struct rx_state s;

    ck_assert_int_eq(store_create_session(st, sid, BASE_MS - 1), 0);
    ck_assert_int_eq(rx_state_init(&s), 0);
    if (prefix)
        prefix[0] = state_bytes(&s);
    for (int i = 0; i < n; i++) {
        struct rx_input in;
        struct rx_outcome out;

        gen_parse(i, &in);
        ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
        ck_assert_msg(out.verdict == RX_ACCEPTED, "input %d: %s", i,
                      rx_reason_name(out.reason));
        ck_store_ok(st, store_append(st, sid, i + 1, &in, &s, snapshot_every));
        rx_input_release(&in);
        if (prefix)
            prefix[i + 1] = state_bytes(&s);
    }
    rx_state_release(&s);
}

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
    return st;
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

/* What store_load hands over: ids, seqs and encoded states, in order. */
struct loaded {
    int n;
    char id[8][32];
    int64_t created_at[8];
    int64_t seq[8];
    char *state[8];
};

static int collect(void *ctx, const char *sid, int64_t created_at, struct rx_state *state,
                   int64_t seq)
{
    struct loaded *l = ctx;

    ck_assert_int_lt(l->n, 8);
    ck_assert(rx_state_check_invariants(state));
    snprintf(l->id[l->n], sizeof(l->id[0]), "%s", sid);
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
    struct store *st = open_ok(dbpath);
    struct loaded l = {0};
    char *want1 = fold_bytes(47), *want2 = fold_bytes(5), *want0 = fold_bytes(0);

    fill_session(st, "s1", 47, 0, NULL);
    fill_session(st, "s2", 5, 0, NULL);
    ck_assert_int_eq(store_create_session(st, "s3", BASE_MS), 0);
    store_close(st);

    st = open_ok(dbpath);
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
    /* WAL mode, and the close checkpointed the log into the file. */
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM inputs"), 52);
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
    struct store *st = open_ok(dbpath);
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

    ck_assert_int_eq(store_create_session(st, "s", 1), -EEXIST);
    ck_assert_int_eq(store_delete_session(st, "ghost"), -ENOENT);
    ck_assert_int_eq(store_delete_session(st, "s"), 0);
    ck_assert_int_eq(store_history(st, "s", 0, 0, &h), -ENOENT);
    ck_assert_int_eq(store_set_durable(st, false), 0);
    ck_assert_int_eq(store_set_durable(st, true), 0);
    store_close(st);
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM inputs"), 0);
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM sessions"), 0);
}
END_TEST

/* ---- snapshots --------------------------------------------------------------- */

START_TEST(test_snapshot_bounds_replay)
{
    struct store *st = open_ok(dbpath);
    struct loaded l = {0};
    char *want = fold_bytes(35);
    struct rx_error e;
    const char *err = e.text;

    fill_session(st, "s", 35, 10, NULL);
    store_close(st);
    /* Only the newest snapshot is kept. */
    ck_assert_int_eq(raw_count(dbpath, "SELECT count(*) FROM snapshots"), 1);
    ck_assert_int_eq(raw_count(dbpath, "SELECT seq FROM snapshots"), 30);

    /* Replay starts at the snapshot: a damaged input before it is never read. */
    raw_sql(dbpath, "UPDATE inputs SET input='garbage' WHERE seq=7");
    st = open_ok(dbpath);
    ck_store_ok(st, store_load(st, collect, &l));
    ck_assert_int_eq(l.n, 1);
    ck_assert_int_eq(l.seq[0], 35);
    ck_assert_str_eq(l.state[0], want);
    loaded_release(&l);
    store_close(st);

    /* One after it is, and the error names the session and the seq. */
    raw_sql(dbpath, "UPDATE inputs SET input=(SELECT input FROM inputs WHERE seq=31)"
                    " WHERE seq=33");
    st = open_ok(dbpath);
    ck_assert_int_eq(store_load(st, collect, &l), -EPROTO);
    ck_assert_int_eq(l.n, 0);
    store_last_error(st, &e);
    ck_assert_msg(strstr(err, "session 's': input 33 does not fold"), "%s", err);
    store_close(st);

    raw_sql(dbpath, "UPDATE inputs SET input='{\"type\":\"nope\"}' WHERE seq=33");
    st = open_ok(dbpath);
    ck_assert_int_eq(store_load(st, collect, &l), -EPROTO);
    store_last_error(st, &e);
    ck_assert_msg(strstr(err, "session 's': input 33 is invalid"), "%s", err);
    store_close(st);

    raw_sql(dbpath, "DELETE FROM inputs WHERE seq=33");
    st = open_ok(dbpath);
    ck_assert_int_eq(store_load(st, collect, &l), -EPROTO);
    store_last_error(st, &e);
    ck_assert_msg(strstr(err, "session 's': input 33 is missing"), "%s", err);
    store_close(st);

    raw_sql(dbpath, "UPDATE snapshots SET state='{\"updatedAt\":\"x\"}'");
    st = open_ok(dbpath);
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
    struct store *st = open_ok(dbpath);
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
    struct store *st = open_ok(dbpath);
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
    struct store *st = open_ok(dbpath);
    char *prefix[N + 1], *got;
    struct rx_state s;
    struct rx_input in;
    struct rx_outcome out;
    struct loaded l = {0};
    int64_t seq;
    json_t *h;

    fill_session(st, "s", N, 10, prefix);
    /* At 12 (before the snapshot) and at 23 (after it: the snapshot comes along). */
    ck_assert_int_eq(store_fork(st, "s", 12, "f12", BASE_MS + 5), 0);
    ck_assert_int_eq(store_fork(st, "s", 23, "f23", BASE_MS + 6), 0);
    ck_assert_int_eq(store_fork(st, "s", 0, "f0", BASE_MS + 7), 0);
    ck_assert_int_eq(store_fork(st, "s", N + 1, "bad", 1), -ERANGE);
    ck_assert_int_eq(store_fork(st, "s", 3, "f12", 1), -EEXIST);
    ck_assert_int_eq(store_fork(st, "ghost", 0, "f", 1), -ENOENT);

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

    st = open_ok(dbpath);
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
    ck_assert_int_eq(
        raw_count(dbpath, "SELECT seq FROM snapshots WHERE session_id='f23'"), 20);
    free_prefix(prefix, N);
}
END_TEST

/* ---- files that must be refused ------------------------------------------------ */

START_TEST(test_newer_schema)
{
    store_close(open_ok(dbpath));
    raw_sql(dbpath, "PRAGMA user_version=2");
    open_fails(dbpath, "schema version 2 is newer than this reflexor supports (1)");
    raw_sql(dbpath, "PRAGMA user_version=0");
    open_fails(dbpath, "unknown schema version 0");
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
    struct store *st = open_ok(dbpath);
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
    ck_assert_int_eq(store_create_session(st, "empty-old", BASE_MS - 5), 0);
    ck_assert_int_eq(store_create_session(st, "fresh", BASE_MS + 200000), 0);

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
    ck_assert_int_eq(
        raw_count(dbpath, "SELECT count(*) FROM snapshots WHERE session_id='old'"), 0);
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
    struct store *st = open_ok(dbpath);
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
    ck_store_ok(st, store_create_session(st, "s", 1));
    ck_assert_int_eq(store_set_max_bytes(st, -1), -EINVAL);
    ck_store_ok(st, store_set_max_bytes(st, 65536));
    expect_health(st, STORE_OK, NULL);
    ck_assert_int_eq(append_until_refused(st, "s", 0, &stored), -ENOSPC);
    ck_assert_int_gt(stored, 0);
    expect_health(st, STORE_FULL, "65536");
    expect_history(st, "s", (size_t)stored);
    ck_assert_int_eq(store_fork(st, "s", stored, "f", 2), -ENOSPC);
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
    ck_assert_int_eq(store_create_session(st, "t", 1), -EIO);
    ck_assert_int_eq(store_delete_session(st, "s"), -EIO);
    ck_assert_int_eq(store_fork(st, "s", 1, "f", 1), -EIO);
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
    ck_assert_int_eq(store_create_session(st, "t", 1), -EIO);
    expect_health(st, STORE_UNAVAILABLE, "removed");
    store_close(st);
    ck_assert_int_eq(raw_count(other, "SELECT count(*) FROM inputs"), 2);
    ck_assert_int_eq(access(wal, F_OK), -1);

    st = open_ok(dbpath);
    fill_session(st, "s", 2, 0, NULL);
    ck_assert_int_eq(unlink(wal), 0);
    ck_assert_int_eq(store_create_session(st, "t", 1), -EIO);
    expect_health(st, STORE_UNAVAILABLE, "write-ahead log was removed");
    store_close(st);
}
END_TEST

Suite *store_suite(void);

Suite *store_suite(void)
{
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("log");
    TCase *files = tcase_create("files");
    TCase *more = tcase_create("retention");
    TCase *health = tcase_create("health");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_checked_fixture(files, setup, teardown);
    tcase_add_checked_fixture(more, setup, teardown);
    tcase_add_checked_fixture(health, setup, teardown);
    tcase_set_timeout(health, 60);
    tcase_set_timeout(tc, 60);
    tcase_set_timeout(files, 60);
    tcase_set_timeout(more, 60);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_memory_and_session_load);
    tcase_add_test(tc, test_append_errors);
    tcase_add_test(tc, test_snapshot_bounds_replay);
    tcase_add_test(tc, test_history);
    tcase_add_test(tc, test_state_at);
    tcase_add_test(tc, test_fork);
    tcase_add_test(files, test_newer_schema);
    tcase_add_test(files, test_foreign_database);
    tcase_add_test(files, test_garbage_file);
    tcase_add_test(files, test_corrupt_pages);
    tcase_add_test(files, test_unusable_directory);
    tcase_add_test(files, test_in_use);
    tcase_add_test(more, test_gc);
    tcase_add_test(more, test_threads);
    tcase_add_test(more, test_growth_is_linear);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, files);
    tcase_add_test(health, test_quota_full);
    tcase_add_test(health, test_file_removed);
    tcase_add_test(health, test_file_replaced);
    suite_add_tcase(s, more);
    suite_add_tcase(s, health);
    return s;
}
