/*
 * rx_common - the conventions every layer shares, and nothing else.
 *
 * Pure: macros, one constant and one struct; no functions with effects.
 * Depends on the C library only.
 * Every module's fallible actions return 0 or a negative errno and carry
 * RX_WUR; a sentence for humans goes into a caller's struct rx_error (NULL
 * allowed), filled with rx_error_set() (or rx_error_setv() from a function
 * that takes a format of its own).
 * Ownership: struct rx_error is caller-allocated and owns nothing.
 */
#ifndef RX_COMMON_H
#define RX_COMMON_H

#include <stdarg.h>

/* The one warn-unused-result marker (fallible actions and constructors). */
#define RX_WUR __attribute__((warn_unused_result))

/* A UUID in text form: 36 characters and the NUL. */
#define RX_UUID_LEN 37

/* The one error struct: a sentence saying what went wrong, for a person. */
#define RX_ERR_LEN 512
struct rx_error {
    char text[RX_ERR_LEN];
};

/*
 * Fill `err` (may be NULL) with a printf-style sentence, cut to fit. Returns
 * `code`, so callers can write `return rx_error_set(err, -EINVAL, "...")`.
 */
int rx_error_set(struct rx_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* rx_error_set for a caller that is itself printf-like: `ap` is its va_list. */
int rx_error_setv(struct rx_error *err, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
