/*
 * check_pgstore - the input log on PostgreSQL (server/pgstore through
 * server/store): the schema made twice and a newer one refused; what is
 * appended loads back as the same fold; history pages, state-at, fork,
 * titles, search, import, retention and stats; each write of a batch gets
 * its own verdict; fencing (-ESTALE for a session another node owns); the
 * NOTIFY payloads, seen by a LISTEN on a connection of the test's own; and
 * a database killed mid-run (writes -EIO within 10 s, health unavailable)
 * and started again (writes succeed, the store never reopened).
 *
 * Needs a running PostgreSQL: RX_PG_URL (a libpq URL), and RX_PG_DIR (the
 * scripts/pgtmp.sh directory) for the restart test; `make pgstore-test`
 * starts a throwaway one. Without RX_PG_URL every test skips, saying so.
 * Each test works in a schema of its own (search_path in the URL).
 */
#include "tests/unit/helper_sm.h"
#include "tests/unit/helper_log.h"

#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "store/store.h"

/* The test's URL (RX_PG_URL with its schema) and its own libpq connection. */
static char url[1024];
static char schema[64];
static PGconn *raw;

/* Skip (pass, saying so) when no PostgreSQL was given. */
#define NEED_PG()                                                                        \
    do {                                                                                 \
        if (!getenv("RX_PG_URL") || !*getenv("RX_PG_URL")) {                             \
            fprintf(stderr,                                                              \
                    "check_pgstore: skipped (%s): RX_PG_URL is not set; "                \
                    "make pgstore-test starts a PostgreSQL\n",                           \
                    __func__);                                                           \
            return;                                                                      \
        }                                                                                \
    } while (0)

static void sql_ok(const char *sql)
{
    PGresult *r = PQexec(raw, sql);

    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK ||
                      PQresultStatus(r) == PGRES_TUPLES_OK,
                  "%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
}

/* A fresh schema for the test, and `url` naming it. */
static void setup(void)
{
    const char *base = getenv("RX_PG_URL");
    static int n;
    char sql[160];

    if (!base || !*base)
        return;
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

static void teardown(void)
{
    if (raw)
        PQfinish(raw);
    raw = NULL;
}

static struct store *open_ok(void)
{
    struct rx_error err = {""};
    struct store *st = store_open(url, &err);

    ck_assert_msg(st != NULL, "store_open: %s", err.text);
    ck_assert(store_is_shared(st));
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

START_TEST(test_schema)
{
    struct rx_error err = {""};
    struct store *st;
    int64_t n = -1, bytes = -1;

    NEED_PG();
    st = open_ok();
    store_close(st);
    st = open_ok(); /* the second open finds the schema made */
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

    NEED_PG();
    st = open_ok();
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
    ck_store_ok(st, store_fork(st, "a", 12, "f", BASE_MS));
    ck_assert_int_eq(store_fork(st, "a", 12, "f", BASE_MS), -EEXIST);
    ck_assert_int_eq(store_fork(st, "a", N_LOG + 1, "g", BASE_MS), -ERANGE);
    ck_assert_int_eq(store_fork(st, "nope", 0, "g", BASE_MS), -ENOENT);
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
        ck_store_ok(st, store_import(st, "imp", BASE_MS, "Imported", v, N_LOG, &snap));
        ck_assert_int_eq(store_import(st, "imp", BASE_MS, NULL, v, 1, NULL), -EEXIST);
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

    NEED_PG();
    st = open_ok();
    ck_store_ok(st, store_create_session(st, "s1", BASE_MS));
    ck_store_ok(st, store_create_session(st, "s2", BASE_MS));
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
    /* A row put there behind the store's back (another writer): a unique
       violation in the batch fails that write alone. */
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

    NEED_PG();
    st = open_ok();
    ck_store_ok(st, store_create_session(st, "free", BASE_MS)); /* no owners row */
    store_set_node(st, "node-a");
    ck_store_ok(st, store_create_session(st, "mine", BASE_MS));
    ck_store_ok(st, store_create_session(st, "theirs", BASE_MS));
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

    NEED_PG();
    st = open_ok();
    sql_ok("LISTEN rx_log");
    sql_ok("LISTEN rx_sess");
    ck_store_ok(st, store_create_session(st, "n1", BASE_MS));
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
    /* An input over PGSTORE_NOTIFY_TEXT_MAX: the seq alone. */
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
    ck_store_ok(st, store_fork(st, "n1", 1, "n2", BASE_MS));
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

    NEED_PG();
    if (!getenv("RX_PG_DIR")) {
        fprintf(stderr, "check_pgstore: skipped (%s): RX_PG_DIR is not set\n", __func__);
        return;
    }
    st = open_ok();
    ck_store_ok(st, store_create_session(st, "k", BASE_MS));
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
    ck_assert_int_eq(store_create_session(st, "k2", BASE_MS), -EIO);
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
    ck_store_ok(st, store_create_session(st, "k2", BASE_MS));
    free(loaded_bytes(st, "k", &(int64_t){0}));
    store_close(st);
}
END_TEST

Suite *pgstore_suite(void); /* check_main.c */

Suite *pgstore_suite(void)
{
    Suite *s = suite_create("pgstore");
    TCase *tc = tcase_create("pgstore");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_schema);
    tcase_add_test(tc, test_log);
    tcase_add_test(tc, test_batch_verdicts);
    tcase_add_test(tc, test_fencing);
    tcase_add_test(tc, test_notify);
    tcase_add_test(tc, test_connection_loss);
    suite_add_tcase(s, tc);
    return s;
}
