/*
 * reply - how the server answers a request: JSON bodies, JSON errors (SPEC
 * section 4: every error is JSON), plain text and streams.
 *
 * Depends on libmicrohttpd, jansson, state_machine/rx_buf and server/metrics
 * (errors are counted).
 * Each call queues one response on `conn` and returns MHD's verdict. Every
 * answer, the client protocols' (server/protocols/oai, server/protocols/lg) included, is
 * queued by reply_queue: one place counts error answers for /metrics. Out of memory: an
 * answer that cannot be built is a 500 of constant bytes (reply_out_of_memory), never a
 * closed connection, unless MHD itself has no memory for a response. Ownership:
 * reply_json steals `j` (NULL: out of memory, answered 500); reply_queue and reply_stream
 * take the response (NULL: answered 500). Text is copied.
 */
#ifndef REPLY_H
#define REPLY_H

#include <stddef.h>

#include <jansson.h>
#include <microhttpd.h>

#include "state_machine/rx_buf.h"

/*
 * A response holding `len` bytes of `data` (copied) as `type`, with
 * Cache-Control: no-store; NULL on ENOMEM. Add headers, then reply_queue.
 */
struct MHD_Response *reply_response(const char *type, const void *data, size_t len);
/* In a cluster: every answer names the node (X-Reflexor-Node). Once. */
void reply_set_node(const char *name);
/*
 * Queue `r` with `status` and let go of it (NULL: out of memory, answered
 * 500). An error status (400 and up) is counted.
 */
enum MHD_Result reply_queue(struct MHD_Connection *conn, unsigned status,
                            struct MHD_Response *r);
enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status, const char *type,
                           const char *text, size_t len);
enum MHD_Result reply_json(struct MHD_Connection *conn, unsigned status, json_t *j);
/* The same with "Retry-After: retry_s": come back then (429, 503). `j` is stolen. */
enum MHD_Result reply_json_retry(struct MHD_Connection *conn, unsigned status, json_t *j,
                                 int retry_s);
/* {"error": code, "message": <fmt...>, ["field": field]} with `status`. */
enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned status,
                            const char *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* JSON bytes already encoded in `b`: the buffer is taken (MHD frees it), `b` is
   left empty. */
enum MHD_Result reply_buf(struct MHD_Connection *conn, unsigned status, struct rx_buf *b);
/* 200 with a streaming response (SSE); the response is destroyed here. */
enum MHD_Result reply_stream(struct MHD_Connection *conn, struct MHD_Response *r);
/* 500 {"error":"internal","message":"out of memory"}, allocating nothing of ours. */
enum MHD_Result reply_out_of_memory(struct MHD_Connection *conn);
/* 405 with an Allow header listing `allow`. */
enum MHD_Result reply_method_not_allowed(struct MHD_Connection *conn, const char *allow);

#endif
