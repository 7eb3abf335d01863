/*
 * rx_agent - the minimal Agent of seed 002: a name and run(state) -> state
 * over JSON states; the EchoAgent; and the adapter that makes an Agent a
 * node of an rx_graph.
 *
 * Depends on graph/ and state_machine/ only; no I/O, clock or threads here.
 * An agent's run() may block, which rx_graph allows. The ChatAgent of SPEC 8
 * (an agent over any brain) is not here yet: graph/ must not include
 * effects/, so it cannot wrap the brains there directly.
 * The state shape is the agent's own; the EchoAgent's is
 * {"messages":[{"role":"user"|"assistant"|"system","content":"..."}]}, or
 * the same in LangChain's shape ("type": "human", "ai", "system"), which is
 * what an add_messages key holds (rx_reducer.h).
 * Ownership: struct rx_agent is caller-owned (a static const one is fine);
 * run() borrows `state`, never modifies it, and sets *out to a new reference.
 * Errors: 0 or a negative errno.
 */
#ifndef RX_AGENT_H
#define RX_AGENT_H

#include <jansson.h>

#include "graph/rx_graph.h"
#include "state_machine/rx_common.h"

struct rx_agent {
    const char *name;
    /* One step: state in (borrowed), the whole next state out (new). */
    int (*run)(const struct rx_agent *agent, json_t *state, json_t **out);
    void *data; /* the implementation's */
};

/*
 * The EchoAgent: appends an assistant message (in the last message's shape)
 * with the content of the last message when that is a user message with
 * string content; otherwise the
 * state comes back unchanged. -EINVAL when "messages" is there but not an array.
 */
extern const struct rx_agent rx_agent_echo;

/*
 * agent->run(agent, state, out). 0 with *out a new reference; -EINVAL when
 * agent or its run is NULL or state is not an object; else the agent's error.
 */
int rx_agent_run(const struct rx_agent *agent, json_t *state, json_t **out) RX_WUR;

/*
 * An rx_graph node function; ctx is the struct rx_agent. The agent's whole
 * next state becomes a partial update holding only what changed: for keys
 * with an append, add_messages or patch_by_id reducer whose new list starts
 * with the old one, just the new tail; for add_messages and patch_by_id keys
 * that were rewritten, the whole list (merged by id); for other keys, the
 * new value. An append key rewritten is -EINVAL (it cannot be expressed),
 * with the task's error set. Keys the agent dropped are left alone.
 * ctx is borrowed; errors of rx_agent_run pass through.
 */
int rx_agent_node(struct rx_graph_task *task, json_t *input, void *ctx, json_t **update);

#endif
