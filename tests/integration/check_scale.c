/*
 * check_scale - sessions beyond memory against the real binary (SPEC 6.2,
 * issue 29): a store of 20 000 finished chats, filled through the store API
 * by bench/scale_fill (itest_fill), served under limits.resident_sessions
 * 100 and a short sessions.idle_ms:
 *   - start-up loads only the sessions with work in flight, and answers them;
 *     on PostgreSQL not those another live node owns, which it claims and
 *     answers once that node's lease lapses;
 *   - the list pages through every stored session exactly once, and a search
 *     finds every session holding its word, without loading them;
 *   - every route family touches a cold session correctly (the state, its
 *     stream, a finished message's stream, history, ?at=, fork, export,
 *     rename, delete, /v1 with X-Reflexor-Session, LangGraph threads), each
 *     one a load (reflexor_sessions_loaded_total moves);
 *   - a subscriber of a cold session gets its events, and a message posted
 *     to a cold session is answered by the embedded brain;
 *   - touching 1000 sessions keeps reflexor_sessions_resident near the limit
 *     and evicts (reflexor_sessions_evicted_total > 0);
 *   - an answer that streams for seconds survives a sweep of touches that
 *     evicts everything idle around it.
 * The kill -9 loop over loads and evictions is check_scale_crash.c. With
 * RX_PG_DIR the same runs on PostgreSQL (the fill goes to the database the
 * server's --db stands for). One server for the TCase (unchecked fixture),
 * so the tests run in the order added. No timings are asserted: waits only
 * bound hangs.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/itest_scale.h"

#define SESSIONS        20000
#define EVERY           100  /* the search word is in every 100th session */
#define BUSY_EVERY      4000 /* every 4000th ends on an unanswered message */
#define RESIDENT        100  /* limits.resident_sessions */
#define SLACK           10   /* pinned sessions (streams, effects) over the limit */
#define FOREIGN         4    /* on PostgreSQL, busy ones another live node owns ... */
#define FOREIGN_LEASE_S 5    /* ... for this long after the start (4x slow builds) */
#define WORD            "zephyrquartz"
#define PREFIX          "/api/reflexor"

static int wait_ms(void)
{
    return getenv("RX_SERVER_WRAPPER") ? 180000 : 30000;
}

static struct itest_server srv;
static struct itest_scale store;
static char **ids; /* store.ids */

/* Short chunks, so answers end fast; "/slow" makes one 50 times slower. */
static const char config[] =
    "{\"brain\":{\"builtin\":{\"chunk_chars\":16,\"chunk_delay_ms\":2}},"
    " \"sessions\":{\"idle_ms\":200},"
    " \"limits\":{\"resident_sessions\":100},"
    " \"sse\":{\"retry_ms\":1000, \"ping_ms\":500}}";

/* ---- the store and the server --------------------------------------------------- */

/*
 * On PostgreSQL: the first FOREIGN busy sessions are owned by another node,
 * live for FOREIGN_LEASE_S more seconds, when this one starts. It must not
 * load them (they are that node's), and must claim and answer them once
 * that lease lapses (the orphan scan). -1 if the rows cannot be written.
 */
static int foreign_owner(void)
{
    char sql[1024];
    int len;

    len = snprintf(sql, sizeof(sql),
                   "INSERT INTO nodes(id, url, expires_at) VALUES('check-scale-other',"
                   " 'http://127.0.0.1:9', clock_timestamp() + interval '%d seconds');"
                   " INSERT INTO owners(session_id, node, since) VALUES",
                   itest_scale_slow_build() ? 4 * FOREIGN_LEASE_S : FOREIGN_LEASE_S);
    for (long k = 0; k < FOREIGN; k++)
        len += snprintf(sql + len, sizeof(sql) - (size_t)len,
                        "%s('%s', 'check-scale-other', now())", k ? ", " : "",
                        ids[(k + 1) * BUSY_EVERY - 1]);
    snprintf(sql + len, sizeof(sql) - (size_t)len,
             " ON CONFLICT (session_id) DO UPDATE SET node = EXCLUDED.node");
    return itest_pg_sql(store.db, sql, NULL, 0);
}

static void start(void)
{
    static const char *const fill[] = {
        "--sessions",   "20000", "--messages", "4",  "--every", "100",
        "--busy-every", "4000",  "--word",     WORD, NULL};
    const char *args[] = {"--db", store.db, NULL};

    ck_assert_msg(itest_scale_fill(&store, fill, SESSIONS) == 0,
                  "the store could not be filled");
    ids = store.ids;
    if (itest_on_postgres() && foreign_owner()) {
        itest_scale_remove(&store);
        ck_abort_msg("cannot make sessions another node's");
    }
    if (itest_server_start(&srv, config, args)) {
        itest_scale_remove(&store); /* no teardown runs after a failed setup */
        ck_abort_msg("server did not start");
    }
}

static void stop(void)
{
    ck_assert_int_eq(itest_server_stop(&srv), 0);
    itest_scale_remove(&store);
}

static bool is_busy(long i)
{
    return i % BUSY_EVERY == BUSY_EVERY - 1;
}

/*
 * Session j of test `slot`: spread over the store, distinct across slots and
 * never a busy one, so a test that wants a cold session gets one no earlier
 * test touched.
 */
static const char *pick(int slot, int j)
{
    long i = ((long)slot * 1009 + j) * 7919 % SESSIONS;

    while (is_busy(i))
        i = (i + 1) % SESSIONS;
    return ids[i];
}

/* ---- requests -------------------------------------------------------------------- */

/* A request that must be answered: its status, its JSON in *out (NEW) if asked. */
static long call(const char *method, const char *path, const char *body,
                 const char *const *headers, json_t **out)
{
    long status = itest_scale_call(&srv, method, path, body, headers, wait_ms(), out);

    ck_assert_msg(status > 0, "%s %s: no answer", method, path);
    return status;
}

static json_t *state_of(const char *sid)
{
    char path[256];
    json_t *j = NULL;

    snprintf(path, sizeof(path), PREFIX "/sessions/%s", sid);
    ck_assert_int_eq(call("GET", path, NULL, NULL, &j), 200);
    return j;
}

static size_t count_of(json_t *state, const char *list)
{
    return json_array_size(json_object_get(state, list));
}

/* A metric of issue 29; it must exist (-1 is a server without the feature). */
static long metric(const char *name)
{
    long v = itest_metric(&srv, name);

    ck_assert_msg(v >= 0, "GET /metrics has no %s", name);
    return v;
}

/* Each cold touch loads: the loads counter moved since `before`. */
static void loaded_since(long before, const char *what)
{
    long now = metric("reflexor_sessions_loaded_total");

    ck_assert_msg(now > before, "%s loaded no session (loaded_total %ld -> %ld)", what,
                  before, now);
}

static json_t *state_when_answered(const char *sid, size_t n)
{
    char url[256];
    json_t *j;

    snprintf(url, sizeof(url), "%s" PREFIX "/sessions/%s", srv.base, sid);
    j = itest_poll_json(url, itest_scale_answered, &n, wait_ms());
    ck_assert_msg(j && itest_scale_answered(j, &n),
                  "session %s never had %zu complete answers", sid, n);
    return j;
}

static long say(const char *sid, const char *id, const char *text)
{
    return itest_scale_say(&srv, sid, id, text);
}

/* ---- start-up, list, search ------------------------------------------------------ */

/* How many busy sessions the newest page lists as answered (4 messages). */
static long busy_answered(void)
{
    json_t *p = NULL, *e;
    long n = 0;
    size_t i;

    ck_assert_int_eq(call("GET", PREFIX "/sessions?limit=20", NULL, NULL, &p), 200);
    json_array_foreach(json_object_get(p, "sessions"), i, e)
    {
        const char *id = json_string_value(json_object_get(e, "id"));

        for (long k = BUSY_EVERY - 1; id && k < SESSIONS; k += BUSY_EVERY)
            if (!strcmp(id, ids[k]) &&
                json_integer_value(json_object_get(e, "messageCount")) == 4)
                n++;
    }
    json_decref(p);
    return n;
}

START_TEST(test_startup_loads_only_busy)
{
    long busy = SESSIONS / BUSY_EVERY, end = itest_now_ms() + wait_ms();
    long resident = metric("reflexor_sessions_resident");
    long loaded = metric("reflexor_sessions_loaded_total");
    /* On PostgreSQL the ones another live node owns are its (SPEC 6.2). */
    long mine = itest_on_postgres() ? busy - FOREIGN : busy;

    /* The busy ones (and perhaps the seed's `default`): not the 20 000. */
    ck_assert_msg(
        resident <= mine + 2 && loaded <= mine + 1,
        "resident %ld, loaded %ld after start; %ld busy, %ld of them this node's",
        resident, loaded, busy, mine);
    /* Each was resumed at start, untouched, or claimed and resumed once the other
       node's lease lapsed: the list (the store) shows its answer. */
    while (busy_answered() < busy && itest_now_ms() < end)
        usleep(50000);
    ck_assert_int_eq(busy_answered(), busy);
    ck_assert_int_le(metric("reflexor_sessions_loaded_total"), busy + 2);
}
END_TEST

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The last entry page_all saw (NEW). */
static json_t *oldest;

/*
 * Page `query` (q=...&limit=L) with before = next until next is null: every
 * id in order into *out (malloc'd, *n of them), updatedAt never going up.
 */
static void page_all(const char *query, char ***out, size_t *n)
{
    char path[512];
    long long before = -1, last = -1;
    size_t cap = 1024;

    *out = malloc(cap * sizeof(**out));
    *n = 0;
    for (int pages = 0; pages < 1000; pages++) {
        json_t *p = NULL, *e, *next;
        size_t i;

        if (before < 0)
            snprintf(path, sizeof(path), PREFIX "/sessions?%s", query);
        else
            snprintf(path, sizeof(path), PREFIX "/sessions?%s&before=%lld", query,
                     before);
        ck_assert_int_eq(call("GET", path, NULL, NULL, &p), 200);
        json_array_foreach(json_object_get(p, "sessions"), i, e)
        {
            long long up = json_integer_value(json_object_get(e, "updatedAt"));

            ck_assert_msg(last < 0 || up <= last, "the list went back up in time");
            last = up;
            if (*n == cap)
                *out = realloc(*out, (cap *= 2) * sizeof(**out));
            (*out)[(*n)++] = strdup(json_string_value(json_object_get(e, "id")));
            json_decref(oldest);
            oldest = json_incref(e);
        }
        next = json_object_get(p, "next");
        before = json_is_integer(next) ? json_integer_value(next) : -1;
        json_decref(p);
        if (before < 0)
            return;
    }
    ck_abort_msg("more than 1000 pages");
}

/* Each of want[0..nw) is in got[0..ng) exactly once; others may be there (new). */
static void each_once(char **got, size_t ng, char **want, size_t nw)
{
    size_t j = 0;

    qsort(got, ng, sizeof(*got), cmp_str);
    for (size_t i = 1; i < ng; i++)
        ck_assert_msg(strcmp(got[i - 1], got[i]), "%s listed twice", got[i]);
    qsort(want, nw, sizeof(*want), cmp_str);
    for (size_t i = 0; i < nw; i++) {
        while (j < ng && strcmp(got[j], want[i]) < 0)
            j++;
        ck_assert_msg(j < ng && !strcmp(got[j], want[i]), "%s never listed", want[i]);
    }
}

START_TEST(test_list_pages_through_all)
{
    long resident0 = metric("reflexor_sessions_resident");
    char **got, **want = malloc(SESSIONS * sizeof(*want));
    const char *title;
    size_t n;

    page_all("limit=200", &got, &n);
    ck_assert_msg(n >= SESSIONS && n <= SESSIONS + 2, "%zu sessions listed", n);
    /* The oldest, last listed: as the store keeps it, never loaded. */
    ck_assert_ptr_nonnull(oldest);
    ck_assert_str_eq(json_string_value(json_object_get(oldest, "id")), ids[0]);
    ck_assert_int_eq(json_integer_value(json_object_get(oldest, "messageCount")), 4);
    title = json_string_value(json_object_get(oldest, "title"));
    ck_assert_msg(title && !strncmp(title, "First question 0 of chat 0:", 27), "title %s",
                  title ? title : "null");
    memcpy(want, ids, SESSIONS * sizeof(*want));
    each_once(got, n, want, SESSIONS);
    /* Listing loads nothing. */
    ck_assert_int_le(metric("reflexor_sessions_resident"), resident0 + 2);
    for (size_t i = 0; i < n; i++)
        free(got[i]);
    free(got);
    free(want);
}
END_TEST

START_TEST(test_search_finds_every_holder)
{
    char **got, *want[SESSIONS / EVERY];
    size_t n, nw = 0;

    for (long i = EVERY - 1; i < SESSIONS; i += EVERY)
        want[nw++] = ids[i];
    page_all("q=" WORD "&limit=50", &got, &n);
    ck_assert_uint_eq(n, nw);
    each_once(got, n, want, nw);
    for (size_t i = 0; i < n; i++)
        free(got[i]);
    free(got);
}
END_TEST

/* ---- every route family on a cold session ---------------------------------------- */

static bool has_type(json_t *data, void *arg)
{
    const char *t = json_string_value(json_object_get(data, "type"));

    return t && !strcmp(t, arg);
}

/* The stream at `path` gives an event of `type` (its data, NEW). */
static json_t *first_event(const char *path, const char *type)
{
    struct itest_sse e;
    char url[512];
    json_t *d;
    int at;

    snprintf(url, sizeof(url), "%s%s", srv.base, path);
    ck_assert_int_eq(itest_sse_open(&e, url, NULL), 0);
    at = itest_sse_wait_for(&e, 0, has_type, (void *)type, wait_ms());
    ck_assert_msg(at >= 0, "no %s event on %s", type, path);
    d = json_incref(itest_sse_event(&e, (size_t)at));
    itest_sse_close(&e);
    return d;
}

START_TEST(test_routes_touch_cold_sessions)
{
    char path[512], hdr[160], body[512];
    const char *headers[] = {"Content-Type: application/json", hdr, NULL};
    json_t *j = NULL, *st, *m;
    const char *sid, *content;
    long before;
    int k = 0;

    /* The state. */
    sid = pick(1, k++);
    before = metric("reflexor_sessions_loaded_total");
    st = state_of(sid);
    loaded_since(before, "GET /sessions/:sid");
    ck_assert_uint_eq(count_of(st, "userMessages"), 2);
    ck_assert_uint_eq(count_of(st, "assistantMessages"), 2);
    json_decref(st);

    /* Its SSE stream: the current state first. */
    sid = pick(1, k++);
    before = metric("reflexor_sessions_loaded_total");
    snprintf(path, sizeof(path), PREFIX "/sessions/%s/moorex", sid);
    j = first_event(path, "state-updated");
    loaded_since(before, "GET .../moorex");
    ck_assert_uint_eq(count_of(json_object_get(j, "state"), "userMessages"), 2);
    json_decref(j);

    /* A finished message's stream, then as JSON: the text the state holds. */
    sid = pick(1, k++);
    before = metric("reflexor_sessions_loaded_total");
    snprintf(path, sizeof(path), PREFIX "/sessions/%s/messages/a1", sid);
    j = first_event(path, "complete");
    loaded_since(before, "GET .../messages/:mid");
    st = state_of(sid);
    m = itest_last_assistant(st);
    content = json_string_value(json_object_get(m, "content"));
    ck_assert_ptr_nonnull(content);
    ck_assert_str_eq(json_string_value(json_object_get(j, "content")), content);
    ck_assert_int_eq(!strncmp(content, "Echo: Follow-up question 1", 26), 1);
    json_decref(j);
    ck_assert_int_eq(call("GET", path, NULL, NULL, &j), 200);
    ck_assert_str_eq(json_string_value(json_object_get(j, "content")), content);
    ck_assert(json_is_true(json_object_get(j, "isComplete")));
    json_decref(j);
    json_decref(st);

    /* History, ?at=, export and fork read the log: right whether loaded or not. */
    sid = pick(1, k++);
    snprintf(path, sizeof(path), PREFIX "/sessions/%s/history?after=0&limit=100", sid);
    ck_assert_int_eq(call("GET", path, NULL, NULL, &j), 200);
    ck_assert_uint_eq(json_array_size(j), 6);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(j, 5), "seq")), 6);
    json_decref(j);
    sid = pick(1, k++);
    snprintf(path, sizeof(path), PREFIX "/sessions/%s?at=3", sid);
    ck_assert_int_eq(call("GET", path, NULL, NULL, &j), 200);
    ck_assert_uint_eq(count_of(j, "userMessages"), 1);
    ck_assert_uint_eq(count_of(j, "assistantMessages"), 1);
    json_decref(j);
    sid = pick(1, k++);
    snprintf(path, sizeof(path), PREFIX "/sessions/%s/export", sid);
    ck_assert_int_eq(call("GET", path, NULL, NULL, &j), 200);
    ck_assert_str_eq(json_string_value(json_object_get(j, "format")), "reflexor-session");
    ck_assert_uint_eq(json_array_size(json_object_get(j, "inputs")), 6);
    json_decref(j);
    sid = pick(1, k++);
    snprintf(path, sizeof(path), PREFIX "/sessions/%s/fork", sid);
    ck_assert_int_eq(call("POST", path, "{\"at\":3}", NULL, &j), 201);
    st = state_of(json_string_value(json_object_get(j, "id")));
    ck_assert_uint_eq(count_of(st, "userMessages"), 1);
    json_decref(st);
    json_decref(j);

    /* Rename and delete. */
    sid = pick(1, k++);
    snprintf(path, sizeof(path), PREFIX "/sessions/%s", sid);
    ck_assert_int_eq(call("PATCH", path, "{\"title\":\"Renamed cold\"}", NULL, NULL),
                     200);
    st = state_of(sid);
    ck_assert_uint_eq(count_of(st, "userMessages"), 2);
    json_decref(st);
    sid = pick(1, k++);
    snprintf(path, sizeof(path), PREFIX "/sessions/%s", sid);
    ck_assert_int_eq(call("DELETE", path, NULL, NULL, NULL), 204);
    ck_assert_int_eq(call("GET", path, NULL, NULL, NULL), 404);

    /* /v1 continuing a cold session it names: the session gets the turn. */
    sid = pick(1, k++);
    snprintf(hdr, sizeof(hdr), "X-Reflexor-Session: %s", sid);
    snprintf(body, sizeof(body),
             "{\"model\":\"reflexor\",\"messages\":[{\"role\":\"user\","
             "\"content\":\"over openai to a cold chat\"}]}");
    before = metric("reflexor_sessions_loaded_total");
    ck_assert_int_eq(call("POST", "/v1/chat/completions", body, headers, &j), 200);
    loaded_since(before, "POST /v1/chat/completions");
    content = json_string_value(json_object_get(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"),
        "content"));
    ck_assert_msg(content && strstr(content, "Echo: over openai to a cold chat"), "%s",
                  content ? content : "no content");
    json_decref(j);
    st = state_when_answered(sid, 3);
    ck_assert_uint_eq(count_of(st, "userMessages"), 3);
    json_decref(st);

    /* LangGraph: the thread is the session, its state its messages. */
    sid = pick(1, k++);
    before = metric("reflexor_sessions_loaded_total");
    snprintf(path, sizeof(path), "/api/langgraph/threads/%s", sid);
    ck_assert_int_eq(call("GET", path, NULL, NULL, &j), 200);
    loaded_since(before, "GET /threads/:id");
    ck_assert_str_eq(json_string_value(json_object_get(j, "thread_id")), sid);
    ck_assert_uint_eq(
        json_array_size(json_object_get(json_object_get(j, "values"), "messages")), 4);
    json_decref(j);
    sid = pick(1, k++);
    snprintf(path, sizeof(path), "/api/langgraph/threads/%s/state", sid);
    ck_assert_int_eq(call("GET", path, NULL, NULL, &j), 200);
    ck_assert_uint_eq(
        json_array_size(json_object_get(json_object_get(j, "values"), "messages")), 4);
    json_decref(j);
}
END_TEST

/* A stream's state-updated with `n` complete answers. */
static bool state_answered(json_t *data, void *arg)
{
    return has_type(data, (char *)"state-updated") &&
           itest_scale_answered(json_object_get(data, "state"), arg);
}

START_TEST(test_subscriber_of_cold_session)
{
    const char *sid = pick(2, 0);
    char url[512];
    struct itest_sse e;
    size_t three = 3;

    snprintf(url, sizeof(url), "%s" PREFIX "/sessions/%s/moorex", srv.base, sid);
    ck_assert_int_eq(itest_sse_open(&e, url, NULL), 0);
    ck_assert_int_ge(itest_sse_wait(&e, 0, "state-updated", NULL, NULL, wait_ms()), 0);
    ck_assert_int_eq(say(sid, "cold-sub-1", "hello to a subscriber"), 200);
    ck_assert_int_ge(itest_sse_wait(&e, 0, "input-received", NULL, NULL, wait_ms()), 0);
    ck_assert_msg(itest_sse_wait_for(&e, 0, state_answered, &three, wait_ms()) >= 0,
                  "the subscriber never saw the answer");
    itest_sse_close(&e);
}
END_TEST

START_TEST(test_post_to_cold_session_is_answered)
{
    const char *sid = pick(3, 0);
    long before = metric("reflexor_sessions_loaded_total");
    json_t *st;

    ck_assert_int_eq(say(sid, "cold-post-1", "answer me from cold"), 200);
    loaded_since(before, "POST .../moorex");
    st = state_when_answered(sid, 3);
    ck_assert_str_eq(
        json_string_value(json_object_get(itest_last_assistant(st), "content")),
        "Echo: answer me from cold");
    json_decref(st);
}
END_TEST

/* ---- the resident set ------------------------------------------------------------- */

static void touch_range(int slot, int from, int n)
{
    char path[256];

    for (int j = from; j < from + n; j++) {
        snprintf(path, sizeof(path), PREFIX "/sessions/%s", pick(slot, j));
        ck_assert_int_eq(call("GET", path, NULL, NULL, NULL), 200);
    }
}

/*
 * The resident set is back within the limit (and the slack of pinned
 * sessions) at once or within a second or two: eviction may run beside the
 * loads rather than inside each one. True, or false after saying so.
 */
static bool resident_settles(void)
{
    long end = itest_now_ms() + (getenv("RX_SERVER_WRAPPER") ? 30000 : 3000), n;

    while ((n = metric("reflexor_sessions_resident")) > RESIDENT + SLACK &&
           itest_now_ms() < end)
        usleep(20000);
    if (n > RESIDENT + SLACK)
        fprintf(stderr, "check_scale: %ld sessions resident, limit %d\n", n, RESIDENT);
    return n <= RESIDENT + SLACK;
}

START_TEST(test_touches_keep_resident_bounded)
{
    long loaded = metric("reflexor_sessions_loaded_total");
    long evicted = metric("reflexor_sessions_evicted_total");
    int n = itest_scale_slow_build() ? 300 : 1000;

    touch_range(4, 0, n);
    ck_assert_int_ge(metric("reflexor_sessions_loaded_total") - loaded, n);
    ck_assert_int_gt(metric("reflexor_sessions_evicted_total"), evicted);
    ck_assert(resident_settles());
    ck_assert_int_gt(itest_metric(&srv, "reflexor_session_load_seconds_count"), 0);
}
END_TEST

static bool streaming(json_t *state, void *arg)
{
    const char *st =
        json_string_value(json_object_get(itest_last_assistant(state), "status"));

    (void)arg;
    return count_of(state, "assistantMessages") == 3 && st && !strcmp(st, "streaming");
}

/*
 * "/slow" makes the builtin brain 50 times slower: 100 ms a chunk of 16
 * characters, so this answer streams for about 10 s. Meanwhile a sweep loads
 * and evicts sessions all around it, far past the limit, for 8 s; nothing
 * else touches the session answering, and no stream holds it. It must stay:
 * the answer ends complete under the id it started with, the echo whole,
 * and a late subscriber of its message gets it complete.
 */
START_TEST(test_long_answer_survives_sweep)
{
    const char *sid = pick(5, 0);
    char text[1700], url[512], mid[128];
    struct itest_sse msg;
    json_t *st, *m;
    int touches = 0, most = 10000, at;
    long t0;
    size_t len;

    len = (size_t)snprintf(text, sizeof(text), "/slow");
    while (len + 8 < 1600)
        len += (size_t)snprintf(text + len, sizeof(text) - len, " word%02zu", len % 97);
    ck_assert_int_eq(say(sid, "cold-long-1", text), 200);
    snprintf(url, sizeof(url), "%s" PREFIX "/sessions/%s", srv.base, sid);
    st = itest_poll_json(url, streaming, NULL, wait_ms());
    ck_assert_msg(st && streaming(st, NULL), "the answer never started");
    snprintf(mid, sizeof(mid), "%s",
             json_string_value(json_object_get(itest_last_assistant(st), "id")));
    json_decref(st);
    for (t0 = itest_now_ms(); touches < most && itest_now_ms() - t0 < 8000;
         touches += 100) {
        touch_range(6, touches, 100);
        ck_assert(resident_settles());
    }
    ck_assert_msg(touches > RESIDENT + SLACK, "only %d touches while it streamed",
                  touches);
    fprintf(stderr, "check_scale: %d touches while an answer streamed\n", touches);
    st = state_when_answered(sid, 3);
    ck_assert_uint_eq(count_of(st, "assistantMessages"), 3);
    m = itest_last_assistant(st);
    ck_assert_str_eq(json_string_value(json_object_get(m, "id")), mid);
    ck_assert_msg(!strncmp(json_string_value(json_object_get(m, "content")), "Echo: ", 6),
                  "not the echo");
    ck_assert_str_eq(json_string_value(json_object_get(m, "content")) + 6, text);
    snprintf(url, sizeof(url), "%s" PREFIX "/sessions/%s/messages/%s", srv.base, sid,
             mid);
    ck_assert_int_eq(itest_sse_open(&msg, url, NULL), 0);
    at = itest_sse_wait(&msg, 0, "complete", NULL, NULL, wait_ms());
    ck_assert_msg(at >= 0, "the message stream never completed");
    ck_assert_str_eq(
        json_string_value(json_object_get(itest_sse_event(&msg, (size_t)at), "content")),
        json_string_value(json_object_get(m, "content")));
    itest_sse_close(&msg);
    json_decref(st);
}
END_TEST

Suite *scale_suite(void);
Suite *scale_suite(void)
{
    Suite *s = suite_create("scale");
    TCase *tc = tcase_create("cold");

    tcase_add_unchecked_fixture(tc, start, stop);
    tcase_set_timeout(tc, getenv("RX_SERVER_WRAPPER") ? 900 : 300);
    tcase_add_test(tc, test_startup_loads_only_busy);
    tcase_add_test(tc, test_list_pages_through_all);
    tcase_add_test(tc, test_search_finds_every_holder);
    tcase_add_test(tc, test_routes_touch_cold_sessions);
    tcase_add_test(tc, test_subscriber_of_cold_session);
    tcase_add_test(tc, test_post_to_cold_session_is_answered);
    tcase_add_test(tc, test_touches_keep_resident_bounded);
    tcase_add_test(tc, test_long_answer_survives_sweep);
    suite_add_tcase(s, tc);
    return s;
}
