/*
 * openai_config - the `brain.openai` config section, checked and resolved:
 * defaults, the environment's overrides (REFLEXOR_LLM_BASE_URL,
 * REFLEXOR_LLM_MODEL, the variable named by api_key_env), the endpoint URL
 * and the Authorization header. The fields, their defaults and bounds are
 * listed at brain_openai_create (brain_openai.h).
 *
 * Depends on jansson, effects/openai_http (its config struct) and
 * state_machine/rx_context (the compression budget); nothing from server/.
 * Ownership: struct openai_config is caller-allocated (openai_config_parse /
 * openai_config_release) and owns url, model and auth; http.url and
 * http.auth borrow them. The json_t given to openai_config_parse is borrowed
 * and not kept.
 */
#ifndef OPENAI_CONFIG_H
#define OPENAI_CONFIG_H

#include <stdbool.h>

#include <jansson.h>

#include "effects/openai_http.h"
#include "state_machine/rx_common.h"
#include "state_machine/rx_context.h"

#define OPENAI_CONFIG_DEFAULT_URL   "https://api.openai.com/v1"
#define OPENAI_CONFIG_DEFAULT_MODEL "gpt-4o-mini"

struct openai_config {
    char *url;   /* {base_url}/chat/completions */
    char *model; /* never empty */
    char *auth;  /* "Authorization: Bearer ..." or NULL for none */
    bool has_temperature;
    double temperature;
    long long max_tokens; /* 0: not sent */
    /*
     * `continue` (SPEC 3.7): an answer cut off by a crash is continued by a
     * prefix continuation (the text shown sent as a trailing assistant
     * message, as llama.cpp, vLLM and Ollama honour); false: it is asked
     * again and the new answer follows the text shown after a mark.
     */
    bool cont;
    struct openai_http_config http;  /* the transfer's settings */
    struct rx_context_budget budget; /* estimated tokens; limit 0: never compress */
};

/*
 * Fill `out` from `config` (borrowed; NULL or null means {}). 0, or -EINVAL
 * (a field of the wrong type or out of bounds) / -ENOMEM with `err` (may be
 * NULL) a one-line message naming the field, e.g.
 *   "brain.openai.stall_timeout_ms: must be an integer from 1 to 86400000",
 * and `out` holding nothing to release.
 */
int openai_config_parse(json_t *config, struct openai_config *out,
                        struct rx_error *err) RX_WUR;

/* Free what `c` owns and zero it. */
void openai_config_release(struct openai_config *c);

#endif
