/*
 * config - defaults, file, environment. See config.h.
 */
#include "server/config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cidr.h"
#include "effects/mcp_server.h"
#include "effects/toolkit.h"
#include "server/principal.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_json.h"

/* A configuration file larger than this is a mistake, not a configuration. */
#define CONFIG_FILE_MAX (16u << 20)

int config_set_str(char **field, const char *value)
{
    char *d = strdup(value);

    if (!d)
        return -ENOMEM;
    free(*field);
    *field = d;
    return 0;
}

static void free_strs(char ***v, size_t *n)
{
    for (size_t i = 0; i < *n; i++)
        free((*v)[i]);
    free(*v);
    *v = NULL;
    *n = 0;
}

/* Replace a list of strings with copies of names[0..n). 0 or -ENOMEM (old kept). */
static int set_strs(char ***field, size_t *count, const char *const *names, size_t n)
{
    char **v = calloc(n ? n : 1, sizeof(*v));

    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!(v[i] = strdup(names[i]))) {
            while (i--)
                free(v[i]);
            free(v);
            return -ENOMEM;
        }
    }
    free_strs(field, count);
    *field = v;
    *count = n;
    return 0;
}

/* Replace the model names GET /v1/models lists. 0 or -ENOMEM (old ones kept). */
static int set_models(struct config *c, const char *const *names, size_t n)
{
    return set_strs(&c->oai_models, &c->n_oai_models, names, n);
}

int config_init(struct config *c)
{
    memset(c, 0, sizeof(*c));
    c->listen_port = 8080;
    c->effects = true;
    c->store_fsync = true;
    c->body_max = 1 << 20;
    c->import_max = 16 << 20;
    c->imports_running = 2;
    c->lg_metadata_max = 64 << 10;
    c->lg_runs_bytes = 64 << 20;
    c->message_max = 256 << 10;
    c->max_sessions = 10000;
    c->resident_sessions = 10000;
    c->resident_bytes = (size_t)256 << 20;
    c->sessions_idle_ms = 300000;
    c->max_connections = 4096;
    c->sse_queue_max = 1024;
    c->sse_queue_bytes = 8 << 20;
    c->session_queue_max = 64;
    c->max_running_effects = 64;    /* RUNTIME_POOL_MAX_DEFAULT */
    c->session_running_effects = 8; /* RUNTIME_SESSION_MAX_DEFAULT */
    c->tool_result_max = TOOLKIT_RESULT_MAX_DEFAULT;
    c->mcp_tools_max = MCP_SERVER_TOOLS_MAX_DEFAULT;
    c->idle_timeout_ms = 30000;
    c->sse_retry_ms = 2000;
    c->sse_ping_ms = 15000;
    c->backoff_ms = 250;
    c->backoff_max_ms = 10000;
    c->snapshot_every = 200;
    c->retention_max_age_days = 0;
    c->oai_tool_details = true;
    c->cluster_lease_ms = 5000;
    c->user_sessions = 10000;
    c->user_running_effects = 16;
    c->user_rate = 50;
    c->json = json_object();
    if (!c->json || config_set_str(&c->listen_host, "127.0.0.1") ||
        config_set_str(&c->prefix, "/api/reflexor") ||
        config_set_str(&c->web_root, "build/web") ||
        config_set_str(&c->db_path, "data/reflexor.db") ||
        config_set_str(&c->system_prompt, "You are Reflexor, a helpful assistant.") ||
        config_set_str(&c->auth_token, "") || config_set_str(&c->brain, "builtin") ||
        config_set_str(&c->oai_prefix, "/v1") ||
        config_set_str(&c->lg_prefix, "/api/langgraph") ||
        config_set_str(&c->agui_prefix, "/api/ag-ui") ||
        config_set_str(&c->a2a_prefix, "/api/a2a") ||
        config_set_str(&c->cluster_advertise, "") ||
        config_set_str(&c->auth_header, "X-Remote-User") ||
        config_set_str(&c->metrics_token, "") ||
        set_strs(&c->auth_proxies, &c->n_auth_proxies,
                 (const char *[]){"127.0.0.1/32", "::1/128"}, 2) ||
        set_strs(&c->auth_admins, &c->n_auth_admins, NULL, 0) ||
        set_models(c, (const char *[]){"reflexor"}, 1)) {
        config_release(c);
        return -ENOMEM;
    }
    return 0;
}

void config_release(struct config *c)
{
    free(c->listen_host);
    free(c->prefix);
    free(c->web_root);
    free(c->db_path);
    free(c->system_prompt);
    free(c->auth_token);
    free(c->oai_prefix);
    free(c->lg_prefix);
    free(c->agui_prefix);
    free(c->a2a_prefix);
    free(c->cluster_advertise);
    free(c->auth_header);
    free(c->metrics_token);
    free_strs(&c->auth_proxies, &c->n_auth_proxies);
    free_strs(&c->auth_admins, &c->n_auth_admins);
    free_strs(&c->oai_models, &c->n_oai_models);
    for (size_t i = 0; i < c->n_retired; i++)
        free(c->retired[i]);
    free(c->retired);
    free(c->brain);
    json_decref(c->json);
    memset(c, 0, sizeof(*c));
}

static int bad(struct rx_error *err, const char *file, const char *field, const char *why)
{
    if (err)
        snprintf(err->text, sizeof(err->text), "%s: '%s' %s", file, field, why);
    return -EINVAL;
}

/* Read a dotted path ("limits.body_max") from the file, or NULL. */
static json_t *at(json_t *root, const char *path)
{
    char buf[128], *save = NULL, *part;
    json_t *v = root;

    snprintf(buf, sizeof(buf), "%s", path);
    for (part = strtok_r(buf, ".", &save); part && v; part = strtok_r(NULL, ".", &save))
        v = json_object_get(v, part);
    return v;
}

static int get_str(json_t *root, const char *file, const char *path, char **out,
                   struct rx_error *err)
{
    json_t *v = at(root, path);

    if (!v)
        return 0;
    if (!json_is_string(v))
        return bad(err, file, path, "must be a string");
    return config_set_str(out, json_string_value(v));
}

static int get_int(json_t *root, const char *file, const char *path, long lo, long hi,
                   long *out, struct rx_error *err)
{
    json_t *v = at(root, path);
    char why[96];

    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        snprintf(why, sizeof(why), "must be an integer from %ld to %ld", lo, hi);
        return bad(err, file, path, why);
    }
    *out = (long)json_integer_value(v);
    return 0;
}

/*
 * Every key the file may hold, by section ("" is the top level): a typo is an
 * error that names it, never silently ignored. Tool entries and mcpServers are
 * checked by the toolkit, which owns their shape.
 */
static const struct {
    const char *section;
    const char *keys; /* space-separated */
} known_keys[] = {
    {"", "listen api_prefix web_root db system_prompt auth api limits sse runtime store "
         "retention brain tools mcpServers openai langgraph agui a2a cluster sessions "
         "metrics"},
    {"metrics", "token"},
    {"sessions", "idle_ms"},
    {"openai", "prefix models tool_details on_disconnect"},
    {"langgraph", "prefix"},
    {"agui", "prefix"},
    {"a2a", "prefix"},
    {"cluster", "lease_ms advertise"},
    {"auth", "token mode header trusted_proxies admins"},
    {"api", "allow_agent_inputs"},
    {"limits",
     "body_max import_max message_max max_sessions max_connections http_threads "
     "sse_queue_max sse_queue_bytes session_queue_max idle_timeout_ms "
     "max_running_effects session_running_effects tool_result_max mcp_tools_max "
     "imports_running lg_metadata_max lg_runs_bytes resident_sessions resident_bytes "
     "user_sessions user_running_effects user_rate"},
    {"sse", "retry_ms ping_ms"},
    {"runtime", "effects backoff_ms backoff_max_ms"},
    {"store", "snapshot_every fsync max_bytes"},
    {"retention", "max_age_days"},
    {"brain", "provider builtin openai"},
    {"brain.builtin",
     "chunk_chars chunk_delay_ms slow_factor compress_after compress_keep"},
    {"brain.openai", "base_url model api_key api_key_env temperature max_tokens "
                     "connect_timeout_ms stall_timeout_ms timeout_ms retries backoff_ms "
                     "backoff_max_ms context_budget keep_recent continue"},
};

static bool word_in(const char *list, const char *word)
{
    size_t n = strlen(word);

    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n]))
            return true;
    return false;
}

static int check_keys(json_t *root, const char *file, struct rx_error *err)
{
    for (size_t i = 0; i < sizeof(known_keys) / sizeof(known_keys[0]); i++) {
        const char *sec = known_keys[i].section;
        json_t *obj = *sec ? at(root, sec) : root, *v;
        const char *key;
        char path[160];

        if (!json_is_object(obj))
            continue; /* absent, or of the wrong type: its own check says so */
        json_object_foreach(obj, key, v)
        {
            if (word_in(known_keys[i].keys, key))
                continue;
            snprintf(path, sizeof(path), "%s%s%s", sec, *sec ? "." : "", key);
            return bad(err, file, path, "is not a known setting (see config/README.md)");
        }
    }
    return 0;
}

/* A protocol's prefix: "" (off), or a path like api_prefix. */
static int get_prefix(json_t *root, const char *file, const char *path, char **out,
                      struct rx_error *err)
{
    int rc = get_str(root, file, path, out, err);
    size_t n = *out ? strlen(*out) : 0;

    if (rc || !n)
        return rc;
    if (**out != '/' || n < 2 || (*out)[n - 1] == '/')
        return bad(err, file, path,
                   "must be \"\" (off) or start with '/' and not end with one");
    return 0;
}

/* The openai and langgraph sections (SPEC 4.3). */
static int load_protocols(struct config *c, json_t *root, const char *file,
                          struct rx_error *err)
{
    const char *names[64];
    json_t *v, *m;
    size_t i;
    int rc;

    if ((rc = get_prefix(root, file, "openai.prefix", &c->oai_prefix, err)) ||
        (rc = get_prefix(root, file, "langgraph.prefix", &c->lg_prefix, err)) ||
        (rc = get_prefix(root, file, "agui.prefix", &c->agui_prefix, err)) ||
        (rc = get_prefix(root, file, "a2a.prefix", &c->a2a_prefix, err)))
        return rc;
    if ((v = at(root, "openai.tool_details"))) {
        if (!json_is_boolean(v))
            return bad(err, file, "openai.tool_details", "must be true or false");
        c->oai_tool_details = json_is_true(v);
    }
    if ((v = at(root, "openai.on_disconnect"))) {
        const char *s = json_string_value(v);

        if (!s || (strcmp(s, "continue") && strcmp(s, "cancel")))
            return bad(err, file, "openai.on_disconnect",
                       "must be \"continue\" or \"cancel\"");
        c->oai_cancel_on_disconnect = !strcmp(s, "cancel");
    }
    if (!(v = at(root, "openai.models")))
        return 0;
    if (!json_is_array(v) || !json_array_size(v) || json_array_size(v) > 64)
        return bad(err, file, "openai.models", "must be an array of 1 to 64 names");
    json_array_foreach(v, i, m)
    {
        const char *s = json_string_value(m);

        if (!s || !*s || strlen(s) > 128)
            return bad(err, file, "openai.models", "must hold names of 1 to 128 bytes");
        names[i] = s;
    }
    return set_models(c, names, json_array_size(v));
}

/* A list of 0 to 256 strings (each checked by `ok`, when not NULL) into *field. */
static int get_strs(json_t *root, const char *file, const char *path,
                    bool (*ok)(const char *), const char *what, char ***field,
                    size_t *count, struct rx_error *err)
{
    const char *v[256];
    json_t *arr = at(root, path), *e;
    size_t i;

    if (!arr)
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) > 256)
        return bad(err, file, path, "must be an array of at most 256 strings");
    json_array_foreach(arr, i, e)
    {
        if (!(v[i] = json_string_value(e)) || (ok && !ok(v[i])))
            return bad(err, file, path, what);
    }
    return set_strs(field, count, v, json_array_size(arr));
}

static bool is_cidr(const char *s)
{
    struct cidr c;

    return !cidr_parse(s, &c);
}

static bool is_name(const char *s)
{
    return principal_name_is_valid(s);
}

/* The auth section and metrics.token (SPEC 4.4). */
static int load_auth(struct config *c, json_t *root, const char *file,
                     struct rx_error *err)
{
    static const char *const modes[] = {"none", "token", "keys", "trusted-header"};
    json_t *v;
    int rc;

    if ((v = at(root, "auth.mode"))) {
        const char *m = json_string_value(v);
        size_t i = 0;

        while (m && i < 4 && strcmp(m, modes[i]))
            i++;
        if (!m || i == 4)
            return bad(err, file, "auth.mode",
                       "must be \"none\", \"token\", \"keys\" or \"trusted-header\"");
        c->auth_mode = (enum config_auth_mode)(CONFIG_AUTH_NONE + i);
    }
    if ((rc = get_str(root, file, "auth.header", &c->auth_header, err)) ||
        (rc = get_str(root, file, "metrics.token", &c->metrics_token, err)) ||
        (rc = get_strs(root, file, "auth.trusted_proxies", is_cidr,
                       "must hold addresses or CIDR blocks (\"10.0.0.0/8\", \"::1/128\")",
                       &c->auth_proxies, &c->n_auth_proxies, err)) ||
        (rc = get_strs(root, file, "auth.admins", is_name,
                       "must hold user names (letters, digits, '._@-', 1 to 64)",
                       &c->auth_admins, &c->n_auth_admins, err)))
        return rc;
    if (!*c->auth_header || strpbrk(c->auth_header, " :\t\r\n"))
        return bad(err, file, "auth.header", "must be a header name");
    return 0;
}

#define INT_FIELD(path, field, lo, hi)                                                   \
    do {                                                                                 \
        long v_ = (long)(field);                                                         \
        if ((rc = get_int(root, file, path, lo, hi, &v_, err)))                          \
            goto out_decref;                                                             \
        (field) = v_;                                                                    \
    } while (0)

/* The whole file into b (at most CONFIG_FILE_MAX bytes). 0 or -errno. */
static int read_whole(const char *file, struct rx_buf *b)
{
    FILE *f = fopen(file, "r");
    char chunk[8192];
    size_t n;
    int rc = 0;

    if (!f)
        return -errno;
    errno = 0;
    while (!rc && (n = fread(chunk, 1, sizeof(chunk), f)))
        rc = rx_buf_append(b, chunk, n);
    if (!rc && ferror(f))
        rc = errno ? -errno : -EIO; /* EISDIR for a directory */
    fclose(f);
    return rc;
}

/* NEW reference: the file's JSON, through the one parser. NULL: why in err. */
static json_t *load_json(const char *file, struct rx_error *err)
{
    struct rx_buf b;
    struct rx_error why;
    json_t *root = NULL;
    int rc;

    rx_buf_init(&b, CONFIG_FILE_MAX);
    if ((rc = read_whole(file, &b)))
        rx_error_set(err, -EINVAL, "%s: cannot read: %s", file,
                     rc == -E2BIG ? "larger than 16 MiB" : strerror(-rc));
    else if (rx_json_parse(b.data, b.len, 0, &root, &why))
        rx_error_set(err, -EINVAL, "%s: %s", file, why.text);
    rx_buf_release(&b);
    return root;
}

int config_load_file(struct config *c, const char *file, struct rx_error *err)
{
    json_t *root = load_json(file, err), *v;
    int rc = 0;

    if (!root)
        return -EINVAL;
    if (!json_is_object(root)) {
        rc = bad(err, file, "(top level)", "must be an object");
        goto out_decref;
    }
    if ((rc = check_keys(root, file, err)))
        goto out_decref;
    if ((v = at(root, "listen"))) {
        struct rx_error e2;

        if (!json_is_string(v) || config_set_listen(c, json_string_value(v), &e2)) {
            rc = bad(err, file, "listen", "must be \"HOST:PORT\"");
            goto out_decref;
        }
    }
    if ((rc = get_str(root, file, "api_prefix", &c->prefix, err)) ||
        (rc = get_str(root, file, "web_root", &c->web_root, err)) ||
        (rc = get_str(root, file, "db", &c->db_path, err)) ||
        (rc = get_str(root, file, "system_prompt", &c->system_prompt, err)) ||
        (rc = get_str(root, file, "auth.token", &c->auth_token, err)) ||
        (rc = get_str(root, file, "brain.provider", &c->brain, err)))
        goto out_decref;
    if ((v = at(root, "api.allow_agent_inputs"))) {
        if (!json_is_boolean(v)) {
            rc = bad(err, file, "api.allow_agent_inputs", "must be true or false");
            goto out_decref;
        }
        c->allow_agent_inputs = json_is_true(v);
    }
    if ((v = at(root, "store.fsync"))) {
        if (!json_is_boolean(v)) {
            rc = bad(err, file, "store.fsync", "must be true or false");
            goto out_decref;
        }
        c->store_fsync = json_is_true(v);
    }
    if ((v = at(root, "runtime.effects"))) {
        if (!json_is_boolean(v)) {
            rc = bad(err, file, "runtime.effects", "must be true or false");
            goto out_decref;
        }
        c->effects = json_is_true(v);
    }
    INT_FIELD("limits.body_max", c->body_max, 64, 1L << 30);
    INT_FIELD("limits.import_max", c->import_max, 64, 1L << 30);
    INT_FIELD("limits.imports_running", c->imports_running, 1, 1024);
    INT_FIELD("limits.lg_metadata_max", c->lg_metadata_max, 2, 1L << 30);
    INT_FIELD("limits.lg_runs_bytes", c->lg_runs_bytes, 0, 1L << 40);
    INT_FIELD("limits.message_max", c->message_max, 64, 1L << 30);
    INT_FIELD("limits.max_sessions", c->max_sessions, 1, 10000000);
    INT_FIELD("limits.resident_sessions", c->resident_sessions, 1, 10000000);
    INT_FIELD("limits.resident_bytes", c->resident_bytes, 1L << 20, 1L << 40);
    INT_FIELD("sessions.idle_ms", c->sessions_idle_ms, 0, 86400000);
    INT_FIELD("limits.max_connections", c->max_connections, 4, 1000000);
    INT_FIELD("limits.http_threads", c->http_threads, 0, 64);
    INT_FIELD("limits.sse_queue_max", c->sse_queue_max, 4, 1000000);
    INT_FIELD("limits.sse_queue_bytes", c->sse_queue_bytes, 4096, 1L << 30);
    INT_FIELD("limits.session_queue_max", c->session_queue_max, 1, 1000000);
    INT_FIELD("limits.idle_timeout_ms", c->idle_timeout_ms, 1000, 86400000);
    INT_FIELD("limits.max_running_effects", c->max_running_effects, 1, 4096);
    INT_FIELD("limits.session_running_effects", c->session_running_effects, 1, 4096);
    INT_FIELD("limits.tool_result_max", c->tool_result_max, 256, 64L << 20);
    INT_FIELD("limits.mcp_tools_max", c->mcp_tools_max, 1, 1000000);
    INT_FIELD("sse.retry_ms", c->sse_retry_ms, 0, 3600000);
    INT_FIELD("sse.ping_ms", c->sse_ping_ms, 100, 3600000);
    INT_FIELD("runtime.backoff_ms", c->backoff_ms, 1, 3600000);
    INT_FIELD("runtime.backoff_max_ms", c->backoff_max_ms, 1, 3600000);
    INT_FIELD("store.snapshot_every", c->snapshot_every, 1, 1000000);
    INT_FIELD("store.max_bytes", c->store_max_bytes, 0, LONG_MAX);
    INT_FIELD("retention.max_age_days", c->retention_max_age_days, 0, 100000);
    INT_FIELD("cluster.lease_ms", c->cluster_lease_ms, 200, 600000);
    if ((rc = get_str(root, file, "cluster.advertise", &c->cluster_advertise, err)))
        goto out_decref;
    if (*c->cluster_advertise && strncmp(c->cluster_advertise, "http://", 7)) {
        rc = bad(err, file, "cluster.advertise", "must be \"\" or an http:// URL");
        goto out_decref;
    }
    INT_FIELD("limits.user_sessions", c->user_sessions, 0, 100000000);
    INT_FIELD("limits.user_running_effects", c->user_running_effects, 0, 4096);
    INT_FIELD("limits.user_rate", c->user_rate, 0, 1000000);
    if ((rc = load_protocols(c, root, file, err)) || (rc = load_auth(c, root, file, err)))
        goto out_decref;
    if (*c->prefix != '/' || c->prefix[strlen(c->prefix) - 1] == '/') {
        rc = bad(err, file, "api_prefix", "must start with '/' and not end with one");
        goto out_decref;
    }
    if (strcmp(c->brain, "builtin") && strcmp(c->brain, "openai")) {
        rc = bad(err, file, "brain.provider", "must be \"builtin\" or \"openai\"");
        goto out_decref;
    }
    json_decref(c->json);
    c->json = json_incref(root);

out_decref:
    json_decref(root);
    return rc;
}

int config_load_env(struct config *c, struct rx_error *err)
{
    const char *v;

    if ((v = getenv("REFLEXOR_LISTEN")) && config_set_listen(c, v, err))
        return -EINVAL;
    if ((v = getenv("REFLEXOR_DB")) && config_set_str(&c->db_path, v))
        return -ENOMEM;
    if ((v = getenv("REFLEXOR_AUTH_TOKEN")) && config_set_str(&c->auth_token, v))
        return -ENOMEM;
    /* A key or an endpoint in the environment means: use a real LLM. */
    if (((v = getenv("OPENAI_API_KEY")) && *v) ||
        ((v = getenv("REFLEXOR_LLM_BASE_URL")) && *v)) {
        if (config_set_str(&c->brain, "openai"))
            return -ENOMEM;
    }
    if ((v = getenv("REFLEXOR_BRAIN")) && *v) {
        if (strcmp(v, "builtin") && strcmp(v, "openai")) {
            if (err)
                snprintf(err->text, sizeof(err->text),
                         "REFLEXOR_BRAIN: must be \"builtin\" or \"openai\"");
            return -EINVAL;
        }
        if (config_set_str(&c->brain, v))
            return -ENOMEM;
    }
    return 0;
}

int config_set_listen(struct config *c, const char *hostport, struct rx_error *err)
{
    const char *colon = strrchr(hostport, ':');
    char *end;
    long port;

    if (!colon || colon == hostport)
        goto out_bad;
    port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || port < 0 || port > 65535)
        goto out_bad;
    free(c->listen_host);
    c->listen_host = strndup(hostport, (size_t)(colon - hostport));
    if (!c->listen_host)
        return -ENOMEM;
    c->listen_port = (int)port;
    return 0;

out_bad:
    if (err)
        snprintf(err->text, sizeof(err->text), "listen address '%s': expected HOST:PORT",
                 hostport);
    return -EINVAL;
}

json_t *config_brain_section(const struct config *c, const char *name)
{
    return json_object_get(json_object_get(c->json, "brain"), name);
}

int config_apply_reload(struct config *c, const struct config *fresh)
{
    char *token = strdup(fresh->auth_token), *old;
    char **retired = realloc(c->retired, (c->n_retired + 1) * sizeof(*retired));

    if (retired)
        c->retired = retired;
    if (!token || !retired) {
        free(token);
        return -ENOMEM;
    }
    old = __atomic_exchange_n(&c->auth_token, token, __ATOMIC_ACQ_REL);
    c->retired[c->n_retired++] = old; /* a request may still be reading it */
    __atomic_store_n(&c->body_max, fresh->body_max, __ATOMIC_RELAXED);
    __atomic_store_n(&c->import_max, fresh->import_max, __ATOMIC_RELAXED);
    __atomic_store_n(&c->message_max, fresh->message_max, __ATOMIC_RELAXED);
    __atomic_store_n(&c->max_sessions, fresh->max_sessions, __ATOMIC_RELAXED);
    __atomic_store_n(&c->session_queue_max, fresh->session_queue_max, __ATOMIC_RELAXED);
    __atomic_store_n(&c->idle_timeout_ms, fresh->idle_timeout_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&c->sse_queue_bytes, fresh->sse_queue_bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&c->imports_running, fresh->imports_running, __ATOMIC_RELAXED);
    __atomic_store_n(&c->lg_metadata_max, fresh->lg_metadata_max, __ATOMIC_RELAXED);
    __atomic_store_n(&c->lg_runs_bytes, fresh->lg_runs_bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&c->resident_sessions, fresh->resident_sessions, __ATOMIC_RELAXED);
    __atomic_store_n(&c->resident_bytes, fresh->resident_bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&c->sessions_idle_ms, fresh->sessions_idle_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&c->user_sessions, fresh->user_sessions, __ATOMIC_RELAXED);
    __atomic_store_n(&c->user_running_effects, fresh->user_running_effects,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&c->user_rate, fresh->user_rate, __ATOMIC_RELAXED);
    return 0;
}

const char *config_auth_token(const struct config *c)
{
    return __atomic_load_n(&c->auth_token, __ATOMIC_ACQUIRE);
}

enum config_auth_mode config_auth_mode(const struct config *c)
{
    if (c->auth_mode != CONFIG_AUTH_DEFAULT)
        return c->auth_mode;
    return *config_auth_token(c) ? CONFIG_AUTH_TOKEN : CONFIG_AUTH_NONE;
}

const char *config_auth_mode_name(enum config_auth_mode m)
{
    switch (m) {
    case CONFIG_AUTH_TOKEN:
        return "token";
    case CONFIG_AUTH_KEYS:
        return "keys";
    case CONFIG_AUTH_TRUSTED_HEADER:
        return "trusted-header";
    default:
        return "none";
    }
}
