/*
 * check_hardening - attacks from the adversarial review (issue 12), each
 * replayed against the real binary: forged assistant words, idle and slow
 * connections, abandoned streams, signals, FIFOs and NUL bytes in paths,
 * config mistakes, a second server on a busy port.
 * No timings are asserted: waits have generous limits and only bound hangs.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/itest.h"

#define WAIT_MS 20000

static struct itest_server srv;

/* ---- helpers ------------------------------------------------------------------ */

static long long mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A raw TCP connection to the server under test; -1 on failure. */
static int raw_connect(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a))) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static void raw_send(int fd, const char *text)
{
    ck_assert_int_eq(send(fd, text, strlen(text), MSG_NOSIGNAL), (ssize_t)strlen(text));
}

/* Wait until the server closes `fd` (EOF or reset); false after `ms`. */
static bool closed_by_server(int fd, int ms)
{
    long long end = mono_ms() + ms;
    char buf[4096];

    while (mono_ms() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t n;

        if (poll(&p, 1, 200) <= 0)
            continue;
        n = recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return true;
    }
    return false;
}

/* NEW reference: GET url as JSON (fails the test otherwise). */
static char *new_session(void)
{
    char *id = itest_new_session(&srv);

    ck_assert_ptr_nonnull(id);
    return id;
}

static json_t *get_json(const char *url)
{
    struct itest_resp r;
    json_t *j;

    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 200);
    j = itest_resp_json(&r);
    itest_resp_release(&r);
    ck_assert_ptr_nonnull(j);
    return j;
}

/* ---- 2: forged assistant words ------------------------------------------------ */

static bool has_streaming(json_t *st, void *arg)
{
    json_t *m;
    size_t i;

    (void)arg;
    json_array_foreach(json_object_get(st, "assistantMessages"), i, m)
    {
        if (!strcmp(json_string_value(json_object_get(m, "status")), "streaming"))
            return true;
    }
    return false;
}

START_TEST(test_cancel_ignores_client_partials)
{
    char *sid = new_session(), url[256], input[512];
    json_t *st, *m;
    const char *mid, *content;

    ck_assert_int_eq(itest_post_input(&srv, sid,
                                      "{\"type\":\"user-send-message\",\"content\":"
                                      "\"tell me a long story about the sea\"}",
                                      NULL),
                     200);
    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s", srv.base, sid);
    st = itest_poll_json(url, has_streaming, NULL, WAIT_MS);
    ck_assert_msg(st && has_streaming(st, NULL), "no answer started streaming");
    mid = json_string_value(json_object_get(
        json_array_get(json_object_get(st, "assistantMessages"), 0), "id"));
    snprintf(input, sizeof(input),
             "{\"type\":\"user-cancel\",\"partialContents\":{\"%s\":\"FORGED WORDS\"}}",
             mid);
    ck_assert_int_eq(itest_post_input(&srv, sid, input, NULL), 200);
    json_decref(st);
    st = get_json(url);
    m = json_array_get(json_object_get(st, "assistantMessages"), 0);
    content = json_string_value(json_object_get(m, "content"));
    ck_assert_str_eq(json_string_value(json_object_get(m, "status")), "stopped");
    ck_assert_msg(!strstr(content, "FORGED"),
                  "a client wrote the assistant's words: '%s'", content);
    json_decref(st);
    free(sid);
}
END_TEST

/* ---- 3: idle and slow connections --------------------------------------------- */

static const char tight_config[] =
    "{\"limits\":{\"max_connections\":48, \"idle_timeout_ms\":1000},"
    " \"sse\":{\"ping_ms\":60000}}";

static void start_tight(void)
{
    ck_assert_msg(itest_server_start(&srv, tight_config, NULL) == 0,
                  "server did not start");
}

static void stop(void)
{
    ck_assert_int_eq(itest_server_stop(&srv), 0);
}

/* Every connection slot held by idle sockets: the server frees them itself. */
START_TEST(test_idle_connections_do_not_lock_out)
{
    int fds[48], n = 0;
    long long end;
    long status = 0;

    for (int i = 0; i < 48; i++)
        if ((fds[n] = raw_connect(srv.port)) >= 0)
            n++;
    ck_assert_int_gt(n, 40);
    end = mono_ms() + WAIT_MS;
    while (mono_ms() < end && status != 200) {
        struct itest_resp r;
        char url[128];

        snprintf(url, sizeof(url), "%s/healthz", srv.base);
        if (!itest_request("GET", url, NULL, NULL, &r))
            status = r.status;
        itest_resp_release(&r);
        if (status != 200)
            usleep(200 * 1000);
    }
    ck_assert_msg(status == 200, "locked out by %d idle connections", n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(closed_by_server(fds[i], WAIT_MS), "idle connection %d kept open",
                      i);
    for (int i = 0; i < n; i++)
        close(fds[i]);
}
END_TEST

/* A body announced longer than what is sent, and a body trickled byte by byte. */
START_TEST(test_short_and_trickled_bodies_are_dropped)
{
    int fd = raw_connect(srv.port), slow = raw_connect(srv.port);
    char req[256];
    long long end;
    bool dropped = false;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_ge(slow, 0);
    snprintf(req, sizeof(req),
             "POST /api/reflexor/moorex HTTP/1.1\r\nHost: x\r\n"
             "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"type\"");
    raw_send(fd, req);
    ck_assert_msg(closed_by_server(fd, WAIT_MS), "a short body holds its connection");
    close(fd);
    /* One byte every 300 ms keeps the idle timer from firing; the body
       deadline still ends it. */
    raw_send(slow, req);
    end = mono_ms() + WAIT_MS;
    while (!dropped && mono_ms() < end) {
        dropped = send(slow, " ", 1, MSG_NOSIGNAL) != 1 || closed_by_server(slow, 300);
    }
    ck_assert_msg(dropped, "a trickled body holds its connection");
    close(slow);
    ck_assert_int_eq(itest_get_status(&srv, "/healthz"), 200);
}
END_TEST

/* ---- 4: abandoned streams ------------------------------------------------------- */

START_TEST(test_abandoned_streams_are_noticed)
{
    enum { N = 40 };
    int fds[N];
    long long end;
    long open_streams = -1;

    for (int i = 0; i < N; i++) {
        fds[i] = raw_connect(srv.port);
        ck_assert_int_ge(fds[i], 0);
        raw_send(fds[i], "GET /api/reflexor/moorex HTTP/1.1\r\nHost: x\r\n"
                         "Accept: text/event-stream\r\n\r\n");
    }
    end = mono_ms() + WAIT_MS;
    while (mono_ms() < end && itest_metric(&srv, "reflexor_sse_streams") < N)
        usleep(100 * 1000);
    ck_assert_int_ge(itest_metric(&srv, "reflexor_sse_streams"), N);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    /* Pings are a minute apart here: only noticing the gone peers frees them. */
    end = mono_ms() + WAIT_MS;
    while (mono_ms() < end &&
           (open_streams = itest_metric(&srv, "reflexor_sse_streams")) > 0)
        usleep(200 * 1000);
    ck_assert_msg(open_streams == 0, "%ld abandoned streams still open", open_streams);
}
END_TEST

/* ---- 6 and small findings: answers that say what happened ------------------------ */

START_TEST(test_forbidden_names_the_type_sent)
{
    json_t *a = NULL;

    ck_assert_int_eq(
        itest_post_input(&srv, "default",
                         "{\"type\":\"toolkit-respond\",\"toolCallId\":\"c\","
                         "\"result\":\"x\"}",
                         &a),
        403);
    ck_assert_ptr_nonnull(
        strstr(json_string_value(json_object_get(a, "message")), "'toolkit-respond'"));
    json_decref(a);
}
END_TEST

START_TEST(test_unicode_spaces_are_blank)
{
    json_t *a = NULL;

    /* U+00A0, U+3000, U+200B: nothing a person can see. */
    ck_assert_int_eq(itest_post_input(&srv, "default",
                                      "{\"type\":\"user-send-message\",\"content\":"
                                      "\"\\u00a0\\u3000\\u200b \"}",
                                      &a),
                     400);
    ck_assert_str_eq(json_string_value(json_object_get(a, "field")), "content");
    json_decref(a);
}
END_TEST

/* A body nested 100 000 deep is refused by the parser's loop, not by a
   recursion that would first have to survive it; nothing changes. */
START_TEST(test_deep_body_is_refused)
{
    enum { DEPTH = 100000 };
    char *body = malloc(DEPTH + 1);
    json_t *a = NULL;

    ck_assert_ptr_nonnull(body);
    memset(body, '[', DEPTH);
    body[DEPTH] = '\0';
    ck_assert_int_eq(itest_post_input(&srv, "default", body, &a), 400);
    ck_assert_str_eq(json_string_value(json_object_get(a, "error")), "invalid-json");
    ck_assert_msg(strstr(json_string_value(json_object_get(a, "message")),
                         "nested deeper than 64 levels"),
                  "%s", json_string_value(json_object_get(a, "message")));
    json_decref(a);
    free(body);
    ck_assert_int_eq(itest_get_status(&srv, "/healthz"), 200);
}
END_TEST

/* ---- 9: static files and NUL bytes ----------------------------------------------- */

static char web_dir[64];

static void start_web(void)
{
    char cfg[256], path[128];
    FILE *f;

    snprintf(web_dir, sizeof(web_dir), "/tmp/rx-web-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(web_dir));
    snprintf(path, sizeof(path), "%s/index.html", web_dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("<!doctype html><title>t</title>", f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/pipe.txt", web_dir);
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    snprintf(cfg, sizeof(cfg), "{\"web_root\":\"%s\"}", web_dir);
    ck_assert_msg(itest_server_start(&srv, cfg, NULL) == 0, "server did not start");
}

static void stop_web(void)
{
    char path[128];

    stop();
    snprintf(path, sizeof(path), "%s/index.html", web_dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/pipe.txt", web_dir);
    unlink(path);
    rmdir(web_dir);
}

START_TEST(test_fifo_is_not_served)
{
    long status = itest_get_status(&srv, "/pipe.txt");

    ck_assert_msg(status == 403 || status == 404, "a FIFO answered %ld", status);
    ck_assert_int_eq(itest_get_status(&srv, "/index.html"), 200);
}
END_TEST

START_TEST(test_nul_in_path_is_refused)
{
    ck_assert_int_eq(itest_get_status(&srv, "/index.html%00.txt"), 400);
    ck_assert_int_eq(itest_get_status(&srv, "/api/reflexor/sessions/default%00x"), 400);
    ck_assert_int_eq(itest_get_status(&srv, "/api/reflexor/sessions/default"), 200);
}
END_TEST

/* ---- 8: signals ------------------------------------------------------------------- */

static void write_config(const char *text)
{
    FILE *f = fopen(srv.config_path, "w");

    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* Poll until GET path answers `want` (the server handles signals asynchronously). */
static bool answers(const char *path, long want)
{
    long long end = mono_ms() + WAIT_MS;

    while (mono_ms() < end) {
        if (itest_get_status(&srv, path) == want)
            return true;
        usleep(100 * 1000);
    }
    return false;
}

START_TEST(test_signals_do_not_kill_and_sighup_reloads)
{
    ck_assert_int_eq(kill(srv.pid, SIGUSR1), 0);
    ck_assert_int_eq(kill(srv.pid, SIGUSR2), 0);
    ck_assert_int_eq(kill(srv.pid, SIGALRM), 0);
    ck_assert_msg(answers("/api/reflexor/sessions", 200), "a signal stopped the server");
    ck_assert_msg(kill(srv.pid, 0) == 0, "the server died");
    /* A token set by a reload takes effect for new requests. */
    write_config("{\"auth\":{\"token\":\"t0ken\"}}");
    ck_assert_int_eq(kill(srv.pid, SIGHUP), 0);
    ck_assert_msg(answers("/api/reflexor/sessions", 401),
                  "SIGHUP did not apply the token");
    ck_assert_int_eq(itest_get_status(&srv, "/api/reflexor/sessions?token=t0ken"), 200);
    /* A bad file is reported and the running config kept. */
    write_config("{\"auth\":{\"token\":\"other\"}, \"limitz\":{}}");
    ck_assert_int_eq(kill(srv.pid, SIGHUP), 0);
    ck_assert_int_eq(kill(srv.pid, SIGUSR1), 0); /* handled after the HUP */
    usleep(300 * 1000);
    ck_assert_int_eq(itest_get_status(&srv, "/api/reflexor/sessions?token=t0ken"), 200);
    ck_assert_msg(kill(srv.pid, 0) == 0, "the server died");
    /* No token again, as the tests after this one on this server expect. */
    write_config("{}");
    ck_assert_int_eq(kill(srv.pid, SIGHUP), 0);
    ck_assert_msg(answers("/api/reflexor/sessions", 200),
                  "SIGHUP did not drop the token");
}
END_TEST

/* ---- 10: what a newcomer hits at start-up ---------------------------------------- */

/* Run the binary with `args` (NULL-terminated); its exit code and stderr. */
static int run_server(const char *const *args, char *err, size_t n)
{
    const char *bin = getenv("RX_SERVER") ? getenv("RX_SERVER") : "build/reflexor";
    const char *argv[16] = {bin};
    int pipefd[2], status;
    ssize_t got = 0, r;
    pid_t pid;

    for (int i = 0; args[i] && i < 14; i++)
        argv[i + 1] = args[i];
    ck_assert_int_eq(pipe(pipefd), 0);
    pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(pipefd[1]);
    while ((size_t)got < n - 1 &&
           (r = read(pipefd[0], err + got, n - 1 - (size_t)got)) > 0)
        got += r;
    err[got] = '\0';
    close(pipefd[0]);
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void temp_config(char *path, const char *text)
{
    int fd;

    strcpy(path, "/tmp/rx-cfg-XXXXXX");
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

START_TEST(test_config_mistakes_are_named)
{
    char path[32], err[2048];
    const char *args[] = {
        "--config", path, "--db", ":memory:", "--listen", "127.0.0.1:0", NULL};

    temp_config(path, "{\"limits\":{\"max_sesions\":3}}");
    ck_assert_int_eq(run_server(args, err, sizeof(err)), 2);
    ck_assert_msg(strstr(err, "'limits.max_sesions'"), "typo not named: %s", err);
    unlink(path);

    temp_config(path, "{\"tools\":[{\"name\":\"x\"}]}");
    ck_assert_int_eq(run_server(args, err, sizeof(err)), 2);
    unlink(path);

    temp_config(path, "{\n  \"limits\": {,}\n}");
    ck_assert_int_eq(run_server(args, err, sizeof(err)), 2);
    ck_assert_msg(strstr(err, ": line 2, column 14: string or '}' expected"),
                  "bad JSON: %s", err);
    unlink(path);

    {
        /* A file past the 16 MiB bound is refused before it is parsed. */
        FILE *big;

        temp_config(path, "");
        ck_assert_ptr_nonnull(big = fopen(path, "w"));
        ck_assert_int_eq(fseek(big, (16L << 20) + 1, SEEK_SET), 0);
        ck_assert_int_ne(fputc(' ', big), EOF);
        fclose(big);
        ck_assert_int_eq(run_server(args, err, sizeof(err)), 2);
        ck_assert_msg(strstr(err, "cannot read: larger than 16 MiB"), "big file: %s",
                      err);
        unlink(path);
    }

    strcpy(path, "/tmp");
    ck_assert_int_eq(run_server(args, err, sizeof(err)), 2);
    ck_assert_msg(strstr(err, "/tmp: cannot read: Is a directory"), "directory: %s", err);

    strcpy(path, "/tmp/rx-no-such.json");
    ck_assert_int_eq(run_server(args, err, sizeof(err)), 2);
    ck_assert_msg(strstr(err, "rx-no-such.json: cannot read"), "missing file: %s", err);
    ck_assert_msg(!strstr(err, ":-1"), "missing file: %s", err);
}
END_TEST

START_TEST(test_busy_port_is_an_error)
{
    char listen[32], err[2048];
    const char *args[] = {"--db", ":memory:", "--listen", listen, NULL};

    snprintf(listen, sizeof(listen), "127.0.0.1:%d", srv.port);
    ck_assert_int_ne(run_server(args, err, sizeof(err)), 0);
    ck_assert_msg(strstr(err, "cannot listen"), "no clear error: %s", err);
    ck_assert_int_eq(itest_get_status(&srv, "/healthz"), 200);
}
END_TEST

/* LLM failures reach the operator's log, not only the answer. */
START_TEST(test_llm_failures_are_logged)
{
    char cfg[32], errpath[] = "/tmp/rx-err-XXXXXX", line[512] = "";
    const char *bin = getenv("RX_SERVER") ? getenv("RX_SERVER") : "build/reflexor";
    const char *args[] = {bin,        "--config",    cfg,           "--db", ":memory:",
                          "--listen", "127.0.0.1:0", "--log-level", "warn", NULL};
    int out[2], errfd = mkstemp(errpath), port = 0;
    pid_t pid;
    FILE *f;
    bool seen = false;

    /* Port 1 on loopback refuses connections: the brain's request fails at once. */
    temp_config(cfg, "{\"brain\":{\"provider\":\"openai\",\"openai\":{\"base_url\":"
                     "\"http://127.0.0.1:1/v1\",\"retries\":0}}}");
    ck_assert_int_ge(errfd, 0);
    ck_assert_int_eq(pipe(out), 0);
    pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(errfd, 2);
        execv(bin, (char *const *)args);
        _exit(127);
    }
    close(out[1]);
    f = fdopen(out[0], "r");
    if (fgets(line, sizeof(line), f) && strstr(line, "http://127.0.0.1:"))
        port = atoi(strstr(line, "http://127.0.0.1:") + 17);
    ck_assert_int_gt(port, 0);
    snprintf(srv.base, sizeof(srv.base), "http://127.0.0.1:%d", port);
    srv.port = port;
    ck_assert_int_eq(
        itest_post_input(&srv, "default",
                         "{\"type\":\"user-send-message\",\"content\":\"hi\"}", NULL),
        200);
    for (int i = 0; i < 200 && !seen; i++) {
        char buf[8192];
        ssize_t n = pread(errfd, buf, sizeof(buf) - 1, 0);

        buf[n > 0 ? n : 0] = '\0';
        seen = strstr(buf, "openai brain:") != NULL;
        if (!seen)
            usleep(100 * 1000);
    }
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    fclose(f);
    close(errfd);
    unlink(errpath);
    unlink(cfg);
    ck_assert_msg(seen, "a refused LLM connection left no line in the log");
}
END_TEST

/* ---- the message stream of a deleted session ------------------------------------- */

static const char slow_config[] =
    "{\"brain\":{\"builtin\":{\"chunk_chars\":2,\"chunk_delay_ms\":15,"
    "\"slow_factor\":10}}}";

static void start_slow(void)
{
    ck_assert_msg(itest_server_start(&srv, slow_config, NULL) == 0,
                  "server did not start");
}

START_TEST(test_deleted_session_stops_its_message_streams)
{
    char *sid = new_session(), url[256];
    struct itest_sse e;
    struct itest_resp r;
    json_t *st;
    const char *mid;

    ck_assert_int_eq(itest_post_input(&srv, sid,
                                      "{\"type\":\"user-send-message\",\"content\":"
                                      "\"tell me a long story about the sea\"}",
                                      NULL),
                     200);
    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s", srv.base, sid);
    st = itest_poll_json(url, has_streaming, NULL, WAIT_MS);
    ck_assert_msg(st && has_streaming(st, NULL), "no answer started streaming");
    mid = json_string_value(json_object_get(
        json_array_get(json_object_get(st, "assistantMessages"), 0), "id"));
    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s/messages/%s", srv.base, sid,
             mid);
    ck_assert_int_eq(itest_sse_open(&e, url, NULL), 0);
    ck_assert_int_ge(itest_sse_wait(&e, 0, "snapshot", NULL, NULL, WAIT_MS), 0);
    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s", srv.base, sid);
    ck_assert_int_eq(itest_request("DELETE", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 204);
    itest_resp_release(&r);
    ck_assert_msg(itest_sse_wait(&e, 0, "stopped", NULL, NULL, WAIT_MS) >= 0,
                  "the stream ended without a 'stopped' frame");
    ck_assert(itest_sse_wait_done(&e, WAIT_MS));
    itest_sse_close(&e);
    json_decref(st);
    free(sid);
}
END_TEST

/* /metrics as Prometheus reads it: promtool (Debian's prometheus) must accept it. */
START_TEST(test_metrics_pass_promtool)
{
    char url[128];
    struct itest_resp r;
    FILE *p;
    int status;

    ck_assert_int_eq(itest_get_status(&srv, "/no-such-file"),
                     404); /* an error to count */
    snprintf(url, sizeof(url), "%s/metrics", srv.base);
    ck_assert_int_eq(itest_request("GET", url, NULL, NULL, &r), 0);
    ck_assert_int_eq(r.status, 200);
    p = popen("promtool check metrics", "w");
    ck_assert_ptr_nonnull(p);
    fwrite(r.body, 1, r.len, p);
    status = pclose(p);
    itest_resp_release(&r);
    ck_assert_msg(!WIFEXITED(status) || WEXITSTATUS(status) != 127,
                  "promtool is missing: install the Debian package prometheus "
                  "(scripts/deps.sh prometheus)");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "promtool check metrics refused /metrics (exit %d)",
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}
END_TEST

/* ---- 1: arguments nested deep enough to overflow an effect's stack -------------- */

static void start_agent(void)
{
    ck_assert_msg(
        itest_server_start(&srv, "{\"api\":{\"allow_agent_inputs\":true}}", NULL) == 0,
        "server did not start");
}

START_TEST(test_deep_tool_arguments_are_refused)
{
    char *body = itest_deep_tool_call(5000);
    json_t *a = NULL;

    ck_assert_ptr_nonnull(body);
    ck_assert_int_eq(itest_post_input(&srv, "default", body, &a), 400);
    ck_assert_str_eq(json_string_value(json_object_get(a, "field")), "toolCalls");
    json_decref(a);
    free(body);
    ck_assert_int_eq(itest_get_status(&srv, "/healthz"), 200);
}
END_TEST

static void start_plain(void)
{
    ck_assert_msg(itest_server_start(&srv, NULL, NULL) == 0, "server did not start");
}

Suite *hardening_suite(void);
Suite *hardening_suite(void)
{
    Suite *s = suite_create("hardening");
    TCase *plain = tcase_create("plain"), *tight = tcase_create("tight-limits"),
          *agent = tcase_create("agent-inputs"), *web = tcase_create("static"),
          *slow = tcase_create("slow-brain"), *life = tcase_create("start-up");
    int t = getenv("RX_SERVER_WRAPPER") ? 300 : 60;

    tcase_add_unchecked_fixture(plain, start_plain, stop);
    tcase_set_timeout(plain, t);
    tcase_add_test(plain, test_forbidden_names_the_type_sent);
    tcase_add_test(plain, test_unicode_spaces_are_blank);
    tcase_add_test(plain, test_deep_body_is_refused);
    tcase_add_test(plain, test_busy_port_is_an_error);
    tcase_add_test(plain, test_signals_do_not_kill_and_sighup_reloads);
    tcase_add_test(plain, test_metrics_pass_promtool);
    suite_add_tcase(s, plain);

    tcase_add_unchecked_fixture(agent, start_agent, stop);
    tcase_set_timeout(agent, t);
    tcase_add_test(agent, test_deep_tool_arguments_are_refused);
    suite_add_tcase(s, agent);

    tcase_add_unchecked_fixture(tight, start_tight, stop);
    tcase_set_timeout(tight, t);
    tcase_add_test(tight, test_idle_connections_do_not_lock_out);
    tcase_add_test(tight, test_short_and_trickled_bodies_are_dropped);
    tcase_add_test(tight, test_abandoned_streams_are_noticed);
    suite_add_tcase(s, tight);

    tcase_add_unchecked_fixture(web, start_web, stop_web);
    tcase_set_timeout(web, t);
    tcase_add_test(web, test_fifo_is_not_served);
    tcase_add_test(web, test_nul_in_path_is_refused);
    suite_add_tcase(s, web);

    tcase_add_unchecked_fixture(slow, start_slow, stop);
    tcase_set_timeout(slow, t);
    tcase_add_test(slow, test_cancel_ignores_client_partials);
    tcase_add_test(slow, test_deleted_session_stops_its_message_streams);
    suite_add_tcase(s, slow);

    tcase_set_timeout(life, t);
    tcase_add_test(life, test_config_mistakes_are_named);
    tcase_add_test(life, test_llm_failures_are_logged);
    suite_add_tcase(s, life);
    return s;
}
