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
#include "state_machine/rx_state.h"

/* A whole state, a user message, an assistant message, a tool record, results. */
#define ST(upd, um, am, tc, cba, sum, cut)                                               \
    "{'updatedAt':" #upd ",'userMessages':[" um "],'assistantMessages':[" am             \
    "],'toolCallRecords':[" tc "],'calledBrainAt':" #cba ",'contextSummary':'" sum       \
    "','summaryCutAt':" #cut "}"
#define S0 ST(0, "", "", "", 0, "", 0)
#define UM(id, content, t)                                                               \
    "{'kind':'user','id':'" id "','content':'" content "','receivedAt':" #t "}"
#define AM(id, content, recv, upd, status, cba)                                          \
    "{'kind':'assistant','id':'" id "','content':'" content "','receivedAt':" #recv      \
    ",'updatedAt':" #upd ",'status':'" status "','calledBrainAt':" #cba "}"
#define TC(id, name, params, at, result, loaded)                                         \
    "{'id':'" id "','name':'" name "','parameters':'" params "','calledAt':" #at         \
    ",'result':" result ",'isLoaded':" #loaded "}"
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

/* RX_TEST_QUICK=1 (set under valgrind) asks for smaller randomized runs. */
static inline int test_quick(void)
{
    const char *v = getenv("RX_TEST_QUICK");

    return v && *v && strcmp(v, "0");
}

#endif
