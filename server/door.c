/*
 * door - what every protocol's routes share. See door.h.
 */
#include "server/door.h"

#include <errno.h>
#include <stdlib.h>

bool door_is_stopping(const struct door *d)
{
    return __atomic_load_n(&d->stopping, __ATOMIC_ACQUIRE);
}

long long door_parse_count(const char *v)
{
    char *end;
    long long n;

    if (!v || !*v)
        return -1;
    errno = 0;
    n = strtoll(v, &end, 10);
    return *end || errno || n < 0 ? -1 : n;
}
