/*
 * check_sessions_api - the sessions list over HTTP against the real binary
 * (SPEC 4, issue 16 item 3): rename (PATCH), search (GET /sessions?q=, paged
 * with limit/before) through the store's full-text index and, with
 * --db :memory:, a scan; export then import of a chat (equal states, a
 * tampered log refused with nothing made, only what the final state wants
 * runs); the sessions feed (GET /events) that keeps every tab's list live.
 * The file tests each start their own server on a fresh database (checked
 * fixture: a test that restarts it owns it); the others share one per TCase.
 * No timings are asserted: waits only bound hangs.
 */
#include <check.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/itest.h"

static int wait_ms(void)
{
    return getenv("RX_SERVER_WRAPPER") ? 120000 : 20000;
}
#define WAIT_MS wait_ms()

static struct itest_server srv;
static char db_path[64];

/* A quick builtin brain; bodies small, imports larger (limits.import_max). */
static const char config[] =
    "{\"brain\":{\"builtin\":{\"chunk_chars\":16,\"chunk_delay_ms\":1}},"
    " \"limits\":{\"body_max\":4096, \"import_max\":262144},"
    " \"sse\":{\"retry_ms\":1000, \"ping_ms\":500}}";

static const char auth_config[] = "{\"auth\":{\"token\":\"s3cret\"}}";

/* ---- servers ------------------------------------------------------------------- */

static void start_memory(void)
{
    ck_assert_msg(itest_server_start(&srv, config, NULL) == 0, "server did not start");
}

static void start_file_db(void)
{
    const char *args[] = {"--db", db_path, NULL};

    ck_assert_msg(itest_server_start(&srv, config, args) == 0, "server did not start");
}

static void start_file(void)
{
    int fd;

    snprintf(db_path, sizeof(db_path), "/tmp/rx-itest-sapi-XXXXXX");
    fd = mkstemp(db_path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    unlink(db_path); /* a fresh file, made by the server */
    start_file_db();
}

static void start_auth(void)
{
    ck_assert_msg(itest_server_start(&srv, auth_config, NULL) == 0,
                  "server did not start");
}

static void stop(void)
{
    ck_assert_int_eq(itest_server_stop(&srv), 0);
}

static void stop_file(void)
{
    stop();
    itest_remove_db(db_path);
}

/* Stop and start again on the same database. */
static void restart(void)
{
    ck_assert_int_eq(itest_server_stop(&srv), 0);
    start_file_db();
}

/* ---- requests -------------------------------------------------------------------- */

static void url_of(char *buf, size_t n, const char *path)
{
    snprintf(buf, n, "%s/api/reflexor%s", srv.base, path);
}

/* `method` on the API path with a JSON body (may be NULL): the status, and the
   answer as JSON in *out (NEW; may be NULL) when out is not NULL. */
static long call(const char *method, const char *path, const char *body, json_t **out)
{
    char url[1024];
    struct itest_resp r;
    long status;

    url_of(url, sizeof(url), path);
    ck_assert_int_eq(itest_request(method, url, body, NULL, &r), 0);
    status = r.status;
    if (out)
        *out = itest_resp_json(&r);
    itest_resp_release(&r);
    return status;
}

static char *new_session(void)
{
    char *id = itest_new_session(&srv);

    ck_assert_ptr_nonnull(id);
    return id;
}

/* POST a user message; it must be taken. */
static void say(const char *sid, const char *text)
{
    char body[512];

    snprintf(body, sizeof(body), "{\"type\":\"user-send-message\",\"content\":\"%s\"}",
             text);
    ck_assert_int_eq(itest_post_input(&srv, sid, body, NULL), 200);
}

/* At least `answers` answers, the last complete, and no tool call pending. */
static bool answered(json_t *state, void *arg)
{
    json_t *a = json_object_get(state, "assistantMessages"), *t;
    json_t *last = json_array_get(a, json_array_size(a) - 1);
    const char *st = json_string_value(json_object_get(last, "status"));
    size_t i;

    if (!st || strcmp(st, "complete") || json_array_size(a) < (size_t) * (int *)arg)
        return false;
    json_array_foreach(json_object_get(state, "toolCallRecords"), i, t)
    {
        if (json_is_null(json_object_get(t, "result")))
            return false;
    }
    return true;
}

/* The state once it holds `answers` complete answers (NEW). */
static json_t *state_answered(const char *sid, int answers)
{
    char url[256], path[128];
    json_t *j;

    snprintf(path, sizeof(path), "/sessions/%s", sid);
    url_of(url, sizeof(url), path);
    j = itest_poll_json(url, answered, &answers, WAIT_MS);
    ck_assert_msg(j && answered(j, &answers), "session %s never answered", sid);
    return j;
}

static json_t *get_state(const char *sid)
{
    char path[128];
    json_t *j = NULL;

    snprintf(path, sizeof(path), "/sessions/%s", sid);
    ck_assert_int_eq(call("GET", path, NULL, &j), 200);
    ck_assert_ptr_nonnull(j);
    return j;
}

/* PATCH the session with `body`: the status; the error's field into `field`. */
static long rename_raw(const char *sid, const char *body, char *field, size_t n)
{
    char path[128];
    json_t *j = NULL;
    long status;

    snprintf(path, sizeof(path), "/sessions/%s", sid);
    status = call("PATCH", path, body, &j);
    if (field) {
        const char *f = json_string_value(json_object_get(j, "field"));

        snprintf(field, n, "%s", f ? f : "");
    }
    if (status == 400)
        ck_assert_str_eq(json_string_value(json_object_get(j, "error")), "invalid-input");
    json_decref(j);
    return status;
}

static void rename_ok(const char *sid, const char *title)
{
    char body[1024];

    snprintf(body, sizeof(body), "{\"title\":\"%s\"}", title);
    ck_assert_int_eq(rename_raw(sid, body, NULL, 0), 200);
}

/* The list entry of `sid` in GET /sessions (NEW), or NULL. */
static json_t *list_entry(const char *sid)
{
    json_t *list = NULL, *e, *found = NULL;
    size_t i;

    ck_assert_int_eq(call("GET", "/sessions", NULL, &list), 200);
    ck_assert(json_is_array(list));
    json_array_foreach(list, i, e)
    {
        if (!strcmp(json_string_value(json_object_get(e, "id")), sid))
            found = json_incref(e);
    }
    json_decref(list);
    return found;
}

static const char *title_of(json_t *entry)
{
    return json_string_value(json_object_get(entry, "title"));
}

/* GET /sessions?<query> (already escaped): the page (NEW), which must be 200. */
static json_t *page(const char *query)
{
    char path[512];
    json_t *j = NULL;

    snprintf(path, sizeof(path), "/sessions?%s", query);
    ck_assert_msg(call("GET", path, NULL, &j) == 200, "GET %s", path);
    ck_assert(json_is_object(j));
    ck_assert(json_is_array(json_object_get(j, "sessions")));
    return j;
}

/* The ids of a page, in order, comma-joined (a static buffer). */
static const char *ids_of(json_t *p)
{
    static char out[2048];
    json_t *e;
    size_t i;

    out[0] = '\0';
    json_array_foreach(json_object_get(p, "sessions"), i, e)
    {
        snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s", i ? "," : "",
                 json_string_value(json_object_get(e, "id")));
    }
    return out;
}

/* The ids GET /sessions?q=<q> finds (all of them, one page of 200). */
static const char *search(const char *q)
{
    char query[512], *esc = curl_easy_escape(NULL, q, 0);
    static char out[2048];
    json_t *p;

    snprintf(query, sizeof(query), "q=%s&limit=200", esc);
    curl_free(esc);
    p = page(query);
    snprintf(out, sizeof(out), "%s", ids_of(p));
    ck_assert(json_is_null(json_object_get(p, "next")));
    json_decref(p);
    return out;
}

static void expect_400(const char *query, const char *field)
{
    char path[512];
    json_t *j = NULL;

    snprintf(path, sizeof(path), "/sessions?%s", query);
    ck_assert_msg(call("GET", path, NULL, &j) == 400, "GET %s", path);
    ck_assert_str_eq(json_string_value(json_object_get(j, "field")), field);
    json_decref(j);
}

/* "a,b" from two ids. */
static const char *pair(const char *a, const char *b)
{
    static char out[256];

    snprintf(out, sizeof(out), "%s,%s", a, b);
    return out;
}

/* ---- rename ------------------------------------------------------------------------ */

START_TEST(test_rename)
{
    char *a = new_session(), *b = new_session(), field[32], body[1200], big[1000];
    json_t *e, *st;
    size_t n;

    /* Named before its first message: the message does not rename it. */
    rename_ok(a, "Trip to Lisbon");
    say(a, "hello there, plan my trip");
    json_decref(state_answered(a, 1));
    e = list_entry(a);
    ck_assert_str_eq(title_of(e), "Trip to Lisbon");
    json_decref(e);
    /* Named after it: the name replaces the automatic title, for good. */
    say(b, "first words here");
    json_decref(state_answered(b, 1));
    e = list_entry(b);
    ck_assert_str_eq(title_of(e), "first words here");
    json_decref(e);
    rename_ok(b, "Renamed \\u00e9t\\u00e9");
    say(b, "second words");
    json_decref(state_answered(b, 2));
    e = list_entry(b);
    ck_assert_str_eq(title_of(e), "Renamed \xc3\xa9t\xc3\xa9");
    json_decref(e);

    /* Anything but a title that is a string, not blank, of 200 characters at most. */
    {
        static const char *const bad[] = {"{}",
                                          "{\"title\":\"\"}",
                                          "{\"title\":\" \\t\\n\"}",
                                          "{\"title\":5}",
                                          "{\"title\":null}",
                                          "[\"title\"]",
                                          "not json",
                                          "{\"title\":[\"x\"]}"};

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            ck_assert_msg(rename_raw(a, bad[i], field, sizeof(field)) == 400, "%s",
                          bad[i]);
            ck_assert_str_eq(field, "title");
        }
    }
    /* 200 characters pass (two bytes each here), 201 do not. */
    for (n = 0; n < 200; n++)
        memcpy(big + 2 * n, "\xc3\xa9", 2);
    big[2 * n] = '\0';
    snprintf(body, sizeof(body), "{\"title\":\"%s\"}", big);
    ck_assert_int_eq(rename_raw(a, body, NULL, 0), 200);
    snprintf(body, sizeof(body), "{\"title\":\"%sx\"}", big);
    ck_assert_int_eq(rename_raw(a, body, field, sizeof(field)), 400);
    ck_assert_str_eq(field, "title");
    rename_ok(a, "Trip to Lisbon");
    /* Unknown session. */
    ck_assert_int_eq(rename_raw("no-such-session", "{\"title\":\"x\"}", NULL, 0), 404);
    /* The state is not touched by a rename. */
    st = get_state(a);
    ck_assert_int_eq(json_array_size(json_object_get(st, "userMessages")), 1);
    json_decref(st);
    free(a);
    free(b);
}
END_TEST

/* With a file database the name survives a restart, and still wins over messages. */
START_TEST(test_rename_survives_restart)
{
    char *a = new_session();
    json_t *e;

    say(a, "the automatic title");
    json_decref(state_answered(a, 1));
    rename_ok(a, "Kept across restarts");
    restart();
    e = list_entry(a);
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(title_of(e), "Kept across restarts");
    json_decref(e);
    say(a, "after the restart");
    json_decref(state_answered(a, 2));
    e = list_entry(a);
    ck_assert_str_eq(title_of(e), "Kept across restarts");
    json_decref(e);
    free(a);
}
END_TEST

/* ---- search --------------------------------------------------------------------------
 */

/*
 * Three sessions: one hit by its title, one by a user message, one by an
 * assistant message (the calculator's answer); every word must be somewhere
 * in the session; the last word is a prefix; newest first; pages.
 */
static void check_search(bool file)
{
    char *a = new_session(), *b = new_session(), *c = new_session(), *d = new_session();
    char query[256];
    json_t *p;
    long long next;

    say(a, "zqalpha and zqbravo notes");
    json_decref(state_answered(a, 1));
    /* "Newest first" must have no tie to break: b's last input a later
       millisecond than a's; with a store, whose rows move updated_at only by
       more than a second (store.h), a later second. */
    usleep(file || itest_on_postgres() ? 1100000 : 3000);
    say(b, "zqbravo meets zqcharlie");
    json_decref(state_answered(b, 1));
    say(c, "nothing special");
    json_decref(state_answered(c, 1));
    rename_ok(c, "Zqdelta Plans");
    say(d, "what is 4321*7?");
    json_decref(state_answered(d, 1));

    ck_assert_str_eq(search("zqalpha"), a);
    ck_assert_str_eq(search("zqbravo"), pair(b, a)); /* newest first */
    ck_assert_str_eq(search("ZQBRAVO zqalpha"), a);  /* every word, any case */
    ck_assert_str_eq(search("zqbravo zqcharlie"), b);
    ck_assert_str_eq(search("zqalpha zqcharlie"), ""); /* not all in one session */
    ck_assert_str_eq(search("zqdelta"), c);            /* the title */
    ck_assert_str_eq(search("zqdelta nothing"), c);    /* title and message */
    ck_assert_str_eq(search("30247"), d);              /* the answer: 4321*7 */
    ck_assert_str_eq(search("zqbra"), pair(b, a));     /* the last word, a prefix */
    ck_assert_str_eq(search("zqalpha zqbra"), a);
    ck_assert_str_eq(search("zqbra zqalpha"), ""); /* only the last word is a prefix */
    ck_assert_str_eq(search("zqnothing"), "");
    ck_assert_str_eq(search("zqalpha, zqbravo!"), a); /* punctuation is no word */

    /* Pages: limit 1, then before = next. */
    p = page("q=zqbravo&limit=1");
    ck_assert_str_eq(ids_of(p), b);
    ck_assert(json_is_integer(json_object_get(p, "next")));
    next = json_integer_value(json_object_get(p, "next"));
    ck_assert_int_eq(
        next, json_integer_value(json_object_get(
                  json_array_get(json_object_get(p, "sessions"), 0), "updatedAt")));
    json_decref(p);
    snprintf(query, sizeof(query), "q=zqbravo&limit=1&before=%lld", next);
    p = page(query);
    ck_assert_str_eq(ids_of(p), a);
    ck_assert(json_is_null(json_object_get(p, "next")));
    json_decref(p);
    p = page("q=zqbravo&before=0");
    ck_assert_str_eq(ids_of(p), "");
    json_decref(p);
    /* Without q, the same pages over every session; without anything, the array. */
    p = page("limit=2");
    /* Two, and those that share the second's updatedAt (sessions made within
       one millisecond and not yet updated a second later tie). */
    ck_assert_uint_ge(json_array_size(json_object_get(p, "sessions")), 2);
    ck_assert(json_is_integer(json_object_get(p, "next")));
    json_decref(p);

    expect_400("q=x&limit=0", "limit");
    expect_400("q=x&limit=-3", "limit");
    expect_400("q=x&limit=ten", "limit");
    expect_400("q=x&before=-1", "before");
    expect_400("q=x&before=yesterday", "before");
    expect_400("q=a%20b%20c%20d%20e%20f%20g%20h%20i%20j%20k%20l%20m%20n%20o%20p%20q",
               "q");

    if (file) {
        restart();
        ck_assert_str_eq(search("zqbravo"), pair(b, a));
        ck_assert_str_eq(search("zqdelta"), c);
        ck_assert_str_eq(search("30247"), d);
        /* Deleted: gone from the index too. */
        snprintf(query, sizeof(query), "/sessions/%s", a);
        ck_assert_int_eq(call("DELETE", query, NULL, NULL), 204);
        ck_assert_str_eq(search("zqbravo"), b);
        restart();
        ck_assert_str_eq(search("zqalpha"), "");
    }
    free(a);
    free(b);
    free(c);
    free(d);
}

START_TEST(test_search_file)
{
    check_search(true);
}
END_TEST

START_TEST(test_search_memory)
{
    check_search(false);
}
END_TEST

/* ---- export and import ----------------------------------------------------------------
 */

/* curl's header callback: keep Content-Disposition. */
static size_t on_header(char *buf, size_t size, size_t n, void *arg)
{
    size_t len = size * n;

    if (len > 20 && !strncasecmp(buf, "Content-Disposition:", 20))
        snprintf(arg, 256, "%.*s", (int)(len - 20), buf + 20);
    return len;
}

/* GET .../export: the document (NEW), with its Content-Disposition checked. */
static json_t *export_doc(const char *sid)
{
    char url[256], path[128], disposition[256] = "";
    CURL *c = curl_easy_init();
    FILE *mem;
    char *body = NULL;
    size_t len = 0;
    long status = 0;
    json_t *j;

    snprintf(path, sizeof(path), "/sessions/%s/export", sid);
    url_of(url, sizeof(url), path);
    mem = open_memstream(&body, &len);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, mem);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, disposition);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    fclose(mem);
    ck_assert_int_eq(status, 200);
    ck_assert_msg(strstr(disposition, "attachment") && strstr(disposition, "filename="),
                  "Content-Disposition: %s", disposition);
    j = json_loadb(body, len, 0, NULL);
    free(body);
    ck_assert_ptr_nonnull(j);
    return j;
}

/* POST the document to .../sessions/import: the status and the answer (NEW). */
static long import_doc(json_t *doc, json_t **answer)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    long status;

    ck_assert_ptr_nonnull(text);
    status = call("POST", "/sessions/import", text, answer);
    free(text);
    return status;
}

static size_t session_count(void)
{
    json_t *list = NULL;
    size_t n;

    ck_assert_int_eq(call("GET", "/sessions", NULL, &list), 200);
    n = json_array_size(list);
    json_decref(list);
    return n;
}

/* The export replays into an equal session, which persists like any other. */
START_TEST(test_export_import_equal)
{
    char *a = new_session(), path[128];
    json_t *doc, *ans = NULL, *st_a, *st_b, *e, *hist_a = NULL, *hist_b = NULL;
    const char *b;
    size_t i;

    say(a, "what is 12*(3+4)?");
    json_decref(state_answered(a, 1));
    say(a, "and thanks a lot");
    json_decref(state_answered(a, 2));
    rename_ok(a, "Arithmetic");
    doc = export_doc(a);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "format")),
                     "reflexor-session");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "version")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "title")), "Arithmetic");
    json_array_foreach(json_object_get(doc, "inputs"), i, e)
    {
        ck_assert_int_eq(json_integer_value(json_object_get(e, "seq")), (long long)i + 1);
        ck_assert(json_is_object(json_object_get(e, "input")));
    }
    ck_assert_uint_ge(json_array_size(json_object_get(doc, "inputs")), 6);

    ck_assert_int_eq(import_doc(doc, &ans), 201);
    b = json_string_value(json_object_get(ans, "id"));
    ck_assert_ptr_nonnull(b);
    ck_assert_str_ne(b, a);
    st_a = state_answered(a, 2);
    st_b = state_answered(b, 2);
    ck_assert_msg(json_equal(st_a, st_b), "the imported state differs");
    /* Nothing ran for the imported history: a moment later it is the same. */
    usleep(300000);
    json_decref(st_b);
    st_b = get_state(b);
    ck_assert(json_equal(st_a, st_b));
    e = list_entry(b);
    ck_assert_str_eq(title_of(e), "Arithmetic");
    json_decref(e);
    /* The same log, input for input. */
    snprintf(path, sizeof(path), "/sessions/%s/history", a);
    ck_assert_int_eq(call("GET", path, NULL, &hist_a), 200);
    snprintf(path, sizeof(path), "/sessions/%s/history", b);
    ck_assert_int_eq(call("GET", path, NULL, &hist_b), 200);
    ck_assert(json_equal(hist_a, hist_b));
    /* Searchable at once, and still there after a restart. */
    {
        const char *hits = search("arithmetic"); /* same updatedAt: ordered by id */

        ck_assert(!strcmp(hits, pair(b, a)) || !strcmp(hits, pair(a, b)));
    }
    restart();
    json_decref(st_b);
    st_b = get_state(b);
    ck_assert(json_equal(st_a, st_b));
    e = list_entry(b);
    ck_assert_str_eq(title_of(e), "Arithmetic");
    json_decref(e);
    json_decref(hist_a);
    json_decref(hist_b);
    json_decref(st_a);
    json_decref(st_b);
    json_decref(ans);
    json_decref(doc);
    free(a);
}
END_TEST

/* A refused document makes nothing: no session, in memory or (after a restart) in the
 * log. */
START_TEST(test_import_refused)
{
    char *a = new_session(), *text;
    json_t *doc, *bad, *ans = NULL, *in;
    size_t before;

    say(a, "what is 2+2?");
    json_decref(state_answered(a, 1));
    doc = export_doc(a);
    before = session_count();

    /* Input 2 stamped before input 1: the machine refuses it, and says which. */
    bad = json_deep_copy(doc);
    in = json_object_get(json_array_get(json_object_get(bad, "inputs"), 2), "input");
    json_object_set_new(in, "timestamp", json_integer(1));
    ck_assert_int_eq(import_doc(bad, &ans), 400);
    ck_assert_str_eq(json_string_value(json_object_get(ans, "error")), "invalid-input");
    ck_assert_int_eq(json_integer_value(json_object_get(ans, "index")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(ans, "reason")),
                     "stale-timestamp");
    json_decref(ans);
    json_decref(bad);

    /* A tool result for a call nobody made (input 2 is its toolkit-start-call). */
    bad = json_deep_copy(doc);
    in = json_object_get(json_array_get(json_object_get(bad, "inputs"), 3), "input");
    ck_assert_str_eq(json_string_value(json_object_get(in, "type")), "toolkit-respond");
    json_object_set_new(in, "toolCallId", json_string("forged"));
    ck_assert_int_eq(import_doc(bad, &ans), 400);
    ck_assert_int_eq(json_integer_value(json_object_get(ans, "index")), 3);
    ck_assert_str_eq(json_string_value(json_object_get(ans, "reason")), "unknown-id");
    json_decref(ans);
    json_decref(bad);

    /* Not an input at all; a seq out of place. */
    bad = json_deep_copy(doc);
    in = json_object_get(json_array_get(json_object_get(bad, "inputs"), 1), "input");
    json_object_set_new(in, "type", json_string("no-such-type"));
    ck_assert_int_eq(import_doc(bad, &ans), 400);
    ck_assert_int_eq(json_integer_value(json_object_get(ans, "index")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(ans, "reason")), "invalid");
    ck_assert_str_eq(json_string_value(json_object_get(ans, "field")), "type");
    json_decref(ans);
    json_decref(bad);
    bad = json_deep_copy(doc);
    json_object_set_new(json_array_get(json_object_get(bad, "inputs"), 0), "seq",
                        json_integer(7));
    ck_assert_int_eq(import_doc(bad, &ans), 400);
    ck_assert_int_eq(json_integer_value(json_object_get(ans, "index")), 0);
    ck_assert_str_eq(json_string_value(json_object_get(ans, "field")), "seq");
    json_decref(ans);
    json_decref(bad);

    /* The document's own fields. */
    {
        static const char *const field[] = {"format", "version", "inputs", "title"};
        json_t *value[] = {json_string("other"), json_integer(2), json_object(),
                           json_integer(3)};

        for (size_t i = 0; i < 4; i++) {
            bad = json_deep_copy(doc);
            json_object_set_new(bad, field[i], value[i]);
            ck_assert_int_eq(import_doc(bad, &ans), 400);
            ck_assert_str_eq(json_string_value(json_object_get(ans, "field")), field[i]);
            ck_assert_ptr_null(json_object_get(ans, "index"));
            json_decref(ans);
            json_decref(bad);
        }
    }
    ck_assert_int_eq(call("POST", "/sessions/import", "not json", NULL), 400);
    ck_assert_int_eq(call("GET", "/sessions/import", NULL, NULL), 405);
    ck_assert_uint_eq(session_count(), before);

    /* A document over limits.body_max (4096) is taken up to limits.import_max. */
    text = json_dumps(doc, JSON_COMPACT);
    ck_assert_uint_gt(strlen(text), 0);
    free(text);
    bad = json_deep_copy(doc);
    {
        char pad[6000];

        memset(pad, 'p', sizeof(pad) - 1);
        pad[sizeof(pad) - 1] = '\0';
        json_object_set_new(bad, "padding", json_string(pad)); /* unknown: ignored */
    }
    ck_assert_int_eq(import_doc(bad, &ans), 201);
    json_decref(ans);
    json_decref(bad);
    bad = json_deep_copy(doc);
    {
        char *pad = malloc(300000);

        memset(pad, 'p', 299999);
        pad[299999] = '\0';
        json_object_set_new(bad, "padding", json_string(pad));
        free(pad);
    }
    ck_assert_int_eq(import_doc(bad, NULL), 413);
    json_decref(bad);
    ck_assert_uint_eq(session_count(), before + 1);

    restart();
    ck_assert_uint_eq(session_count(), before + 1);
    json_decref(doc);
    free(a);
}
END_TEST

static bool answers_at_least(json_t *state, void *arg)
{
    return json_array_size(json_object_get(state, "assistantMessages")) >=
           (size_t) * (int *)arg;
}

/*
 * A log whose last input is a user message: its final state wants an answer,
 * so the brain runs, once, for the imported session; nothing else runs.
 */
START_TEST(test_import_runs_what_the_state_wants)
{
    static const char doc[] =
        "{\"format\":\"reflexor-session\",\"version\":1,\"title\":null,\"inputs\":["
        "{\"seq\":1,\"input\":{\"type\":\"user-send-message\",\"timestamp\":1000,"
        "\"messageId\":\"u1\",\"content\":\"what is 6*7?\"}}]}";
    char url[256], path[128];
    json_t *ans = NULL, *st;
    const char *sid;
    int two = 2;

    ck_assert_int_eq(call("POST", "/sessions/import", doc, &ans), 201);
    sid = json_string_value(json_object_get(ans, "id"));
    st = state_answered(sid, 1);
    ck_assert_uint_eq(json_array_size(json_object_get(st, "assistantMessages")), 1);
    ck_assert_uint_eq(json_array_size(json_object_get(st, "toolCallRecords")), 1);
    json_decref(st);
    /* Once: no second answer comes. */
    snprintf(path, sizeof(path), "/sessions/%s", sid);
    url_of(url, sizeof(url), path);
    st = itest_poll_json(url, answers_at_least, &two, 500);
    ck_assert_uint_eq(json_array_size(json_object_get(st, "assistantMessages")), 1);
    json_decref(st);
    json_decref(ans);
}
END_TEST

/* Without a log there is nothing to export (501); import works in memory. */
START_TEST(test_export_needs_a_log)
{
    char *a = new_session(), path[128];
    static const char doc[] =
        "{\"format\":\"reflexor-session\",\"version\":1,\"title\":\"In memory\","
        "\"inputs\":[{\"seq\":1,\"input\":{\"type\":\"user-send-message\","
        "\"timestamp\":1000,\"messageId\":\"u1\",\"content\":\"hi there\"}}]}";
    json_t *ans = NULL, *e;

    snprintf(path, sizeof(path), "/sessions/%s/export", a);
    ck_assert_int_eq(call("GET", path, NULL, NULL), 501);
    ck_assert_int_eq(call("POST", "/sessions/import", doc, &ans), 201);
    e = list_entry(json_string_value(json_object_get(ans, "id")));
    ck_assert_str_eq(title_of(e), "In memory");
    json_decref(e);
    json_decref(state_answered(json_string_value(json_object_get(ans, "id")), 1));
    json_decref(ans);
    free(a);
}
END_TEST

/* ---- the sessions feed
 * ------------------------------------------------------------------ */

struct want {
    const char *type, *id, *title;
    long long count; /* messageCount at least, or -1 */
};

static bool feed_matches(json_t *data, void *arg)
{
    const struct want *w = arg;
    const char *t = json_string_value(json_object_get(data, "type"));
    const char *id = json_string_value(json_object_get(data, "id"));
    const char *title = json_string_value(json_object_get(data, "title"));

    return t && !strcmp(t, w->type) && id && !strcmp(id, w->id) &&
           (!w->title || (title && !strcmp(title, w->title))) &&
           (w->count < 0 ||
            json_integer_value(json_object_get(data, "messageCount")) >= w->count);
}

static int feed_wait(struct itest_sse *e, const char *type, const char *id,
                     const char *title, long long count)
{
    struct want w = {type, id, title, count};
    int i = itest_sse_wait_for(e, 0, feed_matches, &w, WAIT_MS);

    ck_assert_msg(i >= 0, "no %s for %s on the feed", type, id);
    return i;
}

START_TEST(test_events_feed)
{
    struct itest_sse ev, other;
    char url[256], path[128], *a;
    json_t *ans = NULL, *d;
    const char *b;
    int created, updated, renamed, deleted;
    size_t i, n;

    url_of(url, sizeof(url), "/events");
    ck_assert_int_eq(itest_sse_open(&ev, url, NULL), 0);
    ck_assert_int_eq(itest_sse_open(&other, url, NULL), 0);
    ck_assert(itest_sse_wait_raw(&ev, "retry:", WAIT_MS));
    ck_assert(itest_sse_wait_raw(&other, "retry:", WAIT_MS));

    a = new_session();
    created = feed_wait(&ev, "session-created", a, "New chat", 0);
    say(a, "feed me a title");
    updated = feed_wait(&ev, "session-updated", a, "feed me a title", 2);
    ck_assert_int_gt(updated, created);
    json_decref(state_answered(a, 1));
    rename_ok(a, "Fed");
    renamed = feed_wait(&ev, "session-updated", a, "Fed", 2);
    snprintf(path, sizeof(path), "/sessions/%s", a);
    ck_assert_int_eq(call("DELETE", path, NULL, NULL), 204);
    deleted = feed_wait(&ev, "session-deleted", a, NULL, -1);
    ck_assert_int_gt(deleted, renamed);
    /* Every tab hears the same. */
    feed_wait(&other, "session-deleted", a, NULL, -1);

    /* An import is a creation like any other. */
    ck_assert_int_eq(call("POST", "/sessions/import",
                          "{\"format\":\"reflexor-session\",\"version\":1,"
                          "\"title\":\"Imported\",\"inputs\":[]}",
                          &ans),
                     201);
    b = json_string_value(json_object_get(ans, "id"));
    feed_wait(&ev, "session-created", b, "Imported", 0);

    /* Nothing of a session follows its deletion; entries carry the list's fields. */
    n = itest_sse_count(&ev);
    for (i = (size_t)deleted + 1; i < n; i++) {
        d = itest_sse_event(&ev, i);
        ck_assert_str_ne(json_string_value(json_object_get(d, "id")), a);
    }
    d = itest_sse_event(&ev, (size_t)created);
    ck_assert(json_is_integer(json_object_get(d, "createdAt")));
    ck_assert(json_is_integer(json_object_get(d, "updatedAt")));
    ck_assert(json_is_integer(json_object_get(d, "messageCount")));
    itest_sse_close(&ev);
    itest_sse_close(&other);
    json_decref(ans);
    free(a);
}
END_TEST

/* The feed is an API route: it takes the token like the others. */
START_TEST(test_events_need_the_token)
{
    char url[256];
    struct itest_sse ev;

    snprintf(url, sizeof(url), "%s/api/reflexor/events", srv.base);
    ck_assert_int_eq(itest_get_status(&srv, "/api/reflexor/events"), 401);
    snprintf(url, sizeof(url), "%s/api/reflexor/events?token=s3cret", srv.base);
    ck_assert_int_eq(itest_sse_open(&ev, url, NULL), 0);
    ck_assert(itest_sse_wait_raw(&ev, "retry:", WAIT_MS));
    itest_sse_close(&ev);
}
END_TEST

Suite *sessions_api_suite(void);
Suite *sessions_api_suite(void)
{
    Suite *s = suite_create("sessions_api");
    TCase *file = tcase_create("file"), *memory = tcase_create("memory"),
          *auth = tcase_create("auth");
    int t = getenv("RX_SERVER_WRAPPER") ? 600 : 120;

    /* Checked: a test that restarts the server owns it (it runs in the test's process).
     */
    tcase_add_checked_fixture(file, start_file, stop_file);
    tcase_set_timeout(file, t);
    tcase_add_test(file, test_rename);
    tcase_add_test(file, test_rename_survives_restart);
    tcase_add_test(file, test_search_file);
    tcase_add_test(file, test_export_import_equal);
    tcase_add_test(file, test_import_refused);
    tcase_add_test(file, test_import_runs_what_the_state_wants);
    suite_add_tcase(s, file);

    tcase_add_unchecked_fixture(memory, start_memory, stop);
    tcase_set_timeout(memory, t);
    tcase_add_test(memory, test_rename);
    tcase_add_test(memory, test_search_memory);
    if (itest_on_postgres()) /* the "memory" server has a log there */
        itest_skip("sessions_api/test_export_needs_a_log",
                   "the 501 of a server without a log");
    else
        tcase_add_test(memory, test_export_needs_a_log);
    tcase_add_test(memory, test_events_feed);
    suite_add_tcase(s, memory);

    tcase_add_unchecked_fixture(auth, start_auth, stop);
    tcase_set_timeout(auth, t);
    tcase_add_test(auth, test_events_need_the_token);
    suite_add_tcase(s, auth);
    return s;
}
