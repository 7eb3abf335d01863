/*
 * oai_wire - the OpenAI Chat Completions wire, pure. See oai_wire.h.
 * The encoders (chunks, completions, errors, models, tool blocks) are in
 * oai_wire_encode.c.
 */
#include "server/protocols/oai_wire.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "state_machine/rx_input.h"
#include "state_machine/rx_json.h"

int oai_error_set(struct oai_error *e, int err, unsigned status, const char *type,
                  const char *param, const char *code, const char *fmt, ...)
{
    va_list ap;

    if (!e)
        return err;
    e->status = status;
    e->type = type;
    e->code = code;
    e->param = NULL;
    if (param) {
        snprintf(e->param_buf, sizeof(e->param_buf), "%s", param);
        e->param = e->param_buf;
    }
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return err;
}

/* A 400 about field `what` of messages[i]. */
static int bad_message(struct oai_error *e, size_t i, const char *what, const char *code,
                       const char *why)
{
    char param[48];

    snprintf(param, sizeof(param), "messages[%zu]%s%s", i, *what ? "." : "", what);
    return oai_error_set(e, -EINVAL, 400, "invalid_request_error", param, code, "%s %s",
                         param, why);
}

static const struct {
    const char *name;
    enum oai_role role;
    bool null_ok; /* content may be null or absent (tool calls only) */
} roles[] = {
    {"system", OAI_ROLE_SYSTEM, false}, {"developer", OAI_ROLE_SYSTEM, false},
    {"user", OAI_ROLE_USER, false},     {"assistant", OAI_ROLE_ASSISTANT, true},
    {"tool", OAI_ROLE_TOOL, true},      {"function", OAI_ROLE_TOOL, true},
};

/*
 * A message's text: the string, or the text parts joined by a newline. NULL
 * with *oom false when the content is not of a kind we take.
 */
static char *read_content(json_t *c, bool null_ok, bool *oom)
{
    struct rx_buf b;
    json_t *part;
    size_t i;
    char *out;

    *oom = false;
    if (json_is_string(c))
        return (out = strdup(json_string_value(c))) ? out : (*oom = true, NULL);
    if (!c || json_is_null(c))
        return null_ok ? ((out = strdup("")) ? out : (*oom = true, NULL)) : NULL;
    if (!json_is_array(c))
        return NULL;
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    json_array_foreach(c, i, part)
    {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");

        if (!type || strcmp(type, "text") || !json_is_string(text)) {
            rx_buf_release(&b);
            return NULL;
        }
        if ((i && rx_buf_putc(&b, '\n')) ||
            rx_buf_append(&b, json_string_value(text), json_string_length(text))) {
            rx_buf_release(&b);
            *oom = true;
            return NULL;
        }
    }
    out = rx_buf_take(&b, NULL);
    if (!out && !(out = strdup("")))
        *oom = true;
    return out;
}

static int read_message(json_t *m, size_t i, struct oai_message *out, struct oai_error *e)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    size_t r;
    bool oom;

    if (!json_is_object(m))
        return bad_message(e, i, "", "invalid_type", "must be an object");
    for (r = 0; role && r < sizeof(roles) / sizeof(roles[0]); r++)
        if (!strcmp(role, roles[r].name))
            break;
    if (!role || r == sizeof(roles) / sizeof(roles[0]))
        return bad_message(e, i, "role", "invalid_value",
                           "must be one of 'system', 'developer', 'user', 'assistant', "
                           "'tool' or 'function'");
    out->role = roles[r].role;
    out->text = read_content(json_object_get(m, "content"), roles[r].null_ok, &oom);
    if (oom)
        return oai_error_set(e, -ENOMEM, 500, "server_error", NULL, NULL,
                             "out of memory");
    if (!out->text)
        return bad_message(e, i, "content", "invalid_type",
                           "must be a string or an array of text parts");
    return 0;
}

static int read_options(json_t *j, struct oai_request *r, struct oai_error *e)
{
    json_t *v = json_object_get(j, "stream");
    json_t *o = json_object_get(j, "stream_options");

    if (v && !json_is_null(v) && !json_is_boolean(v))
        return oai_error_set(e, -EINVAL, 400, "invalid_request_error", "stream",
                             "invalid_type", "'stream' must be a boolean");
    r->stream = json_is_true(v);
    if (o && !json_is_null(o)) {
        v = json_object_get(o, "include_usage");
        if (!json_is_object(o) || (v && !json_is_null(v) && !json_is_boolean(v)))
            return oai_error_set(e, -EINVAL, 400, "invalid_request_error",
                                 "stream_options", "invalid_type",
                                 "'stream_options' must be {\"include_usage\": boolean}");
        r->include_usage = json_is_true(v);
    }
    /* One agent, one answer: several choices would be several agents' work. */
    v = json_object_get(j, "n");
    if (v && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 1))
        return oai_error_set(e, -EINVAL, 400, "invalid_request_error", "n",
                             "invalid_value",
                             "'n' must be 1 (the agent gives one answer)");
    return 0;
}

static int read_model(json_t *j, const char *const *models, size_t n_models,
                      struct oai_request *r, struct oai_error *e)
{
    const char *model = json_string_value(json_object_get(j, "model"));
    size_t i;

    if (!model)
        return oai_error_set(e, -EINVAL, 400, "invalid_request_error", "model",
                             "missing_required_parameter",
                             "you must provide a model parameter (a string)");
    for (i = 0; i < n_models; i++)
        if (!strcmp(models[i], model))
            break;
    if (i == n_models)
        return oai_error_set(e, -EINVAL, 404, "invalid_request_error", "model",
                             "model_not_found", "The model '%.200s' does not exist",
                             model);
    if (!(r->model = strdup(model)))
        return oai_error_set(e, -ENOMEM, 500, "server_error", NULL, NULL,
                             "out of memory");
    return 0;
}

static int read_messages(json_t *msgs, struct oai_request *r, struct oai_error *e)
{
    size_t n = json_array_size(msgs);
    char *turn;
    int err;

    if (!msgs)
        return oai_error_set(e, -EINVAL, 400, "invalid_request_error", "messages",
                             "missing_required_parameter",
                             "Missing required parameter: 'messages'");
    if (!json_is_array(msgs))
        return oai_error_set(e, -EINVAL, 400, "invalid_request_error", "messages",
                             "invalid_type", "'messages' must be an array");
    if (!n)
        return oai_error_set(e, -EINVAL, 400, "invalid_request_error", "messages",
                             "empty_array", "'messages' must not be empty");
    if (!(r->msgs = calloc(n, sizeof(*r->msgs))))
        return oai_error_set(e, -ENOMEM, 500, "server_error", NULL, NULL,
                             "out of memory");
    for (r->n = 0; r->n < n; r->n++)
        if ((err = read_message(json_array_get(msgs, r->n), r->n, &r->msgs[r->n], e)))
            return err;
    if (r->msgs[n - 1].role != OAI_ROLE_USER)
        return bad_message(e, n - 1, "role", "invalid_value",
                           "must be 'user': the last message is what the agent answers");
    for (r->turn = n; r->turn && r->msgs[r->turn - 1].role == OAI_ROLE_USER;)
        r->turn--;
    if (!(turn = oai_request_turn(r)))
        return oai_error_set(e, -ENOMEM, 500, "server_error", NULL, NULL,
                             "out of memory");
    err = rx_text_is_blank(turn)
              ? bad_message(e, n - 1, "content", "invalid_value", "must not be blank")
              : 0;
    free(turn);
    return err;
}

int oai_request_parse(const char *body, size_t len, const char *const *models,
                      size_t n_models, struct oai_request *out, struct oai_error *e)
{
    struct oai_request r = {0};
    struct rx_error jerr;
    json_t *j;
    int err;

    if (rx_json_parse(body, len, 0, &j, &jerr) == -ENOMEM)
        return oai_error_set(e, -ENOMEM, 500, "server_error", NULL, NULL,
                             "out of memory");
    if (!j || !json_is_object(j)) {
        err = oai_error_set(e, -EINVAL, 400, "invalid_request_error", NULL, NULL,
                            "We could not parse the JSON body of your request: %s",
                            j ? "it is not an object" : jerr.text);
        json_decref(j);
        return err;
    }
    if ((err = read_model(j, models, n_models, &r, e)) ||
        (err = read_messages(json_object_get(j, "messages"), &r, e)) ||
        (err = read_options(j, &r, e))) {
        json_decref(j);
        oai_request_release(&r);
        return err;
    }
    json_decref(j);
    *out = r;
    return 0;
}

void oai_request_release(struct oai_request *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->msgs[i].text);
    free(r->msgs);
    free(r->model);
    memset(r, 0, sizeof(*r));
}

/* Texts of msgs[from..to) with role `role`, joined by a blank line. */
static char *join(const struct oai_request *r, size_t from, size_t to, enum oai_role role,
                  bool *any)
{
    struct rx_buf b;
    char *out;

    *any = false;
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    for (size_t i = from; i < to; i++) {
        if (r->msgs[i].role != role)
            continue;
        if ((*any && rx_buf_puts(&b, "\n\n")) || rx_buf_puts(&b, r->msgs[i].text)) {
            rx_buf_release(&b);
            return NULL;
        }
        *any = true;
    }
    out = rx_buf_take(&b, NULL);
    return out ? out : strdup("");
}

char *oai_request_turn(const struct oai_request *r)
{
    bool any;

    return join(r, r->turn, r->n, OAI_ROLE_USER, &any);
}

char *oai_request_system(const struct oai_request *r, bool *oom)
{
    bool any;
    char *s = join(r, 0, r->n, OAI_ROLE_SYSTEM, &any);

    *oom = !s;
    if (s && !any) {
        free(s);
        s = NULL;
    }
    return s;
}

bool oai_request_has_turns(const struct oai_request *r)
{
    for (size_t i = 0; i < r->turn; i++)
        if (r->msgs[i].role == OAI_ROLE_USER || r->msgs[i].role == OAI_ROLE_ASSISTANT)
            return true;
    return false;
}

static bool details_at(const char *p)
{
    return *p == '<' && !strncasecmp(p, "<details", 8) &&
           (isspace((unsigned char)p[8]) || p[8] == '>');
}

/*
 * The closed <details> blocks of `text`, found in one pass: a stack of the
 * openers not yet closed, each </details> closing the newest (so nested
 * blocks count, and an opener never closed stays text). `end[k]` is the
 * offset just past the block the k-th opener begins, or 0 when it is never
 * closed; `at[k]` is where that opener is. One pass, not a rescan to the end
 * of the text for every opener: 60 000 unclosed tags in one message cost
 * what their bytes cost (issue 28).
 */
struct details_blocks {
    size_t n, *at, *end;
};

static int details_find(const char *text, struct details_blocks *b)
{
    size_t cap = 0, depth = 0, *stack = NULL;

    memset(b, 0, sizeof(*b));
    for (const char *p = strchr(text, '<'); p; p = strchr(p + 1, '<'))
        if (details_at(p))
            cap++;
    if (!cap)
        return 0;
    b->at = malloc(cap * sizeof(*b->at));
    b->end = calloc(cap, sizeof(*b->end));
    stack = malloc(cap * sizeof(*stack));
    if (!b->at || !b->end || !stack) {
        free(stack);
        free(b->at);
        free(b->end);
        return -ENOMEM;
    }
    for (const char *p = strchr(text, '<'); p; p = strchr(p + 1, '<')) {
        if (details_at(p)) {
            b->at[b->n] = (size_t)(p - text);
            stack[depth++] = b->n++;
        } else if (depth && !strncasecmp(p, "</details>", 10)) {
            b->end[stack[--depth]] = (size_t)(p - text) + 10;
        }
    }
    free(stack);
    return 0;
}

/* Append `text` with its closed <details> blocks cut out; with `fold`, white
   space folded to single spaces and trimmed. Linear in the text. */
static int strip(const char *text, bool fold, struct rx_buf *out)
{
    size_t start = out->len, k = 0, i = 0;
    struct details_blocks b;
    bool space = false;
    int err;

    if ((err = details_find(text, &b)))
        return err;
    while (text[i] && !err) {
        if (k < b.n && b.at[k] == i) {
            if (b.end[k]) {
                i = b.end[k];
                space = true;
                while (k < b.n && b.at[k] < i) /* the blocks inside it */
                    k++;
                continue;
            }
            k++;
        }
        if (fold && isspace((unsigned char)text[i])) {
            space = true;
            i++;
            continue;
        }
        if (fold && space && out->len > start)
            err = rx_buf_putc(out, ' ');
        space = false;
        if (!err)
            err = rx_buf_putc(out, text[i++]);
    }
    free(b.at);
    free(b.end);
    if (err)
        rx_buf_truncate(out, start);
    return err;
}

int oai_normalize(const char *text, struct rx_buf *out)
{
    return strip(text, true, out);
}

/* The cut text, trimmed (for the history a new session imports). */
static char *cut_details(const char *text)
{
    struct rx_buf b;
    size_t from = 0;
    char *out;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    if (strip(text, false, &b)) {
        rx_buf_release(&b);
        return NULL;
    }
    while (b.len && isspace((unsigned char)b.data[b.len - 1]))
        b.len--;
    if (b.data)
        b.data[b.len] = '\0';
    while (from < b.len && isspace((unsigned char)b.data[from]))
        from++;
    out = strdup(b.data ? b.data + from : "");
    rx_buf_release(&b);
    return out;
}

/* ---- fingerprints ---------------------------------------------------------- */

#define FNV_OFFSET 14695981039346656037ULL
#define FNV_PRIME  1099511628211ULL
#define MIX_SEED   0x243f6a8885a308d3ULL
#define MIX_MUL    0x9e3779b97f4a7c15ULL

void oai_fp_init(struct oai_fp *fp)
{
    fp->h[0] = FNV_OFFSET;
    fp->h[1] = MIX_SEED;
}

static void fp_bytes(struct oai_fp *fp, const void *p, size_t n)
{
    const unsigned char *s = p;

    for (size_t i = 0; i < n; i++) {
        fp->h[0] = (fp->h[0] ^ s[i]) * FNV_PRIME;
        fp->h[1] = (fp->h[1] ^ s[i]) * MIX_MUL;
        fp->h[1] ^= fp->h[1] >> 29;
    }
}

int oai_fp_add(struct oai_fp *fp, enum oai_role role, const char *text)
{
    /* 0xff never occurs in UTF-8: it ends one message unambiguously. */
    static const unsigned char tag[] = {'s', 'u', 'a', 't'}, end = 0xff;
    struct rx_buf b;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    if (oai_normalize(text, &b)) {
        rx_buf_release(&b);
        return -ENOMEM;
    }
    fp_bytes(fp, &tag[role], 1);
    fp_bytes(fp, b.data ? b.data : "", b.len);
    fp_bytes(fp, &end, 1);
    rx_buf_release(&b);
    return 0;
}

int oai_fp_messages(const struct oai_request *r, size_t upto, struct oai_fp *fp)
{
    struct oai_fp f;

    oai_fp_init(&f);
    for (size_t i = 0; i < upto && i < r->n; i++)
        if (oai_fp_add(&f, r->msgs[i].role, r->msgs[i].text))
            return -ENOMEM;
    *fp = f;
    return 0;
}

bool oai_fp_equal(const struct oai_fp *a, const struct oai_fp *b)
{
    return a->h[0] == b->h[0] && a->h[1] == b->h[1];
}

/* ---- the history a new session imports ------------------------------------- */

/* One run of same-role messages as an input appended to `inputs`. */
static int add_group(json_t *inputs, enum oai_role role, const char *text, int64_t *t,
                     int64_t *asked, size_t k)
{
    char id[32];
    json_t *in;

    snprintf(id, sizeof(id), "oai-%zu", k);
    if (role == OAI_ROLE_USER) {
        *asked = *t;
        in = json_pack("{s:s, s:I, s:s, s:s}", "type", "user-send-message", "timestamp",
                       (json_int_t)*t, "messageId", id, "content", text);
    } else {
        in = json_pack("{s:s, s:I, s:I, s:s, s:s}", "type", "brain-send-message-complete",
                       "timestamp", (json_int_t)*t, "calledBrainAt",
                       (json_int_t)(*asked < 0 ? *t : *asked), "messageId", id, "content",
                       text);
    }
    (*t)++;
    return json_array_append_new(inputs, json_pack("{s:o}", "input", in)) ? -ENOMEM : 0;
}

json_t *oai_history_doc(const struct oai_request *r, const char *system, int64_t base_ms)
{
    json_t *inputs = json_array(), *doc;
    int64_t t = base_ms, asked = -1;
    struct rx_buf group;
    enum oai_role role = OAI_ROLE_SYSTEM;
    size_t k = 0;
    int err = inputs ? 0 : -ENOMEM;

    rx_buf_init(&group, RX_BUF_STATE_MAX);
    if (!err && system)
        err = json_array_append_new(inputs,
                                    json_pack("{s:{s:s, s:I, s:s}}", "input", "type",
                                              "user-configure", "timestamp",
                                              (json_int_t)t++, "systemPrompt", system))
                  ? -ENOMEM
                  : 0;
    /* One extra pass (i == turn) flushes the last run. */
    for (size_t i = 0; !err && i <= r->turn; i++) {
        const struct oai_message *m = i < r->turn ? &r->msgs[i] : NULL;
        char *text;

        if (m && m->role != OAI_ROLE_USER && m->role != OAI_ROLE_ASSISTANT)
            continue; /* system: the prompt; tool: the agent runs its own */
        if (m && m->role == role) {
            if (!(text = cut_details(m->text)))
                err = -ENOMEM;
            else if (!rx_text_is_blank(text))
                err = (group.len && rx_buf_puts(&group, "\n\n")) ||
                              rx_buf_puts(&group, text)
                          ? -ENOMEM
                          : 0;
            free(text);
            continue;
        }
        if (group.len)
            err = add_group(inputs, role, group.data, &t, &asked, k++);
        rx_buf_reset(&group);
        if (m) {
            role = m->role;
            i--; /* read it again as the first of its run */
        }
    }
    rx_buf_release(&group);
    doc = err ? NULL
              : json_pack("{s:s, s:i, s:o}", "format", "reflexor-session", "version", 1,
                          "inputs", inputs);
    if (err)
        json_decref(inputs);
    return doc;
}
