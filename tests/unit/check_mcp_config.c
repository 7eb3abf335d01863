/*
 * check_mcp_config - the mcpServers block: every shape accepted, every bad
 * entry refused with one line naming the server and the field, include /
 * exclude, and the default policy of SPEC 3.6. Table-driven.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "effects/mcp_config.h"

Suite *mcp_config_suite(void);

static int parse(const char *text, struct mcp_config_entry **e, size_t *n,
                 struct rx_error *err)
{
    json_t *j = json_loads(text, 0, NULL);
    int rc;

    ck_assert_msg(j != NULL, "bad fixture: %s", text);
    rc = mcp_config_parse(j, e, n, err);
    json_decref(j);
    return rc;
}

static const struct {
    const char *json;
    const char *error; /* "" : accepted; else a substring of the message */
} cases[] = {
    {"{}", ""},
    {"{\"fs\": {\"command\": \"npx\", \"args\": [\"-y\", \"x\"], \"env\": {\"A\": "
     "\"1\"}}}",
     ""},
    {"{\"w\": {\"url\": \"http://127.0.0.1:1/mcp\", \"headers\": {\"Authorization\": "
     "\"Bearer x\"}, \"timeout_ms\": 5}}",
     ""},
    {"{\"w\": {\"type\": \"streamable-http\", \"url\": \"https://h/mcp\"}}", ""},
    {"{\"w\": {\"type\": \"http\", \"url\": \"https://h/mcp\"}}", ""},
    {"{\"s\": {\"type\": \"stdio\", \"command\": \"x\", \"approval\": \"deny\", "
     "\"tools\": {\"include\": [\"a\"], \"exclude\": [], \"approval\": {\"a\": "
     "\"ask\"}}}}",
     ""},
    {"[]", "mcpServers: must be an object"},
    {"{\"fs\": 3}", "mcpServers.fs: must be an object"},
    {"{\"fs\": {}}", "mcpServers.fs: needs either"},
    {"{\"fs\": {\"command\": \"x\", \"url\": \"http://h\"}}",
     "mcpServers.fs: needs either"},
    {"{\"fs\": {\"command\": \"x\", \"bogus\": 1}}", "mcpServers.fs.bogus: unknown key"},
    {"{\"fs\": {\"command\": \"\"}}",
     "mcpServers.fs.command: must be a non-empty string"},
    {"{\"fs\": {\"command\": 7}}", "mcpServers.fs.command: must be a non-empty string"},
    {"{\"fs\": {\"command\": \"x\", \"args\": \"-y\"}}",
     "mcpServers.fs.args: must be an array"},
    {"{\"fs\": {\"command\": \"x\", \"args\": [1]}}",
     "mcpServers.fs.args: must be an array"},
    {"{\"fs\": {\"command\": \"x\", \"env\": {\"A\": 1}}}", "mcpServers.fs.env:"},
    {"{\"fs\": {\"command\": \"x\", \"env\": {\"A=B\": \"1\"}}}", "mcpServers.fs.env:"},
    {"{\"fs\": {\"command\": \"x\", \"headers\": {}}}",
     "mcpServers.fs.headers: only for"},
    {"{\"w\": {\"url\": \"ftp://h\"}}", "mcpServers.w.url: must be an http"},
    {"{\"w\": {\"url\": \"http://h\", \"args\": []}}", "mcpServers.w.args: only for"},
    {"{\"w\": {\"url\": \"http://h\", \"headers\": {\"X\": 1}}}",
     "mcpServers.w.headers:"},
    {"{\"w\": {\"url\": \"http://h\", \"type\": \"sse\"}}", "old HTTP+SSE transport"},
    {"{\"w\": {\"url\": \"http://h\", \"type\": \"stdio\"}}", "does not go with"},
    {"{\"w\": {\"url\": \"http://h\", \"type\": \"carrier-pigeon\"}}",
     "mcpServers.w.type:"},
    {"{\"w\": {\"url\": \"http://h\", \"timeout_ms\": 0}}", "mcpServers.w.timeout_ms:"},
    {"{\"w\": {\"url\": \"http://h\", \"timeout_ms\": \"5\"}}",
     "mcpServers.w.timeout_ms:"},
    {"{\"w\": {\"url\": \"http://h\", \"approval\": \"maybe\"}}",
     "mcpServers.w.approval:"},
    {"{\"w\": {\"url\": \"http://h\", \"tools\": []}}",
     "mcpServers.w.tools: must be an object"},
    {"{\"w\": {\"url\": \"http://h\", \"tools\": {\"only\": []}}}",
     "mcpServers.w.tools.only: unknown key"},
    {"{\"w\": {\"url\": \"http://h\", \"tools\": {\"include\": [2]}}}",
     "mcpServers.w.tools.include:"},
    {"{\"w\": {\"url\": \"http://h\", \"tools\": {\"approval\": {\"a\": \"yes\"}}}}",
     "mcpServers.w.tools.approval.a:"},
    {"{\"\": {\"url\": \"http://h\"}}", "mcpServers: the name ''"},
    {"{\"a\\\"b\": {\"url\": \"http://h\"}}", "must be 1 to 64 printable"},
};

START_TEST(test_parse_table)
{
    struct mcp_config_entry *e = NULL;
    struct rx_error err = {""};
    size_t n = 99;
    int rc = parse(cases[_i].json, &e, &n, &err);

    if (!*cases[_i].error) {
        ck_assert_msg(rc == 0, "%s: %s", cases[_i].json, err.text);
        mcp_config_free(e, n);
        return;
    }
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_ptr_null(e);
    ck_assert_uint_eq(n, 0);
    ck_assert_msg(strstr(err.text, cases[_i].error), "%s: got '%s', want '%s'",
                  cases[_i].json, err.text, cases[_i].error);
    ck_assert_ptr_null(strchr(err.text, '\n'));
}
END_TEST

START_TEST(test_entry_contents)
{
    struct mcp_config_entry *e = NULL;
    struct rx_error err = {""};
    size_t n = 0;

    ck_assert_int_eq(parse("{\"fs\": {\"command\": \"npx\", \"args\": [\"-y\", \"srv\"], "
                           "\"env\": {\"K\": \"v\"}},"
                           " \"w\": {\"url\": \"http://127.0.0.1:9/mcp\"}}",
                           &e, &n, &err),
                     0);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(e[0].server.name, "fs");
    ck_assert_int_eq(e[0].server.transport, MCP_STDIO);
    ck_assert_str_eq(e[0].server.argv[0], "npx");
    ck_assert_str_eq(e[0].server.argv[2], "srv");
    ck_assert_ptr_null(e[0].server.argv[3]);
    ck_assert_str_eq(e[0].server.env[0], "K=v");
    ck_assert_int_eq(e[0].server.timeout_ms, MCP_SERVER_TIMEOUT_DEFAULT_MS);
    ck_assert_int_eq(e[1].server.transport, MCP_HTTP);
    ck_assert_str_eq(e[1].server.url, "http://127.0.0.1:9/mcp");
    mcp_config_free(e, n);
}
END_TEST

START_TEST(test_include_exclude)
{
    struct mcp_config_entry *e = NULL;
    struct rx_error err = {""};
    size_t n = 0;

    ck_assert_int_eq(
        parse("{\"a\": {\"command\": \"x\", \"tools\": {\"include\": "
              "[\"t1\", \"t2\"], \"exclude\": [\"t2\"]}},"
              " \"b\": {\"command\": \"x\", \"tools\": {\"exclude\": [\"t3\"]}}}",
              &e, &n, &err),
        0);
    ck_assert(mcp_config_tool_wanted(&e[0], "t1"));
    ck_assert(!mcp_config_tool_wanted(&e[0], "t2")); /* exclude wins */
    ck_assert(!mcp_config_tool_wanted(&e[0], "t4")); /* not included */
    ck_assert(mcp_config_tool_wanted(&e[1], "t1"));
    ck_assert(!mcp_config_tool_wanted(&e[1], "t3"));
    mcp_config_free(e, n);
}
END_TEST

/* SPEC 3.6: a tool's own approval, else the server's, else readOnlyHint -> auto,
   else ask. */
static const struct {
    const char *server;      /* the entry */
    const char *annotations; /* the tool's */
    const char *want;
} policies[] = {
    {"{\"command\": \"x\"}", "{}", "ask"},
    {"{\"command\": \"x\"}", "{\"readOnlyHint\": true}", "auto"},
    {"{\"command\": \"x\"}", "{\"readOnlyHint\": false}", "ask"},
    {"{\"command\": \"x\"}", "{\"readOnlyHint\": \"yes\"}", "ask"},
    {"{\"command\": \"x\", \"approval\": \"deny\"}", "{\"readOnlyHint\": true}", "deny"},
    {"{\"command\": \"x\", \"approval\": \"auto\"}", "{\"destructiveHint\": true}",
     "auto"},
    {"{\"command\": \"x\", \"approval\": \"deny\", \"tools\": {\"approval\": {\"t\": "
     "\"auto\"}}}",
     "{}", "auto"},
    {"{\"command\": \"x\", \"tools\": {\"approval\": {\"t\": \"ask\"}}}",
     "{\"readOnlyHint\": true}", "ask"},
    {"{\"command\": \"x\", \"tools\": {\"approval\": {\"other\": \"deny\"}}}", "{}",
     "ask"},
};

START_TEST(test_policy_table)
{
    struct mcp_config_entry *e = NULL;
    struct rx_error err = {""};
    char text[512];
    size_t n = 0;
    json_t *ann = json_loads(policies[_i].annotations, 0, NULL);

    snprintf(text, sizeof(text), "{\"s\": %s}", policies[_i].server);
    ck_assert_msg(parse(text, &e, &n, &err) == 0, "%s", err.text);
    ck_assert_str_eq(mcp_config_policy(&e[0], "t", ann), policies[_i].want);
    json_decref(ann);
    mcp_config_free(e, n);
}
END_TEST

Suite *mcp_config_suite(void)
{
    Suite *s = suite_create("mcp_config");
    TCase *tc = tcase_create("core");

    tcase_add_loop_test(tc, test_parse_table, 0, (int)(sizeof(cases) / sizeof(cases[0])));
    tcase_add_test(tc, test_entry_contents);
    tcase_add_test(tc, test_include_exclude);
    tcase_add_loop_test(tc, test_policy_table, 0,
                        (int)(sizeof(policies) / sizeof(policies[0])));
    suite_add_tcase(s, tc);
    return s;
}
