/*
 * rx_common - see rx_common.h.
 */
#include "state_machine/rx_common.h"

#include <stdarg.h>
#include <stdio.h>

int rx_error_set(struct rx_error *err, int code, const char *fmt, ...)
{
    va_list ap;

    if (!err)
        return code;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof(err->text), fmt, ap);
    va_end(ap);
    return code;
}
