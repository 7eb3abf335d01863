/*
 * session_follow - a session another node owns. See session_follow.h.
 */
#include "server/session_follow.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "server/config.h"
#include "server/session_internal.h"
#include "store/store.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_input.h"
#include "state_machine/rx_json.h"

/* Inputs one catch-up reads per page of the log. */
#define FOLLOW_PAGE 512

bool session_is_follower(struct session *s)
{
    bool f;

    pthread_mutex_lock(&s->lock);
    f = s->follower;
    pthread_mutex_unlock(&s->lock);
    return f;
}

/* Apply one committed input's text. Lock held. 0 or an errno. */
static int apply_text(struct session *s, const char *text, size_t len)
{
    struct rx_error why = {""};
    struct rx_input in;
    int err = store_input_parse(text, len, &in, &why);

    if (err)
        return err;
    err = session__follow_apply(s, &in);
    rx_input_release(&in);
    return err;
}

/*
 * The log as this node cannot fold it (a row it missed between a reload and
 * a notification, or damage): start again from the log. Lock held.
 */
static int reload(struct session *s)
{
    struct rx_state fresh;
    int64_t seq;
    int err = store_session_load(s->table->env.store, s->id, &fresh, &seq);

    if (err)
        return err;
    msgstream_close_all(s->streams);
    msgstream_free_all(&s->streams);
    session_restore(s, &fresh, seq, s->created_at);
    /* Inputs still on their way were applied on the state now gone: they
       are answered as not stored, never as a success. */
    s->fail_err = -ESTALE;
    s->gen++;
    s->broken = false;
    return 0;
}

/* One page of [{"seq":N,"input":{...}}] applied in order. Lock held. */
static int apply_page(struct session *s, const struct rx_buf *page, size_t *n)
{
    json_t *arr, *row;
    size_t i;
    int err = rx_json_parse(page->data, page->len, 0, &arr, NULL);

    *n = 0;
    if (err == -ENOMEM)
        return err;
    if (err || !json_is_array(arr)) {
        json_decref(arr);
        return -EPROTO;
    }
    json_array_foreach(arr, i, row)
    {
        int64_t seq = json_integer_value(json_object_get(row, "seq"));
        struct rx_input in;

        if (seq <= s->seq)
            continue;
        /* The page is parsed once: each input straight from its tree. */
        if (seq != s->seq + 1 ||
            rx_input_parse(json_object_get(row, "input"), &in, NULL, NULL)) {
            err = -EPROTO;
            break;
        }
        err = session__follow_apply(s, &in);
        rx_input_release(&in);
        if (err)
            break;
        (*n)++;
    }
    json_decref(arr);
    return err;
}

/* Catch up from the log. Lock held. */
static int catchup(struct session *s)
{
    struct store *st = s->table->env.store;
    struct rx_buf page;
    int err = 0;

    /* This node's own inputs still on their way (it owned the session a
       moment ago) finish first: the log is folded on what it stored, never
       on what it only applied. One commit at most. */
    session_settle_wait(s);
    /* A write failed while the log could not be read back: the state may hold
       it. Only the log says what is true. */
    if (s->broken && (err = reload(s)))
        return err;

    rx_buf_init(&page, STORE_HISTORY_PAGE_MAX * 2);
    for (;;) {
        int64_t last;
        size_t n;

        rx_buf_reset(&page);
        if ((err = store_history_page(st, s->id, s->seq, FOLLOW_PAGE, &page, &last)) ||
            (err = apply_page(s, &page, &n)) || !n)
            break;
    }
    rx_buf_release(&page);
    if (err == -EPROTO) {
        log_warn("session %s: the log does not follow from input %lld; reloading it",
                 s->id, (long long)s->seq);
        err = reload(s);
    }
    return err;
}

int session_follow_catchup(struct session *s)
{
    int err = 0;

    pthread_mutex_lock(&s->lock);
    if (s->follower && !s->deleted)
        err = catchup(s);
    pthread_mutex_unlock(&s->lock);
    return err;
}

int session_follow_input(struct session *s, int64_t seq, const char *text, size_t len)
{
    int err = 0;

    pthread_mutex_lock(&s->lock);
    if (!s->follower || s->deleted || (seq <= s->seq && !s->broken && !s->pending))
        goto out_unlock;
    session_settle_wait(s); /* as in catchup */
    if (seq <= s->seq && !s->broken)
        goto out_unlock;
    if (seq == s->seq + 1 && text && !s->broken) {
        err = apply_text(s, text, len);
        if (err == -EPROTO)
            err = reload(s);
    } else {
        err = catchup(s);
    }
out_unlock:
    pthread_mutex_unlock(&s->lock);
    return err;
}

void session_follow_token(struct session *s, const char *mid, bool reasoning,
                          size_t offset, const char *delta, size_t len)
{
    struct msgstream *m;

    pthread_mutex_lock(&s->lock);
    if (!s->follower || s->deleted || !(m = msgstream_find(s->streams, mid)))
        goto out_unlock;
    /* Only what is new counts: a new owner that resumes an answer streams
       it again from the start. */
    if (msgstream_append_at(m, reasoning, offset, delta, len))
        log_debug("session %s: streamed text of %s over the bound", s->id, mid);
out_unlock:
    pthread_mutex_unlock(&s->lock);
}

int session_take(struct session *s)
{
    bool took = false;
    int err = 0;

    pthread_mutex_lock(&s->lock);
    if ((!s->follower && !s->broken) || s->deleted)
        goto out_unlock;
    /* Broken: a write failed while the log could not be read back (the
       database was down); now that this node may own it, read it again. */
    if ((err = catchup(s))) /* reloads a broken one first */
        goto out_unlock;
    s->follower = false;
    s->last_stamp = s->state.updated_at;
    /* Answers that were streaming are asked again, under their id; the
       brain streams them from the start, and what this node already shows
       of them is not sent twice (msgstream_append_at). */
    for (struct msgstream *m = s->streams; m; m = m->next) {
        m->streamed[0] = m->streamed[1] = 0;
        m->open_seq = 0;
    }
    for (size_t i = s->state.assistant.settled; i < s->state.assistant.len; i++) {
        const char *id = s->state.assistant.items[i].id;
        struct msgstream *m;

        if (s->state.assistant.items[i].status != RX_STATUS_STREAMING)
            continue;
        if (!(m = msgstream_find(s->streams, id)) && !(m = session_stream_open(s, id))) {
            log_warn("session %s: no buffer for message %s", s->id, id);
            continue;
        }
        /* What the old owner made durable, before anything streams again: a
           follower that missed relayed deltas gets them now (SPEC 3.7). */
        session__text_load(s, m);
    }
    took = true;
out_unlock:
    pthread_mutex_unlock(&s->lock);
    if (took) {
        log_info("session %s: owned here from input %lld", s->id, (long long)s->seq);
        /* Its calls the old owner left started are in doubt (SPEC 3.7). */
        session_recover(s);
    }
    return err;
}

void session_drop(struct session *s)
{
    pthread_mutex_lock(&s->lock);
    if (!s->follower && !s->deleted) {
        s->follower = true;
        runtime_cancel_all(s->rt);
        log_info("session %s: no longer owned here; following the log", s->id);
    }
    pthread_mutex_unlock(&s->lock);
}
