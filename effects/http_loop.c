/*
 * http_loop - one libcurl transfer, watched for cancel and deadline.
 * See http_loop.h.
 */
#include "effects/http_loop.h"

#include <errno.h>

#include "base/now.h"

/* Longest wait in one poll: the deadline is asked again at least this often. */
#define POLL_SLICE_MS 1000

int http_loop_run(CURL *easy, int cancel_fd, http_loop_deadline_fn deadline, void *ctx,
                  enum http_loop_end *end, CURLcode *result, struct rx_error *err)
{
    CURLM *multi = curl_multi_init();
    CURLMcode mc = CURLM_OUT_OF_MEMORY;
    int running = 1, rc = 0;

    *result = CURLE_OK;
    if (!multi || (mc = curl_multi_add_handle(multi, easy)))
        goto out_multi_failed;
    for (;;) {
        struct curl_waitfd wfd = {.fd = cancel_fd, .events = CURL_WAIT_POLLIN};
        int64_t left;
        CURLMsg *msg;
        int queued;

        if ((mc = curl_multi_perform(multi, &running)))
            goto out_remove;
        while ((msg = curl_multi_info_read(multi, &queued)))
            if (msg->msg == CURLMSG_DONE) {
                *result = msg->data.result;
                *end = HTTP_LOOP_DONE;
                goto out_remove;
            }
        if (!running) { /* cannot happen without a DONE message; be safe */
            *end = HTTP_LOOP_DONE;
            goto out_remove;
        }
        left = deadline(ctx) - now_mono_ms();
        if (left <= 0) {
            *end = HTTP_LOOP_TIMEOUT;
            goto out_remove;
        }
        if ((mc = curl_multi_poll(
                 multi, cancel_fd >= 0 ? &wfd : NULL, cancel_fd >= 0 ? 1 : 0,
                 (int)(left < POLL_SLICE_MS ? left : POLL_SLICE_MS), NULL)))
            goto out_remove;
        if (cancel_fd >= 0 && (wfd.revents & CURL_WAIT_POLLIN)) {
            *end = HTTP_LOOP_CANCELLED;
            goto out_remove;
        }
    }

out_remove:
    curl_multi_remove_handle(multi, easy);
out_multi_failed:
    if (mc) {
        rc = mc == CURLM_OUT_OF_MEMORY ? -ENOMEM : -EIO;
        rx_error_set(err, rc, "curl: %s", curl_multi_strerror(mc));
    }
    curl_multi_cleanup(multi);
    return rc;
}
