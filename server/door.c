/*
 * door - what every protocol's routes share. See door.h.
 */
#include "server/door.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

const char *door_local_origin(struct MHD_Connection *conn)
{
    static const char *const hosts[] = {"http://localhost",
                                        "https://localhost",
                                        "http://127.0.0.1",
                                        "https://127.0.0.1",
                                        "http://[::1]",
                                        "https://[::1]",
                                        NULL};
    const char *o = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");

    for (size_t i = 0; o && hosts[i]; i++) {
        size_t n = strlen(hosts[i]);

        if (!strncasecmp(o, hosts[i], n) &&
            (!o[n] || (o[n] == ':' && o[n + 1] &&
                       strspn(o + n + 1, "0123456789") == strlen(o + n + 1))))
            return o;
    }
    return NULL;
}
