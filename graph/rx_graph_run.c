/*
 * rx_graph_run - rx_graph_invoke: load or start, then supersteps until
 * nothing is left to run, the recursion limit, or an interrupt. Each step
 * runs its tasks (rx_graph_task.c), merges their updates through the
 * reducers in a fixed order, routes (rx_graph_route.c), checkpoints and
 * streams. See rx_graph.h, and rx_graph_internal.h for struct rx_graph_run.
 */
#include "graph/rx_graph.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "graph/rx_checkpoint.h"
#include "graph/rx_graph_internal.h"
#include "graph/rx_reducer.h"
#include "state_machine/rx_alloc.h"

/*
 * Store the run as the thread's newest checkpoint (nothing without a
 * checkpointer); on an interrupt, with the interrupts and `pending`.
 */
static int checkpoint(struct rx_graph_run *r, json_t *interrupts)
{
    const struct rx_graph_config *c = r->cfg;
    json_t *cp;
    int rc;

    if (!c || !c->checkpointer || !c->thread_id)
        return 0;
    cp = json_pack("{s:i,s:s?,s:O,s:O,s:O}", "step", r->step, "parent",
                   r->last_id[0] ? r->last_id : NULL, "state", r->state, "next", r->next,
                   "joins", r->joins);
    if (!cp)
        return -ENOMEM;
    if (interrupts && (json_object_set(cp, "interrupts", interrupts) ||
                       json_object_set(cp, "pending", r->pending))) {
        json_decref(cp);
        return -ENOMEM;
    }
    rc = rx_checkpoint_put(c->checkpointer, c->thread_id, cp, r->last_id);
    json_decref(cp);
    if (rc)
        return rx_error_set(r->err, rc, "thread '%s': cannot store a checkpoint (%s)",
                            c->thread_id, strerror(-rc));
    return 0;
}

/* The step callback, if any; non-zero from it stops the invoke. */
static int stream(struct rx_graph_run *r)
{
    if (!r->cfg || !r->cfg->on_step)
        return 0;
    if (r->cfg->on_step(r->cfg->on_step_ctx, r->step, r->updates, r->state))
        return rx_error_set(r->err, -ECANCELED,
                            "stopped by the stream callback at step %d", r->step);
    return 0;
}

/*
 * A task per `next` entry, in `next` order. On resume, a task that finished
 * before the interrupt takes its result from `pending` instead of running
 * again; the others get the answer.
 */
static int make_tasks(struct rx_graph_run *r, struct rx_graph_task **out, size_t *nout)
{
    size_t n = json_array_size(r->next), i;
    struct rx_graph_task *t;
    int sends = 0;
    json_t *e, *p;

    t = rx_malloc((n ? n : 1) * sizeof(*t));
    if (!t)
        return -ENOMEM;
    memset(t, 0, (n ? n : 1) * sizeof(*t));
    json_array_foreach(r->next, i, e)
    {
        t[i].g = r->g;
        t[i].node = rx_graph_lookup(r->g, json_string_value(json_object_get(e, "node")));
        if (t[i].node < 0) {
            rx_graph_tasks_release(t, i);
            return rx_error_set(r->err, -EINVAL, "node '%s': not in this graph",
                                json_string_value(json_object_get(e, "node")));
        }
        t[i].arg = json_object_get(e, "arg");
        t[i].send = t[i].arg ? sends++ : -1;
        if (!t[i].arg)
            t[i].arg = r->state;
        t[i].route.items = json_array();
        if (!t[i].route.items) {
            rx_graph_tasks_release(t, i + 1);
            return -ENOMEM;
        }
        p = r->pending ? json_array_get(r->pending, i) : NULL;
        if (json_is_object(p)) {
            /* Finished before an interrupt: keep its result, do not rerun. */
            t[i].done = true;
            t[i].update = json_incref(json_object_get(p, "update"));
            if (json_array_extend(t[i].route.items, json_object_get(p, "route"))) {
                rx_graph_tasks_release(t, i + 1);
                return -ENOMEM;
            }
        } else if (r->pending) {
            t[i].resume = r->cfg ? r->cfg->resume : NULL;
        }
    }
    *out = t;
    *nout = n;
    return 0;
}

/* The result of every task, in `next` order, for a checkpoint taken on an interrupt. */
static int save_interrupt(struct rx_graph_run *r, struct rx_graph_task *t, size_t n,
                          json_t **interrupts)
{
    json_t *ints = json_array(), *pend = json_array();
    size_t i;

    if (!ints || !pend)
        goto err_nomem;
    for (i = 0; i < n; i++) {
        if (t[i].interrupt) {
            if (json_array_append_new(ints, json_pack("{s:s,s:O}", "node",
                                                      rx_graph_task_node(&t[i]), "value",
                                                      t[i].interrupt)) ||
                json_array_append(pend, json_null()))
                goto err_nomem;
            continue;
        }
        if (json_array_append_new(pend, json_pack("{s:O?,s:O}", "update", t[i].update,
                                                  "route", t[i].route.items)))
            goto err_nomem;
    }
    json_decref(r->pending);
    r->pending = pend;
    *interrupts = ints;
    return 0;

err_nomem:
    json_decref(ints);
    json_decref(pend);
    return -ENOMEM;
}

/* The concurrent-write rule, then every update through the reducers, in order. */
static int merge_step(struct rx_graph_run *r, struct rx_graph_task *t, size_t n,
                      json_t **merged)
{
    json_t *writers = json_object(), *st = json_copy(r->state), *w;
    struct rx_error rerr = {{0}};
    const char *key, *who;
    json_t *v;
    size_t i;
    int rc = -ENOMEM;

    if (!writers || !st)
        goto out_release;
    for (i = 0; i < n; i++) {
        if (!t[i].update)
            continue;
        who = rx_graph_task_node(&t[i]);
        if (!json_is_object(t[i].update)) {
            rc = rx_error_set(r->err, -EINVAL, "node '%s': the update is not an object",
                              who);
            goto out_release;
        }
        json_object_foreach(t[i].update, key, v)
        {
            if (!rx_reducer_is_last_value(r->g->schema, r->g->nschema, key))
                continue;
            w = json_object_get(writers, key);
            if (w) {
                rc = rx_error_set(
                    r->err, -EINVAL,
                    "key '%s': written by '%s' and '%s' in one step, but it keeps "
                    "only the last value (give it a reducer)",
                    key, json_string_value(w), who);
                goto out_release;
            }
            if (json_object_set_new(writers, key, json_string(who)))
                goto out_release;
        }
        rc =
            rx_reducer_merge(st, t[i].update, r->g->schema, r->g->nschema, r->ids, &rerr);
        if (rc) {
            rx_error_set(r->err, rc, "node '%s': %s", who, rerr.text);
            goto out_release;
        }
        if (json_array_append_new(
                r->updates, json_pack("{s:s,s:O}", "node", who, "update", t[i].update))) {
            rc = -ENOMEM;
            goto out_release;
        }
    }
    *merged = st;
    st = NULL;
    rc = 0;
out_release:
    json_decref(st);
    json_decref(writers);
    return rc;
}

/*
 * Run `next`, merge, route. On an interrupt, *interrupts is set (a new
 * reference), the step is checkpointed as paused and the state is left as it was.
 */
static int superstep(struct rx_graph_run *r, json_t **interrupts)
{
    struct rx_graph_task *t = NULL;
    json_t *next = NULL, *merged = NULL;
    size_t n = 0, i;
    int rc;

    rc = make_tasks(r, &t, &n);
    if (rc)
        return rc;
    rx_graph_tasks_execute(t, n);
    /* In `next` order for the checkpoint; then sorted for a deterministic merge. */
    for (i = 0; i < n; i++)
        if (t[i].interrupt)
            break;
    if (i < n) {
        rc = save_interrupt(r, t, n, interrupts);
        if (!rc)
            rc = checkpoint(r, *interrupts);
        goto out_release_tasks;
    }
    rx_graph_tasks_sort(t, n);
    for (i = 0; i < n; i++) {
        if (!t[i].rc)
            continue;
        rc = rx_error_set(r->err, t[i].rc, "node '%s' failed: %s",
                          rx_graph_task_node(&t[i]),
                          t[i].error[0] ? t[i].error : strerror(-t[i].rc));
        if (rc >= 0)
            rc = -EIO; /* a node returned a positive value */
        goto out_release_tasks;
    }
    json_array_clear(r->updates);
    rc = merge_step(r, t, n, &merged);
    if (rc)
        goto out_release_tasks;
    json_decref(r->state);
    r->state = merged;
    json_decref(r->pending);
    r->pending = NULL;

    rc = -ENOMEM;
    next = json_array();
    if (!next)
        goto out_release_tasks;
    for (i = 0; i < n; i++) {
        rc = rx_graph_route_into(r, next, t[i].route.items, NULL);
        if (rc)
            goto out_release_next;
        /* Each node's edges are followed once, whatever its number of tasks. */
        if (i && t[i - 1].node == t[i].node)
            continue;
        rc = rx_graph_route_follow(r, next, t[i].node);
        if (rc)
            goto out_release_next;
    }
    rc = rx_graph_route_fire_joins(r, next);
    if (rc)
        goto out_release_next;
    json_decref(r->next);
    r->next = next;
    next = NULL;
    r->step++;
    r->steps++;
    rc = checkpoint(r, NULL);
    if (!rc)
        rc = stream(r);
out_release_next:
    json_decref(next);
out_release_tasks:
    rx_graph_tasks_release(t, n);
    return rc;
}

/* No join has seen any of its sources. */
static int joins_init(struct rx_graph_run *r)
{
    size_t i;

    json_decref(r->joins);
    r->joins = json_array();
    if (!r->joins)
        return -ENOMEM;
    for (i = 0; i < r->g->njoins; i++)
        if (json_array_append_new(r->joins, json_object()))
            return -ENOMEM;
    return 0;
}

/* Start from a checkpoint, or from nothing. */
static int load(struct rx_graph_run *r, bool *continuing)
{
    const struct rx_graph_config *c = r->cfg;
    json_t *cp = NULL;
    int rc;

    *continuing = false;
    r->state = json_object();
    r->next = json_array();
    r->updates = json_array();
    if (!r->state || !r->next || !r->updates || joins_init(r))
        return -ENOMEM;
    if (!c || !c->checkpointer || !c->thread_id)
        return 0;
    rc = rx_checkpoint_get(c->checkpointer, c->thread_id, c->checkpoint_id, &cp);
    if (rc == -ENOENT && !c->checkpoint_id)
        return 0; /* a new thread */
    if (rc)
        return rx_error_set(r->err, rc, "thread '%s': no checkpoint '%s'", c->thread_id,
                            c->checkpoint_id ? c->checkpoint_id : "(newest)");
    if (!json_is_object(json_object_get(cp, "state")) ||
        !json_is_array(json_object_get(cp, "next")) ||
        json_array_size(json_object_get(cp, "joins")) != r->g->njoins) {
        json_decref(cp);
        return rx_error_set(r->err, -EINVAL,
                            "thread '%s': checkpoint does not fit this graph",
                            c->thread_id);
    }
    json_decref(r->state);
    json_decref(r->next);
    json_decref(r->joins);
    r->state = json_incref(json_object_get(cp, "state"));
    r->next = json_incref(json_object_get(cp, "next"));
    r->joins = json_incref(json_object_get(cp, "joins"));
    if (json_object_get(cp, "interrupts"))
        r->pending = json_incref(json_object_get(cp, "pending"));
    r->step = (int)json_integer_value(json_object_get(cp, "step"));
    snprintf(r->last_id, sizeof(r->last_id), "%s",
             json_string_value(json_object_get(cp, "id")));
    json_decref(cp);
    *continuing = true;
    return 0;
}

/* The input step: merge the input, then follow START. */
static int start(struct rx_graph_run *r, json_t *input)
{
    struct rx_error rerr = {{0}};
    int rc;

    json_array_clear(r->next);
    json_decref(r->pending);
    r->pending = NULL;
    rc = joins_init(r);
    if (rc)
        return rc;
    rc = rx_reducer_merge(r->state, input, r->g->schema, r->g->nschema, r->ids, &rerr);
    if (rc)
        return rx_error_set(r->err, rc, "input: %s", rerr.text);
    rc = rx_graph_route_follow(r, r->next, RX_GRAPH_IDX_START);
    if (rc)
        return rc;
    r->step = r->last_id[0] ? r->step + 1 : 0;
    if (json_array_append_new(
            r->updates, json_pack("{s:s,s:O}", "node", RX_GRAPH_START, "update", input)))
        return -ENOMEM;
    rc = checkpoint(r, NULL);
    if (!rc)
        rc = stream(r);
    return rc;
}

int rx_graph_invoke(const struct rx_graph *g, json_t *input,
                    const struct rx_graph_config *cfg, struct rx_graph_result *res,
                    struct rx_error *err)
{
    struct rx_graph_run r = {0};
    json_t *interrupts = NULL, *loaded;
    bool continuing;
    int rc, limit = cfg && cfg->recursion_limit > 0 ? cfg->recursion_limit
                                                    : RX_GRAPH_RECURSION_LIMIT;

    if (!g->compiled)
        return rx_error_set(err, -EINVAL, "graph is not compiled");
    if (err)
        err->text[0] = '\0';
    r.g = g;
    r.cfg = cfg;
    r.err = err;
    r.ids = g->has_ids ? &g->ids : NULL;
    rc = load(&r, &continuing);
    if (rc)
        goto out_release;
    /* A checkpoint's state is shared with the store's copy: merge into our own. */
    loaded = r.state;
    r.state = json_copy(loaded);
    json_decref(loaded);
    if (!r.state) {
        rc = -ENOMEM;
        goto out_release;
    }
    if (cfg && cfg->resume && !r.pending) {
        rc = rx_error_set(err, -EINVAL, "thread '%s': no interrupt to resume",
                          cfg->thread_id ? cfg->thread_id : "");
        goto out_release;
    }
    if (input && !json_is_null(input) && !(cfg && cfg->resume)) {
        rc = start(&r, input);
        if (rc)
            goto out_release;
    } else if (!continuing) {
        rc = rx_error_set(err, -EINVAL, "no input and no checkpoint to continue from");
        goto out_release;
    }
    while (json_array_size(r.next)) {
        if (r.steps >= limit) {
            rc = rx_error_set(
                err, -ELOOP,
                "recursion limit of %d steps reached without hitting END "
                "(next: '%s')",
                limit,
                json_string_value(json_object_get(json_array_get(r.next, 0), "node")));
            goto out_release;
        }
        rc = superstep(&r, &interrupts);
        if (rc || interrupts)
            break;
    }
    if (rc)
        goto out_release;
    res->state = r.state;
    r.state = NULL;
    res->interrupts = interrupts;
    interrupts = NULL;
    res->steps = r.steps;
    memcpy(res->checkpoint_id, r.last_id, sizeof(r.last_id));
out_release:
    if (rc == -ENOMEM && err && !err->text[0])
        rx_error_set(err, rc, "out of memory");
    json_decref(interrupts);
    json_decref(r.state);
    json_decref(r.next);
    json_decref(r.joins);
    json_decref(r.pending);
    json_decref(r.updates);
    return rc;
}

void rx_graph_result_release(struct rx_graph_result *res)
{
    json_decref(res->state);
    json_decref(res->interrupts);
    res->state = NULL;
    res->interrupts = NULL;
}
