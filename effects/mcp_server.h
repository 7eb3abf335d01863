/*
 * mcp_server - one configured MCP server: its connection and life cycle,
 * its tool list, and the calls made to it.
 *
 * A thread of its own (the supervisor) connects in the background:
 * start the program (stdio) or reach the URL (Streamable HTTP), initialize
 * (protocol 2025-11-25, taking 2025-06-18 or 2025-03-26 when that is what
 * the server speaks), send notifications/initialized, read tools/list page
 * by page; the server is then `up`. When the connection breaks (the program
 * exits, the URL stops answering) or a step fails or times out, the server
 * is `down` with the reason, every call in flight ends with that reason,
 * and the supervisor tries again after a backoff (500 ms doubling to 30 s).
 * notifications/tools/list_changed makes it read the list again. Nothing
 * here blocks the caller of mcp_server_start.
 *
 * A call (tools/call) runs on the caller's thread: it carries a
 * progressToken; it waits at most timeout_ms for its answer, a wait that
 * starts again on each progress notification; a cancel (cancel_fd
 * readable) or a timeout sends notifications/cancelled. Over HTTP, an
 * answer "session gone" (404) makes the call initialize again and retry
 * once. Requests the server sends us get "ping" answered and anything else
 * refused (-32601), over stdio only when the pipe takes the answer at once
 * (else it is dropped: a server that does not read cannot stall us); other
 * notifications are ignored. A server may list at most cfg.tools_max tools.
 *
 * Depends on effects/mcp_rpc (the messages), mcp_stdio and mcp_http (the
 * transports, each behind one table of operations: mcp_server_internal.h,
 * mcp_server_stdio.c, mcp_server_http.c), log and now; nothing from server/.
 * Threads: every function may be called from any thread; each server has
 * one lock, taken for short moves only (never across I/O).
 * Ownership: mcp_server_start takes the config's contents (the struct is
 * zeroed); the server is reference-counted: the creator holds one
 * reference, mcp_server_ref takes another, mcp_server_unref drops one and
 * frees the server with the last. mcp_server_tools returns a NEW reference
 * (read-only: shared with the server and other callers).
 */
#ifndef MCP_SERVER_H
#define MCP_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "state_machine/rx_common.h"

#define MCP_SERVER_TIMEOUT_DEFAULT_MS 60000
/* Tools one server may list (limits.mcp_tools_max): past it the list is
   refused and the server is down, saying so. */
#define MCP_SERVER_TOOLS_MAX_DEFAULT 1000
#define MCP_SERVER_ERROR_MAX         RX_ERR_LEN

enum mcp_transport { MCP_STDIO, MCP_HTTP };
enum mcp_status { MCP_STARTING, MCP_UP, MCP_DOWN };

struct mcp_server_config {
    char *name;
    enum mcp_transport transport;
    char **argv;      /* stdio: the program and its arguments, NULL-terminated */
    char **env;       /* stdio: "NAME=value" laid over ours, NULL-terminated; or NULL */
    char *url;        /* http */
    json_t *headers;  /* http: {"Name": "value"}, or NULL */
    int timeout_ms;   /* one request's wait for its answer or next progress */
    size_t tools_max; /* the longest list taken; 0: MCP_SERVER_TOOLS_MAX_DEFAULT */
};

struct mcp_server_info {
    const char *transport; /* "stdio" or "http" (static) */
    enum mcp_status status;
    char error[MCP_SERVER_ERROR_MAX]; /* the last failure, "" when none */
    char version[16];                 /* the negotiated protocol, "" before */
    size_t tools;
    size_t skipped; /* tools of the last list left out (see mcp_rpc_tools_page) */
    unsigned long calls_ok, calls_failed, restarts;
};

/* Called (on the supervisor's thread, no lock held) when the status or the
   tool list changed. */
typedef void (*mcp_server_changed_fn)(void *ctx);

/* Free what a config holds and zero it. */
void mcp_server_config_release(struct mcp_server_config *cfg);

/*
 * Start connecting in the background. The server then holds the config's
 * contents. NULL when out of memory or out of threads (the config is
 * released then too).
 */
struct mcp_server *mcp_server_start(struct mcp_server_config *cfg,
                                    mcp_server_changed_fn changed, void *ctx) RX_WUR;

/* Stop: end the calls in flight, stop the program or DELETE the session,
   join the threads; then drop the creator's reference. NULL is fine. */
void mcp_server_stop(struct mcp_server *s);

void mcp_server_ref(struct mcp_server *s);
void mcp_server_unref(struct mcp_server *s);

const char *mcp_server_name(const struct mcp_server *s);
void mcp_server_info(struct mcp_server *s, struct mcp_server_info *out);

/* The server's tools as it listed them: [{"name", "description",
   "inputSchema", "annotations"}]. NEW reference to the list itself, which
   is never changed once read (a new list replaces it), so it is shared
   read-only and costs nothing to hand over; NULL (ENOMEM). */
json_t *mcp_server_tools(struct mcp_server *s) RX_WUR;

/*
 * Call `tool` with `args` (a JSON object, STOLEN). 0 with *text (malloc'd)
 * the result as text and *is_error telling whether it is an error for a
 * toolkit-error (the server's isError, a JSON-RPC error, no answer in time,
 * the server down or gone mid-call...); -ECANCELED once cancel_fd became
 * readable (notifications/cancelled was sent); -ENOMEM.
 */
int mcp_server_call(struct mcp_server *s, const char *tool, json_t *args, const char *key,
                    int cancel_fd, char **text, bool *is_error) RX_WUR;

#endif
