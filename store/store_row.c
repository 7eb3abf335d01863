/*
 * store_row - what a session's row keeps of its state (SPEC 6.2), computed
 * alike by both backends for the writes that do not come through
 * store_write: import (its inputs folded), fork (the
 * state at its seq) and the upgrade of an older log. Declared in
 * store/store_backend.h (struct store_row); private to store/.
 */
#include "store/store.h"
#include "store/store_backend.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "state_machine/rx_effects.h"
#include "state_machine/rx_state.h"

int store__row_of(const struct rx_state *s, struct store_row *out)
{
    const char *t;
    size_t n = rx_state_title(s, &t);
    char *title = n ? strndup(t, n) : NULL;

    if (n && !title)
        return -ENOMEM;
    out->messages = (int64_t)(s->user.len + s->assistant.len);
    out->busy = rx_effects_any(s);
    out->title = title;
    return 0;
}

/*
 * Folded input by input, even with a snapshot at hand: decoding a snapshot
 * parses it into one JSON tree, some 17 times its text (a 15 MB import
 * grew the server by 200 MB more); a fold holds one state and one input.
 */
int store__row_of_log(struct store *st, const char *sid, const struct store_text *inputs,
                      size_t n, const struct store_text *snapshot, struct store_row *out)
{
    struct rx_state s;
    int err;

    (void)snapshot;
    if ((err = rx_state_init(&s))) {
        store__set_error(st, "out of memory");
        return err;
    }
    for (size_t i = 0; !err && i < n; i++)
        err = store__fold_one(st, sid, (int64_t)i + 1, inputs[i].data, inputs[i].len, &s);
    if (!err && (err = store__row_of(&s, out)))
        store__set_error(st, "out of memory");
    rx_state_release(&s);
    return err;
}

void store__row_release(struct store_row *r)
{
    free(r->title);
    r->title = NULL;
}
