/*
 * brain_builtin - the embedded, deterministic `builtin` brain (SPEC 5) as an
 * effect, so the server runs with no LLM and no network, and every input
 * type gets exercised. What it says is decided by builtin_reply (pure); this
 * module delivers it.
 *
 * One ask (struct brain, brain_builtin_create), all of it on the ask's view
 * (ask->view, never the whole session): compress history when the policy of
 * rx_context says so (more than compress_after items after summaryCutAt:
 * brain-compress-history with builtin_reply_summary), build the context
 * (rx_context_build), decide (builtin_reply_decide), then either
 * dispatch brain-call-tools, or stream the answer: brain-send-message-start
 * (skipped when resuming ask->resume_message_id), chunks of a few UTF-8
 * characters with a pause between them, and brain-send-message-complete with
 * the whole text. Every input carries calledBrainAt = ask->signals_cut_at.
 * Failures end the ask with a complete "[Error] ..." message when possible. A
 * user message starting with "/slow" streams at least
 * BRAIN_BUILTIN_SLOW_FACTOR times slower, so a stop can be tried by hand.
 *
 * Depends on effects/brain.h, effects/builtin_reply, base/idgen,
 * state_machine/ and jansson; nothing from server/.
 * Threads: one brain may run any number of asks concurrently (it only reads
 * its config).
 * Ownership: the brain copies its config, call_id_prefix's text included;
 * free it with brain->destroy().
 */
#ifndef BRAIN_BUILTIN_H
#define BRAIN_BUILTIN_H

#include "effects/brain.h"
#include "state_machine/rx_common.h"

/* Delay multiplier of a "/slow" message. */
#define BRAIN_BUILTIN_SLOW_FACTOR 50
/* Longest pause between chunks, whatever the factors say. */
#define BRAIN_BUILTIN_DELAY_MAX_MS 60000
/* Longest call_id_prefix (ids must fit RX_ID_MAX). */
#define BRAIN_BUILTIN_PREFIX_MAX 32

struct brain_builtin_config {
    int chunk_chars;    /* UTF-8 characters per streamed chunk; < 1 means 1 */
    int chunk_delay_ms; /* pause between chunks; < 0 means 0 */
    int slow_factor; /* multiplies the pause (a slow brain, to test stop); < 1 means 1 */
    int compress_after;         /* compress when more items (rx_context) than this follow
                                   summaryCutAt; 0 never */
    int compress_keep;          /* newest items kept out of a compression; < 1 means 1 */
    const char *call_id_prefix; /* tool call ids start with it; NULL: "call" */
};

/* The defaults: 4 characters, 30 ms, factor 1, compress after 40 keeping 6. */
void brain_builtin_config_init(struct brain_builtin_config *cfg);

/*
 * A builtin brain with `cfg` (copied; NULL for the defaults), or NULL when out
 * of memory or when cfg->call_id_prefix is longer than BRAIN_BUILTIN_PREFIX_MAX.
 */
struct brain *brain_builtin_create(const struct brain_builtin_config *cfg) RX_WUR;

#endif
