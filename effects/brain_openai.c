/*
 * brain_openai - the OpenAI-compatible brain over libcurl. See brain_openai.h.
 */
#include "effects/brain_openai.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include "effects/idgen.h"
#include "effects/now.h"

#include "effects/openai_stream.h"
#include "effects/toolkit.h"
#include "state_machine/rx_alloc.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_context.h"
#include "state_machine/rx_machine.h"

#define CFG "brain.openai."
/* The start of an error reply we keep to find the provider's message in. */
#define ERRBODY_MAX (64u << 10)
/* A model that keeps loading old calls instead of answering is stopped here. */
#define LOAD_ROUNDS_MAX 8
/* Longest wait in one poll: the loop re-checks stalls at least this often. */
#define POLL_SLICE_MS 1000

#define SUMMARY_SYSTEM                                                                   \
    "You summarise conversations between a user and an assistant so that the "           \
    "assistant can continue them without the original messages."
#define SUMMARY_REQUEST                                                                  \
    "Summarise the conversation above in a few short paragraphs. Keep every fact, "      \
    "name, number, decision, open question and tool result that may matter later. "      \
    "Reply with the summary only."
#define LOAD_TOOL_DESCRIPTION                                                            \
    "Load an earlier tool call that is listed as not loaded, with its result, back "     \
    "into the conversation."

struct brain_openai {
    struct brain base; /* first: a struct brain * is a struct brain_openai * */
    const struct toolkit *tools;
    char *url; /* {base_url}/chat/completions */
    char *model;
    char *auth; /* "Authorization: Bearer ..." or NULL for none */
    bool has_temperature;
    double temperature;
    long long max_tokens; /* 0: not sent */
    long connect_timeout_ms, stall_timeout_ms, timeout_ms;
    int retries, backoff_ms, backoff_max_ms;
    long long context_budget;
    int keep_recent;
};

/* One ask: its own copy of the state, with the inputs it dispatched applied. */
struct oa_ask {
    struct brain_openai *b;
    struct brain_ask *ask;
    struct rx_state st;
    char msg_id[RX_ID_MAX + 1]; /* the message being streamed, "" before the first text */
    struct rx_buf text;         /* its whole text so far */
    json_t *notes;              /* system notes for follow-up requests (bad load ids) */
    bool relay;                 /* this request's text is the answer (not a summary) */
};

/* One HTTP exchange. */
struct oa_xfer {
    struct oa_ask *ax;
    CURL *easy;
    struct openai_stream stream;
    long status;
    struct rx_buf errbody;
    size_t body_bytes;
    bool got_headers;
    int64_t last_ms;
    int cb_rc; /* why the write callback stopped the transfer */
    long retry_after_ms;
};

/* ---- config ---------------------------------------------------------------- */

static int cfg_error(char *err, const char *field, const char *why)
{
    if (err)
        snprintf(err, BRAIN_OPENAI_ERR_LEN, CFG "%s: %s", field, why);
    return -EINVAL;
}

static int cfg_str(json_t *cfg, const char *field, const char **out, char *err)
{
    json_t *v = json_object_get(cfg, field);

    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return cfg_error(err, field, "must be a string");
    *out = json_string_value(v);
    return 0;
}

static int cfg_int(json_t *cfg, const char *field, long long min, long long max,
                   long long *out, char *err)
{
    json_t *v = json_object_get(cfg, field);
    char why[96];

    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < min ||
        json_integer_value(v) > max) {
        snprintf(why, sizeof(why), "must be an integer from %lld to %lld", min, max);
        return cfg_error(err, field, why);
    }
    *out = json_integer_value(v);
    return 0;
}

static const char *env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);

    return v && *v ? v : fallback;
}

bool brain_openai_env_selected(void)
{
    return env_or("OPENAI_API_KEY", NULL) || env_or("REFLEXOR_LLM_BASE_URL", NULL);
}

static void oa_destroy(struct brain *self)
{
    struct brain_openai *b = (struct brain_openai *)self;

    if (!b)
        return;
    free(b->url);
    free(b->model);
    free(b->auth);
    free(b);
}

static int oa_ask(struct brain *self, struct brain_ask *ask);

struct brain *brain_openai_create(json_t *config, const struct toolkit *tools, char *err)
{
    const char *base = BRAIN_OPENAI_DEFAULT_URL, *model = BRAIN_OPENAI_DEFAULT_MODEL;
    const char *key = NULL, *key_env = "OPENAI_API_KEY";
    long long connect = 10000, stall = 60000, total = 600000, retries = 2, backoff = 500,
              backoff_max = 30000, max_tokens = 0, budget = 0, keep = 4;
    struct brain_openai *b;
    json_t *temp;
    size_t blen;

    if (config && !json_is_null(config) && !json_is_object(config)) {
        if (err)
            snprintf(err, BRAIN_OPENAI_ERR_LEN, "brain.openai: must be an object");
        return NULL;
    }
    if (cfg_str(config, "base_url", &base, err) ||
        cfg_str(config, "model", &model, err) || cfg_str(config, "api_key", &key, err) ||
        cfg_str(config, "api_key_env", &key_env, err) ||
        cfg_int(config, "max_tokens", 1, INT_MAX, &max_tokens, err) ||
        cfg_int(config, "connect_timeout_ms", 1, 3600000, &connect, err) ||
        cfg_int(config, "stall_timeout_ms", 1, 86400000, &stall, err) ||
        cfg_int(config, "timeout_ms", 0, 86400000, &total, err) ||
        cfg_int(config, "retries", 0, 10, &retries, err) ||
        cfg_int(config, "backoff_ms", 0, 3600000, &backoff, err) ||
        cfg_int(config, "backoff_max_ms", 0, 3600000, &backoff_max, err) ||
        cfg_int(config, "context_budget", 0, LLONG_MAX / 8, &budget, err) ||
        cfg_int(config, "keep_recent", 1, 1000, &keep, err))
        return NULL;
    temp = json_object_get(config, "temperature");
    if (temp && !json_is_null(temp) &&
        (!json_is_number(temp) || json_number_value(temp) < 0 ||
         json_number_value(temp) > 2)) {
        cfg_error(err, "temperature", "must be a number from 0 to 2");
        return NULL;
    }
    base = env_or("REFLEXOR_LLM_BASE_URL", base);
    model = env_or("REFLEXOR_LLM_MODEL", model);
    if (strncmp(base, "http://", 7) && strncmp(base, "https://", 8)) {
        cfg_error(err, "base_url", "must start with http:// or https://");
        return NULL;
    }
    if (!*model) {
        cfg_error(err, "model", "must not be empty");
        return NULL;
    }
    if (!key || !*key)
        key = *key_env ? env_or(key_env, NULL) : NULL;

    b = calloc(1, sizeof(*b));
    if (!b)
        goto out_nomem;
    b->base.name = "openai";
    b->base.ask = oa_ask;
    b->base.destroy = oa_destroy;
    b->tools = tools;
    /* "http://host/v1/" and "http://host/v1" name the same API root. */
    blen = strlen(base);
    while (blen && base[blen - 1] == '/')
        blen--;
    if (asprintf(&b->url, "%.*s/chat/completions", (int)blen, base) < 0) {
        b->url = NULL;
        goto out_destroy;
    }
    b->model = strdup(model);
    if (!b->model)
        goto out_destroy;
    if (key && *key && asprintf(&b->auth, "Authorization: Bearer %s", key) < 0) {
        b->auth = NULL;
        goto out_destroy;
    }
    b->has_temperature = temp && json_is_number(temp);
    b->temperature = b->has_temperature ? json_number_value(temp) : 0;
    b->max_tokens = max_tokens;
    b->connect_timeout_ms = (long)connect;
    b->stall_timeout_ms = (long)stall;
    b->timeout_ms = (long)total;
    b->retries = (int)retries;
    b->backoff_ms = (int)backoff;
    b->backoff_max_ms = (int)backoff_max;
    b->context_budget = budget;
    b->keep_recent = (int)keep;
    return &b->base;

out_destroy:
    oa_destroy(&b->base);
out_nomem:
    if (err)
        snprintf(err, BRAIN_OPENAI_ERR_LEN, "brain.openai: out of memory");
    return NULL;
}

/* ---- inputs ---------------------------------------------------------------- */

/*
 * Hand an input to the session, then apply it to our copy of the state with
 * the same pure transition, so the next request of this ask is built from
 * what the session now holds. The local timestamp only has to be monotonic:
 * items after signals_cut_at never enter this ask's context anyway.
 */
static int dispatch(struct oa_ask *ax, struct rx_input *in)
{
    struct rx_outcome outcome;
    int rc;

    in->called_brain_at = ax->ask->signals_cut_at;
    rc = ax->ask->dispatch(ax->ask, in);
    if (rc)
        return rc;
    in->timestamp = ax->st.updated_at > in->cut_at ? ax->st.updated_at : in->cut_at;
    in->has_timestamp = true;
    if (rx_machine_apply(&ax->st, in, &outcome))
        return -ENOMEM;
    return 0;
}

static int dispatch_start(struct oa_ask *ax)
{
    struct rx_input in = {.type = RX_IN_BRAIN_SEND_MESSAGE_START};
    char id[37];
    int rc;

    idgen_uuid(id);
    rc = rx_input_set_str(&in.message_id, id);
    rc = rc ? rc : dispatch(ax, &in);
    rx_input_release(&in);
    if (!rc)
        snprintf(ax->msg_id, sizeof(ax->msg_id), "%s", id);
    return rc;
}

static bool has_resume(const struct oa_ask *ax)
{
    return ax->ask->resume_message_id && *ax->ask->resume_message_id;
}

/*
 * Complete the message being streamed (or the resumed one, which must end
 * even when this reply has no text), or append a complete one (no start).
 */
static int dispatch_complete(struct oa_ask *ax, const char *content)
{
    struct rx_input in = {.type = RX_IN_BRAIN_SEND_MESSAGE_COMPLETE};
    char id[37];
    int rc;

    if (!*ax->msg_id && has_resume(ax)) {
        snprintf(ax->msg_id, sizeof(ax->msg_id), "%s", ax->ask->resume_message_id);
    } else if (!*ax->msg_id) {
        idgen_uuid(id);
        snprintf(ax->msg_id, sizeof(ax->msg_id), "%s", id);
    }
    rc = rx_input_set_str(&in.message_id, ax->msg_id);
    rc = rc ? rc : rx_input_set_str(&in.content, content);
    rc = rc ? rc : dispatch(ax, &in);
    rx_input_release(&in);
    return rc;
}

/* The first text of an answer opens its message (or resumes the known one). */
static int open_message(struct oa_ask *ax)
{
    if (*ax->msg_id)
        return 0;
    if (has_resume(ax)) {
        snprintf(ax->msg_id, sizeof(ax->msg_id), "%s", ax->ask->resume_message_id);
        return 0;
    }
    return dispatch_start(ax);
}

/* End the answer with "[Error] why", after whatever text was streamed. */
static int finish_error(struct oa_ask *ax, const char *why)
{
    struct rx_buf suffix;
    int rc;

    rx_buf_init(&suffix, RX_BUF_SMALL_MAX);
    rc = rx_buf_printf(&suffix, "%s[Error] %s", ax->text.len ? "\n\n" : "", why);
    if (!rc && *ax->msg_id &&
        ax->ask->chunk(ax->ask, ax->msg_id, suffix.data) == -ECANCELED)
        rc = -ECANCELED;
    rc = rc ? rc : rx_buf_append(&ax->text, suffix.data, suffix.len);
    rc = rc ? rc : dispatch_complete(ax, ax->text.data);
    rx_buf_release(&suffix);
    return rc == -E2BIG ? -ENOMEM : rc;
}

/* ---- one HTTP exchange -------------------------------------------------------- */

static int on_content(void *ctx, const char *delta, size_t len)
{
    struct oa_ask *ax = ctx;
    int rc;

    if (!ax->relay)
        return 0;
    rc = open_message(ax);
    if (rc)
        return rc;
    rc = rx_buf_append(&ax->text, delta, len);
    if (rc)
        return rc;
    /* -ENOENT (nobody buffers this message) is not our failure. */
    return ax->ask->chunk(ax->ask, ax->msg_id, delta) == -ECANCELED ? -ECANCELED : 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    struct oa_xfer *x = ud;

    (void)p;
    x->got_headers = true;
    x->last_ms = now_mono_ms();
    return size * n;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud)
{
    struct oa_xfer *x = ud;
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
static void error_message(const struct oa_xfer *x, char *out, size_t len)
{
    json_t *root =
        x->errbody.len ? json_loadb(x->errbody.data, x->errbody.len, 0, NULL) : NULL;
    json_t *e = json_object_get(root, "error"), *m = NULL;

    if (json_is_string(e))
        m = e;
    else if (json_is_string(json_object_get(e, "message")))
        m = json_object_get(e, "message");
    else if (json_is_string(json_object_get(root, "message")))
        m = json_object_get(root, "message");
    else if (json_is_string(json_object_get(root, "detail")))
        m = json_object_get(root, "detail");
    if (m && json_string_length(m)) {
        snprintf(out, len, "%s", json_string_value(m));
    } else if (x->errbody.len && !root) {
        size_t l = strcspn(x->errbody.data, "\r\n");

        snprintf(out, len, "HTTP %ld: %.*s", x->status, (int)(l > 120 ? 120 : l),
                 x->errbody.data);
    } else {
        snprintf(out, len, "HTTP %ld", x->status);
    }
    json_decref(root);
}

/*
 * Run one POST to its end. 0 when a complete reply was parsed into x->stream;
 * -ECANCELED; -ENOMEM; or -EIO with `why` set and *retry telling whether
 * trying again is safe and useful (nothing was relayed, and the failure is a
 * 429, a 5xx or a transport error).
 */
static int xfer_run(struct oa_ask *ax, const char *body, struct oa_xfer *x, char *why,
                    size_t why_len, bool *retry)
{
    struct brain_openai *b = ax->b;
    struct curl_slist *hdrs = NULL, *h;
    char curl_err[CURL_ERROR_SIZE] = "";
    CURLM *multi = curl_multi_init();
    CURLcode cres = CURLE_OK;
    CURLMcode mc = CURLM_OK;
    bool done = false, stalled = false, cancelled = false;
    int running = 1, rc = -ENOMEM;

    *retry = false;
    x->easy = curl_easy_init();
    if (!multi || !x->easy)
        goto out_cleanup;
    h = curl_slist_append(hdrs, "Content-Type: application/json");
    h = h ? curl_slist_append(hdrs = h, "Accept: text/event-stream") : NULL;
    h = h && b->auth ? curl_slist_append(hdrs = h, b->auth) : h;
    if (!h)
        goto out_cleanup;
    hdrs = h;
    if (curl_easy_setopt(x->easy, CURLOPT_URL, b->url) ||
        curl_easy_setopt(x->easy, CURLOPT_PROTOCOLS_STR, "http,https") ||
        curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, body) ||
        curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, hdrs) ||
        curl_easy_setopt(x->easy, CURLOPT_USERAGENT, "reflexor") ||
        curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L) ||
        curl_easy_setopt(x->easy, CURLOPT_ERRORBUFFER, curl_err) ||
        curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS, b->connect_timeout_ms) ||
        curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, b->timeout_ms) ||
        curl_easy_setopt(x->easy, CURLOPT_TCP_KEEPALIVE, 1L) ||
        curl_easy_setopt(x->easy, CURLOPT_HEADERFUNCTION, on_header) ||
        curl_easy_setopt(x->easy, CURLOPT_HEADERDATA, x) ||
        curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_write) ||
        curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x) ||
        curl_multi_add_handle(multi, x->easy))
        goto out_cleanup;
    x->last_ms = now_mono_ms();

    /*
     * curl_multi_poll waits on the transfer and on cancel_fd at once, so a
     * cancel wakes us at once instead of at the next progress callback; the
     * slice bounds the wait so the stall clock is checked.
     */
    while (!done) {
        struct curl_waitfd wfd = {.fd = ax->ask->cancel_fd, .events = CURL_WAIT_POLLIN};
        int64_t gap, limit;
        CURLMsg *msg;
        int left;

        if (ax->ask->is_cancelled && ax->ask->is_cancelled(ax->ask)) {
            cancelled = true;
            break;
        }
        if ((mc = curl_multi_perform(multi, &running)))
            goto out_multi_failed;
        while ((msg = curl_multi_info_read(multi, &left))) {
            if (msg->msg == CURLMSG_DONE) {
                cres = msg->data.result;
                done = true;
            }
        }
        if (done || !running)
            break;
        /* Before the first response byte the connect time counts too. */
        gap = now_mono_ms() - x->last_ms;
        limit = b->stall_timeout_ms + (x->got_headers ? 0 : b->connect_timeout_ms);
        if (gap >= limit) {
            stalled = true;
            break;
        }
        if (curl_multi_poll(
                multi, wfd.fd >= 0 ? &wfd : NULL, wfd.fd >= 0 ? 1 : 0,
                (int)(limit - gap < POLL_SLICE_MS ? limit - gap : POLL_SLICE_MS), NULL))
            goto out_multi_failed;
        if (wfd.fd >= 0 && (wfd.revents & CURL_WAIT_POLLIN)) {
            cancelled = true;
            break;
        }
    }
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);

    rc = -EIO;
    if (cancelled || x->cb_rc == -ECANCELED) {
        rc = -ECANCELED;
    } else if (x->cb_rc == -ENOMEM) {
        rc = -ENOMEM;
    } else if (stalled) {
        snprintf(why, why_len, "the model sent nothing for %ld ms", b->stall_timeout_ms);
        *retry = !x->got_headers;
    } else if (x->status >= 200 && x->status <= 299 && x->cb_rc) {
        snprintf(why, why_len, "%s", x->stream.error);
    } else if (cres != CURLE_OK && !(x->status >= 300 && cres == CURLE_WRITE_ERROR)) {
        snprintf(why, why_len, "%s: %s", b->url,
                 *curl_err ? curl_err : curl_easy_strerror(cres));
        *retry = x->body_bytes == 0 || x->status < 200 || x->status > 299;
    } else if (x->status < 200 || x->status > 299) {
        curl_off_t after = -1;

        error_message(x, why, why_len);
        *retry = x->status == 429 || x->status == 408 || x->status >= 500;
        if (!curl_easy_getinfo(x->easy, CURLINFO_RETRY_AFTER, &after) && after > 0)
            x->retry_after_ms = after > 3600 ? 3600000L : (long)after * 1000;
    } else if ((rc = openai_stream_finish(&x->stream))) {
        snprintf(why, why_len, "%s", x->stream.error);
        rc = rc == -ENOMEM ? -ENOMEM : -EIO;
    }
    goto out_remove;

out_multi_failed:
    snprintf(why, why_len, "curl: %s", curl_multi_strerror(mc));
    rc = mc == CURLM_OUT_OF_MEMORY ? -ENOMEM : -EIO;
out_remove:
    curl_multi_remove_handle(multi, x->easy);
out_cleanup:
    curl_easy_cleanup(x->easy);
    x->easy = NULL;
    curl_multi_cleanup(multi);
    curl_slist_free_all(hdrs);
    return rc;
}

static void xfer_init(struct oa_xfer *x, struct oa_ask *ax)
{
    memset(x, 0, sizeof(*x));
    x->ax = ax;
    openai_stream_init(&x->stream, on_content, ax);
    rx_buf_init(&x->errbody, ERRBODY_MAX);
}

static void xfer_release(struct oa_xfer *x)
{
    openai_stream_release(&x->stream);
    rx_buf_release(&x->errbody);
}

/*
 * POST `req` (borrowed) with retries. 0 with *x holding the parsed reply
 * (initialised; the caller releases it in every case), -ECANCELED, -ENOMEM,
 * or -EIO with `why` the reason for the "[Error]" answer.
 */
static int request(struct oa_ask *ax, json_t *req, struct oa_xfer *x, char *why,
                   size_t why_len)
{
    struct brain_openai *b = ax->b;
    char *body = json_dumps(req, JSON_COMPACT);
    int rc = -ENOMEM;

    xfer_init(x, ax);
    if (!body)
        return -ENOMEM;
    for (int attempt = 0;; attempt++) {
        bool retry;
        long delay;

        rc = xfer_run(ax, body, x, why, why_len, &retry);
        if (rc != -EIO || !retry || attempt >= b->retries) {
            if (rc == -EIO && retry && attempt) {
                size_t l = strlen(why);

                snprintf(why + l, why_len - l, " (after %d attempts)", attempt + 1);
            }
            break;
        }
        delay = (long)b->backoff_ms << (attempt < 20 ? attempt : 20);
        if (x->retry_after_ms > delay)
            delay = x->retry_after_ms;
        if (delay > b->backoff_max_ms)
            delay = b->backoff_max_ms;
        xfer_release(x);
        xfer_init(x, ax);
        if (ax->ask->sleep_ms && (rc = ax->ask->sleep_ms(ax->ask, (int)delay)))
            break;
    }
    free(body);
    return rc;
}

/* ---- requests ------------------------------------------------------------------- */

static bool has_unloaded(const struct rx_state *s, int64_t cut)
{
    for (size_t i = 0; i < s->tools.len; i++) {
        const struct rx_tool_call *c = &s->tools.items[i];

        if (c->called_at <= s->summary_cut_at && c->called_at <= cut && !c->is_loaded)
            return true;
    }
    return false;
}

/* The tools array: the toolkit's schemas, plus load_tool_call when useful. */
static json_t *tools_json(struct oa_ask *ax)
{
    json_t *tools = ax->b->tools ? toolkit_schemas(ax->b->tools) : json_array();

    if (tools && has_unloaded(&ax->st, ax->ask->signals_cut_at) &&
        json_array_append_new(
            tools,
            json_pack("{s:s, s:{s:s, s:s, s:{s:s, s:{s:{s:s, s:s}}, s:[s]}}}", "type",
                      "function", "function", "name", BRAIN_OPENAI_LOAD_TOOL,
                      "description", LOAD_TOOL_DESCRIPTION, "parameters", "type",
                      "object", "properties", "toolCallId", "type", "string",
                      "description", "the id of the earlier tool call", "required",
                      "toolCallId"))) {
        json_decref(tools);
        return NULL;
    }
    return tools;
}

/*
 * The request body around `msgs` (stolen). With `summary`, the tools are
 * still declared (the history may hold tool calls, which some servers only
 * accept next to their declarations) but tool_choice "none" forbids calls.
 */
static json_t *request_json(struct oa_ask *ax, json_t *msgs, bool summary)
{
    struct brain_openai *b = ax->b;
    json_t *req = json_pack("{s:s, s:o, s:b, s:{s:b}}", "model", b->model, "messages",
                            msgs, "stream", 1, "stream_options", "include_usage", 1);
    json_t *tools;

    if (!req)
        return NULL;
    if ((b->has_temperature &&
         json_object_set_new(req, "temperature", json_real(b->temperature))) ||
        (b->max_tokens &&
         json_object_set_new(req, "max_tokens", json_integer(b->max_tokens))))
        goto out_decref;
    tools = tools_json(ax);
    if (!tools)
        goto out_decref;
    if (!json_array_size(tools)) {
        json_decref(tools);
        return req;
    }
    if (json_object_set_new(req, "tools", tools) ||
        (summary && json_object_set_new(req, "tool_choice", json_string("none"))))
        goto out_decref;
    return req;

out_decref:
    json_decref(req);
    return NULL;
}

static int build_context(struct oa_ask *ax, int64_t cut, json_t **out)
{
    json_t *msgs;
    int rc = rx_context_build(&ax->st, ax->ask->system_prompt, cut, &msgs);

    if (rc)
        return rc;
    if (json_array_extend(msgs, ax->notes)) {
        json_decref(msgs);
        return -ENOMEM;
    }
    *out = msgs;
    return 0;
}

/* ---- context compression -------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

/*
 * The cutAt that leaves the newest keep_recent items out of the summary, or
 * 0 when there is nothing to compress. A cut never splits a tool call from
 * its result: every call at or before it must have been answered by then.
 */
static int64_t choose_cut(const struct oa_ask *ax, int keep)
{
    const struct rx_state *s = &ax->st;
    int64_t cut = ax->ask->signals_cut_at, chosen = 0;
    size_t n = 0, cap = s->user.len + s->assistant.len + s->tools.len;
    int64_t *t = malloc((cap + 1) * sizeof(*t));

    if (!t)
        return 0;
    for (size_t i = 0; i < s->user.len; i++)
        if (s->user.items[i].received_at > s->summary_cut_at &&
            s->user.items[i].received_at <= cut)
            t[n++] = s->user.items[i].received_at;
    for (size_t i = 0; i < s->assistant.len; i++) {
        const struct rx_message *m = &s->assistant.items[i];

        if (m->status != RX_STATUS_STREAMING && *m->content &&
            m->received_at > s->summary_cut_at && m->received_at <= cut)
            t[n++] = m->received_at;
    }
    for (size_t i = 0; i < s->tools.len; i++) {
        const struct rx_tool_call *c = &s->tools.items[i];

        /* One brain-call-tools (same calledAt) is one item. */
        if (c->called_at > s->summary_cut_at && c->called_at <= cut &&
            (!i || s->tools.items[i - 1].called_at != c->called_at))
            t[n++] = c->called_at;
    }
    qsort(t, n, sizeof(*t), cmp_i64);
    for (size_t k = n > (size_t)keep ? n - (size_t)keep : 0; k-- > 0 && !chosen;) {
        bool ok = t[k] < t[k + 1];

        for (size_t i = 0; i < s->tools.len && ok; i++) {
            const struct rx_tool_call *c = &s->tools.items[i];

            if (c->called_at > s->summary_cut_at && c->called_at <= t[k])
                ok = c->result.present && c->result.received_at <= t[k];
        }
        if (ok)
            chosen = t[k];
    }
    free(t);
    return chosen;
}

/* Estimated tokens of a messages array: its JSON bytes / 4. */
static long long estimate_tokens(json_t *msgs)
{
    char *text = json_dumps(msgs, JSON_COMPACT);
    long long n = text ? (long long)strlen(text) / 4 : 0;

    free(text);
    return n;
}

/*
 * Over budget: summarise the older part and dispatch brain-compress-history.
 * A summary that cannot be had (provider error, empty reply) is not fatal:
 * the answer goes ahead on the whole context and reports its own errors.
 */
static int maybe_compress(struct oa_ask *ax)
{
    json_t *msgs = NULL, *req = NULL;
    struct rx_input in = {.type = RX_IN_BRAIN_COMPRESS_HISTORY};
    struct oa_xfer x;
    char why[256];
    int64_t cut;
    int rc;

    if (!ax->b->context_budget)
        return 0;
    rc = build_context(ax, ax->ask->signals_cut_at, &msgs);
    if (rc)
        return rc;
    if (estimate_tokens(msgs) <= ax->b->context_budget) {
        json_decref(msgs);
        return 0;
    }
    json_decref(msgs);
    cut = choose_cut(ax, ax->b->keep_recent);
    if (!cut)
        return 0;
    rc = rx_context_build(&ax->st, NULL, cut, &msgs);
    if (rc)
        return rc;
    if (json_array_insert_new(
            msgs, 0,
            json_pack("{s:s, s:s}", "role", "system", "content", SUMMARY_SYSTEM)) ||
        json_array_append_new(
            msgs, json_pack("{s:s, s:s}", "role", "user", "content", SUMMARY_REQUEST))) {
        json_decref(msgs);
        return -ENOMEM;
    }
    req = request_json(ax, msgs, true);
    if (!req)
        return -ENOMEM;
    ax->relay = false;
    rc = request(ax, req, &x, why, sizeof(why));
    ax->relay = true;
    if (rc == -EIO || (!rc && !x.stream.content.len)) {
        rc = 0;
        goto out_release;
    }
    if (rc)
        goto out_release;
    in.cut_at = cut;
    rc = rx_input_set_str(&in.text, x.stream.content.data);
    rc = rc ? rc : dispatch(ax, &in);
    /* A rejected compression (the session moved on) leaves the context whole. */
    if (rc == -EPROTO)
        rc = 0;
    rx_input_release(&in);

out_release:
    xfer_release(&x);
    json_decref(req);
    return rc;
}

/* ---- answering --------------------------------------------------------------------- */

/* A provider id we can use: unique in the session and in this reply. */
static bool id_usable(const struct oa_ask *ax, const struct rx_input *in, const char *id)
{
    if (!id || !*id || strlen(id) > RX_ID_MAX || rx_state_find_tool(&ax->st, id))
        return false;
    for (size_t i = 0; i < in->n_calls; i++)
        if (!strcmp(in->calls[i].id, id))
            return false;
    return true;
}

static int add_call(struct oa_ask *ax, struct rx_input *in,
                    const struct openai_stream_call *c)
{
    struct rx_input_call *calls, call = {0};
    char gen[42] = "call_";

    if (!id_usable(ax, in, c->id))
        idgen_uuid(gen + 5);
    call.id = rx_strdup(id_usable(ax, in, c->id) ? c->id : gen);
    call.name = rx_strdup(c->name ? c->name : "");
    /* Blank arguments mean none; anything else goes as sent, valid or not. */
    call.parameters = rx_strdup(c->args.len ? c->args.data : "{}");
    calls = rx_realloc(in->calls, in->n_calls * sizeof(*calls),
                       (in->n_calls + 1) * sizeof(*calls));
    if (!call.id || !call.name || !call.parameters || !calls) {
        rx_free(call.id);
        rx_free(call.name);
        rx_free(call.parameters);
        if (calls)
            in->calls = calls;
        return -ENOMEM;
    }
    in->calls = calls;
    in->calls[in->n_calls++] = call;
    return 0;
}

/*
 * A load_tool_call: dispatch brain-load-tool-call for a known id; for an
 * unknown one, tell the model in a note of the follow-up request instead of
 * sending an input the machine would reject.
 */
static int load_call(struct oa_ask *ax, const struct openai_stream_call *c)
{
    json_t *args = json_loadb(c->args.data ? c->args.data : "", c->args.len, 0, NULL);
    const char *id = json_string_value(json_object_get(args, "toolCallId"));
    struct rx_input in = {.type = RX_IN_BRAIN_LOAD_TOOL_CALL};
    char note[RX_ID_MAX + 96];
    int rc;

    if (!id || !rx_state_find_tool(&ax->st, id)) {
        snprintf(note, sizeof(note),
                 "load_tool_call: there is no earlier tool call '%.*s'", RX_ID_MAX,
                 id ? id : (c->args.data ? c->args.data : ""));
        json_decref(args);
        return json_array_append_new(
                   ax->notes, json_pack("{s:s, s:s}", "role", "system", "content", note))
                   ? -ENOMEM
                   : 0;
    }
    rc = rx_input_set_str(&in.tool_call_id, id);
    rc = rc ? rc : dispatch(ax, &in);
    rx_input_release(&in);
    json_decref(args);
    return rc;
}

/*
 * One request of the answer. *again is set when the reply only loaded old
 * calls: the caller asks again with them in the context.
 */
static int answer_round(struct oa_ask *ax, bool *again)
{
    struct rx_input in = {.type = RX_IN_BRAIN_CALL_TOOLS};
    json_t *msgs, *req;
    struct oa_xfer x;
    char why[256];
    size_t loads = 0;
    int rc;

    *again = false;
    rc = build_context(ax, ax->ask->signals_cut_at, &msgs);
    if (rc)
        return rc;
    req = request_json(ax, msgs, false);
    if (!req)
        return -ENOMEM;
    rc = request(ax, req, &x, why, sizeof(why));
    if (rc == -EIO) {
        rc = finish_error(ax, why);
        goto out_release;
    }
    if (rc)
        goto out_release;
    for (size_t i = 0; i < x.stream.n_calls && !rc; i++) {
        const struct openai_stream_call *c = &x.stream.calls[i];

        if (c->name && !strcmp(c->name, BRAIN_OPENAI_LOAD_TOOL)) {
            loads++;
            rc = load_call(ax, c);
        } else {
            rc = add_call(ax, &in, c);
        }
    }
    if (rc)
        goto out_release;
    if (loads && !in.n_calls) {
        *again = true; /* the message (if any) stays open for the next reply */
        goto out_release;
    }
    if (*ax->msg_id || has_resume(ax) || (!in.n_calls && ax->text.len)) {
        rc = dispatch_complete(ax, ax->text.data ? ax->text.data : "");
    } else if (!in.n_calls) {
        rc = finish_error(ax, "the model returned an empty reply");
    }
    if (!rc && in.n_calls) {
        rc = dispatch(ax, &in);
        if (rc == -EPROTO) {
            *ax->msg_id = '\0';
            rx_buf_reset(&ax->text);
            rc = finish_error(ax, "the session refused the tool calls");
        }
    }

out_release:
    rx_input_release(&in);
    xfer_release(&x);
    json_decref(req);
    return rc;
}

static int oa_ask(struct brain *self, struct brain_ask *ask)
{
    struct oa_ask ax = {.b = (struct brain_openai *)self, .ask = ask, .relay = true};
    bool again = true;
    int rc;

    rx_buf_init(&ax.text, OPENAI_STREAM_CONTENT_MAX);
    rc = rx_state_copy(ask->state, &ax.st);
    if (rc)
        return rc;
    ax.notes = json_array();
    rc = ax.notes ? maybe_compress(&ax) : -ENOMEM;
    for (int round = 0; !rc && again; round++) {
        if (round == LOAD_ROUNDS_MAX) {
            rc = finish_error(&ax, "the model kept loading earlier tool calls");
            break;
        }
        rc = answer_round(&ax, &again);
    }
    json_decref(ax.notes);
    rx_buf_release(&ax.text);
    rx_state_release(&ax.st);
    /* A dispatch refused because the ask was cancelled is a cancel too. */
    return rc == -ECANCELED ? -ECANCELED : rc;
}
