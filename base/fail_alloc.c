/*
 * fail_alloc - see fail_alloc.h.
 *
 * The wraps are ld's: with -Wl,--wrap=malloc every reference to malloc in
 * the objects linked becomes one to __wrap_malloc, and __real_malloc is the
 * C library's (the sanitizer's, in a sanitizer build). Shared libraries keep
 * their own references, hence jansson's allocator set apart.
 */
#include "base/fail_alloc.h"

#ifdef RX_FAIL_ALLOC

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_asprintf(char **out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static atomic_bool armed;
static atomic_long counted;
static atomic_bool fired;
static long target; /* N; written before armed is set */

/* Count one allocation; true when it is the one to fail. */
static bool fail_now(void)
{
    if (!atomic_load_explicit(&armed, memory_order_acquire))
        return false;
    if (atomic_fetch_add(&counted, 1) + 1 != target)
        return false;
    atomic_store(&fired, true);
    errno = ENOMEM;
    return true;
}

void *__wrap_malloc(size_t n)
{
    return fail_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return fail_now() ? NULL : __real_calloc(n, size);
}

/* realloc(p, 0) frees: not an allocation that can fail. */
void *__wrap_realloc(void *p, size_t n)
{
    return n && fail_now() ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    return fail_now() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    return fail_now() ? NULL : __real_strndup(s, n);
}

/* As glibc's on failure: -1, and *out undefined (ours: untouched). */
int __wrap_asprintf(char **out, const char *fmt, ...)
{
    va_list ap;
    int rc;

    if (fail_now())
        return -1;
    va_start(ap, fmt);
    rc = vasprintf(out, fmt, ap);
    va_end(ap);
    return rc;
}

static void *json_counted_malloc(size_t n)
{
    return __wrap_malloc(n);
}

/* N from RX_FAIL_ALLOC, or -1 when it is unset or not a count. */
static long wanted(void)
{
    const char *v = getenv("RX_FAIL_ALLOC");
    char *end;
    long n;

    if (!v || !*v)
        return -1;
    n = strtol(v, &end, 10);
    return *end || n < 0 ? -1 : n;
}

/*
 * jansson's allocator is a global of its own, read without a lock: set it
 * before main starts any thread, not at fail_alloc_arm. Its free stays
 * free: what it frees may predate the switch.
 */
__attribute__((constructor)) static void fail_alloc_install(void)
{
    if (wanted() >= 0)
        json_set_alloc_funcs(json_counted_malloc, free);
}

void fail_alloc_arm(void)
{
    long n = wanted();

    if (n < 0)
        return;
    target = n;
    atomic_store_explicit(&armed, true, memory_order_release);
}

long fail_alloc_disarm(bool *failed)
{
    if (!atomic_exchange(&armed, false))
        return -1;
    if (failed)
        *failed = atomic_load(&fired);
    return atomic_load(&counted);
}

#else /* the switch is only in the sanitizer build */

void fail_alloc_arm(void)
{
}

long fail_alloc_disarm(bool *failed)
{
    (void)failed;
    return -1;
}

#endif
