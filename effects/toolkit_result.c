/*
 * toolkit_result - tool answers as valid UTF-8 text. See toolkit_result.h.
 */
#include "effects/toolkit_result.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when invalid. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    uint32_t cp;
    size_t len;

    if (s[0] < 0x80)
        return s[0] ? 1 : 0; /* a NUL would cut the C string short */
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2, cp = s[0] & 0x1f;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3, cp = s[0] & 0x0f;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4, cp = s[0] & 0x07;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    /* Overlong forms, surrogates and code points past Unicode. */
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/*
 * A malloc'd copy of n bytes with invalid UTF-8 and NULs replaced by U+FFFD,
 * so tool output can go into JSON strings whatever the program printed.
 */
static char *utf8_clean(const char *s, size_t n)
{
    static const char replacement[] = "\xef\xbf\xbd";
    const unsigned char *u = (const unsigned char *)s;
    size_t cap = 1, len = 0;
    char *d;

    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq_len(u + i, n - i);

        cap += l ? l : 3;
        i += l ? l : 1;
    }
    d = malloc(cap);
    if (!d)
        return NULL;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq_len(u + i, n - i);

        if (l) {
            memcpy(d + len, s + i, l);
            len += l;
            i += l;
        } else {
            memcpy(d + len, replacement, 3);
            len += 3;
            i++;
        }
    }
    d[len] = '\0';
    return d;
}

int toolkit_result_set(char **result, bool *is_error, bool error, const char *text,
                       size_t n)
{
    char *d = utf8_clean(text, n);

    if (!d)
        return -ENOMEM;
    *result = d;
    *is_error = error;
    return 0;
}

int toolkit_result_errorf(char **result, bool *is_error, const char *fmt, ...)
{
    char buf[TOOLKIT_RESULT_ERROR_MAX];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -ENOMEM;
    return toolkit_result_set(result, is_error, true, buf,
                              (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}
