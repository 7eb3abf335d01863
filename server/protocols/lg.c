/*
 * lg - the LangGraph Agent Server API subset: routing, the answers every
 * route shares, /info and the one assistant. See lg.h; threads are
 * lg_threads.c, runs lg_runs.c and lg_run*.c.
 */
#include "server/protocols/lg.h"
#include "server/protocols/lg_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/protocols/lg_msg.h"
#include "server/protocols/lg_run.h"
#include "server/relay.h"
#include "server/reply.h"
#include "server/session_table.h"
#include "state_machine/rx_json.h"

/* ---- answers ------------------------------------------------------------------ */

enum MHD_Result lg__queue(struct MHD_Connection *conn, unsigned status,
                          struct MHD_Response *r)
{
    const char *origin = door_local_origin(conn);

    if (r && origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(r, "Vary", "Origin");
        MHD_add_response_header(r, "Access-Control-Expose-Headers",
                                "Content-Location, Location, X-Pagination-Total, "
                                "X-Pagination-Next");
    }
    return reply_queue(conn, status, r);
}

enum MHD_Result lg__reply(struct MHD_Connection *conn, unsigned status, json_t *j,
                          const char *location)
{
    static const char oom[] = "{\"detail\":\"out of memory\"}";
    /* ENCODE_ANY: /assistants/count answers a bare integer. */
    char *text =
        j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY) : NULL;
    struct MHD_Response *r;

    json_decref(j);
    if (!text)
        status = 500;
    r = text ? reply_response("application/json", text, strlen(text))
             : reply_response("application/json", oom, sizeof(oom) - 1);
    free(text);
    if (r && location)
        MHD_add_response_header(r, "Content-Location", location);
    return lg__queue(conn, status, r);
}

enum MHD_Result lg__detail(struct MHD_Connection *conn, unsigned status, const char *fmt,
                           ...)
{
    char msg[512];
    va_list ap;
    json_t *j;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    j = json_pack("{s:s}", "detail", msg);
    /* A message quoting bytes that are not UTF-8 cannot be a JSON string. */
    if (!j)
        j = json_pack("{s:s}", "detail", "the request names something that is not UTF-8");
    return lg__reply(conn, status, j, NULL);
}

enum MHD_Result lg__empty(struct MHD_Connection *conn, unsigned status)
{
    return lg__queue(conn, status,
                     MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT));
}

json_t *lg__body(struct MHD_Connection *conn, const struct rx_buf *body,
                 enum MHD_Result *ret)
{
    struct rx_error e;
    json_t *j;
    int err;

    if (!body->len)
        return json_object();
    if ((err = rx_json_parse(body->data, body->len, 0, &j, &e))) {
        *ret = err == -ENOMEM ? lg__detail(conn, 500, "out of memory")
                              : lg__detail(conn, 422, "the body is not JSON: %s", e.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        *ret = lg__detail(conn, 422, "the body must be a JSON object");
        return NULL;
    }
    return j;
}

long long lg__query_count(struct MHD_Connection *conn, const char *key, long long dflt)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, key);
    char *end;
    long long n;

    if (!v || !*v)
        return dflt;
    errno = 0;
    n = strtoll(v, &end, 10);
    return *end || errno || n < 0 ? -1 : n;
}

struct session *lg__thread(struct door *srv, const struct principal *who,
                           struct MHD_Connection *conn, const char *tid,
                           enum MHD_Result *ret)
{
    struct session *s = session_table_get_as(srv->sessions, tid, who);

    if (!s)
        *ret = lg__detail(conn, 404, "Thread with ID %s not found", tid);
    return s;
}

/* ---- /info and the assistant -------------------------------------------------- */

static enum MHD_Result info(struct MHD_Connection *conn)
{
    return lg__reply(conn, 200,
                     json_pack("{s:s, s:s, s:{s:b, s:b, s:b}}", "version", "reflexor",
                               "context", "reflexor", "flags", "assistants", 1, "crons",
                               0, "langsmith", 0),
                     NULL);
}

/* The one assistant: the server's agent, graph "agent". */
static json_t *assistant(struct door *srv)
{
    char at[LG_ISO_LEN];

    lg_msg_iso(srv->started_ms, at);
    return json_pack("{s:s, s:s, s:{s:{}}, s:{}, s:{s:s}, s:s, s:s, s:s, s:s, s:i}",
                     "assistant_id", LG_ASSISTANT_ID, "graph_id", LG_GRAPH_ID, "config",
                     "configurable", "context", "metadata", "created_by", "system",
                     "name", LG_GRAPH_ID, "description",
                     srv->brain_name ? srv->brain_name : "", "created_at", at,
                     "updated_at", at, "version", 1);
}

static bool is_assistant(const char *id)
{
    return !strcmp(id, LG_ASSISTANT_ID) || !strcmp(id, LG_GRAPH_ID);
}

/* True when every key of `want` (an object or null) is in `have` with that value. */
static bool contains(json_t *have, json_t *want)
{
    const char *k;
    json_t *v;

    json_object_foreach(want, k, v)
    {
        if (!json_equal(json_object_get(have, k), v))
            return false;
    }
    return true;
}

/* POST /assistants/search and /assistants/count: the one, when it matches. */
static enum MHD_Result assistants_search(struct door *srv, struct MHD_Connection *conn,
                                         const struct rx_buf *body, bool count)
{
    enum MHD_Result ret;
    json_t *q = lg__body(conn, body, &ret), *a;
    const char *graph, *name;
    bool match;

    if (!q)
        return ret;
    graph = json_string_value(json_object_get(q, "graph_id"));
    name = json_string_value(json_object_get(q, "name"));
    a = assistant(srv);
    match = a && (!graph || !strcmp(graph, LG_GRAPH_ID)) &&
            (!name || strstr(LG_GRAPH_ID, name)) &&
            contains(json_object_get(a, "metadata"), json_object_get(q, "metadata")) &&
            json_integer_value(json_object_get(q, "offset")) <= 0;
    json_decref(q);
    if (count) {
        json_decref(a);
        return lg__reply(conn, 200, json_integer(match), NULL);
    }
    if (!match) {
        json_decref(a);
        return lg__reply(conn, 200, json_array(), NULL);
    }
    return lg__reply(conn, 200, json_pack("[o]", a), NULL);
}

static enum MHD_Result assistants_route(struct door *srv, struct MHD_Connection *conn,
                                        const char *method, const char *path,
                                        const struct rx_buf *body)
{
    const char *id = path + 1, *rest;
    char aid[64];
    size_t n;

    if (!strcmp(path, "/search") || !strcmp(path, "/count")) {
        if (strcmp(method, "POST"))
            return lg__detail(conn, 405, "Method Not Allowed");
        return assistants_search(srv, conn, body, !strcmp(path, "/count"));
    }
    if (*path != '/' || !(n = strcspn(id, "/")) || n >= sizeof(aid))
        return lg__detail(conn, 404, "Not Found");
    memcpy(aid, id, n);
    aid[n] = '\0';
    rest = id + n;
    if (!is_assistant(aid))
        return lg__detail(conn, 404, "Assistant %s not found", aid);
    if (*rest)
        return lg__detail(conn, 404, "Not Found");
    if (strcmp(method, "GET"))
        return lg__detail(conn, 405, "Method Not Allowed");
    return lg__reply(conn, 200, assistant(srv), NULL);
}

/* ---- routing ------------------------------------------------------------------ */

/* A CORS preflight (a browser asks before a cross-origin POST). */
static enum MHD_Result preflight(struct MHD_Connection *conn)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);

    if (!r)
        return MHD_NO;
    if (door_local_origin(conn)) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods",
                                "GET, POST, PATCH, DELETE, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                "Content-Type, Authorization, X-Api-Key, Last-Event-ID");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    return lg__queue(conn, 204, r);
}

/* `path` starts with `word` as a whole segment: what follows it, else NULL. */
static const char *segment(const char *path, const char *word)
{
    size_t n = strlen(word);

    if (strncmp(path, word, n) || (path[n] && path[n] != '/'))
        return NULL;
    return path + n;
}

static enum MHD_Result lg_route(struct door *srv, const struct principal *who,
                                struct MHD_Connection *conn, const char *method,
                                const char *path, const struct rx_buf *body,
                                struct park **slot)
{
    const char *rest;

    if (!strcmp(method, "OPTIONS"))
        return preflight(conn);
    if (!strcmp(path, "/info") || !strcmp(path, "/ok")) {
        if (strcmp(method, "GET"))
            return lg__detail(conn, 405, "Method Not Allowed");
        return path[1] == 'o' ? lg__reply(conn, 200, json_pack("{s:b}", "ok", 1), NULL)
                              : info(conn);
    }
    if ((rest = segment(path, "/assistants")))
        return assistants_route(srv, conn, method, rest, body);
    if ((rest = segment(path, "/threads"))) {
        /* /threads/<tid>/runs... */
        const char *tid = rest + 1, *runs;
        char id[SESSION_ID_MAX + 1];
        size_t n = *rest == '/' ? strcspn(tid, "/") : 0;

        if (n && n <= SESSION_ID_MAX && (runs = segment(tid + n, "/runs"))) {
            enum MHD_Result ret;
            char url[1024];

            memcpy(id, tid, n);
            id[n] = '\0';
            /* A run lives where its thread's inputs are applied (SPEC 6.1). */
            snprintf(url, sizeof(url), "%s%s", srv->cfg->lg_prefix, path);
            if (relay_route(srv, who, conn, id, method, url, body, slot, &ret))
                return ret;
            return lg_runs_route(srv, who, conn, method, id, runs, body, slot);
        }
        return lg_threads_route(srv, who, conn, method, rest, body);
    }
    return lg__detail(conn, 404, "Not Found");
}

void lg_shutdown(void)
{
    lg_run_shutdown();
    lg_threads_shutdown();
}

static const char *lg_prefix(const struct config *cfg)
{
    return cfg->lg_prefix;
}

static enum MHD_Result lg_unauthorized(struct MHD_Connection *conn)
{
    return lg__detail(conn, 401,
                      "send 'Authorization: Bearer <token>' or 'X-Api-Key: <token>'");
}

static enum MHD_Result lg_too_large(struct MHD_Connection *conn, const char *why)
{
    return lg__detail(conn, 413, "%s", why);
}

enum MHD_Result lg__too_many(struct MHD_Connection *conn, const char *why, int retry_s)
{
    return reply_json_retry(conn, 429, json_pack("{s:s}", "detail", why), retry_s);
}

/* A browser's CORS preflight carries no credentials: the route answers it. */
const struct door_ops lg_door = {"langgraph",  lg_prefix,    lg_route, lg_unauthorized,
                                 lg_too_large, lg__too_many, true};
