/*
 * http_loop - drive one libcurl transfer to its end while watching a cancel
 * descriptor and a deadline: the wait every HTTP client of effects/ shares
 * (the OpenAI brain, the MCP Streamable HTTP transport).
 *
 * The transfer runs on a multi handle of its own, and curl_multi_poll waits
 * on its sockets and on cancel_fd at once, so a cancel ends it at once
 * rather than at the next callback. The deadline is asked again after every
 * wake-up, so a caller may move it while the transfer runs (a stall clock
 * that restarts on each byte, an MCP timeout that restarts on each progress
 * notification).
 *
 * Depends on libcurl and base/now; nothing from server/.
 * Threads: one loop per transfer; any number may run at once.
 * Ownership: the easy handle is borrowed: it is added to the loop's multi
 * handle and removed again before http_loop_run returns.
 */
#ifndef HTTP_LOOP_H
#define HTTP_LOOP_H

#include <stdint.h>

#include <curl/curl.h>

#include "state_machine/rx_common.h"

enum http_loop_end {
    HTTP_LOOP_DONE,      /* the transfer ended; see *result */
    HTTP_LOOP_CANCELLED, /* cancel_fd became readable */
    HTTP_LOOP_TIMEOUT,   /* now_mono_ms() reached the deadline */
};

/* The now_mono_ms() time at which to give up; asked after every wake-up. */
typedef int64_t (*http_loop_deadline_fn)(void *ctx);

/*
 * Run `easy` until one of the ends above. `cancel_fd` may be -1. 0 with
 * *end (and *result, the transfer's CURLcode, when DONE); or -ENOMEM / -EIO
 * when the multi interface itself failed, with `err` (may be NULL) saying so.
 */
int http_loop_run(CURL *easy, int cancel_fd, http_loop_deadline_fn deadline, void *ctx,
                  enum http_loop_end *end, CURLcode *result, struct rx_error *err) RX_WUR;

#endif
