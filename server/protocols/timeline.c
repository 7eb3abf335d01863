/*
 * timeline - a session's records in conversation order. See timeline.h.
 */
#include "server/protocols/timeline.h"

#include <stdint.h>

struct timeline_pos timeline_end(const struct rx_state *st)
{
    return (struct timeline_pos){st->user.len, st->assistant.len, st->tools.len};
}

bool timeline_next(const struct rx_state *st, struct timeline_pos *pos,
                   struct timeline_item *it)
{
    const struct rx_message *u =
        pos->user < st->user.len ? &st->user.items[pos->user] : NULL;
    const struct rx_message *a =
        pos->assistant < st->assistant.len ? &st->assistant.items[pos->assistant] : NULL;
    const struct rx_tool_call *t =
        pos->tools < st->tools.len ? &st->tools.items[pos->tools] : NULL;
    int64_t tu = u ? u->received_at : INT64_MAX, ta = a ? a->received_at : INT64_MAX;
    int64_t tt = t ? t->called_at : INT64_MAX;
    size_t n = 1;

    if (!u && !a && !t)
        return false;
    if (u && tu <= ta && tu <= tt) {
        *it = (struct timeline_item){TIMELINE_USER, u, NULL, 0};
        pos->user++;
        return true;
    }
    if (a && ta <= tt) {
        *it = (struct timeline_item){TIMELINE_ASSISTANT, a, NULL, 0};
        pos->assistant++;
        return true;
    }
    while (pos->tools + n < st->tools.len &&
           st->tools.items[pos->tools + n].called_at == tt)
        n++;
    *it = (struct timeline_item){TIMELINE_TOOLS, NULL, t, n};
    pos->tools += n;
    return true;
}
