/*
 * session_import - an exported log, checked and replayed. See session_import.h.
 */
#include "server/session_import.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state_machine/rx_input.h"
#include "state_machine/rx_json.h"
#include "state_machine/rx_machine.h"

bool session_title_is_valid(const char *title)
{
    size_t chars = 0;

    if (rx_text_is_blank(title))
        return false;
    /* Code points: every byte that does not continue a UTF-8 sequence. */
    for (const unsigned char *p = (const unsigned char *)title; *p; p++)
        if ((*p & 0xC0) != 0x80 && ++chars > SESSION_TITLE_MAX)
            return false;
    return true;
}

static int refuse(struct session_import_error *e, long index, const char *reason,
                  const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int refuse(struct session_import_error *e, long index, const char *reason,
                  const char *field, const char *fmt, ...)
{
    va_list ap;

    e->index = index;
    e->reason = reason;
    e->field = field;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* The document's own fields: format, version, title, inputs. */
static int check_document(json_t *doc, struct session_import *imp, json_t **inputs,
                          struct session_import_error *e)
{
    json_t *format = json_object_get(doc, "format"), *title;

    if (!json_is_object(doc))
        return refuse(e, -1, "invalid", NULL, "the document must be a JSON object");
    if (!json_is_string(format) ||
        strcmp(json_string_value(format), SESSION_EXPORT_FORMAT))
        return refuse(e, -1, "invalid", "format",
                      "'format' must be \"" SESSION_EXPORT_FORMAT "\"");
    if (!json_is_integer(json_object_get(doc, "version")) ||
        json_integer_value(json_object_get(doc, "version")) != SESSION_EXPORT_VERSION)
        return refuse(e, -1, "invalid", "version", "'version' must be %d",
                      SESSION_EXPORT_VERSION);
    title = json_object_get(doc, "title");
    if (title && !json_is_null(title)) {
        if (!json_is_string(title) || !session_title_is_valid(json_string_value(title)))
            return refuse(e, -1, "invalid", "title",
                          "'title' must be null or a string that is not blank, of at "
                          "most %d characters",
                          SESSION_TITLE_MAX);
        if (!(imp->title = strdup(json_string_value(title))))
            return -ENOMEM;
    }
    *inputs = json_object_get(doc, "inputs");
    if (!json_is_array(*inputs))
        return refuse(e, -1, "invalid", "inputs",
                      "'inputs' must be an array of {\"seq\", \"input\"}");
    return 0;
}

/* Entry `i`: parsed, applied, and (keep) encoded at offs[i]. */
static int replay_one(struct session_import *imp, size_t i, json_t *v, bool keep,
                      size_t *offs, struct session_import_error *e)
{
    json_t *j = json_object_get(v, "input"), *seq = json_object_get(v, "seq");
    struct rx_error why = {""};
    const char *field = NULL;
    struct rx_outcome out;
    struct rx_input in;
    long at = (long)i;
    int err;

    if (!json_is_object(v) || !json_is_object(j))
        return refuse(e, at, "invalid", "input", "entry %zu has no 'input' object", i);
    if (seq && (!json_is_integer(seq) || json_integer_value(seq) != (json_int_t)i + 1))
        return refuse(e, at, "invalid", "seq",
                      "entry %zu: 'seq' must be %zu (the log numbers its inputs from 1)",
                      i, i + 1);
    err = rx_input_parse(j, &in, &field, &why);
    if (err == -ENOMEM)
        return err;
    if (err)
        return refuse(e, at, "invalid", field, "input %zu: %s", i, why.text);
    if (!rx_input_calls_depth_ok(&in)) {
        rx_input_release(&in);
        return refuse(e, at, "invalid", "toolCalls",
                      "input %zu: tool arguments nest deeper than %d levels", i,
                      RX_JSON_DEPTH_MAX);
    }
    if ((err = rx_machine_apply(&imp->state, &in, &out)))
        goto out_release;
    if (out.verdict == RX_UNCHANGED) {
        err = refuse(e, at, "unchanged", NULL,
                     "input %zu changes nothing: a log holds only inputs that did", i);
    } else if (out.verdict == RX_REJECTED && out.reason == RX_REASON_INVALID) {
        err = refuse(e, at, "invalid", out.field, "input %zu: '%s' is invalid", i,
                     out.field ? out.field : "input");
    } else if (out.verdict == RX_REJECTED) {
        err = refuse(e, at, rx_reason_name(out.reason), NULL,
                     "input %zu does not apply to the state before it (%s)", i,
                     rx_reason_name(out.reason));
    } else if (keep) {
        offs[i] = imp->texts.len;
        err = rx_input_encode(&in, &imp->texts) ? -ENOMEM : 0;
    }
out_release:
    rx_input_release(&in);
    return err;
}

/* The store's view of the log: the texts cut at their offsets, and the state. */
static int keep_log(struct session_import *imp, const size_t *offs)
{
    imp->inputs = calloc(imp->n ? imp->n : 1, sizeof(*imp->inputs));
    if (!imp->inputs)
        return -ENOMEM;
    for (size_t i = 0; i < imp->n; i++) {
        imp->inputs[i].data = imp->texts.data + offs[i];
        imp->inputs[i].len = (i + 1 < imp->n ? offs[i + 1] : imp->texts.len) - offs[i];
    }
    if (imp->n && rx_state_encode(&imp->state, &imp->snap))
        return -ENOMEM;
    imp->snapshot.data = imp->snap.data;
    imp->snapshot.len = imp->snap.len;
    return 0;
}

int session_import_replay(json_t *doc, bool keep, struct session_import *imp,
                          struct session_import_error *e)
{
    json_t *inputs = NULL, *v;
    size_t *offs = NULL, i;
    int err;

    memset(imp, 0, sizeof(*imp));
    rx_buf_init(&imp->texts, RX_BUF_STATE_MAX);
    rx_buf_init(&imp->snap, RX_BUF_STATE_MAX);
    if ((err = rx_state_init(&imp->state))) {
        imp->state_moved = true; /* nothing to release */
        return err;
    }
    if ((err = check_document(doc, imp, &inputs, e)))
        return err;
    imp->n = json_array_size(inputs);
    if (keep && !(offs = calloc(imp->n ? imp->n : 1, sizeof(*offs))))
        return -ENOMEM;
    json_array_foreach(inputs, i, v)
    {
        if ((err = replay_one(imp, i, v, keep, offs, e)))
            goto out_free;
    }
    if (keep)
        err = keep_log(imp, offs);
out_free:
    free(offs);
    return err;
}

void session_import_release(struct session_import *imp)
{
    if (!imp->state_moved)
        rx_state_release(&imp->state);
    imp->state_moved = true;
    free(imp->inputs);
    imp->inputs = NULL;
    free(imp->title);
    imp->title = NULL;
    rx_buf_release(&imp->texts);
    rx_buf_release(&imp->snap);
}
