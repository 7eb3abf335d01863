/*
 * helper_log - what the tests of both stores share (header only, static, like
 * helper_sm.h): a check of a store call that prints the store's sentence,
 * and a scripted conversation to log, input by input, as a server would.
 * Include after helper_sm.h and store/store.h. BASE_MS is the script's
 * first timestamp.
 * Ownership: gen_input gives a NEW reference; gen_parse fills the caller's
 * input (release it).
 */
#ifndef HELPER_LOG_H
#define HELPER_LOG_H

#include "store/store.h"
#include "tests/unit/helper_sm.h"

#define BASE_MS 1700000000000LL

#define ck_store_ok(st, call)                                                            \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        struct rx_error err_ = {""};                                                     \
                                                                                         \
        if (rc_)                                                                         \
            store_last_error(st, &err_);                                                 \
        ck_assert_msg(rc_ == 0, "%s: %d (%s)", #call, rc_, err_.text);                   \
    } while (0)

/*
 * Input number i (0-based) of the scripted conversation: rounds of six, each a
 * user question, a tool call, its result or error, an answer started, then
 * completed or cancelled mid-way, then a plain message or a compression.
 * NEW reference.
 */
static inline json_t *gen_input(int i)
{
    int r = i / 6, k = i % 6;
    long long ts = BASE_MS + 10LL * i, t0 = BASE_MS + 60LL * r;
    char id[32], cid[32], aid[32], text[64], params[64];
    json_t *j = NULL;

    snprintf(id, sizeof(id), "u%d", r);
    snprintf(cid, sizeof(cid), "c%d", r);
    snprintf(aid, sizeof(aid), "a%d", r);
    switch (k) {
    case 0:
        snprintf(text, sizeof(text), "what is %d+1? \xc3\xbc \"q\"", r);
        j = json_pack("{s:s, s:I, s:s, s:s}", "type", "user-send-message", "timestamp",
                      ts, "messageId", id, "content", text);
        break;
    case 1:
        snprintf(params, sizeof(params), "{\"expression\":\"%d+1\"}", r);
        j = json_pack("{s:s, s:I, s:I, s:{s:{s:s, s:s}}}", "type", "brain-call-tools",
                      "timestamp", ts, "calledBrainAt", t0, "toolCalls", cid, "name",
                      "calculator", "parameters", params);
        break;
    case 2:
        snprintf(text, sizeof(text), "%d", r + 1);
        j = json_pack("{s:s, s:I, s:s, s:s}", "type",
                      r % 3 ? "toolkit-respond" : "toolkit-error", "timestamp", ts,
                      "toolCallId", cid, r % 3 ? "result" : "error", text);
        break;
    case 3:
        j = json_pack("{s:s, s:I, s:I, s:s}", "type", "brain-send-message-start",
                      "timestamp", ts, "calledBrainAt", ts - 10, "messageId", aid);
        break;
    case 4:
        if (r % 4 == 3) {
            j = json_pack("{s:s, s:I, s:{s:s}}", "type", "user-cancel", "timestamp", ts,
                          "partialContents", aid, "it is");
        } else {
            snprintf(text, sizeof(text), "it is %d", r + 1);
            j = json_pack("{s:s, s:I, s:I, s:s, s:s}", "type",
                          "brain-send-message-complete", "timestamp", ts, "calledBrainAt",
                          ts - 20, "messageId", aid, "content", text);
        }
        break;
    default:
        if (r % 5 == 4) {
            snprintf(text, sizeof(text), "summary up to round %d", r);
            j = json_pack("{s:s, s:I, s:I, s:s, s:I}", "type", "brain-compress-history",
                          "timestamp", ts, "calledBrainAt", ts, "summary", text, "cutAt",
                          t0);
        } else {
            snprintf(id, sizeof(id), "u%db", r);
            j = json_pack("{s:s, s:I, s:s, s:s}", "type", "user-send-message",
                          "timestamp", ts, "messageId", id, "content", "thanks");
        }
    }
    ck_assert_ptr_nonnull(j);
    return j;
}

static inline void gen_parse(int i, struct rx_input *in)
{
    json_t *j = gen_input(i);
    const char *field = NULL;
    struct rx_error err = {""};

    ck_assert_msg(rx_input_parse(j, in, &field, &err) == 0, "input %d: %s", i, err.text);
    json_decref(j);
}

/*
 * A session of `n` inputs, appended to the store one by one as a server would:
 * apply, then append with the state after. `prefix`, when not NULL, gets the
 * encoding of the fold after every prefix (prefix[k] = state after k inputs).
 */
static inline void fill_session(struct store *st, const char *sid, int n,
                                int snapshot_every, char **prefix)
{
    struct rx_state s;

    ck_store_ok(st, store_create_session(st, sid, NULL, BASE_MS - 1));
    ck_assert_int_eq(rx_state_init(&s), 0);
    if (prefix)
        prefix[0] = state_bytes(&s);
    for (int i = 0; i < n; i++) {
        struct rx_input in;
        struct rx_outcome out;

        gen_parse(i, &in);
        ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
        ck_assert_msg(out.verdict == RX_ACCEPTED, "input %d: %s", i,
                      rx_reason_name(out.reason));
        ck_store_ok(st, store_append(st, sid, i + 1, &in, &s, snapshot_every));
        rx_input_release(&in);
        if (prefix)
            prefix[i + 1] = state_bytes(&s);
    }
    rx_state_release(&s);
}

#endif
