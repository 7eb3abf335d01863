/*
 * api_import - POST /sessions/import (SPEC 4): an exported document becomes a
 * session. See api_internal.h.
 *
 * A document may be limits.import_max bytes (16 MiB) and 100 000 inputs or
 * more: replaying it takes seconds, which no HTTP thread may spend (every
 * other client of that thread would wait, /healthz included). So the request
 * is parked (server/park) and the replay runs on a thread of its own, made
 * for it, reading the body input by input (session_table_import_text: no
 * tree of the whole document). At most limits.imports_running run at once;
 * one more is answered 429 at once. A shutdown stops a replay within 1024
 * inputs (503), so SIGTERM never waits for a long import.
 *
 * The body belongs to the request (server/http), which lives until its park
 * is finished and answered: the worker reads it, then finishes the park, and
 * never touches it again.
 */
#include "server/api_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "server/config.h"
#include "server/park.h"
#include "server/reply.h"
#include "server/session_import.h"
#include "server/session_table.h"

/* Imports replaying now, in the whole process (atomic). */
static int running;

struct import_job {
    struct park park; /* first: the park's owner is the job */
    int refs;         /* atomic: the request's and the worker's */
    struct door *srv;
    struct principal who; /* the new session's owner */
    const char *text;     /* the request's body, borrowed (above) */
    size_t len;
    /* Written by the worker before park_finish, read by the answer after. */
    int err;
    size_t n;
    struct session_import_error e;
    char sid[SESSION_ID_MAX + 1];
};

static void job_unref(struct import_job *j)
{
    if (__atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL))
        return;
    park_destroy(&j->park);
    free(j);
}

/* 400 for a refused document: the input's index and why, or the document's field. */
static enum MHD_Result import_refused(struct MHD_Connection *conn,
                                      const struct session_import_error *e)
{
    json_t *j = json_pack("{s:s, s:s, s:s}", "error", "invalid-input", "reason",
                          e->reason, "message", e->message);

    if (j && e->index >= 0)
        json_object_set_new(j, "index", json_integer(e->index));
    if (j && e->field)
        json_object_set_new(j, "field", json_string(e->field));
    return reply_json(conn, 400, j);
}

static enum MHD_Result import_answer(struct park *park, struct door *srv,
                                     struct MHD_Connection *conn)
{
    struct import_job *j = (struct import_job *)park;

    (void)srv;
    switch (j->err) {
    case 0:
        return reply_json(conn, 201, json_pack("{s:s}", "id", j->sid));
    case -EINVAL:
        return import_refused(conn, &j->e);
    case -ENOMEM:
        return reply_error(conn, 500, "internal", NULL, "out of memory");
    case -ECANCELED:
        return reply_error(conn, 503, "shutting-down", NULL,
                           "the server is stopping; nothing was imported");
    default:
        return api__store_error(conn, j->err);
    }
}

static void import_release(struct park *park)
{
    job_unref((struct import_job *)park);
}

static const struct park_ops import_ops = {import_answer, import_release};

/* Asked every 1024 inputs: a shutdown calls the replay off. */
static int still_wanted(void *arg)
{
    struct import_job *j = arg;

    return door_is_stopping(j->srv) ? -ECANCELED : 0;
}

static void *import_main(void *arg)
{
    struct import_job *j = arg;
    struct session *s = NULL;

    j->err = session_table_import_text(j->srv->sessions, j->text, j->len, still_wanted, j,
                                       &j->who, &j->e, &s);
    if (!j->err) {
        snprintf(j->sid, sizeof(j->sid), "%s", session_id(s));
        log_info("session %s imported", j->sid);
        session_unref(s);
    }
    __atomic_sub_fetch(&running, 1, __ATOMIC_ACQ_REL);
    park_finish(&j->park);
    job_unref(j);
    return NULL;
}

/* Start the worker; false when no thread could be made (nothing started). */
static bool import_start(struct import_job *j)
{
    pthread_attr_t attr;
    pthread_t th;
    bool ok;

    if (pthread_attr_init(&attr))
        return false;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    ok = !pthread_create(&th, &attr, import_main, j);
    pthread_attr_destroy(&attr);
    return ok;
}

/* The checks answered at once, before a thread is taken. */
static enum MHD_Result import_admit(struct door *srv, struct MHD_Connection *conn,
                                    bool *admitted)
{
    int cap = __atomic_load_n(&srv->cfg->imports_running, __ATOMIC_RELAXED);

    *admitted = false;
    if (door_is_stopping(srv))
        return reply_error(conn, 503, "shutting-down", NULL, "the server is stopping");
    if (!api__content_type_ok(conn))
        return reply_error(
            conn, 415, "unsupported-media-type", NULL,
            "send the exported document as Content-Type: application/json");
    if (__atomic_add_fetch(&running, 1, __ATOMIC_ACQ_REL) > cap) {
        __atomic_sub_fetch(&running, 1, __ATOMIC_ACQ_REL);
        return reply_error(conn, 429, "too-many-imports", NULL,
                           "%d imports are being replayed (limits.imports_running); "
                           "retry shortly",
                           cap);
    }
    *admitted = true;
    return MHD_YES;
}

enum MHD_Result api_sessions_import(struct door *srv, const struct principal *who,
                                    struct MHD_Connection *conn,
                                    const struct rx_buf *body, struct park **slot)
{
    struct import_job *j;
    enum MHD_Result ret;
    bool admitted;

    /* Counted before the stopping check, as every request that may park. */
    park_enter();
    ret = import_admit(srv, conn, &admitted);
    if (!admitted) {
        park_leave();
        return ret;
    }
    if (!(j = calloc(1, sizeof(*j)))) {
        __atomic_sub_fetch(&running, 1, __ATOMIC_ACQ_REL);
        park_leave();
        return reply_error(conn, 500, "internal", NULL, "out of memory");
    }
    park_init(&j->park, &import_ops, conn);
    j->refs = 2;
    j->srv = srv;
    j->who = *who;
    j->text = body->data ? body->data : "";
    j->len = body->len;
    if (!import_start(j)) {
        __atomic_sub_fetch(&running, 1, __ATOMIC_ACQ_REL);
        park_destroy(&j->park);
        free(j);
        park_leave();
        return reply_error(conn, 503, "busy", NULL, "no thread for the import; retry");
    }
    if (!park_suspend(&j->park)) { /* done already: answer now */
        ret = import_answer(&j->park, srv, conn);
        job_unref(j);
        park_leave();
        return ret;
    }
    *slot = &j->park; /* the count taken above stays until it resumes */
    return MHD_YES;
}
