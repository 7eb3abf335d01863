/*
 * rx_common - see rx_common.h.
 */
#include "state_machine/rx_common.h"

#include <stdio.h>

int rx_error_setv(struct rx_error *err, int code, const char *fmt, va_list ap)
{
    if (err)
        vsnprintf(err->text, sizeof(err->text), fmt, ap);
    return code;
}

int rx_error_set(struct rx_error *err, int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    rx_error_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}
