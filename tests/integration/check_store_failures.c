/*
 * check_store_failures - the real reflexor binary when its store can no longer
 * write (SPEC 4 statuses, SPEC 6): a full disk answers 507 `storage-full` on
 * every write route, an unusable store (file removed or replaced) answers 503
 * `store-unavailable`, /healthz says which and why, nothing is acknowledged
 * that is not stored, a DELETE that could not be stored is not a 204, and the
 * session limit is its own status (429 `too-many-sessions`), never "disk full".
 *
 * "Disk full" is made two ways without root: the quota store.max_bytes
 * (SQLite's max_page_count), and a file size limit (RLIMIT_FSIZE, with
 * SIGXFSZ ignored) that the server inherits, so its writes fail as on a full
 * disk. Each test starts its own server on its own database under /tmp and
 * runs effects off, so the log holds exactly the inputs the test posts.
 */
#include <check.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tests/integration/itest.h"

/* Inputs big enough to fill a small database in a few dozen posts. */
#define CONTENT_LEN 1500
/* Bounds on the loops that fill the store: a server that never fills fails. */
#define MAX_POSTS   400
#define MAX_CREATES 2000

static struct itest_server srv;
static char tmpdir[64];
static char db_path[96];
static char db_arg[96];

/*
 * The TCase's directory, made and removed in the runner's process (unchecked
 * fixture): a test that fails half-way ends its process at once (Check kills
 * its process group, the server with it), and its files go with the
 * directory.
 */
static void make_dir(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rx-store-fail-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_dir(void)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char p[384];

    if (!d)
        return;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof(p), "%s/%s", tmpdir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(tmpdir);
}

/* A fresh path for the server to create its database at. */
static void new_db_path(void)
{
    snprintf(db_path, sizeof(db_path), "%s/reflexor-%d.db", tmpdir, (int)getpid());
    snprintf(db_arg, sizeof(db_arg), "%s", db_path);
    itest_remove_db(db_path); /* left by a test that failed, without fork */
}

static void start(const char *config)
{
    const char *args[] = {"--db", db_arg, NULL};

    ck_assert_msg(itest_server_start(&srv, config, args) == 0, "server did not start");
}

static void stop(void)
{
    ck_assert_int_eq(itest_server_stop(&srv), 0);
}

static void api_url(char *buf, size_t n, const char *tail)
{
    snprintf(buf, n, "%s/api/reflexor%s", srv.base, tail);
}

static void session_url(char *buf, size_t n, const char *sid, const char *tail)
{
    snprintf(buf, n, "%s/api/reflexor/sessions/%s%s", srv.base, sid, tail);
}

/* One request; its status, and its body as JSON (NEW, may be NULL) in *j. */
static long request(const char *method, const char *url, const char *body, json_t **j)
{
    struct itest_resp r;
    long status;

    ck_assert_int_eq(itest_request(method, url, body, NULL, &r), 0);
    status = r.status;
    if (j)
        *j = itest_resp_json(&r);
    itest_resp_release(&r);
    return status;
}

/* The answer must be `status` with {"error": code}. */
static void expect(long got, json_t *j, long status, const char *code)
{
    const char *e = json_string_value(json_object_get(j, "error"));

    ck_assert_msg(got == status, "answered %ld (%s), expected %ld %s", got, e ? e : "?",
                  status, code);
    ck_assert_msg(e && !strcmp(e, code), "error '%s', expected '%s'", e ? e : "(none)",
                  code);
}

/* POST /sessions: the new id (malloc'd) on 201, else NULL with status/body out. */
static char *create_session(long *status, json_t **body)
{
    char url[256], *id = NULL;
    json_t *j = NULL;
    long st;

    api_url(url, sizeof(url), "/sessions");
    st = request("POST", url, "", &j);
    if (st == 201)
        id = strdup(json_string_value(json_object_get(j, "id")));
    if (status)
        *status = st;
    if (body && st != 201)
        *body = j;
    else
        json_decref(j);
    return id;
}

static char *must_create_session(void)
{
    long st = 0;
    char *id = create_session(&st, NULL);

    ck_assert_msg(id != NULL, "POST /sessions answered %ld", st);
    return id;
}

/* A user message with id `mid` and CONTENT_LEN bytes of text. */
static long post_message(const char *sid, const char *mid, json_t **answer)
{
    char body[CONTENT_LEN + 128];
    int n = snprintf(body, sizeof(body),
                     "{\"type\":\"user-send-message\",\"messageId\":\"%s\","
                     "\"content\":\"",
                     mid);

    memset(body + n, 'x', CONTENT_LEN);
    snprintf(body + n + CONTENT_LEN, sizeof(body) - (size_t)n - CONTENT_LEN, "\"}");
    return itest_post_input(&srv, sid, body, answer);
}

/* Post messages m0, m1, ... until one is refused: how many were acknowledged;
   the refusal's status and body go to *status and *answer. */
static int fill_with_messages(const char *sid, long *status, json_t **answer)
{
    char mid[32];
    int n;

    for (n = 0; n < MAX_POSTS; n++) {
        snprintf(mid, sizeof(mid), "m%d", n);
        *answer = NULL;
        *status = post_message(sid, mid, answer);
        if (*status != 200)
            return n;
        json_decref(*answer);
    }
    *answer = NULL;
    ck_abort_msg("%d inputs were all acknowledged: the store never filled", n);
    return n;
}

/* The session's user message ids must be exactly m0..m<n-1>, and so its log. */
static void expect_messages(const char *sid, int n)
{
    char url[256], want[32];
    json_t *st, *users, *hist;

    session_url(url, sizeof(url), sid, "");
    ck_assert_int_eq(request("GET", url, NULL, &st), 200);
    users = json_object_get(st, "userMessages");
    ck_assert_msg(json_array_size(users) == (size_t)n,
                  "%zu user messages, %d acknowledged", json_array_size(users), n);
    for (int i = 0; i < n; i++) {
        snprintf(want, sizeof(want), "m%d", i);
        ck_assert_str_eq(
            json_string_value(json_object_get(json_array_get(users, (size_t)i), "id")),
            want);
    }
    json_decref(st);
    session_url(url, sizeof(url), sid, "/history");
    ck_assert_int_eq(request("GET", url, NULL, &hist), 200);
    ck_assert_msg(json_array_size(hist) == (size_t)n,
                  "%zu inputs in the log, %d acknowledged", json_array_size(hist), n);
    json_decref(hist);
}

/* /healthz: top-level `status`, and the store's `store_status` with a reason
   unless it is "ok". */
static void expect_health(const char *status, const char *store_status,
                          const char *reason_has)
{
    char url[128];
    json_t *j, *store;
    const char *why;

    snprintf(url, sizeof(url), "%s/healthz", srv.base);
    ck_assert_int_eq(request("GET", url, NULL, &j), 200);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(json_object_get(j, "status")), status);
    ck_assert_ptr_nonnull(json_object_get(j, "sessions")); /* the fields it had */
    ck_assert_ptr_nonnull(json_object_get(j, "uptimeMs"));
    store = json_object_get(j, "store");
    ck_assert_msg(json_is_object(store), "/healthz has no store object");
    ck_assert_str_eq(json_string_value(json_object_get(store, "status")), store_status);
    why = json_string_value(json_object_get(store, "error"));
    if (reason_has)
        ck_assert_msg(why && strstr(why, reason_has), "store error '%s' lacks '%s'",
                      why ? why : "(none)", reason_has);
    json_decref(j);
}

static long fork_at(const char *sid, int at, json_t **answer)
{
    char url[256], body[32];

    session_url(url, sizeof(url), sid, "/fork");
    snprintf(body, sizeof(body), "{\"at\":%d}", at);
    return request("POST", url, body, answer);
}

static long get_session(const char *sid)
{
    char url[256];

    session_url(url, sizeof(url), sid, "");
    return request("GET", url, NULL, NULL);
}

static long delete_session(const char *sid, json_t **answer)
{
    char url[256];

    session_url(url, sizeof(url), sid, "");
    return request("DELETE", url, NULL, answer);
}

/* ---- a full disk: the quota store.max_bytes ---------------------------------- */

static const char quota_config[] = "{\"runtime\":{\"effects\":false},"
                                   " \"store\":{\"max_bytes\":65536}}";

/*
 * Fill the quota with inputs, then with sessions: every write route answers
 * 507, /healthz says full, the refused input is nowhere, and after a restart
 * exactly the acknowledged inputs and sessions are there.
 */
START_TEST(test_quota_full_is_507)
{
    char *sid, *made[MAX_CREATES];
    int acked, nmade = 0;
    long status = 0, del;
    json_t *j = NULL;

    new_db_path();
    start(quota_config);
    expect_health("ok", "ok", NULL);
    sid = must_create_session();
    acked = fill_with_messages(sid, &status, &j);
    ck_assert_int_gt(acked, 0);
    expect(status, j, 507, "storage-full");
    json_decref(j);
    expect_health("degraded", "full", "full");
    /* The refused input is in neither the state nor the log. */
    expect_messages(sid, acked);
    /* A session row is small: sessions fill what room is left, then 507. */
    for (;;) {
        ck_assert_int_lt(nmade, MAX_CREATES);
        j = NULL;
        made[nmade] = create_session(&status, &j);
        if (!made[nmade])
            break;
        nmade++;
    }
    expect(status, j, 507, "storage-full");
    json_decref(j);
    ck_assert_int_eq(fork_at(sid, 1, &j), 507);
    expect(507, j, 507, "storage-full");
    json_decref(j);
    expect_health("degraded", "full", NULL);
    /* A DELETE is answered 204 only if the deletion is stored: checked below. */
    del = delete_session(sid, &j);
    json_decref(j);
    ck_assert_msg(del == 204 || del == 507, "DELETE answered %ld", del);

    stop();
    start(quota_config);
    if (del == 204) {
        ck_assert_int_eq(get_session(sid), 404);
    } else {
        expect_messages(sid, acked);
    }
    for (int i = 0; i < nmade; i++) {
        ck_assert_int_eq(get_session(made[i]), 200);
        free(made[i]);
    }
    expect_health("ok", "ok", NULL);
    stop();
    itest_remove_db(db_path);
    free(sid);
}
END_TEST

/* ---- a full disk: writes fail (RLIMIT_FSIZE), as on a real full file system ---- */

/*
 * Start the server with a file size limit it inherits (SIGXFSZ ignored, so a
 * write past it fails with EFBIG instead of killing the server), then lift
 * the limit for this process again.
 */
static void start_with_file_limit(const char *config, rlim_t bytes)
{
    struct rlimit old, small;

    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    small = old;
    small.rlim_cur = bytes;
    ck_assert(signal(SIGXFSZ, SIG_IGN) != SIG_ERR);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
    start(config);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
}

static const char plain_config[] = "{\"runtime\":{\"effects\":false}}";

START_TEST(test_write_errors_are_507_and_delete_is_not_204)
{
    char *sid, *other, *other2 = NULL;
    int acked;
    long status = 0;
    json_t *j = NULL;

    new_db_path();
    start_with_file_limit(plain_config, 256 * 1024);
    sid = must_create_session();
    other = must_create_session();
    acked = fill_with_messages(sid, &status, &j);
    ck_assert_int_gt(acked, 0);
    expect(status, j, 507, "storage-full"); /* not 500 */
    json_decref(j);
    expect_health("degraded", "full", NULL);
    expect_messages(sid, acked);
    /* A session's row is smaller than a message: the room the refused write
       could not use may take a create or two, but not many. */
    j = NULL;
    for (int k = 0; k < 8 && (other2 = create_session(&status, &j)); k++) {
        free(other2);
        other2 = NULL;
        json_decref(j);
        j = NULL;
    }
    ck_assert_int_ne(status, 201);          /* refused within 8 */
    expect(status, j, 507, "storage-full"); /* not 429 too-many-sessions */
    json_decref(j);
    ck_assert_int_eq(fork_at(sid, 1, &j), 507);
    expect(507, j, 507, "storage-full");
    json_decref(j);
    /* The deletion cannot be stored: not a 204, and the session stays. */
    status = delete_session(other, &j);
    expect(status, j, 507, "storage-full");
    json_decref(j);
    ck_assert_int_eq(get_session(other), 200);

    /* Without the limit, the log holds exactly what was acknowledged. */
    stop();
    start(plain_config);
    ck_assert_int_eq(get_session(other), 200);
    expect_messages(sid, acked);
    expect_health("ok", "ok", NULL);
    stop();
    itest_remove_db(db_path);
    free(sid);
    free(other);
}
END_TEST

/* ---- an unusable store: the file removed or replaced while running ------------ */

START_TEST(test_removed_database_is_503)
{
    char *sid;
    long status;
    json_t *j = NULL;

    new_db_path();
    start(plain_config);
    sid = must_create_session();
    ck_assert_int_eq(post_message(sid, "m0", NULL), 200);
    ck_assert_int_eq(post_message(sid, "m1", NULL), 200);
    ck_assert_int_eq(unlink(db_path), 0);
    /* Noticed at once, before any write. */
    expect_health("degraded", "unavailable", "removed");
    /* An input that would be lost at restart is not acknowledged. */
    status = post_message(sid, "m2", &j);
    expect(status, j, 503, "store-unavailable");
    json_decref(j);
    expect_messages(sid, 2);
    j = NULL;
    ck_assert_ptr_null(create_session(&status, &j));
    expect(status, j, 503, "store-unavailable");
    json_decref(j);
    ck_assert_int_eq(fork_at(sid, 1, &j), 503);
    expect(503, j, 503, "store-unavailable");
    json_decref(j);
    status = delete_session(sid, &j);
    expect(status, j, 503, "store-unavailable");
    json_decref(j);
    ck_assert_int_eq(get_session(sid), 200);
    expect_health("degraded", "unavailable", "removed");
    /* A restart starts on a new file, with no WAL of the old one replayed
       onto it: what was removed is gone, nothing half of it. */
    stop();
    start(plain_config);
    ck_assert_int_eq(get_session(sid), 404);
    expect_health("ok", "ok", NULL);
    stop();
    itest_remove_db(db_path);
    free(sid);
}
END_TEST

START_TEST(test_replaced_database_is_503)
{
    char *sid, other[128];
    long status;
    json_t *j = NULL;
    FILE *f;

    new_db_path();
    start(plain_config);
    sid = must_create_session();
    ck_assert_int_eq(post_message(sid, "m0", NULL), 200);
    /* Another file renamed over the path: writes would go to the old one. */
    snprintf(other, sizeof(other), "%s.new", db_path);
    f = fopen(other, "w");
    ck_assert_ptr_nonnull(f);
    fputs("not the database in use\n", f);
    fclose(f);
    ck_assert_int_eq(rename(other, db_path), 0);
    status = post_message(sid, "m1", &j);
    expect(status, j, 503, "store-unavailable");
    json_decref(j);
    expect_messages(sid, 1);
    expect_health("degraded", "unavailable", "replaced");
    stop();
    itest_remove_db(db_path);
    free(sid);
}
END_TEST

/* ---- the session limit: only in memory (SPEC 6.2) ------------------------------- */

static const char limit_config[] = "{\"runtime\":{\"effects\":false},"
                                   " \"limits\":{\"max_sessions\":3}}";

/* With --db :memory: the sessions all live in memory: the old ceiling stays,
   and it is its own status, never "database full". */
START_TEST(test_session_limit_is_429_in_memory)
{
    const char *args[] = {"--db", ":memory:", NULL};
    char *a, *b;
    long status = 0;
    json_t *j = NULL;

    ck_assert_msg(itest_server_start(&srv, limit_config, args) == 0, "no start");
    a = must_create_session(); /* with "default": 2 of 3 */
    ck_assert_int_eq(post_message(a, "m0", NULL), 200);
    b = must_create_session();
    ck_assert_ptr_null(create_session(&status, &j));
    expect(status, j, 429, "too-many-sessions");
    json_decref(j);
    ck_assert_int_eq(delete_session(b, NULL), 204);
    free(must_create_session());
    stop();
    free(a);
    free(b);
}
END_TEST

/* With a database memory only caches the log: limits.max_sessions caps
   nothing, and the sessions past it are all there after a restart. */
START_TEST(test_stored_sessions_pass_max_sessions)
{
    char *ids[6];
    json_t *j = NULL;

    new_db_path();
    start(limit_config);
    for (int i = 0; i < 6; i++) {
        ids[i] = must_create_session();
        ck_assert_int_eq(post_message(ids[i], "m0", NULL), 200);
    }
    ck_assert_int_eq(fork_at(ids[0], 1, &j), 201);
    json_decref(j);
    stop();
    start(limit_config);
    for (int i = 0; i < 6; i++) {
        expect_messages(ids[i], 1);
        free(ids[i]);
    }
    expect_health("ok", "ok", NULL);
    stop();
    itest_remove_db(db_path);
}
END_TEST

Suite *store_failures_suite(void);
Suite *store_failures_suite(void)
{
    Suite *s = suite_create("store_failures");
    TCase *full, *gone;
    TCase *limit = tcase_create("limit");
    int t = getenv("RX_SERVER_WRAPPER") ? 600 : 120;

    /* SQLite only: a quota on its file, a file size limit, the file removed or
       replaced. PostgreSQL's own outage is tests/cluster (PostgreSQL restarted). */
    if (itest_on_postgres()) {
        itest_skip("store_failures/full",
                   "store.max_bytes and RLIMIT_FSIZE act on a SQLite file");
        itest_skip("store_failures/unavailable", "removes or replaces the SQLite file");
    } else {
        full = tcase_create("full");
        gone = tcase_create("unavailable");
        tcase_add_unchecked_fixture(full, make_dir, remove_dir);
        tcase_set_timeout(full, t);
        tcase_add_test(full, test_quota_full_is_507);
        tcase_add_test(full, test_write_errors_are_507_and_delete_is_not_204);
        suite_add_tcase(s, full);

        tcase_add_unchecked_fixture(gone, make_dir, remove_dir);
        tcase_set_timeout(gone, t);
        tcase_add_test(gone, test_removed_database_is_503);
        tcase_add_test(gone, test_replaced_database_is_503);
        suite_add_tcase(s, gone);
    }

    tcase_add_unchecked_fixture(limit, make_dir, remove_dir);
    tcase_set_timeout(limit, t);
    tcase_add_test(limit, test_session_limit_is_429_in_memory);
    tcase_add_test(limit, test_stored_sessions_pass_max_sessions);
    suite_add_tcase(s, limit);
    return s;
}
