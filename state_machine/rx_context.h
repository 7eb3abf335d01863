/*
 * rx_context - the conversation handed to a brain (SPEC 3.5), as an
 * OpenAI-style `messages` array.
 *
 * Pure: no I/O, clock, threads or globals. Depends on rx_state, rx_buf,
 * rx_alloc and jansson only; nothing from effects/, server/ or graph/ (the
 * brains in effects/ call it).
 * Shape: system prompt first; then, if a summary is set, a user message
 * "[Previous conversation summary]\n<summary>"; then, if older unloaded tool
 * calls exist, a system message listing them by id and name; then user
 * messages, completed or stopped assistant messages with content, and tool
 * calls with their results after summaryCutAt (plus loaded records), stable-
 * sorted by time (ties: user, assistant, tools).
 * Older tool records (calledAt at or before summaryCutAt): the context reaches
 * back to the RX_CONTEXT_OLDER_MAX newest of them only (by position; the
 * machine appends in time order). Those not loaded are the list; those
 * loaded are shown; anything older is neither, so the list does not grow with
 * the history. (A brain only loads what the list offers, and every
 * compression unloads all it covers, so a loaded record is in that reach
 * unless an outside agent loaded an older one.)
 *
 * Cost: on a state whose lists are in time order (`time_sorted`, always so
 * for states the machine built) every function here finds summaryCutAt by
 * binary search and reads only what follows it plus the older reach above:
 * O(log n + what the context holds), not O(history). A hand-made state out
 * of time order is read whole, with the same results.
 *
 * The view (rx_context_view): the part of a state those functions read,
 * copied, so a brain can work on it without the session's lock and without a
 * copy of the whole session (SPEC 3.4). Every function of this module gives
 * the same result on the view as on the state, and the brain's own inputs
 * apply to it with rx_machine_apply. A view may also be bounded to the newest
 * `messages_max` user messages and assistant messages after the cut: what a
 * brain's compression policy needs to decide (rx_context_view_messages). Past
 * that bound the history is over the budget anyway; the view then shows the
 * newest messages only, the policy cuts among them, and the cut (a time)
 * covers everything before it in the session. That is what keeps an ask's
 * cost bounded when compression cannot keep up (messages arriving faster
 * than asks can answer them, each replacing the last). The calls of one
 * brain-call-tools (same calledAt) form one assistant message with all of them,
 * each followed by a "tool" message with its result ("Error: <error>" for
 * failures); a pending call has no result message.
 *
 * The compression policy (SPEC 3.5), the one every brain uses: when the
 * history an ask sees is longer than a budget, where to cut it. An *item* is
 * what the context shows as one unit: a user message, a shown assistant
 * message, or the calls of one brain-call-tools with their results. A cut is
 * a time T sent as brain-compress-history `cutAt`; items at or before it are
 * summarised. A legal cut:
 *  - moves forward: summaryCutAt < T <= signals_cut_at (only what the ask saw);
 *  - keeps at least `keep` items after it, and the newest user message (the
 *    one being answered) after it;
 *  - never separates a tool call from its result: every call at or before T
 *    was answered at or before T; pending calls and streaming answers are
 *    never cut;
 *  - never splits one brain-call-tools nor items of the same time: T is the
 *    time of an item, and every item of that time is at or before it.
 * Of the legal cuts, the newest (the most history summarised) is chosen.
 *
 * Ownership: rx_context_build returns a NEW reference in *out. The policy
 * functions borrow the state and allocate nothing they hand out.
 * rx_context_view initialises *out, the caller's to rx_state_release().
 */
#ifndef RX_CONTEXT_H
#define RX_CONTEXT_H

#include <jansson.h>

#include "state_machine/rx_state.h"
#include "state_machine/rx_common.h"

#define RX_CONTEXT_SUMMARY_PREFIX "[Previous conversation summary]\n"
/* Older tool records (before summaryCutAt) a context reaches back to. */
#define RX_CONTEXT_OLDER_MAX 64

/*
 * Build the messages for an ask that sees signals up to `signals_cut_at`
 * (items later than it are left out; pass INT64_MAX for everything).
 * `system_prompt` may be NULL or "" for none. 0 or -ENOMEM.
 */
int rx_context_build(const struct rx_state *s, const char *system_prompt,
                     int64_t signals_cut_at, json_t **out) RX_WUR;

/*
 * The view of `s` (see above): its scalars and summary, and copies of the
 * records from the first after summaryCutAt on (tool records: from the first
 * of the older reach), whatever their time; with `messages_max` > 0, at most
 * that many user messages and that many assistant messages (the newest) of a
 * list in time order. O(log n + what it copies) on a state in time order.
 * 0, or -ENOMEM with *out untouched.
 */
int rx_context_view(const struct rx_state *s, size_t messages_max,
                    struct rx_state *out) RX_WUR;

/* True when the context of an ask seeing `signals_cut_at` lists an older
   unloaded tool call (one a brain may load). */
bool rx_context_has_unloaded(const struct rx_state *s, int64_t signals_cut_at);

/* How the length of a history is measured against a budget. */
enum rx_context_unit {
    RX_CONTEXT_ITEMS,  /* items, as defined above */
    RX_CONTEXT_CHARS,  /* UTF-8 characters of the summary and of the items' texts:
                          contents, a call's name, arguments and result as shown */
    RX_CONTEXT_TOKENS, /* estimated tokens: those texts' bytes / 4, rounded up */
};

struct rx_context_budget {
    enum rx_context_unit unit;
    int64_t limit; /* compress when the history is longer than this; <= 0 never */
    size_t keep;   /* newest items never compressed */
};

/*
 * The messages of each kind a view needs for `budget` to decide as it would
 * on the whole state: every shown message weighs at least 1 item, 1
 * character or 1 byte (a quarter token), so that many past the limit
 * already exceed it, and the newest `keep` items stay. 0 (all) when the
 * budget never compresses or is too large to bound anything.
 */
size_t rx_context_view_messages(const struct rx_context_budget *budget);

/* No compression: a legal cut is always > summaryCutAt >= 0, never 0. */
#define RX_CONTEXT_NO_CUT 0

/*
 * The length, in `unit`, of what the context of an ask seeing signals up to
 * `signals_cut_at` carries from the state: the summary (not for ITEMS) and
 * the items shown, loaded records included. Pure, no allocation.
 */
int64_t rx_context_length(const struct rx_state *s, int64_t signals_cut_at,
                          enum rx_context_unit unit);

/*
 * The policy: 0 and *cut_at the newest legal cut when the history is longer
 * than budget->limit, or RX_CONTEXT_NO_CUT when it is not, or when no cut is
 * legal. -ENOMEM with *cut_at unchanged.
 */
int rx_context_choose_cut(const struct rx_state *s, int64_t signals_cut_at,
                          const struct rx_context_budget *budget, int64_t *cut_at) RX_WUR;

#endif
