/*
 * lg_state - what the LangGraph subset shows of a thread: the thread object
 * (status, values, interrupts), its ThreadState (values, next, tasks with
 * the pending interrupt, checkpoint) and its history. A checkpoint is an
 * input of the session's log: checkpoint_id is its seq in decimal, and the
 * state as of it is replayed from the log (store/store).
 * Depends on server/session, store/store, server/run, server/protocols/lg_msg,
 * server/protocols/lg_run.
 */
#include "server/protocols/lg_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/event.h"
#include "server/protocols/lg_msg.h"
#include "server/protocols/lg_run.h"
#include "server/run.h"
#include "server/session_table.h"
#include "store/store.h"
#include "state_machine/rx_effects.h"

/* The most states one history page replays from the log. */
#define LG_HISTORY_MAX 100

/* A ThreadState: values, next, tasks, checkpoint, metadata, created_at, parent. */
static json_t *state_json(const char *tid, const struct rx_state *st, int64_t seq,
                          int64_t at)
{
    json_t *interrupts = lg_msg_interrupts(st), *tasks = json_array();
    json_t *next = json_array(), *parent = json_null(), *j;
    char when[LG_ISO_LEN], cid[32], pid[32];
    char *task = NULL;

    if (!interrupts || !tasks || !next || lg_msg_task_id(st, &task))
        goto fail;
    if (task && (json_array_append_new(next, json_string("tools")) ||
                 json_array_append_new(
                     tasks, json_pack("{s:s, s:s, s:[ss], s:n, s:O, s:n, s:n, s:n}", "id",
                                      task, "name", "tools", "path", "__pregel_pull",
                                      "tools", "error", "interrupts", interrupts,
                                      "checkpoint", "state", "result"))))
        goto fail;
    snprintf(cid, sizeof(cid), "%lld", (long long)seq);
    snprintf(pid, sizeof(pid), "%lld", (long long)seq - 1);
    if (seq > 0)
        parent = json_pack("{s:s, s:s, s:s, s:n}", "thread_id", tid, "checkpoint_ns", "",
                           "checkpoint_id", pid, "checkpoint_map");
    lg_msg_iso(st->updated_at > 0 ? st->updated_at : at, when);
    j = json_pack("{s:o, s:o, s:o, s:{s:s, s:s, s:s, s:n}, s:{s:s, s:I, s:n, s:{}, s:s, "
                  "s:s, s:s}, s:s, s:o}",
                  "values", lg_msg_values(st, false), "next", next, "tasks", tasks,
                  "checkpoint", "thread_id", tid, "checkpoint_ns", "", "checkpoint_id",
                  cid, "checkpoint_map", "metadata", "source", "loop", "step",
                  (json_int_t)seq, "writes", "parents", "graph_id", LG_GRAPH_ID,
                  "assistant_id", LG_ASSISTANT_ID, "thread_id", tid, "created_at", when,
                  "parent_checkpoint", parent);
    json_decref(interrupts);
    free(task);
    return j;

fail:
    json_decref(interrupts);
    json_decref(tasks);
    json_decref(next);
    free(task);
    return NULL;
}

enum { VIEW_VALUES = 1 << 0, VIEW_STATE = 1 << 1 };

/* What one read of a session gives (session_read's callback fills it). */
struct view {
    unsigned what;
    const char *tid;
    int64_t seq, created_at, updated_at;
    bool awaiting, active;
    json_t *values;     /* VIEW_VALUES: {"messages"} */
    json_t *interrupts; /* VIEW_VALUES: {task id: [interrupt]} */
    json_t *state;      /* VIEW_STATE: the ThreadState */
    bool oom;
};

static void view_release(struct view *v)
{
    json_decref(v->values);
    json_decref(v->interrupts);
    json_decref(v->state);
}

/* session_read_fn: pure work on the state under the session's lock. */
static void view_fill(void *arg, const struct rx_state *st, int64_t seq,
                      const struct event_session *e)
{
    struct rx_effect_set fx;
    struct view *v = arg;
    char *task = NULL;

    v->seq = seq;
    v->created_at = e->created_at;
    v->updated_at = e->updated_at;
    v->awaiting = rx_state_awaiting_approval(st) > 0;
    rx_effect_set_init(&fx);
    v->oom = rx_effects_at(st, &fx) != 0;
    v->active = fx.len > 0;
    rx_effect_set_release(&fx);
    if (v->what & VIEW_VALUES) {
        v->values = lg_msg_values(st, false);
        v->interrupts = json_object();
        if (!v->values || !v->interrupts || lg_msg_task_id(st, &task) ||
            (task && json_object_set_new(v->interrupts, task, lg_msg_interrupts(st))))
            v->oom = true;
        free(task);
    }
    if ((v->what & VIEW_STATE) &&
        !(v->state = state_json(v->tid, st, seq, v->created_at)))
        v->oom = true;
}

/* Read `s` into `v`. 0, -ENOENT (deleted meanwhile) or -ENOMEM. */
static int view_read(struct session *s, unsigned what, struct view *v)
{
    int err;

    memset(v, 0, sizeof(*v));
    v->what = what;
    v->tid = session_id(s);
    if ((err = session_read(s, view_fill, v)))
        return err;
    if (v->oom) {
        view_release(v);
        memset(v, 0, sizeof(*v));
        return -ENOMEM;
    }
    return 0;
}

/* Statuses in LangGraph's words (SPEC 4.3); runs first, then the state. */
static const char *status_of(struct session *s, const struct view *v)
{
    if (run_lane_busy(s) || v->active)
        return "busy";
    if (v->awaiting)
        return "interrupted";
    if (lg_run_thread_failed(session_id(s)))
        return "error";
    return "idle";
}

const char *lg_thread_status(struct session *s)
{
    struct view v;
    const char *st;

    if (view_read(s, 0, &v))
        return "idle";
    st = status_of(s, &v);
    view_release(&v);
    return st;
}

static bool selected(json_t *select, const char *field)
{
    size_t i;
    json_t *f;

    if (!json_is_array(select))
        return true;
    json_array_foreach(select, i, f)
    {
        if (json_is_string(f) && !strcmp(json_string_value(f), field))
            return true;
    }
    return false;
}

json_t *lg__thread_json(struct session *s, json_t *select, int *err)
{
    bool values = selected(select, "values") || selected(select, "interrupts");
    char created[LG_ISO_LEN], updated[LG_ISO_LEN];
    const char *tid = session_id(s);
    json_t *j = NULL, *copy;
    struct view v;
    const char *k;
    void *tmp;

    if ((*err = view_read(s, values ? VIEW_VALUES : 0, &v)))
        return NULL;
    lg_msg_iso(v.created_at, created);
    lg_msg_iso(v.updated_at, updated);
    j = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:{}, s:O, s:O, s:n}", "thread_id", tid,
                  "created_at", created, "updated_at", updated, "state_updated_at",
                  updated, "metadata", lg__thread_meta(tid), "status", status_of(s, &v),
                  "config", "values", v.values ? v.values : json_null(), "interrupts",
                  v.interrupts ? v.interrupts : json_null(), "error");
    view_release(&v);
    if (j && json_is_array(select)) {
        json_object_foreach_safe(j, tmp, k, copy)
        {
            if (!selected(select, k))
                json_object_del(j, k);
        }
    }
    if (!j)
        *err = -ENOMEM;
    return j;
}

enum MHD_Result lg__reply_thread(struct MHD_Connection *conn, struct session *s)
{
    int err;
    json_t *j = lg__thread_json(s, NULL, &err);

    if (err == -ENOENT)
        return lg__detail(conn, 404, "Thread with ID %s not found", session_id(s));
    return lg__reply(conn, 200, j, NULL);
}

int lg__thread_seq(struct session *s, int64_t *seq)
{
    struct view v;
    int err = view_read(s, 0, &v);

    if (!err) {
        *seq = v.seq;
        view_release(&v);
    }
    return err;
}

/* A checkpoint id: the seq of an input, in decimal. -1 when it is not one. */
static int64_t checkpoint_seq(const char *cid)
{
    return door_parse_count(cid);
}

/* The ThreadState as of input `seq` (< 0 or the current one: now). */
/* The ThreadState as of input `seq` (<= top), replayed from the log. */
static json_t *old_state(struct door *srv, struct session *s, int64_t seq,
                         int64_t created_at, int *err)
{
    struct store *st = session_table_store(srv->sessions);
    struct rx_state state;
    json_t *j;

    if (!st) {
        *err = -ENOSYS;
        return NULL;
    }
    if ((*err = store_state_at(st, session_id(s), seq, &state)))
        return NULL;
    j = state_json(session_id(s), &state, seq, created_at);
    rx_state_release(&state);
    if (!j)
        *err = -ENOMEM;
    return j;
}

/* The ThreadState as of input `seq` (< 0: now); *top and *created: the thread's. */
static json_t *state_at(struct door *srv, struct session *s, int64_t seq, int64_t *top,
                        int64_t *created, int *err)
{
    struct view v;
    json_t *j;

    if ((*err = view_read(s, VIEW_STATE, &v)))
        return NULL;
    *top = v.seq;
    *created = v.created_at;
    j = seq < 0 || seq == v.seq ? json_incref(v.state) : NULL;
    view_release(&v);
    if (j)
        return j;
    if (seq > *top) {
        *err = -ERANGE;
        return NULL;
    }
    return old_state(srv, s, seq, *created, err);
}

static enum MHD_Result reply_state(struct door *srv, struct MHD_Connection *conn,
                                   struct session *s, int64_t seq)
{
    int64_t top, created;
    int err;
    json_t *j = state_at(srv, s, seq, &top, &created, &err);

    if (err == -ERANGE || err == -ENOSYS)
        return lg__detail(conn, 404, "no checkpoint %lld in thread %s", (long long)seq,
                          session_id(s));
    if (err)
        return lg__table_error(conn, err, session_id(s));
    return lg__reply(conn, 200, j, NULL);
}

/*
 * The history: the states from the newest (or the one before `before`)
 * down, one per input, `limit` of them (at most LG_HISTORY_MAX: each older
 * one is replayed from the log). Without a log, only the current state.
 */
static enum MHD_Result history(struct door *srv, struct MHD_Connection *conn,
                               struct session *s, long long limit, int64_t before)
{
    json_t *out = json_array(), *j;
    int64_t top, seq, created;
    int err = 0;

    if (limit < 1 || limit > LG_HISTORY_MAX) {
        json_decref(out);
        return lg__detail(conn, 422, "'limit' must be 1 to %d", LG_HISTORY_MAX);
    }
    if (!out || !(j = state_at(srv, s, -1, &top, &created, &err)))
        goto fail;
    seq = before >= 0 && before <= top ? before - 1 : top;
    if (seq == top) {
        if (json_array_append_new(out, j))
            goto fail;
        seq--;
    } else {
        json_decref(j);
    }
    while (seq >= 0 && json_array_size(out) < (size_t)limit) {
        if (!(j = old_state(srv, s, seq--, created, &err)))
            break;
        if (json_array_append_new(out, j))
            goto fail;
    }
    if (err && err != -ENOSYS && err != -ERANGE && json_array_size(out) == 0)
        goto fail;
    return lg__reply(conn, 200, out, NULL);
fail:
    json_decref(out);
    return lg__table_error(conn, err ? err : -ENOMEM, session_id(s));
}

/* POST /threads/<tid>/history {limit, before: {checkpoint_id}, checkpoint}. */
static enum MHD_Result history_post(struct door *srv, struct MHD_Connection *conn,
                                    struct session *s, const struct rx_buf *body)
{
    enum MHD_Result ret;
    json_t *q = lg__body(conn, body, &ret), *lim, *before, *cp;
    long long limit = 10;
    int64_t at = -1;

    if (!q)
        return ret;
    lim = json_object_get(q, "limit");
    before = json_object_get(q, "before");
    cp = json_object_get(q, "checkpoint");
    if (json_is_integer(lim))
        limit = json_integer_value(lim);
    if (json_is_object(before))
        at = checkpoint_seq(json_string_value(json_object_get(before, "checkpoint_id")));
    else if (json_is_string(before))
        at = checkpoint_seq(json_string_value(before));
    /* A checkpoint to start from: the states at it and before. */
    if (at < 0 && json_is_object(cp) && json_object_get(cp, "checkpoint_id")) {
        at = checkpoint_seq(json_string_value(json_object_get(cp, "checkpoint_id")));
        at = at >= 0 && at < INT64_MAX ? at + 1 : at; /* INT64_MAX: past any log */
    }
    json_decref(q);
    return history(srv, conn, s, limit, at);
}

enum MHD_Result lg__state_route(struct door *srv, struct MHD_Connection *conn,
                                const char *method, struct session *s, const char *rest,
                                const struct rx_buf *body)
{
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");

    if (!strcmp(rest, "/state")) {
        if (get)
            return reply_state(srv, conn, s, -1);
        if (post || !strcmp(method, "PATCH"))
            return lg__detail(conn, 405,
                              "updating a thread's state is not supported: "
                              "start a run");
    } else if (!strcmp(rest, "/state/checkpoint")) {
        if (post) {
            enum MHD_Result ret;
            json_t *q = lg__body(conn, body, &ret);
            int64_t seq;

            if (!q)
                return ret;
            seq = checkpoint_seq(json_string_value(
                json_object_get(json_object_get(q, "checkpoint"), "checkpoint_id")));
            json_decref(q);
            return reply_state(srv, conn, s, seq);
        }
    } else if (!strncmp(rest, "/state/", 7)) {
        int64_t seq = checkpoint_seq(rest + 7);

        if (get && seq < 0)
            return lg__detail(conn, 404, "no checkpoint %s in thread %s", rest + 7,
                              session_id(s));
        if (get)
            return reply_state(srv, conn, s, seq);
    } else if (!strcmp(rest, "/history")) {
        if (post)
            return history_post(srv, conn, s, body);
        if (get)
            return history(srv, conn, s, lg__query_count(conn, "limit", 10),
                           checkpoint_seq(MHD_lookup_connection_value(
                               conn, MHD_GET_ARGUMENT_KIND, "before")));
    } else {
        return lg__detail(conn, 404, "Not Found");
    }
    return lg__detail(conn, 405, "Method Not Allowed");
}
