/*
 * mcp_http - MCP over Streamable HTTP, on libcurl. See mcp_http.h.
 */
#include "effects/mcp_http.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/now.h"
#include "effects/sse_parse.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_json.h"

/* The start of an error answer kept for its message. */
#define ERRBODY_MAX 4096

/* One POST under way. */
struct post {
    struct mcp_http *h;
    CURL *easy;
    mcp_http_message_fn fn;
    void *ctx;
    const bool *stop;
    long status;
    bool is_sse, is_json, headers_seen;
    char session[MCP_HTTP_SESSION_MAX]; /* from this answer's headers */
    struct rx_buf body;                 /* a JSON answer, or an error's start */
    struct sse_parse sse;
    int fail;  /* why the write callback stopped the transfer */
    bool done; /* *stop became true: the rest is not needed */
    struct rx_error why;
};

int mcp_http_init(struct mcp_http *h, const char *url, json_t *headers,
                  long connect_timeout_ms, struct rx_error *err)
{
    const char *key;
    json_t *v;

    memset(h, 0, sizeof(*h));
    pthread_mutex_init(&h->lock, NULL);
    h->connect_timeout_ms = connect_timeout_ms;
    h->url = strdup(url);
    if (!h->url)
        return rx_error_set(err, -ENOMEM, "out of memory");
    json_object_foreach(headers, key, v)
    {
        const char *val = json_string_value(v);
        struct curl_slist *l;
        char *line;

        if (!val || strpbrk(key, "\r\n:") || strpbrk(val, "\r\n") || !*key)
            return rx_error_set(err, -EINVAL,
                                "headers.%s: must be a string without line breaks", key);
        if (asprintf(&line, "%s: %s", key, val) < 0)
            return rx_error_set(err, -ENOMEM, "out of memory");
        l = curl_slist_append(h->headers, line);
        free(line);
        if (!l)
            return rx_error_set(err, -ENOMEM, "out of memory");
        h->headers = l;
    }
    return 0;
}

void mcp_http_release(struct mcp_http *h)
{
    free(h->url);
    curl_slist_free_all(h->headers);
    pthread_mutex_destroy(&h->lock);
    memset(h, 0, sizeof(*h));
}

void mcp_http_forget(struct mcp_http *h)
{
    pthread_mutex_lock(&h->lock);
    h->session[0] = h->version[0] = '\0';
    pthread_mutex_unlock(&h->lock);
}

void mcp_http_set_version(struct mcp_http *h, const char *version)
{
    pthread_mutex_lock(&h->lock);
    snprintf(h->version, sizeof(h->version), "%s", version);
    pthread_mutex_unlock(&h->lock);
}

/* ------------------------------------------------------------- the answer */

/* One JSON-RPC message or a batch of them: each to the callback. */
static int deliver(struct post *x, const char *text, size_t n)
{
    struct rx_error jerr;
    json_t *doc;
    size_t i;
    int err;

    if (!n)
        return 0;
    if ((err = rx_json_parse(text, n, RX_JSON_ALLOW_NUL, &doc, &jerr)))
        return rx_error_set(&x->why, err == -ENOMEM ? err : -EPROTO,
                            "a malformed message: %s", jerr.text);
    if (json_is_array(doc)) {
        for (i = 0; i < json_array_size(doc) && !x->done; i++) {
            x->fn(x->ctx, json_array_get(doc, i));
            x->done = x->stop && *x->stop;
        }
    } else {
        x->fn(x->ctx, doc);
        x->done = x->stop && *x->stop;
    }
    json_decref(doc);
    return 0;
}

static int on_event(void *ud, const struct sse_parse_event *ev)
{
    struct post *x = ud;
    int rc;

    if (strcmp(ev->event, "message"))
        return 0; /* only `message` events carry JSON-RPC */
    rc = deliver(x, ev->data, ev->data_len);
    if (rc == -EPROTO)
        return 0; /* one bad event is dropped; the awaited answer may follow */
    return rc ? rc : x->done ? -ECANCELED : 0;
}

static bool header_is(const char *line, size_t n, const char *name, const char **value,
                      size_t *vlen)
{
    size_t k = strlen(name);

    if (n <= k || strncasecmp(line, name, k) || line[k] != ':')
        return false;
    line += k + 1, n -= k + 1;
    while (n && (*line == ' ' || *line == '\t'))
        line++, n--;
    while (n && isspace((unsigned char)line[n - 1]))
        n--;
    *value = line, *vlen = n;
    return true;
}

static size_t on_header(char *p, size_t size, size_t nitems, void *ud)
{
    struct post *x = ud;
    size_t n = size * nitems, vlen;
    const char *v;

    if (n >= 5 && !strncmp(p, "HTTP/", 5)) { /* a new status line: start over */
        x->is_sse = x->is_json = false;
        x->session[0] = '\0';
        return n;
    }
    if (header_is(p, n, "content-type", &v, &vlen)) {
        x->is_sse = vlen >= 17 && !strncasecmp(v, "text/event-stream", 17);
        x->is_json = vlen >= 16 && !strncasecmp(v, "application/json", 16);
    } else if (header_is(p, n, "mcp-session-id", &v, &vlen) && vlen &&
               vlen < sizeof(x->session)) {
        memcpy(x->session, v, vlen);
        x->session[vlen] = '\0';
    }
    return n;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud)
{
    struct post *x = ud;
    size_t n = size * nmemb;

    if (!x->status)
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->status < 200 || x->status > 299 || !x->is_sse) {
        size_t max =
            x->status >= 200 && x->status <= 299 ? MCP_HTTP_MESSAGE_MAX : ERRBODY_MAX;
        size_t room = max - x->body.len;

        if (n > room && max == MCP_HTTP_MESSAGE_MAX) {
            x->fail = rx_error_set(&x->why, -EPROTO, "an answer longer than %u bytes",
                                   MCP_HTTP_MESSAGE_MAX);
            return 0;
        }
        if (rx_buf_append(&x->body, p, n < room ? n : room)) {
            x->fail = -ENOMEM;
            return 0;
        }
        return n;
    }
    x->fail = sse_parse_feed(&x->sse, p, n);
    if (x->fail == -E2BIG)
        rx_error_set(&x->why, -EPROTO, "an event longer than %u bytes",
                     MCP_HTTP_MESSAGE_MAX);
    return x->fail ? 0 : n;
}

/* The server's words in an error answer: a JSON-RPC error's message, else
   the first line of the body. */
static void error_text(struct post *x, struct rx_error *err)
{
    json_t *doc = NULL;
    const char *m;

    if (x->body.len &&
        rx_json_parse(x->body.data, x->body.len, RX_JSON_ALLOW_NUL, &doc, NULL))
        doc = NULL; /* not JSON: the body's first line below */
    m = json_string_value(json_object_get(json_object_get(doc, "error"), "message"));

    if (m)
        rx_error_set(err, -EIO, "HTTP %ld: %.200s", x->status, m);
    else if (x->body.len && !doc)
        rx_error_set(err, -EIO, "HTTP %ld: %.*s", x->status,
                     (int)strcspn(x->body.data, "\r\n") > 200
                         ? 200
                         : (int)strcspn(x->body.data, "\r\n"),
                     x->body.data);
    else
        rx_error_set(err, -EIO, "HTTP %ld", x->status);
    json_decref(doc);
}

/* ------------------------------------------------------------------ posts */

/* The request's own headers: ours, the session's, then the configured. */
static struct curl_slist *request_headers(struct mcp_http *h, bool *had_session)
{
    struct curl_slist *l = NULL, *t;
    char line[MCP_HTTP_SESSION_MAX + 64];
    bool ok = true;

    pthread_mutex_lock(&h->lock);
    *had_session = h->session[0] != '\0';
    ok = (l = curl_slist_append(NULL, "Content-Type: application/json")) &&
         (t = curl_slist_append(l, "Accept: application/json, text/event-stream"));
    if (ok && h->session[0]) {
        snprintf(line, sizeof(line), "MCP-Session-Id: %s", h->session);
        ok = curl_slist_append(l, line) != NULL;
    }
    if (ok && h->version[0]) {
        snprintf(line, sizeof(line), "MCP-Protocol-Version: %s", h->version);
        ok = curl_slist_append(l, line) != NULL;
    }
    pthread_mutex_unlock(&h->lock);
    for (struct curl_slist *c = h->headers; ok && c; c = c->next)
        ok = curl_slist_append(l, c->data) != NULL;
    if (!ok) {
        curl_slist_free_all(l);
        return NULL;
    }
    return l;
}

static int setup(struct post *x, const char *method, const char *body,
                 struct curl_slist *hdrs, char *curl_err)
{
    CURL *e = x->easy;

    return curl_easy_setopt(e, CURLOPT_URL, x->h->url) ||
           curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") ||
           curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method) ||
           (body && curl_easy_setopt(e, CURLOPT_POSTFIELDS, body)) ||
           curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs) ||
           curl_easy_setopt(e, CURLOPT_USERAGENT, "reflexor") ||
           curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) ||
           curl_easy_setopt(e, CURLOPT_ERRORBUFFER, curl_err) ||
           curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, x->h->connect_timeout_ms) ||
           curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header) ||
           curl_easy_setopt(e, CURLOPT_HEADERDATA, x) ||
           curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write) ||
           curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
}

/* The session an answer opened (initialize's) is the one used from now on. */
static void keep_session(struct post *x)
{
    if (!x->session[0])
        return;
    pthread_mutex_lock(&x->h->lock);
    memcpy(x->h->session, x->session, sizeof(x->session));
    pthread_mutex_unlock(&x->h->lock);
}

/* After a 2xx: the rest of the answer, and the session it opened. */
static int finish_ok(struct post *x, struct rx_error *err)
{
    int rc = 0;

    if (x->is_sse) {
        rc = x->done ? 0 : sse_parse_finish(&x->sse, false);
        if (rc == -E2BIG)
            rc = -EPROTO;
    } else if (x->body.len) {
        rc = deliver(x, x->body.data, x->body.len);
    }
    if (rc == -EPROTO)
        return rx_error_set(err, -EIO, "%s", x->why.text);
    if (!rc)
        keep_session(x);
    return rc;
}

static int run(struct mcp_http *h, const char *method, const char *body, int cancel_fd,
               http_loop_deadline_fn deadline, void *dctx, mcp_http_message_fn fn,
               void *ctx, const bool *stop, struct mcp_http_result *res,
               struct rx_error *err)
{
    struct post x = {.h = h, .fn = fn, .ctx = ctx, .stop = stop};
    char curl_err[CURL_ERROR_SIZE] = "";
    struct curl_slist *hdrs = NULL;
    CURLcode cres = CURLE_OK;
    bool had_session = false;
    int rc = -ENOMEM;

    memset(res, 0, sizeof(*res));
    rx_buf_init(&x.body, MCP_HTTP_MESSAGE_MAX);
    sse_parse_init(&x.sse, MCP_HTTP_MESSAGE_MAX, on_event, &x);
    x.easy = curl_easy_init();
    hdrs = request_headers(h, &had_session);
    if (!x.easy || !hdrs || setup(&x, method, body, hdrs, curl_err))
        goto out_release;
    rc = http_loop_run(x.easy, cancel_fd, deadline, dctx, &res->end, &cres, err);
    if (rc)
        goto out_release;
    curl_easy_getinfo(x.easy, CURLINFO_RESPONSE_CODE, &x.status);
    res->status = x.status;
    if (res->end == HTTP_LOOP_CANCELLED) {
        rc = -ECANCELED;
    } else if (res->end == HTTP_LOOP_TIMEOUT) {
        rc = -ETIMEDOUT;
    } else if (x.fail == -ENOMEM) {
        rc = -ENOMEM;
    } else if (x.fail == -ECANCELED || (x.done && cres == CURLE_WRITE_ERROR)) {
        keep_session(&x); /* we stopped reading: the awaited answer came */
        rc = 0;
    } else if (x.fail) {
        rc = rx_error_set(err, -EIO, "%s", x.why.text);
    } else if (cres != CURLE_OK) {
        rc = rx_error_set(err, -EIO, "%s",
                          *curl_err ? curl_err : curl_easy_strerror(cres));
    } else if (x.status < 200 || x.status > 299) {
        /* A server that lost our session says 404 (the specification); some
           say 400 ("no valid session ID"): both mean initialize again. */
        res->session_gone = had_session && (x.status == 404 || x.status == 400);
        error_text(&x, err);
        rc = res->session_gone ? -ENOENT : -EIO;
    } else {
        rc = finish_ok(&x, err);
    }

out_release:
    curl_easy_cleanup(x.easy);
    curl_slist_free_all(hdrs);
    sse_parse_release(&x.sse);
    rx_buf_release(&x.body);
    return rc;
}

int mcp_http_post(struct mcp_http *h, const char *body, int cancel_fd,
                  http_loop_deadline_fn deadline, void *dctx, mcp_http_message_fn fn,
                  void *ctx, const bool *stop, struct mcp_http_result *res,
                  struct rx_error *err)
{
    return run(h, "POST", body, cancel_fd, deadline, dctx, fn, ctx, stop, res, err);
}

static int64_t fixed_deadline(void *ctx)
{
    return *(const int64_t *)ctx;
}

static void ignore_message(void *ctx, json_t *msg)
{
    (void)ctx;
    (void)msg;
}

void mcp_http_close(struct mcp_http *h, int timeout_ms)
{
    int64_t deadline = now_mono_ms() + timeout_ms;
    struct mcp_http_result res;
    bool has;

    pthread_mutex_lock(&h->lock);
    has = h->session[0] != '\0';
    pthread_mutex_unlock(&h->lock);
    if (has && run(h, "DELETE", NULL, -1, fixed_deadline, &deadline, ignore_message, NULL,
                   NULL, &res, NULL) == -ENOMEM)
        return;
    mcp_http_forget(h);
}
