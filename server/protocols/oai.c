/*
 * oai - the OpenAI-compatible API (SPEC 4.3). See oai.h.
 *
 * This file routes, checks requests (server/protocols/oai_wire) and finds the session
 * a chat completion goes to; server/protocols/oai_chat runs it and answers.
 *
 * Continuity: OpenAI clients resend the whole conversation each turn. When a
 * completion ends, the fingerprint of the conversation as the client will
 * resend it (its messages, then the answer it was given) is remembered with
 * the session (server/protocols/oai_memo). A request whose history (every message
 * before its trailing user messages) has a remembered fingerprint continues
 * that session: only the new user text is posted. When that session has
 * moved on since (the client edited an earlier turn, another client
 * continued it), it is forked at the remembered point instead, so the new
 * turn follows exactly the history the client sent. Otherwise a new session
 * is made: with a history, by importing it (the system messages as its
 * system prompt, the user and assistant turns as messages, tool blocks cut
 * out), so the agent sees the earlier turns; without, a fresh session whose
 * system prompt, when the request has one, is set by a user-configure.
 * X-Reflexor-Session names a session outright; its id comes back in that
 * header on every chat answer.
 */
#include "server/protocols/oai.h"
#include "server/protocols/oai_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "base/now.h"
#include "server/relay.h"
#include "server/reply.h"
#include "server/session.h"
#include "server/session_import.h"
#include "server/session_table.h"

static struct oai_memo memo;
static pthread_once_t memo_once = PTHREAD_ONCE_INIT;
static bool memo_ready;

static void memo_init_once(void)
{
    oai_memo_init(&memo);
    memo_ready = true;
}

void oai_shutdown(void)
{
    if (memo_ready)
        oai_memo_release(&memo);
    memo_ready = false;
}

static enum MHD_Result queue_json(struct MHD_Connection *conn, unsigned status,
                                  const char *data, size_t len, const char *sid,
                                  const char *allow)
{
    struct MHD_Response *r = reply_response("application/json", data, len);

    if (r && sid)
        MHD_add_response_header(r, OAI_SESSION_HEADER, sid);
    if (r && allow)
        MHD_add_response_header(r, "Allow", allow);
    return reply_queue(conn, status, r);
}

static enum MHD_Result reply_error_allow(struct MHD_Connection *conn,
                                         const struct oai_error *e, const char *sid,
                                         const char *allow)
{
    struct rx_buf b;
    enum MHD_Result ret;

    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    if (oai_error_encode(&b, e)) {
        rx_buf_release(&b);
        return reply_out_of_memory(conn);
    }
    ret = queue_json(conn, e->status, b.data, b.len, sid, allow);
    rx_buf_release(&b);
    return ret;
}

enum MHD_Result oai__reply_error(struct MHD_Connection *conn, const struct oai_error *e,
                                 const char *sid)
{
    return reply_error_allow(conn, e, sid, NULL);
}

enum MHD_Result oai__reply_buf(struct MHD_Connection *conn, unsigned status,
                               struct rx_buf *b, const char *sid)
{
    enum MHD_Result ret =
        queue_json(conn, status, b->data ? b->data : "", b->len, sid, NULL);

    rx_buf_release(b);
    return ret;
}

static enum MHD_Result fail(struct MHD_Connection *conn, unsigned status,
                            const char *type, const char *param, const char *code,
                            const char *message)
{
    struct oai_error e;

    oai_error_set(&e, 0, status, type, param, code, "%s", message);
    return oai__reply_error(conn, &e, NULL);
}

static enum MHD_Result not_allowed(struct MHD_Connection *conn, const char *allow)
{
    struct oai_error e;

    oai_error_set(&e, 0, 405, "invalid_request_error", NULL, "method_not_allowed",
                  "this route takes %s", allow);
    return reply_error_allow(conn, &e, NULL, allow);
}

/* ---- models ------------------------------------------------------------------ */

static enum MHD_Result models(struct door *srv, struct MHD_Connection *conn,
                              const char *id)
{
    const struct config *cfg = srv->cfg;
    int64_t created = srv->started_ms / 1000;
    struct oai_error e;
    struct rx_buf b;
    size_t i;

    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    if (!id) {
        if (oai_models_encode(&b, (const char *const *)cfg->oai_models, cfg->n_oai_models,
                              created))
            goto out_oom;
        return oai__reply_buf(conn, 200, &b, NULL);
    }
    for (i = 0; i < cfg->n_oai_models && strcmp(cfg->oai_models[i], id); i++)
        ;
    if (i == cfg->n_oai_models) {
        oai_error_set(&e, 0, 404, "invalid_request_error", "model", "model_not_found",
                      "The model does not exist");
        return oai__reply_error(conn, &e, NULL);
    }
    if (oai_model_encode(&b, cfg->oai_models[i], created))
        goto out_oom;
    return oai__reply_buf(conn, 200, &b, NULL);

out_oom:
    rx_buf_release(&b);
    return fail(conn, 500, "server_error", NULL, NULL, "out of memory");
}

/* ---- which session ------------------------------------------------------------ */

static void read_user_count(void *arg, const struct rx_state *st, int64_t seq,
                            const struct event_session *entry)
{
    (void)seq;
    (void)entry;
    *(size_t *)arg = st->user.len;
}

/* A session's failure to be made, in OpenAI's shape. */
static enum MHD_Result made_error(struct MHD_Connection *conn, int err)
{
    switch (err) {
    case -ENFILE:
        return fail(conn, 429, "rate_limit_error", NULL, "session_limit",
                    "the server holds as many sessions as it may (limits.max_sessions)");
    case -EDQUOT:
        return fail(conn, 429, "rate_limit_error", NULL, "session_limit",
                    "you own as many sessions as a user may (limits.user_sessions)");
    case -ENOSPC:
        return fail(conn, 507, "server_error", NULL, "storage_full",
                    "no room left in the store");
    case -EIO:
        return fail(conn, 503, "server_error", NULL, "store_unavailable",
                    "the store is unusable; see /healthz");
    default:
        return fail(conn, 500, "server_error", NULL, NULL, "out of memory");
    }
}

/*
 * The remembered session of this history, as a NEW reference: the session
 * itself while it is where the answer left it, else a fork of it at that
 * point. NULL when there is none (or the fork is impossible: no log).
 */
static struct session *continued(struct door *srv, const struct principal *who,
                                 const struct oai_fp *hist)
{
    struct oai_memo_entry e;
    struct session *s, *fork = NULL;
    size_t users = 0;
    int err;

    /* Another's conversation is not continued, even with the same words. */
    if (!oai_memo_get(&memo, hist, &e) ||
        !(s = session_table_get_as(srv->sessions, e.sid, who)))
        return NULL;
    if (!session_read(s, read_user_count, &users) && users == e.n_user)
        return s;
    session_unref(s);
    err = session_table_fork(srv->sessions, e.sid, e.seq, who, &fork);
    if (err) {
        log_info(
            "openai: session %s moved on and cannot be forked (%s); a new one starts",
            e.sid, strerror(-err));
        return NULL;
    }
    log_info("openai: session %s moved on; continuing its fork %s", e.sid,
             session_id(fork));
    return fork;
}

/* A new session holding the request's history. 0 and *out, or a negative errno. */
static int import_history(struct door *srv, const struct principal *who,
                          const struct oai_request *req, const char *system,
                          struct session **out)
{
    struct session_import_error ie;
    json_t *doc = oai_history_doc(req, system, now_wall_ms() - 2 * (int64_t)req->n - 2);
    int err;

    if (!doc)
        return -ENOMEM;
    err = session_table_import(srv->sessions, doc, who, &ie, out);
    json_decref(doc);
    if (err == -EINVAL)
        log_warn("openai: the history was refused at input %ld: %s", ie.index,
                 ie.message);
    return err;
}

/* The inputs of the run: [user-configure], user-send-message. */
static int make_inputs(const struct oai_request *req, const char *system,
                       struct rx_input in[2], size_t *n)
{
    memset(in, 0, 2 * sizeof(*in));
    *n = 0;
    if (system) {
        in[0].type = RX_IN_USER_CONFIGURE;
        in[0].settings_named = RX_SETTING_SYSTEM_PROMPT;
        if (!(in[0].settings.system_prompt = strdup(system)))
            return -ENOMEM;
        (*n)++;
    }
    in[*n].type = RX_IN_USER_SEND_MESSAGE;
    if (!(in[*n].content = oai_request_turn(req))) {
        for (size_t i = 0; i < *n; i++)
            rx_input_release(&in[i]);
        return -ENOMEM;
    }
    (*n)++;
    return 0;
}

/*
 * A user's conversations are remembered apart from everyone else's (SPEC
 * 4.4): the fingerprint ends with its owner's name, so one user's words
 * never find, or replace, another's session. Admins' fingerprints are the
 * words alone, as before users existed (they see every session anyway).
 */
static int salt(const struct principal *who, struct oai_fp *fp)
{
    return who->admin ? 0 : oai_fp_add(fp, OAI_ROLE_TOOL, who->name);
}

/* This route's path from the root, into `url` (512 bytes). */
static const char *url_of(const struct config *cfg, char *url)
{
    snprintf(url, 512, "%s/chat/completions", cfg->oai_prefix);
    return url;
}

static enum MHD_Result chat(struct door *srv, const struct principal *who,
                            struct MHD_Connection *conn, const struct rx_buf *body,
                            struct park **slot)
{
    const struct config *cfg = srv->cfg;
    const char *named =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, OAI_SESSION_HEADER);
    struct oai_request req;
    struct oai_fp hist, all;
    struct rx_input in[2];
    struct session *s = NULL;
    struct oai_error e;
    enum MHD_Result ret;
    char *system = NULL;
    bool oom = false, fresh = false;
    char url[512];
    size_t n = 0;
    int err;

    pthread_once(&memo_once, memo_init_once);
    if (door_is_stopping(srv))
        return fail(conn, 503, "server_error", NULL, NULL, "the server is stopping");
    if (oai_request_parse(body->data, body->len, (const char *const *)cfg->oai_models,
                          cfg->n_oai_models, &req, &e))
        return oai__reply_error(conn, &e, NULL);
    if (oai_fp_messages(&req, req.turn, &hist) || oai_fp_messages(&req, req.n, &all) ||
        salt(who, &hist) || salt(who, &all) ||
        (system = oai_request_system(&req, &oom), oom)) {
        ret = fail(conn, 500, "server_error", NULL, NULL, "out of memory");
        goto out_release;
    }
    if (!session_table_may_work(srv->sessions, who)) {
        ret = oai__too_many(conn,
                            "your sessions run as many effects as a user may "
                            "(limits.user_running_effects)",
                            1);
        goto out_release;
    }
    if (named) {
        if (!(s = session_table_get_as(srv->sessions, named, who))) {
            ret = fail(conn, 404, "invalid_request_error", NULL, "session_not_found",
                       "no session with the id given in X-Reflexor-Session");
            goto out_release;
        }
    } else if (oai_request_has_turns(&req) && (s = continued(srv, who, &hist))) {
        /* continued: only the new turn is posted */
    } else if (oai_request_has_turns(&req)) {
        if ((err = import_history(srv, who, &req, system, &s))) {
            ret = err == -EINVAL
                      ? fail(conn, 400, "invalid_request_error", "messages",
                             "invalid_value", "the conversation could not be rebuilt")
                      : made_error(conn, err);
            goto out_release;
        }
    } else {
        if ((err = session_table_create_session(srv->sessions, NULL, who, &s))) {
            ret = made_error(conn, err);
            goto out_release;
        }
        fresh = true;
    }
    if (!fresh && relay_route(srv, who, conn, session_id(s), "POST", url_of(cfg, url),
                              body, slot, &ret))
        goto out_release; /* a run lives where its session's inputs are applied (6.1) */
    if (make_inputs(&req, fresh ? system : NULL, in, &n)) {
        ret = fail(conn, 500, "server_error", NULL, NULL, "out of memory");
        goto out_release;
    }
    ret = oai__chat_start(srv, conn, s, &memo, &req, &all, in, n, slot);

out_release:
    if (s)
        session_unref(s);
    free(system);
    oai_request_release(&req);
    return ret;
}

/* ---- routes ------------------------------------------------------------------ */

static enum MHD_Result oai_route(struct door *srv, const struct principal *who,
                                 struct MHD_Connection *conn, const char *method,
                                 const char *path, const struct rx_buf *body,
                                 struct park **slot)
{
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), plain = true;
    char msg[160];

    if (!strcmp(path, "/models"))
        return get ? models(srv, conn, NULL) : not_allowed(conn, "GET");
    if (!strncmp(path, "/models/", 8) && path[8] && !strchr(path + 8, '/'))
        return get ? models(srv, conn, path + 8) : not_allowed(conn, "GET");
    if (!strcmp(path, "/chat/completions"))
        return strcmp(method, "POST") ? not_allowed(conn, "POST")
                                      : chat(srv, who, conn, body, slot);
    /* Quote the path only when it is plain ASCII: the answer must be JSON. */
    for (const char *p = path; *p; p++)
        plain = plain && (unsigned char)*p >= 0x20 && (unsigned char)*p <= 0x7e;
    snprintf(msg, sizeof(msg), "Unknown request URL: %s %.100s", method,
             plain ? path : "(a path that is not plain ASCII)");
    return fail(conn, 404, "invalid_request_error", NULL, "unknown_url", msg);
}

static const char *oai_prefix(const struct config *cfg)
{
    return cfg->oai_prefix;
}

static enum MHD_Result oai_unauthorized(struct MHD_Connection *conn)
{
    return fail(conn, 401, "invalid_request_error", NULL, "invalid_api_key",
                "Incorrect API key provided (the server's auth.token)");
}

static enum MHD_Result oai_too_large(struct MHD_Connection *conn, const char *why)
{
    return fail(conn, 413, "invalid_request_error", NULL, "request_too_large", why);
}

enum MHD_Result oai__too_many(struct MHD_Connection *conn, const char *why, int retry_s)
{
    return reply_json_retry(conn, 429,
                            json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", why,
                                      "type", "rate_limit_error", "param", "code",
                                      "rate_limit_exceeded"),
                            retry_s);
}

const struct door_ops oai_door = {
    "openai",      oai_prefix,    oai_route, oai_unauthorized,
    oai_too_large, oai__too_many, false};
