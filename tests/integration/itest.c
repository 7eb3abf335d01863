/*
 * itest - integration test helpers. See itest.h.
 */
#include "tests/integration/itest.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/now.h"
#include "effects/sse_parse.h"

extern char **environ;

static long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* ---- PostgreSQL: RX_PG_DIR ---------------------------------------------------- */

bool itest_on_postgres(void)
{
    const char *d = getenv("RX_PG_DIR");

    return d && *d;
}

void itest_skip(const char *test, const char *why)
{
    fprintf(stderr, "itest: SKIP on PostgreSQL: %s: %s\n", test, why);
}

int itest_run(char *const argv[], char *out, size_t n)
{
    posix_spawn_file_actions_t fa;
    int p[2], status = 0;
    size_t len = 0;
    pid_t pid;

    if (pipe2(p, O_CLOEXEC))
        return -1;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
    if (posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ)) {
        posix_spawn_file_actions_destroy(&fa);
        close(p[0]);
        close(p[1]);
        return -1;
    }
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    for (;;) {
        char buf[256];
        ssize_t r = read(p[0], buf, sizeof(buf));

        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        for (ssize_t i = 0; out && i < r && len + 1 < n; i++)
            out[len++] = buf[i];
    }
    close(p[0]);
    if (out && n)
        out[len] = '\0';
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* psql of the newest PostgreSQL installed, else the one on PATH. */
static void psql_path(char *buf, size_t n)
{
    glob_t g;

    snprintf(buf, n, "psql");
    if (!glob("/usr/lib/postgresql/*/bin/psql", 0, NULL, &g)) {
        if (g.gl_pathc)
            snprintf(buf, n, "%s", g.gl_pathv[g.gl_pathc - 1]);
        globfree(&g);
    }
}

/* One SQL statement on database `db` of the cluster; its output in out. */
static int pg_sql_on(const char *db, const char *sql, char *out, size_t n)
{
    char psql[PATH_MAX], host[PATH_MAX];
    char *argv[] = {psql,
                    (char *)"-h",
                    host,
                    (char *)"-U",
                    (char *)"postgres",
                    (char *)"-d",
                    (char *)db,
                    (char *)"-qAt",
                    (char *)"-v",
                    (char *)"ON_ERROR_STOP=1",
                    (char *)"-c",
                    (char *)"SET client_min_messages TO warning",
                    (char *)"-c",
                    (char *)sql,
                    NULL};

    psql_path(psql, sizeof(psql));
    if (!realpath(getenv("RX_PG_DIR"), host))
        return -1;
    return itest_run(argv, out, n);
}

/* One SQL statement on the cluster's `postgres` database; its output in out. */
static int pg_sql(const char *sql, char *out, size_t n)
{
    return pg_sql_on("postgres", sql, out, n);
}

/* The URL of database `name` in the cluster (as scripts/pgtmp.sh prints it). */
static int pg_url(const char *name, char *url, size_t n)
{
    char host[PATH_MAX];

    if (!realpath(getenv("RX_PG_DIR"), host))
        return -1;
    snprintf(url, n, "postgresql:///%s?host=%s&user=postgres", name, host);
    return 0;
}

/* A fresh database `name` (dropped first if it exists), by scripts/pgtmp.sh. */
static int pg_createdb(const char *name)
{
    const char *tool = getenv("RX_PGTMP") ? getenv("RX_PGTMP") : "scripts/pgtmp.sh";
    char *argv[] = {(char *)tool, (char *)"createdb", getenv("RX_PG_DIR"), (char *)name,
                    NULL};
    char out[512];

    return itest_run(argv, out, sizeof(out)) == 0 ? 0 : -1;
}

static void pg_dropdb(const char *name)
{
    char sql[128];

    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", name);
    if (pg_sql(sql, NULL, 0))
        fprintf(stderr, "itest: could not drop database %s\n", name);
}

/* The database that stands for SQLite file `path`: named after it. */
static void pg_name_for_file(const char *path, char *name, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    for (const char *p = path; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    snprintf(name, n, "rx_file_%016llx", (unsigned long long)h);
}

static bool pg_exists(const char *name)
{
    char sql[128], out[32] = "";

    snprintf(sql, sizeof(sql), "SELECT 1 FROM pg_database WHERE datname = '%s'", name);
    return pg_sql(sql, out, sizeof(out)) == 0 && out[0] == '1';
}

/*
 * The --db this start gets on PostgreSQL: `db` is the last --db of the extra
 * arguments (NULL: none). 0 with url set ("" keeps what the arguments say),
 * or -1.
 */
static int pg_choose(struct itest_server *s, const char *db, char *url, size_t n)
{
    static unsigned counter;

    *url = '\0';
    if (db && (!strcmp(db, ":memory:") || !strncmp(db, "postgres", 8) || strchr(db, '=')))
        return 0; /* asked for explicitly */
    if (!db) {
        snprintf(s->pg_db, sizeof(s->pg_db), "rx_it_%d_%u", (int)getpid(), counter++);
        s->pg_fresh = true;
        if (pg_createdb(s->pg_db))
            return -1;
    } else {
        pg_name_for_file(db, s->pg_db, sizeof(s->pg_db));
        if (!pg_exists(s->pg_db) && pg_createdb(s->pg_db))
            return -1;
    }
    return pg_url(s->pg_db, url, n);
}

/* ---- the server process ----------------------------------------------------- */

/* Read the server's stdout until its "listening on http://HOST:PORT/" line. */
static int read_port(int fd, int timeout_ms)
{
    char buf[1024];
    size_t len = 0;
    long deadline = now_ms() + timeout_ms;

    while (now_ms() < deadline && len < sizeof(buf) - 1) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        const char *at;
        ssize_t n;

        if (poll(&p, 1, 200) <= 0)
            continue;
        n = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (n <= 0)
            return -1;
        len += (size_t)n;
        buf[len] = '\0';
        at = strstr(buf, "http://127.0.0.1:");
        if (at && strchr(at, '/' + 0) && strchr(at + 17, '/'))
            return atoi(at + 17);
    }
    return -1;
}

int itest_server_start(struct itest_server *s, const char *config_json,
                       const char *const *extra_args)
{
    const char *bin = getenv("RX_SERVER") ? getenv("RX_SERVER") : "build/reflexor";
    const char *wrap = getenv("RX_SERVER_WRAPPER");
    char *argv[64], wrapbuf[512], pgurl[PATH_MAX + 128] = "";
    const char *db = NULL;
    int pipefd[2], fd, argc = 0;
    posix_spawn_file_actions_t fa;
    FILE *f;

    memset(s, 0, sizeof(*s));
    snprintf(s->config_path, sizeof(s->config_path), "/tmp/rx-itest-XXXXXX");
    fd = mkstemp(s->config_path);
    if (fd < 0)
        return -1;
    f = fdopen(fd, "w");
    fputs(config_json ? config_json : "{}", f);
    fclose(f);
    for (size_t i = 0; extra_args && extra_args[i]; i++)
        if (!strcmp(extra_args[i], "--db") && extra_args[i + 1])
            db = extra_args[i + 1];
    if (itest_on_postgres() && pg_choose(s, db, pgurl, sizeof(pgurl))) {
        fprintf(stderr, "itest: no PostgreSQL database for this server (RX_PG_DIR=%s)\n",
                getenv("RX_PG_DIR"));
        unlink(s->config_path);
        return -1;
    }
    if (wrap && *wrap) {
        char *save = NULL;

        snprintf(wrapbuf, sizeof(wrapbuf), "%s", wrap);
        for (char *t = strtok_r(wrapbuf, " ", &save); t && argc < 40;
             t = strtok_r(NULL, " ", &save))
            argv[argc++] = t;
    }
    argv[argc++] = (char *)bin;
    argv[argc++] = (char *)"--config";
    argv[argc++] = s->config_path;
    argv[argc++] = (char *)"--listen";
    argv[argc++] = (char *)"127.0.0.1:0";
    /* No file unless a test asks for one (a later --db wins). */
    argv[argc++] = (char *)"--db";
    argv[argc++] = *pgurl && !db ? pgurl : (char *)":memory:";
    argv[argc++] = (char *)"--log-level";
    argv[argc++] = getenv("RX_LOG_LEVEL") ? getenv("RX_LOG_LEVEL") : (char *)"warn";
    for (size_t i = 0; extra_args && extra_args[i] && argc < 60; i++)
        argv[argc++] = (char *)extra_args[i];
    if (*pgurl && db) { /* a file: its database, after (so over) the test's --db */
        argv[argc++] = (char *)"--db";
        argv[argc++] = pgurl;
    }
    argv[argc] = NULL;
    if (pipe2(pipefd, O_CLOEXEC))
        return -1;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDOUT_FILENO);
    if (posix_spawnp(&s->pid, argv[0], &fa, NULL, argv, environ)) {
        posix_spawn_file_actions_destroy(&fa);
        close(pipefd[0]);
        close(pipefd[1]);
        if (s->pg_fresh)
            pg_dropdb(s->pg_db);
        return -1;
    }
    posix_spawn_file_actions_destroy(&fa);
    close(pipefd[1]);
    s->out_fd = pipefd[0];
    s->port = read_port(s->out_fd, wrap ? 60000 : 15000);
    if (s->port <= 0) {
        itest_server_stop(s);
        return -1;
    }
    snprintf(s->base, sizeof(s->base), "http://127.0.0.1:%d", s->port);
    return 0;
}

int itest_server_stop(struct itest_server *s)
{
    int status = 0;
    long deadline = now_ms() + 60000;

    if (s->pid <= 0)
        return -1;
    kill(s->pid, SIGTERM);
    while (waitpid(s->pid, &status, WNOHANG) == 0) {
        if (now_ms() > deadline) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
            status = -1;
            break;
        }
        usleep(10000);
    }
    s->pid = 0;
    if (s->out_fd > 0)
        close(s->out_fd);
    unlink(s->config_path);
    if (s->pg_fresh)
        pg_dropdb(s->pg_db);
    s->pg_fresh = false;
    if (status == -1 || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* ---- plain requests --------------------------------------------------------- */

struct sink {
    char *data;
    size_t len;
};

static size_t sink_write(char *p, size_t size, size_t n, void *cls)
{
    struct sink *s = cls;
    char *d = realloc(s->data, s->len + size * n + 1);

    if (!d)
        return 0;
    memcpy(d + s->len, p, size * n);
    s->len += size * n;
    d[s->len] = '\0';
    s->data = d;
    return size * n;
}

int itest_request(const char *method, const char *url, const char *body,
                  const char *const *headers, struct itest_resp *r)
{
    return itest_request_within(method, url, body, headers, 30000, r);
}

int itest_request_within(const char *method, const char *url, const char *body,
                         const char *const *headers, long timeout_ms,
                         struct itest_resp *r)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    struct sink sink = {NULL, 0};
    char *ct = NULL;
    CURLcode rc;

    memset(r, 0, sizeof(*r));
    if (!c)
        return -1;
    for (size_t i = 0; headers && headers[i]; i++)
        h = curl_slist_append(h, headers[i]);
    if (body && !headers)
        h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    if (ct)
        snprintf(r->content_type, sizeof(r->content_type), "%s", ct);
    r->body = sink.data ? sink.data : strdup("");
    r->len = sink.len;
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc == CURLE_OK ? 0 : -1;
}

void itest_resp_release(struct itest_resp *r)
{
    free(r->body);
    memset(r, 0, sizeof(*r));
}

json_t *itest_resp_json(const struct itest_resp *r)
{
    return r->body ? json_loadb(r->body, r->len, 0, NULL) : NULL;
}

long itest_metric(const struct itest_server *s, const char *name)
{
    char url[128], line[160];
    struct itest_resp r;
    const char *at;
    long v = -1;

    snprintf(url, sizeof(url), "%s/metrics", s->base);
    snprintf(line, sizeof(line), "\n%s ", name);
    if (!itest_request("GET", url, NULL, NULL, &r) && r.status == 200 &&
        (at = strstr(r.body, line)))
        v = strtol(at + strlen(line), NULL, 10);
    itest_resp_release(&r);
    return v;
}

int itest_raw_get(int port, const char *path, int rcvbuf)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    char req[512];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), n;

    if (fd < 0)
        return -1;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    n = snprintf(
        req, sizeof(req),
        "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n", path);
    if ((rcvbuf > 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf))) ||
        connect(fd, (struct sockaddr *)&a, sizeof(a)) || write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    return fd;
}

long itest_raw_drain(int fd, int timeout_ms, char **out)
{
    long deadline = now_ms() + timeout_ms, total = 0;
    struct sink sink = {NULL, 0};
    char buf[65536];

    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t n;

        if (now_ms() > deadline) {
            total = -1;
            break;
        }
        if (poll(&p, 1, 100) <= 0)
            continue;
        n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            break; /* closed (or reset) by the server */
        if (out && sink_write(buf, 1, (size_t)n, &sink) != (size_t)n) {
            total = -1;
            break;
        }
        total += n;
    }
    if (out)
        *out = sink.data ? sink.data : strdup("");
    else
        free(sink.data);
    return total;
}

long itest_post_input(const struct itest_server *s, const char *sid, const char *json,
                      json_t **answer)
{
    char url[256];
    struct itest_resp r;
    long status;

    snprintf(url, sizeof(url), "%s/api/reflexor/sessions/%s/moorex", s->base, sid);
    if (itest_request("POST", url, json, NULL, &r)) {
        itest_resp_release(&r); /* a failed request has a body too */
        return -1;
    }
    status = r.status;
    if (answer)
        *answer = itest_resp_json(&r);
    itest_resp_release(&r);
    return status;
}

json_t *itest_poll_json(const char *url, bool (*pred)(json_t *, void *), void *arg,
                        int timeout_ms)
{
    long deadline = now_ms() + timeout_ms;
    json_t *j = NULL;

    do {
        struct itest_resp r;

        json_decref(j);
        j = NULL;
        if (!itest_request("GET", url, NULL, NULL, &r))
            j = itest_resp_json(&r);
        itest_resp_release(&r);
        if (j && pred(j, arg))
            return j;
        usleep(20000);
    } while (now_ms() < deadline);
    return j;
}

/* ---- SSE -------------------------------------------------------------------- */

/* The bound of one line or event of a followed stream (a whole state snapshot). */
#define ITEST_SSE_EVENT_MAX (64u << 20)

/*
 * One event of a followed stream (the lock is held: sse_parse_feed runs in
 * sse_write). Only data that is a JSON object or array is kept, with the
 * event's id: tests look events up by their JSON.
 */
static int sse_on_event(void *ctx, const struct sse_parse_event *ev)
{
    struct itest_sse *e = ctx;
    json_t *data = json_loadb(ev->data, ev->data_len, 0, NULL);

    if (data) {
        json_array_append_new(e->events,
                              json_pack("{s:s, s:o}", "id", ev->id, "data", data));
        pthread_cond_broadcast(&e->cond);
    }
    return 0;
}

struct sse_ctx {
    struct itest_sse *e;
    struct sse_parse parser; /* effects/sse_parse, the server's clients' rules */
    bool reported;           /* a parse error was printed once */
};

static size_t sse_write(char *p, size_t size, size_t n, void *cls)
{
    struct sse_ctx *ctx = cls;
    struct itest_sse *e = ctx->e;
    char *d;
    int rc;

    pthread_mutex_lock(&e->lock);
    d = realloc(e->raw, e->raw_len + size * n + 1);
    if (!d) {
        pthread_mutex_unlock(&e->lock);
        return 0;
    }
    memcpy(d + e->raw_len, p, size * n);
    e->raw_len += size * n;
    d[e->raw_len] = '\0';
    e->raw = d;
    /* The raw text is kept whole for checks on framing; events go on from here. */
    rc = sse_parse_feed(&ctx->parser, p, size * n);
    if (rc && !ctx->reported) {
        fprintf(stderr, "itest: %s: the event stream cannot be parsed: %s\n", e->url,
                strerror(-rc));
        ctx->reported = true;
    }
    pthread_mutex_unlock(&e->lock);
    return size * n;
}

static int sse_progress(void *cls, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    struct itest_sse *e = cls;
    bool stop;

    (void)a;
    (void)b;
    (void)c;
    (void)d;
    pthread_mutex_lock(&e->lock);
    stop = e->stop;
    pthread_mutex_unlock(&e->lock);
    return stop;
}

static void *sse_main(void *arg)
{
    struct itest_sse *e = arg;
    struct sse_ctx ctx = {.e = e};
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Accept: text/event-stream");
    char hdr[64];
    char *ct = NULL;

    sse_parse_init(&ctx.parser, ITEST_SSE_EVENT_MAX, sse_on_event, e);
    if (*e->last_event_id) {
        snprintf(hdr, sizeof(hdr), "Last-Event-ID: %s", e->last_event_id);
        h = curl_slist_append(h, hdr);
    }
    curl_easy_setopt(c, CURLOPT_URL, e->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sse_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &ctx);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, sse_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, e);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 120000L);
    curl_easy_perform(c);
    pthread_mutex_lock(&e->lock);
    /* As a browser would: an event cut before its blank line is dropped. */
    if (sse_parse_finish(&ctx.parser, false) && !ctx.reported)
        fprintf(stderr, "itest: %s: the event stream cannot be parsed\n", e->url);
    sse_parse_release(&ctx.parser);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &e->status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    if (ct)
        snprintf(e->content_type, sizeof(e->content_type), "%s", ct);
    e->done = true;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return NULL;
}

int itest_sse_open(struct itest_sse *e, const char *url, const char *last_event_id)
{
    memset(e, 0, sizeof(*e));
    snprintf(e->url, sizeof(e->url), "%s", url);
    if (last_event_id)
        snprintf(e->last_event_id, sizeof(e->last_event_id), "%s", last_event_id);
    e->events = json_array();
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    return pthread_create(&e->thread, NULL, sse_main, e) ? -1 : 0;
}

struct type_key {
    const char *type, *key, *value;
};

static bool event_matches(json_t *data, void *arg)
{
    const struct type_key *m = arg;
    const char *t = json_string_value(json_object_get(data, "type"));

    if (!t || strcmp(t, m->type))
        return false;
    if (!m->key)
        return true;
    return json_is_string(json_object_get(data, m->key)) &&
           !strcmp(json_string_value(json_object_get(data, m->key)), m->value);
}

int itest_sse_wait_for(struct itest_sse *e, size_t from, bool (*pred)(json_t *, void *),
                       void *arg, int timeout_ms)
{
    struct timespec ts = now_deadline(CLOCK_REALTIME, timeout_ms * NOW_NS_PER_MS);
    int found = -1;

    pthread_mutex_lock(&e->lock);
    for (;;) {
        for (size_t i = from; i < json_array_size(e->events) && found < 0; i++)
            if (pred(json_object_get(json_array_get(e->events, i), "data"), arg))
                found = (int)i;
        if (found >= 0 || e->done)
            break;
        if (pthread_cond_timedwait(&e->cond, &e->lock, &ts) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&e->lock);
    return found;
}

int itest_sse_wait(struct itest_sse *e, size_t from, const char *type, const char *key,
                   const char *value, int timeout_ms)
{
    struct type_key m = {type, key, value};

    return itest_sse_wait_for(e, from, event_matches, &m, timeout_ms);
}

bool itest_sse_wait_raw(struct itest_sse *e, const char *text, int timeout_ms)
{
    long deadline = now_ms() + timeout_ms;
    bool found;

    for (;;) {
        pthread_mutex_lock(&e->lock);
        found = e->raw && strstr(e->raw, text);
        pthread_mutex_unlock(&e->lock);
        if (found || now_ms() > deadline)
            return found;
        usleep(10000);
    }
}

bool itest_sse_wait_done(struct itest_sse *e, int timeout_ms)
{
    long deadline = now_ms() + timeout_ms;
    bool done;

    for (;;) {
        pthread_mutex_lock(&e->lock);
        done = e->done;
        pthread_mutex_unlock(&e->lock);
        if (done || now_ms() > deadline)
            return done;
        usleep(10000);
    }
}

json_t *itest_sse_event(struct itest_sse *e, size_t i)
{
    json_t *d;

    pthread_mutex_lock(&e->lock);
    d = json_object_get(json_array_get(e->events, i), "data");
    pthread_mutex_unlock(&e->lock);
    return d;
}

size_t itest_sse_count(struct itest_sse *e)
{
    size_t n;

    pthread_mutex_lock(&e->lock);
    n = json_array_size(e->events);
    pthread_mutex_unlock(&e->lock);
    return n;
}

void itest_sse_close(struct itest_sse *e)
{
    pthread_mutex_lock(&e->lock);
    e->stop = true;
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    json_decref(e->events);
    free(e->raw);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->cond);
}

char *itest_new_session(const struct itest_server *s)
{
    char url[128], *id = NULL;
    struct itest_resp r;
    json_t *j;

    snprintf(url, sizeof(url), "%s/api/reflexor/sessions", s->base);
    if (itest_request("POST", url, "", NULL, &r)) {
        itest_resp_release(&r); /* a failed request has a body too */
        return NULL;
    }
    j = r.status == 201 ? itest_resp_json(&r) : NULL;
    if (json_is_string(json_object_get(j, "id")))
        id = strdup(json_string_value(json_object_get(j, "id")));
    json_decref(j);
    itest_resp_release(&r);
    return id;
}

json_t *itest_last_assistant(json_t *state)
{
    json_t *a = json_object_get(state, "assistantMessages");

    return json_array_get(a, json_array_size(a) - 1);
}

json_t *itest_tool_record(json_t *state, size_t i)
{
    return json_array_get(json_object_get(state, "toolCallRecords"), i);
}

long itest_get_status(const struct itest_server *s, const char *path)
{
    char url[1024];
    struct itest_resp r;
    long status = -1;

    snprintf(url, sizeof(url), "%s%s", s->base, path);
    if (!itest_request("GET", url, NULL, NULL, &r))
        status = r.status;
    itest_resp_release(&r);
    return status;
}

void itest_remove_db(const char *path)
{
    char p[1024];

    unlink(path);
    snprintf(p, sizeof(p), "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof(p), "%s-shm", path);
    unlink(p);
    if (itest_on_postgres()) {
        char name[64];

        pg_name_for_file(path, name, sizeof(name));
        pg_dropdb(name);
    }
}

/* The filler beside the server: build/bench/scale_fill for build/reflexor. */
static void fill_path(char *buf, size_t n)
{
    const char *server = getenv("RX_SERVER") ? getenv("RX_SERVER") : "build/reflexor";
    const char *slash = strrchr(server, '/');

    if (getenv("RX_SCALE_FILL"))
        snprintf(buf, n, "%s", getenv("RX_SCALE_FILL"));
    else if (slash)
        snprintf(buf, n, "%.*s/bench/scale_fill", (int)(slash - server), server);
    else
        snprintf(buf, n, "bench/scale_fill");
}

int itest_pg_sql(const char *path, const char *sql, char *out, size_t n)
{
    char name[64];

    if (!itest_on_postgres())
        return -1;
    pg_name_for_file(path, name, sizeof(name));
    return pg_sql_on(name, sql, out, n);
}

int itest_fill(const char *path, const char *const *args)
{
    char bin[PATH_MAX], db[PATH_MAX + 128], out[512] = "";
    char *argv[40];
    int argc = 0, rc;

    fill_path(bin, sizeof(bin));
    itest_remove_db(path);
    snprintf(db, sizeof(db), "%s", path);
    if (itest_on_postgres()) { /* the database a server started on `path` uses */
        char name[64];

        pg_name_for_file(path, name, sizeof(name));
        if (pg_createdb(name) || pg_url(name, db, sizeof(db)))
            return -1;
    }
    argv[argc++] = bin;
    argv[argc++] = (char *)"--db";
    argv[argc++] = db;
    for (size_t i = 0; args && args[i] && argc < 38; i++)
        argv[argc++] = (char *)args[i];
    argv[argc] = NULL;
    rc = itest_run(argv, out, sizeof(out));
    fprintf(stderr, "itest: %s: %s", bin, rc ? "failed\n" : out);
    return rc ? -1 : 0;
}

int itest_fake_start(struct itest_fake *f)
{
    const char *bin =
        getenv("FAKE_OPENAI") ? getenv("FAKE_OPENAI") : "build/tests/fake_openai";
    int out[2], in[2];
    char buf[64] = "";
    ssize_t n;

    memset(f, 0, sizeof(*f));
    if (pipe2(out, O_CLOEXEC) || pipe2(in, O_CLOEXEC))
        return -1;
    f->pid = fork();
    if (f->pid == 0) {
        dup2(out[1], 1);
        dup2(in[0], 0);
        execl(bin, "fake_openai", "--exit-on-eof", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(in[0]);
    f->hold_fd = in[1];
    n = f->pid > 0 ? read(out[0], buf, sizeof(buf) - 1) : -1;
    close(out[0]);
    if (n <= 0 || sscanf(buf, "port %d", &f->port) != 1) {
        itest_fake_stop(f);
        return -1;
    }
    return 0;
}

void itest_fake_stop(struct itest_fake *f)
{
    if (f->pid > 0) {
        kill(f->pid, SIGTERM);
        waitpid(f->pid, NULL, 0);
    }
    if (f->hold_fd > 0)
        close(f->hold_fd);
    memset(f, 0, sizeof(*f));
}

long itest_now_ms(void)
{
    return now_ms();
}

const char *itest_node(void)
{
    static char found[PATH_MAX];
    char path[4096], *save = NULL;

    if (*found)
        return found;
    snprintf(path, sizeof(path), "%s", getenv("PATH") ? getenv("PATH") : "/usr/bin");
    for (char *d = strtok_r(path, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(found, sizeof(found), "%s/node", *d ? d : ".");
        if (!access(found, X_OK))
            return found;
    }
    *found = '\0';
    return NULL;
}
