/*
 * config - the server's settings: defaults, then the JSON config file, then
 * environment overrides, then command-line flags (later wins).
 *
 * Every field is documented in config/README.md. A bad value fails with one
 * line naming the file, the field and why (struct rx_error).
 * Depends on jansson and state_machine/; config.c also on effects/mcp_server
 * and effects/toolkit (the defaults of their limits).
 * Ownership: struct config is caller-allocated (config_init/_release) and
 * owns its strings and `json` (NEW reference to the parsed file, from which
 * brain and tool settings are read).
 */
#ifndef CONFIG_H
#define CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>
#include "state_machine/rx_common.h"

struct config {
    char *listen_host;
    int listen_port;
    char *prefix;   /* API prefix, e.g. "/api/reflexor" */
    char *web_root; /* static files */
    char *db_path;  /* ":memory:" for none */
    char *system_prompt;
    char *auth_token; /* "" = no auth */
    /* Users (SPEC 4.4, server/auth). */
    enum config_auth_mode {
        CONFIG_AUTH_DEFAULT, /* not set: token when auth_token is set, else none */
        CONFIG_AUTH_NONE,
        CONFIG_AUTH_TOKEN,
        CONFIG_AUTH_KEYS,
        CONFIG_AUTH_TRUSTED_HEADER,
    } auth_mode;
    char *auth_header;   /* trusted-header: the header naming the user */
    char **auth_proxies; /* trusted-header: CIDRs believed, "127.0.0.1/32", ... */
    size_t n_auth_proxies;
    char **auth_admins; /* trusted-header: the names that are admins */
    size_t n_auth_admins;
    char *metrics_token;      /* "" none: /metrics needs an admin (or this bearer) */
    int user_sessions;        /* sessions one non-admin may own; 0: no limit */
    int user_running_effects; /* effects of one non-admin's sessions at once; 0: none */
    int user_rate;            /* requests a second one non-admin may make; 0: none */
    bool allow_agent_inputs;
    bool effects; /* false: inputs are folded, nothing is carried out (benchmarks) */
    char *brain;  /* "builtin" or "openai" */
    size_t body_max;
    size_t import_max;      /* the body of POST .../sessions/import (a whole chat) */
    int imports_running;    /* imports replayed at once (429 past it) */
    size_t lg_metadata_max; /* bytes of one LangGraph thread's metadata (413 past it) */
    size_t lg_runs_bytes;   /* bytes finished LangGraph run records may keep, in all */
    size_t message_max;
    int max_sessions;      /* sessions at once with --db :memory: (nowhere to evict to) */
    int resident_sessions; /* sessions in memory past which idle ones are evicted */
    size_t resident_bytes; /* their states' bytes past which idle ones are evicted */
    int sessions_idle_ms;  /* an idle session may leave memory after this */
    int max_connections;
    int http_threads; /* libmicrohttpd threads; 0: one per CPU, at most 4 */
    int sse_queue_max;
    size_t sse_queue_bytes; /* bytes a stream client may have waiting */
    int session_queue_max;
    int idle_timeout_ms;         /* an idle connection is closed (SSE streams exempt) */
    int max_running_effects;     /* effects on workers at once, whole process */
    int session_running_effects; /* effects on workers at once, one session */
    size_t tool_result_max;      /* bytes of a tool result kept; the rest is cut */
    size_t mcp_tools_max;        /* tools one MCP server may list; past it: refused */
    int sse_retry_ms;
    int sse_ping_ms;
    int backoff_ms;
    int backoff_max_ms;
    int snapshot_every;
    bool store_fsync; /* fsync each commit (survives power loss), or only write it */
    size_t store_max_bytes; /* quota on the database's pages; 0: none */
    int retention_max_age_days;
    /* The client protocols (SPEC 4.3); a prefix "" turns one off. */
    char *oai_prefix;  /* OpenAI-compatible, "/v1" */
    char **oai_models; /* the names GET /v1/models lists (at least one) */
    size_t n_oai_models;
    bool oai_tool_details;         /* show tool activity as a <details> block */
    bool oai_cancel_on_disconnect; /* a client gone stops the agent's work */
    char *lg_prefix;               /* LangGraph Agent Server subset, "/api/langgraph" */
    char *agui_prefix;             /* AG-UI, "/api/ag-ui" */
    char *a2a_prefix;              /* A2A JSON-RPC, "/api/a2a" (and the agent card) */
    /* Many nodes on one PostgreSQL log (SPEC 6.1, server/cluster). */
    int cluster_lease_ms; /* a dead owner's sessions are taken over after this */
    char
        *cluster_advertise; /* the URL other nodes reach this one at; "": http://listen */
    json_t *json;           /* the whole file ({} when none) */
    char **retired;         /* auth tokens replaced by a reload, freed at release */
    size_t n_retired;
};

/* Defaults only. 0 or -ENOMEM. */
int config_init(struct config *c) RX_WUR;
void config_release(struct config *c);

/* Read a config file over the defaults. 0 or -EINVAL with `err`. */
int config_load_file(struct config *c, const char *path, struct rx_error *err) RX_WUR;
/* Apply REFLEXOR_* and LLM environment variables. 0 or -EINVAL with `err`. */
int config_load_env(struct config *c, struct rx_error *err) RX_WUR;
/* "HOST:PORT" into listen_host/listen_port. 0 or -EINVAL with `err`. */
int config_set_listen(struct config *c, const char *hostport,
                      struct rx_error *err) RX_WUR;
/* Replace a string setting. 0 or -ENOMEM. */
int config_set_str(char **field, const char *value) RX_WUR;

/*
 * SIGHUP: take `fresh`'s auth token and limits (body_max, import_max, message_max,
 * max_sessions, session_queue_max, idle_timeout_ms, sse_queue_bytes,
 * imports_running, lg_metadata_max, lg_runs_bytes, resident_sessions,
 * resident_bytes, sessions_idle_ms, user_sessions, user_running_effects,
 * user_rate) into the
 * running `c`, for new work. Other threads may be reading `c`: the token
 * pointer is swapped atomically (read it with config_auth_token) and the old
 * string is kept until config_release; each limit is one atomic store.
 * 0 or -ENOMEM.
 */
int config_apply_reload(struct config *c, const struct config *fresh) RX_WUR;
/* The auth token now in force ("" = none); borrowed until config_release. */
const char *config_auth_token(const struct config *c);
/* auth.mode with the default resolved: none, token, keys or trusted-header. */
enum config_auth_mode config_auth_mode(const struct config *c);
/* Its word in the config file ("none", "token", "keys", "trusted-header"). */
const char *config_auth_mode_name(enum config_auth_mode m);

/* The brain's section: json["brain"][name] (borrowed, may be NULL). */
json_t *config_brain_section(const struct config *c, const char *name);

#endif
