/*
 * check_random - thousands of random input sequences (seeded, deterministic),
 * valid and invalid mixed. After every step the invariants hold: the state's
 * own (rx_state_check_invariants), updatedAt and calledBrainAt never decrease,
 * a rejected or unchanged input leaves the bytes as they were, no ask for new
 * signals while a tool is pending, exactly one request-toolkit key per pending
 * record not awaiting approval, every call without a result either requested
 * or awaiting a person (SPEC 3.6), unique keys. The inputs include the
 * server's policy stamps, reviews and per-session policies, per-session
 * settings (user-configure), completes with usage and reasoning, and the
 * runtime's toolkit-start-call / toolkit-call-in-doubt with the person's
 * retry / reject / resolve of a call in doubt (SPEC 3.7). At the end,
 * replaying the accepted inputs (encoded with rx_input_encode, parsed back)
 * from the initial state gives the same bytes.
 * RX_TEST_QUICK=1 runs fewer sequences (valgrind).
 */
#include "tests/unit/helper_sm.h"

#include <inttypes.h>

/*
 * Check records the location of every passing ck_assert (a write to a pipe),
 * which dominates a loop of 10^5 steps; the hot path checks with REQUIRE,
 * which only calls into Check on failure.
 */
#define REQUIRE(cond, ...)                                                               \
    do {                                                                                 \
        if (!(cond))                                                                     \
            ck_abort_msg(__VA_ARGS__);                                                   \
    } while (0)
#define REQUIRE0(call) REQUIRE((call) == 0, "%s failed", #call)

/* state_bytes without ck_assert. */
static char *bytes_of(const struct rx_state *s)
{
    struct rx_buf b;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    REQUIRE0(rx_state_encode(s, &b));
    return rx_buf_take(&b, NULL);
}

struct rng {
    uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
    /* xorshift64*: small, fast, and the same on every platform. */
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}

static unsigned pick(struct rng *r, unsigned n)
{
    return (unsigned)(rng_next(r) % n);
}

static const char *const texts[] = {
    "hi", "2+3?", "caf\\u00e9", "a \\\"quote\\\"", "line\\nbreak", "", " "};

/* The stamp the server puts on a brain-call-tools entry (or none, as old logs). */
static const char *const stamps[] = {"", ",\"policy\":\"auto\"", ",\"policy\":\"ask\"",
                                     ",\"policy\":\"ask\"", ",\"policy\":\"deny\""};
static const char *const tools[] = {"calculator", "clock"};

/* What toolkit-start-call accepts: no result, not waiting for a person. */
static bool may_start(const struct rx_tool_call *c)
{
    return !c->result.present && !rx_approval_is_awaiting(c->approval);
}

static bool is_in_doubt(const struct rx_tool_call *c)
{
    return c->approval == RX_APPROVAL_IN_DOUBT && !c->result.present;
}

/* Mostly a call of `s` that `is` holds for (the inputs that apply), else any id. */
static void pick_call(struct rng *r, const struct rx_state *s,
                      bool (*is)(const struct rx_tool_call *), char *id, size_t size)
{
    size_t n = 0, nth;

    snprintf(id, size, "c%u", pick(r, 9));
    for (size_t i = s->tools.settled; i < s->tools.len; i++)
        n += is(&s->tools.items[i]);
    if (!n || !pick(r, 4))
        return;
    nth = pick(r, (unsigned)n);
    for (size_t i = s->tools.settled; i < s->tools.len; i++)
        if (is(&s->tools.items[i]) && !nth--) {
            snprintf(id, size, "%.20s", s->tools.items[i].id);
            return;
        }
}

/* One random input as JSON text into buf; the clock `t` moves forward mostly. */
static void gen_input(struct rng *r, int64_t *t, const struct rx_state *s, char *buf,
                      size_t size)
{
    char ts[48], cba[48];
    unsigned k = pick(r, 140);
    int64_t when;

    switch (pick(r, 12)) {
    case 0: /* stale */
        when = *t > 3 ? *t - 1 - pick(r, 3) : *t;
        break;
    case 1: /* same time */
        when = *t;
        break;
    default:
        when = *t += 1 + pick(r, 3);
    }
    if (pick(r, 40))
        snprintf(ts, sizeof(ts), "\"timestamp\":%" PRId64 ",", when);
    else
        ts[0] = '\0'; /* missing: parses, the machine refuses it */
    snprintf(cba, sizeof(cba), "\"calledBrainAt\":%" PRId64 ",",
             pick(r, 4) ? (int64_t)pick(r, (unsigned)when + 1) : when);

    if (k < 22) {
        snprintf(
            buf, size,
            "{\"type\":\"user-send-message\",%s\"messageId\":\"m%u\",\"content\":\"%s\"}",
            ts, pick(r, 6), texts[pick(r, 7)]);
    } else if (k < 27) {
        char parts[256] = "";
        size_t n = 0;

        for (size_t i = 0; i < s->assistant.len && n < 200; i++)
            if (s->assistant.items[i].status == RX_STATUS_STREAMING && pick(r, 2))
                n += (size_t)snprintf(parts + n, sizeof(parts) - n, "%s\"%.20s\":\"p%u\"",
                                      n ? "," : "", s->assistant.items[i].id, pick(r, 9));
        snprintf(buf, size, "{\"type\":\"user-cancel\",%s\"partialContents\":{%s}}", ts,
                 parts);
    } else if (k < 40) {
        snprintf(buf, size,
                 "{\"type\":\"brain-send-message-start\",%s%s\"messageId\":\"a%u\"}", ts,
                 cba, pick(r, 6));
    } else if (k < 53) {
        /* What a brain may say about its answer (SPEC 3.1), or nothing. */
        static const char *const extras[] = {
            "",
            "",
            ",\"usage\":{\"promptTokens\":12,\"completionTokens\":3}",
            ",\"usage\":{\"promptTokens\":0,\"completionTokens\":0},\"firstTokenAt\":1,"
            "\"reasoning\":\"Let me think.\"",
            ",\"reasoning\":\"\",\"firstTokenAt\":null",
        };
        snprintf(buf, size,
                 "{\"type\":\"brain-send-message-complete\",%s%s\"messageId\":\"a%u\","
                 "\"content\":\"%s\"%s}",
                 ts, cba, pick(r, 6), texts[pick(r, 7)], extras[pick(r, 5)]);
    } else if (k < 65) {
        unsigned a = pick(r, 8), b = pick(r, 8);

        if (pick(r, 2))
            snprintf(
                buf, size,
                "{\"type\":\"brain-call-tools\",%s%s\"toolCalls\":{\"c%u\":{\"name\":"
                "\"calculator\",\"parameters\":\"{\\\"e\\\":%u}\"%s}}}",
                ts, cba, a, b, stamps[pick(r, 5)]);
        else
            snprintf(
                buf, size,
                "{\"type\":\"brain-call-tools\",%s%s\"toolCalls\":{\"c%u\":{\"name\":"
                "\"clock\",\"parameters\":\"{}\"%s},\"c%u\":{\"name\":\"calculator\","
                "\"parameters\":{\"e\":[1,2]}%s}}}",
                ts, cba, a, stamps[pick(r, 5)], b, stamps[pick(r, 5)]);
    } else if (k < 70) {
        snprintf(buf, size,
                 "{\"type\":\"brain-compress-history\",%s%s\"summary\":\"s%u\",\"cutAt\":"
                 "%" PRId64 "}",
                 ts, cba, pick(r, 5),
                 pick(r, 3) ? (int64_t)pick(r, (unsigned)when + 1) : when + pick(r, 3));
    } else if (k < 76) {
        snprintf(buf, size,
                 "{\"type\":\"brain-load-tool-call\",%s%s\"toolCallId\":\"c%u\"}", ts,
                 cba, pick(r, 9));
    } else if (k < 90) {
        snprintf(buf, size,
                 "{\"type\":\"toolkit-respond\",%s\"toolCallId\":\"c%u\",\"result\":"
                 "\"%s\"}",
                 ts, pick(r, 9), texts[pick(r, 5)]);
    } else if (k < 97) {
        snprintf(
            buf, size,
            "{\"type\":\"toolkit-error\",%s\"toolCallId\":\"c%u\",\"error\":\"e%u\"}", ts,
            pick(r, 9), pick(r, 3));
    } else if (k < 104) {
        static const char *const extras[] = {
            "",
            ",\"always\":true",
            ",\"parameters\":\"{\\\"e\\\":\\\"9*9\\\"}\"",
            ",\"reason\":\"not now\"",
            ",\"reason\":\" \",\"always\":true,\"parameters\":\"{}\"",
            ",\"parameters\":\"[1]\"", /* not an object: refused */
        };
        char id[32];
        size_t n = rx_state_awaiting_approval(s);

        /* Mostly a call that waits (the reviews that apply), else any id. */
        snprintf(id, sizeof(id), "c%u", pick(r, 9));
        if (n && pick(r, 4)) {
            size_t nth = pick(r, (unsigned)n);

            for (size_t i = s->tools.settled; i < s->tools.len; i++)
                if (s->tools.items[i].approval == RX_APPROVAL_PENDING && !nth--) {
                    snprintf(id, sizeof(id), "%.20s", s->tools.items[i].id);
                    break;
                }
        }
        snprintf(buf, size,
                 "{\"type\":\"user-review-tool-call\",%s\"toolCallId\":\"%s\","
                 "\"decision\":\"%s\"%s}",
                 ts, id, pick(r, 3) ? "approve" : "reject", extras[pick(r, 6)]);
    } else if (k < 108) {
        static const char *const policies[] = {"\"auto\"", "\"ask\"", "\"deny\"", "null"};

        snprintf(buf, size,
                 "{\"type\":\"user-set-tool-policy\",%s\"tool\":\"%s\",\"policy\":%s}",
                 ts, tools[pick(r, 2)], policies[pick(r, 4)]);
    } else if (k < 114) {
        static const char *const prompts[] = {"null", "\"\"", "\"Be brief.\""};
        static const char *const models[] = {"null", "\"text\"", "\"gpt-x\""};
        static const char *const temps[] = {"null", "0", "0.7", "2"};
        char fields[160];
        unsigned which = 1 + pick(r, 7), n = 0;

        /* One to three of the settings, each set or cleared (null). */
        fields[0] = '\0';
        if (which & 1)
            n += (unsigned)snprintf(fields + n, sizeof(fields) - n,
                                    ",\"systemPrompt\":%s", prompts[pick(r, 3)]);
        if (which & 2)
            n += (unsigned)snprintf(fields + n, sizeof(fields) - n, ",\"model\":%s",
                                    models[pick(r, 3)]);
        if (which & 4)
            snprintf(fields + n, sizeof(fields) - n, ",\"temperature\":%s",
                     temps[pick(r, 4)]);
        snprintf(buf, size, "{\"type\":\"user-configure\",%s\"colour\":1%s}", ts, fields);
    } else if (k >= 118) {
        /* SPEC 3.7: the runtime marks a call started or in doubt; a person
           answers a call in doubt (or tries a decision that does not apply). */
        static const char *const decisions[] = {
            "\"retry\"",
            "\"reject\",\"reason\":\"no\"",
            "\"resolve\",\"result\":\"paid\"",
            "\"resolve\",\"result\":\"\"",
            "\"approve\"",                                     /* in doubt: refused */
            "\"reject\",\"always\":true",                      /* in doubt: refused */
            "\"resolve\"",                                     /* no result: refused */
            "\"retry\",\"always\":true,\"parameters\":\"{}\"", /* both dropped */
        };
        char id[32];

        if (k < 126) {
            pick_call(r, s, may_start, id, sizeof(id));
            snprintf(buf, size,
                     "{\"type\":\"toolkit-start-call\",%s\"toolCallId\":\"%s\"}", ts, id);
        } else if (k < 132) {
            pick_call(r, s, rx_tool_call_is_running, id, sizeof(id));
            snprintf(buf, size,
                     "{\"type\":\"toolkit-call-in-doubt\",%s\"toolCallId\":\"%s\"}", ts,
                     id);
        } else {
            /* Mostly one in doubt, some awaiting approval (retry, resolve
               refused there). */
            pick_call(r, s, pick(r, 4) ? is_in_doubt : rx_tool_call_is_awaiting, id,
                      sizeof(id));
            snprintf(buf, size,
                     "{\"type\":\"user-review-tool-call\",%s\"toolCallId\":\"%s\","
                     "\"decision\":%s}",
                     ts, id, decisions[pick(r, 8)]);
        }
    } else {
        /* Shapes the parser must refuse. */
        static const char *const bad[] = {
            "{\"type\":\"user-send-message\",\"messageId\":\"m1\",\"content\":5}",
            "{\"type\":\"brain-call-tools\",\"calledBrainAt\":1,\"toolCalls\":[]}",
            "{\"type\":\"what\"}",
            "{\"type\":\"toolkit-respond\",\"toolCallId\":\"c1\"}",
            "{\"type\":\"user-review-tool-call\",\"toolCallId\":\"c1\",\"decision\":"
            "\"maybe\"}",
            "{\"type\":\"user-set-tool-policy\",\"tool\":\"clock\"}",
            "{\"type\":\"user-configure\",\"temperature\":3}",
            "{\"type\":\"user-configure\"}",
        };
        snprintf(buf, size, "%s", bad[pick(r, 8)]);
    }
}

/* The effect invariants of SPEC 3.3 and 3.6 for one state. */
static void check_effects(const struct rx_state *s)
{
    struct rx_effect_set set;
    size_t pending = rx_state_pending_tools(s), requests = 0, awaiting = 0;

    for (size_t i = 0; i < s->tools.len; i++)
        awaiting += rx_approval_is_awaiting(s->tools.items[i].approval);
    REQUIRE(awaiting == rx_state_awaiting_approval(s), "%zu awaiting, counted %zu",
            awaiting, rx_state_awaiting_approval(s));

    rx_effect_set_init(&set);
    REQUIRE0(rx_effects_at(s, &set));
    for (size_t i = 0; i < set.len; i++) {
        const struct rx_effect *e = &set.items[i];

        for (size_t j = 0; j < i; j++)
            REQUIRE(strcmp(set.items[j].key, e->key), "duplicate key %s", e->key);
        if (e->kind == RX_EFFECT_REQUEST_TOOLKIT) {
            const struct rx_tool_call *c = rx_state_find_tool(s, e->tool_call_id);

            REQUIRE(c && !c->result.present, "%s: not a pending call", e->key);
            REQUIRE(!rx_approval_is_awaiting(c->approval), "%s runs unapproved", e->key);
            requests++;
        } else if (pending) {
            /* No ask for new signals while a tool is pending; only an answer
               already streaming may keep its own ask. */
            bool streaming = false;

            for (size_t j = 0; j < s->assistant.len; j++)
                streaming |= s->assistant.items[j].status == RX_STATUS_STREAMING &&
                             s->assistant.items[j].called_brain_at == e->signals_cut_at;
            REQUIRE(streaming, "'%s' wanted while a tool is pending", e->key);
        }
    }
    REQUIRE(requests == pending - awaiting,
            "%zu requests for %zu pending calls, %zu awaiting", requests, pending,
            awaiting);
    /* Every call has a result, runs, or awaits a person: none is forgotten. */
    for (size_t i = 0; i < s->tools.len; i++) {
        char key[RX_EFFECT_KEY_LEN];

        if (s->tools.items[i].result.present ||
            rx_approval_is_awaiting(s->tools.items[i].approval))
            continue;
        snprintf(key, sizeof(key), "request-toolkit-%s", s->tools.items[i].id);
        REQUIRE(rx_effect_set_find(&set, key), "%s not wanted", key);
    }
    rx_effect_set_release(&set);
}

/* Replace the state by its decoded encoding: the machine must not care. */
static void reload(struct rx_state *s)
{
    char *bytes = bytes_of(s), *again;
    json_t *j = json_loads(bytes, 0, NULL);
    struct rx_state back;

    REQUIRE(j, "encoding is not JSON");
    REQUIRE0(rx_state_decode(j, &back, NULL));
    again = bytes_of(&back);
    REQUIRE(!strcmp(bytes, again), "decode changed the state:\n%s\n%s", bytes, again);
    rx_state_release(s);
    *s = back;
    json_decref(j);
    free(bytes);
    free(again);
}

struct stats {
    long steps, parse_errors, accepted, unchanged, rejected;
    long reviews, policies, awaiting;   /* accepted reviews and policies; steps with a
                                            call awaiting a person */
    long configures;                    /* accepted user-configure inputs */
    long starts, doubts, doubt_reviews; /* accepted SPEC 3.7 inputs */
};

static void run_sequence(uint64_t seed, int steps, struct stats *st)
{
    struct rng r = {seed * 0x9e3779b97f4a7c15ull + 1};
    struct rx_state s, replay;
    struct rx_buf log;
    int64_t t = 0;
    char *final, *replayed, *line, *save = NULL;

    REQUIRE0(rx_state_init(&s));
    rx_buf_init(&log, RX_BUF_STATE_MAX);
    REQUIRE0(rx_buf_puts(&log, ""));
    for (int i = 0; i < steps; i++) {
        char text[1024], *before, *after;
        json_t *j;
        struct rx_input in;
        struct rx_outcome out;
        int64_t upd = s.updated_at, cba = s.called_brain_at;

        gen_input(&r, &t, &s, text, sizeof(text));
        j = json_loads(text, 0, NULL);
        REQUIRE(j != NULL, "generator made bad JSON: %s", text);
        st->steps++;
        if (rx_input_parse(j, &in, NULL, NULL)) {
            st->parse_errors++;
            json_decref(j);
            continue;
        }
        json_decref(j);
        before = bytes_of(&s);
        REQUIRE0(rx_machine_apply(&s, &in, &out));
        REQUIRE(rx_state_check_invariants(&s), "seed %" PRIu64 " step %d: %s", seed, i,
                text);
        REQUIRE(s.updated_at >= upd, "updatedAt went back");
        REQUIRE(s.called_brain_at >= cba, "calledBrainAt went back");
        after = bytes_of(&s);
        st->awaiting += rx_state_awaiting_approval(&s) > 0;
        if (out.verdict == RX_ACCEPTED) {
            st->accepted++;
            st->reviews += in.type == RX_IN_USER_REVIEW_TOOL_CALL;
            st->policies += in.type == RX_IN_USER_SET_TOOL_POLICY;
            st->configures += in.type == RX_IN_USER_CONFIGURE;
            st->starts += in.type == RX_IN_TOOLKIT_START_CALL;
            st->doubts += in.type == RX_IN_TOOLKIT_CALL_IN_DOUBT;
            st->doubt_reviews +=
                in.type == RX_IN_USER_REVIEW_TOOL_CALL &&
                (in.decision == RX_DECISION_RETRY || in.decision == RX_DECISION_RESOLVE);
            REQUIRE(s.updated_at == in.timestamp, "updatedAt is not the timestamp");
            REQUIRE0(rx_input_encode(&in, &log));
            REQUIRE0(rx_buf_putc(&log, '\n'));
        } else {
            REQUIRE(!strcmp(before, after),
                    "seed %" PRIu64 " step %d: %s %s changed the state: %s", seed, i,
                    rx_verdict_name(out.verdict), rx_reason_name(out.reason), text);
            if (out.verdict == RX_UNCHANGED)
                st->unchanged++;
            else
                st->rejected++;
            REQUIRE((out.reason == RX_REASON_NONE) == (out.verdict == RX_UNCHANGED),
                    "reason %s with verdict %s", rx_reason_name(out.reason),
                    rx_verdict_name(out.verdict));
        }
        check_effects(&s);
        if (pick(&r, 10) == 0)
            reload(&s);
        rx_input_release(&in);
        free(before);
        free(after);
    }

    /* state = fold(transition, initial, accepted inputs) */
    REQUIRE0(rx_state_init(&replay));
    for (line = strtok_r(log.data, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);
        struct rx_input in;
        struct rx_outcome out;

        REQUIRE(j != NULL, "encoded input is not JSON: %s", line);
        REQUIRE0(rx_input_parse(j, &in, NULL, NULL));
        REQUIRE0(rx_machine_apply(&replay, &in, &out));
        REQUIRE(out.verdict == RX_ACCEPTED, "replay of %s: %s", line,
                rx_reason_name(out.reason));
        rx_input_release(&in);
        json_decref(j);
    }
    final = bytes_of(&s);
    replayed = bytes_of(&replay);
    REQUIRE(!strcmp(final, replayed), "seed %" PRIu64 ": replay differs\n%s\n%s", seed,
            final, replayed);
    free(final);
    free(replayed);
    rx_buf_release(&log);
    rx_state_release(&replay);
    rx_state_release(&s);
}

START_TEST(test_random_sequences)
{
    int n = test_quick() ? 150 : 2000;
    struct stats st = {0};

    for (int i = 0; i < n; i++)
        run_sequence((uint64_t)i + 1, 10 + (int)(i % 50), &st);
    /* The generator must reach every verdict often, or the test proves little. */
    if (getenv("RX_TEST_VERBOSE"))
        fprintf(stderr,
                "random: %ld steps, %ld accepted, %ld unchanged, %ld rejected, %ld parse "
                "errors; %ld reviews, %ld policies, %ld configures, %ld starts, %ld "
                "in doubt, %ld retries or resolves accepted, %ld steps awaiting\n",
                st.steps, st.accepted, st.unchanged, st.rejected, st.parse_errors,
                st.reviews, st.policies, st.configures, st.starts, st.doubts,
                st.doubt_reviews, st.awaiting);
    ck_assert_int_gt(st.accepted, st.steps / 5);
    ck_assert_int_gt(st.rejected, st.steps / 10);
    ck_assert_int_gt(st.unchanged, 0);
    ck_assert_int_gt(st.parse_errors, 0);
    ck_assert_int_gt(st.reviews, st.steps / 400);
    ck_assert_int_gt(st.policies, st.steps / 200);
    ck_assert_int_gt(st.awaiting, st.steps / 20);
    ck_assert_int_gt(st.configures, st.steps / 200);
    ck_assert_int_gt(st.starts, st.steps / 200);
    ck_assert_int_gt(st.doubts, st.steps / 1000);
    ck_assert_int_gt(st.doubt_reviews, st.steps / 10000);
}
END_TEST

Suite *random_suite(void);

Suite *random_suite(void)
{
    Suite *s = suite_create("random");
    TCase *tc = tcase_create("sequences");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_random_sequences);
    suite_add_tcase(s, tc);
    return s;
}
