/*
 * helper_sm - shared helpers for the state machine tests (static, header only:
 * the Makefile links tests/check_*.c into the runner, each includes this).
 *
 * Test texts are written with single quotes for readability: q() turns every
 * ' into ", so "{'type':'user-cancel'}" is the JSON {"type":"user-cancel"}.
 * The state macros below spell the exact compact bytes rx_state_encode must
 * produce, in the key order of SPEC 3.1.
 * Ownership: every char * returned here is malloc()ed; the caller frees it.
 */
#ifndef HELPER_SM_H
#define HELPER_SM_H

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_context.h"
#include "state_machine/rx_effects.h"
#include "state_machine/rx_input.h"
#include "state_machine/rx_machine.h"
#include "state_machine/rx_patch.h"
#include "state_machine/rx_state.h"

/* A whole state, a user message, an assistant message, a tool record, results. */
#define ST(upd, um, am, tc, cba, sum, cut) STP(upd, um, am, tc, cba, sum, cut, "")
/* The same with toolPolicies entries ("'calculator':'ask'"). */
#define STP(upd, um, am, tc, cba, sum, cut, pol)                                         \
    STS(upd, um, am, tc, cba, sum, cut, pol, "")
/* The same with settings members ("'model':'m','temperature':0.5"). */
#define STS(upd, um, am, tc, cba, sum, cut, pol, set)                                    \
    "{'updatedAt':" #upd ",'userMessages':[" um "],'assistantMessages':[" am             \
    "],'toolCallRecords':[" tc "],'calledBrainAt':" #cba ",'contextSummary':'" sum       \
    "','summaryCutAt':" #cut ",'toolPolicies':{" pol "},'settings':{" set "}}"
#define S0 ST(0, "", "", "", 0, "", 0)
#define UM(id, content, t)                                                               \
    "{'kind':'user','id':'" id "','content':'" content "','receivedAt':" #t "}"
#define AM(id, content, recv, upd, status, cba)                                          \
    AMX(id, content, recv, upd, status, cba, "")
/* An assistant message with what a complete may add (",'usage':{...}" ...). */
#define AMX(id, content, recv, upd, status, cba, extra)                                  \
    "{'kind':'assistant','id':'" id "','content':'" content "','receivedAt':" #recv      \
    ",'updatedAt':" #upd ",'status':'" status "','calledBrainAt':" #cba extra "}"
#define TC(id, name, params, at, result, loaded)                                         \
    "{'id':'" id "','name':'" name "','parameters':'" params "','calledAt':" #at         \
    ",'result':" result ",'isLoaded':" #loaded "}"
/* A tool record with an approval: 'pending', 'approved' or 'rejected'. */
#define TCA(id, name, params, at, result, loaded, approval)                              \
    "{'id':'" id "','name':'" name "','parameters':'" params "','calledAt':" #at         \
    ",'result':" result ",'isLoaded':" #loaded ",'approval':'" approval "'}"
/* A tool record that started (toolkit-start-call at `started`, SPEC 3.7). */
#define TCS(id, name, params, at, started, result, loaded)                               \
    "{'id':'" id "','name':'" name "','parameters':'" params "','calledAt':" #at         \
    ",'startedAt':" #started ",'result':" result ",'isLoaded':" #loaded "}"
/* The same with an approval: 'in-doubt', 'resolved', 'approved', ... */
#define TCSA(id, name, params, at, started, result, loaded, approval)                    \
    "{'id':'" id "','name':'" name "','parameters':'" params "','calledAt':" #at         \
    ",'startedAt':" #started ",'result':" result ",'isLoaded':" #loaded                  \
    ",'approval':'" approval "'}"
#define OKR(content, t) "{'isSuccess':true,'content':'" content "','receivedAt':" #t "}"
#define ERRR(e, t)      "{'isSuccess':false,'error':'" e "','receivedAt':" #t "}"

/* The text with every ' replaced by ". */
static inline char *q(const char *text)
{
    char *s = strdup(text);

    ck_assert_ptr_nonnull(s);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    return s;
}

/* Load JSON written with single quotes; a new reference. */
static inline json_t *qjson(const char *text)
{
    char *s = q(text);
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);

    ck_assert_msg(j != NULL, "bad test JSON at %d: %s: %s", e.position, e.text, s);
    free(s);
    return j;
}

/* The state's encoding (malloc()ed, NUL-terminated). */
static inline char *state_bytes(const struct rx_state *s)
{
    struct rx_buf b;
    char *out;

    rx_buf_init(&b, RX_BUF_STATE_MAX);
    ck_assert_int_eq(rx_state_encode(s, &b), 0);
    out = rx_buf_take(&b, NULL);
    ck_assert_ptr_nonnull(out);
    return out;
}

/* Decode a state from single-quoted JSON; fails the test when it does not decode. */
static inline void state_from(struct rx_state *s, const char *text)
{
    json_t *j = qjson(text);
    struct rx_error err = {""};
    int rc = rx_state_decode(j, s, &err);

    ck_assert_msg(rc == 0, "state does not decode (%d, %s): %s", rc, err.text, text);
    json_decref(j);
    ck_assert(rx_state_check_invariants(s));
}

/* The state's encoding must be exactly `text` (single-quoted). */
#define ck_assert_state(s, text)                                                         \
    do {                                                                                 \
        char *got_ = state_bytes(s), *want_ = q(text);                                   \
        ck_assert_str_eq(got_, want_);                                                   \
        free(got_);                                                                      \
        free(want_);                                                                     \
    } while (0)

/* Parse an input from single-quoted JSON; fails the test when it does not parse. */
static inline void input_from(struct rx_input *in, const char *text)
{
    json_t *j = qjson(text);
    const char *field = NULL;
    struct rx_error err = {""};
    int rc = rx_input_parse(j, in, &field, &err);

    ck_assert_msg(rc == 0, "input does not parse (%d, field %s, %s): %s", rc,
                  field ? field : "-", err.text, text);
    json_decref(j);
}

/* Parse + apply; the outcome must be `verdict`. */
static inline void apply_text(struct rx_state *s, const char *text,
                              enum rx_verdict verdict)
{
    struct rx_input in;
    struct rx_outcome out;

    input_from(&in, text);
    ck_assert_int_eq(rx_machine_apply(s, &in, &out), 0);
    ck_assert_msg(out.verdict == verdict, "%s: verdict %s (%s), want %s", text,
                  rx_verdict_name(out.verdict), rx_reason_name(out.reason),
                  rx_verdict_name(verdict));
    ck_assert(rx_state_check_invariants(s));
    rx_input_release(&in);
}

/* The effect keys of a state joined by spaces, in rx_effects_at's order. */
static inline char *effect_keys(const struct rx_state *s)
{
    struct rx_effect_set set;
    struct rx_buf b;
    char *out;

    rx_effect_set_init(&set);
    ck_assert_int_eq(rx_effects_at(s, &set), 0);
    rx_buf_init(&b, RX_BUF_SMALL_MAX);
    ck_assert_int_eq(rx_buf_puts(&b, ""), 0);
    for (size_t i = 0; i < set.len; i++) {
        ck_assert_int_eq(rx_buf_puts(&b, i ? " " : ""), 0);
        ck_assert_int_eq(rx_buf_puts(&b, set.items[i].key), 0);
    }
    rx_effect_set_release(&set);
    out = rx_buf_take(&b, NULL);
    ck_assert_ptr_nonnull(out);
    return out;
}

/* ---- table rows of the transition (check_machine, check_approval) ------------- */

#define REJ(r) RX_REJECTED, RX_REASON_##r
#define ACC    RX_ACCEPTED, RX_REASON_NONE
#define UNCH   RX_UNCHANGED, RX_REASON_NONE

struct sm_row {
    const char *name;
    const char *before;
    const char *input;
    void (*tweak)(struct rx_input *in); /* makes what the parser would refuse */
    enum rx_verdict verdict;
    enum rx_reason reason;
    const char *field; /* RX_REASON_INVALID only */
    const char *after; /* NULL: byte-identical to before */
};

/* A JSON Pointer of at most two levels: "/key" or "/key/<index|->". */
static inline void sm_patch_apply_op(json_t *doc, json_t *op)
{
    const char *kind = json_string_value(json_object_get(op, "op"));
    const char *path = json_string_value(json_object_get(op, "path"));
    json_t *value = json_object_get(op, "value");
    char key[64];
    const char *slash;
    json_t *list;

    ck_assert_ptr_nonnull(kind);
    ck_assert_ptr_nonnull(path);
    ck_assert_ptr_nonnull(value);
    ck_assert(path[0] == '/');
    slash = strchr(path + 1, '/');
    if (!slash) {
        ck_assert_str_eq(kind, "replace");
        ck_assert_ptr_nonnull(json_object_get(doc, path + 1));
        json_object_set(doc, path + 1, value);
        return;
    }
    snprintf(key, sizeof(key), "%.*s", (int)(slash - path - 1), path + 1);
    list = json_object_get(doc, key);
    ck_assert(json_is_array(list));
    if (!strcmp(slash + 1, "-")) {
        ck_assert_str_eq(kind, "add");
        json_array_append(list, value);
    } else {
        size_t i = strtoul(slash + 1, NULL, 10);

        ck_assert_str_eq(kind, "replace");
        ck_assert_uint_lt(i, json_array_size(list));
        json_array_set(list, i, value);
    }
}

/* The JSON Patch of an accepted transition turns `before` (JSON text) into `s`. */
static inline void sm_patch_check(const char *name, const char *before,
                                  const struct rx_state *s, const struct rx_outcome *o)
{
    struct rx_buf b;
    json_t *doc = json_loads(before, 0, NULL), *patch, *after, *op;
    char *want;
    size_t i;

    ck_assert_ptr_nonnull(doc);
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    ck_assert_int_eq(rx_patch_encode(s, o, &b), 0);
    patch = json_loads(b.data, 0, NULL);
    ck_assert_msg(json_is_array(patch), "%s: patch is not a JSON array: %s", name,
                  b.data);
    json_array_foreach(patch, i, op) sm_patch_apply_op(doc, op);
    want = state_bytes(s);
    after = json_loads(want, 0, NULL);
    ck_assert_msg(json_equal(doc, after), "%s: patch %s\ndoes not give %s", name, b.data,
                  want);
    free(want);
    json_decref(after);
    json_decref(patch);
    json_decref(doc);
    rx_buf_release(&b);
}

/*
 * One row: decode `before` (it must encode back to the same bytes), parse the
 * input, tweak it, apply; the verdict, reason and field must match, the state
 * must be `after` byte for byte (or untouched), and an accepted input's JSON
 * Patch must turn before into after.
 */
static inline void sm_row_check(const struct sm_row *r)
{
    struct rx_state s;
    struct rx_input in;
    struct rx_outcome out;
    char *before_bytes, *after_bytes, *want;

    state_from(&s, r->before);
    before_bytes = state_bytes(&s);
    want = q(r->before);
    ck_assert_msg(!strcmp(before_bytes, want), "%s: the before state does not round-trip",
                  r->name);
    free(want);

    input_from(&in, r->input);
    if (r->tweak)
        r->tweak(&in);
    memset(&out, 0x5a, sizeof(out));
    ck_assert_int_eq(rx_machine_apply(&s, &in, &out), 0);
    ck_assert_msg(out.verdict == r->verdict && out.reason == r->reason,
                  "%s: got %s/%s, want %s/%s", r->name, rx_verdict_name(out.verdict),
                  rx_reason_name(out.reason), rx_verdict_name(r->verdict),
                  rx_reason_name(r->reason));
    if (r->reason == RX_REASON_INVALID) {
        ck_assert_ptr_nonnull(out.field);
        ck_assert_str_eq(out.field, r->field);
    }
    ck_assert(rx_state_check_invariants(&s));

    after_bytes = state_bytes(&s);
    want = q(r->after ? r->after : r->before);
    ck_assert_msg(!strcmp(after_bytes, want), "%s:\n got  %s\n want %s", r->name,
                  after_bytes, want);
    if (r->verdict == RX_ACCEPTED) {
        ck_assert_int_eq(s.updated_at, in.timestamp);
        sm_patch_check(r->name, before_bytes, &s, &out);
    } else {
        ck_assert_str_eq(after_bytes, before_bytes);
        ck_assert_uint_eq(out.changed, 0);
    }

    free(want);
    free(before_bytes);
    free(after_bytes);
    rx_input_release(&in);
    rx_state_release(&s);
}

/* ---- tool approval inputs (SPEC 3.6), at time 7 (brain-call-tools at 11) ---- */

#define REVIEW(id, decision, extra)                                                      \
    "{'type':'user-review-tool-call','timestamp':7,'toolCallId':'" id                    \
    "','decision':'" decision "'" extra "}"
/* The runtime's inputs about a call (SPEC 3.7), at time 7. */
#define START_CALL(id) "{'type':'toolkit-start-call','timestamp':7,'toolCallId':'" id "'}"
#define IN_DOUBT(id)                                                                     \
    "{'type':'toolkit-call-in-doubt','timestamp':7,'toolCallId':'" id "'}"
#define SET_POLICY(tool, policy)                                                         \
    "{'type':'user-set-tool-policy','timestamp':7,'tool':'" tool "','policy':" policy "}"
#define CALLS(policies_json)                                                             \
    "{'type':'brain-call-tools','timestamp':11,'calledBrainAt':10,'toolCalls':"          \
    "{" policies_json "}}"

/* RX_TEST_QUICK=1 (set under valgrind) asks for smaller randomized runs. */
static inline int test_quick(void)
{
    const char *v = getenv("RX_TEST_QUICK");

    return v && *v && strcmp(v, "0");
}

#endif
