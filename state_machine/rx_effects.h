/*
 * rx_effects - effects_at (SPEC 3.3): the effects a state wants, each under a
 * stable key. The runtime starts what is newly wanted and cancels what is gone.
 *
 * Pure: no I/O, clock, threads or globals. Depends on rx_state and rx_alloc
 * only.
 * Ownership: struct rx_effect_set is caller-allocated (rx_effect_set_init /
 * _release) and owns its effects; tool call ids inside are copies.
 */
#ifndef RX_EFFECTS_H
#define RX_EFFECTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state_machine/rx_state.h"
#include "state_machine/rx_common.h"

enum rx_effect_kind { RX_EFFECT_ASK_BRAIN, RX_EFFECT_REQUEST_TOOLKIT };

#define RX_EFFECT_KEY_LEN 160

struct rx_effect {
    enum rx_effect_kind kind;
    int64_t signals_cut_at;      /* ask-brain */
    char *tool_call_id;          /* request-toolkit (owned) */
    char key[RX_EFFECT_KEY_LEN]; /* "ask-brain-<T>" / "request-toolkit-<id>" */
};

struct rx_effect_set {
    struct rx_effect *items;
    size_t len, cap;
};

void rx_effect_set_init(struct rx_effect_set *set);
void rx_effect_set_release(struct rx_effect_set *set);

/*
 * Replace the contents of `out` with the effects `s` wants, in a stable order:
 * asks by ascending signalsCutAt, then tool requests in record order (none
 * for a call awaiting approval, which still counts as pending: no ask for new
 * signals while one waits). Keys are unique. 0 or -ENOMEM (`out` then empty).
 */
int rx_effects_at(const struct rx_state *s, struct rx_effect_set *out) RX_WUR;

/*
 * Whether `s` wants any effect at all: rx_effects_at's set is not empty.
 * Allocates nothing; what the store keeps of a session to know, without
 * reading it, that a restart must resume it (SPEC 6.2).
 */
bool rx_effects_any(const struct rx_state *s);

/* The effect with this key, or NULL (borrowed). */
const struct rx_effect *rx_effect_set_find(const struct rx_effect_set *set,
                                           const char *key);

#endif
