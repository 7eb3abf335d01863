/*
 * rx_graph_run - rx_graph_invoke: load or start, then supersteps until
 * nothing is left to run, the recursion limit, or a pause (an interrupt()
 * or a static breakpoint). Each step runs its tasks (rx_graph_task.c),
 * merges their updates through the reducers in a fixed order, routes
 * (rx_graph_route.c), checkpoints and streams. See rx_graph.h, and
 * rx_graph_internal.h for struct rx_graph_run and what rx_graph_state.c
 * shares from here.
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

static int stopped(struct rx_graph_run *r)
{
    return rx_error_set(r->err, -ECANCELED, "stopped by the stream callback at step %d",
                        r->step);
}

/*
 * The step callback, then the stream modes (t[0..n) the step's tasks in
 * merge order; none for the input step). Non-zero from either stops the
 * invoke.
 */
static int stream(struct rx_graph_run *r, struct rx_graph_task *t, size_t n)
{
    int rc;

    if (r->cfg && r->cfg->on_step &&
        r->cfg->on_step(r->cfg->on_step_ctx, r->step, r->updates, r->state))
        return stopped(r);
    rc = t ? rx_graph_stream_step(r, t, n) : rx_graph_stream_start(r);
    return rc == -ECANCELED ? stopped(r) : rc;
}

/* The caller's new answer for a paused task: by its interrupt id, or the one answer. */
static json_t *fresh_answer(const struct rx_graph_config *cfg, const char *id)
{
    if (!cfg)
        return NULL;
    if (cfg->resume_map)
        return json_object_get(cfg->resume_map, id);
    return cfg->resume;
}

/*
 * A task per `next` entry, in `next` order. After a pause, a task that had
 * finished takes its result from `pending` instead of running again; a
 * paused one gets its earlier answers and, with `answer`, the caller's new
 * one.
 */
int rx_graph_run_make_tasks(struct rx_graph_run *r, bool answer,
                            struct rx_graph_task **out, size_t *nout)
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
        t[i].run = r;
        t[i].step = r->step + 1;
        t[i].node = rx_graph_lookup(r->g, json_string_value(json_object_get(e, "node")));
        if (t[i].node < 0) {
            rx_graph_tasks_release(t, i);
            return rx_error_set(r->err, -EINVAL, "node '%s': not in this graph",
                                json_string_value(json_object_get(e, "node")));
        }
        t[i].index = i;
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
        if (!p && answer && r->writes)
            p = json_object_get(r->writes,
                                rx_graph_task_id(&t[i])); /* finished before a crash */
        if (json_object_get(p, "route")) {
            /* Finished before the pause or crash: keep its result, do not rerun. */
            t[i].done = true;
            t[i].update = json_incref(json_object_get(p, "update"));
            if (json_is_null(t[i].update)) {
                json_decref(t[i].update);
                t[i].update = NULL;
            }
            if (json_array_extend(t[i].route.items, json_object_get(p, "route"))) {
                rx_graph_tasks_release(t, i + 1);
                return -ENOMEM;
            }
        } else if (p) {
            t[i].answers = json_object_get(p, "answers");
            t[i].interrupt = json_incref(json_object_get(p, "interrupt"));
            if (answer) {
                json_decref(t[i].interrupt);
                t[i].interrupt = NULL;
                t[i].fresh = fresh_answer(r->cfg, rx_graph_task_id(&t[i]));
            }
        }
    }
    *out = t;
    *nout = n;
    return 0;
}

/*
 * A paused step: per `next` entry the finished result, or the answers the
 * paused task has used and what it paused with; *interrupts lists the
 * pauses as [{"id","node","value"}] in merge order.
 */
static int save_pause(struct rx_graph_run *r, struct rx_graph_task *t, size_t n,
                      json_t **interrupts)
{
    json_t *ints = json_array(), *pend = json_array(), *answers, *e;
    size_t i;

    for (i = 0; pend && i < n; i++)
        if (json_array_append(pend, json_null()))
            goto err_nomem;
    if (!ints || !pend)
        goto err_nomem;
    for (i = 0; i < n; i++) {
        if (!t[i].interrupt) {
            e = json_pack("{s:O?,s:O}", "update", t[i].update, "route", t[i].route.items);
        } else {
            answers = t[i].answers ? json_copy(t[i].answers) : json_array();
            if (answers && t[i].fresh_used && json_array_append(answers, t[i].fresh)) {
                json_decref(answers);
                goto err_nomem;
            }
            e = json_pack("{s:o,s:O}", "answers", answers, "interrupt", t[i].interrupt);
            if (json_array_append_new(ints, json_pack("{s:s,s:s,s:O}", "id",
                                                      rx_graph_task_id(&t[i]), "node",
                                                      rx_graph_task_node(&t[i]), "value",
                                                      t[i].interrupt)))
                goto err_nomem;
        }
        if (json_array_set_new(pend, t[i].index, e))
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
int rx_graph_run_merge(struct rx_graph_run *r, struct rx_graph_task *t, size_t n,
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
        if (r->updates &&
            json_array_append_new(
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

/* The names of the nodes a step ran, for update_state's as_node and for get_state. */
static int record_ran(struct rx_graph_run *r, struct rx_graph_task *t, size_t n)
{
    json_t *ran = json_array();
    size_t i;

    for (i = 0; ran && i < n; i++) {
        if (i && t[i - 1].node == t[i].node)
            continue;
        if (json_array_append_new(ran, json_string(rx_graph_task_node(&t[i])))) {
            json_decref(ran);
            return -ENOMEM;
        }
    }
    if (!ran)
        return -ENOMEM;
    json_decref(r->ran);
    r->ran = ran;
    return 0;
}

/*
 * Run `next`, merge, route. On an interrupt(), *interrupts is set (a new
 * reference), the step is checkpointed as paused, with the results of the
 * tasks that finished, and the state is left as it was.
 */
static int superstep(struct rx_graph_run *r, json_t **interrupts)
{
    struct rx_graph_task *t = NULL;
    json_t *next = NULL, *merged = NULL, *before = NULL;
    size_t n = 0, i;
    bool paused = false;
    int rc;

    rc = rx_graph_run_make_tasks(r, true, &t, &n);
    json_decref(r->writes); /* they were for this step only */
    r->writes = NULL;
    if (rc)
        return rc;
    rx_graph_tasks_execute(t, n);
    if (r->stream_rc) {
        rc = stopped(r); /* a node's chunk was answered with "stop" */
        goto out_release_tasks;
    }
    rx_graph_tasks_sort(t, n);
    /* A failure wins over a pause, as in LangGraph; the first in merge order. */
    for (i = 0; i < n; i++) {
        paused |= t[i].interrupt != NULL;
        if (!t[i].rc || t[i].interrupt)
            continue;
        rc = rx_error_set(r->err, t[i].rc, "node '%s' failed: %s",
                          rx_graph_task_node(&t[i]),
                          t[i].error[0] ? t[i].error : strerror(-t[i].rc));
        if (rc >= 0)
            rc = -EIO; /* a node returned a positive value */
        goto out_release_tasks;
    }
    if (paused) {
        rc = save_pause(r, t, n, interrupts);
        if (!rc)
            rc = rx_graph_run_checkpoint(r, *interrupts);
        if (!rc)
            rc = rx_graph_stream_pause(r, *interrupts);
        if (rc == -ECANCELED)
            rc = stopped(r);
        goto out_release_tasks;
    }
    json_array_clear(r->updates);
    rc = rx_graph_run_merge(r, t, n, &merged);
    if (rc)
        goto out_release_tasks;
    before = r->state;
    r->state = merged;
    json_decref(r->pending);
    r->pending = NULL;

    rc = -ENOMEM;
    next = json_array();
    if (!next)
        goto out_release_tasks;
    /*
     * Each task routes as its own: a command's goto and Sends, then its
     * node's edges (an edge target is added once) and routers, which see the
     * state before the step plus this task's writes only (LangGraph).
     */
    for (i = 0; i < n; i++) {
        rc = rx_graph_route_into(r, next, t[i].route.items, NULL);
        if (rc)
            goto out_release_next;
        rc = rx_graph_route_follow(r, next, t[i].node, before, t[i].update);
        if (rc)
            goto out_release_next;
    }
    rc = rx_graph_route_fire_joins(r, next);
    /* Only checkpoints and interrupt_after read it: a plain invoke skips the work. */
    if (!rc && r->cfg &&
        ((r->cfg->checkpointer && r->cfg->thread_id) || r->cfg->interrupt_after))
        rc = record_ran(r, t, n);
    if (rc)
        goto out_release_next;
    json_decref(r->next);
    r->next = next;
    next = NULL;
    r->step++;
    r->steps++;
    r->source = "loop";
    rc = rx_graph_run_checkpoint(r, NULL);
    if (!rc)
        rc = stream(r, t, n);
out_release_next:
    json_decref(next);
out_release_tasks:
    json_decref(before);
    rx_graph_tasks_release(t, n);
    return rc;
}

static int start(struct rx_graph_run *r, json_t *input)
{
    struct rx_error rerr = {{0}};
    int rc;

    json_array_clear(r->next);
    json_decref(r->pending);
    r->pending = NULL;
    rc = rx_graph_run_joins_init(r);
    if (rc)
        return rc;
    rc = rx_reducer_merge(r->state, input, r->g->schema, r->g->nschema, r->ids, &rerr);
    if (rc)
        return rx_error_set(r->err, rc, "input: %s", rerr.text);
    rc = rx_graph_route_follow(r, r->next, RX_GRAPH_IDX_START, NULL, NULL);
    if (rc)
        return rc;
    r->step = r->last_id[0] ? r->step + 1 : 0;
    r->source = "input";
    json_array_clear(r->ran);
    if (json_array_append_new(r->ran, json_string(RX_GRAPH_START)) ||
        json_array_append_new(
            r->updates, json_pack("{s:s,s:O}", "node", RX_GRAPH_START, "update", input)))
        return -ENOMEM;
    rc = rx_graph_run_checkpoint(r, NULL);
    if (!rc)
        rc = stream(r, NULL, 0);
    return rc;
}

/* Is `node` in the NULL-terminated list (where "*" stands for every node)? */
static bool listed(const char *const *list, const char *node)
{
    for (; list && *list; list++)
        if (!strcmp(*list, "*") || !strcmp(*list, node))
            return true;
    return false;
}

/* A static breakpoint: interrupt_before one of `next`, or interrupt_after one of `ran`.
 */
static bool breakpoint(const char *const *list, json_t *nodes)
{
    json_t *e;
    size_t i;

    json_array_foreach(nodes, i, e)
    {
        const char *n =
            json_string_value(json_is_object(e) ? json_object_get(e, "node") : e);

        if (n && listed(list, n))
            return true;
    }
    return false;
}

/* Resume answers must match what is pending: one answer for one pause, else by id. */
static int check_resume(struct rx_graph_run *r, json_t *interrupts)
{
    const struct rx_graph_config *c = r->cfg;
    const char *thread = c->thread_id ? c->thread_id : "";
    const char *key;
    json_t *v, *e;
    size_t i;

    if (!r->pending)
        return rx_error_set(r->err, -EINVAL, "thread '%s': no interrupt to resume",
                            thread);
    if (c->resume && json_array_size(interrupts) > 1)
        return rx_error_set(r->err, -EINVAL,
                            "thread '%s': %zu interrupts are pending: answer them by id "
                            "(resume_map)",
                            thread, json_array_size(interrupts));
    json_object_foreach(c->resume_map, key, v)
    {
        json_array_foreach(interrupts, i, e)
        {
            if (!strcmp(json_string_value(json_object_get(e, "id")), key))
                break;
        }
        if (i == json_array_size(interrupts))
            return rx_error_set(r->err, -EINVAL,
                                "thread '%s': no pending interrupt '%s' to resume",
                                thread, key);
    }
    return 0;
}

int rx_graph_invoke(const struct rx_graph *g, json_t *input,
                    const struct rx_graph_config *cfg, struct rx_graph_result *res,
                    struct rx_error *err)
{
    struct rx_graph_run r;
    json_t *interrupts = NULL, *pending_ints = NULL;
    bool continuing, started, resuming, first = true;
    int rc, limit = cfg && cfg->recursion_limit > 0 ? cfg->recursion_limit
                                                    : RX_GRAPH_RECURSION_LIMIT;

    if (!g || !res)
        return rx_error_set(err, -EINVAL, "graph or result is NULL");
    if (!g->compiled)
        return rx_error_set(err, -EINVAL, "graph is not compiled");
    if (err)
        err->text[0] = '\0';
    rc = rx_graph_run_init(&r, g, cfg, err);
    if (!rc)
        rc = rx_graph_run_load(&r, &continuing);
    if (rc)
        goto out_release;
    resuming = cfg && (cfg->resume || cfg->resume_map);
    if (resuming) {
        json_t *tasks = NULL, *e;
        size_t i;

        /* The pending interrupts, with their ids, as get_state lists them. */
        pending_ints = json_array();
        rc = pending_ints ? 0 : -ENOMEM;
        if (!rc && r.pending)
            rc = rx_graph_run_tasks(&r, &tasks);
        json_array_foreach(tasks, i, e)
        {
            if (!rc && json_array_extend(pending_ints, json_object_get(e, "interrupts")))
                rc = -ENOMEM;
        }
        json_decref(tasks);
        if (!rc)
            rc = check_resume(&r, pending_ints);
        if (rc)
            goto out_release;
    }
    started = input && !json_is_null(input) && !resuming;
    /*
     * Continuing the newest checkpoint (not a fork): the tasks that finished
     * before a crash left their results in the store; they do not run again.
     */
    if (continuing && !started && !cfg->checkpoint_id) {
        rc = rx_checkpoint_get_writes(cfg->checkpointer, cfg->thread_id, r.last_id,
                                      &r.writes);
        if (rc) {
            rx_error_set(err, rc, "thread '%s': cannot read the writes of a step (%s)",
                         cfg->thread_id, strerror(-rc));
            goto out_release;
        }
    }
    if (started) {
        rc = start(&r, input);
        if (rc)
            goto out_release;
    } else if (!continuing) {
        rc = rx_error_set(err, -EINVAL, "no input and no checkpoint to continue from");
        goto out_release;
    }
    while (json_array_size(r.next)) {
        /*
         * interrupt_before pauses before the step runs; a run that continues
         * without input goes past it (LangGraph marks what it had seen).
         */
        if ((started || !first) && !r.pending && cfg &&
            breakpoint(cfg->interrupt_before, r.next)) {
            interrupts = json_array();
            rc = interrupts ? 0 : -ENOMEM;
            break;
        }
        first = false;
        rc = superstep(&r, &interrupts);
        if (rc || interrupts)
            break;
        if (cfg && breakpoint(cfg->interrupt_after, r.ran)) {
            interrupts = json_array();
            rc = interrupts ? 0 : -ENOMEM;
            break;
        }
        /*
         * LangGraph's count (pregel/loop.ts): it stops when its step passes
         * first step + limit + 1, checked after each step, before it looks
         * for more work. With input, its input checkpoint and StateGraph's
         * START node take two of those steps, so node step `limit` fails (a
         * 3-node chain with limit 3 fails, with 4 it ends); a continued or
         * resumed run takes neither, so step limit + 2 fails.
         */
        if (r.steps + (started ? 1 : -1) > limit) {
            rc = rx_error_set(
                err, -ELOOP,
                "recursion limit of %d reached without hitting a stop condition "
                "(next: '%s')",
                limit,
                json_array_size(r.next) ? json_string_value(json_object_get(
                                              json_array_get(r.next, 0), "node"))
                                        : RX_GRAPH_END);
            break;
        }
    }
    if (!rc && interrupts && !json_array_size(interrupts)) {
        rc = rx_graph_stream_pause(&r, interrupts); /* a static breakpoint */
        if (rc == -ECANCELED)
            rc = stopped(&r);
    }
    if (rc)
        goto out_release;
    rc = rx_graph_run_values(&r, &res->state);
    if (rc)
        goto out_release;
    res->interrupts = interrupts;
    interrupts = NULL;
    res->steps = r.steps;
    memcpy(res->checkpoint_id, r.last_id, sizeof(r.last_id));
out_release:
    if (rc == -ENOMEM && err && !err->text[0])
        rx_error_set(err, rc, "out of memory");
    json_decref(interrupts);
    json_decref(pending_ints);
    rx_graph_run_release(&r);
    return rc;
}

void rx_graph_result_release(struct rx_graph_result *res)
{
    if (!res)
        return;
    json_decref(res->state);
    json_decref(res->interrupts);
    res->state = NULL;
    res->interrupts = NULL;
}
