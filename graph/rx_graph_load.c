/*
 * rx_graph_load - a run's life around the store: init and release, loading
 * a checkpoint (checking that it fits the graph, so a corrupt row is an
 * error and never a crash) and storing one. Shared by invoke
 * (rx_graph_run.c) and the state API (rx_graph_state.c); see
 * rx_graph_internal.h.
 */
#include "graph/rx_graph.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "graph/rx_checkpoint.h"
#include "graph/rx_graph_internal.h"

int rx_graph_run_checkpoint(struct rx_graph_run *r, json_t *interrupts)
{
    const struct rx_graph_config *c = r->cfg;
    json_t *cp;
    int rc;

    if (!c || !c->checkpointer || !c->thread_id)
        return 0;
    cp = json_pack("{s:i,s:s?,s:s,s:O,s:O,s:O,s:O}", "step", r->step, "parent",
                   r->last_id[0] ? r->last_id : NULL, "source", r->source, "state",
                   r->state, "next", r->next, "joins", r->joins, "ran", r->ran);
    if (!cp)
        return -ENOMEM;
    if (interrupts && (json_object_set(cp, "interrupts", interrupts) ||
                       json_object_set(cp, "pending", r->pending))) {
        json_decref(cp);
        return -ENOMEM;
    }
    memcpy(r->parent_id, r->last_id, sizeof(r->parent_id));
    rc = rx_checkpoint_put(c->checkpointer, c->thread_id, cp, r->last_id);
    json_decref(cp);
    if (rc)
        return rx_error_set(r->err, rc, "thread '%s': cannot store a checkpoint (%s)",
                            c->thread_id, strerror(-rc));
    return 0;
}

/* The step callback, if any; non-zero from it stops the invoke. */
/* No join has seen any of its sources. */
int rx_graph_run_joins_init(struct rx_graph_run *r)
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

int rx_graph_run_init(struct rx_graph_run *r, const struct rx_graph *g,
                      const struct rx_graph_config *cfg, struct rx_error *err)
{
    memset(r, 0, sizeof(*r));
    r->stream_lock_init = !pthread_mutex_init(&r->stream_lock, NULL);
    r->g = g;
    r->cfg = cfg;
    r->err = err;
    r->ids = g->has_ids ? &g->ids : NULL;
    r->source = "input";
    r->state = json_object();
    r->next = json_array();
    r->updates = json_array();
    r->ran = json_array();
    if (!r->state || !r->next || !r->updates || !r->ran || rx_graph_run_joins_init(r))
        return -ENOMEM;
    return 0;
}

void rx_graph_run_release(struct rx_graph_run *r)
{
    json_decref(r->state);
    json_decref(r->next);
    json_decref(r->joins);
    json_decref(r->pending);
    json_decref(r->updates);
    json_decref(r->ran);
    json_decref(r->writes);
    if (r->stream_lock_init)
        pthread_mutex_destroy(&r->stream_lock);
    memset(r, 0, sizeof(*r));
}

/* Every entry of `next` names a node of this graph, Sends with their input. */
static bool next_fits(const struct rx_graph *g, json_t *next)
{
    const char *node;
    json_t *e;
    size_t i;

    json_array_foreach(next, i, e)
    {
        node = json_string_value(json_object_get(e, "node"));
        if (!node || rx_graph_lookup(g, node) < 0)
            return false;
    }
    return true;
}

int rx_graph_run_load_cp(struct rx_graph_run *r, json_t *cp)
{
    json_t *pending = json_object_get(cp, "pending");
    const char *id = json_string_value(json_object_get(cp, "id"));
    const char *parent = json_string_value(json_object_get(cp, "parent"));
    json_t *ran = json_object_get(cp, "ran");

    if (!json_is_object(json_object_get(cp, "state")) ||
        !json_is_array(json_object_get(cp, "next")) ||
        !next_fits(r->g, json_object_get(cp, "next")) || !id ||
        !json_is_integer(json_object_get(cp, "step")) ||
        json_array_size(json_object_get(cp, "joins")) != r->g->njoins ||
        (pending &&
         json_array_size(pending) != json_array_size(json_object_get(cp, "next"))))
        return rx_error_set(r->err, -EINVAL,
                            "thread '%s': checkpoint '%s' is corrupt or does not fit "
                            "this graph",
                            r->cfg && r->cfg->thread_id ? r->cfg->thread_id : "",
                            id ? id : "?");
    /* Our own shallow copy: merging into it must not touch the store's. */
    json_decref(r->state);
    r->state = json_copy(json_object_get(cp, "state"));
    json_decref(r->next);
    r->next = json_incref(json_object_get(cp, "next"));
    json_decref(r->joins);
    r->joins = json_deep_copy(json_object_get(cp, "joins"));
    json_decref(r->pending);
    r->pending = json_object_get(cp, "interrupts") ? json_incref(pending) : NULL;
    json_decref(r->ran);
    r->ran = json_is_array(ran) ? json_incref(ran) : json_array();
    if (!r->state || !r->joins || !r->ran)
        return -ENOMEM;
    r->step = (int)json_integer_value(json_object_get(cp, "step"));
    snprintf(r->last_id, sizeof(r->last_id), "%s", id);
    snprintf(r->parent_id, sizeof(r->parent_id), "%s", parent ? parent : "");
    return 0;
}

int rx_graph_run_load(struct rx_graph_run *r, bool *found)
{
    const struct rx_graph_config *c = r->cfg;
    json_t *cp = NULL;
    int rc;

    *found = false;
    if (!c || !c->checkpointer || !c->thread_id)
        return 0;
    rc = rx_checkpoint_get(c->checkpointer, c->thread_id, c->checkpoint_id, &cp);
    if (rc == -ENOENT && !c->checkpoint_id)
        return 0; /* a new thread */
    if (rc == -ENOENT)
        return rx_error_set(r->err, rc, "thread '%s': no checkpoint '%s'", c->thread_id,
                            c->checkpoint_id);
    if (rc == -EBADMSG)
        return rx_error_set(r->err, rc, "thread '%s': a stored checkpoint is corrupt",
                            c->thread_id);
    if (rc)
        return rx_error_set(r->err, rc, "thread '%s': cannot read a checkpoint (%s)",
                            c->thread_id, strerror(-rc));
    rc = rx_graph_run_load_cp(r, cp);
    json_decref(cp);
    if (rc)
        return rc;
    *found = true;
    return 0;
}

/* The input step: merge the input, then follow START. */
