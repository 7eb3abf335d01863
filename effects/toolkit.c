/*
 * toolkit - tool registry and runners. See toolkit.h.
 */
#include "effects/toolkit.h"
#include "effects/now.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "effects/calculator.h"
#include "state_machine/rx_buf.h"

enum tool_kind { TOOL_CALCULATOR, TOOL_CLOCK, TOOL_COMMAND };

struct tool {
    enum tool_kind kind;
    char *name;
    char *description;
    json_t *parameters; /* owned; read-only once added, so calls may share it */
    char **argv;        /* TOOL_COMMAND: NULL-terminated, owned */
    int timeout_ms;
    size_t output_max;
};

struct toolkit {
    struct tool *items;
    size_t len, cap;
};

/* Largest read from a child's pipe at a time. */
#define READ_CHUNK 16384
/* Longest wait between checks of a child that closed its pipes but lives on. */
#define REAP_POLL_MAX_MS 50

/* ---------------------------------------------------------------- strings */

static const char *errno_text(int e, char *buf, size_t size)
{
    /* _GNU_SOURCE gives the GNU strerror_r, which may ignore buf. */
    return strerror_r(e, buf, size);
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when invalid. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    uint32_t cp;
    size_t len;

    if (s[0] < 0x80)
        return s[0] ? 1 : 0; /* a NUL would cut the C string short */
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2, cp = s[0] & 0x1f;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3, cp = s[0] & 0x0f;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4, cp = s[0] & 0x07;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    /* Overlong forms, surrogates and code points past Unicode. */
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/*
 * A malloc'd copy of n bytes with invalid UTF-8 and NULs replaced by U+FFFD,
 * so tool output can go into JSON strings whatever the program printed.
 */
static char *utf8_clean(const char *s, size_t n)
{
    static const char replacement[] = "\xef\xbf\xbd";
    const unsigned char *u = (const unsigned char *)s;
    size_t cap = 1, len = 0;
    char *d;

    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq_len(u + i, n - i);

        cap += l ? l : 3;
        i += l ? l : 1;
    }
    d = malloc(cap);
    if (!d)
        return NULL;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq_len(u + i, n - i);

        if (l) {
            memcpy(d + len, s + i, l);
            len += l;
            i += l;
        } else {
            memcpy(d + len, replacement, 3);
            len += 3;
            i++;
        }
    }
    d[len] = '\0';
    return d;
}

/* Hand a result to the caller: 0, or -ENOMEM with the outputs untouched. */
static int set_output(char **result, bool *is_error, bool error, const char *text,
                      size_t n)
{
    char *d = utf8_clean(text, n);

    if (!d)
        return -ENOMEM;
    *result = d;
    *is_error = error;
    return 0;
}

static __attribute__((format(printf, 3, 4))) int set_error(char **result, bool *is_error,
                                                           const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -ENOMEM;
    return set_output(result, is_error, true, buf,
                      (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* --------------------------------------------------------------- registry */

static void tool_release(struct tool *t)
{
    free(t->name);
    free(t->description);
    json_decref(t->parameters);
    if (t->argv) {
        for (char **a = t->argv; *a; a++)
            free(*a);
        free(t->argv);
    }
    memset(t, 0, sizeof(*t));
}

struct toolkit *toolkit_create(void)
{
    return calloc(1, sizeof(struct toolkit));
}

void toolkit_destroy(struct toolkit *tk)
{
    if (!tk)
        return;
    for (size_t i = 0; i < tk->len; i++)
        tool_release(&tk->items[i]);
    free(tk->items);
    free(tk);
}

static const struct tool *find_tool(const struct toolkit *tk, const char *name)
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
    return name && find_tool(tk, name);
}

/* Make room for n more tools: 0 or -ENOMEM, nothing changed on failure. */
static int reserve(struct toolkit *tk, size_t n)
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
    struct tool t = {.kind = kind};

    t.name = strdup(name);
    t.description = strdup(description);
    t.parameters = json_loads(schema, 0, NULL);
    if (!t.name || !t.description || !t.parameters) {
        tool_release(&t);
        return -ENOMEM;
    }
    tk->items[tk->len++] = t;
    return 0;
}

int toolkit_add_builtins(struct toolkit *tk)
{
    if (find_tool(tk, "calculator") || find_tool(tk, "clock"))
        return -EEXIST;
    if (reserve(tk, 2))
        return -ENOMEM;
    if (add_builtin(tk, TOOL_CALCULATOR, "calculator",
                    "Evaluate an arithmetic expression exactly. Supports numbers, "
                    "+ - * / % ^ (power) and parentheses, e.g. \"12*(3+4)\".",
                    "{\"type\":\"object\",\"properties\":{\"expression\":{\"type\":"
                    "\"string\",\"description\":\"the expression, e.g. 2+3*4\"}},"
                    "\"required\":[\"expression\"]}"))
        return -ENOMEM;
    if (add_builtin(tk, TOOL_CLOCK, "clock",
                    "Current date and time: ISO-8601 and milliseconds since the "
                    "Unix epoch. Optional timezone: UTC or an offset like +02:00.",
                    "{\"type\":\"object\",\"properties\":{\"timezone\":{\"type\":"
                    "\"string\",\"description\":\"UTC (default) or an offset such as "
                    "+02:00 or -0530\"}}}")) {
        tool_release(&tk->items[--tk->len]);
        return -ENOMEM;
    }
    return 0;
}

/* ----------------------------------------------------------------- config */

static __attribute__((format(printf, 2, 3))) void config_error(char *err, const char *fmt,
                                                               ...)
{
    va_list ap;

    if (!err)
        return;
    va_start(ap, fmt);
    vsnprintf(err, TOOLKIT_ERR_LEN, fmt, ap);
    va_end(ap);
}

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

static int check_schema(json_t *p, size_t i, char *err)
{
    json_t *type = json_object_get(p, "type"), *props = json_object_get(p, "properties");
    json_t *req = json_object_get(p, "required"), *v;
    size_t j;

    if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "object"))) {
        config_error(err, "tools[%zu].parameters.type: must be \"object\"", i);
        return -EINVAL;
    }
    if (props && !json_is_object(props)) {
        config_error(err, "tools[%zu].parameters.properties: must be an object", i);
        return -EINVAL;
    }
    if (req && !json_is_array(req)) {
        config_error(err, "tools[%zu].parameters.required: must be an array of names", i);
        return -EINVAL;
    }
    json_array_foreach(req, j, v)
    {
        if (!json_is_string(v)) {
            config_error(err, "tools[%zu].parameters.required[%zu]: must be a string", i,
                         j);
            return -EINVAL;
        }
    }
    return 0;
}

static int parse_int_field(json_t *o, const char *key, json_int_t max, json_int_t dflt,
                           size_t i, char *err, json_int_t *out)
{
    json_t *v = json_object_get(o, key);

    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max) {
        config_error(err, "tools[%zu].%s: must be an integer from 1 to %lld", i, key,
                     (long long)max);
        return -EINVAL;
    }
    *out = json_integer_value(v);
    return 0;
}

static int parse_command(json_t *cmd, size_t i, struct tool *t, char *err)
{
    char ebuf[128];
    json_t *v;
    size_t j;

    if (!json_is_array(cmd) || !json_array_size(cmd)) {
        config_error(err, "tools[%zu].command: must be a non-empty array of strings", i);
        return -EINVAL;
    }
    json_array_foreach(cmd, j, v)
    {
        if (!is_plain_string(v) || (j == 0 && !json_string_length(v))) {
            config_error(err, "tools[%zu].command[%zu]: must be a %sstring", i, j,
                         j ? "" : "non-empty ");
            return -EINVAL;
        }
    }
    v = json_array_get(cmd, 0);
    /* Catch a typo at startup rather than at the first call. */
    if (strchr(json_string_value(v), '/') && access(json_string_value(v), X_OK)) {
        config_error(err, "tools[%zu].command[0]: '%s' is not executable (%s)", i,
                     json_string_value(v), errno_text(errno, ebuf, sizeof(ebuf)));
        return -EINVAL;
    }
    t->argv = calloc(json_array_size(cmd) + 1, sizeof(*t->argv));
    if (!t->argv)
        return -ENOMEM;
    json_array_foreach(cmd, j, v)
    {
        t->argv[j] = strdup(json_string_value(v));
        if (!t->argv[j])
            return -ENOMEM;
    }
    return 0;
}

/* Fill t from tools[i]; on failure the caller releases t. */
static int parse_tool(json_t *o, size_t i, struct tool *t, char *err)
{
    json_t *name = json_object_get(o, "name"), *desc = json_object_get(o, "description");
    json_t *params = json_object_get(o, "parameters");
    json_int_t timeout, output;
    int rc;

    t->kind = TOOL_COMMAND;
    if (!json_is_object(o)) {
        config_error(err, "tools[%zu]: must be an object", i);
        return -EINVAL;
    }
    if (!is_plain_string(name) || !name_is_valid(json_string_value(name))) {
        config_error(err, "tools[%zu].name: must be 1 to %d letters, digits, '_' or '-'",
                     i, TOOLKIT_NAME_MAX);
        return -EINVAL;
    }
    if (desc && !is_plain_string(desc)) {
        config_error(err, "tools[%zu].description: must be a string", i);
        return -EINVAL;
    }
    if (params && !json_is_object(params)) {
        config_error(err, "tools[%zu].parameters: must be a JSON Schema object", i);
        return -EINVAL;
    }
    if (params && (rc = check_schema(params, i, err)))
        return rc;
    if ((rc = parse_int_field(o, "timeout_ms", TOOLKIT_TIMEOUT_MAX_MS,
                              TOOLKIT_TIMEOUT_DEFAULT_MS, i, err, &timeout)) ||
        (rc = parse_int_field(o, "max_output_bytes", TOOLKIT_OUTPUT_MAX,
                              TOOLKIT_OUTPUT_DEFAULT, i, err, &output)))
        return rc;
    t->timeout_ms = (int)timeout;
    t->output_max = (size_t)output;
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

int toolkit_add_from_config(struct toolkit *tk, json_t *tools, char *err)
{
    size_t n = json_array_size(tools), used = 0;
    struct tool *fresh = NULL;
    int rc = 0;

    if (!tools)
        return 0;
    if (!json_is_array(tools)) {
        config_error(err, "tools: must be an array");
        return -EINVAL;
    }
    if (!n)
        return 0;
    fresh = calloc(n, sizeof(*fresh));
    if (!fresh || reserve(tk, n)) {
        config_error(err, "tools: out of memory");
        rc = -ENOMEM;
        goto out_free_fresh;
    }
    for (size_t i = 0; i < n; i++) {
        used = i + 1; /* a half-parsed tool is released too */
        rc = parse_tool(json_array_get(tools, i), i, &fresh[i], err);
        if (rc == -ENOMEM)
            config_error(err, "tools[%zu]: out of memory", i);
        if (rc)
            goto out_free_fresh;
        for (size_t j = 0; j <= i && !rc; j++)
            if (j < i ? !strcmp(fresh[j].name, fresh[i].name)
                      : find_tool(tk, fresh[i].name) != NULL)
                rc = -EEXIST;
        if (rc) {
            config_error(err, "tools[%zu].name: duplicate tool '%s'", i, fresh[i].name);
            goto out_free_fresh;
        }
    }
    /* Every tool is valid: only now does the toolkit change (all or nothing). */
    memcpy(tk->items + tk->len, fresh, n * sizeof(*fresh));
    tk->len += n;
    used = 0;

out_free_fresh:
    for (size_t j = 0; j < used; j++)
        tool_release(&fresh[j]);
    free(fresh);
    return rc;
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
    return arr;
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
    json_error_t jerr;
    json_t *a, *v;
    size_t i;
    int rc;

    if (!params || !params[strspn(params, " \t\r\n")])
        params = "{}";
    if (strnlen(params, TOOLKIT_PARAMS_MAX + 1) > TOOLKIT_PARAMS_MAX) {
        rc = set_error(result, is_error, "parameters longer than %u bytes",
                       TOOLKIT_PARAMS_MAX);
        return rc ? rc : 1;
    }
    a = json_loads(params, 0, &jerr);
    if (!a) {
        rc = set_error(result, is_error, "parameters are not valid JSON: %s", jerr.text);
        return rc ? rc : 1;
    }
    if (!json_is_object(a)) {
        json_decref(a);
        rc = set_error(result, is_error, "parameters must be a JSON object");
        return rc ? rc : 1;
    }
    json_array_foreach(req, i, v)
    {
        if (json_is_string(v) && !json_object_get(a, json_string_value(v))) {
            rc = set_error(result, is_error, "missing required parameter '%s' for '%s'",
                           json_string_value(v), t->name);
            json_decref(a);
            return rc ? rc : 1;
        }
    }
    json_object_foreach(a, key, v)
    {
        json_t *type = json_object_get(json_object_get(props, key), "type");

        if (json_is_string(type) && !type_matches(v, json_string_value(type))) {
            rc = set_error(result, is_error, "parameter '%s' must be of type %s", key,
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
    char err[CALCULATOR_ERR_LEN], out[CALCULATOR_FMT_LEN];
    const char *expr = json_string_value(json_object_get(args, "expression"));
    double v;

    if (calculator_eval(expr, &v, err))
        return set_output(result, is_error, true, err, strlen(err));
    if (calculator_format(v, out, sizeof(out)))
        return set_error(result, is_error, "result cannot be printed");
    return set_output(result, is_error, false, out, strlen(out));
}

/* "UTC", "Z", "GMT", or an offset "+02:00" / "-0530" / "+2", maybe after UTC/GMT. */
static int parse_timezone(const char *tz, int *offset_min)
{
    int sign, h = 0, m = 0, n = 0;

    if (!strncasecmp(tz, "UTC", 3) || !strncasecmp(tz, "GMT", 3))
        tz += 3;
    else if (!strcasecmp(tz, "Z"))
        tz++;
    if (!*tz) {
        *offset_min = 0;
        return 0;
    }
    if (*tz != '+' && *tz != '-')
        return -EINVAL;
    sign = *tz++ == '-' ? -1 : 1;
    while (*tz >= '0' && *tz <= '9' && n < 2)
        h = h * 10 + (*tz++ - '0'), n++;
    if (!n)
        return -EINVAL;
    if (*tz == ':')
        tz++;
    if (*tz) {
        if (!(tz[0] >= '0' && tz[0] <= '5' && tz[1] >= '0' && tz[1] <= '9' && !tz[2]))
            return -EINVAL;
        m = (tz[0] - '0') * 10 + (tz[1] - '0');
    }
    if (h > 14 || (h == 14 && m))
        return -EINVAL;
    *offset_min = sign * (h * 60 + m);
    return 0;
}

static int run_clock(json_t *args, char **result, bool *is_error)
{
    const char *tz = json_string_value(json_object_get(args, "timezone"));
    char iso[64], label[16];
    struct timespec ts;
    struct tm tm;
    int64_t ms;
    time_t t;
    int off = 0, rc;
    char *text;
    json_t *o;

    if (tz && parse_timezone(tz, &off))
        return set_error(
            result, is_error,
            "unsupported timezone '%.64s' (use UTC or an offset like +02:00)", tz);
    clock_gettime(CLOCK_REALTIME, &ts);
    ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    t = (time_t)(ts.tv_sec + off * 60);
    if (!gmtime_r(&t, &tm))
        return set_error(result, is_error, "the system clock is out of range");
    if (off)
        snprintf(label, sizeof(label), "%c%02d:%02d", off < 0 ? '-' : '+', abs(off) / 60,
                 abs(off) % 60);
    else
        snprintf(label, sizeof(label), "UTC");
    snprintf(iso, sizeof(iso), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)(ts.tv_nsec / 1000000));
    if (off) /* replace the Z by the offset */
        snprintf(iso + strlen(iso) - 1, sizeof(iso) - strlen(iso) + 1, "%s", label);
    o = json_pack("{s:s, s:I, s:s}", "iso", iso, "epoch_ms", (json_int_t)ms, "timezone",
                  label);
    text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text)
        return -ENOMEM;
    rc = set_output(result, is_error, false, text, strlen(text));
    free(text);
    return rc;
}

/* --------------------------------------------------------- command tools */

static bool fd_is_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};

    return fd >= 0 && poll(&p, 1, 0) > 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Kill the child's whole group (it may have children of its own) and reap it. */
static void kill_and_reap(pid_t pid)
{
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL); /* in case it left its group */
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* The running child and our ends of its pipes. */
struct child {
    pid_t pid;
    int in, out, err; /* -1 once closed */
    const char *input;
    size_t input_len, written;
    struct rx_buf stdout_buf;
    char stderr_head[TOOLKIT_STDERR_MAX];
    size_t stderr_len;
    bool overflow;
};

/*
 * Find the program ourselves rather than trusting posix_spawnp to report a
 * failed exec: some spawn implementations (and valgrind) only show it as
 * exit status 127. 0 and a path in buf, or a positive errno.
 */
static int resolve_program(const char *prog, char *buf, size_t size)
{
    const char *dirs = getenv("PATH"), *end;
    int e = ENOENT;

    if (strchr(prog, '/')) {
        if (access(prog, X_OK))
            return errno;
        snprintf(buf, size, "%s", prog);
        return 0;
    }
    for (dirs = dirs ? dirs : "/usr/local/bin:/usr/bin:/bin"; *dirs; dirs = end) {
        size_t n;

        end = strchr(dirs, ':');
        end = end ? end : dirs + strlen(dirs);
        n = (size_t)(end - dirs);
        if (*end)
            end++;
        if (n + 1 + strlen(prog) >= size)
            continue;
        snprintf(buf, size, "%.*s%s%s", (int)n, dirs, n ? "/" : "", prog);
        if (!access(buf, X_OK))
            return 0;
        if (errno == EACCES)
            e = EACCES;
    }
    return e;
}

static int spawn_child(const struct tool *t, const char *path, struct child *c,
                       int *spawn_errno)
{
    static const int defaulted[] = {SIGPIPE, SIGINT,  SIGTERM, SIGHUP,  SIGQUIT,
                                    SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM, SIGTSTP};
    int sv[2] = {-1, -1}, outp[2] = {-1, -1}, errp[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, dflt;
    int rc = -ENOMEM;

    /*
     * stdin is a socket, not a pipe, so that writing to a child that exits
     * early can use MSG_NOSIGNAL instead of raising SIGPIPE in the server.
     * Everything is close-on-exec: concurrent spawns must not inherit it.
     */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) ||
        pipe2(outp, O_CLOEXEC) || pipe2(errp, O_CLOEXEC)) {
        /* Out of descriptors is the tool's failure to report, not ours. */
        *spawn_errno = errno;
        rc = 0;
        goto out_close_fds;
    }
    if (posix_spawn_file_actions_init(&fa))
        goto out_close_fds;
    if (posix_spawnattr_init(&attr))
        goto out_destroy_actions;
    sigemptyset(&none);
    sigemptyset(&dflt);
    for (size_t i = 0; i < sizeof(defaulted) / sizeof(defaulted[0]); i++)
        sigaddset(&dflt, defaulted[i]);
    /* Own process group (so a kill reaches grandchildren), clean signals. */
    if (posix_spawn_file_actions_adddup2(&fa, sv[1], 0) ||
        posix_spawn_file_actions_adddup2(&fa, outp[1], 1) ||
        posix_spawn_file_actions_adddup2(&fa, errp[1], 2) ||
        posix_spawnattr_setpgroup(&attr, 0) || posix_spawnattr_setsigmask(&attr, &none) ||
        posix_spawnattr_setsigdefault(&attr, &dflt) ||
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                            POSIX_SPAWN_SETSIGDEF))
        goto out_destroy_attr;
    *spawn_errno = posix_spawn(&c->pid, path, &fa, &attr, t->argv, environ);
    rc = 0;
    if (*spawn_errno)
        goto out_destroy_attr;
    c->in = sv[0], c->out = outp[0], c->err = errp[0];
    sv[0] = outp[0] = errp[0] = -1;
    fcntl(c->in, F_SETFL, O_NONBLOCK);
    fcntl(c->out, F_SETFL, O_NONBLOCK);
    fcntl(c->err, F_SETFL, O_NONBLOCK);

out_destroy_attr:
    posix_spawnattr_destroy(&attr);
out_destroy_actions:
    posix_spawn_file_actions_destroy(&fa);
out_close_fds:
    /* The child's ends always close here: EOF must reach us once it exits. */
    close_fd(&sv[0]), close_fd(&sv[1]);
    close_fd(&outp[0]), close_fd(&outp[1]);
    close_fd(&errp[0]), close_fd(&errp[1]);
    return rc;
}

static void feed_stdin(struct child *c)
{
    while (c->written < c->input_len) {
        ssize_t n = send(c->in, c->input + c->written, c->input_len - c->written,
                         MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0) {
            /* The program does not read its input (EPIPE): its choice. */
            close_fd(&c->in);
            return;
        }
        c->written += (size_t)n;
    }
    close_fd(&c->in); /* EOF tells the program the arguments are complete */
}

/* Read what is there. 0, or -E2BIG when stdout passed its bound. */
static int drain(struct child *c, int *fd, bool is_stdout)
{
    char buf[READ_CHUNK];

    for (;;) {
        ssize_t n = read(*fd, buf, sizeof(buf));

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0) {
            close_fd(fd);
            return 0;
        }
        if (is_stdout) {
            int rc = rx_buf_append(&c->stdout_buf, buf, (size_t)n);

            if (rc == -E2BIG)
                return -E2BIG;
            if (rc)
                return rc;
        } else if (c->stderr_len < sizeof(c->stderr_head)) {
            size_t k = sizeof(c->stderr_head) - c->stderr_len;

            k = k < (size_t)n ? k : (size_t)n;
            memcpy(c->stderr_head + c->stderr_len, buf, k);
            c->stderr_len += k;
        }
    }
}

/* The first non-empty line of stderr, trimmed to fit an error message. */
static void stderr_line(const struct child *c, char *out, size_t size)
{
    size_t start = 0, end;

    while (start < c->stderr_len &&
           (c->stderr_head[start] == '\n' || c->stderr_head[start] == '\r' ||
            c->stderr_head[start] == ' '))
        start++;
    for (end = start; end < c->stderr_len && c->stderr_head[end] != '\n' &&
                      c->stderr_head[end] != '\r';
         end++)
        ;
    if (end - start >= size)
        end = start + size - 1;
    memcpy(out, c->stderr_head + start, end - start);
    out[end - start] = '\0';
}

enum run_end { END_EXITED, END_TIMEOUT, END_CANCELLED, END_OVERFLOW, END_NOMEM };

/*
 * Pump the pipes until the child has exited and closed them, or until the
 * deadline, a cancel or too much output. The child is reaped in every case.
 */
static enum run_end supervise(struct child *c, int cancel_fd, int timeout_ms, int *status)
{
    int64_t deadline = now_mono_ms() + timeout_ms;
    int reap_wait = 1;

    for (;;) {
        struct pollfd p[4];
        int np = 0, wait_ms, rc;
        int64_t left = deadline - now_mono_ms();

        if (left <= 0) {
            kill_and_reap(c->pid);
            return END_TIMEOUT;
        }
        wait_ms = (int)left;
        if (c->out < 0 && c->err < 0) {
            pid_t r = waitpid(c->pid, status, WNOHANG);

            if (r == c->pid || (r < 0 && errno == ECHILD)) {
                if (r < 0)
                    *status = 0; /* reaped by someone else: SIGCHLD ignored */
                return END_EXITED;
            }
            /* Pipes closed but still running: look again soon, growing. */
            wait_ms = wait_ms < reap_wait ? wait_ms : reap_wait;
            reap_wait =
                reap_wait * 2 < REAP_POLL_MAX_MS ? reap_wait * 2 : REAP_POLL_MAX_MS;
        }
        if (c->in >= 0)
            p[np++] = (struct pollfd){.fd = c->in, .events = POLLOUT};
        if (c->out >= 0)
            p[np++] = (struct pollfd){.fd = c->out, .events = POLLIN};
        if (c->err >= 0)
            p[np++] = (struct pollfd){.fd = c->err, .events = POLLIN};
        if (cancel_fd >= 0)
            p[np++] = (struct pollfd){.fd = cancel_fd, .events = POLLIN};
        rc = poll(p, (nfds_t)np, wait_ms);
        if (rc < 0 && errno != EINTR) {
            kill_and_reap(c->pid);
            return END_NOMEM;
        }
        if (fd_is_readable(cancel_fd)) {
            kill_and_reap(c->pid);
            return END_CANCELLED;
        }
        if (c->in >= 0)
            feed_stdin(c);
        if (c->out >= 0) {
            rc = drain(c, &c->out, true);
            if (rc) {
                kill_and_reap(c->pid);
                return rc == -E2BIG ? END_OVERFLOW : END_NOMEM;
            }
        }
        if (c->err >= 0)
            (void)drain(c, &c->err, false);
    }
}

static int run_command(const struct tool *t, json_t *args, int cancel_fd, char **result,
                       bool *is_error)
{
    struct child c = {.pid = -1, .in = -1, .out = -1, .err = -1};
    char ebuf[128], line[200], path[4096];
    char *input = json_dumps(args, JSON_COMPACT);
    int spawn_errno = 0, status = 0, rc;
    enum run_end end;
    size_t len;

    if (!input)
        return -ENOMEM;
    c.input = input;
    c.input_len = strlen(input);
    rx_buf_init(&c.stdout_buf, t->output_max);
    spawn_errno = resolve_program(t->argv[0], path, sizeof(path));
    rc = spawn_errno ? 0 : spawn_child(t, path, &c, &spawn_errno);
    if (rc)
        goto out_free;
    if (spawn_errno) {
        rc = set_error(result, is_error, "cannot run '%s' for tool '%s': %s", t->argv[0],
                       t->name, errno_text(spawn_errno, ebuf, sizeof(ebuf)));
        goto out_free;
    }
    end = supervise(&c, cancel_fd, t->timeout_ms, &status);
    close_fd(&c.in), close_fd(&c.out), close_fd(&c.err);
    stderr_line(&c, line, sizeof(line));
    switch (end) {
    case END_CANCELLED:
        rc = -ECANCELED;
        break;
    case END_NOMEM:
        rc = -ENOMEM;
        break;
    case END_TIMEOUT:
        rc = set_error(result, is_error, "tool '%s' timed out after %d ms", t->name,
                       t->timeout_ms);
        break;
    case END_OVERFLOW:
        rc = set_error(result, is_error, "tool '%s' printed more than %zu bytes", t->name,
                       t->output_max);
        break;
    case END_EXITED:
        if (WIFSIGNALED(status)) {
            const char *sig = sigabbrev_np(WTERMSIG(status));

            rc = set_error(result, is_error, "tool '%s' was killed by signal %d (SIG%s)",
                           t->name, WTERMSIG(status), sig ? sig : "?");
        } else if (WEXITSTATUS(status)) {
            rc = set_error(result, is_error, "tool '%s' exited with status %d%s%s",
                           t->name, WEXITSTATUS(status), *line ? ": " : "", line);
        } else {
            /* One trailing newline is how programs end output, not content. */
            len = c.stdout_buf.len;
            if (len && c.stdout_buf.data[len - 1] == '\n')
                len--;
            if (len && c.stdout_buf.data[len - 1] == '\r')
                len--;
            rc = set_output(result, is_error, false, len ? c.stdout_buf.data : "", len);
        }
        break;
    }

out_free:
    rx_buf_release(&c.stdout_buf);
    free(input);
    return rc;
}

/* ------------------------------------------------------------------ calls */

int toolkit_call(const struct toolkit *tk, const char *name, const char *params_json,
                 int cancel_fd, char **result, bool *is_error)
{
    const struct tool *t;
    json_t *args = NULL;
    int rc;

    if (fd_is_readable(cancel_fd))
        return -ECANCELED;
    t = name ? find_tool(tk, name) : NULL;
    if (!t) {
        struct rx_buf names;

        rx_buf_init(&names, RX_BUF_SMALL_MAX);
        rc = 0;
        for (size_t i = 0; i < tk->len && !rc; i++)
            rc = rx_buf_puts(&names, i ? ", " : "") ||
                 rx_buf_puts(&names, tk->items[i].name);
        if (!rc)
            rc = set_error(result, is_error, "unknown tool '%.64s' (available: %s)",
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
        rc = run_clock(args, result, is_error);
        break;
    case TOOL_COMMAND:
        rc = run_command(t, args, cancel_fd, result, is_error);
        break;
    }
    json_decref(args);
    return rc;
}
