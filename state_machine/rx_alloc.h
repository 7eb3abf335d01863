/*
 * rx_alloc - the one allocator of the pure layer.
 *
 * Every allocation in state_machine/ goes through jansson's allocator
 * (json_get_alloc_funcs), so a test that installs failing functions with
 * json_set_alloc_funcs reaches our records and jansson's values alike
 * (jansson test_chaos.c). There is no realloc in jansson's table, hence the
 * explicit old size.
 * Depends on jansson and the C library only.
 * Ownership: what rx_malloc, rx_realloc and rx_str(n)dup return is the
 * caller's, to free with rx_free (the allocator a test installed, if any).
 */
#ifndef RX_ALLOC_H
#define RX_ALLOC_H

#include <stddef.h>
#include <string.h>

#include <jansson.h>

static inline void *rx_malloc(size_t n)
{
    json_malloc_t m;
    json_free_t f;

    json_get_alloc_funcs(&m, &f);
    return m(n ? n : 1);
}

static inline void rx_free(void *p)
{
    json_malloc_t m;
    json_free_t f;

    if (!p)
        return;
    json_get_alloc_funcs(&m, &f);
    f(p);
}

/* Grow `p` from `old` to `n` bytes; NULL (p untouched) on failure. */
static inline void *rx_realloc(void *p, size_t old, size_t n)
{
    void *q = rx_malloc(n);

    if (!q)
        return NULL;
    if (p) {
        memcpy(q, p, old < n ? old : n);
        rx_free(p);
    }
    return q;
}

static inline char *rx_strndup(const char *s, size_t n)
{
    char *d = rx_malloc(n + 1);

    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static inline char *rx_strdup(const char *s)
{
    return rx_strndup(s, strlen(s));
}

#endif
