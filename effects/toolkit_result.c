/*
 * toolkit_result - tool answers as valid UTF-8 text. See toolkit_result.h.
 */
#include "effects/toolkit_result.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state_machine/rx_json.h"

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when invalid. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    /* a NUL would cut the C string short */
    return s[0] ? rx_json_utf8_len((const char *)s, n) : 0;
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
