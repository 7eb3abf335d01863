/*
 * brain_builtin - the builtin brain as an effect. See brain_builtin.h.
 */
#include "effects/brain_builtin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/builtin_reply.h"
#include "base/idgen.h"
#include "state_machine/rx_alloc.h"
#include "state_machine/rx_context.h"

struct brain_builtin {
    struct brain base; /* first: the runtime holds a struct brain * */
    struct brain_builtin_config cfg;
    char prefix[BRAIN_BUILTIN_PREFIX_MAX + 1];
};

/* ------------------------------------------------------------ the brain */

static int dispatch_input(struct brain_ask *ask, struct rx_input *in)
{
    int rc;

    in->called_brain_at = ask->signals_cut_at;
    rc = ask->dispatch(ask, in);
    rx_input_release(in);
    return rc;
}

static int dispatch_calls(struct brain_ask *ask, json_t *calls)
{
    struct rx_input in = {.type = RX_IN_BRAIN_CALL_TOOLS};
    size_t n = json_array_size(calls), i;
    json_t *c;

    in.calls = rx_malloc(n * sizeof(*in.calls));
    if (!in.calls)
        return -ENOMEM;
    memset(in.calls, 0, n * sizeof(*in.calls));
    in.n_calls = n; /* release copes with the NULLs of a partial fill */
    json_array_foreach(calls, i, c)
    {
        if (rx_input_set_str(&in.calls[i].id,
                             json_string_value(json_object_get(c, "id"))) ||
            rx_input_set_str(&in.calls[i].name,
                             json_string_value(json_object_get(c, "name"))) ||
            rx_input_set_str(&in.calls[i].parameters,
                             json_string_value(json_object_get(c, "arguments")))) {
            rx_input_release(&in);
            return -ENOMEM;
        }
    }
    return dispatch_input(ask, &in);
}

/* What a restarted answer that cannot continue the text shown shows first. */
#define RESTART_MARK "\n\n--- restarted after an interruption ---\n\n"

/*
 * Start (unless resuming), stream in chunks, complete. A resumed answer
 * (SPEC 3.7) continues the text already shown: the builtin brain's text is
 * deterministic, so when the shown text is its beginning, it streams from
 * there on and the complete answer is byte for byte the uninterrupted one;
 * otherwise (a different reply) it follows the shown text after a mark.
 */
static int stream_text(const struct brain_builtin *b, struct brain_ask *ask,
                       const char *text, int delay_ms)
{
    struct rx_input in = {0};
    char id[40], *piece, *whole = NULL;
    const char *mid = ask->resume_message_id, *from = text;
    size_t len = strlen(text), n, max;
    int rc;

    if (!mid) {
        idgen_uuid(id);
        mid = id;
        in.type = RX_IN_BRAIN_SEND_MESSAGE_START;
        if (rx_input_set_str(&in.message_id, mid))
            return -ENOMEM;
        rc = dispatch_input(ask, &in);
        if (rc)
            return rc;
    }
    if (mid && ask->resume_text && ask->resume_len) {
        if (ask->resume_len <= len && !memcmp(text, ask->resume_text, ask->resume_len)) {
            from = text + ask->resume_len;
        } else {
            size_t k = strlen(RESTART_MARK);

            /* Not the text shown: started again after it, and the message
               says so ("restarted": true) as its text does. */
            if (!(whole = malloc(ask->resume_len + k + len + 1)))
                return -ENOMEM;
            memcpy(whole, ask->resume_text, ask->resume_len);
            memcpy(whole + ask->resume_len, RESTART_MARK, k);
            memcpy(whole + ask->resume_len + k, text, len + 1);
            from = whole + ask->resume_len; /* the mark, then the answer */
        }
    }
    /* A character is at most 4 bytes, and a chunk never more than the text. */
    len = strlen(from);
    max = (size_t)b->cfg.chunk_chars < len / 4 + 1 ? (size_t)b->cfg.chunk_chars * 4 : len;
    piece = malloc(max + 1);
    if (!piece) {
        free(whole);
        return -ENOMEM;
    }
    for (const char *s = from; *s; s += n) {
        n = builtin_reply_chunk_len(s, (size_t)b->cfg.chunk_chars);
        if (s != from && delay_ms && ask->sleep_ms && (rc = ask->sleep_ms(ask, delay_ms)))
            goto out_free_piece;
        if (ask->is_cancelled && ask->is_cancelled(ask)) {
            rc = -ECANCELED;
            goto out_free_piece;
        }
        memcpy(piece, s, n);
        piece[n] = '\0';
        if ((rc = ask->chunk(ask, mid, piece)))
            goto out_free_piece;
    }
    in = (struct rx_input){.type = RX_IN_BRAIN_SEND_MESSAGE_COMPLETE,
                           .restarted = whole != NULL};
    if (rx_input_set_str(&in.message_id, mid) ||
        rx_input_set_str(&in.content, whole ? whole : text)) {
        rx_input_release(&in);
        rc = -ENOMEM;
        goto out_free_piece;
    }
    rc = dispatch_input(ask, &in);

out_free_piece:
    free(piece);
    free(whole);
    return rc;
}

/*
 * Compress by the one policy (rx_context_choose_cut): when more than
 * compress_after items follow summaryCutAt, fold all but the newest
 * compress_keep into the summary. 0 (also when the machine refused: answering
 * matters more), -ECANCELED or -ENOMEM.
 */
static int maybe_compress(const struct brain_builtin *b, struct brain_ask *ask)
{
    const struct rx_context_budget budget = {
        .unit = RX_CONTEXT_ITEMS,
        .limit = b->cfg.compress_after,
        .keep = (size_t)b->cfg.compress_keep,
    };
    struct rx_input in = {.type = RX_IN_BRAIN_COMPRESS_HISTORY};
    char *summary = NULL;
    int64_t cut;
    int rc;

    rc = rx_context_choose_cut(ask->view, ask->signals_cut_at, &budget, &cut);
    if (rc || cut == RX_CONTEXT_NO_CUT)
        return rc;
    rc = builtin_reply_summary(ask->view, cut, &summary);
    if (rc)
        return rc;
    in.cut_at = cut;
    rc = rx_input_set_str(&in.text, summary);
    free(summary);
    if (rc) {
        rx_input_release(&in);
        return rc;
    }
    rc = dispatch_input(ask, &in);
    return rc == -EPROTO ? 0 : rc;
}

/* The newest user message the ask sees (after summaryCutAt: in its view), or NULL. */
static const char *last_user_text(const struct brain_ask *ask)
{
    const struct rx_message *best = NULL;

    for (size_t i = 0; i < ask->view->user.len; i++) {
        const struct rx_message *m = &ask->view->user.items[i];

        if (m->received_at <= ask->signals_cut_at &&
            (!best || m->received_at >= best->received_at))
            best = m;
    }
    return best ? best->content : NULL;
}

static int chunk_delay(const struct brain_builtin *b, const struct brain_ask *ask)
{
    const char *t = last_user_text(ask);
    int64_t factor = b->cfg.slow_factor, d;

    if (t && !strncmp(t, "/slow", 5) && factor < BRAIN_BUILTIN_SLOW_FACTOR)
        factor = BRAIN_BUILTIN_SLOW_FACTOR;
    d = (int64_t)b->cfg.chunk_delay_ms * factor;
    return d > BRAIN_BUILTIN_DELAY_MAX_MS ? BRAIN_BUILTIN_DELAY_MAX_MS : (int)d;
}

static int builtin_ask(struct brain *self, struct brain_ask *ask)
{
    const struct brain_builtin *b = (const struct brain_builtin *)self;
    json_t *msgs = NULL, *reply = NULL, *calls;
    char msg[160];
    int rc;

    if (ask->is_cancelled && ask->is_cancelled(ask))
        return -ECANCELED;
    rc = maybe_compress(b, ask);
    if (rc == -ECANCELED)
        return rc;
    if (!rc)
        rc = rx_context_build(ask->view, ask->system_prompt, ask->signals_cut_at, &msgs);
    if (!rc)
        rc = builtin_reply_decide(msgs, b->prefix, &reply);
    if (rc) {
        /* The ask must still end with a terminal input, or the user waits forever. */
        snprintf(msg, sizeof(msg), "[Error] builtin brain: %s", strerror(-rc));
        (void)stream_text(b, ask, msg, 0);
        goto out_decref;
    }
    calls = json_object_get(reply, "tool_calls");
    if (calls)
        rc = dispatch_calls(ask, calls);
    else
        rc = stream_text(b, ask, json_string_value(json_object_get(reply, "content")),
                         chunk_delay(b, ask));

out_decref:
    json_decref(reply);
    json_decref(msgs);
    return rc;
}

static void builtin_destroy(struct brain *self)
{
    free(self);
}

void brain_builtin_config_init(struct brain_builtin_config *cfg)
{
    *cfg = (struct brain_builtin_config){
        .chunk_chars = 4,
        .chunk_delay_ms = 30,
        .slow_factor = 1,
        .compress_after = 40,
        .compress_keep = 6,
        .call_id_prefix = NULL,
    };
}

struct brain *brain_builtin_create(const struct brain_builtin_config *cfg)
{
    struct brain_builtin *b;
    const char *prefix;

    b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    if (cfg)
        b->cfg = *cfg;
    else
        brain_builtin_config_init(&b->cfg);
    prefix = b->cfg.call_id_prefix ? b->cfg.call_id_prefix : "call";
    if (strlen(prefix) > BRAIN_BUILTIN_PREFIX_MAX) {
        free(b);
        return NULL;
    }
    strcpy(b->prefix, prefix);
    b->cfg.call_id_prefix = NULL; /* the caller's string is not ours to keep */
    b->cfg.chunk_chars = b->cfg.chunk_chars < 1 ? 1 : b->cfg.chunk_chars;
    b->cfg.chunk_delay_ms = b->cfg.chunk_delay_ms < 0 ? 0 : b->cfg.chunk_delay_ms;
    b->cfg.slow_factor = b->cfg.slow_factor < 1 ? 1 : b->cfg.slow_factor;
    b->cfg.compress_after = b->cfg.compress_after < 0 ? 0 : b->cfg.compress_after;
    b->cfg.compress_keep = b->cfg.compress_keep < 1 ? 1 : b->cfg.compress_keep;
    b->base.view_messages = rx_context_view_messages(&(struct rx_context_budget){
        .unit = RX_CONTEXT_ITEMS,
        .limit = b->cfg.compress_after,
        .keep = (size_t)b->cfg.compress_keep,
    });
    b->base.name = "builtin";
    b->base.ask = builtin_ask;
    b->base.destroy = builtin_destroy;
    return &b->base;
}
