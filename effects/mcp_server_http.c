/*
 * mcp_server_http - the Streamable HTTP transport of an MCP server: each
 * message a POST (effects/mcp_http) whose answer is read on the caller's
 * thread; a lost session is initialized again once. See
 * mcp_server_internal.h for the table it fills.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "effects/mcp_http.h"
#include "effects/mcp_server_internal.h"
#include "base/now.h"

static struct mcp_http *http_of(struct mcp_server *s)
{
    return s->link;
}

static int http_init(struct mcp_server *s, struct rx_error *err)
{
    struct mcp_http *h = calloc(1, sizeof(*h));
    int rc;

    if (!h)
        return rx_error_set(err, -ENOMEM, "out of memory");
    rc = mcp_http_init(h, s->cfg.url, s->cfg.headers, s->cfg.timeout_ms, err);
    if (rc) {
        mcp_http_release(h); /* init leaves what it got for release */
        free(h);
        return rc;
    }
    s->link = h;
    return 0;
}

static void http_release(struct mcp_server *s)
{
    if (!s->link)
        return;
    mcp_http_release(http_of(s));
    free(s->link);
    s->link = NULL;
}

/* What a transfer asks for its deadline: a request's (which progress moves
   on), or a fixed one. */
struct waiter {
    struct mcp_server *s;
    struct pending *p; /* NULL: `fixed` */
    int64_t fixed;
};

static int64_t waiter_deadline(void *ctx)
{
    struct waiter *w = ctx;

    return w->p ? mcp_server_deadline(w->s, w->p) : w->fixed;
}

static void on_message(void *ctx, json_t *msg)
{
    mcp_server_handle_message(ctx, msg);
}

/* A new initialize starts a new session. */
static int http_open(struct mcp_server *s, struct rx_error *err)
{
    (void)err;
    mcp_http_forget(http_of(s));
    return 0;
}

static void http_set_version(struct mcp_server *s, const char *version)
{
    mcp_http_set_version(http_of(s), version);
}

static int http_send(struct mcp_server *s, const char *text, int wait_ms,
                     struct rx_error *err)
{
    struct waiter w = {.s = s, .fixed = now_mono_ms() + wait_ms};
    struct mcp_http_result res;

    return mcp_http_post(http_of(s), text, s->stop_pipe[0], waiter_deadline, &w,
                         on_message, s, NULL, &res, err);
}

/* Send the request and read its answer; a lost session is initialized again
   and the request sent once more. */
static int http_exchange(struct mcp_server *s, struct pending *p, const char *text,
                         const char *method, int cancel_fd, struct rx_error *err)
{
    struct waiter w = {.s = s, .p = p};
    struct mcp_http_result res;
    unsigned long gen;
    int rc;

    for (int attempt = 0;; attempt++) {
        pthread_mutex_lock(&s->lock);
        gen = s->generation;
        pthread_mutex_unlock(&s->lock);
        rc = mcp_http_post(http_of(s), text, cancel_fd, waiter_deadline, &w, on_message,
                           s, &p->done, &res, err);
        if (rc != -ENOENT || attempt || !strcmp(method, "initialize"))
            break;
        log_info("mcp %s: the server lost our session; initializing again", s->cfg.name);
        pthread_mutex_lock(&s->init_lock);
        pthread_mutex_lock(&s->lock);
        rc = gen == s->generation ? 1 : 0; /* nobody did it meanwhile */
        pthread_mutex_unlock(&s->lock);
        if (rc)
            mcp_http_forget(http_of(s));
        rc = rc ? mcp_server_initialize(s, cancel_fd, err) : 0;
        pthread_mutex_unlock(&s->init_lock);
        if (rc)
            break;
    }
    if (rc == -EIO && !res.status) /* no HTTP answer at all: the link is down */
        mcp_server_set_broken(s, err->text);
    return rc;
}

static void http_close(struct mcp_server *s, bool stopping, char *why, size_t size)
{
    (void)why;
    (void)size;
    if (stopping) /* a goodbye the server may use to free the session */
        mcp_http_close(http_of(s), MCP_SERVER_KILL_GRACE_MS);
    else
        mcp_http_forget(http_of(s));
}

/* Over HTTP our answer would be a POST of its own, from inside this
   transfer: we declare no capabilities, so only a ping could come. */
const struct mcp_server_transport mcp_server_http_transport = {
    .name = "http",
    .init = http_init,
    .release = http_release,
    .open = http_open,
    .set_version = http_set_version,
    .send = http_send,
    .exchange = http_exchange,
    .reply = NULL,
    .close = http_close,
};
