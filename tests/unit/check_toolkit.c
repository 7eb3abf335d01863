/*
 * check_toolkit - the tool registry and runners: built-ins, command tools
 * (fixtures in tests/data/tools/), config validation, cancellation, and that
 * no call leaves a zombie or a descriptor behind.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "effects/toolkit.h"
#include "effects/toolkit_clock.h"

Suite *toolkit_suite(void);

#define TOOLS "tests/data/tools/"

static struct toolkit *tk;

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* No child of ours is left, running or zombie. */
static void assert_no_children(void)
{
    errno = 0;
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
    ck_assert_int_eq(errno, ECHILD);
}

static void add_config(const char *json)
{
    struct rx_error err = {""};
    json_t *cfg = json_loads(json, 0, NULL);

    ck_assert_ptr_nonnull(cfg);
    ck_assert_msg(toolkit_add_from_config(tk, cfg, &err) == 0, "%s", err.text);
    json_decref(cfg);
}

static void setup(void)
{
    tk = toolkit_create();
    ck_assert_ptr_nonnull(tk);
    ck_assert_int_eq(toolkit_add_builtins(tk), 0);
    add_config("[{\"name\":\"echo\",\"description\":\"echo stdin\","
               " \"parameters\":{\"type\":\"object\",\"properties\":"
               "  {\"text\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}},"
               "  \"required\":[\"text\"]},"
               " \"command\":[\"" TOOLS "echo_stdin.sh\"]},"
               "{\"name\":\"cat\",\"command\":[\"/bin/cat\"]},"
               "{\"name\":\"fail\",\"command\":[\"" TOOLS "exit3.sh\"]},"
               "{\"name\":\"slow\",\"command\":[\"" TOOLS "close_stdout.sh\"],"
               " \"timeout_ms\":200},"
               "{\"name\":\"flood\",\"command\":[\"" TOOLS "too_much.sh\"],"
               " \"max_output_bytes\":1000},"
               "{\"name\":\"suicide\",\"command\":[\"" TOOLS "kill_self.sh\"]},"
               "{\"name\":\"deaf\",\"command\":[\"" TOOLS "ignore_stdin.sh\"]},"
               "{\"name\":\"binary\",\"command\":[\"" TOOLS "bad_utf8.sh\"]},"
               "{\"name\":\"pathed\",\"command\":[\"true\"]},"
               "{\"name\":\"missing\",\"command\":[\"no-such-program-rx\"]}]");
}

static void teardown(void)
{
    toolkit_destroy(tk);
    tk = NULL;
}

/* Call and expect 0; returns the malloc'd result. */
static char *call(const char *name, const char *params, bool want_error)
{
    char *result = NULL;
    bool is_error = !want_error;

    ck_assert_int_eq(toolkit_call(tk, name, params, NULL, -1, &result, &is_error), 0);
    ck_assert_ptr_nonnull(result);
    ck_assert_msg(is_error == want_error, "%s(%s): is_error=%d: %s", name,
                  params ? params : "NULL", is_error, result);
    return result;
}

static void expect(const char *name, const char *params, bool want_error,
                   const char *want_substring)
{
    char *r = call(name, params, want_error);

    ck_assert_msg(strstr(r, want_substring), "%s(%s) = \"%s\", want \"%s\"", name,
                  params ? params : "NULL", r, want_substring);
    free(r);
}

/* --------------------------------------------------------------- registry */

START_TEST(test_schemas)
{
    json_t *s = toolkit_schemas(tk), *f;

    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(json_array_size(s), toolkit_count(tk));
    f = json_object_get(json_array_get(s, 0), "function");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(s, 0), "type")),
                     "function");
    ck_assert_str_eq(json_string_value(json_object_get(f, "name")), "calculator");
    ck_assert(json_string_length(json_object_get(f, "description")) > 0);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(f, "parameters"), "type")),
        "object");
    f = json_object_get(json_array_get(s, 1), "function");
    ck_assert_str_eq(json_string_value(json_object_get(f, "name")), "clock");
    /* A config tool without parameters gets an empty object schema. */
    f = json_object_get(json_array_get(s, 3), "function");
    ck_assert_str_eq(json_string_value(json_object_get(f, "name")), "cat");
    ck_assert_str_eq(json_string_value(json_object_get(f, "description")), "");
    ck_assert(
        json_is_object(json_object_get(json_object_get(f, "parameters"), "properties")));
    json_decref(s);
    ck_assert(toolkit_has(tk, "echo"));
    ck_assert(!toolkit_has(tk, "nope"));
    ck_assert(!toolkit_has(tk, NULL));
    ck_assert_int_eq(toolkit_add_builtins(tk), -EEXIST);
}
END_TEST

static const struct {
    const char *json;
    int rc;
    const char *msg;
} bad_configs[] = {
    {"{}", -EINVAL, "tools: must be an array"},
    {"[1]", -EINVAL, "tools[0]: must be an object"},
    {"[{\"command\":[\"/bin/cat\"]}]", -EINVAL, "tools[0].name: must be 1 to 64"},
    {"[{\"name\":\"a b\",\"command\":[\"/bin/cat\"]}]", -EINVAL, "tools[0].name"},
    {"[{\"name\":\"\",\"command\":[\"/bin/cat\"]}]", -EINVAL, "tools[0].name"},
    {"[{\"name\":\"ok\",\"command\":[\"/bin/cat\"]},{\"name\":\"x\"}]", -EINVAL,
     "tools[1].command: must be a non-empty array of strings"},
    {"[{\"name\":\"x\",\"command\":[]}]", -EINVAL,
     "tools[0].command: must be a non-empty"},
    {"[{\"name\":\"x\",\"command\":\"/bin/cat\"}]", -EINVAL, "tools[0].command: must be"},
    {"[{\"name\":\"x\",\"command\":[\"/bin/cat\", 3]}]", -EINVAL,
     "tools[0].command[1]: must be a string"},
    {"[{\"name\":\"x\",\"command\":[\"\"]}]", -EINVAL,
     "tools[0].command[0]: must be a non-empty string"},
    {"[{\"name\":\"x\",\"command\":[\"/no/such/prog\"]}]", -EINVAL,
     "tools[0].command[0]: '/no/such/prog' is not executable"},
    {"[{\"name\":\"x\",\"command\":[\"/bin/cat\"],\"timeout_ms\":0}]", -EINVAL,
     "tools[0].timeout_ms: must be an integer from 1 to 3600000"},
    {"[{\"name\":\"x\",\"command\":[\"/bin/cat\"],\"timeout_ms\":\"5\"}]", -EINVAL,
     "tools[0].timeout_ms"},
    {"[{\"name\":\"x\",\"command\":[\"/bin/cat\"],\"max_output_bytes\":-1}]", -EINVAL,
     "tools[0].max_output_bytes: must be an integer"},
    {"[{\"name\":\"x\",\"command\":[\"/bin/cat\"],\"description\":5}]", -EINVAL,
     "tools[0].description: must be a string"},
    {"[{\"name\":\"x\",\"command\":[\"/bin/cat\"],\"parameters\":[]}]", -EINVAL,
     "tools[0].parameters: must be a JSON Schema object"},
    {"[{\"name\":\"x\",\"command\":[\"/bin/cat\"],\"parameters\":{\"type\":\"string\"}}]",
     -EINVAL, "tools[0].parameters.type: must be \"object\""},
    {"[{\"name\":\"x\",\"command\":[\"/bin/cat\"],\"parameters\":{\"required\":[1]}}]",
     -EINVAL, "tools[0].parameters.required[0]: must be a string"},
    {"[{\"name\":\"x\",\"command\":[\"/bin/cat\"],\"parameters\":{\"properties\":1}}]",
     -EINVAL, "tools[0].parameters.properties: must be an object"},
    {"[{\"name\":\"calculator\",\"command\":[\"/bin/cat\"]}]", -EEXIST,
     "tools[0].name: duplicate tool 'calculator'"},
    {"[{\"name\":\"y\",\"command\":[\"/bin/cat\"]},{\"name\":\"y\",\"command\":[\"/bin/"
     "cat\"]}]",
     -EEXIST, "tools[1].name: duplicate tool 'y'"},
    {"[{\"name\":\"x\",\"command\":[\"/bin/cat\"],\"bogus\":1}]", -EINVAL,
     "tools[0].bogus: unknown key"},
    {"[{\"name\":\"x\",\"command\":[\"/bin/cat\"],\"approval\":\"maybe\"}]", -EINVAL,
     "tools[0].approval: must be \"auto\", \"ask\" or \"deny\""},
    {"[{\"name\":\"calculator\",\"approval\":\"ask\",\"timeout_ms\":5}]", -EINVAL,
     "tools[0].timeout_ms: a built-in tool takes only \"approval\""},
    {"[{\"name\":\"calculator\"}]", -EINVAL,
     "tools[0].approval: must be \"auto\", \"ask\" or \"deny\""},
    {"[{\"name\":\"clock\",\"approval\":\"deny\"},{\"name\":\"x\"}]", -EINVAL,
     "tools[1].command: must be a non-empty array of strings"},
};

START_TEST(test_bad_config)
{
    struct toolkit *t = toolkit_create();
    json_t *cfg = json_loads(bad_configs[_i].json, 0, NULL);
    struct rx_error err = {""};

    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_int_eq(toolkit_add_builtins(t), 0);
    ck_assert_int_eq(toolkit_add_from_config(t, cfg, &err), bad_configs[_i].rc);
    ck_assert_msg(strstr(err.text, bad_configs[_i].msg), "got \"%s\", want \"%s\"",
                  err.text, bad_configs[_i].msg);
    /* All or nothing: a config with one bad tool adds none, and changes no
       built-in's approval. */
    ck_assert_int_eq(toolkit_count(t), 2);
    ck_assert_str_eq(toolkit_policy(t, "clock"), "auto");
    json_decref(cfg);
    toolkit_destroy(t);
}
END_TEST

/* SPEC 3.6: built-in and command tools default to auto; `approval` sets one,
   also a built-in's through an entry of its name alone; unknown names are auto. */
START_TEST(test_config_policies)
{
    struct toolkit *t = toolkit_create();
    json_t *cfg = json_loads("[{\"name\":\"calculator\",\"approval\":\"ask\"},"
                             "{\"name\":\"x\",\"command\":[\"/bin/cat\"],"
                             "\"approval\":\"deny\"},"
                             "{\"name\":\"y\",\"command\":[\"/bin/cat\"]}]",
                             0, NULL);
    struct rx_error err = {""};

    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_int_eq(toolkit_add_builtins(t), 0);
    ck_assert_str_eq(toolkit_policy(t, "calculator"), "auto");
    ck_assert_msg(toolkit_add_from_config(t, cfg, &err) == 0, "%s", err.text);
    ck_assert_uint_eq(toolkit_count(t), 4); /* the override adds no tool */
    ck_assert_str_eq(toolkit_policy(t, "calculator"), "ask");
    ck_assert_str_eq(toolkit_policy(t, "clock"), "auto");
    ck_assert_str_eq(toolkit_policy(t, "x"), "deny");
    ck_assert_str_eq(toolkit_policy(t, "y"), "auto");
    ck_assert_str_eq(toolkit_policy(t, "no-such-tool"), "auto");
    json_decref(cfg);
    toolkit_destroy(t);
}
END_TEST

START_TEST(test_config_edge_cases)
{
    struct toolkit *t = toolkit_create();
    json_t *cfg = json_array();

    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(toolkit_add_from_config(t, NULL, NULL), 0);
    ck_assert_int_eq(toolkit_add_from_config(t, cfg, NULL), 0);
    ck_assert_int_eq(toolkit_count(t), 0);
    json_decref(cfg);
    /* NULL err is allowed on failure too. */
    cfg = json_loads("[{\"name\":\"x\"}]", 0, NULL);
    ck_assert_int_eq(toolkit_add_from_config(t, cfg, NULL), -EINVAL);
    json_decref(cfg);
    toolkit_destroy(t);
    toolkit_destroy(NULL);
}
END_TEST

/* --------------------------------------------------------------- builtins */

START_TEST(test_calculator)
{
    expect("calculator", "{\"expression\":\"2+3\"}", false, "5");
    expect("calculator", "{\"expression\":\"12*(3+4)\"}", false, "84");
    expect("calculator", "{\"expression\":\"1/3\"}", false, "0.333333333333333");
    expect("calculator", "{\"expression\":\"7/0\"}", true, "division by zero");
    expect("calculator", "{\"expression\":\"2+\"}", true, "unexpected end");
    expect("calculator", "{}", true, "missing required parameter 'expression'");
    expect("calculator", NULL, true, "missing required parameter 'expression'");
    expect("calculator", "{\"expression\":5}", true,
           "parameter 'expression' must be of type string");
    expect("calculator", "[1]", true, "parameters must be a JSON object");
    expect("calculator", "{\"expression\":", true, "parameters are not valid JSON");
    /* Exactly "5", nothing around it. */
    {
        char *r = call("calculator", "{\"expression\":\"2+3\"}", false);

        ck_assert_str_eq(r, "5");
        free(r);
    }
}
END_TEST

/* Issue 12: arguments nested ~1 000 deep crashed the 256 KB effect stack. A
   call on such a stack gets an error, whatever the depth. */
struct deep_call {
    const char *params;
    char *result;
    bool is_error;
    int rc;
};

static void *deep_call_main(void *arg)
{
    struct deep_call *d = arg;

    d->rc = toolkit_call(tk, "calculator", d->params, NULL, -1, &d->result, &d->is_error);
    return NULL;
}

START_TEST(test_deep_arguments_on_a_small_stack)
{
    static const size_t depths[] = {65, 1000, 100000};

    for (size_t k = 0; k < sizeof(depths) / sizeof(depths[0]); k++) {
        size_t n = depths[k], len = 0;
        char *params = malloc(n * 6 + 64);
        struct deep_call d = {.params = params};
        pthread_attr_t attr;
        pthread_t th;

        ck_assert_ptr_nonnull(params);
        for (size_t i = 0; i < n; i++)
            len += (size_t)sprintf(params + len, "{\"a\":");
        params[len++] = '1';
        memset(params + len, '}', n);
        params[len + n] = '\0';
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 256 * 1024); /* the effect runtime's */
        ck_assert_int_eq(pthread_create(&th, &attr, deep_call_main, &d), 0);
        pthread_join(th, NULL);
        pthread_attr_destroy(&attr);
        ck_assert_int_eq(d.rc, 0);
        ck_assert(d.is_error);
        ck_assert_msg(strstr(d.result, "nested deeper than 64"), "%s", d.result);
        free(d.result);
        free(params);
    }
}
END_TEST

START_TEST(test_clock)
{
    struct timespec ts;
    long long before, after;
    json_t *o;
    char *r;

    clock_gettime(CLOCK_REALTIME, &ts);
    before = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    r = call("clock", "{}", false);
    clock_gettime(CLOCK_REALTIME, &ts);
    after = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    o = json_loads(r, 0, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert(json_integer_value(json_object_get(o, "epoch_ms")) >= before);
    ck_assert(json_integer_value(json_object_get(o, "epoch_ms")) <= after);
    ck_assert_str_eq(json_string_value(json_object_get(o, "timezone")), "UTC");
    /* 2025-01-02T03:04:05.678Z */
    ck_assert_int_eq(strlen(json_string_value(json_object_get(o, "iso"))), 24);
    ck_assert_int_eq(json_string_value(json_object_get(o, "iso"))[10], 'T');
    ck_assert_int_eq(json_string_value(json_object_get(o, "iso"))[23], 'Z');
    json_decref(o);
    free(r);

    r = call("clock", "{\"timezone\":\"+02:00\"}", false);
    o = json_loads(r, 0, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(json_string_value(json_object_get(o, "timezone")), "+02:00");
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(o, "iso")), "+02:00"));
    json_decref(o);
    free(r);

    expect("clock", "{\"timezone\":\"-0530\"}", false, "\"timezone\":\"-05:30\"");
    expect("clock", "{\"timezone\":\"UTC\"}", false, "\"timezone\":\"UTC\"");
    expect("clock", "{\"timezone\":\"GMT+1\"}", false, "\"timezone\":\"+01:00\"");
    expect("clock", "", false, "epoch_ms");
    expect("clock", "{\"timezone\":\"Mars/Olympus\"}", true, "unsupported timezone");
    expect("clock", "{\"timezone\":\"+15:00\"}", true, "unsupported timezone");
    expect("clock", "{\"timezone\":\"+02:60\"}", true, "unsupported timezone");
}
END_TEST

/* The clock at a fixed time: formatting and offsets, independent of now. */
static const struct {
    int64_t now_ms;
    const char *args; /* JSON */
    const char *want; /* the exact result, or a substring of the error */
    bool is_error;
} clock_rows[] = {
    {1735787045678, "{}",
     "{\"iso\":\"2025-01-02T03:04:05.678Z\",\"epoch_ms\":1735787045678,"
     "\"timezone\":\"UTC\"}",
     false},
    {1735787045678, "{\"timezone\":\"+02:00\"}",
     "{\"iso\":\"2025-01-02T05:04:05.678+02:00\",\"epoch_ms\":1735787045678,"
     "\"timezone\":\"+02:00\"}",
     false},
    {1735787045678, "{\"timezone\":\"-0530\"}",
     "{\"iso\":\"2025-01-01T21:34:05.678-05:30\",\"epoch_ms\":1735787045678,"
     "\"timezone\":\"-05:30\"}",
     false},
    {0, "{\"timezone\":\"Z\"}",
     "{\"iso\":\"1970-01-01T00:00:00.000Z\",\"epoch_ms\":0,\"timezone\":\"UTC\"}", false},
    {-1, "{}",
     "{\"iso\":\"1969-12-31T23:59:59.999Z\",\"epoch_ms\":-1,\"timezone\":\"UTC\"}",
     false},
    {951782400000, "{\"timezone\":\"GMT+14\"}",
     "{\"iso\":\"2000-02-29T14:00:00.000+14:00\",\"epoch_ms\":951782400000,"
     "\"timezone\":\"+14:00\"}",
     false},
    {0, "{\"timezone\":\"+14:30\"}", "unsupported timezone '+14:30'", true},
    {0, "{\"timezone\":\"Europe/Paris\"}", "unsupported timezone", true},
    {0, "{\"timezone\":\"+\"}", "unsupported timezone", true},
};

START_TEST(test_clock_at)
{
    json_t *args = json_loads(clock_rows[_i].args, 0, NULL);
    char *r = NULL;
    bool is_error = !clock_rows[_i].is_error;

    ck_assert_ptr_nonnull(args);
    ck_assert_int_eq(toolkit_clock_at(clock_rows[_i].now_ms, args, &r, &is_error), 0);
    ck_assert_int_eq(is_error, clock_rows[_i].is_error);
    if (is_error)
        ck_assert_msg(strstr(r, clock_rows[_i].want), "%s", r);
    else
        ck_assert_str_eq(r, clock_rows[_i].want);
    free(r);
    json_decref(args);
}
END_TEST

START_TEST(test_unknown_tool)
{
    expect("nope", "{}", true, "unknown tool 'nope' (available: calculator, clock, echo");
    expect("", "{}", true, "unknown tool ''");
}
END_TEST

/* ---------------------------------------------------------- command tools */

START_TEST(test_command_stdin_to_stdout)
{
    int fds = count_fds();

    /* The arguments are re-encoded compactly; one trailing newline is dropped. */
    expect("echo", "{ \"text\" : \"h\\u00e9llo\" }", false,
           "{\"text\":\"h\xc3\xa9llo\"}");
    expect("echo", "{\"text\":\"x\",\"n\":2}", false, "\"n\":2");
    expect("echo", "{\"n\":2}", true, "missing required parameter 'text' for 'echo'");
    expect("echo", "{\"text\":\"x\",\"n\":2.5}", true,
           "parameter 'n' must be of type integer");
    expect("cat", "{}", false, "{}");
    ck_assert_int_eq(count_fds(), fds);
    assert_no_children();
}
END_TEST

START_TEST(test_command_large_input)
{
    /* More than a socket buffer holds, to both a reader and a non-reader. */
    size_t n = 600000;
    char *params = malloc(n + 32), *r;

    ck_assert_ptr_nonnull(params);
    strcpy(params, "{\"text\":\"");
    memset(params + 9, 'a', n);
    strcpy(params + 9 + n, "\"}");
    r = call("deaf", params, false);
    ck_assert_str_eq(r, "ok");
    free(r);
    /* cat echoes it back, but that is over the 64 KiB default bound. */
    expect("cat", params, true, "printed more than 65536 bytes");
    free(params);
    assert_no_children();
}
END_TEST

START_TEST(test_command_failures)
{
    int fds = count_fds();

    expect("fail", "{}", true, "tool 'fail' exited with status 3: something broke");
    expect("suicide", "{}", true, "tool 'suicide' was killed by signal 9 (SIGKILL)");
    expect("flood", "{}", true, "tool 'flood' printed more than 1000 bytes");
    expect("slow", "{}", true, "tool 'slow' timed out after 200 ms");
    expect("missing", "{}", true, "cannot run 'no-such-program-rx' for tool 'missing'");
    expect("pathed", "{}", false, "");
    ck_assert_int_eq(count_fds(), fds);
    assert_no_children();
}
END_TEST

START_TEST(test_command_output_is_utf8)
{
    char *r = call("binary", "{}", false);

    ck_assert_str_eq(r, "\xef\xbf\xbdok");
    free(r);
}
END_TEST

/* The fixture's grandchild: gone or a zombie of init once its group is killed. */
static bool process_is_dead(pid_t pid)
{
    char path[64], buf[512], *p;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (!f)
        return true;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');
    return !p || p[1] == '\0' || p[2] == 'Z' || p[2] == 'X';
}

static pid_t read_pidfile(const char *path)
{
    FILE *f = fopen(path, "r");
    int pid = 0;

    if (!f)
        return 0;
    if (fscanf(f, "%d", &pid) != 1)
        pid = 0;
    fclose(f);
    return pid;
}

static void wait_until_dead(pid_t pid)
{
    /* Bounded: init reaps the killed grandchild whenever it gets to it. */
    for (int i = 0; i < 300 && !process_is_dead(pid); i++)
        usleep(10000);
    ck_assert_msg(process_is_dead(pid), "grandchild %d still alive", (int)pid);
}

struct canceller {
    struct toolkit *tk;
    int rc;
    char *result;
    bool is_error;
    int cancel_fd;
};

static void *run_sleeper(void *arg)
{
    struct canceller *c = arg;

    c->rc = toolkit_call(c->tk, "sleeper", "{}", NULL, c->cancel_fd, &c->result,
                         &c->is_error);
    return NULL;
}

/* A toolkit whose `sleeper` writes its grandchild's pid to a fresh file. */
static struct toolkit *sleeper_toolkit(char *pidfile, size_t size, int timeout_ms)
{
    struct toolkit *t = toolkit_create();
    char json[512];
    json_t *cfg;

    snprintf(pidfile, size, "/tmp/rx-toolkit-%d-%d.pid", (int)getpid(), timeout_ms);
    unlink(pidfile);
    snprintf(json, sizeof(json),
             "[{\"name\":\"sleeper\",\"command\":[\"" TOOLS "sleep_forever.sh\",\"%s\"],"
             "\"timeout_ms\":%d}]",
             pidfile, timeout_ms);
    cfg = json_loads(json, 0, NULL);
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_int_eq(toolkit_add_from_config(t, cfg, NULL), 0);
    json_decref(cfg);
    return t;
}

START_TEST(test_timeout_kills_group)
{
    char pidfile[128];
    struct toolkit *t = sleeper_toolkit(pidfile, sizeof(pidfile), 300);
    int fds = count_fds();
    char *r = NULL;
    bool is_error = false;
    pid_t grandchild;

    ck_assert_int_eq(toolkit_call(t, "sleeper", "{}", NULL, -1, &r, &is_error), 0);
    ck_assert(is_error);
    ck_assert_ptr_nonnull(strstr(r, "timed out after 300 ms"));
    free(r);
    assert_no_children();
    ck_assert_int_eq(count_fds(), fds);
    grandchild = read_pidfile(pidfile);
    /* The fixture may not have got as far as writing it before the kill. */
    if (grandchild > 0)
        wait_until_dead(grandchild);
    unlink(pidfile);
    toolkit_destroy(t);
}
END_TEST

START_TEST(test_cancel_kills_group)
{
    char pidfile[128];
    struct toolkit *t = sleeper_toolkit(pidfile, sizeof(pidfile), 600000);
    struct canceller c = {.tk = t, .rc = 1};
    int p[2], fds;
    pthread_t th;
    pid_t grandchild = 0;

    ck_assert_int_eq(pipe(p), 0);
    fds = count_fds();
    c.cancel_fd = p[0];
    ck_assert_int_eq(pthread_create(&th, NULL, run_sleeper, &c), 0);
    /* Cancel once the tool is surely running: its grandchild exists. */
    for (int i = 0; i < 300 && grandchild <= 0; i++) {
        usleep(10000);
        grandchild = read_pidfile(pidfile);
    }
    ck_assert_int_gt(grandchild, 0);
    ck_assert_int_eq(write(p[1], "x", 1), 1);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(c.rc, -ECANCELED);
    ck_assert_ptr_null(c.result); /* untouched */
    assert_no_children();
    ck_assert_int_eq(count_fds(), fds);
    wait_until_dead(grandchild);
    /* Already cancelled: nothing runs at all. */
    ck_assert_int_eq(
        toolkit_call(t, "calculator", "{}", NULL, p[0], &c.result, &c.is_error),
        -ECANCELED);
    close(p[0]);
    close(p[1]);
    unlink(pidfile);
    toolkit_destroy(t);
}
END_TEST

struct worker {
    int index;
    int failures;
};

static void *hammer(void *arg)
{
    struct worker *w = arg;

    for (int i = 0; i < 8; i++) {
        char params[64], want[64], *r = NULL;
        bool is_error = true;
        const char *name = (w->index + i) % 2 ? "calculator" : "cat";

        snprintf(params, sizeof(params), "{\"expression\":\"%d*%d\"}", w->index, i);
        if (!strcmp(name, "calculator"))
            snprintf(want, sizeof(want), "%d", w->index * i);
        else
            snprintf(want, sizeof(want), "%s", params);
        if (toolkit_call(tk, name, params, NULL, -1, &r, &is_error) || is_error ||
            strcmp(r, want))
            w->failures++;
        free(r);
    }
    return NULL;
}

START_TEST(test_concurrent_calls)
{
    struct worker w[6];
    pthread_t th[6];

    for (int i = 0; i < 6; i++) {
        w[i] = (struct worker){.index = i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, hammer, &w[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
        ck_assert_int_eq(w[i].failures, 0);
    }
    assert_no_children();
}
END_TEST

/* ------------------------------------------------- descendants that escape */

/*
 * Issue 12: a grandchild that calls setsid() (a daemon, `setsid prog &`) has
 * left the tool's process group and session, so killing the group missed it.
 * The fixture double-forks one that keeps the tool's stdout open; whether the
 * tool exits, times out or is cancelled, it must be gone (not even a zombie)
 * by the time toolkit_call returns.
 */
static struct toolkit *setsid_toolkit(char *pidfile, size_t size, const char *mode,
                                      int timeout_ms)
{
    struct toolkit *t = toolkit_create();
    char json[512];
    json_t *cfg;

    snprintf(pidfile, size, "/tmp/rx-toolkit-setsid-%d-%s.pid", (int)getpid(), mode);
    unlink(pidfile);
    snprintf(json, sizeof(json),
             "[{\"name\":\"daemon\",\"command\":[\"" TOOLS "setsid_child.sh\",\"%s\","
             "\"%s\"],\"timeout_ms\":%d}]",
             pidfile, mode, timeout_ms);
    cfg = json_loads(json, 0, NULL);
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_int_eq(toolkit_add_from_config(t, cfg, NULL), 0);
    json_decref(cfg);
    return t;
}

/* Gone for good: kill(2) finds no such process, zombie or not. */
static void assert_gone(pid_t pid)
{
    int i;

    /* Bounded and generous; with the fix the process is reaped before the call
       returns, so the first look should already succeed. */
    for (i = 0; i < 200 && !(kill(pid, 0) < 0 && errno == ESRCH); i++)
        usleep(10000);
    ck_assert_msg(kill(pid, 0) < 0 && errno == ESRCH,
                  "descendant %d outlived its tool (after %d ms)", (int)pid, i * 10);
}

START_TEST(test_setsid_descendant_killed_on_exit)
{
    char pidfile[128];
    struct toolkit *t = setsid_toolkit(pidfile, sizeof(pidfile), "exit", 10000);
    int fds = count_fds();
    char *r = NULL;
    bool is_error = true;
    pid_t grandchild;

    /* The tool's own exit ends the call: the grandchild holding stdout open
       does not keep it waiting until the timeout. */
    ck_assert_int_eq(toolkit_call(t, "daemon", "{}", NULL, -1, &r, &is_error), 0);
    ck_assert_msg(!is_error, "%s", r);
    ck_assert_str_eq(r, "started");
    free(r);
    grandchild = read_pidfile(pidfile);
    ck_assert_int_gt(grandchild, 0);
    assert_gone(grandchild);
    assert_no_children();
    ck_assert_int_eq(count_fds(), fds);
    unlink(pidfile);
    toolkit_destroy(t);
}
END_TEST

START_TEST(test_setsid_descendant_killed_on_timeout)
{
    char pidfile[128];
    struct toolkit *t = setsid_toolkit(pidfile, sizeof(pidfile), "hang", 2000);
    int fds = count_fds();
    char *r = NULL;
    bool is_error = false;
    pid_t grandchild;

    ck_assert_int_eq(toolkit_call(t, "daemon", "{}", NULL, -1, &r, &is_error), 0);
    ck_assert(is_error);
    ck_assert_msg(strstr(r, "timed out after 2000 ms"), "%s", r);
    free(r);
    /* 2 s is ample for the fixture to have started its grandchild. */
    grandchild = read_pidfile(pidfile);
    ck_assert_int_gt(grandchild, 0);
    assert_gone(grandchild);
    assert_no_children();
    ck_assert_int_eq(count_fds(), fds);
    unlink(pidfile);
    toolkit_destroy(t);
}
END_TEST

struct daemon_call {
    struct toolkit *tk;
    int cancel_fd;
    int rc;
    char *result;
    bool is_error;
};

static void *run_daemon(void *arg)
{
    struct daemon_call *d = arg;

    d->rc =
        toolkit_call(d->tk, "daemon", "{}", NULL, d->cancel_fd, &d->result, &d->is_error);
    return NULL;
}

START_TEST(test_setsid_descendant_killed_on_cancel)
{
    char pidfile[128];
    struct toolkit *t = setsid_toolkit(pidfile, sizeof(pidfile), "hang", 600000);
    struct daemon_call d = {.tk = t, .rc = 1};
    int p[2], fds;
    pthread_t th;
    pid_t grandchild = 0;

    ck_assert_int_eq(pipe(p), 0);
    fds = count_fds();
    d.cancel_fd = p[0];
    ck_assert_int_eq(pthread_create(&th, NULL, run_daemon, &d), 0);
    for (int i = 0; i < 500 && grandchild <= 0; i++) {
        usleep(10000);
        grandchild = read_pidfile(pidfile);
    }
    ck_assert_int_gt(grandchild, 0);
    /* It really escaped: a session (hence a process group) of its own. */
    ck_assert_int_eq(getsid(grandchild), grandchild);
    ck_assert_int_eq(write(p[1], "x", 1), 1);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(d.rc, -ECANCELED);
    ck_assert_ptr_null(d.result);
    assert_gone(grandchild);
    assert_no_children();
    ck_assert_int_eq(count_fds(), fds);
    close(p[0]);
    close(p[1]);
    unlink(pidfile);
    toolkit_destroy(t);
}
END_TEST

Suite *toolkit_suite(void)
{
    Suite *s = suite_create("toolkit");
    TCase *tc = tcase_create("registry");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_schemas);
    tcase_add_loop_test(tc, test_bad_config, 0,
                        sizeof(bad_configs) / sizeof(bad_configs[0]));
    tcase_add_test(tc, test_config_policies);
    tcase_add_test(tc, test_config_edge_cases);
    suite_add_tcase(s, tc);

    tc = tcase_create("builtins");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_calculator);
    tcase_add_test(tc, test_deep_arguments_on_a_small_stack);
    tcase_add_test(tc, test_clock);
    tcase_add_loop_test(tc, test_clock_at, 0, sizeof(clock_rows) / sizeof(clock_rows[0]));
    tcase_add_test(tc, test_unknown_tool);
    suite_add_tcase(s, tc);

    tc = tcase_create("commands");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_command_stdin_to_stdout);
    tcase_add_test(tc, test_command_large_input);
    tcase_add_test(tc, test_command_failures);
    tcase_add_test(tc, test_command_output_is_utf8);
    tcase_add_test(tc, test_timeout_kills_group);
    tcase_add_test(tc, test_cancel_kills_group);
    tcase_add_test(tc, test_concurrent_calls);
    suite_add_tcase(s, tc);

    tc = tcase_create("descendants");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_setsid_descendant_killed_on_exit);
    tcase_add_test(tc, test_setsid_descendant_killed_on_timeout);
    tcase_add_test(tc, test_setsid_descendant_killed_on_cancel);
    suite_add_tcase(s, tc);
    return s;
}
