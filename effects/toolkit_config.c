/*
 * toolkit_config - the `tools` array of the config, read into the toolkit
 * (toolkit_add_from_config, declared in toolkit.h): command tools, and the
 * approval of a built-in tool. See toolkit.h for the format.
 *
 * It checks everything before it changes anything: a config with one bad
 * entry leaves the toolkit as it was, and the message names the field.
 */
#include "effects/toolkit.h"
#include "effects/toolkit_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "state_machine/rx_policy.h"

static bool name_is_valid(const char *s)
{
    size_t n = strlen(s);

    if (!n || n > TOOLKIT_NAME_MAX)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
            return false;
    return true;
}

/* A JSON string without embedded NULs, as C code will see it. */
static bool is_plain_string(json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

static int check_schema(json_t *p, size_t i, struct rx_error *err)
{
    json_t *type = json_object_get(p, "type"), *props = json_object_get(p, "properties");
    json_t *req = json_object_get(p, "required"), *v;
    size_t j;

    if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "object")))
        return rx_error_set(err, -EINVAL,
                            "tools[%zu].parameters.type: must be \"object\"", i);
    if (props && !json_is_object(props))
        return rx_error_set(err, -EINVAL,
                            "tools[%zu].parameters.properties: must be an object", i);
    if (req && !json_is_array(req))
        return rx_error_set(
            err, -EINVAL, "tools[%zu].parameters.required: must be an array of names", i);
    json_array_foreach(req, j, v)
    {
        if (!json_is_string(v))
            return rx_error_set(err, -EINVAL,
                                "tools[%zu].parameters.required[%zu]: must be a string",
                                i, j);
    }
    return 0;
}

static int parse_int_field(json_t *o, const char *key, json_int_t max, json_int_t dflt,
                           size_t i, struct rx_error *err, json_int_t *out)
{
    json_t *v = json_object_get(o, key);

    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max)
        return rx_error_set(err, -EINVAL,
                            "tools[%zu].%s: must be an integer from 1 to %lld", i, key,
                            (long long)max);
    *out = json_integer_value(v);
    return 0;
}

static int parse_command(json_t *cmd, size_t i, struct tool *t, struct rx_error *err)
{
    json_t *v;
    size_t j;

    if (!json_is_array(cmd) || !json_array_size(cmd))
        return rx_error_set(
            err, -EINVAL, "tools[%zu].command: must be a non-empty array of strings", i);
    json_array_foreach(cmd, j, v)
    {
        if (!is_plain_string(v) || (j == 0 && !json_string_length(v)))
            return rx_error_set(err, -EINVAL,
                                "tools[%zu].command[%zu]: must be a %sstring", i, j,
                                j ? "" : "non-empty ");
    }
    v = json_array_get(cmd, 0);
    /* Catch a typo at startup rather than at the first call. */
    if (strchr(json_string_value(v), '/') && access(json_string_value(v), X_OK))
        return rx_error_set(err, -EINVAL,
                            "tools[%zu].command[0]: '%s' is not executable (%s)", i,
                            json_string_value(v), strerror(errno));
    t->cmd.argv = calloc(json_array_size(cmd) + 1, sizeof(*t->cmd.argv));
    if (!t->cmd.argv)
        return -ENOMEM;
    json_array_foreach(cmd, j, v)
    {
        t->cmd.argv[j] = strdup(json_string_value(v));
        if (!t->cmd.argv[j])
            return -ENOMEM;
    }
    return 0;
}

/* Fill t from tools[i]; on failure the caller releases t. */
static int parse_tool(json_t *o, size_t i, struct tool *t, struct rx_error *err)
{
    json_t *name = json_object_get(o, "name"), *desc = json_object_get(o, "description");
    json_t *params = json_object_get(o, "parameters");
    json_int_t timeout, output;
    int rc;

    static const char *const keys[] = {"name",     "description", "parameters",
                                       "command",  "timeout_ms",  "max_output_bytes",
                                       "approval", "idempotent",  NULL};
    json_t *approval = json_object_get(o, "approval");
    json_t *idem = json_object_get(o, "idempotent");
    const char *key;
    json_t *v;

    t->kind = TOOL_COMMAND;
    t->policy = "auto";
    if (!json_is_object(o))
        return rx_error_set(err, -EINVAL, "tools[%zu]: must be an object", i);
    json_object_foreach(o, key, v)
    {
        const char *const *k = keys;

        while (*k && strcmp(*k, key))
            k++;
        if (!*k)
            return rx_error_set(err, -EINVAL, "tools[%zu].%s: unknown key", i, key);
    }
    if (approval) {
        enum rx_policy p;

        if (rx_policy_parse(json_string_value(approval), &p))
            return rx_error_set(
                err, -EINVAL,
                "tools[%zu].approval: must be \"auto\", \"ask\" or \"deny\"", i);
        t->policy = rx_policy_name(p);
    }
    if (!is_plain_string(name) || !name_is_valid(json_string_value(name)))
        return rx_error_set(
            err, -EINVAL, "tools[%zu].name: must be 1 to %d letters, digits, '_' or '-'",
            i, TOOLKIT_NAME_MAX);
    if (desc && !is_plain_string(desc))
        return rx_error_set(err, -EINVAL, "tools[%zu].description: must be a string", i);
    if (params && !json_is_object(params))
        return rx_error_set(err, -EINVAL,
                            "tools[%zu].parameters: must be a JSON Schema object", i);
    if (params && (rc = check_schema(params, i, err)))
        return rc;
    if ((rc = parse_int_field(o, "timeout_ms", TOOLKIT_TIMEOUT_MAX_MS,
                              TOOLKIT_TIMEOUT_DEFAULT_MS, i, err, &timeout)) ||
        (rc = parse_int_field(o, "max_output_bytes", TOOLKIT_OUTPUT_MAX,
                              TOOLKIT_OUTPUT_DEFAULT, i, err, &output)))
        return rc;
    if (idem && !json_is_boolean(idem))
        return rx_error_set(err, -EINVAL, "tools[%zu].idempotent: must be true or false",
                            i);
    t->cmd.timeout_ms = (int)timeout;
    t->cmd.output_max = (size_t)output;
    t->cmd.idempotent = json_is_true(idem);
    if ((rc = parse_command(json_object_get(o, "command"), i, t, err)))
        return rc;
    t->name = strdup(json_string_value(name));
    t->description = strdup(desc ? json_string_value(desc) : "");
    /* A copy, so that the config may change or go without touching us. */
    t->parameters = params ? json_deep_copy(params)
                           : json_pack("{s:s, s:{}}", "type", "object", "properties");
    if (!t->name || !t->description || !t->parameters)
        return -ENOMEM;
    return 0;
}

/* An entry that only sets the approval of a built-in tool: {"name": "calculator",
   "approval": "ask"}. The built-in's index, or -1 when `o` is not one. */
static long builtin_override(const struct toolkit *tk, json_t *o)
{
    const char *name = json_string_value(json_object_get(o, "name"));

    if (!json_is_object(o) || json_object_get(o, "command") || !name)
        return -1;
    for (size_t i = 0; i < tk->len; i++)
        if (tk->items[i].kind != TOOL_COMMAND && !strcmp(tk->items[i].name, name))
            return (long)i;
    return -1;
}

static int parse_override(json_t *o, size_t i, const char **policy, struct rx_error *err)
{
    enum rx_policy p;
    int bad = rx_policy_parse(json_string_value(json_object_get(o, "approval")), &p);
    const char *key;
    json_t *v;

    json_object_foreach(o, key, v)
    {
        if (strcmp(key, "name") && strcmp(key, "approval"))
            return rx_error_set(err, -EINVAL,
                                "tools[%zu].%s: a built-in tool takes only \"approval\"",
                                i, key);
    }
    if (bad)
        return rx_error_set(err, -EINVAL,
                            "tools[%zu].approval: must be \"auto\", \"ask\" or \"deny\"",
                            i);
    *policy = rx_policy_name(p);
    return 0;
}

int toolkit_add_from_config(struct toolkit *tk, json_t *tools, struct rx_error *err)
{
    size_t n = json_array_size(tools), used = 0;
    const char **policy_of = NULL; /* per entry: a built-in's new approval, or NULL */
    struct tool *fresh = NULL;
    int rc = 0;

    if (!tools)
        return 0;
    if (!json_is_array(tools))
        return rx_error_set(err, -EINVAL, "tools: must be an array");
    if (!n)
        return 0;
    fresh = calloc(n, sizeof(*fresh));
    policy_of = calloc(n, sizeof(*policy_of));
    if (!fresh || !policy_of || toolkit__reserve(tk, n)) {
        rc = rx_error_set(err, -ENOMEM, "tools: out of memory");
        goto out_free_fresh;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(tools, i);
        struct tool *t = &fresh[used];

        if (builtin_override(tk, o) >= 0) {
            if ((rc = parse_override(o, i, &policy_of[i], err)))
                goto out_free_fresh;
            continue;
        }
        used++; /* a half-parsed tool is released too */
        rc = parse_tool(o, i, t, err);
        if (rc == -ENOMEM)
            rx_error_set(err, rc, "tools[%zu]: out of memory", i);
        if (rc)
            goto out_free_fresh;
        for (size_t j = 0; j < used && !rc; j++)
            if (j + 1 < used ? !strcmp(fresh[j].name, t->name)
                             : toolkit__find_tool(tk, t->name) != NULL)
                rc = -EEXIST;
        if (rc) {
            rx_error_set(err, rc, "tools[%zu].name: duplicate tool '%s'", i, t->name);
            goto out_free_fresh;
        }
    }
    /* Every entry is valid: only now does the toolkit change (all or nothing). */
    for (size_t i = 0; i < n; i++)
        if (policy_of[i])
            tk->items[builtin_override(tk, json_array_get(tools, i))].policy =
                policy_of[i];
    memcpy(tk->items + tk->len, fresh, used * sizeof(*fresh));
    tk->len += used;
    used = 0;

out_free_fresh:
    for (size_t j = 0; j < used; j++)
        toolkit__tool_release(&fresh[j]);
    free(fresh);
    free(policy_of);
    return rc;
}
