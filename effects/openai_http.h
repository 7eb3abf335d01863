/*
 * openai_http - one streamed Chat Completions request over libcurl: POST a
 * body, parse the reply as it arrives (openai_stream), retry with backoff.
 *
 * A transfer runs on a curl multi handle polled together with the ask's
 * cancel_fd, so a cancel aborts it at once; a silence between reply bytes
 * longer than stall_timeout_ms (plus connect_timeout_ms before the headers)
 * ends it. 429, 408, 5xx and transport errors before any reply byte are
 * retried up to `retries` times, waiting backoff_ms doubled each time (or a
 * 429's Retry-After), at most backoff_max_ms, through ask->sleep_ms so a
 * cancel cuts the wait short. Other 4xx, a stall after the headers, a
 * malformed or cut stream fail at once. An error reply's message is taken
 * from its body ({"error":{"message"}}, {"error":"..."}, {"message"},
 * {"detail"}, else its first line).
 *
 * Depends on libcurl (curl_global_init must have been called once, before any
 * thread starts), effects/brain.h (the ask's cancel and sleep), base/now,
 * effects/http_loop (the wait on the transfer, the cancel and the stall clock),
 * effects/openai_stream and state_machine/ (rx_buf, rx_common); nothing from
 * server/.
 * Threads: one struct openai_http per transfer; any number may run at once.
 * Ownership: struct openai_http is caller-allocated (openai_http_init /
 * openai_http_release) and owns its stream and buffers. The config, the ask
 * and the body are borrowed for the duration of openai_http_post.
 */
#ifndef OPENAI_HTTP_H
#define OPENAI_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "effects/brain.h"
#include "effects/openai_stream.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_common.h"

/* The start of an error reply kept to find the provider's message in. */
#define OPENAI_HTTP_ERRBODY_MAX (64u << 10)

struct openai_http_config {
    const char *url;  /* the endpoint, http:// or https:// */
    const char *auth; /* a whole header line ("Authorization: Bearer ..."), or NULL */
    long connect_timeout_ms, stall_timeout_ms;
    long timeout_ms; /* the whole request; 0: none */
    int retries, backoff_ms, backoff_max_ms;
};

struct openai_http {
    struct openai_stream stream; /* the reply, complete once post returned 0 */
    long status;                 /* the HTTP status of the last attempt, 0: none */

    /* The transfer's own. */
    void *easy;                           /* CURL *, NULL between transfers */
    const struct openai_http_config *cfg; /* of the transfer under way */
    struct rx_buf errbody;                /* the start of a non-2xx body */
    size_t body_bytes;                    /* reply bytes of this attempt */
    bool got_headers;    /* the stall clock no longer counts connecting */
    int64_t last_ms;     /* now_mono_ms() of the last byte */
    int cb_rc;           /* why the write callback stopped the transfer */
    long retry_after_ms; /* a 429's Retry-After, 0: none */
    openai_stream_content_fn on_content;
    openai_stream_content_fn on_reasoning;
    void *ctx;
};

/* Set up `x`; every content delta of the reply goes to on_content(ctx, ...). */
void openai_http_init(struct openai_http *x, openai_stream_content_fn on_content,
                      void *ctx);
/* Also every reasoning delta to fn(ctx, ...) (openai_stream_on_reasoning). */
void openai_http_on_reasoning(struct openai_http *x, openai_stream_content_fn fn);
/* Free what `x` holds; init it again before another post. */
void openai_http_release(struct openai_http *x);

/*
 * POST `body` (JSON text) to cfg->url, with the retries above. 0 with
 * x->stream holding the whole parsed reply; -ECANCELED (the ask was
 * cancelled, or the content callback returned it); -ENOMEM; or -EIO with
 * `why` (may be NULL) the reason, e.g. "HTTP 401: Incorrect API key" or
 * "the model sent nothing for 60000 ms (after 3 attempts)". In every case
 * the caller releases x.
 */
int openai_http_post(struct openai_http *x, const struct openai_http_config *cfg,
                     struct brain_ask *ask, const char *body,
                     struct rx_error *why) RX_WUR;

#endif
