/*
 * rx_buf - a growing byte buffer with a hard size bound.
 *
 * Pure: no I/O. Depends on rx_alloc (jansson's allocator: malloc unless a
 * test installs its own) only. Used to encode JSON, SSE frames and request
 * bodies without building jansson trees on hot paths.
 *
 * Invariants: `data` is NULL (nothing allocated) or holds `len + 1` bytes with
 * data[len] == '\0'; `len <= max`.
 * Ownership: struct rx_buf is caller-allocated (rx_buf_init / rx_buf_release).
 * rx_buf_take hands the bytes to the caller, who frees them with free(3).
 * A failed append leaves the buffer as it was (nothing partial is appended).
 */
#ifndef RX_BUF_H
#define RX_BUF_H

#include <stddef.h>
#include <stdint.h>
#include "state_machine/rx_common.h"

/* Bounds of the buffers the project uses (curl DYN_* style). */
#define RX_BUF_STATE_MAX (256u << 20) /* an encoded session state */
#define RX_BUF_SMALL_MAX (1u << 20)   /* one input, event or message record */

struct rx_buf {
    char *data;
    size_t len;
    size_t cap;
    size_t max;
};

/* Set up an empty buffer that refuses to grow past `max` bytes. */
void rx_buf_init(struct rx_buf *b, size_t max);
/* Free the bytes; the buffer is empty and reusable afterwards. */
void rx_buf_release(struct rx_buf *b);
/* Forget the contents but keep the allocation. */
void rx_buf_reset(struct rx_buf *b);
/* Cut back to `len` bytes (<= b->len): undoes appends after a failure. */
void rx_buf_truncate(struct rx_buf *b, size_t len);
/* Hand the bytes (NUL-terminated, may be NULL when empty) to the caller. */
char *rx_buf_take(struct rx_buf *b, size_t *len);

/* Room for `n` more bytes (and the NUL) in one allocation, when the size is
   known ahead: 0, -ENOMEM, or -E2BIG past the bound; the contents stay. */
int rx_buf_reserve(struct rx_buf *b, size_t n);
/* Appends: 0, -ENOMEM, or -E2BIG past the bound; on error nothing changed. */
int rx_buf_append(struct rx_buf *b, const void *p, size_t n) RX_WUR;
int rx_buf_puts(struct rx_buf *b, const char *s) RX_WUR;
int rx_buf_putc(struct rx_buf *b, char c) RX_WUR;
int rx_buf_printf(struct rx_buf *b, const char *fmt, ...) RX_WUR
    __attribute__((format(printf, 2, 3)));
int rx_buf_put_i64(struct rx_buf *b, int64_t v) RX_WUR;
/* Append `s` (NUL-terminated, UTF-8) as a JSON string literal, quotes included. */
int rx_buf_put_json_str(struct rx_buf *b, const char *s) RX_WUR;
/* Same for `n` bytes that may contain NULs (escaped as \u0000). */
int rx_buf_put_json_strn(struct rx_buf *b, const char *s, size_t n) RX_WUR;

#endif
