/*
 * rx_buf - growing byte buffer with a bound. See rx_buf.h.
 */
#include "state_machine/rx_buf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "state_machine/rx_alloc.h"

void rx_buf_init(struct rx_buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

void rx_buf_release(struct rx_buf *b)
{
    rx_free(b->data);
    rx_buf_init(b, b->max);
}

void rx_buf_reset(struct rx_buf *b)
{
    rx_buf_truncate(b, 0);
}

void rx_buf_truncate(struct rx_buf *b, size_t len)
{
    b->len = len;
    if (b->data)
        b->data[len] = '\0';
}

char *rx_buf_take(struct rx_buf *b, size_t *len)
{
    char *p = b->data;

    if (len)
        *len = b->len;
    rx_buf_init(b, b->max);
    return p;
}

int rx_buf_reserve(struct rx_buf *b, size_t n)
{
    size_t need, cap;
    char *p;

    if (n > b->max - b->len)
        return -E2BIG;
    need = b->len + n + 1;
    if (need <= b->cap)
        return 0;
    cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    p = rx_realloc(b->data, b->cap, cap);
    if (!p)
        return -ENOMEM;
    b->data = p;
    b->cap = cap;
    b->data[b->len] = '\0'; /* a fresh buffer keeps its invariant too */
    return 0;
}

int rx_buf_append(struct rx_buf *b, const void *p, size_t n)
{
    int err = rx_buf_reserve(b, n);

    if (err)
        return err;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int rx_buf_puts(struct rx_buf *b, const char *s)
{
    return rx_buf_append(b, s, strlen(s));
}

int rx_buf_putc(struct rx_buf *b, char c)
{
    return rx_buf_append(b, &c, 1);
}

int rx_buf_printf(struct rx_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n, err;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    err = rx_buf_reserve(b, (size_t)n);
    if (err)
        return err;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

/* Every seq and timestamp of every encoding passes here: no printf. */
int rx_buf_put_i64(struct rx_buf *b, int64_t v)
{
    char tmp[24], *end = tmp + sizeof(tmp), *p = end;
    uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;

    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    return rx_buf_append(b, p, (size_t)(end - p));
}

int rx_buf_put_json_str(struct rx_buf *b, const char *s)
{
    return rx_buf_put_json_strn(b, s, strlen(s));
}

/*
 * Escape like jansson's compact output: quote, backslash and control bytes;
 * everything else (UTF-8 included) is copied in runs, so plain text costs one
 * memcpy per run.
 */
int rx_buf_put_json_strn(struct rx_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t start_len = b->len, run = 0, i;
    int err;

    if ((err = rx_buf_putc(b, '"')))
        return err;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[6];
        size_t elen = 2;

        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if ((err = rx_buf_append(b, s + run, i - run)))
            goto out_truncate;
        esc[0] = '\\';
        switch (c) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            elen = 6;
        }
        if ((err = rx_buf_append(b, esc, elen)))
            goto out_truncate;
        run = i + 1;
    }
    if ((err = rx_buf_append(b, s + run, n - run)) || (err = rx_buf_putc(b, '"')))
        goto out_truncate;
    return 0;

out_truncate:
    rx_buf_truncate(b, start_len);
    return err;
}
