/*
 * session_recover - a session read back from the log, made safe to act on
 * (SPEC 3.7, docs/ARCHITECTURE.md "Effects that survive a crash"): a tool
 * call that started (toolkit-start-call is in the log) and has no result may
 * have acted before the process died or the node lost the session. It runs
 * again by itself, under the same idempotency key, only when its tool is
 * safe to repeat; any other is marked in doubt and waits for a person
 * (user-review-tool-call: retry, reject or resolve).
 *
 * Marking goes through the pipeline like any input (logged, published), one
 * input a call; while it does, `recovering` keeps every reconcile off, so a
 * call cannot start between two marks. A call whose tool is not known yet
 * (its MCP server still starting: at start-up the busy sessions recover
 * before the MCP servers have listed their tools) makes the recovery wait:
 * the housekeeping tries again every second (session_table_reconcile_due),
 * for at most SESSION_RECOVER_WAIT_MS, after which the unknown tool counts
 * as not safe to repeat. See session_internal.h.
 */
#include "server/session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/now.h"
#include "effects/log.h"
#include "effects/toolkit.h"
#include "server/session_internal.h"

/* The ids of the calls to mark, copied (the state may change once unlocked). */
struct doubt {
    char **ids;
    size_t n;
};

/* Lock held. 0, -EAGAIN (a tool to wait for) or -ENOMEM. */
static int find_in_doubt(struct session *s, struct doubt *d)
{
    const struct rx_tool_call_list *l = &s->state.tools;
    const struct toolkit *tk = s->table->env.tools;
    bool waited = now_mono_ms() - s->recover_since >= SESSION_RECOVER_WAIT_MS;

    for (size_t i = l->settled; i < l->len; i++) {
        const struct rx_tool_call *c = &l->items[i];
        char **v;

        if (!rx_tool_call_is_running(c))
            continue;
        if (!waited && !toolkit_knows(tk, c->name))
            return -EAGAIN;
        if (toolkit_is_idempotent(tk, c->name))
            continue;
        if (!(v = realloc(d->ids, (d->n + 1) * sizeof(*v))))
            return -ENOMEM;
        d->ids = v;
        if (!(d->ids[d->n] = strdup(c->id)))
            return -ENOMEM;
        d->n++;
    }
    return 0;
}

static void mark(struct session *s, const char *id)
{
    struct rx_input in = {.type = RX_IN_TOOLKIT_CALL_IN_DOUBT,
                          .tool_call_id = (char *)id};
    struct submit_result res;
    int err = session_submit(s, &in, NULL, &res);

    in.tool_call_id = NULL; /* borrowed */
    rx_input_release(&in);
    if (err || res.verdict == RX_REJECTED)
        log_warn("session %s: tool call %s not marked in doubt: %s", s->id, id,
                 err ? strerror(-err) : rx_reason_name(res.reason));
    else
        log_warn("session %s: tool call %s was interrupted after it started and may have "
                 "acted: in doubt, waiting for a person",
                 s->id, id);
}

void session_recover(struct session *s)
{
    struct doubt d = {NULL, 0};
    int err;

    pthread_mutex_lock(&s->lock);
    if (!s->recovering) {
        s->recovering = true;
        s->recover_since = now_mono_ms();
    }
    s->recover_due = false;
    err = s->follower ? 0 : find_in_doubt(s, &d);
    if (err == -EAGAIN) {
        s->recover_due = true;
        __atomic_store_n(&s->table->reconcile_due, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s->lock);
    if (err == -EAGAIN) {
        log_info("session %s: recovery waits for the tools of its started calls", s->id);
        goto out_free;
    }
    if (err) {
        /* Reconciling now could run a call that may have acted: its effects
           wait until it is read again (evicted, touched). */
        log_error("session %s: out of memory looking for calls in doubt; its effects "
                  "wait",
                  s->id);
        goto out_free;
    }
    for (size_t i = 0; i < d.n; i++)
        mark(s, d.ids[i]);
    pthread_mutex_lock(&s->lock);
    s->recovering = false;
    session__reconcile(s, NULL);
    pthread_mutex_unlock(&s->lock);
out_free:
    for (size_t i = 0; i < d.n; i++)
        free(d.ids[i]);
    free(d.ids);
}
