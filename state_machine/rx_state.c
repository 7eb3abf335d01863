/*
 * rx_state - the Reflexor session state: records, encoding, decoding.
 * See rx_state.h.
 */
#include "state_machine/rx_state.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "state_machine/rx_alloc.h"

static const char *const status_names[] = {
    [RX_STATUS_STREAMING] = "streaming",
    [RX_STATUS_COMPLETE] = "complete",
    [RX_STATUS_STOPPED] = "stopped",
};

const char *rx_status_name(enum rx_status st)
{
    return status_names[st];
}

int rx_status_parse(const char *name, enum rx_status *out)
{
    for (size_t i = 0; i < sizeof(status_names) / sizeof(status_names[0]); i++) {
        if (!strcmp(name, status_names[i])) {
            *out = (enum rx_status)i;
            return 0;
        }
    }
    return -EINVAL;
}

int rx_state_init(struct rx_state *s)
{
    memset(s, 0, sizeof(*s));
    s->user.time_sorted = s->assistant.time_sorted = s->tools.time_sorted = true;
    s->context_summary = rx_strdup("");
    return s->context_summary ? 0 : -ENOMEM;
}

void rx_message_forget(struct rx_message *m)
{
    rx_free(m->json);
    m->json = NULL;
    m->json_len = 0;
}

void rx_tool_call_forget(struct rx_tool_call *c)
{
    rx_free(c->json);
    c->json = NULL;
    c->json_len = 0;
}

static void message_release(struct rx_message *m)
{
    rx_free(m->id);
    rx_free(m->content);
    rx_message_forget(m);
}

static void tool_call_release(struct rx_tool_call *c)
{
    rx_free(c->id);
    rx_free(c->name);
    rx_free(c->parameters);
    rx_free(c->result.text);
    rx_tool_call_forget(c);
}

const char *rx_message_key(const void *list, size_t i)
{
    return ((const struct rx_message_list *)list)->items[i].id;
}

const char *rx_tool_call_key(const void *list, size_t i)
{
    return ((const struct rx_tool_call_list *)list)->items[i].id;
}

void rx_state_settle(struct rx_state *s)
{
    struct rx_message_list *a = &s->assistant;
    struct rx_tool_call_list *t = &s->tools;

    while (a->settled < a->len && a->items[a->settled].status != RX_STATUS_STREAMING)
        a->settled++;
    while (t->settled < t->len && t->items[t->settled].result.present)
        t->settled++;
}

static bool messages_in_time_order(const struct rx_message_list *l)
{
    for (size_t i = 1; i < l->len; i++)
        if (l->items[i].received_at < l->items[i - 1].received_at)
            return false;
    return true;
}

static bool tools_in_time_order(const struct rx_tool_call_list *l)
{
    for (size_t i = 1; i < l->len; i++)
        if (l->items[i].called_at < l->items[i - 1].called_at)
            return false;
    return true;
}

/* Build every derived aid from the records (after decode or copy). */
static int derive(struct rx_state *s)
{
    int err;

    if ((err = rx_index_rebuild(&s->user.ids, s->user.len, rx_message_key, &s->user)) ||
        (err = rx_index_rebuild(&s->assistant.ids, s->assistant.len, rx_message_key,
                                &s->assistant)) ||
        (err =
             rx_index_rebuild(&s->tools.ids, s->tools.len, rx_tool_call_key, &s->tools)))
        return err;
    s->user.time_sorted = messages_in_time_order(&s->user);
    s->assistant.time_sorted = messages_in_time_order(&s->assistant);
    s->tools.time_sorted = tools_in_time_order(&s->tools);
    s->user.settled = s->user.len;
    s->assistant.settled = s->tools.settled = 0;
    rx_state_settle(s);
    s->latest_result_at = 0;
    for (size_t i = 0; i < s->tools.len; i++)
        if (s->tools.items[i].result.present &&
            s->tools.items[i].result.received_at > s->latest_result_at)
            s->latest_result_at = s->tools.items[i].result.received_at;
    return 0;
}

void rx_state_release(struct rx_state *s)
{
    for (size_t i = 0; i < s->user.len; i++)
        message_release(&s->user.items[i]);
    for (size_t i = 0; i < s->assistant.len; i++)
        message_release(&s->assistant.items[i]);
    for (size_t i = 0; i < s->tools.len; i++)
        tool_call_release(&s->tools.items[i]);
    rx_free(s->user.items);
    rx_free(s->assistant.items);
    rx_free(s->tools.items);
    rx_index_release(&s->user.ids);
    rx_index_release(&s->assistant.ids);
    rx_index_release(&s->tools.ids);
    rx_free(s->context_summary);
    memset(s, 0, sizeof(*s));
}

static struct rx_message *find_message(const struct rx_message_list *l, const char *id)
{
    long i = rx_index_find(&l->ids, id, rx_message_key, l);

    return i < 0 ? NULL : &l->items[i];
}

struct rx_message *rx_state_find_user(const struct rx_state *s, const char *id)
{
    return find_message(&s->user, id);
}

struct rx_message *rx_state_find_assistant(const struct rx_state *s, const char *id)
{
    return find_message(&s->assistant, id);
}

struct rx_tool_call *rx_state_find_tool(const struct rx_state *s, const char *id)
{
    long i = rx_index_find(&s->tools.ids, id, rx_tool_call_key, &s->tools);

    return i < 0 ? NULL : &s->tools.items[i];
}

size_t rx_state_pending_tools(const struct rx_state *s)
{
    size_t n = 0;

    for (size_t i = s->tools.settled; i < s->tools.len; i++)
        n += !s->tools.items[i].result.present;
    return n;
}

/* ---- encoding ------------------------------------------------------------ */

/* Appends a sequence of pieces; the first failure stops and is returned. */
#define PUT(call)                                                                        \
    do {                                                                                 \
        if ((err = (call)))                                                              \
            goto out_truncate;                                                           \
    } while (0)

int rx_message_encode(const struct rx_message *m, bool assistant, struct rx_buf *b)
{
    size_t start = b->len;
    int err;

    PUT(rx_buf_puts(b, assistant ? "{\"kind\":\"assistant\",\"id\":"
                                 : "{\"kind\":\"user\",\"id\":"));
    PUT(rx_buf_put_json_str(b, m->id));
    PUT(rx_buf_puts(b, ",\"content\":"));
    PUT(rx_buf_put_json_str(b, m->content));
    PUT(rx_buf_puts(b, ",\"receivedAt\":"));
    PUT(rx_buf_put_i64(b, m->received_at));
    if (assistant) {
        PUT(rx_buf_puts(b, ",\"updatedAt\":"));
        PUT(rx_buf_put_i64(b, m->updated_at));
        PUT(rx_buf_puts(b, ",\"status\":\""));
        PUT(rx_buf_puts(b, rx_status_name(m->status)));
        PUT(rx_buf_puts(b, "\",\"calledBrainAt\":"));
        PUT(rx_buf_put_i64(b, m->called_brain_at));
    }
    PUT(rx_buf_putc(b, '}'));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

int rx_tool_call_encode(const struct rx_tool_call *c, struct rx_buf *b)
{
    size_t start = b->len;
    int err;

    PUT(rx_buf_puts(b, "{\"id\":"));
    PUT(rx_buf_put_json_str(b, c->id));
    PUT(rx_buf_puts(b, ",\"name\":"));
    PUT(rx_buf_put_json_str(b, c->name));
    PUT(rx_buf_puts(b, ",\"parameters\":"));
    PUT(rx_buf_put_json_str(b, c->parameters));
    PUT(rx_buf_puts(b, ",\"calledAt\":"));
    PUT(rx_buf_put_i64(b, c->called_at));
    PUT(rx_buf_puts(b, ",\"result\":"));
    if (!c->result.present) {
        PUT(rx_buf_puts(b, "null"));
    } else {
        PUT(rx_buf_puts(b, c->result.is_success ? "{\"isSuccess\":true,\"content\":"
                                                : "{\"isSuccess\":false,\"error\":"));
        PUT(rx_buf_put_json_str(b, c->result.text));
        PUT(rx_buf_puts(b, ",\"receivedAt\":"));
        PUT(rx_buf_put_i64(b, c->result.received_at));
        PUT(rx_buf_putc(b, '}'));
    }
    PUT(rx_buf_puts(b, c->is_loaded ? ",\"isLoaded\":true}" : ",\"isLoaded\":false}"));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

/*
 * Keep a copy of the bytes just encoded for the record, so the next state
 * encoding is a memcpy. The cache is an optimisation: out of memory, skip it.
 */
static void remember(char **json, size_t *json_len, const struct rx_buf *b, size_t from)
{
    char *copy = rx_strndup(b->data + from, b->len - from);

    if (copy) {
        *json = copy;
        *json_len = b->len - from;
    }
}

/* The cache is mutable through a const state: it never changes what is encoded. */
static int encode_message_cached(const struct rx_message *cm, bool assistant,
                                 struct rx_buf *b)
{
    struct rx_message *m = (struct rx_message *)cm;
    size_t from = b->len;
    int err;

    if (m->json)
        return rx_buf_append(b, m->json, m->json_len);
    if ((err = rx_message_encode(m, assistant, b)))
        return err;
    /* A streaming message still changes: caching it would only be dropped. */
    if (!assistant || m->status != RX_STATUS_STREAMING)
        remember(&m->json, &m->json_len, b, from);
    return 0;
}

static int encode_tool_call_cached(const struct rx_tool_call *cc, struct rx_buf *b)
{
    struct rx_tool_call *c = (struct rx_tool_call *)cc;
    size_t from = b->len;
    int err;

    if (c->json)
        return rx_buf_append(b, c->json, c->json_len);
    if ((err = rx_tool_call_encode(c, b)))
        return err;
    if (c->result.present)
        remember(&c->json, &c->json_len, b, from);
    return 0;
}

static int encode_messages(const struct rx_message_list *l, bool assistant,
                           struct rx_buf *b)
{
    int err;

    if ((err = rx_buf_putc(b, '[')))
        return err;
    for (size_t i = 0; i < l->len; i++) {
        if (i && (err = rx_buf_putc(b, ',')))
            return err;
        if ((err = encode_message_cached(&l->items[i], assistant, b)))
            return err;
    }
    return rx_buf_putc(b, ']');
}

int rx_state_encode(const struct rx_state *s, struct rx_buf *b)
{
    size_t start = b->len;
    int err;

    PUT(rx_buf_puts(b, "{\"updatedAt\":"));
    PUT(rx_buf_put_i64(b, s->updated_at));
    PUT(rx_buf_puts(b, ",\"userMessages\":"));
    PUT(encode_messages(&s->user, false, b));
    PUT(rx_buf_puts(b, ",\"assistantMessages\":"));
    PUT(encode_messages(&s->assistant, true, b));
    PUT(rx_buf_puts(b, ",\"toolCallRecords\":["));
    for (size_t i = 0; i < s->tools.len; i++) {
        if (i)
            PUT(rx_buf_putc(b, ','));
        PUT(encode_tool_call_cached(&s->tools.items[i], b));
    }
    PUT(rx_buf_puts(b, "],\"calledBrainAt\":"));
    PUT(rx_buf_put_i64(b, s->called_brain_at));
    PUT(rx_buf_puts(b, ",\"contextSummary\":"));
    PUT(rx_buf_put_json_str(b, s->context_summary));
    PUT(rx_buf_puts(b, ",\"summaryCutAt\":"));
    PUT(rx_buf_put_i64(b, s->summary_cut_at));
    PUT(rx_buf_putc(b, '}'));
    return 0;

out_truncate:
    rx_buf_truncate(b, start);
    return err;
}

/* ---- decoding ------------------------------------------------------------ */

static int fail(struct rx_error *err, const char *field, const char *why)
{
    return rx_error_set(err, -EINVAL, "'%s' %s", field, why);
}

static int get_time(json_t *o, const char *key, int64_t *out, struct rx_error *err)
{
    json_t *v = json_object_get(o, key);

    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(err, key, "must be a non-negative integer");
    *out = json_integer_value(v);
    return 0;
}

static int get_str(json_t *o, const char *key, char **out, struct rx_error *err)
{
    json_t *v = json_object_get(o, key);

    if (!json_is_string(v))
        return fail(err, key, "must be a string");
    *out = rx_strndup(json_string_value(v), json_string_length(v));
    return *out ? 0 : -ENOMEM;
}

static int decode_message(json_t *j, bool assistant, struct rx_message *m,
                          struct rx_error *err)
{
    const char *kind = json_string_value(json_object_get(j, "kind"));
    int rc;

    memset(m, 0, sizeof(*m));
    if (!json_is_object(j))
        return fail(err, assistant ? "assistantMessages" : "userMessages",
                    "must hold objects");
    if (!kind || strcmp(kind, assistant ? "assistant" : "user"))
        return fail(err, "kind",
                    assistant ? "must be \"assistant\"" : "must be \"user\"");
    if ((rc = get_time(j, "receivedAt", &m->received_at, err)))
        return rc;
    if (assistant) {
        const char *st = json_string_value(json_object_get(j, "status"));

        if ((rc = get_time(j, "updatedAt", &m->updated_at, err)) ||
            (rc = get_time(j, "calledBrainAt", &m->called_brain_at, err)))
            return rc;
        if (!st || rx_status_parse(st, &m->status))
            return fail(err, "status", "must be streaming, complete or stopped");
    }
    if ((rc = get_str(j, "id", &m->id, err)))
        return rc;
    if ((rc = get_str(j, "content", &m->content, err))) {
        message_release(m);
        return rc;
    }
    return 0;
}

static int decode_result(json_t *j, struct rx_tool_result *r, struct rx_error *err)
{
    json_t *ok = json_object_get(j, "isSuccess");
    int rc;

    if (json_is_null(j))
        return 0;
    if (!json_is_object(j) || !json_is_boolean(ok))
        return fail(err, "result",
                    "must be null or {isSuccess, content|error, receivedAt}");
    r->is_success = json_is_true(ok);
    if ((rc = get_time(j, "receivedAt", &r->received_at, err)))
        return rc;
    if ((rc = get_str(j, r->is_success ? "content" : "error", &r->text, err)))
        return rc;
    r->present = true;
    return 0;
}

static int decode_tool_call(json_t *j, struct rx_tool_call *c, struct rx_error *err)
{
    json_t *loaded = json_object_get(j, "isLoaded");
    int rc;

    memset(c, 0, sizeof(*c));
    if (!json_is_object(j))
        return fail(err, "toolCallRecords", "must hold objects");
    if (!json_is_boolean(loaded))
        return fail(err, "isLoaded", "must be a boolean");
    c->is_loaded = json_is_true(loaded);
    if ((rc = get_time(j, "calledAt", &c->called_at, err)))
        return rc;
    if ((rc = get_str(j, "id", &c->id, err)) ||
        (rc = get_str(j, "name", &c->name, err)) ||
        (rc = get_str(j, "parameters", &c->parameters, err)) ||
        (rc = decode_result(json_object_get(j, "result"), &c->result, err)))
        goto out_release;
    return 0;

out_release:
    tool_call_release(c);
    return rc;
}

static int decode_messages(json_t *arr, bool assistant, struct rx_message_list *l,
                           struct rx_error *err)
{
    size_t n = json_array_size(arr);
    int rc;

    if (!json_is_array(arr))
        return fail(err, assistant ? "assistantMessages" : "userMessages",
                    "must be an array");
    l->items = rx_malloc(n * sizeof(*l->items));
    if (!l->items)
        return -ENOMEM;
    l->cap = n;
    for (size_t i = 0; i < n; i++) {
        if ((rc = decode_message(json_array_get(arr, i), assistant, &l->items[i], err)))
            return rc;
        l->len++;
    }
    return 0;
}

int rx_state_decode(json_t *json, struct rx_state *out, struct rx_error *err)
{
    struct rx_state s;
    json_t *tools = json_object_get(json, "toolCallRecords");
    size_t n;
    int rc;

    if (!json_is_object(json))
        return fail(err, "state", "must be an object");
    if ((rc = rx_state_init(&s)))
        return rc;
    if ((rc = get_time(json, "updatedAt", &s.updated_at, err)) ||
        (rc = get_time(json, "calledBrainAt", &s.called_brain_at, err)) ||
        (rc = get_time(json, "summaryCutAt", &s.summary_cut_at, err)))
        goto out_release;
    rx_free(s.context_summary);
    s.context_summary = NULL;
    if ((rc = get_str(json, "contextSummary", &s.context_summary, err)))
        goto out_release;
    if ((rc = decode_messages(json_object_get(json, "userMessages"), false, &s.user,
                              err)) ||
        (rc = decode_messages(json_object_get(json, "assistantMessages"), true,
                              &s.assistant, err)))
        goto out_release;
    if (!json_is_array(tools)) {
        rc = fail(err, "toolCallRecords", "must be an array");
        goto out_release;
    }
    n = json_array_size(tools);
    s.tools.items = rx_malloc(n * sizeof(*s.tools.items));
    if (!s.tools.items) {
        rc = -ENOMEM;
        goto out_release;
    }
    s.tools.cap = n;
    for (size_t i = 0; i < n; i++) {
        if ((rc = decode_tool_call(json_array_get(tools, i), &s.tools.items[i], err)))
            goto out_release;
        s.tools.len++;
    }
    if ((rc = derive(&s)))
        goto out_release;
    if (!rx_state_check_invariants(&s)) {
        rc = fail(err, "state",
                  "breaks an invariant (duplicate id or time after updatedAt)");
        goto out_release;
    }
    *out = s;
    return 0;

out_release:
    rx_state_release(&s);
    return rc;
}

/* ---- copy and invariants ------------------------------------------------- */

static int copy_str(char **dst, const char *src)
{
    if (!src) {
        *dst = NULL;
        return 0;
    }
    *dst = rx_strdup(src);
    return *dst ? 0 : -ENOMEM;
}

/* The records of src from `from` on; dst is zeroed by the caller. */
static int copy_messages(const struct rx_message_list *src, size_t from,
                         struct rx_message_list *dst)
{
    size_t n = from < src->len ? src->len - from : 0;

    dst->items = rx_malloc(n * sizeof(*dst->items));
    if (!dst->items)
        return -ENOMEM;
    dst->cap = n;
    for (size_t i = 0; i < n; i++) {
        const struct rx_message *m = &src->items[from + i];
        struct rx_message *d = &dst->items[i];

        *d = *m;
        d->id = d->content = d->json = NULL;
        d->json_len = 0;
        if (copy_str(&d->id, m->id) || copy_str(&d->content, m->content)) {
            message_release(d);
            return -ENOMEM;
        }
        dst->len++;
    }
    return 0;
}

static int copy_tools(const struct rx_tool_call_list *src, size_t from,
                      struct rx_tool_call_list *dst)
{
    size_t n = from < src->len ? src->len - from : 0;

    dst->items = rx_malloc(n * sizeof(*dst->items));
    if (!dst->items)
        return -ENOMEM;
    dst->cap = n;
    for (size_t i = 0; i < n; i++) {
        const struct rx_tool_call *c = &src->items[from + i];
        struct rx_tool_call *d = &dst->items[i];

        *d = *c;
        d->id = d->name = d->parameters = d->result.text = d->json = NULL;
        d->json_len = 0;
        if (copy_str(&d->id, c->id) || copy_str(&d->name, c->name) ||
            copy_str(&d->parameters, c->parameters) ||
            copy_str(&d->result.text, c->result.text)) {
            tool_call_release(d);
            return -ENOMEM;
        }
        dst->len++;
    }
    return 0;
}

int rx_state_copy_tail(const struct rx_state *src, size_t user_from,
                       size_t assistant_from, size_t tools_from, struct rx_state *dst)
{
    struct rx_state s;

    memset(&s, 0, sizeof(s));
    s.updated_at = src->updated_at;
    s.called_brain_at = src->called_brain_at;
    s.summary_cut_at = src->summary_cut_at;
    if (copy_str(&s.context_summary, src->context_summary) ||
        copy_messages(&src->user, user_from, &s.user) ||
        copy_messages(&src->assistant, assistant_from, &s.assistant) ||
        copy_tools(&src->tools, tools_from, &s.tools) || derive(&s))
        goto out_release;
    *dst = s;
    return 0;

out_release:
    rx_state_release(&s);
    return -ENOMEM;
}

int rx_state_copy(const struct rx_state *src, struct rx_state *dst)
{
    return rx_state_copy_tail(src, 0, 0, 0, dst);
}

/* Quadratic, on purpose: it is a test oracle, independent of any index. */
static bool messages_sane(const struct rx_message_list *l, int64_t updated_at,
                          bool assistant)
{
    if (l->len > l->cap)
        return false;
    for (size_t i = 0; i < l->len; i++) {
        const struct rx_message *m = &l->items[i];

        if (!m->id || !m->content || m->received_at > updated_at)
            return false;
        if (assistant && (m->updated_at > updated_at || m->updated_at < m->received_at))
            return false;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(l->items[j].id, m->id))
                return false;
        if (rx_index_find(&l->ids, m->id, rx_message_key, l) != (long)i)
            return false;
        if (assistant && i < l->settled && m->status == RX_STATUS_STREAMING)
            return false;
        if (l->time_sorted && i && m->received_at < l->items[i - 1].received_at)
            return false;
    }
    return l->ids.used == l->len && l->settled <= l->len;
}

bool rx_state_check_invariants(const struct rx_state *s)
{
    int64_t latest = s->latest_result_at;
    bool latest_seen = false;

    if (!s->context_summary || !messages_sane(&s->user, s->updated_at, false) ||
        !messages_sane(&s->assistant, s->updated_at, true) || s->tools.len > s->tools.cap)
        return false;
    for (size_t i = 0; i < s->tools.len; i++) {
        const struct rx_tool_call *c = &s->tools.items[i];

        if (!c->id || !c->name || !c->parameters || c->called_at > s->updated_at ||
            strlen(c->id) > RX_ID_MAX)
            return false;
        if (c->result.present &&
            (!c->result.text || c->result.received_at > s->updated_at))
            return false;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s->tools.items[j].id, c->id))
                return false;
        if (rx_index_find(&s->tools.ids, c->id, rx_tool_call_key, &s->tools) != (long)i ||
            (i < s->tools.settled && !c->result.present) ||
            (c->result.present && c->result.received_at > latest))
            return false;
        if (c->result.present && c->result.received_at == latest)
            latest_seen = true;
        if (s->tools.time_sorted && i && c->called_at < s->tools.items[i - 1].called_at)
            return false;
    }
    return s->tools.ids.used == s->tools.len && s->tools.settled <= s->tools.len &&
           (latest_seen || s->latest_result_at == 0);
}
