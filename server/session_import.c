/*
 * session_import - an exported log, checked and replayed. See session_import.h.
 */
#include "server/session_import.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/toolkit.h"
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

void session_stamp_policies(const struct rx_state *st, const struct toolkit *tools,
                            struct rx_input *in)
{
    for (size_t i = 0; in->type == RX_IN_BRAIN_CALL_TOOLS && i < in->n_calls; i++) {
        struct rx_input_call *c = &in->calls[i];
        enum rx_policy p = rx_state_tool_policy(st, c->name);

        if (p == RX_POLICY_UNSET &&
            (!tools || rx_policy_parse(toolkit_policy(tools, c->name), &p)))
            p = RX_POLICY_AUTO;
        c->policy = p;
    }
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

/* The document's own fields (borrowed; NULL when absent), inputs apart. */
static int check_fields(json_t *format, json_t *version, json_t *title,
                        struct session_import *imp, struct session_import_error *e)
{
    if (!json_is_string(format) ||
        strcmp(json_string_value(format), SESSION_EXPORT_FORMAT))
        return refuse(e, -1, "invalid", "format",
                      "'format' must be \"" SESSION_EXPORT_FORMAT "\"");
    if (!json_is_integer(version) ||
        json_integer_value(version) != SESSION_EXPORT_VERSION)
        return refuse(e, -1, "invalid", "version", "'version' must be %d",
                      SESSION_EXPORT_VERSION);
    if (title && !json_is_null(title)) {
        if (!json_is_string(title) || !session_title_is_valid(json_string_value(title)))
            return refuse(e, -1, "invalid", "title",
                          "'title' must be null or a string that is not blank, of at "
                          "most %d characters",
                          SESSION_TITLE_MAX);
        if (!(imp->title = strdup(json_string_value(title))))
            return -ENOMEM;
    }
    return 0;
}

static int inputs_not_array(struct session_import_error *e)
{
    return refuse(e, -1, "invalid", "inputs",
                  "'inputs' must be an array of {\"seq\", \"input\"}");
}

/* Room for the offset of entry `i` (keep_log). 0 or -ENOMEM. */
static int offs_reserve(struct session_import *imp, size_t i)
{
    size_t cap = imp->offs_cap ? imp->offs_cap : 1024, *offs;

    if (i < imp->offs_cap)
        return 0;
    while (cap <= i)
        cap *= 2;
    if (!(offs = realloc(imp->offs, cap * sizeof(*offs))))
        return -ENOMEM;
    imp->offs = offs;
    imp->offs_cap = cap;
    return 0;
}

/* Entry `i`: parsed, applied, and (keep) encoded at offs[i]. */
static int replay_one(struct session_import *imp, size_t i, json_t *v,
                      struct session_import_error *e)
{
    bool keep = imp->keep_log;
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
    /* Today's policies, as the live API stamps them: a document never says
       which calls run without asking (SPEC 3.6). */
    session_stamp_policies(&imp->state, imp->tools, &in);
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
    } else if (keep && !(err = offs_reserve(imp, i))) {
        imp->offs[i] = imp->texts.len;
        err = rx_input_encode(&in, &imp->texts) ? -ENOMEM : 0;
    }
out_release:
    rx_input_release(&in);
    return err;
}

/* The store's view of the log: the texts cut at their offsets, and the state. */
static int keep_log(struct session_import *imp)
{
    const size_t *offs = imp->offs;

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

int session_import_init(struct session_import *imp, const struct toolkit *tools,
                        bool keep_log)
{
    int err;

    memset(imp, 0, sizeof(*imp));
    imp->tools = tools;
    imp->keep_log = keep_log;
    rx_buf_init(&imp->texts, RX_BUF_STATE_MAX);
    rx_buf_init(&imp->snap, RX_BUF_STATE_MAX);
    if ((err = rx_state_init(&imp->state)))
        imp->state_moved = true; /* nothing to release */
    return err;
}

/* Every SESSION_IMPORT_CHECK_EVERY inputs: the caller may call it off. */
#define SESSION_IMPORT_CHECK_EVERY 1024

/* One more entry of "inputs" (parsed: borrowed), then the caller's check. */
static int replay_next(struct session_import *imp, json_t *v,
                       struct session_import_error *e)
{
    int err = replay_one(imp, imp->n, v, e);

    if (!err)
        imp->n++;
    if (!err && imp->check && !(imp->n % SESSION_IMPORT_CHECK_EVERY))
        err = imp->check(imp->check_arg);
    return err;
}

int session_import_replay(json_t *doc, struct session_import *imp,
                          struct session_import_error *e)
{
    json_t *inputs, *v;
    size_t i;
    int err;

    if (!json_is_object(doc))
        return refuse(e, -1, "invalid", NULL, "the document must be a JSON object");
    if ((err =
             check_fields(json_object_get(doc, "format"), json_object_get(doc, "version"),
                          json_object_get(doc, "title"), imp, e)))
        return err;
    if (!json_is_array(inputs = json_object_get(doc, "inputs")))
        return inputs_not_array(e);
    json_array_foreach(inputs, i, v)
    {
        if ((err = replay_next(imp, v, e)))
            return err;
    }
    return imp->keep_log ? keep_log(imp) : 0;
}

/* ---- the document as text, read input by input ------------------------------ */

static size_t skip_ws(const char *t, size_t i, size_t n)
{
    while (i < n && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r'))
        i++;
    return i;
}

/*
 * Where the JSON value at t[i] ends: past its closing quote or bracket, or,
 * for a number or a literal, at the first byte that cannot continue it. Only
 * a boundary: rx_json_parse judges the bytes. Strings are skipped with their
 * escapes, so brackets inside them do not count. i when nothing is there.
 */
static size_t value_end(const char *t, size_t i, size_t n)
{
    size_t depth = 0;

    for (; i < n; i++) {
        char c = t[i];

        if (c == '"') {
            for (i++; i < n && t[i] != '"'; i++)
                if (t[i] == '\\')
                    i++;
            if (i >= n)
                return n;
            if (!depth)
                return i + 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (!depth)
                return i;
            if (!--depth)
                return i + 1;
        } else if (!depth && (c == ',' || c == ':' || c == ' ' || c == '\t' ||
                              c == '\n' || c == '\r')) {
            return i;
        }
    }
    return n;
}

static int unreadable(struct session_import_error *e, const char *what, size_t at)
{
    return refuse(e, -1, "invalid", NULL, "the document cannot be read: %s at byte %zu",
                  what, at);
}

/* The value t[from, to) parsed (any JSON value). 0, -EINVAL (e) or -ENOMEM. */
static int parse_span(const char *t, size_t from, size_t to, json_t **out,
                      struct session_import_error *e)
{
    struct rx_error why = {""};
    int err = rx_json_parse(t + from, to - from, RX_JSON_ANY, out, &why);

    if (err == -EINVAL)
        return refuse(e, -1, "invalid", NULL,
                      "the document cannot be read: at byte %zu: %s", from, why.text);
    return err;
}

/* The entries of the "inputs" array t[i, end) (from its '[' to its ']'), one at a
   time. */
static int replay_inputs(const char *t, size_t i, size_t end, struct session_import *imp,
                         struct session_import_error *e)
{
    if (t[i] != '[')
        return inputs_not_array(e);
    i = skip_ws(t, i + 1, end);
    if (i + 1 == end && t[i] == ']')
        return 0;
    for (;;) {
        size_t to = value_end(t, i, end);
        json_t *v;
        int err;

        if (to == i)
            return unreadable(e, "an entry of 'inputs' expected", i);
        if ((err = parse_span(t, i, to, &v, e)))
            return err;
        err = replay_next(imp, v, e);
        json_decref(v);
        if (err)
            return err;
        i = skip_ws(t, to, end);
        if (i + 1 == end && t[i] == ']')
            return 0;
        if (i >= end || t[i] != ',')
            return unreadable(e, "',' or ']' expected in 'inputs'", i);
        i = skip_ws(t, i + 1, end);
    }
}

/*
 * The top object's members: every value is checked as JSON, and the last of
 * equal keys wins (as rx_json_parse would have it); "inputs" is only located
 * here and replayed once the document's own fields are known to be right.
 */
int session_import_replay_text(const char *t, size_t n, struct session_import *imp,
                               struct session_import_error *e)
{
    json_t *format = NULL, *version = NULL, *title = NULL;
    size_t i = skip_ws(t, 0, n), inputs = SIZE_MAX, inputs_end = 0;
    bool member_due = false; /* after a ',' */
    int err = 0;

    if (i >= n || t[i] != '{')
        return refuse(e, -1, "invalid", NULL, "the document must be a JSON object");
    i = skip_ws(t, i + 1, n);
    while (!err && i < n && (t[i] != '}' || member_due)) {
        size_t kend = value_end(t, i, n), vend;
        json_t *key = NULL, *val = NULL, **slot = NULL;
        const char *k;

        if (t[i] != '"' || (err = parse_span(t, i, kend, &key, e))) {
            err = err ? err : unreadable(e, "a member name expected", i);
            break;
        }
        k = json_string_value(key);
        i = skip_ws(t, kend, n);
        if (i >= n || t[i] != ':') {
            json_decref(key);
            err = unreadable(e, "':' expected", i);
            break;
        }
        i = skip_ws(t, i + 1, n);
        vend = value_end(t, i, n);
        if (vend == i) {
            err = unreadable(e, "a value expected", i);
        } else if (!strcmp(k, "inputs")) {
            inputs = i; /* checked as it is replayed */
            inputs_end = vend;
        } else if (!(err = parse_span(t, i, vend, &val, e))) {
            slot = !strcmp(k, "format")    ? &format
                   : !strcmp(k, "version") ? &version
                   : !strcmp(k, "title")   ? &title
                                           : NULL;
            if (slot) {
                json_decref(*slot);
                *slot = val;
            } else {
                json_decref(val);
            }
        }
        json_decref(key);
        i = skip_ws(t, vend, n);
        member_due = !err && i < n && t[i] == ',';
        if (member_due)
            i = skip_ws(t, i + 1, n);
        else if (!err && (i >= n || t[i] != '}'))
            err = unreadable(e, "',' or '}' expected", i);
    }
    if (!err && (i >= n || skip_ws(t, i + 1, n) != n))
        err = unreadable(e, "the object does not end the document", i);
    if (!err)
        err = check_fields(format, version, title, imp, e);
    if (!err && inputs == SIZE_MAX)
        err = inputs_not_array(e);
    if (!err)
        err = replay_inputs(t, inputs, inputs_end, imp, e);
    if (!err && imp->keep_log)
        err = keep_log(imp);
    json_decref(format);
    json_decref(version);
    json_decref(title);
    return err;
}

void session_import_release(struct session_import *imp)
{
    if (!imp->state_moved)
        rx_state_release(&imp->state);
    imp->state_moved = true;
    free(imp->inputs);
    imp->inputs = NULL;
    free(imp->offs);
    imp->offs = NULL;
    free(imp->title);
    imp->title = NULL;
    rx_buf_release(&imp->texts);
    rx_buf_release(&imp->snap);
}
