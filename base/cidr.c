/*
 * cidr - address blocks. See cidr.h.
 */
#include "base/cidr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cidr_parse(const char *text, struct cidr *out)
{
    char addr[INET6_ADDRSTRLEN + 1];
    const char *slash = strchr(text, '/');
    size_t n = slash ? (size_t)(slash - text) : strlen(text);
    int max;

    if (!n || n >= sizeof(addr))
        return -EINVAL;
    memcpy(addr, text, n);
    addr[n] = '\0';
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, addr, out->addr) == 1)
        out->family = AF_INET, max = 32;
    else if (inet_pton(AF_INET6, addr, out->addr) == 1)
        out->family = AF_INET6, max = 128;
    else
        return -EINVAL;
    out->bits = max;
    if (slash) {
        char *end;
        long bits = strtol(slash + 1, &end, 10);

        if (end == slash + 1 || *end || bits < 0 || bits > max)
            return -EINVAL;
        out->bits = (int)bits;
    }
    return 0;
}

/* Do the first `bits` bits of a and b agree? */
static bool prefix_equal(const uint8_t *a, const uint8_t *b, int bits)
{
    int whole = bits / 8, rest = bits % 8;

    if (memcmp(a, b, (size_t)whole))
        return false;
    return !rest || !((a[whole] ^ b[whole]) & (uint8_t)(0xff << (8 - rest)));
}

bool cidr_contains(const struct cidr *c, const struct sockaddr *sa)
{
    static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const uint8_t *a;

    if (!sa)
        return false;
    if (sa->sa_family == AF_INET) {
        a = (const uint8_t *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
        return c->family == AF_INET && prefix_equal(a, c->addr, c->bits);
    }
    if (sa->sa_family != AF_INET6)
        return false;
    a = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
    if (c->family == AF_INET6)
        return prefix_equal(a, c->addr, c->bits);
    return !memcmp(a, v4_mapped, sizeof(v4_mapped)) &&
           prefix_equal(a + 12, c->addr, c->bits);
}
