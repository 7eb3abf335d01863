/*
 * openai_http - one streamed Chat Completions request over libcurl, with
 * retries. See openai_http.h.
 */
#include "effects/openai_http.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "effects/http_loop.h"
#include "base/now.h"
#include "state_machine/rx_json.h"

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    struct openai_http *x = ud;

    (void)p;
    x->got_headers = true;
    x->last_ms = now_mono_ms();
    return size * n;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud)
{
    struct openai_http *x = ud;
    size_t n = size * nmemb;

    x->last_ms = now_mono_ms();
    x->body_bytes += n;
    if (!x->status)
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->status < 200 || x->status > 299) {
        size_t room = x->errbody.max - x->errbody.len;

        /* Only the start of an error body is kept: the message is there. */
        if (rx_buf_append(&x->errbody, p, n < room ? n : room))
            return 0;
        return n;
    }
    x->cb_rc = openai_stream_feed(&x->stream, p, n);
    return x->cb_rc ? 0 : n;
}

/* The provider's message in an error body: {"error":{"message"}}, {"error":"..."},
 * {"message"} or {"detail"} (FastAPI servers), else the body's first line. */
static void error_message(const struct openai_http *x, struct rx_error *out)
{
    json_t *root = NULL, *e, *m = NULL;

    if (x->errbody.len && rx_json_parse(x->errbody.data, x->errbody.len, 0, &root, NULL))
        root = NULL; /* not JSON: the body's first line below */
    e = json_object_get(root, "error");

    if (json_is_string(e))
        m = e;
    else if (json_is_string(json_object_get(e, "message")))
        m = json_object_get(e, "message");
    else if (json_is_string(json_object_get(root, "message")))
        m = json_object_get(root, "message");
    else if (json_is_string(json_object_get(root, "detail")))
        m = json_object_get(root, "detail");
    if (m && json_string_length(m)) {
        rx_error_set(out, -EIO, "%s", json_string_value(m));
    } else if (x->errbody.len && !root) {
        size_t l = strcspn(x->errbody.data, "\r\n");

        rx_error_set(out, -EIO, "HTTP %ld: %.*s", x->status, (int)(l > 120 ? 120 : l),
                     x->errbody.data);
    } else {
        rx_error_set(out, -EIO, "HTTP %ld", x->status);
    }
    json_decref(root);
}

/* The stall clock: give up after stall_timeout_ms without a byte (before the
   first response byte, the connect time counts too). */
static int64_t stall_deadline(void *ud)
{
    struct openai_http *x = ud;

    return x->last_ms + x->cfg->stall_timeout_ms +
           (x->got_headers ? 0 : x->cfg->connect_timeout_ms);
}

/*
 * Run one POST to its end. 0 when a complete reply was parsed into x->stream;
 * -ECANCELED; -ENOMEM; or -EIO with `why` set and *retry telling whether
 * trying again is safe and useful (nothing was relayed, and the failure is a
 * 429, a 5xx or a transport error).
 */
static int xfer_run(struct openai_http *x, const struct openai_http_config *cfg,
                    struct brain_ask *ask, const char *body, struct rx_error *why,
                    bool *retry)
{
    struct curl_slist *hdrs = NULL, *h;
    char curl_err[CURL_ERROR_SIZE] = "";
    enum http_loop_end end = HTTP_LOOP_DONE;
    CURLcode cres = CURLE_OK;
    int rc = -ENOMEM;

    *retry = false;
    x->cfg = cfg;
    x->easy = curl_easy_init();
    if (!x->easy)
        goto out_cleanup;
    h = curl_slist_append(hdrs, "Content-Type: application/json");
    h = h ? curl_slist_append(hdrs = h, "Accept: text/event-stream") : NULL;
    h = h && cfg->auth ? curl_slist_append(hdrs = h, cfg->auth) : h;
    if (!h)
        goto out_cleanup;
    hdrs = h;
    if (curl_easy_setopt(x->easy, CURLOPT_URL, cfg->url) ||
        curl_easy_setopt(x->easy, CURLOPT_PROTOCOLS_STR, "http,https") ||
        curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, body) ||
        curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, hdrs) ||
        curl_easy_setopt(x->easy, CURLOPT_USERAGENT, "reflexor") ||
        curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L) ||
        curl_easy_setopt(x->easy, CURLOPT_ERRORBUFFER, curl_err) ||
        curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS, cfg->connect_timeout_ms) ||
        curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, cfg->timeout_ms) ||
        curl_easy_setopt(x->easy, CURLOPT_TCP_KEEPALIVE, 1L) ||
        curl_easy_setopt(x->easy, CURLOPT_HEADERFUNCTION, on_header) ||
        curl_easy_setopt(x->easy, CURLOPT_HEADERDATA, x) ||
        curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_write) ||
        curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x))
        goto out_cleanup;
    x->last_ms = now_mono_ms();
    if ((rc =
             http_loop_run(x->easy, ask->cancel_fd, stall_deadline, x, &end, &cres, why)))
        goto out_cleanup;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);

    rc = -EIO;
    if (end == HTTP_LOOP_CANCELLED || x->cb_rc == -ECANCELED ||
        (ask->is_cancelled && ask->is_cancelled(ask))) {
        rc = -ECANCELED;
    } else if (x->cb_rc == -ENOMEM) {
        rc = -ENOMEM;
    } else if (end == HTTP_LOOP_TIMEOUT) {
        rx_error_set(why, -EIO, "the model sent nothing for %ld ms",
                     cfg->stall_timeout_ms);
        *retry = !x->got_headers;
    } else if (x->status >= 200 && x->status <= 299 && x->cb_rc) {
        rx_error_set(why, -EIO, "%s", x->stream.error.text);
    } else if (cres != CURLE_OK && !(x->status >= 300 && cres == CURLE_WRITE_ERROR)) {
        rx_error_set(why, -EIO, "%s: %s", cfg->url,
                     *curl_err ? curl_err : curl_easy_strerror(cres));
        *retry = x->body_bytes == 0 || x->status < 200 || x->status > 299;
    } else if (x->status < 200 || x->status > 299) {
        curl_off_t after = -1;

        error_message(x, why);
        *retry = x->status == 429 || x->status == 408 || x->status >= 500;
        if (!curl_easy_getinfo(x->easy, CURLINFO_RETRY_AFTER, &after) && after > 0)
            x->retry_after_ms = after > 3600 ? 3600000L : (long)after * 1000;
    } else if ((rc = openai_stream_finish(&x->stream))) {
        rx_error_set(why, -EIO, "%s", x->stream.error.text);
        rc = rc == -ENOMEM ? -ENOMEM : -EIO;
    }

out_cleanup:
    curl_easy_cleanup(x->easy);
    x->easy = NULL;
    curl_slist_free_all(hdrs);
    return rc;
}

void openai_http_init(struct openai_http *x, openai_stream_content_fn on_content,
                      void *ctx)
{
    memset(x, 0, sizeof(*x));
    x->on_content = on_content;
    x->ctx = ctx;
    openai_stream_init(&x->stream, on_content, ctx);
    rx_buf_init(&x->errbody, OPENAI_HTTP_ERRBODY_MAX);
}

void openai_http_on_reasoning(struct openai_http *x, openai_stream_content_fn fn)
{
    x->on_reasoning = fn;
    openai_stream_on_reasoning(&x->stream, fn);
}

void openai_http_release(struct openai_http *x)
{
    openai_stream_release(&x->stream);
    rx_buf_release(&x->errbody);
}

int openai_http_post(struct openai_http *x, const struct openai_http_config *cfg,
                     struct brain_ask *ask, const char *body, struct rx_error *why)
{
    struct rx_error local;
    int rc;

    why = why ? why : &local;
    for (int attempt = 0;; attempt++) {
        openai_stream_content_fn on_reasoning;
        bool retry;
        long delay;

        rc = xfer_run(x, cfg, ask, body, why, &retry);
        if (rc != -EIO || !retry || attempt >= cfg->retries) {
            if (rc == -EIO && retry && attempt) {
                size_t l = strlen(why->text);

                snprintf(why->text + l, sizeof(why->text) - l, " (after %d attempts)",
                         attempt + 1);
            }
            break;
        }
        delay = (long)cfg->backoff_ms << (attempt < 20 ? attempt : 20);
        if (x->retry_after_ms > delay)
            delay = x->retry_after_ms;
        if (delay > cfg->backoff_max_ms)
            delay = cfg->backoff_max_ms;
        /* A fresh parser and counters: nothing of a failed attempt was relayed. */
        on_reasoning = x->on_reasoning;
        openai_http_release(x);
        openai_http_init(x, x->on_content, x->ctx);
        openai_http_on_reasoning(x, on_reasoning);
        if (ask->sleep_ms && (rc = ask->sleep_ms(ask, (int)delay)))
            break;
    }
    return rc;
}
