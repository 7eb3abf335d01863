/*
 * mcp_server - one MCP server's connection, life cycle and calls: the core,
 * which knows its transport only through s->tp (mcp_server_internal.h).
 * See mcp_server.h.
 */
#include "effects/mcp_server.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "effects/log.h"
#include "effects/mcp_rpc.h"
#include "effects/mcp_server_internal.h"
#include "base/now.h"
#include "state_machine/rx_json.h"

/* A cancellation is best effort: a server that does not take it at once must
   not hold the cancelled call, nor a shutdown that cancels every call, for
   its whole timeout_ms. */
#define NOTIFY_CANCEL_MS 1000

#define BACKOFF_FIRST_MS 500
#define BACKOFF_MAX_MS   30000
/* A server listing more pages than this is cut off there. */
#define TOOL_PAGES_MAX 100
/* Warnings about one connection's bad messages before we stop logging them. */
#define WARNINGS_MAX   20
#define CLIENT_VERSION "0.2"

/* ----------------------------------------------------------- small things */

void mcp_server_config_release(struct mcp_server_config *cfg)
{
    for (size_t i = 0; cfg->argv && cfg->argv[i]; i++)
        free(cfg->argv[i]);
    for (size_t i = 0; cfg->env && cfg->env[i]; i++)
        free(cfg->env[i]);
    free(cfg->argv);
    free(cfg->env);
    free(cfg->name);
    free(cfg->url);
    json_decref(cfg->headers);
    memset(cfg, 0, sizeof(*cfg));
}

const char *mcp_server_name(const struct mcp_server *s)
{
    return s->cfg.name;
}

void mcp_server_ref(struct mcp_server *s)
{
    pthread_mutex_lock(&s->lock);
    s->refs++;
    pthread_mutex_unlock(&s->lock);
}

static void server_free(struct mcp_server *s)
{
    json_decref(s->tools);
    s->tp->release(s);
    close(s->stop_pipe[0]);
    close(s->stop_pipe[1]);
    mcp_server_config_release(&s->cfg);
    pthread_mutex_destroy(&s->init_lock);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void mcp_server_unref(struct mcp_server *s)
{
    int left;

    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    left = --s->refs;
    pthread_mutex_unlock(&s->lock);
    if (!left)
        server_free(s);
}

void mcp_server_info(struct mcp_server *s, struct mcp_server_info *out)
{
    pthread_mutex_lock(&s->lock);
    out->transport = s->tp->name;
    out->status = s->status;
    memcpy(out->error, s->error, sizeof(out->error));
    memcpy(out->version, s->version, sizeof(out->version));
    out->tools = json_array_size(s->tools);
    out->skipped = s->skipped;
    out->calls_ok = s->calls_ok;
    out->calls_failed = s->calls_failed;
    out->restarts = s->restarts;
    pthread_mutex_unlock(&s->lock);
}

json_t *mcp_server_tools(struct mcp_server *s)
{
    json_t *list;

    /* A reference, not a copy: a list grows with the server's answer, and
       a copy of it would cost that under the lock /healthz waits for. */
    pthread_mutex_lock(&s->lock);
    list = json_incref(s->tools);
    pthread_mutex_unlock(&s->lock);
    return list ? list : json_array();
}

bool mcp_server_may_warn(struct mcp_server *s)
{
    if (s->warnings == WARNINGS_MAX)
        log_warn("mcp %s: further bad messages are not logged", s->cfg.name);
    return s->warnings++ < WARNINGS_MAX;
}

void mcp_server_fail_pending(struct mcp_server *s, const char *why)
{
    for (struct pending *p = s->pending; p; p = p->next) {
        if (p->done)
            continue;
        p->done = true;
        snprintf(p->lost, sizeof(p->lost), "%s", why);
        if (p->evfd >= 0)
            eventfd_write(p->evfd, 1);
    }
}

void mcp_server_set_broken(struct mcp_server *s, const char *why)
{
    pthread_mutex_lock(&s->lock);
    if (!s->broken && !s->stopping)
        snprintf(s->error, sizeof(s->error), "%s", why);
    s->broken = true;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->lock);
}

int64_t mcp_server_deadline(struct mcp_server *s, struct pending *p)
{
    int64_t d;

    pthread_mutex_lock(&s->lock);
    d = p->deadline;
    pthread_mutex_unlock(&s->lock);
    return d;
}

/* Lock held. */
static struct pending *find_pending(struct mcp_server *s, json_int_t id)
{
    for (struct pending *p = s->pending; p; p = p->next)
        if (p->id == id)
            return p;
    return NULL;
}

/* -------------------------------------------------------------- messages */

static void on_response(struct mcp_server *s, json_t *msg, json_int_t id)
{
    struct pending *p;

    pthread_mutex_lock(&s->lock);
    p = find_pending(s, id);
    if (p && !p->done) {
        p->answer = json_incref(msg);
        p->done = true;
        if (p->evfd >= 0)
            eventfd_write(p->evfd, 1);
    } else if (mcp_server_may_warn(s)) {
        log_warn("mcp %s: an answer to request %lld, which is not waiting", s->cfg.name,
                 (long long)id);
    }
    pthread_mutex_unlock(&s->lock);
}

static void on_notification(struct mcp_server *s, json_t *msg, const char *method)
{
    json_t *params = json_object_get(msg, "params");
    struct pending *p;
    json_int_t id;

    if (!strcmp(method, "notifications/progress")) {
        if (mcp_rpc_progress_id(json_object_get(params, "progressToken"), &id))
            return;
        pthread_mutex_lock(&s->lock);
        if ((p = find_pending(s, id)))
            p->deadline = now_mono_ms() + s->cfg.timeout_ms;
        pthread_mutex_unlock(&s->lock);
    } else if (!strcmp(method, "notifications/tools/list_changed")) {
        pthread_mutex_lock(&s->lock);
        s->refresh = true;
        pthread_cond_broadcast(&s->wake);
        pthread_mutex_unlock(&s->lock);
    }
}

void mcp_server_handle_message(struct mcp_server *s, json_t *msg)
{
    const char *method = NULL;
    json_int_t id = 0;
    json_t *reply;

    switch (mcp_rpc_classify(msg, &id, &method)) {
    case MCP_RPC_RESPONSE:
    case MCP_RPC_ERROR_RESPONSE:
        on_response(s, msg, id);
        break;
    case MCP_RPC_NOTIFICATION:
        on_notification(s, msg, method);
        break;
    case MCP_RPC_REQUEST:
        if (s->tp->reply && (reply = mcp_rpc_reply(msg))) {
            s->tp->reply(s, reply, method);
            json_decref(reply);
        }
        break;
    case MCP_RPC_INVALID:
        pthread_mutex_lock(&s->lock);
        if (mcp_server_may_warn(s))
            log_warn("mcp %s: a message that is not JSON-RPC 2.0 ignored", s->cfg.name);
        pthread_mutex_unlock(&s->lock);
        break;
    }
}

/* ---------------------------------------------------------------- requests */

/* Send one message that wants no answer (a notification). */
static int send_text(struct mcp_server *s, json_t *msg, int wait_ms, struct rx_error *err)
{
    char *text = json_dumps(msg, JSON_COMPACT);
    int rc;

    if (!text)
        return rx_error_set(err, -ENOMEM, "out of memory");
    rc = s->tp->send(s, text, wait_ms, err);
    free(text);
    return rc;
}

/* wait_ms: how long the server may take to accept it (see NOTIFY_CANCEL_MS). */
static void send_notification(struct mcp_server *s, json_t *msg /* stolen */, int wait_ms)
{
    struct rx_error err = {""};

    if (!msg || send_text(s, msg, wait_ms, &err))
        log_warn("mcp %s: a notification was not delivered: %s", s->cfg.name,
                 msg ? err.text : "out of memory");
    json_decref(msg);
}

static json_int_t new_id(struct mcp_server *s)
{
    json_int_t id;

    pthread_mutex_lock(&s->lock);
    id = ++s->next_id;
    pthread_mutex_unlock(&s->lock);
    return id;
}

/*
 * Send request `id` and wait for its answer. 0 with *result (NEW) the
 * response's result; -EIO with `err` (a JSON-RPC error, the link lost...);
 * -ETIMEDOUT, -ECANCELED (both after notifications/cancelled), -ENOMEM.
 * `need_up`: refuse at once unless the server is up.
 */
static int request(struct mcp_server *s, json_int_t id, const char *method,
                   json_t *params /* stolen */, int cancel_fd, bool need_up,
                   json_t **result, struct rx_error *err)
{
    struct pending p = {.id = id, .evfd = -1};
    json_t *msg = mcp_rpc_request(id, method, params);
    char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    int rc = 0;

    json_decref(msg);
    if (!text)
        return rx_error_set(err, -ENOMEM, "out of memory");
    pthread_mutex_lock(&s->lock);
    if (s->stopping)
        rc = rx_error_set(err, -EIO, "Reflexor is stopping");
    else if (need_up && s->status != MCP_UP)
        rc = rx_error_set(err, -EIO, "the MCP server '%s' is %s%s%s", s->cfg.name,
                          s->status == MCP_STARTING ? "still starting" : "down",
                          s->error[0] ? ": " : "", s->error);
    if (!rc) {
        p.deadline = now_mono_ms() + s->cfg.timeout_ms;
        p.next = s->pending;
        s->pending = &p;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc)
        goto out_free;

    rc = s->tp->exchange(s, &p, text, method, cancel_fd, err);

    pthread_mutex_lock(&s->lock);
    for (struct pending **pp = &s->pending; *pp; pp = &(*pp)->next)
        if (*pp == &p) {
            *pp = p.next;
            break;
        }
    pthread_mutex_unlock(&s->lock);

    if ((rc == -ECANCELED || rc == -ETIMEDOUT) && strcmp(method, "initialize"))
        send_notification(s,
                          mcp_rpc_cancelled(id, rc == -ECANCELED ? "cancelled by the user"
                                                                 : "no answer in time"),
                          NOTIFY_CANCEL_MS);
    if (rc == -ETIMEDOUT)
        rx_error_set(err, rc, "no answer to %s from '%s' within %d ms", method,
                     s->cfg.name, s->cfg.timeout_ms);
    if (!rc && !p.answer)
        rc = rx_error_set(err, -EIO, "%s", p.lost[0] ? p.lost : "no answer came");
    if (!rc && json_object_get(p.answer, "error"))
        rc = mcp_rpc_error_text(p.answer, err);
    if (!rc)
        *result = json_incref(json_object_get(p.answer, "result"));
    if (!rc && !*result)
        rc = rx_error_set(err, -EIO, "an answer without a result");
    json_decref(p.answer);

out_free:
    free(text);
    return rc;
}

/* ------------------------------------------------------------- life cycle */

int mcp_server_initialize(struct mcp_server *s, int cancel_fd, struct rx_error *err)
{
    json_t *params = mcp_rpc_initialize_params(CLIENT_VERSION), *result = NULL;
    char version[16];
    int rc;

    if (!params)
        return rx_error_set(err, -ENOMEM, "out of memory");
    rc = request(s, new_id(s), "initialize", params, cancel_fd, false, &result, err);
    if (!rc)
        rc = mcp_rpc_check_initialize(result, version, sizeof(version), NULL, err);
    json_decref(result);
    if (rc)
        return rc == -ENOMEM ? rc : -EIO;
    s->tp->set_version(s, version);
    pthread_mutex_lock(&s->lock);
    memcpy(s->version, version, sizeof(version));
    s->generation++;
    pthread_mutex_unlock(&s->lock);
    send_notification(s, mcp_rpc_notification("notifications/initialized", NULL),
                      s->cfg.timeout_ms);
    return 0;
}

/* A page that would take the list past the bound refuses the whole list:
   part of a server's tools would be a silent surprise. */
static int check_bound(struct mcp_server *s, json_t *tools, json_t *result,
                       struct rx_error *err)
{
    size_t max = s->cfg.tools_max ? s->cfg.tools_max : MCP_SERVER_TOOLS_MAX_DEFAULT;
    size_t n = json_array_size(tools) + json_array_size(json_object_get(result, "tools"));

    if (n <= max)
        return 0;
    return rx_error_set(err, -E2BIG,
                        "the server lists more than %zu tools, the bound of "
                        "limits.mcp_tools_max (%zu so far)",
                        max, n);
}

/* Read tools/list page by page and publish the list. */
static int list_tools(struct mcp_server *s, struct rx_error *err)
{
    json_t *tools = json_array(), *cursor = NULL, *old;
    size_t skipped = 0, skipped_page;
    int rc = 0, page;

    if (!tools)
        return rx_error_set(err, -ENOMEM, "out of memory");
    for (page = 0; page < TOOL_PAGES_MAX && !rc; page++) {
        json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : NULL;
        json_t *result = NULL;

        json_decref(cursor);
        cursor = NULL;
        rc = request(s, new_id(s), "tools/list", params, s->stop_pipe[0], false, &result,
                     err);
        if (!rc)
            rc = check_bound(s, tools, result, err);
        if (!rc)
            rc = mcp_rpc_tools_page(result, tools, &cursor, &skipped_page, err);
        if (!rc)
            skipped += skipped_page;
        json_decref(result);
        if (!cursor)
            break;
    }
    json_decref(cursor);
    if (rc) {
        json_decref(tools);
        return rc;
    }
    if (skipped)
        log_warn("mcp %s: %zu tools left out (no valid name or schema, or a NUL in a "
                 "string)",
                 s->cfg.name, skipped);
    pthread_mutex_lock(&s->lock);
    old = s->tools;
    s->tools = tools;
    s->skipped = skipped;
    pthread_mutex_unlock(&s->lock);
    json_decref(old);
    return 0;
}

static int connect_once(struct mcp_server *s, struct rx_error *err)
{
    int rc = s->tp->open(s, err);

    if (!rc) {
        pthread_mutex_lock(&s->init_lock);
        rc = mcp_server_initialize(s, s->stop_pipe[0], err);
        pthread_mutex_unlock(&s->init_lock);
    }
    if (!rc)
        rc = list_tools(s, err);
    return rc;
}

/* Undo connect_once; the reason gets how a program ended. */
static void disconnect(struct mcp_server *s, char *why, size_t size)
{
    bool stopping;

    pthread_mutex_lock(&s->lock);
    stopping = s->stopping;
    pthread_mutex_unlock(&s->lock);
    s->tp->close(s, stopping, why, size);
}

static void set_status(struct mcp_server *s, enum mcp_status st, const char *why)
{
    pthread_mutex_lock(&s->lock);
    s->status = st;
    snprintf(s->error, sizeof(s->error), "%s", why ? why : "");
    pthread_mutex_unlock(&s->lock);
    s->changed(s->ctx);
}

/* Up: wait for a break, a stop, or a list to read again. The reason of a
   break is left in `why`. */
static void serve(struct mcp_server *s, char *why, size_t size)
{
    struct rx_error err = {""};

    pthread_mutex_lock(&s->lock);
    while (!s->stopping && !s->broken) {
        if (!s->refresh) {
            pthread_cond_wait(&s->wake, &s->lock);
            continue;
        }
        s->refresh = false;
        pthread_mutex_unlock(&s->lock);
        if (list_tools(s, &err)) {
            pthread_mutex_lock(&s->lock);
            if (!s->broken)
                snprintf(s->error, sizeof(s->error), "tools/list: %s", err.text);
            s->broken = true;
            continue;
        }
        log_info("mcp %s: the tool list changed", s->cfg.name);
        s->changed(s->ctx);
        pthread_mutex_lock(&s->lock);
    }
    snprintf(why, size, "%s", s->error);
    pthread_mutex_unlock(&s->lock);
}

static void *supervisor_main(void *arg)
{
    struct mcp_server *s = arg;
    int backoff = BACKOFF_FIRST_MS;

    for (;;) {
        char why[MCP_SERVER_ERROR_MAX] = "";
        struct rx_error err = {""};
        struct timespec until;
        bool was_up = false;

        if (!connect_once(s, &err)) {
            struct mcp_server_info info;

            set_status(s, MCP_UP, NULL);
            mcp_server_info(s, &info);
            log_info("mcp %s: up (protocol %s, %zu tools)", s->cfg.name, info.version,
                     info.tools);
            backoff = BACKOFF_FIRST_MS;
            was_up = true;
            serve(s, why, sizeof(why));
        } else {
            snprintf(why, sizeof(why), "%s", err.text);
        }
        disconnect(s, why, sizeof(why));
        pthread_mutex_lock(&s->lock);
        mcp_server_fail_pending(s, why);
        s->broken = s->refresh = false;
        s->restarts += was_up;
        if (s->stopping) {
            pthread_mutex_unlock(&s->lock);
            break;
        }
        pthread_mutex_unlock(&s->lock);
        set_status(s, MCP_DOWN, why);
        log_warn("mcp %s: down: %s; trying again in %d ms", s->cfg.name, why, backoff);

        until = now_deadline(CLOCK_MONOTONIC, backoff * NOW_NS_PER_MS);
        pthread_mutex_lock(&s->lock);
        while (!s->stopping && pthread_cond_timedwait(&s->wake, &s->lock, &until) == 0)
            ;
        if (s->stopping) {
            pthread_mutex_unlock(&s->lock);
            break;
        }
        s->status = MCP_STARTING;
        pthread_mutex_unlock(&s->lock);
        backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
    }
    return NULL;
}

struct mcp_server *mcp_server_start(struct mcp_server_config *cfg,
                                    mcp_server_changed_fn changed, void *ctx)
{
    struct mcp_server *s = calloc(1, sizeof(*s));
    struct rx_error err = {""};
    pthread_condattr_t ca;

    if (!s || pipe2(s->stop_pipe, O_CLOEXEC)) {
        free(s);
        mcp_server_config_release(cfg);
        return NULL;
    }
    s->cfg = *cfg;
    memset(cfg, 0, sizeof(*cfg));
    /* The one place that looks at the kind: the table does the rest. */
    s->tp = s->cfg.transport == MCP_HTTP ? &mcp_server_http_transport
                                         : &mcp_server_stdio_transport;
    s->changed = changed;
    s->ctx = ctx;
    s->refs = 1;
    s->status = MCP_STARTING;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->init_lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (s->tp->init(s, &err))
        goto out_free;
    if (pthread_create(&s->thread, NULL, supervisor_main, s))
        goto out_free;
    return s;

out_free:
    if (err.text[0])
        log_error("mcp %s: %s", s->cfg.name, err.text);
    server_free(s);
    return NULL;
}

void mcp_server_stop(struct mcp_server *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    mcp_server_fail_pending(s, "Reflexor is stopping");
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->lock);
    if (write(s->stop_pipe[1], "x", 1) < 0)
        log_warn("mcp %s: cannot wake the supervisor", s->cfg.name);
    pthread_join(s->thread, NULL);
    mcp_server_unref(s);
}

/* ------------------------------------------------------------------ calls */

int mcp_server_call(struct mcp_server *s, const char *tool, json_t *args, const char *key,
                    int cancel_fd, char **text, bool *is_error)
{
    json_int_t id = new_id(s);
    json_t *params = mcp_rpc_call_params(id, tool, args, key), *result = NULL;
    struct rx_error err = {""};
    int rc;

    if (!params)
        return -ENOMEM;
    rc = request(s, id, "tools/call", params, cancel_fd, true, &result, &err);
    if (rc == -ECANCELED || rc == -ENOMEM) {
        json_decref(result);
        return rc;
    }
    if (!rc) {
        rc = mcp_rpc_call_text(result, text, is_error, &err);
        if (rc == -ENOMEM) {
            json_decref(result);
            return rc;
        }
        if (!rc && *is_error && !**text) { /* an error must say something */
            free(*text);
            rc = rx_error_set(&err, -EIO, "the tool '%s' failed without a message", tool);
        }
    }
    json_decref(result);
    if (rc) {
        *is_error = true;
        *text = strdup(err.text);
        if (!*text)
            return -ENOMEM;
    }
    pthread_mutex_lock(&s->lock);
    if (*is_error)
        s->calls_failed++;
    else
        s->calls_ok++;
    pthread_mutex_unlock(&s->lock);
    return 0;
}
