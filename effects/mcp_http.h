/*
 * mcp_http - the Streamable HTTP transport of an MCP server (revision
 * 2025-11-25 and the two before it): every message we send is one POST to
 * the server's URL with `Accept: application/json, text/event-stream`; the
 * answer is either one JSON document (a message or a batch) or an SSE
 * stream of messages, parsed as it arrives (effects/sse_parse, the one SSE
 * parser), so progress notifications are seen while a call runs.
 *
 * The transport keeps the session: the `MCP-Session-Id` the server gave in
 * its answer to initialize, sent back on every later request with
 * `MCP-Protocol-Version`; mcp_http_forget drops it (before a new
 * initialize), mcp_http_close DELETEs it. The configured headers (a bearer
 * token...) go on every request.
 *
 * Depends on libcurl (curl_global_init done once, before threads),
 * effects/http_loop, effects/sse_parse and jansson; nothing of JSON-RPC
 * beyond "a message is a JSON object", nothing of server/.
 * Threads: any number of posts may run at once; the session fields are
 * behind the struct's lock.
 * Ownership: struct mcp_http is caller-allocated; it copies the URL and the
 * headers. Messages handed to the callback are borrowed for the call.
 */
#ifndef MCP_HTTP_H
#define MCP_HTTP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "effects/http_loop.h"
#include "state_machine/rx_common.h"

/* Longest answer (JSON body or one SSE event) taken from a server. */
#define MCP_HTTP_MESSAGE_MAX (8u << 20)
#define MCP_HTTP_SESSION_MAX 256

struct mcp_http {
    char *url;
    struct curl_slist *headers; /* the configured ones, "Name: value" */
    long connect_timeout_ms;
    pthread_mutex_t lock;
    char session[MCP_HTTP_SESSION_MAX]; /* "" until initialize answered with one */
    char version[16];                   /* the negotiated protocol, "" before */
};

/* Each message of an answer, in order (a batch is split). */
typedef void (*mcp_http_message_fn)(void *ctx, json_t *msg);

/* How a post ended, besides its return value. */
struct mcp_http_result {
    long status;       /* HTTP status, 0 when no answer came */
    bool session_gone; /* 404 (or 400) on a request that carried our session */
    enum http_loop_end end;
};

/*
 * Copy `url` and the `headers` object (borrowed; NULL: none) in. 0,
 * -EINVAL (a header that is not a string, or has CR/LF) or -ENOMEM, with
 * `err` naming the header.
 */
int mcp_http_init(struct mcp_http *h, const char *url, json_t *headers,
                  long connect_timeout_ms, struct rx_error *err) RX_WUR;
void mcp_http_release(struct mcp_http *h);

/*
 * POST `body` (one JSON-RPC message as text). Every message of the answer
 * goes to fn(ctx, msg) as it is parsed; the transfer stops early once
 * `*stop` (may be NULL) is true after a message (the awaited answer came).
 * The wait ends at deadline(dctx) (asked again after every wake-up) or when
 * cancel_fd (may be -1) becomes readable; see res->end.
 * 0 when the server accepted it (2xx) and its answer was read; -EIO with
 * `err` saying why (connection refused, HTTP 500 with the server's message,
 * a malformed answer); -ENOENT when the session is gone (res->session_gone:
 * initialize again); -ECANCELED; -ETIMEDOUT; -ENOMEM.
 */
int mcp_http_post(struct mcp_http *h, const char *body, int cancel_fd,
                  http_loop_deadline_fn deadline, void *dctx, mcp_http_message_fn fn,
                  void *ctx, const bool *stop, struct mcp_http_result *res,
                  struct rx_error *err) RX_WUR;

/* Drop the session (its id and version) before initializing again. */
void mcp_http_forget(struct mcp_http *h);
/* Record the negotiated protocol version, sent from now on. */
void mcp_http_set_version(struct mcp_http *h, const char *version);
/* End the session with a DELETE (best effort, bounded), then forget it. */
void mcp_http_close(struct mcp_http *h, int timeout_ms);

#endif
