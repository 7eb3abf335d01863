/*
 * fuzz_machine - libFuzzer target for the pure layer (`make fuzz`).
 *
 * The data is split into lines, each one JSON input, read by rx_json_parse and
 * held to jansson's reading (the same acceptance, the same tree). Every line
 * that parses is applied to one state (an input without a timestamp is stamped
 * like the server does, updatedAt + 1). After every step: the state's
 * invariants, updatedAt and calledBrainAt never decrease, a rejected or
 * unchanged input leaves the bytes as they were, effects_at's invariants
 * (unique keys, one request per pending call not awaiting approval, none for
 * one that awaits, so every call has a result, runs or awaits a person; no ask
 * for new signals while a tool is pending or awaits), the approval invariants
 * (a call awaiting a person, for a review or in doubt, has no result;
 * rx_state_awaiting_approval counts them; an override is what the last input
 * that set it said; a call in doubt started, a resolved one has the person's
 * result; toolkit-start-call / toolkit-call-in-doubt and retry / resolve did
 * what SPEC 3.7 says), the settings are
 * what the last user-configure named, a complete keeps its usage, firstTokenAt
 * and reasoning, the context builds, state and input encodings round-trip; and
 * the compression policy (rx_context_choose_cut), for a few budgets, against a
 * brute-force reading of its rules: a cut it gives is legal (forward, keeps
 * `keep` items and the newest user message, never splits a call from its
 * result nor a batch, never passes a pending call or a streaming answer), no
 * later time would be, "no cut" means within budget or no legal time, and the
 * machine accepts the cut as brain-compress-history. At the end the accepted
 * inputs, replayed from the initial state, give the same bytes. Any violation
 * aborts. Not part of the unit runner, which builds tests/unit/ only; `make
 * fuzz` builds this with clang and $(SM_SRC).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_context.h"
#include "state_machine/rx_effects.h"
#include "state_machine/rx_input.h"
#include "state_machine/rx_json.h"
#include "state_machine/rx_machine.h"
#include "state_machine/rx_state.h"

#define MAX_LINES 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "fuzz_machine: %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            abort();                                                                     \
        }                                                                                \
    } while (0)

static char *encode_state(const struct rx_state *s)
{
    struct rx_buf b;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    CHECK(rx_state_encode(s, &b) == 0, "encode failed");
    return rx_buf_take(&b, NULL);
}

static void check_effects(const struct rx_state *s, int64_t *some_ask)
{
    struct rx_effect_set set;
    size_t pending = rx_state_pending_tools(s), requests = 0, awaiting = 0;

    for (size_t i = 0; i < s->tools.len; i++) {
        const struct rx_tool_call *c = &s->tools.items[i];

        CHECK(!rx_approval_is_awaiting(c->approval) || !c->result.present,
              "%s awaits a person but has a result", c->id);
        CHECK(c->approval != RX_APPROVAL_IN_DOUBT || c->started_at,
              "%s is in doubt but never started", c->id);
        CHECK(c->approval != RX_APPROVAL_RESOLVED ||
                  (c->result.present && c->result.is_success),
              "%s is resolved without a result", c->id);
        awaiting += rx_approval_is_awaiting(c->approval);
    }
    CHECK(awaiting == rx_state_awaiting_approval(s), "%zu awaiting, counted %zu",
          awaiting, rx_state_awaiting_approval(s));

    rx_effect_set_init(&set);
    CHECK(rx_effects_at(s, &set) == 0, "effects_at failed");
    for (size_t i = 0; i < set.len; i++) {
        const struct rx_effect *e = &set.items[i];

        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(set.items[j].key, e->key), "duplicate key %s", e->key);
        if (e->kind == RX_EFFECT_REQUEST_TOOLKIT) {
            const struct rx_tool_call *c = rx_state_find_tool(s, e->tool_call_id);

            CHECK(c && !c->result.present, "%s is not a pending call", e->key);
            CHECK(!rx_approval_is_awaiting(c->approval), "%s runs unapproved", e->key);
            requests++;
            continue;
        }
        CHECK(i == 0 || set.items[i - 1].kind != RX_EFFECT_ASK_BRAIN ||
                  set.items[i - 1].signals_cut_at < e->signals_cut_at,
              "asks out of order at %s", e->key);
        *some_ask = e->signals_cut_at;
        if (pending) {
            int streaming = 0;

            for (size_t j = 0; j < s->assistant.len; j++)
                streaming |= s->assistant.items[j].status == RX_STATUS_STREAMING &&
                             s->assistant.items[j].called_brain_at == e->signals_cut_at;
            CHECK(streaming, "%s wanted while a tool is pending", e->key);
        }
    }
    CHECK(requests + awaiting == pending, "%zu requests, %zu awaiting, %zu pending",
          requests, awaiting, pending);
    rx_effect_set_release(&set);
}

/* What an accepted review or policy input must have left (SPEC 3.6, 3.7). */
static void check_approval_input(const struct rx_state *s, const struct rx_input *in)
{
    const struct rx_tool_call *c;
    bool approve = in->decision == RX_DECISION_APPROVE;

    if (in->type == RX_IN_USER_SET_TOOL_POLICY) {
        CHECK(rx_state_tool_policy(s, in->tool) == in->policy, "policy of %s not set",
              in->tool);
        return;
    }
    if (in->type == RX_IN_TOOLKIT_START_CALL || in->type == RX_IN_TOOLKIT_CALL_IN_DOUBT) {
        c = rx_state_find_tool(s, in->tool_call_id);
        CHECK(c && !c->result.present && c->started_at, "%s: not started",
              in->tool_call_id);
        CHECK(in->type == RX_IN_TOOLKIT_CALL_IN_DOUBT
                  ? c->approval == RX_APPROVAL_IN_DOUBT
                  : c->started_at == in->timestamp &&
                        !rx_approval_is_awaiting(c->approval),
              "%s: %s not applied", c->id, rx_input_type_name(in->type));
        return;
    }
    if (in->type != RX_IN_USER_REVIEW_TOOL_CALL)
        return;
    c = rx_state_find_tool(s, in->tool_call_id);
    CHECK(c, "reviewed %s is gone", in->tool_call_id);
    if (in->decision == RX_DECISION_RETRY || in->decision == RX_DECISION_RESOLVE) {
        /* Only a call in doubt takes them: it started. */
        CHECK(c->started_at && !in->always, "%s: %s of a call not in doubt", c->id,
              rx_decision_name(in->decision));
        CHECK(in->decision == RX_DECISION_RETRY
                  ? c->approval == RX_APPROVAL_APPROVED && !c->result.present
                  : c->approval == RX_APPROVAL_RESOLVED && c->result.present &&
                        c->result.is_success && !strcmp(c->result.text, in->text),
              "%s: %s not applied", c->id, rx_decision_name(in->decision));
        return;
    }
    CHECK(c->approval == (approve ? RX_APPROVAL_APPROVED : RX_APPROVAL_REJECTED),
          "%s: approval %d", c->id, c->approval);
    CHECK(approve ? !c->result.present : c->result.present && !c->result.is_success,
          "%s: result after the review", c->id);
    CHECK(!approve || !in->parameters || !strcmp(c->parameters, in->parameters),
          "%s: edited parameters not kept", c->id);
    if (!in->always)
        return;
    CHECK(rx_state_tool_policy(s, c->name) == (approve ? RX_POLICY_AUTO : RX_POLICY_DENY),
          "always did not set the policy of %s", c->name);
    for (size_t i = 0; i < s->tools.len; i++)
        CHECK(strcmp(s->tools.items[i].name, c->name) ||
                  s->tools.items[i].approval != RX_APPROVAL_PENDING,
              "%s still awaits after always", s->tools.items[i].id);
}

/* What an accepted (or unchanged) user-configure or complete must have left. */
static void check_settings_input(const struct rx_state *s, const struct rx_input *in,
                                 enum rx_verdict verdict)
{
    const struct rx_settings *st = &s->settings, *ch = &in->settings;
    const struct rx_message *m;

    if (in->type == RX_IN_USER_CONFIGURE) {
        unsigned named = in->settings_named;

        CHECK(!(named & RX_SETTING_SYSTEM_PROMPT) ||
                  (st->system_prompt && ch->system_prompt
                       ? !strcmp(st->system_prompt, ch->system_prompt)
                       : st->system_prompt == ch->system_prompt),
              "systemPrompt not as configured");
        CHECK(!(named & RX_SETTING_MODEL) ||
                  (st->model && ch->model ? !strcmp(st->model, ch->model)
                                          : st->model == ch->model),
              "model not as configured");
        CHECK(!(named & RX_SETTING_TEMPERATURE) ||
                  (st->has_temperature == ch->has_temperature &&
                   (!ch->has_temperature || st->temperature == ch->temperature)),
              "temperature not as configured");
        return;
    }
    if (in->type != RX_IN_BRAIN_SEND_MESSAGE_COMPLETE || verdict != RX_ACCEPTED)
        return;
    m = rx_state_find_assistant(s, in->message_id);
    CHECK(m && m->status == RX_STATUS_COMPLETE, "%s is not complete", in->message_id);
    CHECK(m->usage.present == in->usage.present &&
              (!m->usage.present ||
               (m->usage.prompt_tokens == in->usage.prompt_tokens &&
                m->usage.completion_tokens == in->usage.completion_tokens)),
          "%s: usage not kept", m->id);
    CHECK(m->has_first_token_at == in->has_first_token_at &&
              m->first_token_at == (in->has_first_token_at ? in->first_token_at : 0),
          "%s: firstTokenAt not kept", m->id);
    CHECK(m->reasoning && in->reasoning ? !strcmp(m->reasoning, in->reasoning)
                                        : m->reasoning == in->reasoning,
          "%s: reasoning not kept", m->id);
}

static void check_context(const struct rx_state *s, int64_t cut)
{
    json_t *ctx = NULL;

    CHECK(rx_context_build(s, "sys", cut, &ctx) == 0, "context build failed");
    CHECK(json_is_array(ctx) && json_array_size(ctx) >= 1, "context is not an array");
    for (size_t i = 0; i < json_array_size(ctx); i++) {
        json_t *m = json_array_get(ctx, i);
        const char *role = json_string_value(json_object_get(m, "role"));

        CHECK(role, "message %zu has no role", i);
        if (!strcmp(role, "tool")) {
            /* A tool message answers a call of the assistant message before it. */
            CHECK(i > 0, "tool message first");
            CHECK(json_is_string(json_object_get(m, "tool_call_id")), "no tool_call_id");
        }
    }
    json_decref(ctx);
}

/* ---- the compression policy, checked by brute force ---------------------------- */

static bool in_window(const struct rx_state *s, int64_t t, int64_t sig)
{
    return t > s->summary_cut_at && t <= sig;
}

static bool assistant_item(const struct rx_state *s, const struct rx_message *m,
                           int64_t sig)
{
    return m->status != RX_STATUS_STREAMING && *m->content &&
           in_window(s, m->received_at, sig);
}

/* Items after the current cut (a batch once) whose time is later than t. */
static size_t items_after(const struct rx_state *s, int64_t sig, int64_t t)
{
    size_t n = 0;

    for (size_t i = 0; i < s->user.len; i++)
        n += in_window(s, s->user.items[i].received_at, sig) &&
             s->user.items[i].received_at > t;
    for (size_t i = 0; i < s->assistant.len; i++)
        n += assistant_item(s, &s->assistant.items[i], sig) &&
             s->assistant.items[i].received_at > t;
    for (size_t i = 0; i < s->tools.len; i++) {
        int64_t at = s->tools.items[i].called_at;
        bool first = true;

        for (size_t j = 0; j < i; j++)
            first &= s->tools.items[j].called_at != at;
        n += first && in_window(s, at, sig) && at > t;
    }
    return n;
}

static bool is_item_time(const struct rx_state *s, int64_t sig, int64_t t)
{
    for (size_t i = 0; i < s->user.len; i++)
        if (in_window(s, s->user.items[i].received_at, sig) &&
            s->user.items[i].received_at == t)
            return true;
    for (size_t i = 0; i < s->assistant.len; i++)
        if (assistant_item(s, &s->assistant.items[i], sig) &&
            s->assistant.items[i].received_at == t)
            return true;
    for (size_t i = 0; i < s->tools.len; i++)
        if (in_window(s, s->tools.items[i].called_at, sig) &&
            s->tools.items[i].called_at == t)
            return true;
    return false;
}

/* The rules of SPEC 3.5 and rx_context.h, read literally, for one time t. */
static bool cut_is_legal(const struct rx_state *s, int64_t sig, size_t keep, int64_t t)
{
    int64_t newest_user = -1;

    if (!in_window(s, t, sig) || !is_item_time(s, sig, t) ||
        items_after(s, sig, t) < keep)
        return false;
    for (size_t i = 0; i < s->tools.len; i++) {
        const struct rx_tool_call *c = &s->tools.items[i];

        if (c->called_at > s->summary_cut_at && c->called_at <= t &&
            (!c->result.present || c->result.received_at > t))
            return false;
    }
    for (size_t i = 0; i < s->assistant.len; i++) {
        const struct rx_message *m = &s->assistant.items[i];

        if (m->status == RX_STATUS_STREAMING && m->received_at > s->summary_cut_at &&
            m->received_at <= t)
            return false;
    }
    for (size_t i = 0; i < s->user.len; i++)
        if (in_window(s, s->user.items[i].received_at, sig) &&
            s->user.items[i].received_at > newest_user)
            newest_user = s->user.items[i].received_at;
    return newest_user < 0 || newest_user > t;
}

/* Is some time later than `after` a legal cut? Item times are the only candidates. */
static bool legal_cut_after(const struct rx_state *s, int64_t sig, size_t keep,
                            int64_t after)
{
    for (size_t i = 0; i < s->user.len; i++)
        if (s->user.items[i].received_at > after &&
            cut_is_legal(s, sig, keep, s->user.items[i].received_at))
            return true;
    for (size_t i = 0; i < s->assistant.len; i++)
        if (s->assistant.items[i].received_at > after &&
            cut_is_legal(s, sig, keep, s->assistant.items[i].received_at))
            return true;
    for (size_t i = 0; i < s->tools.len; i++)
        if (s->tools.items[i].called_at > after &&
            cut_is_legal(s, sig, keep, s->tools.items[i].called_at))
            return true;
    return false;
}

static void check_compress(const struct rx_state *s, int64_t sig)
{
    static const struct rx_context_budget budgets[] = {
        {RX_CONTEXT_ITEMS, 1, 1},  {RX_CONTEXT_ITEMS, 3, 2},  {RX_CONTEXT_ITEMS, 1, 0},
        {RX_CONTEXT_CHARS, 10, 1}, {RX_CONTEXT_TOKENS, 4, 3}, {RX_CONTEXT_ITEMS, 0, 1},
    };

    for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
        const struct rx_context_budget *b = &budgets[i];
        int64_t cut = -1, len = rx_context_length(s, sig, b->unit);
        bool over = b->limit > 0 && len > b->limit;

        CHECK(len >= 0, "negative length %lld", (long long)len);
        CHECK(rx_context_choose_cut(s, sig, b, &cut) == 0, "choose_cut failed");
        if (cut == RX_CONTEXT_NO_CUT) {
            CHECK(!over || !legal_cut_after(s, sig, b->keep, s->summary_cut_at),
                  "budget %zu: no cut, but a legal one exists", i);
            continue;
        }
        CHECK(over, "budget %zu: a cut at %lld within the budget", i, (long long)cut);
        CHECK(cut_is_legal(s, sig, b->keep, cut), "budget %zu: illegal cut %lld", i,
              (long long)cut);
        CHECK(!legal_cut_after(s, sig, b->keep, cut),
              "budget %zu: a later cut than %lld is legal", i, (long long)cut);
        if (s->updated_at < INT64_MAX) {
            struct rx_input in = {.type = RX_IN_BRAIN_COMPRESS_HISTORY};
            struct rx_outcome out;
            struct rx_state copy;

            CHECK(rx_state_copy(s, &copy) == 0, "copy failed");
            CHECK(rx_input_set_str(&in.text, "summary") == 0, "set_str failed");
            in.timestamp = s->updated_at + 1;
            in.has_timestamp = true;
            in.called_brain_at = s->called_brain_at;
            in.cut_at = cut;
            CHECK(rx_machine_apply(&copy, &in, &out) == 0, "apply failed");
            CHECK(out.verdict == RX_ACCEPTED, "the machine refused cut %lld: %s",
                  (long long)cut, rx_reason_name(out.reason));
            rx_input_release(&in);
            rx_state_release(&copy);
        }
    }
}

/* The line through the server's parser, held to jansson's reading of it:
   both accept it or neither does, and then they build the same tree. Past
   the parser's depth bound, or with a NUL byte (which jansson's lexer skips
   after a number), only the parser's refusal is expected. */
static json_t *parse_line(const char *p, size_t len)
{
    json_t *j, *ref = json_loadb(p, len, 0, NULL);
    int rc = rx_json_parse(p, len, 0, &j, NULL);
    bool exempt = rx_json_depth(p, len) > RX_JSON_DEPTH_MAX || memchr(p, '\0', len);

    CHECK(rc == 0 || rc == -EINVAL, "rx_json_parse: %d", rc);
    CHECK(!j == !ref || (!j && exempt), "rx_json_parse %s what jansson %s: %.*s",
          j ? "accepts" : "refuses", ref ? "accepts" : "refuses", (int)len, p);
    CHECK(!j || json_equal(j, ref), "rx_json_parse builds another tree: %.*s", (int)len,
          p);
    json_decref(ref);
    return j;
}

static void check_round_trip(const struct rx_state *s, const char *bytes)
{
    json_t *j;
    struct rx_state back;
    char *again;

    CHECK(!rx_json_parse(bytes, strlen(bytes), 0, &j, NULL),
          "state encoding is not JSON: %s", bytes);
    CHECK(rx_state_decode(j, &back, NULL) == 0, "state does not decode: %s", bytes);
    again = encode_state(&back);
    CHECK(!strcmp(bytes, again), "round trip differs:\n%s\n%s", bytes, again);
    (void)s;
    free(again);
    rx_state_release(&back);
    json_decref(j);
}

static void check_input_round_trip(const struct rx_input *in, struct rx_buf *enc)
{
    struct rx_buf again;
    struct rx_input back;
    json_t *j;

    CHECK(!rx_json_parse(enc->data, enc->len, 0, &j, NULL),
          "input encoding is not JSON: %s", enc->data);
    CHECK(rx_input_parse(j, &back, NULL, NULL) == 0, "encoded input does not parse: %s",
          enc->data);
    rx_buf_init(&again, RX_BUF_SMALL_MAX);
    CHECK(rx_input_encode(&back, &again) == 0, "encode failed");
    CHECK(!strcmp(enc->data, again.data), "input round trip differs:\n%s\n%s", enc->data,
          again.data);
    CHECK(back.type == in->type, "type changed");
    rx_buf_release(&again);
    rx_input_release(&back);
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rx_state s, replay;
    struct rx_buf log;
    const char *p = (const char *)data, *end = p + size;
    char *final, *replayed, *line, *save = NULL;
    int lines = 0;

    if (rx_state_init(&s))
        abort();
    rx_buf_init(&log, RX_BUF_STATE_MAX);
    if (rx_buf_puts(&log, ""))
        abort();
    while (p < end && lines++ < MAX_LINES) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        json_t *j = parse_line(p, len);
        struct rx_input in;
        struct rx_outcome out;
        struct rx_buf enc;
        const char *field = NULL;
        struct rx_error err;
        char *before, *after;
        int64_t upd = s.updated_at, cba = s.called_brain_at, ask = INT64_MAX;
        int rc;

        p += len + (nl != NULL);
        if (!j)
            continue;
        rc = rx_input_parse(j, &in, &field, &err);
        json_decref(j);
        if (rc) {
            CHECK(rc == -EINVAL && field, "parse: %d without a field", rc);
            continue;
        }
        if (!in.has_timestamp && s.updated_at < INT64_MAX) {
            in.timestamp = s.updated_at + 1;
            in.has_timestamp = true;
        }
        rx_buf_init(&enc, RX_BUF_SMALL_MAX);
        CHECK(rx_input_encode(&in, &enc) == 0, "input encode failed");
        if (in.has_timestamp)
            check_input_round_trip(&in, &enc);

        before = encode_state(&s);
        CHECK(rx_machine_apply(&s, &in, &out) == 0, "apply failed");
        CHECK(rx_state_check_invariants(&s), "invariants broken by %s", enc.data);
        CHECK(s.updated_at >= upd, "updatedAt went back");
        CHECK(s.called_brain_at >= cba, "calledBrainAt went back");
        after = encode_state(&s);
        if (out.verdict != RX_REJECTED) {
            check_approval_input(&s, &in);
            check_settings_input(&s, &in, out.verdict);
        }
        if (out.verdict == RX_ACCEPTED) {
            CHECK(s.updated_at == in.timestamp, "updatedAt is not the timestamp");
            CHECK(rx_buf_puts(&log, enc.data) == 0 && rx_buf_putc(&log, '\n') == 0,
                  "log full");
        } else {
            CHECK(!strcmp(before, after), "%s input changed the state: %s",
                  rx_verdict_name(out.verdict), enc.data);
            CHECK((out.verdict == RX_REJECTED) == (out.reason != RX_REASON_NONE),
                  "verdict %s with reason %s", rx_verdict_name(out.verdict),
                  rx_reason_name(out.reason));
        }
        check_effects(&s, &ask);
        check_context(&s, INT64_MAX);
        check_compress(&s, INT64_MAX);
        if (ask != INT64_MAX) {
            check_context(&s, ask);
            check_compress(&s, ask);
        }
        check_round_trip(&s, after);
        free(before);
        free(after);
        rx_buf_release(&enc);
        rx_input_release(&in);
    }

    if (rx_state_init(&replay))
        abort();
    for (line = strtok_r(log.data, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *j;
        struct rx_input in;
        struct rx_outcome out;

        CHECK(!rx_json_parse(line, strlen(line), 0, &j, NULL) &&
                  rx_input_parse(j, &in, NULL, NULL) == 0,
              "log line: %s", line);
        CHECK(rx_machine_apply(&replay, &in, &out) == 0 && out.verdict == RX_ACCEPTED,
              "replay of %s: %s", line, rx_reason_name(out.reason));
        rx_input_release(&in);
        json_decref(j);
    }
    final = encode_state(&s);
    replayed = encode_state(&replay);
    CHECK(!strcmp(final, replayed), "replay differs:\n%s\n%s", final, replayed);
    free(final);
    free(replayed);
    rx_buf_release(&log);
    rx_state_release(&replay);
    rx_state_release(&s);
    return 0;
}
