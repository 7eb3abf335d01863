/*
 * cidr - an address block ("10.0.0.0/8", "::1/128", "127.0.0.1"): parsed
 * once, then asked whether a peer's address is in it. What
 * auth.trusted_proxies is made of (SPEC 4.4).
 *
 * Part of base/. Depends on the C library and the socket headers only.
 * Ownership: a struct cidr is a value; nothing is allocated.
 */
#ifndef CIDR_H
#define CIDR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct cidr {
    int family;       /* AF_INET or AF_INET6 */
    uint8_t addr[16]; /* network order, the first 4 bytes for IPv4 */
    int bits;         /* the prefix length */
};

/* `text` ("ADDR" or "ADDR/BITS") into *out. 0 or -EINVAL. */
int cidr_parse(const char *text, struct cidr *out);
/*
 * Is `sa` in the block? An IPv4 address seen as IPv6 (::ffff:a.b.c.d) is
 * matched as the IPv4 address it is.
 */
bool cidr_contains(const struct cidr *c, const struct sockaddr *sa);

#endif
