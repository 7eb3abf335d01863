/*
 * reply - JSON, text and stream answers. See reply.h.
 */
#include "server/reply.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/metrics.h"

struct MHD_Response *reply_response(const char *type, const void *data, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);

    if (r) {
        MHD_add_response_header(r, "Content-Type", type);
        MHD_add_response_header(r, "Cache-Control", "no-store");
    }
    return r;
}

/* The node's name on every answer, in a cluster: written once, then published. */
static char node_name[128];
static bool node_named;

void reply_set_node(const char *name)
{
    if (__atomic_load_n(&node_named, __ATOMIC_ACQUIRE) || !name)
        return;
    snprintf(node_name, sizeof(node_name), "%s", name);
    __atomic_store_n(&node_named, true, __ATOMIC_RELEASE);
}

enum MHD_Result reply_out_of_memory(struct MHD_Connection *conn)
{
    static const char body[] = "{\"error\":\"internal\",\"message\":\"out of memory\"}";
    /* Constant bytes, not copied: nothing of ours is allocated for it. */
    struct MHD_Response *r = MHD_create_response_from_buffer(
        sizeof(body) - 1, (void *)body, MHD_RESPMEM_PERSISTENT);

    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    return reply_queue(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, r);
}

enum MHD_Result reply_queue(struct MHD_Connection *conn, unsigned status,
                            struct MHD_Response *r)
{
    enum MHD_Result ret;

    if (!r)
        return reply_out_of_memory(conn);
    if (__atomic_load_n(&node_named, __ATOMIC_ACQUIRE))
        MHD_add_response_header(r, "X-Reflexor-Node", node_name);
    if (status >= 400)
        metrics_http_error((int)status);
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status, const char *type,
                           const char *text, size_t len)
{
    return reply_queue(conn, status, reply_response(type, text, len));
}

enum MHD_Result reply_json(struct MHD_Connection *conn, unsigned status, json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    enum MHD_Result ret;

    json_decref(j);
    if (!text)
        return reply_out_of_memory(conn);
    ret = reply_text(conn, status, "application/json", text, strlen(text));
    free(text);
    return ret;
}

enum MHD_Result reply_json_retry(struct MHD_Connection *conn, unsigned status, json_t *j,
                                 int retry_s)
{
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    struct MHD_Response *r =
        text ? reply_response("application/json", text, strlen(text)) : NULL;
    char after[16];

    json_decref(j);
    free(text);
    if (!r)
        return reply_out_of_memory(conn);
    snprintf(after, sizeof(after), "%d", retry_s > 0 ? retry_s : 1);
    MHD_add_response_header(r, "Retry-After", after);
    return reply_queue(conn, status, r);
}

enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned status,
                            const char *code, const char *field, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    json_t *j;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    j = json_pack("{s:s, s:s}", "error", code, "message", msg);
    /* A message quoting a path that is not UTF-8 cannot be a JSON string;
       the answer must still be JSON. */
    if (!j)
        j = json_pack("{s:s, s:s}", "error", code, "message",
                      "the request names something that is not valid UTF-8");
    if (j && field)
        json_object_set_new(j, "field", json_string(field));
    return reply_json(conn, status, j);
}

enum MHD_Result reply_stream(struct MHD_Connection *conn, struct MHD_Response *r)
{
    return reply_queue(conn, MHD_HTTP_OK, r);
}

enum MHD_Result reply_method_not_allowed(struct MHD_Connection *conn, const char *allow)
{
    static const char body[] = "{\"error\":\"method-not-allowed\",\"message\":"
                               "\"this route takes other methods\"}";
    struct MHD_Response *r = reply_response("application/json", body, sizeof(body) - 1);

    if (r)
        MHD_add_response_header(r, "Allow", allow);
    return reply_queue(conn, MHD_HTTP_METHOD_NOT_ALLOWED, r);
}

enum MHD_Result reply_buf(struct MHD_Connection *conn, unsigned status, struct rx_buf *b)
{
    size_t len;
    char *data = rx_buf_take(b, &len);
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, data ? data : (char *)"",
        data ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);

    if (!r) {
        free(data);
        return reply_out_of_memory(conn);
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    return reply_queue(conn, status, r);
}
