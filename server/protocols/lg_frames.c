/*
 * lg_frames - the kept events of one run. See lg_frames.h.
 */
#include "server/protocols/lg_frames.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/sse.h"
#include "state_machine/rx_buf.h"

void lg_frames_init(struct lg_frames *fl, size_t max_bytes)
{
    memset(fl, 0, sizeof(*fl));
    fl->max_bytes = max_bytes;
    fl->first_id = 1;
}

void lg_frames_release(struct lg_frames *fl)
{
    for (size_t i = 0; i < fl->len; i++)
        sse_frame_unref(fl->f[fl->start + i]);
    free(fl->f);
    fl->first_id += (int64_t)fl->len;
    fl->f = NULL;
    fl->start = fl->len = fl->cap = fl->bytes = 0;
}

int64_t lg_frames_next_id(const struct lg_frames *fl)
{
    return fl->first_id + (int64_t)fl->len;
}

/* Room for one more at the end: slide the kept frames down, or grow. */
static int reserve(struct lg_frames *fl)
{
    struct sse_frame **f;
    size_t cap;

    if (fl->start + fl->len < fl->cap)
        return 0;
    if (fl->start) {
        memmove(fl->f, fl->f + fl->start, fl->len * sizeof(*fl->f));
        fl->start = 0;
        if (fl->len < fl->cap)
            return 0;
    }
    cap = fl->cap ? fl->cap * 2 : 64;
    if (!(f = realloc(fl->f, cap * sizeof(*f))))
        return -ENOMEM;
    fl->f = f;
    fl->cap = cap;
    return 0;
}

int lg_frames_add(struct lg_frames *fl, const char *event, const char *data, size_t len,
                  struct sse_frame **out)
{
    int64_t id = lg_frames_next_id(fl);
    struct sse_frame *frame;
    struct rx_buf b;
    int err;

    if (strpbrk(event, "\r\n"))
        return -EINVAL;
    if ((err = reserve(fl)))
        return err;
    /* JSON has no raw line breaks, so `data` is one data line. */
    rx_buf_init(&b, len + strlen(event) + 64);
    err = rx_buf_printf(&b, "event: %s\ndata: ", event) || rx_buf_append(&b, data, len) ||
          rx_buf_printf(&b, "\nid: %lld\n\n", (long long)id);
    frame = err ? NULL : sse_frame_raw(b.data, b.len);
    rx_buf_release(&b);
    if (!frame)
        return -ENOMEM;
    fl->f[fl->start + fl->len++] = frame;
    fl->bytes += frame->len;
    while (fl->bytes > fl->max_bytes && fl->len > 1) {
        fl->bytes -= fl->f[fl->start]->len;
        sse_frame_unref(fl->f[fl->start]);
        fl->start++;
        fl->len--;
        fl->first_id++;
    }
    if (out)
        *out = frame;
    return 0;
}

struct sse_frame **lg_frames_after(const struct lg_frames *fl, int64_t after, size_t *n)
{
    size_t skip = 0;

    if (after >= fl->first_id) {
        int64_t k = after - fl->first_id + 1;

        skip = k > (int64_t)fl->len ? fl->len : (size_t)k;
    }
    *n = fl->len - skip;
    return fl->f ? fl->f + fl->start + skip : NULL;
}

bool lg_frames_check_invariants(const struct lg_frames *fl)
{
    size_t bytes = 0;

    if (fl->start + fl->len > fl->cap || fl->first_id < 1)
        return false;
    for (size_t i = 0; i < fl->len; i++)
        bytes += fl->f[fl->start + i]->len;
    return bytes == fl->bytes && (bytes <= fl->max_bytes || fl->len == 1);
}
