/*
 * rx_graph_stream - LangGraph's stream modes (values, updates, custom,
 * messages) over one callback. See rx_graph.h for the chunks, and
 * rx_graph_internal.h for who calls what.
 *
 * custom and messages chunks are written by nodes while they run, on the
 * worker threads; the run's stream lock makes the caller's callback see one
 * chunk at a time, and keeps the first "stop" so the step ends with
 * -ECANCELED once every task has returned.
 */
#include "graph/rx_graph.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "graph/rx_graph_internal.h"
#include "graph/rx_reducer.h"

static const char *mode_name(unsigned mode)
{
    switch (mode) {
    case RX_GRAPH_STREAM_VALUES:
        return "values";
    case RX_GRAPH_STREAM_UPDATES:
        return "updates";
    case RX_GRAPH_STREAM_CUSTOM:
        return "custom";
    default:
        return "messages";
    }
}

static bool wants(const struct rx_graph_run *r, unsigned mode)
{
    return r->cfg && r->cfg->on_stream && (r->cfg->stream_mode & mode);
}

int rx_graph_stream_emit(struct rx_graph_run *r, unsigned mode, json_t *chunk)
{
    int rc = 0;

    if (!wants(r, mode))
        return 0;
    if (r->stream_lock_init)
        pthread_mutex_lock(&r->stream_lock);
    if (!r->stream_rc && r->cfg->on_stream(r->cfg->on_stream_ctx, mode_name(mode), chunk))
        r->stream_rc = -ECANCELED;
    rc = r->stream_rc;
    if (r->stream_lock_init)
        pthread_mutex_unlock(&r->stream_lock);
    return rc;
}

/* [chunk, metadata] for messages mode; chunk is stolen. */
static int emit_message(struct rx_graph_task *t, json_t *chunk)
{
    json_t *pair;
    int rc;

    pair = json_pack("[o,{s:s,s:i}]", chunk, "langgraph_node", rx_graph_task_node(t),
                     "langgraph_step", t->step);
    if (!pair)
        return -ENOMEM;
    rc = rx_graph_stream_emit(t->run, RX_GRAPH_STREAM_MESSAGES, pair);
    json_decref(pair);
    return rc;
}

int rx_graph_task_write(struct rx_graph_task *task, json_t *chunk)
{
    int rc;

    if (!task || !chunk) {
        json_decref(chunk);
        return -EINVAL;
    }
    rc = rx_graph_stream_emit(task->run, RX_GRAPH_STREAM_CUSTOM, chunk);
    json_decref(chunk);
    return rc;
}

int rx_graph_task_stream_message(struct rx_graph_task *task, json_t *chunk)
{
    const char *id;

    if (!task || !chunk) {
        json_decref(chunk);
        return -EINVAL;
    }
    if (!wants(task->run, RX_GRAPH_STREAM_MESSAGES)) {
        json_decref(chunk);
        return 0;
    }
    id = json_string_value(json_object_get(chunk, "id"));
    if (id) {
        if (!task->streamed)
            task->streamed = json_object();
        if (!task->streamed || json_object_set_new(task->streamed, id, json_true())) {
            json_decref(chunk);
            return -ENOMEM;
        }
    }
    return emit_message(task, chunk);
}

/*
 * The messages of a task's add_messages writes that it did not stream as
 * tokens, whole (LangGraph's StreamMessagesHandler at the node's end).
 */
static int emit_whole_messages(struct rx_graph_run *r, struct rx_graph_task *t)
{
    const struct rx_reducer *red;
    const char *key, *id;
    json_t *v, *m;
    size_t i;
    int rc;

    json_object_foreach(t->update, key, v)
    {
        red = rx_reducer_find(r->g->schema, r->g->nschema, key);
        if (!red || red->kind != RX_REDUCER_ADD_MESSAGES)
            continue;
        for (i = 0; i < (json_is_array(v) ? json_array_size(v) : 1); i++) {
            m = json_is_array(v) ? json_array_get(v, i) : v;
            id = json_string_value(json_object_get(m, "id"));
            if (id && json_object_get(t->streamed, id))
                continue;
            rc = emit_message(t, json_incref(m));
            if (rc)
                return rc;
        }
    }
    return 0;
}

int rx_graph_stream_step(struct rx_graph_run *r, struct rx_graph_task *t, size_t n)
{
    json_t *chunk;
    size_t i;
    int rc;

    for (i = 0; i < n && wants(r, RX_GRAPH_STREAM_UPDATES); i++) {
        chunk = json_pack("{s:O?}", rx_graph_task_node(&t[i]), t[i].update);
        if (!chunk)
            return -ENOMEM;
        rc = rx_graph_stream_emit(r, RX_GRAPH_STREAM_UPDATES, chunk);
        json_decref(chunk);
        if (rc)
            return rc;
    }
    for (i = 0; i < n && wants(r, RX_GRAPH_STREAM_MESSAGES); i++) {
        rc = emit_whole_messages(r, &t[i]);
        if (rc)
            return rc;
    }
    return rx_graph_stream_emit(r, RX_GRAPH_STREAM_VALUES, r->state);
}

int rx_graph_stream_start(struct rx_graph_run *r)
{
    return rx_graph_stream_emit(r, RX_GRAPH_STREAM_VALUES, r->state);
}

int rx_graph_stream_pause(struct rx_graph_run *r, json_t *interrupts)
{
    json_t *chunk;
    int rc;

    if (!wants(r, RX_GRAPH_STREAM_UPDATES))
        return 0;
    chunk = json_pack("{s:O}", "__interrupt__", interrupts);
    if (!chunk)
        return -ENOMEM;
    rc = rx_graph_stream_emit(r, RX_GRAPH_STREAM_UPDATES, chunk);
    json_decref(chunk);
    return rc;
}
