/*
 * lg_runs - the run routes of the LangGraph subset, under
 * /threads/<tid>/runs: create (background, stream, wait), list, get,
 * delete, join (stream with Last-Event-ID, or wait), cancel.
 *
 * A run's inputs come from its body: `input.messages` posts the last human
 * message (user-send-message); `command.resume` answers the pending
 * interrupt (one user-review-tool-call per call awaiting approval). The
 * body's other fields are kept in the run's kwargs and otherwise ignored:
 * config, context, checkpoint (a run always goes on from the thread's
 * newest state), interrupt_before/after, webhook.
 * multitask_strategy (a run while the thread has one): enqueue (default)
 * waits its turn, reject answers 409, interrupt and rollback cancel the
 * runs in flight first (rollback cannot undo the log: it interrupts).
 * Depends on server/protocols/lg_run, server/protocols/lg_msg, server/session_table.
 */
#include "server/protocols/lg_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/protocols/lg_msg.h"
#include "server/protocols/lg_run.h"
#include "server/run.h"
#include "server/session_table.h"

/* stream_mode: a word or a list of words. 0 and *out, or -EINVAL. */
static int parse_modes(json_t *v, unsigned *out, json_t **list)
{
    static const struct {
        const char *name;
        unsigned bit;
    } modes[] = {
        {"values", LG_MODE_VALUES},
        {"updates", LG_MODE_UPDATES},
        {"messages-tuple", LG_MODE_MESSAGES},
        {"custom", LG_MODE_CUSTOM},
        /* Accepted, with no events: Reflexor has nothing to show there. */
        {"messages", 0},
        {"events", 0},
        {"debug", 0},
        {"tasks", 0},
        {"checkpoints", 0},
    };
    json_t *words = json_is_string(v)                        ? json_pack("[O]", v)
                    : json_is_array(v) && json_array_size(v) ? json_incref(v)
                                                             : json_pack("[s]", "values");
    unsigned bits = 0;
    size_t i, k;
    json_t *w;

    if (!words)
        return -ENOMEM;
    if (v && !json_is_null(v) && !json_is_string(v) && !json_is_array(v))
        goto bad;
    json_array_foreach(words, i, w)
    {
        for (k = 0; k < sizeof(modes) / sizeof(*modes); k++)
            if (json_is_string(w) && !strcmp(json_string_value(w), modes[k].name))
                break;
        if (k == sizeof(modes) / sizeof(*modes))
            goto bad;
        bits |= modes[k].bit;
    }
    *out = bits;
    *list = words;
    return 0;
bad:
    json_decref(words);
    return -EINVAL;
}

/* An optional string field: NULL when absent or null; -EINVAL when not a string. */
static int opt_str(json_t *q, const char *key, const char **out)
{
    json_t *v = json_object_get(q, key);

    *out = json_string_value(v);
    return v && !json_is_null(v) && !*out ? -EINVAL : 0;
}

/* What a run request asks, checked. */
struct ask {
    unsigned modes;
    json_t *mode_list; /* NEW */
    enum lg_multitask mt;
    bool cancel_on_disconnect, create_thread;
    json_t *input, *command, *metadata; /* borrowed from the body */
};

static int parse_ask(json_t *q, struct ask *a, char *why, size_t n)
{
    const char *aid, *mt, *disc, *ine;
    json_t *meta = json_object_get(q, "metadata");
    int err;

    memset(a, 0, sizeof(*a));
    a->mt = LG_MT_ENQUEUE;
    if (opt_str(q, "assistant_id", &aid) || !aid)
        return snprintf(why, n, "'assistant_id' (a string) is required"), -EINVAL;
    if (strcmp(aid, LG_ASSISTANT_ID) && strcmp(aid, LG_GRAPH_ID))
        return snprintf(why, n, "No assistant found for \"%s\": this server's is \"%s\"",
                        aid, LG_GRAPH_ID),
               -ENOENT;
    if (opt_str(q, "multitask_strategy", &mt) || (mt && lg_multitask_parse(mt, &a->mt)))
        return snprintf(why, n,
                        "'multitask_strategy' must be reject, enqueue, interrupt "
                        "or rollback"),
               -EINVAL;
    if (opt_str(q, "on_disconnect", &disc) ||
        (disc && strcmp(disc, "cancel") && strcmp(disc, "continue")))
        return snprintf(why, n, "'on_disconnect' must be \"cancel\" or \"continue\""),
               -EINVAL;
    if (opt_str(q, "if_not_exists", &ine) ||
        (ine && strcmp(ine, "create") && strcmp(ine, "reject")))
        return snprintf(why, n, "'if_not_exists' must be \"create\" or \"reject\""),
               -EINVAL;
    if (meta && !json_is_null(meta) && !json_is_object(meta))
        return snprintf(why, n, "'metadata' must be an object"), -EINVAL;
    if ((err = parse_modes(json_object_get(q, "stream_mode"), &a->modes, &a->mode_list)))
        return snprintf(why, n,
                        "'stream_mode' must be values, updates, messages-tuple, "
                        "custom (or a list of them)"),
               err;
    a->cancel_on_disconnect = disc && !strcmp(disc, "cancel");
    a->create_thread = ine && !strcmp(ine, "create");
    a->input = json_object_get(q, "input");
    a->command = json_object_get(q, "command");
    a->metadata = meta;
    if (json_is_null(a->input))
        a->input = NULL;
    if (json_is_null(a->command))
        a->command = NULL;
    /* useStream sends input {} along with a command. */
    if (a->command && a->input && json_object_get(a->input, "messages")) {
        json_decref(a->mode_list);
        return snprintf(why, n, "send either input.messages or command.resume, not both"),
               -EINVAL;
    }
    return 0;
}

/* command.resume against the thread's state, read under its lock. */
struct resume {
    json_t *command;
    struct rx_input *in;
    size_t n;
    int err;
    struct rx_error why;
};

static void resume_read(void *arg, const struct rx_state *st, int64_t seq,
                        const struct event_session *e)
{
    struct resume *r = arg;

    (void)seq;
    (void)e;
    r->err = lg_msg_parse_resume(r->command, st, &r->in, &r->n, &r->why);
}

/* The run's inputs: 0, or an answer already queued in *ret. */
static int inputs_of(struct MHD_Connection *conn, struct session *s, const struct ask *a,
                     struct rx_input **in, size_t *n, enum MHD_Result *ret)
{
    struct rx_error why = {""};
    char *text = NULL, *id = NULL;
    int err;

    if (a->command) {
        struct resume r = {.command = a->command};

        if ((err = session_read(s, resume_read, &r)) || (err = r.err)) {
            *ret = err == -EINVAL ? lg__detail(conn, 422, "%s", r.why.text)
                   : err == -ENOENT
                       ? lg__detail(conn, 409, "%s",
                                    *r.why.text ? r.why.text : "the thread is gone")
                       : lg__detail(conn, 500, "out of memory");
            return err;
        }
        *in = r.in;
        *n = r.n;
        return 0;
    }
    if (!a->input) {
        *ret = lg__detail(conn, 422,
                          "'input' with 'messages' (or 'command' with "
                          "'resume') is required");
        return -EINVAL;
    }
    if ((err = lg_msg_parse_input(a->input, &text, &id, &why))) {
        *ret = err == -EINVAL ? lg__detail(conn, 422, "%s", why.text)
                              : lg__detail(conn, 500, "out of memory");
        return err;
    }
    if (!(*in = calloc(1, sizeof(**in))) || lg_msg_user_input(text, id, *in)) {
        free(*in);
        free(text);
        free(id);
        *ret = lg__detail(conn, 500, "out of memory");
        return -ENOMEM;
    }
    free(text);
    free(id);
    *n = 1;
    return 0;
}

/* The kwargs a run object shows: what was asked, as the real server keeps it. */
static json_t *kwargs_of(json_t *q, const struct ask *a)
{
    json_t *config = json_object_get(q, "config"),
           *context = json_object_get(q, "context");

    return json_pack("{s:O, s:O, s:o, s:O, s:O, s:n, s:n, s:n, s:n, s:b, s:b, s:b}",
                     "input", a->input ? a->input : json_null(), "command",
                     a->command ? a->command : json_null(), "config",
                     json_is_object(config) ? json_incref(config) : json_object(),
                     "context", context ? context : json_null(), "stream_mode",
                     a->mode_list, "interrupt_before", "interrupt_after", "webhook",
                     "feedback_keys", "temporary", 0, "subgraphs", 0, "resumable",
                     json_is_true(json_object_get(q, "stream_resumable")));
}

enum how { HOW_BACKGROUND, HOW_STREAM, HOW_WAIT };

/* POST runs, runs/stream, runs/wait. */
static enum MHD_Result create(struct door *srv, const struct principal *who,
                              struct MHD_Connection *conn, const char *tid,
                              const struct rx_buf *body, enum how how, struct park **slot)
{
    struct rx_input *in = NULL;
    struct session *s = NULL;
    struct lg_run *lr = NULL;
    char why[256], location[256];
    enum MHD_Result ret;
    json_t *q = lg__body(conn, body, &ret);
    struct ask a;
    size_t n = 0;
    int err;

    if (!q)
        return ret;
    if ((err = parse_ask(q, &a, why, sizeof(why)))) {
        json_decref(q);
        return err == -ENOMEM ? lg__detail(conn, 500, "out of memory")
                              : lg__detail(conn, err == -ENOENT ? 404 : 422, "%s", why);
    }
    if (!session_table_may_work(srv->sessions, who)) {
        ret = lg__too_many(conn,
                           "your threads run as many effects as a user may "
                           "(limits.user_running_effects)",
                           1);
        goto out;
    }
    s = session_table_get_as(srv->sessions, tid, who);
    if (!s && a.create_thread &&
        (err = session_table_create_session(srv->sessions, tid, who, &s)) &&
        err != -EEXIST) {
        ret = lg__table_error(conn, err, tid);
        goto out;
    }
    if (!s && !(s = lg__thread(srv, who, conn, tid, &ret)))
        goto out;
    if (inputs_of(conn, s, &a, &in, &n, &ret))
        goto out;
    if (a.mt == LG_MT_REJECT && run_lane_busy(s)) {
        ret = lg__detail(conn, 409,
                         "Thread is already running a task. Wait for it to "
                         "finish or choose a different multitask strategy.");
        goto out;
    }
    if (a.mt == LG_MT_INTERRUPT || a.mt == LG_MT_ROLLBACK)
        lg_run_cancel_thread(tid);
    lr = lg_run_create(srv->cfg, tid, a.modes, a.mt,
                       a.metadata ? json_deep_copy(a.metadata) : json_object(),
                       kwargs_of(q, &a));
    if (!lr) {
        ret = lg__detail(conn, 500, "out of memory");
        goto out;
    }
    err = lg_run_start(lr, s, in, n);
    n = 0; /* moved in, even on failure */
    if (err) {
        ret = err == -ENOENT  ? lg__detail(conn, 404, "Thread with ID %s not found", tid)
              : err == -EBUSY ? lg__detail(conn, 429,
                                           "too many runs wait for thread %s "
                                           "(limits.session_queue_max)",
                                           tid)
                              : lg__detail(conn, 500, "out of memory");
        goto out;
    }
    snprintf(location, sizeof(location), "/threads/%s/runs/%s", tid, lg_run_id(lr));
    if (how == HOW_STREAM)
        ret = lg_run_stream(lr, conn, -1, a.cancel_on_disconnect, location, slot);
    else if (how == HOW_WAIT)
        ret = lg_run_wait(lr, srv, conn, LG_WAIT_VALUES, location, slot);
    else
        ret = lg__reply(conn, 200, lg_run_json(lr), location);
out:
    for (size_t i = 0; i < n; i++)
        rx_input_release(&in[i]);
    free(in);
    lg_run_unref(lr);
    if (s)
        session_unref(s);
    json_decref(a.mode_list);
    json_decref(q);
    return ret;
}

/* Last-Event-ID as a frame id; -1 (replay all) when absent or not one. */
static int64_t last_event_id(struct MHD_Connection *conn)
{
    return door_parse_count(
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Last-Event-ID"));
}

static bool query_true(struct MHD_Connection *conn, const char *key)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, key);

    return v && (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "True"));
}

/* POST runs/<rid>/cancel?wait=0|1&action=interrupt|rollback. */
static enum MHD_Result cancel(struct door *srv, struct MHD_Connection *conn,
                              struct lg_run *lr, const char *location, struct park **slot)
{
    const char *action =
        MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "action");

    if (action && strcmp(action, "interrupt") && strcmp(action, "rollback"))
        return lg__detail(conn, 422, "'action' must be interrupt or rollback");
    lg_run_cancel(lr);
    if (query_true(conn, "wait"))
        return lg_run_wait(lr, srv, conn, LG_WAIT_EMPTY, location, slot);
    return lg__empty(conn, 202);
}

/* One run's routes: `rest` follows /runs/<rid>. */
static enum MHD_Result run_route(struct door *srv, struct MHD_Connection *conn,
                                 const char *method, struct lg_run *lr, const char *tid,
                                 const char *rest, struct park **slot)
{
    bool get = !strcmp(method, "GET");
    char location[256];

    snprintf(location, sizeof(location), "/threads/%s/runs/%s", tid, lg_run_id(lr));
    if (!*rest) {
        if (get)
            return lg__reply(conn, 200, lg_run_json(lr), NULL);
        if (!strcmp(method, "DELETE")) {
            if (!lg_run_is_over(lr))
                return lg__detail(conn, 409, "the run is not over: cancel it first");
            lg_run_forget(lr);
            return lg__empty(conn, 204);
        }
    } else if (!strcmp(rest, "/stream")) {
        if (get)
            return lg_run_stream(lr, conn, last_event_id(conn),
                                 query_true(conn, "cancel_on_disconnect"), location,
                                 slot);
    } else if (!strcmp(rest, "/join")) {
        if (get)
            return lg_run_wait(lr, srv, conn, LG_WAIT_VALUES, NULL, slot);
    } else if (!strcmp(rest, "/cancel")) {
        if (!strcmp(method, "POST"))
            return cancel(srv, conn, lr, location, slot);
    } else {
        return lg__detail(conn, 404, "Not Found");
    }
    return lg__detail(conn, 405, "Method Not Allowed");
}

enum MHD_Result lg_runs_route(struct door *srv, const struct principal *who,
                              struct MHD_Connection *conn, const char *method,
                              const char *tid, const char *rest,
                              const struct rx_buf *body, struct park **slot)
{
    bool post = !strcmp(method, "POST");
    struct session *s;
    struct lg_run *lr;
    enum MHD_Result ret;
    char rid[RX_UUID_LEN];
    size_t n;
    int err;

    if (!*rest) {
        if (post)
            return create(srv, who, conn, tid, body, HOW_BACKGROUND, slot);
        if (strcmp(method, "GET"))
            return lg__detail(conn, 405, "Method Not Allowed");
        if (!(s = lg__thread(srv, who, conn, tid, &ret)))
            return ret;
        session_unref(s);
        {
            long long limit = lg__query_count(conn, "limit", 10);
            long long offset = lg__query_count(conn, "offset", 0);

            if (limit < 1 || offset < 0)
                return lg__detail(conn, 422, "'limit' must be at least 1, 'offset' 0");
            return lg__reply(conn, 200,
                             lg_run_list(srv->cfg, tid,
                                         MHD_lookup_connection_value(
                                             conn, MHD_GET_ARGUMENT_KIND, "status"),
                                         (size_t)limit, (size_t)offset),
                             NULL);
        }
    }
    if (!strcmp(rest, "/stream") || !strcmp(rest, "/wait")) {
        if (!post)
            return lg__detail(conn, 405, "Method Not Allowed");
        return create(srv, who, conn, tid, body, rest[1] == 's' ? HOW_STREAM : HOW_WAIT,
                      slot);
    }
    n = strcspn(rest + 1, "/");
    if (!n || n >= sizeof(rid))
        return lg__detail(conn, 404, "Run not found");
    memcpy(rid, rest + 1, n);
    rid[n] = '\0';
    if (!(s = lg__thread(srv, who, conn, tid, &ret)))
        return ret;
    /* Not in the registry: over, and maybe in the store (SPEC 6.2). */
    err = (lr = lg_run_find(tid, rid)) ? 0 : lg_run_load(srv->cfg, s, rid, &lr);
    session_unref(s);
    if (err == -ENOENT)
        return lg__detail(conn, 404, "Run not found");
    if (err)
        return lg__table_error(conn, err, tid);
    ret = run_route(srv, conn, method, lr, tid, rest + 1 + n, slot);
    lg_run_unref(lr);
    return ret;
}
