/*
 * toolkit - the tool registry: declarations, lookup, dispatch (the config
 * is read by toolkit_config.c).
 * See toolkit.h.
 */
#include "effects/toolkit.h"
#include "effects/toolkit_internal.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/calculator.h"
#include "effects/mcp_config.h"
#include "effects/mcp_hub.h"
#include "effects/toolkit_clock.h"
#include "effects/toolkit_command.h"
#include "effects/toolkit_result.h"
#include "state_machine/rx_buf.h"
#include "state_machine/rx_json.h"

/* -------------------------------------------------------------- helpers */

/* --------------------------------------------------------------- registry */

void toolkit__tool_release(struct tool *t)
{
    free(t->name);
    free(t->description);
    json_decref(t->parameters);
    toolkit_command_release(&t->cmd);
    memset(t, 0, sizeof(*t));
}

struct toolkit *toolkit_create(void)
{
    struct toolkit *tk = calloc(1, sizeof(struct toolkit));

    if (tk)
        tk->result_max = TOOLKIT_RESULT_MAX_DEFAULT;
    if (tk)
        tk->mcp_tools_max = MCP_SERVER_TOOLS_MAX_DEFAULT;
    return tk;
}

void toolkit_destroy(struct toolkit *tk)
{
    if (!tk)
        return;
    mcp_hub_destroy(tk->mcp);
    for (size_t i = 0; i < tk->len; i++)
        toolkit__tool_release(&tk->items[i]);
    free(tk->items);
    free(tk);
}

const struct tool *toolkit__find_tool(const struct toolkit *tk, const char *name)
{
    for (size_t i = 0; i < tk->len; i++)
        if (!strcmp(tk->items[i].name, name))
            return &tk->items[i];
    return NULL;
}

size_t toolkit_count(const struct toolkit *tk)
{
    return tk->len;
}

bool toolkit_has(const struct toolkit *tk, const char *name)
{
    return name &&
           (toolkit__find_tool(tk, name) || (tk->mcp && mcp_hub_has(tk->mcp, name)));
}

int toolkit__reserve(struct toolkit *tk, size_t n)
{
    size_t cap = tk->cap ? tk->cap : 4;
    struct tool *items;

    if (tk->len + n <= tk->cap)
        return 0;
    while (cap < tk->len + n)
        cap *= 2;
    items = realloc(tk->items, cap * sizeof(*items));
    if (!items)
        return -ENOMEM;
    tk->items = items;
    tk->cap = cap;
    return 0;
}

static int add_builtin(struct toolkit *tk, enum tool_kind kind, const char *name,
                       const char *description, const char *schema)
{
    struct tool t = {.kind = kind, .policy = "auto"};

    t.name = strdup(name);
    t.description = strdup(description);
    if (rx_json_parse(schema, strlen(schema), 0, &t.parameters, NULL) || !t.name ||
        !t.description) {
        toolkit__tool_release(&t);
        return -ENOMEM;
    }
    tk->items[tk->len++] = t;
    return 0;
}

int toolkit_add_builtins(struct toolkit *tk)
{
    if (toolkit__find_tool(tk, "calculator") || toolkit__find_tool(tk, "clock"))
        return -EEXIST;
    if (toolkit__reserve(tk, 2))
        return -ENOMEM;
    if (add_builtin(tk, TOOL_CALCULATOR, "calculator",
                    "Evaluate an arithmetic expression exactly. Supports numbers, "
                    "+ - * / % ^ (power) and parentheses, e.g. \"12*(3+4)\".",
                    "{\"type\":\"object\",\"properties\":{\"expression\":{\"type\":"
                    "\"string\",\"description\":\"the expression, e.g. 2+3*4\"}},"
                    "\"required\":[\"expression\"]}"))
        return -ENOMEM;
    if (add_builtin(tk, TOOL_CLOCK, "clock", TOOLKIT_CLOCK_DESCRIPTION,
                    TOOLKIT_CLOCK_SCHEMA)) {
        toolkit__tool_release(&tk->items[--tk->len]);
        return -ENOMEM;
    }
    return 0;
}

const char *toolkit_policy(const struct toolkit *tk, const char *name)
{
    const struct tool *t = name ? toolkit__find_tool(tk, name) : NULL;

    if (t)
        return t->policy;
    if (name && tk->mcp)
        return mcp_hub_policy(tk->mcp, name);
    return "auto"; /* an unknown tool: let it run, and fail as unknown */
}

json_t *toolkit_schemas(const struct toolkit *tk)
{
    json_t *arr = json_array();

    if (!arr)
        return NULL;
    for (size_t i = 0; i < tk->len; i++) {
        const struct tool *t = &tk->items[i];

        /* A deep copy: the registry's values are shared by concurrent calls. */
        if (json_array_append_new(
                arr, json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "function", "function",
                               "name", t->name, "description", t->description,
                               "parameters", json_deep_copy(t->parameters)))) {
            json_decref(arr);
            return NULL;
        }
    }
    if (tk->mcp && mcp_hub_schemas(tk->mcp, arr)) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}

/* --------------------------------------------------------------------- MCP */

static bool toolkit_name_taken(void *ctx, const char *name)
{
    return toolkit__find_tool(ctx, name) != NULL;
}

int toolkit_add_mcp(struct toolkit *tk, json_t *servers, struct rx_error *err)
{
    if (tk->mcp)
        return rx_error_set(err, -EEXIST, "mcpServers: already added");
    return mcp_hub_create(servers, tk->mcp_tools_max, toolkit_name_taken, tk, &tk->mcp,
                          err);
}

int toolkit_reload_mcp(struct toolkit *tk, json_t *servers, struct rx_error *err)
{
    if (!tk->mcp)
        return toolkit_add_mcp(tk, servers, err);
    return mcp_hub_reload(tk->mcp, servers, tk->mcp_tools_max, err);
}

void toolkit_set_result_max(struct toolkit *tk, size_t max)
{
    tk->result_max = max;
}

void toolkit_set_mcp_tools_max(struct toolkit *tk, size_t max)
{
    tk->mcp_tools_max = max;
}

json_t *toolkit_describe(const struct toolkit *tk)
{
    json_t *tools = json_array(), *servers = json_array(), *out;
    int rc = !tools || !servers;

    for (size_t i = 0; i < tk->len && !rc; i++) {
        const struct tool *t = &tk->items[i];

        rc = json_array_append_new(
            tools, json_pack("{s:s, s:s, s:O, s:s, s:s, s:{}}", "name", t->name,
                             "description", t->description, "parameters", t->parameters,
                             "source", t->kind == TOOL_COMMAND ? "command" : "builtin",
                             "policy", t->policy, "annotations"));
    }
    if (!rc && tk->mcp)
        rc = mcp_hub_describe(tk->mcp, tools, servers);
    out = rc ? NULL : json_pack("{s:o, s:o}", "tools", tools, "servers", servers);
    if (rc) {
        json_decref(tools);
        json_decref(servers);
    }
    return out;
}

json_t *toolkit_mcp_servers(const struct toolkit *tk)
{
    json_t *servers = json_array();

    if (servers && tk->mcp && mcp_hub_describe(tk->mcp, NULL, servers)) {
        json_decref(servers);
        return NULL;
    }
    return servers;
}

int toolkit_metrics(const struct toolkit *tk, struct rx_buf *b)
{
    return tk->mcp ? mcp_hub_metrics(tk->mcp, b) : 0;
}

/* ------------------------------------------------------------- parameters */

static bool type_matches(json_t *v, const char *type)
{
    if (!strcmp(type, "string"))
        return json_is_string(v);
    if (!strcmp(type, "number"))
        return json_is_number(v);
    if (!strcmp(type, "integer"))
        return json_is_integer(v) ||
               (json_is_real(v) && fabs(json_real_value(v)) < 9e15 &&
                json_real_value(v) == trunc(json_real_value(v)));
    if (!strcmp(type, "boolean"))
        return json_is_boolean(v);
    if (!strcmp(type, "object"))
        return json_is_object(v);
    if (!strcmp(type, "array"))
        return json_is_array(v);
    if (!strcmp(type, "null"))
        return json_is_null(v);
    return true; /* a type we do not check is the program's business */
}

/*
 * Check the top level of the arguments against the tool's schema: required
 * names and the declared types. 0 and *args (NEW reference), or an error
 * result already set (return 1), or -ENOMEM.
 */
static int parse_params(const struct tool *t, const char *params, json_t **args,
                        char **result, bool *is_error)
{
    json_t *req = json_object_get(t->parameters, "required");
    json_t *props = json_object_get(t->parameters, "properties");
    const char *key;
    struct rx_error jerr;
    json_t *a, *v;
    size_t i;
    int rc;

    if (!params || !params[strspn(params, " \t\r\n")])
        params = "{}";
    if (strnlen(params, TOOLKIT_PARAMS_MAX + 1) > TOOLKIT_PARAMS_MAX) {
        rc = toolkit_result_errorf(result, is_error, "parameters longer than %u bytes",
                                   TOOLKIT_PARAMS_MAX);
        return rc ? rc : 1;
    }
    /* A log written before arguments were bounded may still hold deeper
       ones: the parser refuses them (no recursion on this small stack). */
    if ((rc = rx_json_parse(params, strlen(params), 0, &a, &jerr)) == -ENOMEM)
        return rc;
    if (rc) {
        rc = toolkit_result_errorf(result, is_error, "parameters are not valid JSON: %s",
                                   jerr.text);
        return rc ? rc : 1;
    }
    if (!json_is_object(a)) {
        json_decref(a);
        rc = toolkit_result_errorf(result, is_error, "parameters must be a JSON object");
        return rc ? rc : 1;
    }
    json_array_foreach(req, i, v)
    {
        if (json_is_string(v) && !json_object_get(a, json_string_value(v))) {
            rc = toolkit_result_errorf(result, is_error,
                                       "missing required parameter '%s' for '%s'",
                                       json_string_value(v), t->name);
            json_decref(a);
            return rc ? rc : 1;
        }
    }
    json_object_foreach(a, key, v)
    {
        json_t *type = json_object_get(json_object_get(props, key), "type");

        if (json_is_string(type) && !type_matches(v, json_string_value(type))) {
            rc = toolkit_result_errorf(result, is_error,
                                       "parameter '%s' must be of type %s", key,
                                       json_string_value(type));
            json_decref(a);
            return rc ? rc : 1;
        }
    }
    *args = a;
    return 0;
}

/* --------------------------------------------------------------- builtins */

static int run_calculator(json_t *args, char **result, bool *is_error)
{
    const char *expr = json_string_value(json_object_get(args, "expression"));
    struct rx_error err = {""};
    char out[CALCULATOR_FMT_LEN];
    double v;

    if (calculator_eval(expr, &v, &err))
        return toolkit_result_set(result, is_error, true, err.text, strlen(err.text));
    if (calculator_format(v, out, sizeof(out)))
        return toolkit_result_errorf(result, is_error, "result cannot be printed");
    return toolkit_result_set(result, is_error, false, out, strlen(out));
}

/* The arguments object, as JSON text, on the program's stdin. */
static int run_command(const struct tool *t, json_t *args, const char *key, int cancel_fd,
                       char **result, bool *is_error)
{
    char *input = json_dumps(args, JSON_COMPACT);
    int rc;

    if (!input)
        return -ENOMEM;
    rc = toolkit_command_run(&t->cmd, t->name, input, key, cancel_fd, result, is_error);
    free(input);
    return rc;
}

/* ------------------------------------------------------------------ calls */

/*
 * Past result_max, cut the text on a character boundary and say how much
 * was left out, so the model knows it did not see everything.
 */
static int cap_result(const struct toolkit *tk, char **result)
{
    size_t len = strlen(*result), keep = tk->result_max;
    char note[96], *cut;

    if (len <= keep)
        return 0;
    while (keep && ((unsigned char)(*result)[keep] & 0xC0) == 0x80)
        keep--; /* never split a UTF-8 sequence */
    snprintf(note, sizeof(note), "\n[... cut: %zu of %zu bytes left out]", len - keep,
             len);
    cut = realloc(*result, keep + strlen(note) + 1);
    if (!cut)
        return -ENOMEM;
    memcpy(cut + keep, note, strlen(note) + 1);
    *result = cut;
    return 0;
}

/* An MCP tool: the arguments need only be a JSON object here; the server
   checks them against its own schema. */
static int run_mcp(const struct toolkit *tk, const char *name, const char *params,
                   const char *key, int cancel_fd, char **result, bool *is_error)
{
    static const struct tool any = {.name = (char *)"an MCP tool"};
    char *text = NULL;
    json_t *args;
    bool err = false;
    int rc;

    rc = parse_params(&any, params, &args, result, is_error);
    if (rc)
        return rc < 0 ? rc : 0;
    rc = mcp_hub_call(tk->mcp, name, args, key, cancel_fd, &text, &err);
    if (rc == -ENOENT) /* its server dropped it since */
        return toolkit_result_errorf(result, is_error, "the tool '%.64s' is gone", name);
    if (rc)
        return rc;
    rc = toolkit_result_set(result, is_error, err, text, strlen(text));
    free(text);
    return rc;
}

static int call_tool(const struct toolkit *tk, const char *name, const char *params_json,
                     const char *key, int cancel_fd, char **result, bool *is_error)
{
    const struct tool *t;
    json_t *args = NULL;
    int rc;

    if (toolkit_command_cancelled(cancel_fd))
        return -ECANCELED;
    t = name ? toolkit__find_tool(tk, name) : NULL;
    if (!t && name && tk->mcp && mcp_hub_has(tk->mcp, name))
        return run_mcp(tk, name, params_json, key, cancel_fd, result, is_error);
    if (!t) {
        struct rx_buf names;

        rx_buf_init(&names, RX_BUF_SMALL_MAX);
        rc = 0;
        for (size_t i = 0; i < tk->len && !rc; i++)
            rc = rx_buf_puts(&names, i ? ", " : "") ||
                 rx_buf_puts(&names, tk->items[i].name);
        if (!rc)
            rc = toolkit_result_errorf(
                result, is_error, "unknown tool '%.64s' (available: %s)",
                name ? name : "", names.data ? names.data : "none");
        rx_buf_release(&names);
        return rc ? -ENOMEM : 0;
    }
    rc = parse_params(t, params_json, &args, result, is_error);
    if (rc)
        return rc < 0 ? rc : 0;
    switch (t->kind) {
    case TOOL_CALCULATOR:
        rc = run_calculator(args, result, is_error);
        break;
    case TOOL_CLOCK:
        rc = toolkit_clock_run(args, result, is_error);
        break;
    case TOOL_COMMAND:
        rc = run_command(t, args, key, cancel_fd, result, is_error);
        break;
    }
    json_decref(args);
    return rc;
}

bool toolkit_is_idempotent(const struct toolkit *tk, const char *name)
{
    const struct tool *t = name ? toolkit__find_tool(tk, name) : NULL;

    if (t)
        return t->kind != TOOL_COMMAND || t->cmd.idempotent;
    return name && tk->mcp && mcp_hub_idempotent(tk->mcp, name);
}

bool toolkit_knows(const struct toolkit *tk, const char *name)
{
    return name &&
           (toolkit__find_tool(tk, name) || (tk->mcp && mcp_hub_has(tk->mcp, name)));
}

int toolkit_call(const struct toolkit *tk, const char *name, const char *params_json,
                 const char *key, int cancel_fd, char **result, bool *is_error)
{
    int rc = call_tool(tk, name, params_json, key, cancel_fd, result, is_error);

    if (!rc && cap_result(tk, result)) {
        free(*result);
        *result = NULL;
        return -ENOMEM;
    }
    return rc;
}
