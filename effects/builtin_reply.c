/*
 * builtin_reply - what the builtin brain says. See builtin_reply.h.
 */
#include "effects/builtin_reply.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "effects/calculator.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_context.h"
#include "state_machine/rx_json.h"

/* Longest user text quoted in a summary, in characters. */
#define SUMMARY_QUOTE_CHARS 40
/* User texts quoted per summary line. */
#define SUMMARY_QUOTES 3

/* ------------------------------------------------------------------ text */

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

size_t builtin_reply_chunk_len(const char *s, size_t chars)
{
    size_t n = 0;

    while (s[n] && chars--) {
        n++;
        while ((s[n] & 0xc0) == 0x80)
            n++;
    }
    return n;
}

static const char *message_text(json_t *m)
{
    const char *t = json_string_value(json_object_get(m, "content"));

    return t ? t : "";
}

static bool has_role(json_t *m, const char *role)
{
    const char *r = json_string_value(json_object_get(m, "role"));

    return r && !strcmp(r, role);
}

/* rx_context's summary arrives as a user message, but nobody typed it. */
static bool is_real_user(json_t *m)
{
    return has_role(m, "user") && strncmp(message_text(m), RX_CONTEXT_SUMMARY_PREFIX,
                                          strlen(RX_CONTEXT_SUMMARY_PREFIX));
}

/* If s starts with `word` (any case) and a word boundary, the text after it. */
static const char *after_word(const char *s, const char *word)
{
    size_t n = strlen(word);

    if (strncasecmp(s, word, n) ||
        (s[n] && !is_space(s[n]) && s[n] != ':' && s[n] != ','))
        return NULL;
    s += n;
    while (is_space(*s) || *s == ':' || *s == ',')
        s++;
    return s;
}

/* ------------------------------------------------------------ arithmetic */

/* Copy s into out with ×, ÷, − and ** written the calculator's way. */
static bool normalise(const char *s, char *out, size_t size)
{
    size_t n = 0;

    while (*s) {
        char c;

        if (!strncmp(s, "\xc3\x97", 2))
            c = '*', s += 2;
        else if (!strncmp(s, "\xc3\xb7", 2))
            c = '/', s += 2;
        else if (!strncmp(s, "\xe2\x88\x92", 3))
            c = '-', s += 3;
        else if (s[0] == '*' && s[1] == '*')
            c = '^', s += 2;
        else if ((unsigned char)*s >= 0x80)
            return false;
        else
            c = *s++;
        if (n + 1 >= size)
            return false;
        out[n++] = c;
    }
    while (n &&
           (is_space(out[n - 1]) || out[n - 1] == '?' || out[n - 1] == '!' ||
            out[n - 1] == '=' || (out[n - 1] == '.' && n > 1 && !is_digit(out[n - 2]))))
        n--;
    out[n] = '\0';
    return true;
}

static char prev_nonspace(const char *s, size_t i)
{
    while (i-- > 0)
        if (!is_space(s[i]))
            return s[i];
    return '\0';
}

static char next_nonspace(const char *s, size_t i)
{
    for (i++; s[i]; i++)
        if (!is_space(s[i]))
            return s[i];
    return '\0';
}

/*
 * True when `e` is made of calculator characters only, has a digit and (unless
 * `any`) a binary operator. A lone 'x' between operands means times.
 */
static bool looks_arithmetic(char *e, bool any)
{
    bool digit = false, op = false;

    for (size_t i = 0; e[i]; i++) {
        char c = e[i], p = prev_nonspace(e, i), q = next_nonspace(e, i);

        if ((c == 'x' || c == 'X') && (is_digit(p) || p == ')') &&
            (is_digit(q) || q == '('))
            c = e[i] = '*';
        if (is_digit(c))
            digit = true;
        else if (strchr("+*/%^", c) || (c == '-' && p))
            op = true;
        else if ((c == 'e' || c == 'E') && i && (is_digit(e[i - 1]) || e[i - 1] == '.'))
            continue;
        else if (!strchr("-.() \t\r\n", c))
            return false;
    }
    return digit && (op || any);
}

/*
 * The expression the user asks about, in out (size bytes), or false when the
 * message is not arithmetic. After a strong verb ("calculate 7/0") the rest is
 * taken as it is, so the calculator can say what is wrong with it.
 */
static bool extract_expression(const char *text, char *out, size_t size)
{
    static const char *const strong[] = {"calculate", "calc", "compute",
                                         "evaluate",  "eval", "solve"};
    static const char *const weak[] = {"what is", "what's", "whats", "how much is"};
    const char *s = text, *p;
    bool verb = false;

    while (is_space(*s))
        s++;
    if ((p = after_word(s, "please")))
        s = p;
    for (size_t i = 0; i < sizeof(strong) / sizeof(strong[0]) && !verb; i++)
        if ((p = after_word(s, strong[i])))
            s = p, verb = true;
    for (size_t i = 0; i < sizeof(weak) / sizeof(weak[0]) && !verb; i++) {
        if ((p = after_word(s, weak[i]))) {
            s = p;
            break;
        }
    }
    /* Never cut an expression short: a truncated one could evaluate, wrongly. */
    if (strlen(s) >= size)
        return false;
    if (!normalise(s, out, size)) {
        if (!verb)
            return false;
        memcpy(out, s, strlen(s) + 1);
    }
    if (looks_arithmetic(out, verb))
        return true;
    /* "calculate ten/0": let the calculator explain, if there is a number. */
    return verb && strpbrk(out, "0123456789");
}

/* ------------------------------------------------------------------ time */

static bool is_letter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool asks_time(const char *text)
{
    bool what = false, time = false, date = false, clock = false, hint = false;
    bool today = false, question;
    size_t words = 0, len = strlen(text);
    const char *s = text;

    while (len && is_space(text[len - 1]))
        len--;
    question = len && text[len - 1] == '?';
    for (;;) {
        char w[16];
        size_t n = 0;

        while (*s && !is_letter(*s))
            s++;
        if (!*s)
            break;
        for (; is_letter(*s) || *s == '\''; s++)
            if (n + 1 < sizeof(w))
                w[n++] = (char)(*s | 0x20);
        w[n] = '\0';
        words++;
        what |= !strncmp(w, "what", 4) || !strcmp(w, "when");
        time |= !strcmp(w, "time");
        date |= !strcmp(w, "date");
        clock |= !strcmp(w, "clock");
        today |= !strcmp(w, "today");
        hint |= !strcmp(w, "current") || !strcmp(w, "now") || !strcmp(w, "tell");
    }
    return clock || (time && (what || hint || question)) ||
           (date && (what || hint || today || question || words <= 3)) || (today && what);
}

/* --------------------------------------------------------------- answers */

static json_t *find_tool_message(json_t *msgs, size_t from, const char *id)
{
    for (size_t i = from; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        const char *tid = json_string_value(json_object_get(m, "tool_call_id"));

        if (has_role(m, "tool") && tid && !strcmp(tid, id))
            return m;
    }
    return NULL;
}

/* One line about one call and its result. 0, -ENOMEM or -E2BIG. */
static int describe_call(struct rx_buf *b, const char *name, const char *arguments,
                         json_t *result)
{
    const char *text = result ? message_text(result) : NULL;
    bool failed = text && !strncmp(text, "Error: ", 7);
    json_t *args = NULL, *clock = NULL;
    int rc;

    if (!text) {
        rc = rx_buf_printf(b, "I got no result from '%s'.", name);
    } else if (!strcmp(name, "calculator") && failed) {
        rc = rx_buf_printf(b, "The calculator said: %s", text);
    } else if (!strcmp(name, "calculator")) {
        const char *expr;

        if (arguments && rx_json_parse(arguments, strlen(arguments), 0, &args, NULL))
            args = NULL; /* no expression: the plainer sentence */
        expr = json_string_value(json_object_get(args, "expression"));
        rc = expr ? rx_buf_printf(b, "%s = %s", expr, text)
                  : rx_buf_printf(b, "The calculator says %s.", text);
    } else if (!strcmp(name, "clock") && failed) {
        rc = rx_buf_printf(b, "The clock said: %s", text);
    } else if (!strcmp(name, "clock")) {
        const char *iso;

        if (rx_json_parse(text, strlen(text), 0, &clock, NULL))
            clock = NULL; /* the text as the tool gave it */
        iso = json_string_value(json_object_get(clock, "iso"));
        rc = rx_buf_printf(b, "The time is %s.", iso ? iso : text);
    } else {
        rc = rx_buf_printf(b, "Tool '%s' %s %s", name,
                           failed ? "said:" : "returned:", text);
    }
    json_decref(args);
    json_decref(clock);
    return rc;
}

/*
 * Text answering the tool calls that follow message `from`, in *text (NEW
 * reference), or NULL in *text when there are none. 0 or -ENOMEM.
 */
static int answer_tools(json_t *msgs, size_t from, json_t **text)
{
    struct rx_buf b;
    int rc = 0;

    *text = NULL;
    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    for (size_t i = from; i < json_array_size(msgs) && !rc; i++) {
        json_t *calls = json_object_get(json_array_get(msgs, i), "tool_calls"), *c;
        size_t j;

        json_array_foreach(calls, j, c)
        {
            json_t *f = json_object_get(c, "function");
            const char *id = json_string_value(json_object_get(c, "id"));
            const char *name = json_string_value(json_object_get(f, "name"));

            if (!id || !name)
                continue;
            rc = b.len ? rx_buf_putc(&b, '\n') : 0;
            rc = rc ? rc
                    : describe_call(&b, name,
                                    json_string_value(json_object_get(f, "arguments")),
                                    find_tool_message(msgs, i + 1, id));
            if (rc)
                break;
        }
    }
    if (!rc && b.len) {
        *text = json_stringn(b.data, b.len);
        rc = *text ? 0 : -ENOMEM;
    }
    rx_buf_release(&b);
    /* A huge result past the bound is an answer too big to give, not a crash. */
    if (rc == -E2BIG) {
        *text = json_string("The tool results are too long to repeat here.");
        rc = *text ? 0 : -ENOMEM;
    }
    return rc;
}

/* FNV-1a: tiny, stable across runs and platforms, enough to tell asks apart. */
static uint64_t fnv1a(const char *s)
{
    uint64_t h = 14695981039346656037ull;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* A call of tool `name` with `arguments` (a JSON text, passed on as it is). */
static json_t *tool_call_reply(json_t *msgs, const char *prefix, const char *name,
                               const char *arguments)
{
    char *dump = json_dumps(msgs, JSON_COMPACT | JSON_SORT_KEYS);
    char id[RX_ID_MAX];
    json_t *reply = NULL;

    if (dump) {
        snprintf(id, sizeof(id), "%s-%zu-%012llx", prefix, json_array_size(msgs),
                 (unsigned long long)(fnv1a(dump) & 0xffffffffffffull));
        reply = json_pack("{s:[{s:s, s:s, s:s}]}", "tool_calls", "id", id, "name", name,
                          "arguments", arguments);
    }
    free(dump);
    return reply;
}

/* The same with the arguments as an object (stolen, NULL when out of memory). */
static json_t *tool_call_reply_new(json_t *msgs, const char *prefix, const char *name,
                                   json_t *args)
{
    char *arguments = args ? json_dumps(args, JSON_COMPACT) : NULL;
    json_t *reply = arguments ? tool_call_reply(msgs, prefix, name, arguments) : NULL;

    json_decref(args);
    free(arguments);
    return reply;
}

/* A name character of a tool: what LLM APIs allow, [A-Za-z0-9_-]. */
static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' ||
           c == '-';
}

/*
 * "/call <tool> <JSON arguments>": a call of that tool with the rest of the
 * line, as it is (blank means {}), so the toolkit judges the arguments and
 * every error path can be tried offline. NULL in *reply when `text` is not a
 * /call; a usage text when the tool name is missing. 0 or -ENOMEM.
 */
static int slash_call(json_t *msgs, const char *prefix, const char *text, json_t **reply)
{
    char name[BUILTIN_REPLY_TOOL_NAME_MAX + 1], *args;
    const char *s = text, *end;
    size_t n = 0;

    *reply = NULL;
    while (is_space(*s))
        s++;
    if (strncmp(s, "/call", 5) || (s[5] && !is_space(s[5])))
        return 0;
    for (s += 5; is_space(*s); s++)
        ;
    while (is_name_char(s[n]) && n < BUILTIN_REPLY_TOOL_NAME_MAX)
        name[n] = s[n], n++;
    name[n] = '\0';
    if (!n || (s[n] && !is_space(s[n]))) {
        *reply = json_pack("{s:s}", "content", BUILTIN_REPLY_CALL_USAGE);
        return *reply ? 0 : -ENOMEM;
    }
    for (s += n; is_space(*s); s++)
        ;
    for (end = s + strlen(s); end > s && is_space(end[-1]); end--)
        ;
    args = end > s ? strndup(s, (size_t)(end - s)) : strdup("{}");
    if (args)
        *reply = tool_call_reply(msgs, prefix, name, args);
    free(args);
    return *reply ? 0 : -ENOMEM;
}

int builtin_reply_decide(json_t *msgs, const char *prefix, json_t **reply)
{
    char expr[CALCULATOR_INPUT_MAX + 1];
    size_t last = 0, i;
    bool found = false;
    const char *text;
    json_t *m, *answer, *r;
    int rc;

    if (!json_is_array(msgs))
        return -EINVAL;
    prefix = prefix ? prefix : "call";
    json_array_foreach(msgs, i, m)
    {
        if (is_real_user(m))
            last = i, found = true;
    }
    if (!found) {
        r = json_pack("{s:s}", "content",
                      "Hello! I am the builtin brain. Ask me to calculate something "
                      "(\"what is 2+3?\") or what time it is.");
        goto out_reply;
    }
    rc = answer_tools(msgs, last + 1, &answer);
    if (rc)
        return rc;
    if (answer) {
        r = json_pack("{s:o}", "content", answer);
        goto out_reply;
    }
    text = message_text(json_array_get(msgs, last));
    rc = slash_call(msgs, prefix, text, &r);
    if (rc)
        return rc;
    if (r)
        goto out_reply;
    if (extract_expression(text, expr, sizeof(expr)))
        r = tool_call_reply_new(msgs, prefix, "calculator",
                                json_pack("{s:s}", "expression", expr));
    else if (asks_time(text))
        r = tool_call_reply_new(msgs, prefix, "clock", json_object());
    else
        r = json_pack("{s:s+}", "content", BUILTIN_REPLY_ECHO_PREFIX, text);

out_reply:
    if (!r)
        return -ENOMEM;
    *reply = r;
    return 0;
}

/* ---------------------------------------------------------------- summary */

static bool in_window(const struct rx_state *s, int64_t t, int64_t cut)
{
    return t > s->summary_cut_at && t <= cut;
}

/* The old summary plus one line about (old cut, cut], newest kept when too long. */
int builtin_reply_summary(const struct rx_state *s, int64_t cut, char **out)
{
    size_t users = 0, answers = 0, tools = 0, first_quote, q = 0;
    struct rx_buf b;
    char *text, *start;
    int rc;

    for (size_t i = 0; i < s->user.len; i++)
        users += in_window(s, s->user.items[i].received_at, cut);
    for (size_t i = 0; i < s->assistant.len; i++)
        answers += in_window(s, s->assistant.items[i].received_at, cut) &&
                   s->assistant.items[i].status != RX_STATUS_STREAMING;
    for (size_t i = 0; i < s->tools.len; i++)
        tools += in_window(s, s->tools.items[i].called_at, cut);
    first_quote = users > SUMMARY_QUOTES ? users - SUMMARY_QUOTES : 0;
    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    rc = rx_buf_printf(&b,
                       "%s%sUp to %lld: %zu user message%s, %zu answer%s, %zu tool "
                       "call%s.",
                       s->context_summary, *s->context_summary ? "\n" : "",
                       (long long)cut, users, users == 1 ? "" : "s", answers,
                       answers == 1 ? "" : "s", tools, tools == 1 ? "" : "s");
    for (size_t i = 0; i < s->user.len && !rc; i++) {
        const struct rx_message *m = &s->user.items[i];
        size_t n;

        if (!in_window(s, m->received_at, cut) || q++ < first_quote)
            continue;
        n = builtin_reply_chunk_len(m->content, SUMMARY_QUOTE_CHARS);
        rc = rx_buf_printf(&b, "%s \"%.*s%s\"",
                           q == first_quote + 1 ? " The user wrote:" : ",", (int)n,
                           m->content, m->content[n] ? "..." : "");
    }
    if (rc) {
        rx_buf_release(&b);
        return rc == -E2BIG ? -ENOMEM : rc;
    }
    /* Too long: drop the oldest lines, or the head of a single long line. */
    start = b.data;
    while (strlen(start) > BUILTIN_REPLY_SUMMARY_MAX) {
        char *nl = strchr(start, '\n');

        if (nl) {
            start = nl + 1;
            continue;
        }
        start += strlen(start) - BUILTIN_REPLY_SUMMARY_MAX;
        while ((*start & 0xc0) == 0x80)
            start++;
    }
    text = strdup(start);
    rx_buf_release(&b);
    if (!text)
        return -ENOMEM;
    *out = text;
    return 0;
}
