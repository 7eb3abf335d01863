/*
 * check_users - users (SPEC 4.4, issue 30) through the real binary: every
 * session belongs to someone, through every protocol.
 *
 *  - isolation: alice (a key from `reflexor users add`) makes something in
 *    every protocol (a native session answered, renamed, forked, exported and
 *    imported, one waiting for an approval; a /v1 conversation; a LangGraph
 *    thread with a finished run). Then bob, for every route of every
 *    protocol that takes an id (a table: protocol, method, path, body), asks
 *    with alice's ids and with unknown ids; the two answers must be equal in
 *    status, content type and body (ids replaced by placeholders). Bob's
 *    lists, searches and streams (the sessions feed, his own session's
 *    stream, a LangGraph run stream), watched for 2 s while alice works,
 *    show nothing of hers; /v1 continuity never continues her conversation;
 *    alice's resources are unchanged afterwards. An admin (users add --admin,
 *    or the shared auth.token) sees everyone's; ?owner= filters.
 *    The route x protocol table is printed on stderr.
 *  - bad keys (missing, wrong, removed while the server runs, another case,
 *    8 KiB, rotated away) answer 401 in each API's shape; no key ever
 *    appears in the server's output (stdout and stderr, at debug level);
 *    `users list` names users and never prints a key.
 *  - trusted-header: the header from outside auth.trusted_proxies is a 401,
 *    from a trusted proxy it names the principal, and without it a 401.
 *  - per-user limits: user_sessions (429 in each API's shape, others go on),
 *    user_rate (429 with Retry-After, others go on).
 *  - /metrics needs an admin or metrics.token; /healthz answers anyone,
 *    details only for an admin; /me and /client.json say who and how.
 *  - PostgreSQL (RX_PG_DIR): two nodes on one database: a key added with
 *    `users add --db postgres://...` works at once on both, a removed one
 *    stops at once on both, and bob on node 2 gets 404 for alice's session
 *    made on node 1.
 */
#include <check.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/itest.h"

extern char **environ;

Suite *users_suite(void);

static int wait_ms(void)
{
    return getenv("RX_SERVER_WRAPPER") ? 120000 : 20000;
}

#define NATIVE "/api/reflexor"
#define LG     "/api/langgraph"

/* ---- HTTP with the answer's headers ------------------------------------------- */

struct hresp {
    long status;
    char *body;
    size_t len;
    char ctype[128];
    char session_hdr[160]; /* X-Reflexor-Session */
    char retry_after[32];
    bool timed_out;
};

struct hsink {
    struct hresp *r;
    char *data;
    size_t len;
};

static size_t body_cb(char *p, size_t size, size_t n, void *cls)
{
    struct hsink *s = cls;
    char *d = realloc(s->data, s->len + size * n + 1);

    if (!d)
        return 0;
    memcpy(d + s->len, p, size * n);
    s->len += size * n;
    d[s->len] = '\0';
    s->data = d;
    return size * n;
}

static void header_value(const char *line, size_t n, const char *name, char *out,
                         size_t outn)
{
    size_t k = strlen(name), len;

    if (n <= k + 1 || strncasecmp(line, name, k) || line[k] != ':')
        return;
    line += k + 1;
    n -= k + 1;
    while (n && (*line == ' ' || *line == '\t'))
        line++, n--;
    while (n && (line[n - 1] == '\r' || line[n - 1] == '\n' || line[n - 1] == ' '))
        n--;
    len = n < outn - 1 ? n : outn - 1;
    memcpy(out, line, len);
    out[len] = '\0';
}

static size_t header_cb(char *p, size_t size, size_t n, void *cls)
{
    struct hsink *s = cls;

    header_value(p, size * n, "X-Reflexor-Session", s->r->session_hdr,
                 sizeof(s->r->session_hdr));
    header_value(p, size * n, "Retry-After", s->r->retry_after,
                 sizeof(s->r->retry_after));
    return size * n;
}

/* One request; the body is kept even when the time runs out (a stream). */
static int hreq(const char *method, const char *url, const char *body,
                const char *const *hdrs, long timeout_ms, struct hresp *r)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    struct hsink sink = {r, NULL, 0};
    char *ct = NULL;
    CURLcode rc;

    memset(r, 0, sizeof(*r));
    if (!c)
        return -1;
    for (size_t i = 0; hdrs && hdrs[i]; i++)
        if (*hdrs[i])
            h = curl_slist_append(h, hdrs[i]);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &sink);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    if (ct)
        snprintf(r->ctype, sizeof(r->ctype), "%s", ct);
    r->body = sink.data ? sink.data : strdup("");
    r->len = sink.len;
    r->timed_out = rc == CURLE_OPERATION_TIMEDOUT;
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc == CURLE_OK || r->timed_out ? 0 : -1;
}

static const char *str_or(const char *s, const char *dflt)
{
    return s ? s : dflt;
}

static void hfree(struct hresp *r)
{
    free(r->body);
    memset(r, 0, sizeof(*r));
}

static json_t *hjson(const struct hresp *r)
{
    return r->body ? json_loadb(r->body, r->len, 0, NULL) : NULL;
}

/* A principal: how its requests authenticate ("" = not at all). */
struct who {
    const char *name;
    char auth[9000];  /* a header line, e.g. "Authorization: Bearer KEY" */
    char query[9000]; /* or "token=KEY" for ?token= (then auth is "") */
};

static void who_bearer(struct who *w, const char *name, const char *key)
{
    memset(w, 0, sizeof(*w));
    w->name = name;
    snprintf(w->auth, sizeof(w->auth), "Authorization: Bearer %s", key);
}

static void who_header(struct who *w, const char *name, const char *line)
{
    memset(w, 0, sizeof(*w));
    w->name = name;
    snprintf(w->auth, sizeof(w->auth), "%s", line);
}

/* F_QUERY_KEY / F_API_KEY: bob's key as ?token= (EventSource) or X-Api-Key (the
   LangGraph SDK) instead of Authorization: Bearer. */
enum { F_SSE = 1, F_SESSION_HDR = 2, F_QUERY_KEY = 4, F_API_KEY = 8 };

/*
 * `method` base+path as `w` with `body` (JSON, may be NULL). F_SSE asks for
 * an event stream; `extra` is one more header line (may be NULL).
 */
static void callx(const struct itest_server *s, const struct who *w, const char *method,
                  const char *path, const char *body, const char *extra, unsigned flags,
                  long timeout_ms, struct hresp *r)
{
    char url[20000];
    const char *hdrs[6];
    int n = 0;

    if (w && *w->query)
        snprintf(url, sizeof(url), "%s%s%c%s", s->base, path,
                 strchr(path, '?') ? '&' : '?', w->query);
    else
        snprintf(url, sizeof(url), "%s%s", s->base, path);
    if (w && *w->auth)
        hdrs[n++] = w->auth;
    if (body)
        hdrs[n++] = "Content-Type: application/json";
    if (flags & F_SSE)
        hdrs[n++] = "Accept: text/event-stream";
    if (extra)
        hdrs[n++] = extra;
    hdrs[n] = NULL;
    ck_assert_msg(hreq(method, url, body, hdrs, timeout_ms, r) == 0, "%s %s: no answer",
                  method, path);
}

static long call(const struct itest_server *s, const struct who *w, const char *method,
                 const char *path, const char *body, struct hresp *r)
{
    callx(s, w, method, path, body, NULL, 0, 30000, r);
    return r->status;
}

/* The same, the answer as JSON (NEW, may be NULL); the status in *status. */
static json_t *call_json(const struct itest_server *s, const struct who *w,
                         const char *method, const char *path, const char *body,
                         long *status)
{
    struct hresp r;
    json_t *j;

    call(s, w, method, path, body, &r);
    *status = r.status;
    j = hjson(&r);
    hfree(&r);
    return j;
}

static long call_json_status(const struct itest_server *s, const struct who *w,
                             const char *method, const char *path)
{
    long st;

    json_decref(call_json(s, w, method, path, NULL, &st));
    return st;
}

/* ---- the users command -------------------------------------------------------- */

static const char *server_bin(void)
{
    return getenv("RX_SERVER") ? getenv("RX_SERVER") : "build/reflexor";
}

/* The name of the database that stands for `path` on PostgreSQL (as itest.c). */
static void pg_name_for_file(const char *path, char *name, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    for (const char *p = path; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    snprintf(name, n, "rx_file_%016llx", (unsigned long long)h);
}

/* What `--db` names for the server started with `--db path`. */
static void db_arg(const char *path, char *out, size_t n)
{
    char host[PATH_MAX], name[64];

    if (!itest_on_postgres()) {
        snprintf(out, n, "%s", path);
        return;
    }
    pg_name_for_file(path, name, sizeof(name));
    ck_assert_ptr_nonnull(realpath(getenv("RX_PG_DIR"), host));
    snprintf(out, n, "postgresql:///%s?host=%s&user=postgres", name, host);
}

/* A fresh database for `path` (on PostgreSQL, made now so `users` can use it). */
static void fresh_db(char *path, size_t n, const char *tag)
{
    int fd;

    snprintf(path, n, "/tmp/rx-users-%s-XXXXXX", tag);
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    itest_remove_db(path); /* the server (or `users`) makes the file */
    if (itest_on_postgres()) {
        char name[64], out[512];
        const char *tool = getenv("RX_PGTMP") ? getenv("RX_PGTMP") : "scripts/pgtmp.sh";
        char *argv[] = {(char *)tool, (char *)"createdb", getenv("RX_PG_DIR"), name,
                        NULL};

        pg_name_for_file(path, name, sizeof(name));
        ck_assert_int_eq(itest_run(argv, out, sizeof(out)), 0);
    }
}

/* `reflexor --db DB users a1 [a2 [a3]]`: the exit status, stdout in out. */
static int users_cmd(const char *path, char *out, size_t n, const char *a1,
                     const char *a2, const char *a3)
{
    char db[PATH_MAX + 200];
    char *argv[] = {(char *)server_bin(), (char *)"--db", db,         (char *)"users",
                    (char *)a1,           (char *)a2,     (char *)a3, NULL};

    db_arg(path, db, sizeof(db));
    return itest_run(argv, out, n);
}

/* The key `users add|rotate NAME` printed (malloc'd): the rxk_ token of its line. */
static char *users_key(const char *path, const char *verb, const char *name, bool admin)
{
    char out[4096], *at, *end;
    int rc = users_cmd(path, out, sizeof(out), verb, name, admin ? "--admin" : NULL);

    ck_assert_msg(rc == 0, "users %s %s: exit %d, out '%s'", verb, name, rc, out);
    at = strstr(out, "rxk_");
    if (!at)
        for (at = out; *at && isspace((unsigned char)*at); at++)
            ;
    for (end = at; *end && !isspace((unsigned char)*end); end++)
        ;
    *end = '\0';
    ck_assert_msg(strlen(at) >= 20, "users %s %s printed no key: '%s'", verb, name, out);
    return strdup(at);
}

/* ---- servers ------------------------------------------------------------------ */

/*
 * Start on `path` (NULL: in memory); with errfile, the server's stderr goes
 * there (our stderr is given back at once).
 */
static void start_on(struct itest_server *s, const char *cfg, const char *path,
                     const char *errfile)
{
    const char *args[] = {"--db", path, NULL};
    int saved = -1, rc;

    if (errfile) {
        int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

        ck_assert_int_ge(fd, 0);
        saved = dup(STDERR_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    rc = itest_server_start(s, cfg, path ? args : NULL);
    if (errfile) {
        dup2(saved, STDERR_FILENO);
        close(saved);
    }
    ck_assert_msg(rc == 0, "server did not start with %s", cfg);
}

static void stop(struct itest_server *s)
{
    ck_assert_int_eq(itest_server_stop(s), 0);
}

/* What the server wrote on stdout since it started (what is there now). */
static char *drain_stdout(const struct itest_server *s)
{
    char *all = strdup(""), buf[4096];
    size_t len = 0;
    int fl = fcntl(s->out_fd, F_GETFL);

    fcntl(s->out_fd, F_SETFL, fl | O_NONBLOCK);
    for (;;) {
        ssize_t n = read(s->out_fd, buf, sizeof(buf));
        char *d;

        if (n <= 0)
            break;
        d = realloc(all, len + (size_t)n + 1);
        ck_assert_ptr_nonnull(d);
        memcpy(d + len, buf, (size_t)n);
        len += (size_t)n;
        d[len] = '\0';
        all = d;
    }
    fcntl(s->out_fd, F_SETFL, fl);
    return all;
}

static char *slurp(const char *file)
{
    FILE *f = fopen(file, "r");
    char *all = NULL;
    size_t n = 0;

    if (!f)
        return strdup("");
    if (getdelim(&all, &n, '\0', f) < 0) {
        free(all);
        all = strdup("");
    }
    fclose(f);
    return all;
}

/* ---- sessions, answers, shapes -------------------------------------------------- */

/* POST /sessions as w: the id (malloc'd). */
static char *new_session(const struct itest_server *s, const struct who *w)
{
    long st;
    json_t *j = call_json(s, w, "POST", NATIVE "/sessions", NULL, &st);
    char *id;

    ck_assert_msg(st == 201, "%s: create a session: %ld", w->name, st);
    id = strdup(json_string_value(json_object_get(j, "id")));
    json_decref(j);
    return id;
}

static void say(const struct itest_server *s, const struct who *w, const char *sid,
                const char *text)
{
    char path[256], body[1024];
    struct hresp r;

    snprintf(path, sizeof(path), NATIVE "/sessions/%s/moorex", sid);
    snprintf(body, sizeof(body), "{\"type\":\"user-send-message\",\"content\":\"%s\"}",
             text);
    ck_assert_msg(call(s, w, "POST", path, body, &r) == 200, "%s says: %ld %s", w->name,
                  r.status, r.body);
    hfree(&r);
}

static json_t *state_of(const struct itest_server *s, const struct who *w,
                        const char *sid)
{
    char path[256];
    long st;
    json_t *j;

    snprintf(path, sizeof(path), NATIVE "/sessions/%s", sid);
    j = call_json(s, w, "GET", path, NULL, &st);
    ck_assert_msg(st == 200, "%s: state of %s: %ld", w->name, sid, st);
    return j;
}

/* Poll the state of sid until pred. NEW reference. */
static json_t *wait_state(const struct itest_server *s, const struct who *w,
                          const char *sid, bool (*pred)(json_t *, void *), void *arg)
{
    long deadline = itest_now_ms() + wait_ms();
    json_t *j;

    for (;;) {
        j = state_of(s, w, sid);
        if (pred(j, arg))
            return j;
        ck_assert_msg(itest_now_ms() < deadline, "session %s: not there in time", sid);
        json_decref(j);
        usleep(20000);
    }
}

static bool answered(json_t *st, void *arg)
{
    json_t *last = itest_last_assistant(st);
    const char *status = json_string_value(json_object_get(last, "status"));

    (void)arg;
    return status && !strcmp(status, "complete");
}

static bool call_pending(json_t *st, void *arg)
{
    json_t *rec = itest_tool_record(st, 0);
    const char *ap = json_string_value(json_object_get(rec, "approval"));

    (void)arg;
    return ap && !strcmp(ap, "pending");
}

/* The error code of an answer in the shape of `proto` ("" when it has none). */
enum proto { P_NATIVE, P_OAI, P_LG };
static const char *const proto_name[] = {"native", "openai", "langgraph"};

static bool shaped(enum proto p, const struct hresp *r, const char *code)
{
    json_t *j = hjson(r), *e;
    bool ok = false;

    switch (p) {
    case P_NATIVE:
        ok = json_is_string(json_object_get(j, "error")) &&
             json_is_string(json_object_get(j, "message")) &&
             (!code || !strcmp(json_string_value(json_object_get(j, "error")), code));
        break;
    case P_OAI:
        e = json_object_get(j, "error");
        ok = json_is_object(e) && json_is_string(json_object_get(e, "message")) &&
             json_object_get(e, "type") &&
             (!code || (json_is_string(json_object_get(e, "code")) &&
                        !strcmp(json_string_value(json_object_get(e, "code")), code)));
        break;
    case P_LG:
        ok = json_is_string(json_object_get(j, "detail"));
        break;
    }
    json_decref(j);
    return ok;
}

/* ---- the isolation table --------------------------------------------------------- */

/*
 * Placeholders: {S} the target (one of alice's ids, or an unknown one), {M}
 * alice's assistant message, {R} alice's run, {T} her pending tool call,
 * {C} a checkpoint of her thread, {B} bob's own thread (the same both ways).
 */
struct route {
    enum proto p;
    const char *method;
    const char *path; /* under the protocol's prefix */
    const char *body;
    unsigned flags;
};

#define RUN_IN                                                                           \
    "\"input\":{\"messages\":[{\"type\":\"human\",\"content\":\"bob-was-here\"}]}"
#define CHAT_IN                                                                          \
    "{\"model\":\"reflexor\",\"messages\":[{\"role\":\"user\",\"content\":\"bob\"}]}"

static const struct route routes[] = {
    /* the native API (/api/reflexor) */
    {P_NATIVE, "GET", "/sessions/{S}", NULL, 0},
    {P_NATIVE, "HEAD", "/sessions/{S}", NULL, 0},
    {P_NATIVE, "GET", "/sessions/{S}?at=1", NULL, 0},
    {P_NATIVE, "GET", "/sessions/{S}?at=0", NULL, 0},
    {P_NATIVE, "GET", "/sessions/{S}/history", NULL, 0},
    {P_NATIVE, "GET", "/sessions/{S}/history?after=0&limit=5", NULL, 0},
    {P_NATIVE, "GET", "/sessions/{S}/export", NULL, 0},
    {P_NATIVE, "GET", "/sessions/{S}/moorex", NULL, F_SSE},
    {P_NATIVE, "GET", "/sessions/{S}/moorex?mode=patch", NULL, F_SSE},
    {P_NATIVE, "GET", "/sessions/{S}/messages/{M}", NULL, 0},
    {P_NATIVE, "GET", "/sessions/{S}/messages/{M}", NULL, F_SSE},
    {P_NATIVE, "GET", "/sessions/{S}/moorex", NULL, F_SSE | F_QUERY_KEY},
    {P_NATIVE, "GET", "/sessions/{S}/messages/{M}", NULL, F_SSE | F_QUERY_KEY},
    {P_NATIVE, "GET", "/sessions/{S}", NULL, F_QUERY_KEY},
    {P_NATIVE, "GET", "/sessions/{S}/nothing-here", NULL, 0},
    {P_NATIVE, "POST", "/sessions/{S}/fork", "{\"at\":1}", 0},
    {P_NATIVE, "POST", "/sessions/{S}/fork", "{\"at\":0}", 0},
    {P_NATIVE, "PATCH", "/sessions/{S}", "{\"title\":\"bob-was-here\"}", 0},
    {P_NATIVE, "POST", "/sessions/{S}/moorex",
     "{\"type\":\"user-send-message\",\"content\":\"bob-was-here\"}", 0},
    {P_NATIVE, "POST", "/sessions/{S}/moorex",
     "{\"type\":\"user-review-tool-call\",\"toolCallId\":\"{T}\",\"decision\":"
     "\"approve\"}",
     0},
    {P_NATIVE, "POST", "/sessions/{S}/moorex",
     "{\"type\":\"user-review-tool-call\",\"toolCallId\":\"{T}\",\"decision\":"
     "\"reject\"}",
     0},
    {P_NATIVE, "POST", "/sessions/{S}/moorex", "{\"type\":\"user-cancel\"}", 0},
    {P_NATIVE, "POST", "/sessions/{S}/moorex",
     "{\"type\":\"user-configure\",\"settings\":{\"systemPrompt\":\"bob\"}}", 0},
    /* the OpenAI-compatible API (/v1) */
    {P_OAI, "POST", "/chat/completions", CHAT_IN, F_SESSION_HDR},
    {P_OAI, "POST", "/chat/completions",
     "{\"model\":\"reflexor\",\"stream\":true,\"messages\":[{\"role\":\"user\","
     "\"content\":\"bob\"}]}",
     F_SESSION_HDR},
    /* the LangGraph subset (/api/langgraph) */
    {P_LG, "GET", "/threads/{S}", NULL, 0},
    {P_LG, "GET", "/threads/{S}", NULL, F_API_KEY},
    {P_LG, "GET", "/threads/{S}/state", NULL, 0},
    {P_LG, "GET", "/threads/{S}/state/{C}", NULL, 0},
    {P_LG, "POST", "/threads/{S}/state/checkpoint",
     "{\"checkpoint\":{\"checkpoint_id\":\"{C}\"}}", 0},
    {P_LG, "POST", "/threads/{S}/state", "{\"values\":{}}", 0},
    {P_LG, "GET", "/threads/{S}/history", NULL, 0},
    {P_LG, "POST", "/threads/{S}/history", "{\"limit\":5}", 0},
    {P_LG, "GET", "/threads/{S}/runs", NULL, 0},
    {P_LG, "GET", "/threads/{S}/runs/{R}", NULL, 0},
    {P_LG, "GET", "/threads/{S}/runs/{R}/join", NULL, 0},
    {P_LG, "GET", "/threads/{S}/runs/{R}/stream", NULL, F_SSE},
    {P_LG, "GET", "/threads/{S}/runs/{R}/stream", NULL, F_SSE | F_API_KEY},
    {P_LG, "GET", "/threads/{B}/runs/{R}", NULL, 0},
    {P_LG, "GET", "/threads/{B}/runs/{R}/join", NULL, 0},
    {P_LG, "GET", "/threads/{B}/runs/{R}/stream", NULL, F_SSE},
    {P_LG, "POST", "/threads/{S}/copy", NULL, 0},
    {P_LG, "PATCH", "/threads/{S}", "{\"metadata\":{\"bob\":\"was-here\"}}", 0},
    {P_LG, "POST", "/threads/{S}/runs", "{\"assistant_id\":\"agent\"," RUN_IN "}", 0},
    {P_LG, "POST", "/threads/{S}/runs/wait", "{\"assistant_id\":\"agent\"," RUN_IN "}",
     0},
    {P_LG, "POST", "/threads/{S}/runs/stream",
     "{\"assistant_id\":\"agent\",\"stream_mode\":[\"values\"]," RUN_IN "}", F_SSE},
    {P_LG, "POST", "/threads/{S}/runs/stream",
     "{\"assistant_id\":\"agent\",\"stream_mode\":[\"values\",\"messages-tuple\"]," RUN_IN
     "}",
     F_SSE | F_API_KEY},
    {P_LG, "POST", "/threads/{S}/runs/wait",
     "{\"assistant_id\":\"agent\",\"command\":{\"resume\":{\"decisions\":"
     "[{\"type\":\"approve\"}]}}}",
     0},
    {P_LG, "POST", "/threads/{S}/runs/{R}/cancel", NULL, 0},
    {P_LG, "POST", "/threads/{B}/runs/{R}/cancel", NULL, 0},
    {P_LG, "DELETE", "/threads/{B}/runs/{R}", NULL, 0},
    {P_LG, "DELETE", "/threads/{S}/runs/{R}", NULL, 0},
    {P_LG, "DELETE", "/threads/{S}", NULL, 0},
    /* destructive native routes last */
    {P_NATIVE, "DELETE", "/sessions/{S}", NULL, 0},
};
#define N_ROUTES (sizeof(routes) / sizeof(routes[0]))

struct ids {
    const char *M, *R, *T, *C, *B;
};

static const char *prefix_of(enum proto p)
{
    return p == P_NATIVE ? NATIVE : p == P_OAI ? "/v1" : LG;
}

/* `text` with every {X} replaced by its value. malloc'd. */
static char *expand(const char *text, const char *S, const struct ids *ids)
{
    size_t cap = strlen(text) + 1024, len = 0;
    char *out = malloc(cap);

    for (const char *p = text; *p;) {
        const char *v = NULL;

        if (p[0] == '{' && p[1] && p[2] == '}') {
            switch (p[1]) {
            case 'S':
                v = S;
                break;
            case 'M':
                v = ids->M;
                break;
            case 'R':
                v = ids->R;
                break;
            case 'T':
                v = ids->T;
                break;
            case 'C':
                v = ids->C;
                break;
            case 'B':
                v = ids->B;
                break;
            }
        }
        if (v) {
            size_t k = strlen(v);

            if (len + k + 1 > cap)
                out = realloc(out, cap = (len + k + 1) * 2);
            memcpy(out + len, v, k);
            len += k;
            p += 3;
        } else {
            if (len + 2 > cap)
                out = realloc(out, cap *= 2);
            out[len++] = *p++;
        }
    }
    out[len] = '\0';
    return out;
}

/* In place: every occurrence of `what` becomes `with` (no longer than `what`). */
static void replace_all(char *s, const char *what, const char *with)
{
    size_t a = strlen(what), b = strlen(with);
    char *at;

    if (!a || b > a)
        return;
    while ((at = strstr(s, what))) {
        memcpy(at, with, b);
        memmove(at + b, at + a, strlen(at + a) + 1);
    }
}

/* The answer's body with the ids it was asked about replaced by placeholders. */
static char *normalized(const char *body, const char *S, const struct ids *ids)
{
    char *n = strdup(body);

    replace_all(n, S, "{S}");
    replace_all(n, ids->R, "{R}");
    replace_all(n, ids->M, "{M}");
    replace_all(n, ids->T, "{T}");
    return n;
}

struct row_result {
    int same, asked;
    long st_alice, st_unknown; /* of the first target that differed, else of the first */
    char code[64];
    char diff[400];
};

/* The error code of a body, whatever its shape, for the table. */
static void code_of(const char *body, char *out, size_t n)
{
    json_t *j = json_loads(body, 0, NULL), *e;

    *out = '\0';
    if (!j)
        return;
    e = json_object_get(j, "error");
    if (json_is_string(e))
        snprintf(out, n, "%s", json_string_value(e));
    else if (json_is_object(e) && json_is_string(json_object_get(e, "code")))
        snprintf(out, n, "%s", json_string_value(json_object_get(e, "code")));
    else if (json_is_string(json_object_get(j, "detail")))
        snprintf(out, n, "detail");
    json_decref(j);
}

/* One row on one of alice's ids: bob's answer against an unknown id's. */
/* bob, his key sent each way */
static struct who bob_q, bob_x;

static void try_route(const struct itest_server *s, const struct who *bob,
                      const struct route *rt, const char *target, const struct ids *alice,
                      const char *unknown, const struct ids *none, struct row_result *res)
{
    struct hresp a, u;
    char path[1024], hdr[256], *pa, *pu, *ba = NULL, *bu = NULL, *na, *nu;
    /* a stream that should be a 404 is given a moment to be one (longer under a
       wrapper such as valgrind); a leak then shows as a stream still open */
    long to = rt->flags & F_SSE ? (getenv("RX_SERVER_WRAPPER") ? 8000 : 1500) : 30000;

    if (rt->flags & F_QUERY_KEY)
        bob = &bob_q;
    else if (rt->flags & F_API_KEY)
        bob = &bob_x;

    /* alice's ids */
    pa = expand(rt->path, target, alice);
    ba = rt->body ? expand(rt->body, target, alice) : NULL;
    snprintf(path, sizeof(path), "%s%s", prefix_of(rt->p), pa);
    snprintf(hdr, sizeof(hdr), "X-Reflexor-Session: %s", target);
    callx(s, bob, rt->method, path, ba, rt->flags & F_SESSION_HDR ? hdr : NULL, rt->flags,
          to, &a);
    /* unknown ids */
    pu = expand(rt->path, unknown, none);
    bu = rt->body ? expand(rt->body, unknown, none) : NULL;
    snprintf(path, sizeof(path), "%s%s", prefix_of(rt->p), pu);
    snprintf(hdr, sizeof(hdr), "X-Reflexor-Session: %s", unknown);
    callx(s, bob, rt->method, path, bu, rt->flags & F_SESSION_HDR ? hdr : NULL, rt->flags,
          to, &u);
    na = normalized(a.body, target, alice);
    nu = normalized(u.body, unknown, none);
    res->asked++;
    if (a.status == u.status && !strcmp(a.ctype, u.ctype) && !strcmp(na, nu) &&
        !a.timed_out && u.status == 404) {
        res->same++;
        if (res->asked == 1) {
            res->st_alice = a.status;
            res->st_unknown = u.status;
            code_of(u.body, res->code, sizeof(res->code));
        }
    } else if (!*res->diff) {
        res->st_alice = a.status;
        res->st_unknown = u.status;
        code_of(u.body, res->code, sizeof(res->code));
        snprintf(res->diff, sizeof(res->diff),
                 "on %s: alice's id %ld '%.120s'%s vs unknown %ld '%.120s'", target,
                 a.status, na, a.timed_out ? " (still streaming)" : "", u.status, nu);
    }
    free(na);
    free(nu);
    free(pa);
    free(pu);
    free(ba);
    free(bu);
    hfree(&a);
    hfree(&u);
}

/* ---- background streams ------------------------------------------------------------ */

struct bg {
    pthread_t t;
    const struct itest_server *s;
    const struct who *w;
    const char *method;
    char path[512];
    const char *body;
    long ms;
    struct hresp r;
};

static void *bg_main(void *arg)
{
    struct bg *b = arg;
    char url[20000];
    const char *hdrs[4] = {NULL};
    int n = 0;

    if (*b->w->query)
        snprintf(url, sizeof(url), "%s%s%c%s", b->s->base, b->path,
                 strchr(b->path, '?') ? '&' : '?', b->w->query);
    else
        snprintf(url, sizeof(url), "%s%s", b->s->base, b->path);
    if (*b->w->auth)
        hdrs[n++] = b->w->auth;
    hdrs[n++] = "Accept: text/event-stream";
    if (b->body)
        hdrs[n++] = "Content-Type: application/json";
    if (hreq(b->method, url, b->body, hdrs, b->ms, &b->r))
        b->r.status = -1;
    return NULL;
}

static void bg_start(struct bg *b, const struct itest_server *s, const struct who *w,
                     const char *method, const char *path, const char *body, long ms)
{
    memset(b, 0, sizeof(*b));
    b->s = s;
    b->w = w;
    b->method = method;
    snprintf(b->path, sizeof(b->path), "%s", path);
    b->body = body;
    b->ms = ms;
    ck_assert_int_eq(pthread_create(&b->t, NULL, bg_main, b), 0);
}

static void bg_join(struct bg *b)
{
    pthread_join(b->t, NULL);
}

/* ---- alice's things -----------------------------------------------------------------
 */

struct alice_things {
    char *A, *AF, *AI, *AP, *AO, *AT; /* sessions (AT a thread) */
    char mid[64], rid[64], tcid[128], ckpt[128];
    char oai_answer[2048];
};

static const char *const LG_RUN_ALICE =
    "{\"assistant_id\":\"agent\",\"input\":{\"messages\":[{\"type\":\"human\","
    "\"content\":\"alice-lg-words\"}]}}";

static void make_alice_things(const struct itest_server *s, const struct who *alice,
                              struct alice_things *t)
{
    char path[512];
    struct hresp r;
    long st;
    json_t *j, *doc;

    memset(t, 0, sizeof(*t));
    /* A: answered, renamed; AF: its fork; AI: its export imported */
    t->A = new_session(s, alice);
    say(s, alice, t->A, "alice-secret-words");
    j = wait_state(s, alice, t->A, answered, NULL);
    snprintf(t->mid, sizeof(t->mid), "%s",
             json_string_value(json_object_get(itest_last_assistant(j), "id")));
    json_decref(j);
    snprintf(path, sizeof(path), NATIVE "/sessions/%s", t->A);
    ck_assert_int_eq(
        call(s, alice, "PATCH", path, "{\"title\":\"alice-title-words\"}", &r), 200);
    hfree(&r);
    snprintf(path, sizeof(path), NATIVE "/sessions/%s/fork", t->A);
    j = call_json(s, alice, "POST", path, "{\"at\":1}", &st);
    ck_assert_msg(st == 201, "alice's fork: %ld", st);
    t->AF = strdup(json_string_value(json_object_get(j, "id")));
    json_decref(j);
    snprintf(path, sizeof(path), NATIVE "/sessions/%s/export", t->A);
    ck_assert_int_eq(call(s, alice, "GET", path, NULL, &r), 200);
    doc = hjson(&r);
    ck_assert_ptr_nonnull(doc);
    hfree(&r);
    {
        char *text = json_dumps(doc, JSON_COMPACT);

        j = call_json(s, alice, "POST", NATIVE "/sessions/import", text, &st);
        ck_assert_msg(st == 201, "alice's import: %ld", st);
        t->AI = strdup(json_string_value(json_object_get(j, "id")));
        json_decref(j);
        free(text);
    }
    json_decref(doc);
    /* AP: a tool call waiting for her approval */
    t->AP = new_session(s, alice);
    say(s, alice, t->AP, "/call calculator {\\\"expression\\\":\\\"2+3\\\"}");
    j = wait_state(s, alice, t->AP, call_pending, NULL);
    snprintf(t->tcid, sizeof(t->tcid), "%s",
             json_string_value(json_object_get(itest_tool_record(j, 0), "id")));
    json_decref(j);
    /* AO: a /v1 conversation; the session comes back in X-Reflexor-Session */
    callx(s, alice, "POST", "/v1/chat/completions",
          "{\"model\":\"reflexor\",\"messages\":[{\"role\":\"user\",\"content\":"
          "\"alice-oai-words\"}]}",
          NULL, 0, 30000, &r);
    ck_assert_msg(r.status == 200, "alice's chat: %ld %s", r.status, r.body);
    ck_assert_msg(*r.session_hdr, "no X-Reflexor-Session on a chat answer");
    t->AO = strdup(r.session_hdr);
    j = hjson(&r);
    snprintf(
        t->oai_answer, sizeof(t->oai_answer), "%s",
        json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"),
            "content")));
    json_decref(j);
    hfree(&r);
    /* AT: a thread with a finished run */
    j = call_json(s, alice, "POST", LG "/threads",
                  "{\"metadata\":{\"who\":\"alice-meta\"}}", &st);
    ck_assert_msg(st == 200, "alice's thread: %ld", st);
    t->AT = strdup(json_string_value(json_object_get(j, "thread_id")));
    json_decref(j);
    snprintf(path, sizeof(path), LG "/threads/%s/runs", t->AT);
    j = call_json(s, alice, "POST", path, LG_RUN_ALICE, &st);
    ck_assert_msg(st == 200, "alice's run: %ld", st);
    snprintf(t->rid, sizeof(t->rid), "%s",
             json_string_value(json_object_get(j, "run_id")));
    json_decref(j);
    snprintf(path, sizeof(path), LG "/threads/%s/runs/%s/join", t->AT, t->rid);
    json_decref(call_json(s, alice, "GET", path, NULL, &st));
    ck_assert_int_eq(st, 200);
    snprintf(path, sizeof(path), LG "/threads/%s/state", t->AT);
    j = call_json(s, alice, "GET", path, NULL, &st);
    ck_assert_int_eq(st, 200);
    snprintf(t->ckpt, sizeof(t->ckpt), "%s",
             str_or(json_string_value(json_object_get(json_object_get(j, "checkpoint"),
                                                      "checkpoint_id")),
                    "1"));
    json_decref(j);
}

static void free_alice_things(struct alice_things *t)
{
    free(t->A);
    free(t->AF);
    free(t->AI);
    free(t->AP);
    free(t->AO);
    free(t->AT);
}

/* GET path as w: 200 and the body (malloc'd). */
static char *body_of(const struct itest_server *s, const struct who *w,
                     const char *method, const char *path, const char *body)
{
    struct hresp r;
    char *out;

    call(s, w, method, path, body, &r);
    ck_assert_msg(r.status == 200, "%s: %s %s: %ld %s", w->name, method, path, r.status,
                  r.body);
    out = r.body;
    r.body = NULL;
    hfree(&r);
    return out;
}

/* What alice sees of her things: each state, history, and the thread's records. */
#define SNAP_N 20
struct snapshot {
    char path[SNAP_N][256];
    char *body[SNAP_N];
};

static void alice_snapshot(const struct itest_server *s, const struct who *alice,
                           const struct alice_things *t, struct snapshot *snap)
{
    const char *all[] = {t->A, t->AF, t->AI, t->AP, t->AO, t->AT};

    for (size_t i = 0; i < SNAP_N; i++) {
        const char *id = all[i % 6];
        char *path = snap->path[i];

        if (i < 6)
            snprintf(path, 256, NATIVE "/sessions/%s", id);
        else if (i < 12)
            snprintf(path, 256, NATIVE "/sessions/%s/history", id);
        else if (i < 18)
            snprintf(path, 256, LG "/threads/%s/state", id);
        else if (i == 18)
            snprintf(path, 256, LG "/threads/%s/runs", t->AT);
        else
            snprintf(path, 256, LG "/threads/%s", t->AT);
        snap->body[i] = body_of(s, alice, "GET", path, NULL);
    }
}

static void snapshot_release(struct snapshot *snap)
{
    for (size_t i = 0; i < SNAP_N; i++)
        free(snap->body[i]);
}

/* `text` shows none of alice's ids or words: the first one it does, else NULL. */
static const char *alice_in(const char *text, const struct alice_things *t,
                            const char *const *more)
{
    const char *ids[] = {t->A, t->AF, t->AI, t->AP, t->AO, t->AT, t->rid,
                         "alice-secret-words", "alice-title-words",
                         /* not "alice-oai-words": bob resends those (continuity) */
                         "alice-lg-words", "alice-meta", NULL};

    for (size_t i = 0; ids[i]; i++)
        if (*ids[i] && strstr(text, ids[i]))
            return ids[i];
    for (size_t i = 0; more && more[i]; i++)
        if (*more[i] && strstr(text, more[i]))
            return more[i];
    return NULL;
}

/* ---- the isolation test ---------------------------------------------------------------
 */

#define ADMIN_TOKEN "shared-admin-token-0123456789"

static const char ISO_CONFIG[] =
    "{\"auth\":{\"mode\":\"keys\",\"token\":\"" ADMIN_TOKEN "\"},"
    "\"brain\":{\"builtin\":{\"chunk_chars\":16,\"chunk_delay_ms\":1}},"
    "\"tools\":[{\"name\":\"calculator\",\"approval\":\"ask\"}],"
    "\"sse\":{\"retry_ms\":1000,\"ping_ms\":500},"
    "\"limits\":{\"user_rate\":1000000}}"; /* the table asks fast */

static char held_fault[2048];

/* A failure held to the end of the test (held_verdict), so it hides nothing else. */
__attribute__((format(printf, 1, 2))) static void hold(const char *fmt, ...)
{
    size_t n = strlen(held_fault);
    va_list ap;

    if (n + 8 > sizeof(held_fault))
        return;
    if (n)
        n += (size_t)snprintf(held_fault + n, sizeof(held_fault) - n, "; ");
    va_start(ap, fmt);
    vsnprintf(held_fault + n, sizeof(held_fault) - n, fmt, ap);
    va_end(ap);
}

static void check_me(const struct itest_server *s, const struct who *w, const char *name,
                     bool admin, const char *mode)
{
    long st;
    json_t *j = call_json(s, w, "GET", NATIVE "/me", NULL, &st);

    ck_assert_msg(st == 200, "%s: /me %ld", w->name, st);
    ck_assert_msg(json_is_string(json_object_get(j, "name")) &&
                      !strcmp(json_string_value(json_object_get(j, "name")), name),
                  "%s: /me name", w->name);
    ck_assert_msg(json_is_boolean(json_object_get(j, "admin")) &&
                      json_is_true(json_object_get(j, "admin")) == admin,
                  "%s: /me admin", w->name);
    /* A wrong mode is held to the end of the test: it hides nothing else. */
    if (!(json_is_string(json_object_get(j, "mode")) &&
          !strcmp(json_string_value(json_object_get(j, "mode")), mode))) {
        char *d = json_dumps(j, JSON_COMPACT);

        hold("%s: /me says %s, wanted \"mode\":\"%s\"", w->name, d ? d : "?", mode);
        free(d);
    }
    json_decref(j);
}

/* At the end of a test: what was held (/me's mode, a malformed 404) is a failure. */
static void held_verdict(void)
{
    ck_assert_msg(!*held_fault, "%s", held_fault);
}

START_TEST(test_isolation_every_route)
{
    struct itest_server s;
    char db[64], path[512], *ka, *kb, *kr, *text;
    struct snapshot before;
    struct who alice, bob, root, shared;
    struct alice_things t;
    const char *leak;
    char *B, BT[128];
    const char *unknown = "0badc0de-0000-4000-8000-00000000beef";
    struct ids none = {"00000000-dead-4000-8000-000000000001",
                       "00000000-dead-4000-8000-000000000002", "call_unknown_0000000001",
                       NULL, NULL};
    struct ids aids;
    struct row_result res[N_ROUTES];
    int failed = 0;
    long st;
    json_t *j;

    fresh_db(db, sizeof(db), "iso");
    /* keys made before the server starts */
    ka = users_key(db, "add", "alice", false);
    kb = users_key(db, "add", "bob", false);
    kr = users_key(db, "add", "root", true);
    ck_assert_msg(!strncmp(ka, "rxk_", 4), "a key looks like rxk_<16 hex>_...: %s", ka);
    ck_assert_msg(strcmp(ka, kb), "two users, one key");
    start_on(&s, ISO_CONFIG, db, NULL);
    who_bearer(&alice, "alice", ka);
    who_bearer(&bob, "bob", kb);
    who_bearer(&root, "root", kr);
    who_bearer(&shared, "admin", ADMIN_TOKEN);
    check_me(&s, &alice, "alice", false, "keys");
    check_me(&s, &bob, "bob", false, "keys");
    check_me(&s, &root, "root", true, "keys");
    check_me(&s, &shared, "admin", true, "keys");
    /* bob's X-Api-Key (the LangGraph SDK) and ?token= (EventSource) name him too */
    who_header(&bob_x, "bob X-Api-Key", "");
    snprintf(bob_x.auth, sizeof(bob_x.auth), "X-Api-Key: %s", kb);
    check_me(&s, &bob_x, "bob", false, "keys");
    memset(&bob_q, 0, sizeof(bob_q));
    bob_q.name = "bob ?token=";
    snprintf(bob_q.query, sizeof(bob_q.query), "token=%s", kb);
    check_me(&s, &bob_q, "bob", false, "keys");

    make_alice_things(&s, &alice, &t);
    /* bob's own session and thread */
    B = new_session(&s, &bob);
    say(&s, &bob, B, "bob-own-words");
    json_decref(wait_state(&s, &bob, B, answered, NULL));
    j = call_json(&s, &bob, "POST", LG "/threads",
                  "{\"metadata\":{\"who\":\"bob-meta\"}}", &st);
    ck_assert_int_eq(st, 200);
    snprintf(BT, sizeof(BT), "%s", json_string_value(json_object_get(j, "thread_id")));
    json_decref(j);
    snprintf(path, sizeof(path), LG "/threads/%s/runs/wait", BT);
    json_decref(
        call_json(&s, &bob, "POST", path,
                  "{\"assistant_id\":\"agent\",\"input\":{\"messages\":[{\"type\":"
                  "\"human\",\"content\":\"bob-lg-words\"}]}}",
                  &st));
    ck_assert_int_eq(st, 200);

    /* a fork belongs to whoever made it: root forks alice's, bob imports his own */
    {
        char *rf, *bi, *doc;

        snprintf(path, sizeof(path), NATIVE "/sessions/%s/fork", t.A);
        j = call_json(&s, &root, "POST", path, "{\"at\":1}", &st);
        ck_assert_msg(st == 201, "root forks alice's: %ld", st);
        rf = strdup(json_string_value(json_object_get(j, "id")));
        json_decref(j);
        snprintf(path, sizeof(path), NATIVE "/sessions/%s/export", B);
        doc = body_of(&s, &bob, "GET", path, NULL);
        j = call_json(&s, &bob, "POST", NATIVE "/sessions/import", doc, &st);
        ck_assert_msg(st == 201, "bob imports: %ld", st);
        bi = strdup(json_string_value(json_object_get(j, "id")));
        json_decref(j);
        free(doc);
        snprintf(path, sizeof(path), NATIVE "/sessions/%s", rf);
        ck_assert_msg(call_json_status(&s, &alice, "GET", path) == 404,
                      "root's fork of alice's session is not alice's");
        ck_assert_msg(call_json_status(&s, &root, "GET", path) == 200, "root's fork");
        snprintf(path, sizeof(path), NATIVE "/sessions/%s", bi);
        ck_assert_msg(call_json_status(&s, &alice, "GET", path) == 404,
                      "bob's import is not alice's");
        ck_assert_msg(call_json_status(&s, &bob, "GET", path) == 200, "bob's import");
        text = body_of(&s, &root, "GET", NATIVE "/sessions?owner=root", NULL);
        ck_assert_msg(strstr(text, rf) && !strstr(text, t.A), "root's own: %s", text);
        free(text);
        free(rf);
        free(bi);
    }

    /* alice sees her own, fork and import included, and nothing of bob's */
    text = body_of(&s, &alice, "GET", NATIVE "/sessions?limit=200", NULL);
    ck_assert_msg(strstr(text, t.A) && strstr(text, t.AF) && strstr(text, t.AI) &&
                      strstr(text, t.AP) && strstr(text, t.AO) && strstr(text, t.AT),
                  "alice's list lacks her own: %s", text);
    ck_assert_msg(!strstr(text, B) && !strstr(text, BT), "alice sees bob's: %s", text);
    free(text);
    text = body_of(&s, &alice, "GET", NATIVE "/sessions?owner=bob", NULL);
    ck_assert_msg(!strstr(text, B) && !strstr(text, BT), "alice ?owner=bob: %s", text);
    free(text);

    alice_snapshot(&s, &alice, &t, &before);

    /* ---- the table ---- */
    aids.M = t.mid;
    aids.R = t.rid;
    aids.T = t.tcid;
    aids.C = t.ckpt;
    aids.B = BT;
    none.C = t.ckpt;
    none.B = BT;
    memset(res, 0, sizeof(res));
    {
        const char *targets[] = {t.A, t.AF, t.AI, t.AP, t.AO, t.AT};

        for (size_t i = 0; i < N_ROUTES; i++)
            for (size_t k = 0; k < 6; k++)
                try_route(&s, &bob, &routes[i], targets[k], &aids, unknown, &none,
                          &res[i]);
    }
    fprintf(stderr,
            "\nusers isolation: bob asks with alice's ids (6 sessions: native, fork, "
            "import, awaiting approval, /v1, LangGraph thread) vs unknown ids\n"
            "%-9s | %-6s | %-46s | %-40s | %-3s | %-8s | %s\n",
            "protocol", "method", "route", "key sent as / body", "SSE", "same",
            "bob's status alice/unknown (code) / difference");
    for (size_t i = 0; i < N_ROUTES; i++) {
        const struct route *rt = &routes[i];
        char route[160], how[64];

        snprintf(route, sizeof(route), "%s%s", prefix_of(rt->p), rt->path);
        snprintf(how, sizeof(how), "%s%s%.*s",
                 rt->flags & F_QUERY_KEY ? "?token="
                 : rt->flags & F_API_KEY ? "X-Api-Key"
                                         : "Bearer",
                 rt->flags & F_SESSION_HDR ? " +X-Reflexor-Session "
                 : rt->body                ? " "
                                           : "",
                 rt->flags & F_SESSION_HDR ? 0 : 28, rt->body ? rt->body : "");
        fprintf(stderr,
                "%-9s | %-6s | %-46s | %-40s | %-3s | %d/%d %-4s | %ld/%ld (%s) %s\n",
                proto_name[rt->p], rt->method, route, how, rt->flags & F_SSE ? "yes" : "",
                res[i].same, res[i].asked, res[i].same == res[i].asked ? "ok" : "FAIL",
                res[i].st_alice, res[i].st_unknown, res[i].code, res[i].diff);
        if (res[i].same != res[i].asked)
            failed++;
    }
    fprintf(stderr, "users isolation: %d of %zu routes differ\n", failed, N_ROUTES);

    /* ---- continuity and creation by id never reach alice's ---- */
    {
        char body[4096];
        struct hresp r;
        json_t *m = json_string(t.oai_answer);
        char *ans = json_dumps(m, JSON_ENCODE_ANY);

        json_decref(m);
        /* the same first message: a session of bob's own */
        callx(&s, &bob, "POST", "/v1/chat/completions",
              "{\"model\":\"reflexor\",\"messages\":[{\"role\":\"user\",\"content\":"
              "\"alice-oai-words\"}]}",
              NULL, 0, 30000, &r);
        ck_assert_msg(r.status == 200, "bob's chat: %ld %s", r.status, r.body);
        ck_assert_msg(strcmp(r.session_hdr, t.AO), "bob's first message went to alice's");
        hfree(&r);
        /* alice's whole conversation resent by bob: not continued */
        snprintf(body, sizeof(body),
                 "{\"model\":\"reflexor\",\"messages\":[{\"role\":\"user\",\"content\":"
                 "\"alice-oai-words\"},{\"role\":\"assistant\",\"content\":%s},"
                 "{\"role\":\"user\",\"content\":\"bob-continues\"}]}",
                 ans);
        callx(&s, &bob, "POST", "/v1/chat/completions", body, NULL, 0, 30000, &r);
        ck_assert_msg(r.status == 200, "bob's resent chat: %ld %s", r.status, r.body);
        ck_assert_msg(strcmp(r.session_hdr, t.AO), "bob continued alice's conversation");
        hfree(&r);
        free(ans);
        /* a thread by alice's id: never alice's thread */
        snprintf(body, sizeof(body),
                 "{\"thread_id\":\"%s\",\"if_exists\":\"do_nothing\"}", t.AT);
        call(&s, &bob, "POST", LG "/threads", body, &r);
        fprintf(stderr,
                "users isolation: bob POST /threads {thread_id: alice's, if_exists: "
                "do_nothing}: %ld %.200s\n",
                r.status, r.body);
        ck_assert_msg(!strstr(r.body, "alice-meta"), "bob got alice's thread: %s",
                      r.body);
        /* whatever the answer, it is about the id asked for */
        if (r.status == 404 && !strstr(r.body, t.AT))
            hold("bob's POST /threads {thread_id: alice's, if_exists: do_nothing}: a 404 "
                 "that does not name the thread (a freed thread_id?): %.200s",
                 r.body);
        hfree(&r);
        snprintf(body, sizeof(body), "{\"thread_id\":\"%s\"}", t.AT);
        call(&s, &bob, "POST", LG "/threads", body, &r);
        fprintf(stderr,
                "users isolation: bob POST /threads {thread_id: alice's}: %ld %.200s\n",
                r.status, r.body);
        ck_assert_msg(!strstr(r.body, "alice-meta"), "bob got alice's thread: %s",
                      r.body);
        hfree(&r);
        snprintf(path, sizeof(path), LG "/threads/%s/runs/wait", t.AT);
        call(&s, &bob, "POST", path,
             "{\"assistant_id\":\"agent\",\"if_not_exists\":\"create\",\"input\":"
             "{\"messages\":[{\"type\":\"human\",\"content\":\"bob-was-here\"}]}}",
             &r);
        fprintf(stderr,
                "users isolation: bob runs/wait if_not_exists=create on alice's thread: "
                "%ld %.200s\n",
                r.status, r.body);
        ck_assert_msg(!alice_in(r.body, &t, NULL) || r.status != 200,
                      "bob's run shows alice's: %s", r.body);
        hfree(&r);
    }

    /* ---- bob's lists and searches ---- */
    {
        static const char *const lists[][3] = {
            {"GET", NATIVE "/sessions", NULL},
            {"GET", NATIVE "/sessions?limit=200", NULL},
            {"GET", NATIVE "/sessions?q=alice", NULL},
            {"GET", NATIVE "/sessions?q=alice-secret-words", NULL},
            {"GET", NATIVE "/sessions?q=words", NULL},
            {"GET", NATIVE "/sessions?owner=alice", NULL},
            {"GET", NATIVE "/sessions?owner=alice&limit=200", NULL},
            {"POST", LG "/threads/search", "{}"},
            {"POST", LG "/threads/search", "{\"limit\":1000}"},
            {"POST", LG "/threads/search", "{\"metadata\":{\"who\":\"alice-meta\"}}"},
            {"POST", LG "/threads/search", "{\"status\":\"idle\"}"},
            {"POST", LG "/threads/search", "{\"status\":\"interrupted\"}"},
        };

        for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
            char *l = body_of(&s, &bob, lists[i][0], lists[i][1], lists[i][2]);

            leak = alice_in(l, &t, NULL);
            ck_assert_msg(!leak, "bob's %s %s shows alice's '%s': %.300s", lists[i][0],
                          lists[i][1], leak, l);
            free(l);
        }
        text = body_of(&s, &bob, "GET", NATIVE "/sessions?limit=200", NULL);
        ck_assert_msg(strstr(text, B), "bob's list lacks his own session");
        free(text);
    }

    /* ---- admins see all; ?owner= filters ---- */
    {
        const struct who *admins[] = {&root, &shared};

        for (size_t i = 0; i < 2; i++) {
            text = body_of(&s, admins[i], "GET", NATIVE "/sessions?limit=200", NULL);
            ck_assert_msg(strstr(text, t.A) && strstr(text, B), "%s sees all: %s",
                          admins[i]->name, text);
            free(text);
            text = body_of(&s, admins[i], "GET", NATIVE "/sessions?owner=alice", NULL);
            ck_assert_msg(strstr(text, t.A) && strstr(text, t.AT) && !strstr(text, B) &&
                              !strstr(text, BT),
                          "%s ?owner=alice: %s", admins[i]->name, text);
            free(text);
            text = body_of(&s, admins[i], "GET", NATIVE "/sessions?owner=bob", NULL);
            ck_assert_msg(strstr(text, B) && !strstr(text, t.A), "%s ?owner=bob: %s",
                          admins[i]->name, text);
            free(text);
            snprintf(path, sizeof(path), NATIVE "/sessions/%s", t.A);
            free(body_of(&s, admins[i], "GET", path, NULL));
            snprintf(path, sizeof(path), LG "/threads/%s", t.AT);
            free(body_of(&s, admins[i], "GET", path, NULL));
            text =
                body_of(&s, admins[i], "POST", LG "/threads/search", "{\"limit\":1000}");
            ck_assert_msg(strstr(text, t.AT) && strstr(text, BT), "%s threads/search: %s",
                          admins[i]->name, text);
            free(text);
        }
    }

    /* ---- bob's streams, watched for 2 s while alice works ---- */
    {
        struct bg feed, feedq, own, lgs;
        char own_path[256], lg_path[256], *an, *bw, *ant = NULL, *ano = NULL;
        long t0 = itest_now_ms();
        /* 2 s of watching at least; under a wrapper alice's work takes longer */
        long watch = getenv("RX_SERVER_WRAPPER") ? 10000 : 2500;
        long settle = getenv("RX_SERVER_WRAPPER") ? 2000 : 200;

        snprintf(own_path, sizeof(own_path), NATIVE "/sessions/%s/moorex", B);
        snprintf(lg_path, sizeof(lg_path), LG "/threads/%s/runs/stream", BT);
        bg_start(&feed, &s, &bob, "GET", NATIVE "/events", NULL, watch);
        bg_start(&feedq, &s, &bob_q, "GET", NATIVE "/events", NULL, watch);
        bg_start(&own, &s, &bob, "GET", own_path, NULL, watch);
        bg_start(&lgs, &s, &bob, "POST", lg_path,
                 "{\"assistant_id\":\"agent\",\"stream_mode\":[\"values\",\"updates\","
                 "\"messages-tuple\"],\"input\":{\"messages\":[{\"type\":\"human\","
                 "\"content\":\"bob-streams\"}]}}",
                 watch);
        usleep((useconds_t)settle * 1000); /* the streams are open */
        /* alice works: a session made, answered, renamed, deleted; a thread, a run,
           a chat. bob works too: what he does shows on his streams (they are alive) */
        bw = new_session(&s, &bob);
        say(&s, &bob, B, "bob-during-watch");
        an = new_session(&s, &alice);
        say(&s, &alice, an, "alice-secret-words again");
        snprintf(path, sizeof(path), NATIVE "/sessions/%s", an);
        {
            struct hresp r;

            call(&s, &alice, "PATCH", path, "{\"title\":\"alice-title-words 2\"}", &r);
            hfree(&r);
            j = call_json(&s, &alice, "POST", LG "/threads",
                          "{\"metadata\":{\"who\":\"alice-meta\"}}", &st);
            ant = strdup(str_or(json_string_value(json_object_get(j, "thread_id")), ""));
            json_decref(j);
            snprintf(path, sizeof(path), LG "/threads/%s/runs/wait", ant);
            json_decref(call_json(&s, &alice, "POST", path, LG_RUN_ALICE, &st));
            callx(&s, &alice, "POST", "/v1/chat/completions",
                  "{\"model\":\"reflexor\",\"messages\":[{\"role\":\"user\",\"content\":"
                  "\"alice-oai-words 2\"}]}",
                  NULL, 0, 30000, &r);
            ano = strdup(r.session_hdr);
            hfree(&r);
            json_decref(wait_state(&s, &alice, an, answered, NULL));
            snprintf(path, sizeof(path), NATIVE "/sessions/%s", an);
            call(&s, &alice, "DELETE", path, NULL, &r);
            hfree(&r);
        }
        bg_join(&feed);
        bg_join(&feedq);
        bg_join(&own);
        bg_join(&lgs);
        ck_assert_msg(itest_now_ms() - t0 >= 2000, "the streams were watched 2 s");
        {
            const char *more[] = {an, ant, ano, NULL};
            struct bg *all[] = {&feed, &feedq, &own, &lgs};
            const char *names[] = {"/events", "/events?token=", "his session's moorex",
                                   "his LangGraph runs/stream"};

            for (size_t i = 0; i < 4; i++) {
                ck_assert_msg(all[i]->r.status == 200, "bob's %s: %ld %s", names[i],
                              all[i]->r.status, all[i]->r.body);
                ck_assert_msg(i > 1 || strstr(all[i]->r.body, bw),
                              "bob's %s does not show his own new session", names[i]);
                ck_assert_msg(i != 2 || strstr(all[i]->r.body, "bob-during-watch"),
                              "bob's %s does not show his own message", names[i]);
                leak = alice_in(all[i]->r.body, &t, more);
                ck_assert_msg(!leak, "bob's %s shows alice's '%s'", names[i], leak);
                fprintf(stderr,
                        "users isolation: bob's %s: %zu bytes in %ld ms, none alice's\n",
                        names[i], all[i]->r.len, watch);
                hfree(&all[i]->r);
            }
        }
        free(an);
        free(bw);
        free(ant);
        free(ano);
    }

    /* ---- alice's things are as they were ---- */
    {
        struct snapshot after;

        alice_snapshot(&s, &alice, &t, &after);
        for (size_t i = 0; i < SNAP_N; i++)
            ck_assert_msg(!strcmp(before.body[i], after.body[i]),
                          "alice's %s changed under bob:\nbefore %.400s\nafter  %.400s",
                          before.path[i], before.body[i], after.body[i]);
        snapshot_release(&after);
        /* A: the title stays hers, nothing of bob's in it */
        text = body_of(&s, &alice, "GET", NATIVE "/sessions?limit=200", NULL);
        ck_assert_msg(strstr(text, "alice-title-words") && !strstr(text, "bob-was-here"),
                      "alice's list after bob: %s", text);
        free(text);
        snprintf(path, sizeof(path), NATIVE "/sessions/%s/history", t.A);
        text = body_of(&s, &alice, "GET", path, NULL);
        ck_assert_msg(!strstr(text, "bob"), "bob's input in alice's history: %.400s",
                      text);
        free(text);
        j = state_of(&s, &alice, t.AP);
        ck_assert_msg(call_pending(j, NULL),
                      "alice's pending approval was answered by bob");
        json_decref(j);
    }
    snapshot_release(&before);

    ck_assert_msg(failed == 0,
                  "%d route(s) answer bob differently for alice's ids than "
                  "for unknown ids (see the table on stderr)",
                  failed);
    free_alice_things(&t);
    free(B);
    free(ka);
    free(kb);
    free(kr);
    stop(&s);
    itest_remove_db(db);
    held_verdict();
}
END_TEST

/* ---- bad keys -----------------------------------------------------------------------
 */

/* One request per protocol as w: each must be 401 in its protocol's shape. */
static void refused_everywhere(const struct itest_server *s, const struct who *w,
                               const char *why)
{
    static const struct {
        enum proto p;
        const char *method, *path, *body;
    } probes[] = {
        {P_NATIVE, "GET", NATIVE "/sessions", NULL},
        {P_NATIVE, "POST", NATIVE "/sessions", NULL},
        {P_NATIVE, "GET", NATIVE "/me", NULL},
        {P_NATIVE, "GET", NATIVE "/events", NULL},
        {P_OAI, "GET", "/v1/models", NULL},
        {P_OAI, "POST", "/v1/chat/completions", CHAT_IN},
        {P_LG, "POST", LG "/threads/search", "{}"},
        {P_LG, "POST", LG "/threads", "{}"},
    };

    for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
        struct hresp r;

        callx(s, w, probes[i].method, probes[i].path, probes[i].body, NULL, 0, 5000, &r);
        ck_assert_msg(r.status == 401, "%s: %s %s: %ld, not 401 (%.200s)", why,
                      probes[i].method, probes[i].path, r.status, r.body);
        ck_assert_msg(shaped(probes[i].p, &r, NULL),
                      "%s: %s %s: not in %s's shape: %.200s", why, probes[i].method,
                      probes[i].path, proto_name[probes[i].p], r.body);
        hfree(&r);
    }
}

static void accepted(const struct itest_server *s, const struct who *w, const char *why)
{
    struct hresp r;

    ck_assert_msg(call(s, w, "GET", NATIVE "/sessions", NULL, &r) == 200, "%s: %ld", why,
                  r.status);
    hfree(&r);
    ck_assert_msg(call(s, w, "GET", "/v1/models", NULL, &r) == 200, "%s: /v1 %ld", why,
                  r.status);
    hfree(&r);
    ck_assert_msg(call(s, w, "POST", LG "/threads/search", "{}", &r) == 200, "%s: lg %ld",
                  why, r.status);
    hfree(&r);
}

/* The server's output (stdout and the stderr file) holds none of `keys`. */
static void no_key_in_output(struct itest_server *s, const char *errfile,
                             const char *const *keys)
{
    char *out = drain_stdout(s), *err;

    stop(s);
    err = slurp(errfile);
    for (size_t i = 0; keys[i]; i++) {
        /* rxk_<16 hex>_<secret>: the secret may hold '_' itself */
        const char *secret =
            strlen(keys[i]) > 21 && keys[i][20] == '_' ? keys[i] + 21 : keys[i];

        ck_assert_msg(!strstr(out, keys[i]) && !strstr(err, keys[i]),
                      "a key in the server's output");
        ck_assert_msg(strlen(secret) < 8 ||
                          (!strstr(out, secret) && !strstr(err, secret)),
                      "a key's secret in the server's output");
    }
    ck_assert_msg(!strstr(err, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
                  "a refused key in the server's output");
    fprintf(stderr, "users keys: server output checked: %zu bytes stdout, %zu stderr\n",
            strlen(out), strlen(err));
    free(out);
    free(err);
    unlink(errfile);
}

/* A server on `db` at debug level, its stderr in errfile. */
static void start_logged(struct itest_server *s, const char *db, char *errfile, size_t n)
{
    int fd;

    setenv("RX_LOG_LEVEL", "debug", 1); /* everything the server would say */
    snprintf(errfile, n, "/tmp/rx-users-err-XXXXXX");
    fd = mkstemp(errfile);
    ck_assert_int_ge(fd, 0);
    close(fd);
    start_on(s, "{\"auth\":{\"mode\":\"keys\"},\"limits\":{\"user_rate\":1000000}}", db,
             errfile);
}

START_TEST(test_bad_keys_refused_never_logged)
{
    struct itest_server s;
    char db[64], errfile[64], *ka, *big;
    struct who w;

    fresh_db(db, sizeof(db), "keys");
    ka = users_key(db, "add", "alice", false);
    start_logged(&s, db, errfile, sizeof(errfile));
    who_bearer(&w, "alice", ka);
    accepted(&s, &w, "alice's key");
    check_me(&s, &w, "alice", false, "keys");
    who_header(&w, "alice", "");
    snprintf(w.auth, sizeof(w.auth), "X-Api-Key: %s", ka);
    accepted(&s, &w, "alice's key as X-Api-Key");
    memset(&w, 0, sizeof(w));
    w.name = "alice";
    snprintf(w.query, sizeof(w.query), "token=%s", ka);
    accepted(&s, &w, "alice's key as ?token=");

    /* missing */
    memset(&w, 0, sizeof(w));
    w.name = "nobody";
    refused_everywhere(&s, &w, "no key");
    who_header(&w, "nobody", "Authorization: Bearer ");
    refused_everywhere(&s, &w, "an empty bearer");
    who_header(&w, "nobody", "Authorization: Basic YWxpY2U6eA==");
    refused_everywhere(&s, &w, "basic auth");
    /* wrong: made up, or alice's id with another secret */
    who_bearer(&w, "wrong",
               "rxk_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    refused_everywhere(&s, &w, "a made-up key");
    {
        char k[512];

        snprintf(k, sizeof(k), "%s", ka);
        k[strlen(k) - 1] = k[strlen(k) - 1] == 'A' ? 'B' : 'A';
        who_bearer(&w, "wrong", k);
        refused_everywhere(&s, &w, "alice's key, last letter changed");
        snprintf(k, sizeof(k), "%sx", ka);
        who_bearer(&w, "wrong", k);
        refused_everywhere(&s, &w, "alice's key and one more letter");
        snprintf(k, sizeof(k), "%.*s", (int)strlen(ka) - 1, ka);
        who_bearer(&w, "wrong", k);
        refused_everywhere(&s, &w, "alice's key less a letter");
        /* another case */
        snprintf(k, sizeof(k), "%s", ka);
        for (char *p = k; *p; p++)
            *p = (char)(islower((unsigned char)*p) ? toupper((unsigned char)*p)
                                                   : tolower((unsigned char)*p));
        who_bearer(&w, "case", k);
        refused_everywhere(&s, &w, "alice's key in another case");
        snprintf(k, sizeof(k), "%s", ka);
        for (char *p = k; *p; p++)
            *p = (char)toupper((unsigned char)*p);
        who_bearer(&w, "case", k);
        refused_everywhere(&s, &w, "alice's key upper-cased");
        who_header(&w, "case", "");
        snprintf(w.auth, sizeof(w.auth), "X-Api-Key: %s", k);
        refused_everywhere(&s, &w, "alice's key upper-cased as X-Api-Key");
        memset(&w, 0, sizeof(w));
        snprintf(w.query, sizeof(w.query), "token=%s", k);
        refused_everywhere(&s, &w, "alice's key upper-cased as ?token=");
    }
    /* 8 KiB: alice's key padded, and plain letters */
    big = malloc(8193);
    memset(big, 'A', 8192);
    big[8192] = '\0';
    memcpy(big, ka, strlen(ka));
    who_bearer(&w, "big", big);
    refused_everywhere(&s, &w, "an 8 KiB key starting with alice's");
    memset(big, 'x', 8192);
    memcpy(big, "rxk_", 4);
    who_bearer(&w, "big", big);
    refused_everywhere(&s, &w, "an 8 KiB key");
    free(big);
    /* the shared-token words mean nothing when no token is configured */
    who_bearer(&w, "admin", "admin");
    refused_everywhere(&s, &w, "the word admin");

    /* alice still works after all that */
    who_bearer(&w, "alice", ka);
    accepted(&s, &w, "alice's key at the end");
    {
        const char *keys[] = {ka, NULL};

        no_key_in_output(&s, errfile, keys);
    }
    free(ka);
    itest_remove_db(db);
    held_verdict();
}
END_TEST

/*
 * Keys change while the server runs, through `reflexor users` on its
 * database: a new key works at once; a removed or rotated-away key is
 * refused as soon as the command returns; the list names users, never keys.
 */
START_TEST(test_keys_change_while_running)
{
    struct itest_server s;
    char db[64], errfile[64], list[4096], *ka, *kc, *ke, *ke2;
    struct who w;
    int rc;

    fresh_db(db, sizeof(db), "live");
    ka = users_key(db, "add", "alice", false);
    start_logged(&s, db, errfile, sizeof(errfile));
    kc = users_key(db, "add", "carol", false);
    who_bearer(&w, "carol", kc);
    accepted(&s, &w, "carol's key, added while the server runs");
    check_me(&s, &w, "carol", false, "keys");
    ke = users_key(db, "add", "erin", true);
    who_bearer(&w, "erin", ke);
    check_me(&s, &w, "erin", true, "keys");
    /* a name taken is refused */
    rc = users_cmd(db, list, sizeof(list), "add", "carol", NULL);
    ck_assert_msg(rc != 0 && !strstr(list, "rxk_"), "users add carol twice: %d '%s'", rc,
                  list);
    /* removed: refused as soon as the command returns */
    ck_assert_int_eq(users_cmd(db, list, sizeof(list), "remove", "carol", NULL), 0);
    who_bearer(&w, "carol", kc);
    refused_everywhere(&s, &w, "carol's key, removed");
    /* rotated: the old key stops, the new one works */
    ke2 = users_key(db, "rotate", "erin", false);
    ck_assert_msg(strcmp(ke, ke2), "rotate gave the same key");
    who_bearer(&w, "erin", ke);
    refused_everywhere(&s, &w, "erin's key, rotated away");
    who_bearer(&w, "erin", ke2);
    accepted(&s, &w, "erin's rotated key");
    check_me(&s, &w, "erin", true, "keys");
    /* a removed user is gone from the list; the list prints no key */
    ck_assert_int_eq(users_cmd(db, list, sizeof(list), "list", NULL, NULL), 0);
    ck_assert_msg(strstr(list, "alice") && strstr(list, "erin") && !strstr(list, "carol"),
                  "users list: %s", list);
    ck_assert_msg(!strstr(list, ka) && !strstr(list, ke2) && !strstr(list, "rxk_"),
                  "users list shows a key: %s", list);
    /* removing someone unknown fails */
    ck_assert_int_ne(users_cmd(db, list, sizeof(list), "remove", "nobody-such", NULL), 0);
    who_bearer(&w, "alice", ka);
    accepted(&s, &w, "alice's key at the end");
    {
        const char *keys[] = {ka, kc, ke, ke2, NULL};

        no_key_in_output(&s, errfile, keys);
    }
    free(ka);
    free(kc);
    free(ke);
    free(ke2);
    itest_remove_db(db);
    held_verdict();
}
END_TEST

/* ---- trusted-header -------------------------------------------------------------------
 */

START_TEST(test_trusted_header)
{
    struct itest_server s;
    struct who alice, bob, boss, none, other;
    char path[256], *sid;
    struct hresp r;

    /* loopback is not among the trusted proxies: the header is not believed */
    start_on(
        &s,
        "{\"auth\":{\"mode\":\"trusted-header\",\"trusted_proxies\":[\"10.0.0.0/8\"]}}",
        NULL, NULL);
    who_header(&alice, "alice", "X-Remote-User: alice");
    refused_everywhere(&s, &alice, "the header from an untrusted address");
    stop(&s);

    /* default proxies (loopback): believed; without it, 401 */
    start_on(&s, "{\"auth\":{\"mode\":\"trusted-header\",\"admins\":[\"boss\"]}}", NULL,
             NULL);
    who_header(&bob, "bob", "X-Remote-User: bob");
    who_header(&boss, "boss", "X-Remote-User: boss");
    who_header(&other, "alice", "X-Forwarded-User: alice");
    memset(&none, 0, sizeof(none));
    none.name = "nobody";
    refused_everywhere(&s, &none, "a trusted proxy without the header");
    refused_everywhere(&s, &other, "another header than auth.header");
    who_header(&none, "nobody", "X-Remote-User: ");
    refused_everywhere(&s, &none, "an empty header");
    accepted(&s, &alice, "alice by the header");
    check_me(&s, &alice, "alice", false, "trusted-header");
    check_me(&s, &boss, "boss", true, "trusted-header");
    sid = new_session(&s, &alice);
    snprintf(path, sizeof(path), NATIVE "/sessions/%s", sid);
    ck_assert_int_eq(call(&s, &bob, "GET", path, NULL, &r), 404);
    ck_assert_msg(shaped(P_NATIVE, &r, "not-found"), "bob: %s", r.body);
    hfree(&r);
    snprintf(path, sizeof(path), LG "/threads/%s", sid);
    ck_assert_int_eq(call(&s, &bob, "GET", path, NULL, &r), 404);
    hfree(&r);
    ck_assert_int_eq(call(&s, &bob, "GET", NATIVE "/sessions", NULL, &r), 200);
    ck_assert_msg(!strstr(r.body, sid), "bob sees alice's: %s", r.body);
    hfree(&r);
    ck_assert_int_eq(call(&s, &boss, "GET", NATIVE "/sessions", NULL, &r), 200);
    ck_assert_msg(strstr(r.body, sid), "the admin sees alice's: %s", r.body);
    hfree(&r);
    snprintf(path, sizeof(path), NATIVE "/sessions/%s", sid);
    ck_assert_int_eq(call(&s, &alice, "GET", path, NULL, &r), 200);
    hfree(&r);
    free(sid);
    stop(&s);

    /* auth.header names another header */
    start_on(&s,
             "{\"auth\":{\"mode\":\"trusted-header\",\"header\":\"X-Forwarded-User\"}}",
             NULL, NULL);
    refused_everywhere(&s, &alice, "X-Remote-User when auth.header is X-Forwarded-User");
    accepted(&s, &other, "X-Forwarded-User");
    check_me(&s, &other, "alice", false, "trusted-header");
    stop(&s);
    held_verdict();
}
END_TEST

/* ---- limits per user -----------------------------------------------------------------
 */

START_TEST(test_user_sessions_limit)
{
    struct itest_server s;
    char db[64], path[256], *ka, *kb, *kr, *a1, *a2, *b1;
    struct who alice, bob, root;
    struct hresp r;
    long st;
    json_t *j;

    fresh_db(db, sizeof(db), "lim");
    ka = users_key(db, "add", "alice", false);
    kb = users_key(db, "add", "bob", false);
    kr = users_key(db, "add", "root", true);
    start_on(&s, "{\"auth\":{\"mode\":\"keys\"},\"limits\":{\"user_sessions\":2}}", db,
             NULL);
    who_bearer(&alice, "alice", ka);
    who_bearer(&bob, "bob", kb);
    who_bearer(&root, "root", kr);
    a1 = new_session(&s, &alice);
    a2 = new_session(&s, &alice);
    /* the third, in each API */
    ck_assert_int_eq(call(&s, &alice, "POST", NATIVE "/sessions", NULL, &r), 429);
    ck_assert_msg(shaped(P_NATIVE, &r, "too-many-sessions"), "native 429: %s", r.body);
    hfree(&r);
    ck_assert_int_eq(call(&s, &alice, "POST", "/v1/chat/completions", CHAT_IN, &r), 429);
    ck_assert_msg(shaped(P_OAI, &r, NULL), "openai 429: %s", r.body);
    hfree(&r);
    ck_assert_int_eq(call(&s, &alice, "POST", LG "/threads", "{}", &r), 429);
    ck_assert_msg(shaped(P_LG, &r, NULL), "langgraph 429: %s", r.body);
    hfree(&r);
    snprintf(path, sizeof(path), LG "/threads/%s/copy", a1);
    ck_assert_int_eq(call(&s, &alice, "POST", path, NULL, &r), 429);
    hfree(&r);
    snprintf(path, sizeof(path), NATIVE "/sessions/%s/fork", a1);
    ck_assert_int_eq(call(&s, &alice, "POST", path, "{\"at\":0}", &r), 429);
    ck_assert_msg(shaped(P_NATIVE, &r, "too-many-sessions"), "fork 429: %s", r.body);
    hfree(&r);
    /* bob is not held back by alice's sessions, nor is the admin */
    b1 = new_session(&s, &bob);
    free(new_session(&s, &root));
    free(new_session(&s, &root));
    free(new_session(&s, &root));
    /* alice has her two; deleting one makes room */
    j = call_json(&s, &alice, "GET", NATIVE "/sessions", NULL, &st);
    ck_assert_int_eq(st, 200);
    {
        char *d = json_dumps(j, JSON_COMPACT);

        ck_assert_msg(strstr(d, a1) && strstr(d, a2) && !strstr(d, b1), "alice's: %s", d);
        free(d);
    }
    json_decref(j);
    snprintf(path, sizeof(path), NATIVE "/sessions/%s", a2);
    ck_assert_int_eq(call(&s, &alice, "DELETE", path, NULL, &r), 204);
    hfree(&r);
    free(new_session(&s, &alice));
    free(a1);
    free(a2);
    free(b1);
    free(ka);
    free(kb);
    free(kr);
    stop(&s);
    itest_remove_db(db);
}
END_TEST

START_TEST(test_user_rate_limit)
{
    struct itest_server s;
    char db[64], *ka, *kb;
    struct who alice, bob;
    struct hresp r;
    int limited = 0;

    fresh_db(db, sizeof(db), "rate");
    ka = users_key(db, "add", "alice", false);
    kb = users_key(db, "add", "bob", false);
    start_on(&s, "{\"auth\":{\"mode\":\"keys\"},\"limits\":{\"user_rate\":5}}", db, NULL);
    who_bearer(&alice, "alice", ka);
    who_bearer(&bob, "bob", kb);
    for (int i = 0; i < 60 && !limited; i++) {
        call(&s, &alice, "GET", NATIVE "/sessions", NULL, &r);
        if (r.status == 429) {
            limited = 1;
            ck_assert_msg(shaped(P_NATIVE, &r, "rate-limited"), "rate 429: %s", r.body);
            ck_assert_msg(*r.retry_after && atoi(r.retry_after) >= 1,
                          "no Retry-After on a 429: '%s'", r.retry_after);
        } else {
            ck_assert_msg(r.status == 200, "alice: %ld", r.status);
        }
        hfree(&r);
    }
    ck_assert_msg(limited, "60 requests at once at user_rate 5: never a 429");
    /* bob goes on meanwhile */
    ck_assert_int_eq(call(&s, &bob, "GET", NATIVE "/sessions", NULL, &r), 200);
    hfree(&r);
    free(new_session(&s, &bob));
    /* the other protocols answer alice's flood in their own shapes */
    limited = 0;
    for (int i = 0; i < 60 && !limited; i++) {
        call(&s, &alice, "GET", "/v1/models", NULL, &r);
        if (r.status == 429) {
            limited = 1;
            ck_assert_msg(shaped(P_OAI, &r, NULL), "openai rate 429: %s", r.body);
            ck_assert_msg(*r.retry_after, "no Retry-After on /v1's 429");
        }
        hfree(&r);
    }
    ck_assert_msg(limited, "/v1: never a 429");
    limited = 0;
    for (int i = 0; i < 60 && !limited; i++) {
        call(&s, &alice, "POST", LG "/threads/search", "{}", &r);
        if (r.status == 429) {
            limited = 1;
            ck_assert_msg(shaped(P_LG, &r, NULL), "langgraph rate 429: %s", r.body);
            ck_assert_msg(*r.retry_after, "no Retry-After on LangGraph's 429");
        }
        hfree(&r);
    }
    ck_assert_msg(limited, "langgraph: never a 429");
    ck_assert_int_eq(call(&s, &bob, "POST", LG "/threads/search", "{}", &r), 200);
    hfree(&r);
    /* and after a while alice is welcome again */
    usleep(2100 * 1000);
    ck_assert_int_eq(call(&s, &alice, "GET", NATIVE "/sessions", NULL, &r), 200);
    hfree(&r);
    free(ka);
    free(kb);
    stop(&s);
    itest_remove_db(db);
}
END_TEST

/*
 * user_running_effects: alice's answers take one of the two effect slots at
 * most, so bob's answer starts at once rather than after one of hers ends.
 * A post past her share may be queued or refused with 429; either is fine.
 */
static int answers_in(json_t *st, const char *status)
{
    json_t *a = json_object_get(st, "assistantMessages"), *m;
    size_t i;
    int n = 0;

    json_array_foreach(a, i, m)
    {
        const char *x = json_string_value(json_object_get(m, "status"));

        n += x && !strcmp(x, status);
    }
    return n;
}

START_TEST(test_user_running_effects)
{
    struct itest_server s;
    char db[64], *ka, *kb, *as[3], *b1;
    struct who alice, bob;
    bool taken[3];
    int most = 0;
    long deadline;

    fresh_db(db, sizeof(db), "fx");
    ka = users_key(db, "add", "alice", false);
    kb = users_key(db, "add", "bob", false);
    /* an answer: "Echo: " and the text, a letter each 100 ms: about 4 s */
    start_on(&s,
             "{\"auth\":{\"mode\":\"keys\"},"
             "\"brain\":{\"builtin\":{\"chunk_chars\":1,\"chunk_delay_ms\":100}},"
             "\"limits\":{\"max_running_effects\":2,\"user_running_effects\":1}}",
             db, NULL);
    who_bearer(&alice, "alice", ka);
    who_bearer(&bob, "bob", kb);
    for (int i = 0; i < 3; i++)
        as[i] = new_session(&s, &alice);
    b1 = new_session(&s, &bob);
    for (int i = 0; i < 3; i++) {
        char path[256];
        struct hresp r;

        snprintf(path, sizeof(path), NATIVE "/sessions/%s/moorex", as[i]);
        call(&s, &alice, "POST", path,
             "{\"type\":\"user-send-message\",\"content\":\"alice-slow-words 123\"}", &r);
        ck_assert_msg(r.status == 200 || (r.status == 429 && shaped(P_NATIVE, &r, NULL)),
                      "alice's post %d: %ld %s", i, r.status, r.body);
        taken[i] = r.status == 200;
        hfree(&r);
    }
    ck_assert_msg(taken[0], "alice's first post refused");
    say(&s, &bob, b1, "bob-quick-words 123");
    /* until bob's answer begins: none of alice's ended, at most one of hers runs */
    deadline = itest_now_ms() + wait_ms();
    for (;;) {
        json_t *bs = state_of(&s, &bob, b1);
        int streaming = 0, done = 0;

        for (int i = 0; i < 3; i++) {
            json_t *st = state_of(&s, &alice, as[i]);

            streaming += answers_in(st, "streaming");
            done += answers_in(st, "complete");
            json_decref(st);
        }
        most = streaming > most ? streaming : most;
        ck_assert_msg(streaming <= 1, "alice has %d answers running at once (limit 1)",
                      streaming);
        if (json_array_size(json_object_get(bs, "assistantMessages"))) {
            json_decref(bs);
            ck_assert_msg(done == 0,
                          "bob's answer began only after %d of alice's ended: her "
                          "answers took the effect pool",
                          done);
            break;
        }
        json_decref(bs);
        ck_assert_msg(itest_now_ms() < deadline, "bob's answer never began");
        usleep(50000);
    }
    /* alice's accepted posts are all answered in the end, one at a time */
    for (int i = 0; i < 3; i++)
        if (taken[i])
            json_decref(wait_state(&s, &alice, as[i], answered, NULL));
    fprintf(stderr, "users running effects: alice ran at most %d answer(s) at once\n",
            most);
    for (int i = 0; i < 3; i++)
        free(as[i]);
    free(b1);
    free(ka);
    free(kb);
    stop(&s);
    itest_remove_db(db);
}
END_TEST

/* ---- /metrics, /healthz, /me, /client.json -------------------------------------------
 */

static bool healthz_details(const struct hresp *r)
{
    json_t *j = hjson(r);
    bool d = json_object_get(j, "sessions") || json_object_get(j, "store") ||
             json_object_get(j, "mcp");

    json_decref(j);
    return d;
}

static const char *client_auth_mode(const struct itest_server *s, char *out, size_t n)
{
    long st;
    json_t *j = call_json(s, NULL, "GET", "/client.json", NULL, &st);

    ck_assert_int_eq(st, 200);
    snprintf(out, n, "%s",
             str_or(json_string_value(json_object_get(j, "authMode")), "(none)"));
    json_decref(j);
    return out;
}

START_TEST(test_metrics_and_healthz)
{
    struct itest_server s;
    char db[64], mode[32], *ka, *kr;
    struct who alice, root, shared, mtok, none, wrong;
    struct hresp r;

    fresh_db(db, sizeof(db), "met");
    ka = users_key(db, "add", "alice", false);
    kr = users_key(db, "add", "root", true);
    start_on(&s,
             "{\"auth\":{\"mode\":\"keys\",\"token\":\"" ADMIN_TOKEN "\"},"
             "\"metrics\":{\"token\":\"metrics-only-token\"}}",
             db, NULL);
    who_bearer(&alice, "alice", ka);
    who_bearer(&root, "root", kr);
    who_bearer(&shared, "admin", ADMIN_TOKEN);
    who_bearer(&mtok, "metrics", "metrics-only-token");
    who_bearer(&wrong, "wrong", "not-a-token");
    memset(&none, 0, sizeof(none));
    none.name = "nobody";
    ck_assert_str_eq(client_auth_mode(&s, mode, sizeof(mode)), "keys");
    /* /metrics: admins and the metrics token only */
    ck_assert_int_eq(call(&s, &none, "GET", "/metrics", NULL, &r), 401);
    hfree(&r);
    ck_assert_int_eq(call(&s, &wrong, "GET", "/metrics", NULL, &r), 401);
    hfree(&r);
    ck_assert_int_eq(call(&s, &alice, "GET", "/metrics", NULL, &r), 401);
    ck_assert_msg(!strstr(r.body, "reflexor_"), "metrics leaked to alice");
    hfree(&r);
    ck_assert_int_eq(call(&s, &root, "GET", "/metrics", NULL, &r), 200);
    ck_assert_msg(strstr(r.body, "# TYPE"), "metrics for root: %.200s", r.body);
    hfree(&r);
    ck_assert_int_eq(call(&s, &shared, "GET", "/metrics", NULL, &r), 200);
    hfree(&r);
    ck_assert_int_eq(call(&s, &mtok, "GET", "/metrics", NULL, &r), 200);
    hfree(&r);
    /* the metrics token opens nothing else */
    refused_everywhere(&s, &mtok, "the metrics token on the APIs");
    /* /healthz: anyone, details for admins */
    ck_assert_int_eq(call(&s, &none, "GET", "/healthz", NULL, &r), 200);
    ck_assert_msg(!healthz_details(&r), "healthz details for nobody: %s", r.body);
    hfree(&r);
    ck_assert_int_eq(call(&s, &wrong, "GET", "/healthz", NULL, &r), 200);
    ck_assert_msg(!healthz_details(&r), "healthz details for a bad key: %s", r.body);
    hfree(&r);
    ck_assert_int_eq(call(&s, &alice, "GET", "/healthz", NULL, &r), 200);
    ck_assert_msg(!healthz_details(&r), "healthz details for alice: %s", r.body);
    hfree(&r);
    ck_assert_int_eq(call(&s, &root, "GET", "/healthz", NULL, &r), 200);
    ck_assert_msg(healthz_details(&r), "no healthz details for root: %s", r.body);
    hfree(&r);
    ck_assert_int_eq(call(&s, &shared, "GET", "/healthz", NULL, &r), 200);
    ck_assert_msg(healthz_details(&r), "no healthz details for the token: %s", r.body);
    hfree(&r);
    free(ka);
    free(kr);
    stop(&s);
    itest_remove_db(db);

    /* token mode: the bearer is admin; /metrics needs it */
    start_on(&s, "{\"auth\":{\"token\":\"" ADMIN_TOKEN "\"}}", NULL, NULL);
    ck_assert_str_eq(client_auth_mode(&s, mode, sizeof(mode)), "token");
    check_me(&s, &shared, "admin", true, "token");
    refused_everywhere(&s, &none, "token mode, no token");
    ck_assert_int_eq(call(&s, &none, "GET", "/metrics", NULL, &r), 401);
    hfree(&r);
    ck_assert_int_eq(call(&s, &shared, "GET", "/metrics", NULL, &r), 200);
    hfree(&r);
    ck_assert_int_eq(call(&s, &none, "GET", "/healthz", NULL, &r), 200);
    ck_assert_msg(!healthz_details(&r), "healthz details without the token: %s", r.body);
    hfree(&r);
    stop(&s);

    /* none: one implicit admin, local */
    start_on(&s, "{}", NULL, NULL);
    ck_assert_str_eq(client_auth_mode(&s, mode, sizeof(mode)), "none");
    check_me(&s, &none, "local", true, "none");
    ck_assert_int_eq(call(&s, &none, "GET", "/metrics", NULL, &r), 200);
    hfree(&r);
    ck_assert_int_eq(call(&s, &none, "GET", "/healthz", NULL, &r), 200);
    ck_assert_msg(healthz_details(&r), "healthz details for local: %s", r.body);
    hfree(&r);
    stop(&s);
    held_verdict();
}
END_TEST

/* ---- PostgreSQL: two nodes -----------------------------------------------------------
 */

START_TEST(test_two_nodes_share_users)
{
    struct itest_server n1, n2;
    char db[64], list[1024], *ka, *kb, *sid;
    struct who alice, bob;
    struct hresp r, u;
    static const char cfg[] =
        "{\"auth\":{\"mode\":\"keys\"},\"cluster\":{\"lease_ms\":1000},"
        "\"limits\":{\"user_rate\":1000000}}";

    if (!itest_on_postgres()) {
        itest_skip(__func__, "two nodes share a store on PostgreSQL only (RX_PG_DIR)");
        return;
    }
    fresh_db(db, sizeof(db), "pg2");
    start_on(&n1, cfg, db, NULL);
    start_on(&n2, cfg, db, NULL);
    /* keys added while both run work at once on both */
    ka = users_key(db, "add", "alice", false);
    kb = users_key(db, "add", "bob", false);
    who_bearer(&alice, "alice", ka);
    who_bearer(&bob, "bob", kb);
    check_me(&n1, &alice, "alice", false, "keys");
    check_me(&n2, &alice, "alice", false, "keys");
    check_me(&n2, &bob, "bob", false, "keys");
    check_me(&n1, &bob, "bob", false, "keys");
    /* alice's session on node 1; bob on node 2 gets what an unknown id gets */
    sid = new_session(&n1, &alice);
    say(&n1, &alice, sid, "alice-secret-words");
    json_decref(wait_state(&n1, &alice, sid, answered, NULL));
    {
        static const char *const paths[][3] = {
            {"GET", NATIVE "/sessions/{S}", NULL},
            {"GET", NATIVE "/sessions/{S}/history", NULL},
            {"GET", NATIVE "/sessions/{S}/export", NULL},
            {"POST", NATIVE "/sessions/{S}/fork", "{\"at\":1}"},
            {"POST", NATIVE "/sessions/{S}/moorex",
             "{\"type\":\"user-send-message\",\"content\":\"bob-was-here\"}"},
            {"DELETE", NATIVE "/sessions/{S}", NULL},
            {"GET", LG "/threads/{S}", NULL},
            {"GET", LG "/threads/{S}/state", NULL},
        };
        const char *unknown = "0badc0de-0000-4000-8000-00000000beef";

        for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
            char *na, *nu;
            struct ids none = {"", "", "", "", ""};

            char *pa = expand(paths[i][1], sid, &none),
                 *pu = expand(paths[i][1], unknown, &none);

            call(&n2, &bob, paths[i][0], pa, paths[i][2], &r);
            call(&n2, &bob, paths[i][0], pu, paths[i][2], &u);
            free(pa);
            free(pu);
            na = normalized(r.body, sid, &none);
            nu = normalized(u.body, unknown, &none);
            ck_assert_msg(r.status == 404 && u.status == 404 && !strcmp(na, nu),
                          "node 2, bob %s %s: %ld %s vs unknown %ld %s", paths[i][0],
                          paths[i][1], r.status, r.body, u.status, u.body);
            free(na);
            free(nu);
            hfree(&r);
            hfree(&u);
        }
    }
    ck_assert_int_eq(call(&n2, &bob, "GET", NATIVE "/sessions", NULL, &r), 200);
    ck_assert_msg(!strstr(r.body, sid), "bob on node 2 sees alice's: %s", r.body);
    hfree(&r);
    ck_assert_int_eq(call(&n2, &bob, "POST", LG "/threads/search", "{}", &r), 200);
    ck_assert_msg(!strstr(r.body, sid), "bob on node 2 finds alice's: %s", r.body);
    hfree(&r);
    /* alice still has it, on either node */
    json_decref(state_of(&n1, &alice, sid));
    {
        long deadline = itest_now_ms() + wait_ms();

        for (;;) {
            call(&n2, &alice, "GET", NATIVE "/sessions?limit=200", NULL, &r);
            if (r.status == 200 && strstr(r.body, sid))
                break;
            ck_assert_msg(itest_now_ms() < deadline, "alice's list on node 2: %ld %s",
                          r.status, r.body);
            hfree(&r);
            usleep(50000);
        }
        hfree(&r);
    }
    /* removed through the store: refused at once on both nodes */
    ck_assert_int_eq(users_cmd(db, list, sizeof(list), "remove", "alice", NULL), 0);
    refused_everywhere(&n1, &alice, "alice removed (node 1)");
    refused_everywhere(&n2, &alice, "alice removed (node 2)");
    check_me(&n2, &bob, "bob", false, "keys");
    free(sid);
    free(ka);
    free(kb);
    stop(&n2);
    stop(&n1);
    itest_remove_db(db);
    held_verdict();
}
END_TEST

Suite *users_suite(void)
{
    Suite *s = suite_create("users");
    TCase *tc = tcase_create("users");
    int t = getenv("RX_SERVER_WRAPPER") ? 900 : 180;

    tcase_set_timeout(tc, t);
    tcase_add_test(tc, test_isolation_every_route);
    tcase_add_test(tc, test_bad_keys_refused_never_logged);
    tcase_add_test(tc, test_keys_change_while_running);
    tcase_add_test(tc, test_trusted_header);
    tcase_add_test(tc, test_user_sessions_limit);
    tcase_add_test(tc, test_user_rate_limit);
    tcase_add_test(tc, test_user_running_effects);
    tcase_add_test(tc, test_metrics_and_healthz);
    tcase_add_test(tc, test_two_nodes_share_users);
    suite_add_tcase(s, tc);
    return s;
}
