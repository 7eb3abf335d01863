/*
 * mcp_config - the mcpServers block, checked whole. See mcp_config.h.
 */
#include "effects/mcp_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT_MAX_MS (3600 * 1000)

/* "auto" | "ask" | "deny", or UNSET for anything else (NULL included). */
static enum rx_policy policy_of(json_t *v)
{
    enum rx_policy p;

    return rx_policy_parse(json_string_value(v), &p) ? RX_POLICY_UNSET : p;
}

void mcp_config_entry_release(struct mcp_config_entry *e)
{
    mcp_server_config_release(&e->server);
    json_decref(e->entry);
    json_decref(e->include);
    json_decref(e->exclude);
    json_decref(e->tool_policies);
    json_decref(e->tool_idempotent);
    memset(e, 0, sizeof(*e));
}

void mcp_config_free(struct mcp_config_entry *entries, size_t n)
{
    for (size_t i = 0; i < n; i++)
        mcp_config_entry_release(&entries[i]);
    free(entries);
}

/* A JSON string without NULs, as C sees it. */
static bool is_plain_string(json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

static bool is_string_array(json_t *v)
{
    size_t i;
    json_t *x;

    if (!json_is_array(v))
        return false;
    json_array_foreach(v, i, x)
    {
        if (!is_plain_string(x))
            return false;
    }
    return true;
}

static bool is_string_object(json_t *v)
{
    const char *k;
    json_t *x;

    if (!json_is_object(v))
        return false;
    json_object_foreach(v, k, x)
    {
        if (!is_plain_string(x) || !*k || strchr(k, '='))
            return false;
    }
    return true;
}

static bool name_is_valid(const char *s, size_t n)
{
    if (!n || n > MCP_CONFIG_NAME_MAX || strlen(s) != n)
        return false;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == '"' || *s == '\\' || *s == 0x7f)
            return false;
    return true;
}

/* Check `v` against `allowed` keys: the first other one, or NULL. */
static const char *unknown_key(json_t *v, const char *const *allowed)
{
    const char *k;
    json_t *x;

    json_object_foreach(v, k, x)
    {
        const char *const *a = allowed;

        while (*a && strcmp(*a, k))
            a++;
        if (!*a)
            return k;
    }
    return NULL;
}

static int parse_tools(struct mcp_config_entry *e, const char *name, json_t *tools,
                       struct rx_error *err)
{
    static const char *const keys[] = {"include", "exclude", "approval", "idempotent",
                                       NULL};
    json_t *idem = json_object_get(tools, "idempotent");
    json_t *inc = json_object_get(tools, "include"),
           *exc = json_object_get(tools, "exclude");
    json_t *pol = json_object_get(tools, "approval"), *v;
    const char *k;

    if (!json_is_object(tools))
        return rx_error_set(err, -EINVAL, "mcpServers.%s.tools: must be an object", name);
    if ((k = unknown_key(tools, keys)))
        return rx_error_set(err, -EINVAL, "mcpServers.%s.tools.%s: unknown key", name, k);
    if ((inc && !is_string_array(inc)) || (exc && !is_string_array(exc)))
        return rx_error_set(err, -EINVAL,
                            "mcpServers.%s.tools.%s: must be an array of tool names",
                            name, inc && !is_string_array(inc) ? "include" : "exclude");
    if (pol && !json_is_object(pol))
        return rx_error_set(err, -EINVAL,
                            "mcpServers.%s.tools.approval: must be an object of tool "
                            "names to \"auto\", \"ask\" or \"deny\"",
                            name);
    json_object_foreach(pol, k, v)
    {
        if (policy_of(v) == RX_POLICY_UNSET)
            return rx_error_set(err, -EINVAL,
                                "mcpServers.%s.tools.approval.%s: must be \"auto\", "
                                "\"ask\" or \"deny\"",
                                name, k);
    }
    if (idem && !json_is_object(idem))
        return rx_error_set(err, -EINVAL,
                            "mcpServers.%s.tools.idempotent: must be an object of tool "
                            "names to true or false",
                            name);
    json_object_foreach(idem, k, v)
    {
        if (!json_is_boolean(v))
            return rx_error_set(
                err, -EINVAL, "mcpServers.%s.tools.idempotent.%s: must be true or false",
                name, k);
    }
    e->include = json_incref(inc);
    e->exclude = json_incref(exc);
    e->tool_policies = json_incref(pol);
    e->tool_idempotent = json_incref(idem);
    return 0;
}

/* argv = command + args; env = "NAME=value" strings. */
static int copy_stdio(struct mcp_server_config *c, json_t *cmd, json_t *args, json_t *env)
{
    size_t n = json_array_size(args), i = 0;
    const char *k;
    json_t *v;

    c->argv = calloc(n + 2, sizeof(*c->argv));
    c->env = calloc(json_object_size(env) + 1, sizeof(*c->env));
    if (!c->argv || !c->env || !(c->argv[0] = strdup(json_string_value(cmd))))
        return -ENOMEM;
    json_array_foreach(args, i, v)
    {
        if (!(c->argv[i + 1] = strdup(json_string_value(v))))
            return -ENOMEM;
    }
    i = 0;
    json_object_foreach(env, k, v)
    {
        if (asprintf(&c->env[i++], "%s=%s", k, json_string_value(v)) < 0) {
            c->env[i - 1] = NULL;
            return -ENOMEM;
        }
    }
    return 0;
}

/* The transport: `type` if given, else what command / url say. */
static int parse_transport(const char *name, json_t *o, enum mcp_transport *t,
                           struct rx_error *err)
{
    json_t *type = json_object_get(o, "type");
    bool cmd = json_object_get(o, "command"), url = json_object_get(o, "url");
    const char *ty = json_string_value(type);

    if (type && !ty)
        return rx_error_set(err, -EINVAL, "mcpServers.%s.type: must be a string", name);
    if (ty && !strcmp(ty, "sse"))
        return rx_error_set(err, -EINVAL,
                            "mcpServers.%s.type: the old HTTP+SSE transport is not "
                            "supported; use the server's Streamable HTTP endpoint",
                            name);
    if (ty && strcmp(ty, "stdio") && strcmp(ty, "http") && strcmp(ty, "streamable-http"))
        return rx_error_set(err, -EINVAL,
                            "mcpServers.%s.type: must be \"stdio\", \"http\" or "
                            "\"streamable-http\"",
                            name);
    if (cmd == url)
        return rx_error_set(err, -EINVAL,
                            "mcpServers.%s: needs either \"command\" (stdio) or \"url\" "
                            "(Streamable HTTP)",
                            name);
    *t = cmd ? MCP_STDIO : MCP_HTTP;
    if (ty && (*t == MCP_STDIO) != !strcmp(ty, "stdio"))
        return rx_error_set(err, -EINVAL,
                            "mcpServers.%s.type: \"%s\" does not go with \"%s\"", name,
                            ty, cmd ? "command" : "url");
    return 0;
}

static int parse_entry(const char *name, json_t *o, struct mcp_config_entry *e,
                       struct rx_error *err)
{
    static const char *const keys[] = {"type",       "command", "args",       "env",
                                       "url",        "headers", "timeout_ms", "approval",
                                       "idempotent", "tools",   NULL};
    json_t *idem = json_object_get(o, "idempotent");
    json_t *cmd = json_object_get(o, "command"), *args = json_object_get(o, "args");
    json_t *env = json_object_get(o, "env"), *url = json_object_get(o, "url");
    json_t *hdrs = json_object_get(o, "headers"), *to = json_object_get(o, "timeout_ms");
    json_t *appr = json_object_get(o, "approval"), *tools = json_object_get(o, "tools");
    struct mcp_server_config *c = &e->server;
    const char *k;
    int rc;

    if (!json_is_object(o))
        return rx_error_set(err, -EINVAL, "mcpServers.%s: must be an object", name);
    if ((k = unknown_key(o, keys)))
        return rx_error_set(err, -EINVAL, "mcpServers.%s.%s: unknown key", name, k);
    if ((rc = parse_transport(name, o, &c->transport, err)))
        return rc;
    if (cmd && (!is_plain_string(cmd) || !json_string_length(cmd)))
        return rx_error_set(err, -EINVAL,
                            "mcpServers.%s.command: must be a non-empty string", name);
    if (args && !is_string_array(args))
        return rx_error_set(err, -EINVAL,
                            "mcpServers.%s.args: must be an array of strings", name);
    if (env && !is_string_object(env))
        return rx_error_set(err, -EINVAL,
                            "mcpServers.%s.env: must be an object of names to strings",
                            name);
    if (c->transport == MCP_STDIO && (url || hdrs))
        return rx_error_set(err, -EINVAL, "mcpServers.%s.%s: only for a \"url\" server",
                            name, url ? "url" : "headers");
    if (c->transport == MCP_HTTP && (args || env))
        return rx_error_set(err, -EINVAL,
                            "mcpServers.%s.%s: only for a \"command\" server", name,
                            args ? "args" : "env");
    if (url &&
        (!is_plain_string(url) || (strncmp(json_string_value(url), "http://", 7) &&
                                   strncmp(json_string_value(url), "https://", 8))))
        return rx_error_set(
            err, -EINVAL, "mcpServers.%s.url: must be an http:// or https:// URL", name);
    if (hdrs && !is_string_object(hdrs))
        return rx_error_set(
            err, -EINVAL, "mcpServers.%s.headers: must be an object of names to strings",
            name);
    if (to && (!json_is_integer(to) || json_integer_value(to) < 1 ||
               json_integer_value(to) > TIMEOUT_MAX_MS))
        return rx_error_set(err, -EINVAL,
                            "mcpServers.%s.timeout_ms: must be an integer from 1 to %d",
                            name, TIMEOUT_MAX_MS);
    if (appr && policy_of(appr) == RX_POLICY_UNSET)
        return rx_error_set(
            err, -EINVAL, "mcpServers.%s.approval: must be \"auto\", \"ask\" or \"deny\"",
            name);
    if (idem && !json_is_boolean(idem))
        return rx_error_set(err, -EINVAL,
                            "mcpServers.%s.idempotent: must be true or false", name);
    if (tools && (rc = parse_tools(e, name, tools, err)))
        return rc;
    e->policy = policy_of(appr);
    e->idempotent = idem ? json_is_true(idem) : -1;
    c->timeout_ms = to ? (int)json_integer_value(to) : MCP_SERVER_TIMEOUT_DEFAULT_MS;
    if (!(c->name = strdup(name)) || !(e->entry = json_deep_copy(o)))
        return rx_error_set(err, -ENOMEM, "out of memory");
    if (c->transport == MCP_HTTP) {
        c->url = strdup(json_string_value(url));
        c->headers = hdrs ? json_deep_copy(hdrs) : NULL;
        if (!c->url || (hdrs && !c->headers))
            return rx_error_set(err, -ENOMEM, "out of memory");
        return 0;
    }
    if (copy_stdio(c, cmd, args, env))
        return rx_error_set(err, -ENOMEM, "out of memory");
    return 0;
}

int mcp_config_parse(json_t *servers, struct mcp_config_entry **entries, size_t *n,
                     struct rx_error *err)
{
    size_t count = json_object_size(servers), i = 0;
    struct mcp_config_entry *out;
    const char *name;
    json_t *o;
    int rc = 0;

    *entries = NULL;
    *n = 0;
    if (!servers)
        return 0;
    if (!json_is_object(servers))
        return rx_error_set(err, -EINVAL, "mcpServers: must be an object of servers");
    if (count > MCP_CONFIG_MAX_SERVERS)
        return rx_error_set(err, -EINVAL, "mcpServers: at most %d servers",
                            MCP_CONFIG_MAX_SERVERS);
    if (!count)
        return 0;
    out = calloc(count, sizeof(*out));
    if (!out)
        return rx_error_set(err, -ENOMEM, "out of memory");
    json_object_foreach(servers, name, o)
    {
        if (!name_is_valid(name, strlen(name)))
            rc = rx_error_set(err, -EINVAL,
                              "mcpServers: the name '%.80s' must be 1 to %d printable "
                              "characters without quotes",
                              name, MCP_CONFIG_NAME_MAX);
        else
            rc = parse_entry(name, o, &out[i++], err);
        if (rc)
            break;
    }
    if (rc) {
        mcp_config_free(out, count);
        return rc;
    }
    *entries = out;
    *n = count;
    return 0;
}

static bool in_list(json_t *list, const char *tool)
{
    size_t i;
    json_t *v;

    json_array_foreach(list, i, v)
    {
        if (!strcmp(json_string_value(v), tool))
            return true;
    }
    return false;
}

bool mcp_config_tool_wanted(const struct mcp_config_entry *e, const char *tool)
{
    if (e->include && !in_list(e->include, tool))
        return false;
    return !in_list(e->exclude, tool);
}

const char *mcp_config_policy(const struct mcp_config_entry *e, const char *tool,
                              json_t *annotations)
{
    enum rx_policy p = policy_of(json_object_get(e->tool_policies, tool));

    if (p == RX_POLICY_UNSET)
        p = e->policy;
    if (p == RX_POLICY_UNSET)
        p = json_is_true(json_object_get(annotations, "readOnlyHint")) ? RX_POLICY_AUTO
                                                                       : RX_POLICY_ASK;
    return rx_policy_name(p);
}

bool mcp_config_idempotent(const struct mcp_config_entry *e, const char *tool,
                           json_t *annotations)
{
    json_t *own = json_object_get(e->tool_idempotent, tool);

    if (own)
        return json_is_true(own);
    if (e->idempotent >= 0)
        return e->idempotent;
    return json_is_true(json_object_get(annotations, "readOnlyHint")) ||
           json_is_true(json_object_get(annotations, "idempotentHint"));
}
