/*
 * itest_scale - what the scale suites share (SPEC 6.2, issue 29): a store of
 * many finished chats filled by bench/scale_fill (itest_fill) with the list
 * of their ids, and the requests they all make.
 *
 * Test code only. Depends on tests/integration/itest.h.
 * Ownership: struct itest_scale is caller-allocated; itest_scale_fill fills
 * it and itest_scale_remove removes its files and frees its ids. JSON handed
 * out is a NEW reference.
 */
#ifndef ITEST_SCALE_H
#define ITEST_SCALE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "tests/integration/itest.h"

struct itest_scale {
    char db[64];       /* the SQLite file (on PostgreSQL: what it stands for) */
    char ids_path[80]; /* scale_fill --ids */
    char **ids;        /* session i's id, i = 0 .. n-1, in the order filled */
    long n;
};

/*
 * A fresh store under /tmp filled with scale_fill `args` (NULL-terminated:
 * --sessions and the rest; --ids is added) and `want` ids read back. 0, or
 * -1 with nothing left behind.
 */
int itest_scale_fill(struct itest_scale *x, const char *const *args, long want);
/* Remove the store and the ids file, free the ids. */
void itest_scale_remove(struct itest_scale *x);

/*
 * `method` on s->base + path with a body and headers (each may be NULL),
 * waiting at most timeout_ms: the status (-1: no answer), and the answer as
 * JSON in *out (NEW; may be NULL) when out is not NULL.
 */
long itest_scale_call(const struct itest_server *s, const char *method, const char *path,
                      const char *body, const char *const *headers, long timeout_ms,
                      json_t **out);
/* POST a user message `text` with id `mid` to session `sid`: the status. */
long itest_scale_say(const struct itest_server *s, const char *sid, const char *mid,
                     const char *text);
/* The state has *(size_t *)arg answers or more, all complete, none owed. */
bool itest_scale_answered(json_t *state, void *arg);
/* Under valgrind or ASan: fewer rounds. */
bool itest_scale_slow_build(void);

#endif
