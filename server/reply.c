/*
 * reply - JSON, text and stream answers. See reply.h.
 */
#include "server/reply.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/metrics.h"

enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status, const char *type,
                           const char *text, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret;

    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result reply_json(struct MHD_Connection *conn, unsigned status, json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    enum MHD_Result ret;

    json_decref(j);
    if (!text)
        return MHD_NO;
    ret = reply_text(conn, status, "application/json", text, strlen(text));
    free(text);
    return ret;
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
    metrics_http_error((int)status);
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
    enum MHD_Result ret;

    if (!r)
        return reply_error(conn, 500, "internal", NULL, "out of memory");
    ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result reply_method_not_allowed(struct MHD_Connection *conn, const char *allow)
{
    json_t *j = json_pack("{s:s, s:s}", "error", "method-not-allowed", "message",
                          "this route takes other methods");
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    struct MHD_Response *r;
    enum MHD_Result ret = MHD_NO;

    json_decref(j);
    if (!text)
        return MHD_NO;
    r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Allow", allow);
    metrics_http_error(405);
    ret = MHD_queue_response(conn, MHD_HTTP_METHOD_NOT_ALLOWED, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result reply_buf(struct MHD_Connection *conn, unsigned status, struct rx_buf *b)
{
    struct MHD_Response *r;
    enum MHD_Result ret;
    size_t len;
    char *data = rx_buf_take(b, &len);

    r = MHD_create_response_from_buffer(len, data ? data : (char *)"",
                                        data ? MHD_RESPMEM_MUST_FREE
                                             : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(data);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}
