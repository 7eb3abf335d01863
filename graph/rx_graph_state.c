/*
 * rx_graph_state - LangGraph's state API over a checkpointed thread:
 * get_state, get_state_history and update_state (as a node). See rx_graph.h.
 *
 * Each reads checkpoints through the same loader as invoke
 * (rx_graph_run_load_cp in rx_graph_load.c), so a snapshot shows exactly
 * what an invoke would continue from, including the writes of the tasks that
 * finished before a pause (rx_graph_run_values, here, as invoke uses it).
 */
#include "graph/rx_graph.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "graph/rx_checkpoint.h"
#include "graph/rx_graph_internal.h"
#include "graph/rx_reducer.h"

int rx_graph_run_values(struct rx_graph_run *r, json_t **out)
{
    struct rx_graph_task *t = NULL;
    json_t *updates = r->updates;
    size_t n = 0, i;
    int rc;

    if (!r->pending) {
        *out = json_incref(r->state);
        return 0;
    }
    rc = rx_graph_run_make_tasks(r, false, &t, &n);
    if (rc)
        return rc;
    rx_graph_tasks_sort(t, n);
    for (i = 0; i < n; i++)
        if (!t[i].done) {
            json_decref(t[i].update);
            t[i].update = NULL;
        }
    r->updates = NULL; /* not a step: nothing to stream */
    rc = rx_graph_run_merge(r, t, n, out);
    r->updates = updates;
    rx_graph_tasks_release(t, n);
    return rc;
}

int rx_graph_run_tasks(struct rx_graph_run *r, json_t **out)
{
    struct rx_graph_task *t = NULL;
    json_t *list = json_array(), *ints;
    size_t n = 0, i;
    int rc;

    if (!list)
        return -ENOMEM;
    rc = rx_graph_run_make_tasks(r, false, &t, &n);
    if (rc)
        goto out_release;
    for (i = 0; i < n; i++) {
        ints = json_array();
        if (!ints || (t[i].interrupt &&
                      json_array_append_new(ints, json_pack("{s:s,s:O}", "id",
                                                            rx_graph_task_id(&t[i]),
                                                            "value", t[i].interrupt)))) {
            json_decref(ints);
            rc = -ENOMEM;
            goto out_release;
        }
        if (json_array_append_new(list, json_pack("{s:s,s:s,s:o,s:b}", "id",
                                                  rx_graph_task_id(&t[i]), "name",
                                                  rx_graph_task_node(&t[i]), "interrupts",
                                                  ints, "done", t[i].done))) {
            rc = -ENOMEM;
            goto out_release;
        }
    }
    *out = list;
    list = NULL;
out_release:
    rx_graph_tasks_release(t, n);
    json_decref(list);
    return rc;
}

static int need_thread(const struct rx_graph *g, const struct rx_graph_config *cfg,
                       struct rx_error *err)
{
    if (err)
        err->text[0] = '\0';
    if (!g || !cfg || !cfg->checkpointer || !cfg->thread_id)
        return rx_error_set(
            err, -EINVAL, "the state API needs a graph, a checkpointer and a thread id");
    if (!g->compiled)
        return rx_error_set(err, -EINVAL, "graph is not compiled");
    return 0;
}

/* The snapshot of a loaded run (see rx_graph_get_state). */
static int snapshot(struct rx_graph_run *r, const char *source, json_t **out)
{
    json_t *values = NULL, *tasks = NULL, *next = NULL, *ints = NULL, *e;
    size_t i;
    int rc;

    rc = rx_graph_run_values(r, &values);
    if (!rc)
        rc = rx_graph_run_tasks(r, &tasks);
    if (rc)
        goto out_release;
    rc = -ENOMEM;
    next = json_array();
    ints = json_array();
    if (!next || !ints)
        goto out_release;
    json_array_foreach(tasks, i, e)
    {
        if (json_array_append(next, json_object_get(e, "name")) ||
            json_array_extend(ints, json_object_get(e, "interrupts")))
            goto out_release;
    }
    *out = json_pack("{s:o,s:o,s:o,s:o,s:s?,s:s?,s:{s:i,s:s?,s:O}}", "values", values,
                     "next", next, "tasks", tasks, "interrupts", ints, "checkpoint_id",
                     r->last_id[0] ? r->last_id : NULL, "parent_checkpoint_id",
                     r->parent_id[0] ? r->parent_id : NULL, "metadata", "step", r->step,
                     "source", source, "ran", r->ran);
    return *out ? 0 : -ENOMEM; /* "o" stole the four, even on failure */

out_release:
    json_decref(values);
    json_decref(tasks);
    json_decref(next);
    json_decref(ints);
    return rc;
}

int rx_graph_get_state(const struct rx_graph *g, const struct rx_graph_config *cfg,
                       json_t **out, struct rx_error *err)
{
    struct rx_graph_run r;
    json_t *cp = NULL;
    int rc;

    rc = need_thread(g, cfg, err);
    if (rc)
        return rc;
    if (!out)
        return rx_error_set(err, -EINVAL, "no place for the state");
    rc = rx_graph_run_init(&r, g, cfg, err);
    if (rc)
        goto out_release;
    rc = rx_checkpoint_get(cfg->checkpointer, cfg->thread_id, cfg->checkpoint_id, &cp);
    if (rc == -ENOENT && !cfg->checkpoint_id) {
        rc = snapshot(&r, NULL, out); /* a new thread: empty, as in LangGraph */
        goto out_release;
    }
    if (rc) {
        if (rc == -ENOENT)
            rx_error_set(err, rc, "thread '%s': no checkpoint '%s'", cfg->thread_id,
                         cfg->checkpoint_id ? cfg->checkpoint_id : "(newest)");
        else
            rx_error_set(err, rc, "thread '%s': cannot read a checkpoint (%s)",
                         cfg->thread_id,
                         rc == -EBADMSG ? "a stored row is corrupt" : strerror(-rc));
        goto out_release;
    }
    rc = rx_graph_run_load_cp(&r, cp);
    if (!rc)
        rc = snapshot(&r, json_string_value(json_object_get(cp, "source")), out);
out_release:
    if (rc == -ENOMEM && err && !err->text[0])
        rx_error_set(err, rc, "out of memory");
    json_decref(cp);
    rx_graph_run_release(&r);
    return rc;
}

int rx_graph_get_state_history(const struct rx_graph *g,
                               const struct rx_graph_config *cfg, json_t **out,
                               struct rx_error *err)
{
    struct rx_graph_run r;
    json_t *list = NULL, *hist = NULL, *snap, *cp;
    size_t i;
    int rc;

    rc = need_thread(g, cfg, err);
    if (rc)
        return rc;
    if (!out)
        return rx_error_set(err, -EINVAL, "no place for the history");
    rc = rx_checkpoint_list(cfg->checkpointer, cfg->thread_id, &list);
    if (rc == -ENOENT) {
        *out = json_array(); /* an unknown thread has no history */
        return *out ? 0 : -ENOMEM;
    }
    if (rc)
        return rx_error_set(err, rc, "thread '%s': cannot list checkpoints (%s)",
                            cfg->thread_id,
                            rc == -EBADMSG ? "a stored row is corrupt" : strerror(-rc));
    hist = json_array();
    rc = hist ? 0 : -ENOMEM;
    /* Newest first, as LangGraph lists them. */
    for (i = json_array_size(list); !rc && i > 0; i--) {
        cp = json_array_get(list, i - 1);
        rc = rx_graph_run_init(&r, g, cfg, err);
        if (!rc)
            rc = rx_graph_run_load_cp(&r, cp);
        if (!rc)
            rc = snapshot(&r, json_string_value(json_object_get(cp, "source")), &snap);
        if (!rc && json_array_append_new(hist, snap))
            rc = -ENOMEM;
        rx_graph_run_release(&r);
    }
    json_decref(list);
    if (rc) {
        json_decref(hist);
        if (rc == -ENOMEM && err && !err->text[0])
            rx_error_set(err, rc, "out of memory");
        return rc;
    }
    *out = hist;
    return 0;
}

/* LangGraph's as_node when none is given: the one node the last step ran. */
static int infer_as_node(struct rx_graph_run *r, bool found, const char **as_node)
{
    json_t *ran = r->ran;

    if (!found) {
        *as_node = RX_GRAPH_START;
        return 0;
    }
    if (json_array_size(ran) == 1) {
        *as_node = json_string_value(json_array_get(ran, 0));
        return 0;
    }
    return rx_error_set(r->err, -EINVAL,
                        "ambiguous update: the last step ran %zu nodes, give as_node",
                        json_array_size(ran));
}

int rx_graph_update_state(const struct rx_graph *g, const struct rx_graph_config *cfg,
                          json_t *values, const char *as_node,
                          char id_out[RX_CHECKPOINT_ID_LEN], struct rx_error *err)
{
    struct rx_graph_run r;
    struct rx_error rerr = {{0}};
    json_t *before = NULL, *next = NULL, *merged;
    char node[RX_ERR_LEN];
    bool found;
    int rc, idx;

    rc = need_thread(g, cfg, err);
    if (rc)
        return rc;
    if (values && !json_is_null(values) && !json_is_object(values))
        return rx_error_set(err, -EINVAL, "update_state: values must be an object");
    rc = rx_graph_run_init(&r, g, cfg, err);
    if (!rc)
        rc = rx_graph_run_load(&r, &found);
    if (!rc && !as_node)
        rc = infer_as_node(&r, found, &as_node);
    if (rc)
        goto out_release;
    /* r.ran is rewritten below, and as_node may point into it. */
    snprintf(node, sizeof(node), "%s", as_node);
    as_node = node;
    idx = rx_graph_lookup(g, as_node);
    if (idx == RX_GRAPH_IDX_NONE) {
        rc = rx_error_set(err, -EINVAL, "node '%s': not in this graph", as_node);
        goto out_release;
    }
    /* A paused step's finished writes stay; its pause is over. */
    rc = rx_graph_run_values(&r, &merged);
    if (rc)
        goto out_release;
    json_decref(r.state);
    r.state = merged;
    json_decref(r.pending);
    r.pending = NULL;
    before = json_copy(r.state);
    next = json_array();
    if (!before || !next) {
        rc = -ENOMEM;
        goto out_release;
    }
    if (values && !json_is_null(values)) {
        rc = rx_reducer_merge(r.state, values, g->schema, g->nschema, r.ids, &rerr);
        if (rc) {
            rx_error_set(err, rc, "node '%s': %s", as_node, rerr.text);
            goto out_release;
        }
    }
    /* The write goes where the node's own would: its edges, routers, joins. */
    if (idx != RX_GRAPH_IDX_END) {
        rc = rx_graph_route_follow(&r, next, idx, before, values);
        if (!rc)
            rc = rx_graph_route_fire_joins(&r, next);
        if (rc)
            goto out_release;
    }
    json_decref(r.next);
    r.next = next;
    next = NULL;
    json_array_clear(r.ran);
    if (json_array_append_new(r.ran, json_string(as_node))) {
        rc = -ENOMEM;
        goto out_release;
    }
    r.step = found ? r.step + 1 : 0;
    r.source = "update";
    rc = rx_graph_run_checkpoint(&r, NULL);
    if (!rc && id_out)
        memcpy(id_out, r.last_id, RX_CHECKPOINT_ID_LEN);
out_release:
    if (rc == -ENOMEM && err && !err->text[0])
        rx_error_set(err, rc, "out of memory");
    json_decref(before);
    json_decref(next);
    rx_graph_run_release(&r);
    return rc;
}
