/*
 * check_patch - the JSON Patch a transition emits turns the state before into
 * the state after, byte for byte, for every accepted input of the golden
 * conversations (tests/data/machine/, tool approval included) and of a seeded
 * random walk through every input type. (Every row of check_machine and
 * check_approval checks its patch too: sm_row_check.)
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state_machine/rx_patch.h"
#include "tests/unit/helper_sm.h"

/* Apply one input; when accepted, check patch(before) == after. The verdict. */
static enum rx_verdict step(struct rx_state *s, const char *input_json,
                            enum rx_input_type *type)
{
    struct rx_input in;
    struct rx_outcome o;
    struct rx_buf b;
    json_t *before, *patch, *after, *j = json_loads(input_json, 0, NULL);
    char *want, *got;
    size_t i;
    json_t *op;

    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(rx_input_parse(j, &in, NULL, NULL), 0);
    json_decref(j);
    if (type)
        *type = in.type;
    got = state_bytes(s);
    before = json_loads(got, 0, NULL);
    free(got);
    ck_assert_int_eq(rx_machine_apply(s, &in, &o), 0);
    rx_input_release(&in);
    if (o.verdict != RX_ACCEPTED) {
        json_decref(before);
        return o.verdict;
    }
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    ck_assert_int_eq(rx_patch_encode(s, &o, &b), 0);
    patch = json_loads(b.data, 0, NULL);
    ck_assert_msg(json_is_array(patch), "not a JSON array: %s", b.data);
    json_array_foreach(patch, i, op) sm_patch_apply_op(before, op);
    want = state_bytes(s);
    after = json_loads(want, 0, NULL);
    got = json_dumps(before, JSON_COMPACT | JSON_PRESERVE_ORDER);
    ck_assert_msg(json_equal(before, after), "input %s\npatch %s\ngot  %s\nwant %s",
                  input_json, b.data, got, want);
    free(got);
    free(want);
    json_decref(after);
    json_decref(patch);
    json_decref(before);
    rx_buf_release(&b);
    return RX_ACCEPTED;
}

static const char *const golden[] = {"conversation", "cancel", "compress", "approval",
                                     "settings"};

START_TEST(test_patch_golden)
{
    char path[256], line[65536];
    struct rx_state s;
    FILE *f;

    snprintf(path, sizeof(path), "tests/data/machine/%s/inputs.jsonl", golden[_i]);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(rx_state_init(&s), 0);
    while (fgets(line, sizeof(line), f))
        if (line[0] == '{')
            step(&s, line, NULL);
    fclose(f);
    rx_state_release(&s);
}
END_TEST

/* A seeded walk through every input type, accepted or not. */
START_TEST(test_patch_random)
{
    static const char *const ids[] = {"a", "b", "c", "d"};
    static const char *const policies[] = {"auto", "auto", "ask", "deny"};
    static const char *const set_to[] = {"\"auto\"", "\"ask\"", "\"deny\"", "null"};
    unsigned seed = 7;
    struct rx_state s;
    char in[512];
    int64_t t = 1;
    long accepted[RX_IN__COUNT] = {0};

    ck_assert_int_eq(rx_state_init(&s), 0);
    for (int n = 0; n < (test_quick() ? 200 : 800); n++) {
        const char *id = ids[rand_r(&seed) % 4];

        t += rand_r(&seed) % 3;
        const unsigned what = rand_r(&seed) % 15;

        switch (what) {
        case 0:
            snprintf(in, sizeof(in),
                     "{\"type\":\"user-send-message\",\"timestamp\":%lld,"
                     "\"messageId\":\"u%d\",\"content\":\"hi %d\"}",
                     (long long)t, n, n);
            break;
        case 1:
            snprintf(in, sizeof(in),
                     "{\"type\":\"user-cancel\",\"timestamp\":%lld,"
                     "\"partialContents\":{\"%s%d\":\"part\"}}",
                     (long long)t, id, n % 7);
            break;
        case 2:
            snprintf(in, sizeof(in),
                     "{\"type\":\"brain-send-message-start\",\"timestamp\":%lld,"
                     "\"calledBrainAt\":%lld,\"messageId\":\"%s%d\"}",
                     (long long)t, (long long)(t / 2), id, n % 7);
            break;
        case 3:
            snprintf(
                in, sizeof(in),
                "{\"type\":\"brain-send-message-complete\",\"timestamp\":%lld,"
                "\"calledBrainAt\":%lld,\"messageId\":\"%s%d\",\"content\":\"done\"}",
                (long long)t, (long long)(t / 2), id, n % 7);
            break;
        case 4:
            snprintf(
                in, sizeof(in),
                "{\"type\":\"brain-call-tools\",\"timestamp\":%lld,\"calledBrainAt\":"
                "%lld,\"toolCalls\":{\"c%d\":{\"name\":\"clock\",\"parameters\":\"{}\","
                "\"policy\":\"%s\"},\"d%d\":{\"name\":\"calculator\",\"parameters\":"
                "\"{}\",\"policy\":\"%s\"}}}",
                (long long)t, (long long)(t / 2), n, policies[rand_r(&seed) % 4], n,
                policies[rand_r(&seed) % 4]);
            break;
        case 5:
        case 6:
            snprintf(in, sizeof(in),
                     "{\"type\":\"%s\",\"timestamp\":%lld,\"toolCallId\":\"%c%d\","
                     "\"%s\":\"r\"}",
                     n % 2 ? "toolkit-respond" : "toolkit-error", (long long)t,
                     n % 3 ? 'c' : 'd', n - (int)(rand_r(&seed) % 20),
                     n % 2 ? "result" : "error");
            break;
        case 7:
            snprintf(in, sizeof(in),
                     "{\"type\":\"brain-compress-history\",\"timestamp\":%lld,"
                     "\"calledBrainAt\":%lld,\"summary\":\"so far %d\",\"cutAt\":%lld}",
                     (long long)t, (long long)(t / 2), n, (long long)(t - 2));
            break;
        case 8: {
            /* The newest call awaiting a person, if any: a review that applies. */
            const char *call = "none";

            /* A call in doubt (SPEC 3.7) takes retry, reject or resolve; each
               list has one that is refused. */
            static const char *const for_review[] = {"approve", "reject", "approve",
                                                     "retry"};
            static const char *const for_doubt[] = {"retry", "reject", "resolve",
                                                    "approve"};
            const char *const *decisions = for_review, *d;

            for (size_t i = s.tools.len; i-- > s.tools.settled;)
                if (rx_tool_call_is_awaiting(&s.tools.items[i])) {
                    call = s.tools.items[i].id;
                    if (s.tools.items[i].approval == RX_APPROVAL_IN_DOUBT)
                        decisions = for_doubt;
                    break;
                }
            d = decisions[rand_r(&seed) % 4];
            snprintf(in, sizeof(in),
                     "{\"type\":\"user-review-tool-call\",\"timestamp\":%lld,"
                     "\"toolCallId\":\"%s\",\"decision\":\"%s\",\"always\":%s,"
                     "\"parameters\":\"{}\",\"reason\":\"r\",\"result\":\"x\"}",
                     (long long)t, call, d,
                     rand_r(&seed) % 3 || strcmp(d, "approve") ? "false" : "true");
            break;
        }
        case 9:
            snprintf(in, sizeof(in),
                     "{\"type\":\"user-set-tool-policy\",\"timestamp\":%lld,\"tool\":"
                     "\"%s\",\"policy\":%s}",
                     (long long)t, rand_r(&seed) % 2 ? "clock" : "calculator",
                     set_to[rand_r(&seed) % 4]);
            break;
        case 10:
            snprintf(in, sizeof(in),
                     "{\"type\":\"user-configure\",\"timestamp\":%lld,\"model\":%s,"
                     "\"temperature\":%s}",
                     (long long)t, rand_r(&seed) % 3 ? "\"m\"" : "null",
                     rand_r(&seed) % 2 ? "0.5" : "null");
            break;
        case 11:
            snprintf(in, sizeof(in),
                     "{\"type\":\"brain-send-message-complete\",\"timestamp\":%lld,"
                     "\"calledBrainAt\":%lld,\"messageId\":\"%s%d\",\"content\":\"done\","
                     "\"usage\":{\"promptTokens\":%d,\"completionTokens\":2},"
                     "\"firstTokenAt\":%lld,\"reasoning\":\"why %d\"}",
                     (long long)t, (long long)(t / 2), id, n % 7, n, (long long)(t / 2),
                     n);
            break;
        case 13:
        case 14: {
            /* The runtime: case 13 marks the newest started call in doubt
               (or starts one when none has), 14 starts the newest call that
               may start. */
            const char *call = NULL, *type = "toolkit-call-in-doubt";

            for (size_t i = s.tools.len; what == 13 && !call && i-- > s.tools.settled;)
                if (rx_tool_call_is_running(&s.tools.items[i]))
                    call = s.tools.items[i].id;
            for (size_t i = s.tools.len; !call && i-- > s.tools.settled;)
                if (!rx_tool_call_is_awaiting(&s.tools.items[i]) &&
                    !s.tools.items[i].result.present) {
                    call = s.tools.items[i].id;
                    type = "toolkit-start-call";
                }
            snprintf(in, sizeof(in),
                     "{\"type\":\"%s\",\"timestamp\":%lld,\"toolCallId\":\"%s\"}", type,
                     (long long)t, call ? call : "none");
            break;
        }
        default:
            snprintf(in, sizeof(in),
                     "{\"type\":\"brain-load-tool-call\",\"timestamp\":%lld,"
                     "\"calledBrainAt\":%lld,\"toolCallId\":\"c%d\"}",
                     (long long)t, (long long)(t / 2), n - (int)(rand_r(&seed) % 40));
        }
        enum rx_input_type type;

        if (step(&s, in, &type) == RX_ACCEPTED)
            accepted[type]++;
        ck_assert(rx_state_check_invariants(&s));
    }
    /* The walk reaches the approval inputs (a toolkit answer may miss its call). */
    ck_assert_int_gt(accepted[RX_IN_BRAIN_CALL_TOOLS], 0);
    ck_assert_int_gt(accepted[RX_IN_USER_REVIEW_TOOL_CALL], 0);
    ck_assert_int_gt(accepted[RX_IN_USER_SET_TOOL_POLICY], 0);
    ck_assert_int_gt(accepted[RX_IN_USER_CONFIGURE], 0);
    ck_assert_int_gt(accepted[RX_IN_TOOLKIT_START_CALL], 0);
    ck_assert_int_gt(accepted[RX_IN_TOOLKIT_CALL_IN_DOUBT], 0);
    rx_state_release(&s);
}
END_TEST

Suite *patch_suite(void);
Suite *patch_suite(void)
{
    Suite *s = suite_create("patch");
    TCase *tc = tcase_create("patch");

    tcase_add_loop_test(tc, test_patch_golden, 0, sizeof(golden) / sizeof(golden[0]));
    tcase_add_test(tc, test_patch_random);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}
