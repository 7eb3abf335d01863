/*
 * rx_input - the inputs of the Reflexor machine (SPEC 3.2): parse, validate
 * shape, encode.
 *
 * Pure: no I/O, clock or globals. Depends on rx_state, rx_buf, rx_json,
 * rx_alloc and jansson only. Shape validation (types, required fields)
 * happens here and names the offending field; rules that depend on the state
 * (duplicates, unknown ids, time) live in rx_machine.
 * Ownership: struct rx_input is caller-allocated (rx_input_parse fills it,
 * rx_input_release frees its strings). The json_t given to rx_input_parse is
 * borrowed; nothing keeps a reference to it.
 */
#ifndef RX_INPUT_H
#define RX_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_state.h"
#include "state_machine/rx_common.h"

/* X-macro: enum name, wire name, origin (who may send it). */
#define RX_INPUT_TYPES(X)                                                                \
    X(USER_SEND_MESSAGE, "user-send-message", RX_ORIGIN_USER)                            \
    X(USER_CANCEL, "user-cancel", RX_ORIGIN_USER)                                        \
    X(USER_REVIEW_TOOL_CALL, "user-review-tool-call", RX_ORIGIN_USER)                    \
    X(USER_SET_TOOL_POLICY, "user-set-tool-policy", RX_ORIGIN_USER)                      \
    X(USER_CONFIGURE, "user-configure", RX_ORIGIN_USER)                                  \
    X(BRAIN_SEND_MESSAGE_START, "brain-send-message-start", RX_ORIGIN_BRAIN)             \
    X(BRAIN_SEND_MESSAGE_COMPLETE, "brain-send-message-complete", RX_ORIGIN_BRAIN)       \
    X(BRAIN_CALL_TOOLS, "brain-call-tools", RX_ORIGIN_BRAIN)                             \
    X(BRAIN_COMPRESS_HISTORY, "brain-compress-history", RX_ORIGIN_BRAIN)                 \
    X(BRAIN_LOAD_TOOL_CALL, "brain-load-tool-call", RX_ORIGIN_BRAIN)                     \
    X(TOOLKIT_RESPOND, "toolkit-respond", RX_ORIGIN_TOOLKIT)                             \
    X(TOOLKIT_ERROR, "toolkit-error", RX_ORIGIN_TOOLKIT)                                 \
    X(TOOLKIT_START_CALL, "toolkit-start-call", RX_ORIGIN_TOOLKIT)                       \
    X(TOOLKIT_CALL_IN_DOUBT, "toolkit-call-in-doubt", RX_ORIGIN_TOOLKIT)

enum rx_input_type {
#define RX_X(e, name, origin) RX_IN_##e,
    RX_INPUT_TYPES(RX_X)
#undef RX_X
        RX_IN__COUNT
};

enum rx_origin { RX_ORIGIN_USER, RX_ORIGIN_BRAIN, RX_ORIGIN_TOOLKIT };

/*
 * user-review-tool-call's `decision`. APPROVE and REJECT answer a call
 * awaiting approval (SPEC 3.6); RETRY, REJECT and RESOLVE a call in doubt
 * (SPEC 3.7). NONE: not given (the parser never leaves it; the machine
 * refuses it as invalid "decision").
 */
enum rx_decision {
    RX_DECISION_NONE = 0,
    RX_DECISION_APPROVE,
    RX_DECISION_REJECT,
    RX_DECISION_RETRY,
    RX_DECISION_RESOLVE
};

/* One entry of brain-call-tools' `toolCalls`, or of user-cancel's partials. */
struct rx_input_call {
    char *id;
    char *name;       /* tool name; for partials unused (NULL) */
    char *parameters; /* JSON text; for partials the streamed text */
    /* brain-call-tools: the effective policy, stamped by the server before the
       input is applied (wire "policy", encoded unless UNSET, so the log
       replays exactly). UNSET (logs older than approvals) behaves as AUTO. */
    enum rx_policy policy;
};

struct rx_input {
    enum rx_input_type type;
    int64_t timestamp;
    bool has_timestamp;
    int64_t called_brain_at; /* brain inputs */
    char *message_id;        /* user-send-message (may be NULL before the server
                                fills it), brain-send-message-* */
    char *content;           /* user-send-message, brain-send-message-complete */
    char *tool_call_id;      /* brain-load-tool-call, toolkit-*,
                                user-review-tool-call */
    char *text;              /* toolkit-respond `result`, toolkit-error `error`,
                                brain-compress-history `summary`,
                                user-review-tool-call `reason` (reject only) or
                                `result` (resolve only) */
    int64_t cut_at;          /* brain-compress-history */
    /* brain-call-tools `toolCalls` (document order); user-cancel
       `partialContents` ({messageId: text so far}) */
    struct rx_input_call *calls;
    size_t n_calls;
    /* user-review-tool-call */
    enum rx_decision decision; /* `decision` */
    bool always;      /* `always`: also make it this session's policy (approve and
                         reject only) */
    char *parameters; /* `parameters`: edited arguments, a JSON text of an
                         object (approve only), or NULL to keep them */
    /* user-set-tool-policy */
    char *tool;            /* `tool`: a non-empty tool name */
    enum rx_policy policy; /* `policy`: auto/ask/deny, or UNSET for null (clear) */
    /* user-configure: the fields it names (RX_SETTING_*) and their values; a
       named field unset there is a null (clear) */
    unsigned settings_named;
    struct rx_settings settings;
    /* brain-send-message-complete, each optional: `usage` {promptTokens,
       completionTokens}, `firstTokenAt` (ms), `reasoning` */
    struct rx_usage usage;
    bool has_first_token_at;
    /* brain-send-message-complete: the answer was started again after an
       interruption (SPEC 3.7), its kept text before the new one ("restarted") */
    bool restarted;
    int64_t first_token_at;
    char *reasoning;
};

/* "approve", "reject", "retry", "resolve"; NULL for NONE (or out of range). */
const char *rx_decision_name(enum rx_decision d);
/* 0 and *out (never NONE), or -EINVAL for anything else, NULL included. */
int rx_decision_parse(const char *s, enum rx_decision *out) RX_WUR;

const char *rx_input_type_name(enum rx_input_type t);
enum rx_origin rx_input_type_origin(enum rx_input_type t);
/* 0 and *out, or -EINVAL for an unknown name. */
int rx_input_type_parse(const char *name, enum rx_input_type *out) RX_WUR;

/*
 * Parse one input from JSON (borrowed). 0; -EINVAL with `field` set to the
 * offending field name (a static string; "type" for an unknown type) and `err`
 * (may be NULL) to a human sentence; -ENOMEM. Unknown fields
 * are ignored. A missing `timestamp` is allowed (the server stamps inputs).
 * user-review-tool-call: `decision` is "approve", "reject", "retry" or
 * "resolve"; `parameters`, `reason` and `result` are checked whatever the
 * decision (a string or null; parameters a JSON object text), then kept only
 * where they mean something: parameters with approve, reason with reject,
 * result with resolve (where it is required, a string, "" allowed, like
 * toolkit-respond's); `always` only with approve and reject. The rest is
 * dropped (not applied, not encoded).
 * toolkit-start-call, toolkit-call-in-doubt: `toolCallId` only.
 * user-configure: systemPrompt (a string), model (1 to RX_SETTINGS_MODEL_MAX
 * bytes), temperature (a number from 0 to 2), each null to clear; at least
 * one of them, else the field is "settings".
 * brain-send-message-complete: usage {promptTokens, completionTokens} (both
 * non-negative integers), firstTokenAt (a non-negative integer) and
 * reasoning (a string), each absent or null when not given.
 * On failure `in` needs no release.
 */
int rx_input_parse(json_t *json, struct rx_input *in, const char **field,
                   struct rx_error *err) RX_WUR;
void rx_input_release(struct rx_input *in);

/* Append the input as compact JSON (what the log stores and the SSE sends). */
int rx_input_encode(const struct rx_input *in, struct rx_buf *b) RX_WUR;
/* Deep copy. 0 or -ENOMEM. */
int rx_input_copy(const struct rx_input *src, struct rx_input *dst) RX_WUR;

/* Set or replace a string field (duplicated). 0 or -ENOMEM, old value kept. */
int rx_input_set_str(char **field, const char *value) RX_WUR;
/*
 * True when `s` (UTF-8) holds nothing a person can see: only ASCII or Unicode
 * white space (White_Space: U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028,
 * U+2029, U+202F, U+205F, U+3000) and invisible U+200B, U+2060, U+FEFF.
 */
bool rx_text_is_blank(const char *s);
/* Drop every entry of `calls` (a client's partialContents is never trusted). */
void rx_input_clear_calls(struct rx_input *in);
/*
 * False when a brain-call-tools entry's arguments nest deeper than
 * RX_JSON_DEPTH_MAX: refused where inputs enter (the pipeline, an import),
 * since the tool that parses them runs on a small effect stack.
 */
bool rx_input_calls_depth_ok(const struct rx_input *in);
/* Add a user-cancel partial {message id, text so far}. 0 or -ENOMEM. */
int rx_input_add_partial(struct rx_input *in, const char *message_id,
                         const char *text) RX_WUR;

#endif
