/*
 * rx_state - the Reflexor session state (SPEC 3.1) as plain C records.
 *
 * Pure: no I/O, clock, threads or mutable globals (one read-only empty
 * string, the summary of every state without one). Depends on rx_index,
 * rx_policy, rx_settings, rx_buf, rx_alloc and jansson only; nothing from
 * server/ or effects/.
 * The state is mutated in place by rx_machine (never copied per input), so a
 * long conversation costs what its newest input touches.
 *
 * Invariants (rx_state_check_invariants): ids are unique within each list and
 * tool call ids at most RX_ID_MAX bytes;
 * user and assistant messages have content != NULL; tool records have
 * id/name/parameters != NULL and, when answered, a result text != NULL; a
 * record waiting for a person (approval PENDING or IN_DOUBT) has no result
 * yet; one IN_DOUBT has started (started_at != 0); one RESOLVED has a
 * success result; started_at is 0 or within calledAt..updatedAt; toolPolicies
 * keeps rx_policy_map's invariants (rx_policy.h); settings keep
 * rx_settings' (rx_settings.h); only assistant messages carry usage,
 * firstTokenAt or reasoning, and token counts are never negative;
 * every time in a record is <= updated_at; `*_len <= *_cap`; the derived
 * aids (id indexes, `settled`, `time_sorted`, latest_result_at) agree with
 * the records.
 * Time order: the machine appends records at the input's timestamp, which is
 * never below updated_at, so a list in time order stays in time order; only a
 * decoded (hand-made) state may be out of order. `time_sorted` says so, and
 * lets readers binary-search a list by time (rx_context).
 * Ownership: struct rx_state is caller-allocated (rx_state_init/_release) and
 * owns every string and record in it, but for that shared empty summary. Pointers
 * returned by the find helpers are borrowed and valid until the next transition.
 */
#ifndef RX_STATE_H
#define RX_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "state_machine/rx_buf.h"
#include "state_machine/rx_index.h"
#include "state_machine/rx_policy.h"
#include "state_machine/rx_settings.h"
#include "state_machine/rx_common.h"

enum rx_status { RX_STATUS_STREAMING, RX_STATUS_COMPLETE, RX_STATUS_STOPPED };

/* Longest tool call id: ids become effect keys ("request-toolkit-<id>"). */
#define RX_ID_MAX 128

/* What an answer cost, as the brain reported it (wire "usage"). */
struct rx_usage {
    bool present; /* false: not reported ("usage" absent) */
    int64_t prompt_tokens, completion_tokens;
};

struct rx_message {
    char *id;
    char *content;
    int64_t received_at;
    /* Assistant messages only. */
    int64_t updated_at;
    int64_t called_brain_at;
    enum rx_status status;
    /* Given by brain-send-message-complete, absent otherwise (SPEC 3.1). These
       are measurements, not state times: firstTokenAt (the brain's clock when
       the first text arrived) may well precede receivedAt. */
    struct rx_usage usage;
    bool has_first_token_at;
    bool restarted; /* started again after an interruption (SPEC 3.7), "restarted" */
    int64_t first_token_at;
    char *reasoning; /* the model's reasoning text, or NULL */
    char *json;      /* cached encoding, or NULL; dropped whenever the record changes */
    size_t json_len;
};

struct rx_tool_result {
    bool present; /* false: the call is pending ("result":null) */
    bool is_success;
    char *text; /* "content" on success, "error" on failure */
    int64_t received_at;
};

struct rx_tool_call {
    char *id;
    char *name;
    char *parameters; /* a JSON text, as the brain sent it */
    int64_t called_at;
    /* toolkit-start-call's time (SPEC 3.7): the tool may have acted since;
       0: never started ("startedAt" absent). A re-run moves it on. */
    int64_t started_at;
    struct rx_tool_result result;
    bool is_loaded;
    enum rx_approval approval; /* NONE: no approval was needed (SPEC 3.6) */
    char *json;                /* cached encoding, as for messages */
    size_t json_len;
};

/*
 * Lists keep two derived aids so one input costs what it touches, not the
 * history: an id index, and `settled`: every record before it is final
 * (assistant: not streaming; tool: answered), so scans start there.
 */
struct rx_message_list {
    struct rx_message *items;
    size_t len, cap;
    struct rx_index ids;
    size_t settled;
    bool time_sorted; /* receivedAt never decreases along the list (false: unknown) */
};

struct rx_tool_call_list {
    struct rx_tool_call *items;
    size_t len, cap;
    struct rx_index ids;
    size_t settled;
    bool time_sorted; /* calledAt never decreases along the list (false: unknown) */
};

struct rx_state {
    int64_t updated_at;
    struct rx_message_list user;
    struct rx_message_list assistant;
    struct rx_tool_call_list tools;
    int64_t called_brain_at;
    /* Never NULL once initialised; "" = none, shared by every state that has
       none (replace it through rx_state_set_summary, never free it). */
    char *context_summary;
    int64_t summary_cut_at;
    struct rx_policy_map policies; /* toolPolicies: this session's overrides */
    struct rx_settings settings;   /* settings: this session's brain settings */
    int64_t latest_result_at;      /* derived: newest tool result's receivedAt, or 0 */
};

/* The initial state (SPEC 3.1): everything zero or empty. 0: it allocates
   nothing now; callers still handle -ENOMEM, which it may return again. */
int rx_state_init(struct rx_state *s) RX_WUR;
void rx_state_release(struct rx_state *s);
/* Replace the summary with `text` (moved in, allocated; NULL or "": none). */
void rx_state_set_summary(struct rx_state *s, char *text);

/* Borrowed lookups by id, or NULL. */
struct rx_message *rx_state_find_user(const struct rx_state *s, const char *id);
struct rx_message *rx_state_find_assistant(const struct rx_state *s, const char *id);
struct rx_tool_call *rx_state_find_tool(const struct rx_state *s, const char *id);
/* Number of tool calls whose result is still null (awaiting a person included). */
size_t rx_state_pending_tools(const struct rx_state *s);
/* Number of tool calls awaiting a person (rx_tool_call_is_awaiting). */
size_t rx_state_awaiting_approval(const struct rx_state *s);
/*
 * True when the call waits for a person: no result, and approval PENDING (a
 * review, SPEC 3.6) or IN_DOUBT (interrupted, SPEC 3.7). No tool runs for it
 * and the brain is not asked while it waits.
 */
bool rx_tool_call_is_awaiting(const struct rx_tool_call *c);
/*
 * True when the call started (toolkit-start-call), has no result and does not
 * wait for a person: what toolkit-call-in-doubt accepts. On recovery such a
 * call is in doubt: re-run it (same key) when its tool is safe to repeat,
 * else send toolkit-call-in-doubt.
 */
bool rx_tool_call_is_running(const struct rx_tool_call *c);
/*
 * About the bytes `s` holds in memory: its records, their strings and
 * cached encodings, its indexes. O(records); allocates nothing.
 */
size_t rx_state_bytes(const struct rx_state *s);
/*
 * The title a session takes from its first user message: its first line,
 * cut at a word near 60 bytes (never inside a UTF-8 sequence). Its length,
 * with *text pointing into the message (borrowed); 0 when there is no user
 * message yet.
 */
size_t rx_state_title(const struct rx_state *s, const char **text);
/* The session's override for `tool` (toolPolicies), or RX_POLICY_UNSET. */
enum rx_policy rx_state_tool_policy(const struct rx_state *s, const char *tool);

const char *rx_status_name(enum rx_status st);
int rx_status_parse(const char *name, enum rx_status *out) RX_WUR;

/*
 * Append the state as compact JSON in the seed's key order to `b`.
 * Encoding, decoding and encoding again gives identical bytes.
 * 0, or -ENOMEM / -E2BIG (the buffer is left as it was).
 */
int rx_state_encode(const struct rx_state *s, struct rx_buf *b) RX_WUR;
/* Encoders for one record, in the same shape as inside the state. */
int rx_message_encode(const struct rx_message *m, bool assistant,
                      struct rx_buf *b) RX_WUR;
int rx_tool_call_encode(const struct rx_tool_call *c, struct rx_buf *b) RX_WUR;

/*
 * Build a state from its JSON form (`json` borrowed). 0, -EINVAL (err, may be
 * NULL, names the offending field) or -ENOMEM. On
 * failure `out` is left uninitialised-safe: rx_state_release need not be called.
 */
int rx_state_decode(json_t *json, struct rx_state *out, struct rx_error *err) RX_WUR;

/* Deep copy (for forks and tests). 0 or -ENOMEM. */
int rx_state_copy(const struct rx_state *src, struct rx_state *dst) RX_WUR;
/*
 * A state holding the scalars, summary, toolPolicies (at most
 * RX_POLICIES_MAX) and settings of `src` and copies of the tail of each list:
 * user[user_from..], assistant[assistant_from..], tools[tools_from..] (a `from`
 * past the end copies none), with its own derived aids. The part of a state a
 * brain reads (rx_context_view); costs what it copies. 0, or -ENOMEM with dst
 * untouched.
 */
int rx_state_copy_tail(const struct rx_state *src, size_t user_from,
                       size_t assistant_from, size_t tools_from,
                       struct rx_state *dst) RX_WUR;

/* Record id accessors for rx_index. */
const char *rx_message_key(const void *list, size_t i);
const char *rx_tool_call_key(const void *list, size_t i);
/* Move `settled` past records that became final (after a merge). */
void rx_state_settle(struct rx_state *s);
/* Drop a record's cached encoding (it is about to change). */
void rx_message_forget(struct rx_message *m);
void rx_tool_call_forget(struct rx_tool_call *c);

/* True when the invariants above hold; tests call it after every step. */
bool rx_state_check_invariants(const struct rx_state *s);

#endif
