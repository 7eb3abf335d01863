/*
 * check_records - what the protocols remember of sessions lives in the store
 * (SPEC 6.2, issue 29): the real server, stopped and started again on the
 * same database, still
 *  - continues a /v1 conversation in the session it happened in (the client
 *    resends the whole conversation; the continuity map is a record);
 *  - shows a LangGraph thread's metadata (and finds the thread by it), and a
 *    finished run's record (GET .../runs/<rid>, the thread's run list);
 * and, on PostgreSQL (RX_PG_DIR), two nodes on one database see the same
 * records at once. With --db :memory: nothing of this survives, as before.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/itest.h"

static const char *const JSON_HDR[] = {"Content-Type: application/json", NULL};
static char db_path[64];

static void start_on(struct itest_server *srv)
{
    const char *args[] = {"--db", db_path, NULL};

    /* A short lease: on PostgreSQL a restarted node takes its sessions over soon. */
    ck_assert_msg(itest_server_start(srv, "{\"cluster\":{\"lease_ms\":1000}}", args) == 0,
                  "server did not start");
}

/* A fresh database file name (the server makes the file), and a server on it. */
static void start_fresh(struct itest_server *srv)
{
    int fd;

    snprintf(db_path, sizeof(db_path), "/tmp/rx-records-db-XXXXXX");
    fd = mkstemp(db_path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    unlink(db_path);
    start_on(srv);
}

static void restart(struct itest_server *srv)
{
    ck_assert_int_eq(itest_server_stop(srv), 0);
    start_on(srv);
}

/* `method` base+path with `body` (may be NULL): the answer's JSON (NEW), status in *st.
 */
static json_t *call(const struct itest_server *srv, const char *method, const char *path,
                    const char *body, long *status)
{
    struct itest_resp r;
    char url[512];
    json_t *j;

    snprintf(url, sizeof(url), "%s%s", srv->base, path);
    ck_assert_int_eq(itest_request(method, url, body, JSON_HDR, &r), 0);
    *status = r.status;
    j = itest_resp_json(&r);
    itest_resp_release(&r);
    return j;
}

/* The ids of the stored sessions but "default", comma-separated, sorted. */
static char *session_ids(const struct itest_server *srv)
{
    long status;
    json_t *l = call(srv, "GET", "/api/reflexor/sessions", NULL, &status), *e, *list;
    char out[1024] = "";
    size_t i;

    ck_assert_int_eq(status, 200);
    list = json_is_array(l) ? l : json_object_get(l, "sessions");
    json_array_foreach(list, i, e)
    {
        const char *id = json_string_value(json_object_get(e, "id"));

        if (id && strcmp(id, "default"))
            snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s",
                     *out ? "," : "", id);
    }
    json_decref(l);
    return strdup(out);
}

/* A 503 that says another node owns the session (a cluster, SPEC 6.1). */
static bool owned_elsewhere(long status, json_t *j)
{
    const char *why =
        json_string_value(json_object_get(json_object_get(j, "error"), "message"));

    return status == 503 && why && strstr(why, "another node");
}

/*
 * The text of a chat completion's answer (NEW string). On PostgreSQL a
 * restarted server is a new node: the sessions its old self owned are
 * taken over within cluster.lease_ms (SPEC 6.1), so a 503 that says so is
 * asked again meanwhile.
 */
static char *chat(const struct itest_server *srv, const char *messages)
{
    char body[1024];
    long status;
    json_t *j;
    const char *text;
    char *out;

    snprintf(body, sizeof(body), "{\"model\":\"reflexor\",\"messages\":%s}", messages);
    j = call(srv, "POST", "/v1/chat/completions", body, &status);
    for (int i = 0; i < 150 && owned_elsewhere(status, j); i++) {
        json_decref(j);
        usleep(100 * 1000);
        j = call(srv, "POST", "/v1/chat/completions", body, &status);
    }
    if (status != 200) {
        char *dump = json_dumps(j, JSON_COMPACT);

        ck_assert_msg(0, "chat: %ld %s", status, dump ? dump : "");
    }
    text = json_string_value(json_object_get(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"),
        "content"));
    ck_assert_ptr_nonnull(text);
    out = strdup(text);
    json_decref(j);
    return out;
}

/* A conversation answered before a restart goes on in its session after it. */
START_TEST(test_oai_continuity_survives_restart)
{
    struct itest_server srv;
    char msgs[1024], *first, *second, *before, *after;

    start_fresh(&srv);
    first = chat(&srv, "[{\"role\":\"user\",\"content\":\"first turn\"}]");
    before = session_ids(&srv);
    ck_assert_msg(*before && !strchr(before, ','), "one session: '%s'", before);
    restart(&srv);
    snprintf(msgs, sizeof(msgs),
             "[{\"role\":\"user\",\"content\":\"first turn\"},"
             "{\"role\":\"assistant\",\"content\":\"%s\"},"
             "{\"role\":\"user\",\"content\":\"second turn\"}]",
             first);
    second = chat(&srv, msgs);
    ck_assert_msg(strstr(second, "second turn"), "answer: %s", second);
    after = session_ids(&srv);
    /* The same session, not a new one rebuilt from the history. */
    ck_assert_str_eq(after, before);
    free(first);
    free(second);
    free(before);
    free(after);
    ck_assert_int_eq(itest_server_stop(&srv), 0);
    itest_remove_db(db_path);
}
END_TEST

/* A thread's metadata and a finished run's record come back after a restart. */
START_TEST(test_lg_records_survive_restart)
{
    struct itest_server srv;
    char path[256], rid[64];
    long status;
    json_t *j;

    start_fresh(&srv);
    json_decref(call(&srv, "POST", "/api/langgraph/threads",
                     "{\"thread_id\":\"rec-t1\",\"metadata\":{\"owner\":\"ada\"}}",
                     &status));
    ck_assert_int_eq(status, 200);
    json_decref(call(&srv, "PATCH", "/api/langgraph/threads/rec-t1",
                     "{\"metadata\":{\"topic\":\"tea\"}}", &status));
    ck_assert_int_eq(status, 200);
    j = call(&srv, "POST", "/api/langgraph/threads/rec-t1/runs",
             "{\"assistant_id\":\"agent\",\"input\":{\"messages\":[{\"type\":\"human\","
             "\"content\":\"hello\"}]}}",
             &status);
    ck_assert_int_eq(status, 200);
    snprintf(rid, sizeof(rid), "%s", json_string_value(json_object_get(j, "run_id")));
    json_decref(j);
    snprintf(path, sizeof(path), "/api/langgraph/threads/rec-t1/runs/%s/join", rid);
    json_decref(call(&srv, "GET", path, NULL, &status));
    ck_assert_int_eq(status, 200);
    restart(&srv);

    j = call(&srv, "GET", "/api/langgraph/threads/rec-t1", NULL, &status);
    ck_assert_int_eq(status, 200);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(j, "metadata"), "owner")),
        "ada");
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(j, "metadata"), "topic")),
        "tea");
    json_decref(j);
    j = call(&srv, "POST", "/api/langgraph/threads/search",
             "{\"metadata\":{\"owner\":\"ada\"}}", &status);
    ck_assert_int_eq(status, 200);
    ck_assert_uint_eq(json_array_size(j), 1);
    json_decref(j);
    snprintf(path, sizeof(path), "/api/langgraph/threads/rec-t1/runs/%s", rid);
    j = call(&srv, "GET", path, NULL, &status);
    ck_assert_int_eq(status, 200);
    ck_assert_str_eq(json_string_value(json_object_get(j, "status")), "success");
    ck_assert_str_eq(json_string_value(json_object_get(j, "run_id")), rid);
    json_decref(j);
    j = call(&srv, "GET", "/api/langgraph/threads/rec-t1/runs", NULL, &status);
    ck_assert_int_eq(status, 200);
    ck_assert_uint_eq(json_array_size(j), 1);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(j, 0), "run_id")),
                     rid);
    json_decref(j);
    /* Deleting the thread takes its records with it. */
    json_decref(call(&srv, "DELETE", "/api/langgraph/threads/rec-t1", NULL, &status));
    ck_assert_int_eq(status, 204);
    json_decref(call(&srv, "POST", "/api/langgraph/threads", "{\"thread_id\":\"rec-t1\"}",
                     &status));
    j = call(&srv, "GET", "/api/langgraph/threads/rec-t1/runs", NULL, &status);
    ck_assert_uint_eq(json_array_size(j), 0);
    json_decref(j);
    ck_assert_int_eq(itest_server_stop(&srv), 0);
    itest_remove_db(db_path);
}
END_TEST

/* PostgreSQL: a second node on the same database reads what the first wrote. */
START_TEST(test_two_nodes_share_records)
{
    struct itest_server a, b;
    char msgs[1024], body[1200], *first, *before, *after;
    const char *why;
    long status;
    json_t *j;

    if (!itest_on_postgres()) {
        itest_skip(__func__, "two nodes share a log on PostgreSQL only (RX_PG_DIR)");
        return;
    }
    start_fresh(&a);
    start_on(&b);
    json_decref(call(&a, "POST", "/api/langgraph/threads",
                     "{\"thread_id\":\"rec-t2\",\"metadata\":{\"owner\":\"bo\"}}",
                     &status));
    ck_assert_int_eq(status, 200);
    /* The other node learns of the session from the log (it may catch up). */
    for (int i = 0; i < 100; i++) {
        j = call(&b, "GET", "/api/langgraph/threads/rec-t2", NULL, &status);
        if (status == 200)
            break;
        json_decref(j);
        usleep(50 * 1000);
    }
    ck_assert_int_eq(status, 200);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(j, "metadata"), "owner")),
        "bo");
    json_decref(j);
    first = chat(&a, "[{\"role\":\"user\",\"content\":\"node a\"}]");
    before = session_ids(&a);
    /* Written behind the answer: give the writer a moment. */
    usleep(300 * 1000);
    snprintf(msgs, sizeof(msgs),
             "[{\"role\":\"user\",\"content\":\"node a\"},"
             "{\"role\":\"assistant\",\"content\":\"%s\"},"
             "{\"role\":\"user\",\"content\":\"node b\"}]",
             first);
    /* Node b finds the conversation's session: a run there goes to its owner,
       node a (a 503 that says so), and no session is made from the history. */
    snprintf(body, sizeof(body), "{\"model\":\"reflexor\",\"messages\":%s}", msgs);
    j = call(&b, "POST", "/v1/chat/completions", body, &status);
    why = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    ck_assert_msg(status == 200 || owned_elsewhere(status, j), "node b: %ld %s", status,
                  why ? why : "");
    json_decref(j);
    after = session_ids(&b);
    ck_assert_str_eq(after, before);
    free(first);
    free(before);
    free(after);
    ck_assert_int_eq(itest_server_stop(&b), 0);
    ck_assert_int_eq(itest_server_stop(&a), 0);
    itest_remove_db(db_path);
}
END_TEST

Suite *records_suite(void);
Suite *records_suite(void)
{
    Suite *s = suite_create("records");
    TCase *tc = tcase_create("restart");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_oai_continuity_survives_restart);
    tcase_add_test(tc, test_lg_records_survive_restart);
    tcase_add_test(tc, test_two_nodes_share_records);
    suite_add_tcase(s, tc);
    return s;
}
