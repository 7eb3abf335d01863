/*
 * check_mcp_rpc - the pure JSON-RPC part of the MCP client: the messages we
 * build, the classification of what a server sends, the initialize check,
 * tools/list pages, tool names, and the text of a tools/call result. Every
 * table row is one case; out of memory is simulated for every builder and
 * reader (jansson test_chaos.c style) and must give NULL / -ENOMEM with the
 * outputs untouched and nothing leaked (ASan, valgrind).
 *
 * JSON in the tables is written with single quotes: J() turns every ' into ".
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "effects/mcp_rpc.h"
#include "state_machine/rx_json.h"

Suite *mcp_rpc_suite(void);

#define N_ROWS(a) (sizeof(a) / sizeof((a)[0]))

static long chaos_fail_at; /* 0: never fail */
static long chaos_calls;
static void *chaos_malloc(size_t n);

/*
 * Load JSON written with single quotes (NULs allowed); a NEW reference. The
 * test's own values never meet the failing allocator: only the call under
 * test does.
 */
static json_t *J(const char *text)
{
    char *s = strdup(text);
    json_error_t e;
    json_t *v;

    ck_assert_ptr_nonnull(s);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    json_set_alloc_funcs(malloc, free);
    v = json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
    if (chaos_fail_at)
        json_set_alloc_funcs(chaos_malloc, free);
    ck_assert_msg(v != NULL, "bad test JSON %s: %s", text, e.text);
    free(s);
    return v;
}

/* got equals want (both stolen); want NULL wants NULL. */
static void assert_equal(json_t *got, json_t *want, const char *what)
{
    char *g, *w;

    if (!want) {
        ck_assert_msg(got == NULL, "%s: want NULL", what);
        return;
    }
    ck_assert_msg(got != NULL, "%s: got NULL", what);
    g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    ck_assert_msg(json_equal(got, want), "%s: got %s, want %s", what, g, w);
    free(g);
    free(w);
    json_decref(want);
    json_decref(got);
}

/* got (stolen) equals the single-quoted `want`; "NULL" wants NULL. */
static void assert_json(json_t *got, const char *want, const char *what)
{
    assert_equal(got, strcmp(want, "NULL") ? J(want) : NULL, what);
}

/* ---- out of memory (jansson's allocator is the only one used) ------------- */

static void *chaos_malloc(size_t n)
{
    if (chaos_fail_at && ++chaos_calls == chaos_fail_at)
        return NULL;
    return malloc(n);
}

static void chaos_on(long n)
{
    chaos_calls = 0;
    chaos_fail_at = n;
    json_set_alloc_funcs(chaos_malloc, free);
}

static void chaos_off(void)
{
    json_set_alloc_funcs(malloc, free);
    chaos_fail_at = 0;
}

static void setup(void)
{
    chaos_off();
}

static void teardown(void)
{
    chaos_off();
}

#define CHAOS_MAX 10000 /* no call here needs that many allocations */

/* ---- versions ------------------------------------------------------------- */

static const struct {
    const char *v;
    bool ok;
} version_rows[] = {
    {"2025-11-25", true},  {"2025-06-18", true},  {"2025-03-26", true},
    {"2024-11-05", false}, {"2026-01-01", false}, {"2025-11-25 ", false},
    {"", false},           {"2025-11", false},    {NULL, false},
};

START_TEST(test_version)
{
    ck_assert_int_eq(mcp_rpc_version_supported(version_rows[_i].v), version_rows[_i].ok);
}
END_TEST

/* ---- builders ------------------------------------------------------------- */

static json_t *b_request(void)
{
    return mcp_rpc_request(7, "tools/list", J("{'cursor':'c1'}"));
}
static json_t *b_request_no_params(void)
{
    return mcp_rpc_request(1, "ping", NULL);
}
static json_t *b_request_big_id(void)
{
    return mcp_rpc_request(9007199254740993LL, "tools/call", J("{}"));
}
static json_t *b_request_no_method(void)
{
    return mcp_rpc_request(1, NULL, J("{'leak':'check'}")); /* params still dropped */
}
static json_t *b_notification(void)
{
    return mcp_rpc_notification("notifications/initialized", NULL);
}
static json_t *b_notification_params(void)
{
    return mcp_rpc_notification("notifications/progress", J("{'progress':1}"));
}
static json_t *b_notification_no_method(void)
{
    return mcp_rpc_notification(NULL, J("[1]"));
}
static json_t *b_result_int_id(void)
{
    json_t *id = J("42"), *m = mcp_rpc_result(id, J("{}"));

    json_decref(id); /* borrowed: the message holds its own copy */
    return m;
}
static json_t *b_result_str_id(void)
{
    json_t *id = J("'abc-1'"), *m = mcp_rpc_result(id, J("{'x':[1,2]}"));

    json_decref(id);
    return m;
}
static json_t *b_result_null_id(void)
{
    return mcp_rpc_result(NULL, J("{}"));
}
static json_t *b_result_null_result(void)
{
    json_t *id = J("1"), *m = mcp_rpc_result(id, NULL);

    json_decref(id);
    return m;
}
static json_t *b_error(void)
{
    json_t *id = J("'s-9'"), *m = mcp_rpc_error(id, -32601, "method not found");

    json_decref(id);
    return m;
}
static json_t *b_error_null_id(void)
{
    return mcp_rpc_error(NULL, -32700, NULL);
}
static json_t *b_initialize(void)
{
    return mcp_rpc_initialize_params("1.2.3");
}
static json_t *b_initialize_no_version(void)
{
    return mcp_rpc_initialize_params(NULL);
}
static json_t *b_call(void)
{
    return mcp_rpc_call_params(12, "echo", J("{'message':'hi'}"), NULL);
}
static json_t *b_call_keyed(void)
{
    return mcp_rpc_call_params(12, "echo", J("{'message':'hi'}"), "s-1/call-1");
}
static json_t *b_call_no_args(void)
{
    return mcp_rpc_call_params(3, "get-time", NULL, NULL);
}
static json_t *b_call_no_tool(void)
{
    return mcp_rpc_call_params(3, NULL, J("{'leak':'check'}"), "k");
}
static json_t *b_cancelled(void)
{
    return mcp_rpc_cancelled(5, "the user cancelled");
}
static json_t *b_cancelled_no_reason(void)
{
    return mcp_rpc_cancelled(6, NULL);
}
static json_t *b_token(void)
{
    return mcp_rpc_progress_token(17);
}
static json_t *b_token_negative(void)
{
    return mcp_rpc_progress_token(-3);
}

static const struct {
    const char *name;
    json_t *(*make)(void);
    const char *want; /* single-quoted JSON, or "NULL" */
} build_rows[] = {
    {"request", b_request,
     "{'jsonrpc':'2.0','id':7,'method':'tools/list','params':{'cursor':'c1'}}"},
    {"request without params", b_request_no_params,
     "{'jsonrpc':'2.0','id':1,'method':'ping'}"},
    {"request id past 2^53", b_request_big_id,
     "{'jsonrpc':'2.0','id':9007199254740993,'method':'tools/call','params':{}}"},
    {"request without method", b_request_no_method, "NULL"},
    {"notification", b_notification,
     "{'jsonrpc':'2.0','method':'notifications/initialized'}"},
    {"notification with params", b_notification_params,
     "{'jsonrpc':'2.0','method':'notifications/progress','params':{'progress':1}}"},
    {"notification without method", b_notification_no_method, "NULL"},
    {"result, integer id", b_result_int_id, "{'jsonrpc':'2.0','id':42,'result':{}}"},
    {"result, string id", b_result_str_id,
     "{'jsonrpc':'2.0','id':'abc-1','result':{'x':[1,2]}}"},
    {"result without id", b_result_null_id, "NULL"},
    {"result without result", b_result_null_result, "NULL"},
    {"error", b_error,
     "{'jsonrpc':'2.0','id':'s-9','error':{'code':-32601,'message':'method not found'}}"},
    {"error, null id", b_error_null_id,
     "{'jsonrpc':'2.0','id':null,'error':{'code':-32700,'message':''}}"},
    {"initialize params", b_initialize,
     "{'protocolVersion':'2025-11-25','capabilities':{},"
     "'clientInfo':{'name':'reflexor','version':'1.2.3'}}"},
    {"initialize params, no version", b_initialize_no_version,
     "{'protocolVersion':'2025-11-25','capabilities':{},"
     "'clientInfo':{'name':'reflexor','version':'unknown'}}"},
    {"call params", b_call,
     "{'name':'echo','arguments':{'message':'hi'},'_meta':{'progressToken':'rx-12'}}"},
    {"call params, no arguments", b_call_no_args,
     "{'name':'get-time','arguments':{},'_meta':{'progressToken':'rx-3'}}"},
    {"call params, no tool", b_call_no_tool, "NULL"},
    {"call params, an idempotency key", b_call_keyed,
     "{'name':'echo','arguments':{'message':'hi'},"
     "'_meta':{'progressToken':'rx-12','io.reflexor/idempotency-key':'s-1/call-1'}}"},
    {"cancelled", b_cancelled,
     "{'jsonrpc':'2.0','method':'notifications/cancelled',"
     "'params':{'requestId':5,'reason':'the user cancelled'}}"},
    {"cancelled without reason", b_cancelled_no_reason,
     "{'jsonrpc':'2.0','method':'notifications/cancelled','params':{'requestId':6}}"},
    {"progress token", b_token, "'rx-17'"},
    {"progress token, negative id", b_token_negative, "'rx--3'"},
};

START_TEST(test_build)
{
    assert_json(build_rows[_i].make(), build_rows[_i].want, build_rows[_i].name);
}
END_TEST

/* Every allocation may fail: NULL then, never a leak, never a crash. */
START_TEST(test_build_oom)
{
    json_t *got = NULL;

    for (long n = 1; n < CHAOS_MAX; n++) {
        chaos_on(n);
        got = build_rows[_i].make();
        chaos_off();
        if (chaos_calls < n)
            break; /* this run met no failure: done */
        ck_assert_msg(got == NULL, "%s: allocation %ld failed, still built",
                      build_rows[_i].name, n);
    }
    assert_json(got, build_rows[_i].want, build_rows[_i].name);
}
END_TEST

/* The id of a result or an error is copied, so the request may go first. */
START_TEST(test_result_copies_id)
{
    json_t *id = J("'abc'"), *m = mcp_rpc_result(id, J("{}"));

    ck_assert_ptr_nonnull(m);
    ck_assert_ptr_ne(json_object_get(m, "id"), id);
    json_decref(id);
    ck_assert_str_eq(json_string_value(json_object_get(m, "id")), "abc");
    json_decref(m);
}
END_TEST

/* ---- replies to the server's requests ------------------------------------- */

static const struct {
    const char *request;
    const char *want;
} reply_rows[] = {
    {"{'jsonrpc':'2.0','id':1,'method':'ping'}", "{'jsonrpc':'2.0','id':1,'result':{}}"},
    {"{'jsonrpc':'2.0','id':'p','method':'ping','params':{}}",
     "{'jsonrpc':'2.0','id':'p','result':{}}"},
    {"{'jsonrpc':'2.0','id':2,'method':'sampling/createMessage','params':{}}",
     "{'jsonrpc':'2.0','id':2,'error':{'code':-32601,"
     "'message':'method not found: \\u0027sampling/createMessage\\u0027'}}"},
    {"{'jsonrpc':'2.0','id':3,'method':'roots/list'}",
     "{'jsonrpc':'2.0','id':3,'error':{'code':-32601,"
     "'message':'method not found: \\u0027roots/list\\u0027'}}"},
    {"{'jsonrpc':'2.0','method':'ping'}", "NULL"},          /* a notification */
    {"{'jsonrpc':'2.0','id':1,'result':{}}", "NULL"},       /* a response */
    {"[{'jsonrpc':'2.0','id':1,'method':'ping'}]", "NULL"}, /* a batch */
};

START_TEST(test_reply)
{
    json_t *req = J(reply_rows[_i].request);

    assert_json(mcp_rpc_reply(req), reply_rows[_i].want, reply_rows[_i].request);
    json_decref(req);
}
END_TEST

START_TEST(test_reply_long_method)
{
    char method[300], msg[400];
    json_t *req, *reply;
    const char *text;

    memset(method, 'm', sizeof(method) - 1);
    method[sizeof(method) - 1] = '\0';
    snprintf(msg, sizeof(msg), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\"}",
             method);
    req = J(msg);
    reply = mcp_rpc_reply(req);
    ck_assert_ptr_nonnull(reply);
    text = json_string_value(json_object_get(json_object_get(reply, "error"), "message"));
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_lt(strlen(text), 120); /* the method is quoted, cut */
    json_decref(reply);
    json_decref(req);
}
END_TEST

/* A quoted method is cut whole characters at a time: the reply stays UTF-8. */
START_TEST(test_reply_long_unicode_method)
{
    char method[200], msg[300];
    json_t *req, *reply;
    const char *text;

    /* "a" then 60 times "é" (2 bytes): byte 64 falls inside a character. */
    method[0] = 'a';
    for (int i = 0; i < 60; i++)
        memcpy(method + 1 + 2 * i, "\xc3\xa9", 2);
    method[121] = '\0';
    snprintf(msg, sizeof(msg), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\"}",
             method);
    req = J(msg);
    reply = mcp_rpc_reply(req);
    ck_assert_ptr_nonnull(reply);
    text = json_string_value(json_object_get(json_object_get(reply, "error"), "message"));
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(strlen(text), strlen("method not found: ''") + 63);
    json_decref(reply);
    json_decref(req);
}
END_TEST

/* ---- initialize ----------------------------------------------------------- */

static const struct {
    const char *result;
    int rc;
    const char *version; /* rc == 0 */
    bool list_changed;   /* rc == 0 */
    const char *msg;     /* a substring of err.text, rc != 0 */
} init_rows[] = {
    {"{'protocolVersion':'2025-11-25','capabilities':{'tools':{'listChanged':true}},"
     "'serverInfo':{'name':'everything','version':'1'}}",
     0, "2025-11-25", true, NULL},
    {"{'protocolVersion':'2025-06-18','capabilities':{'tools':{}}}", 0, "2025-06-18",
     false, NULL},
    {"{'protocolVersion':'2025-03-26','capabilities':{}}", 0, "2025-03-26", false, NULL},
    {"{'protocolVersion':'2025-11-25','capabilities':{'tools':{'listChanged':false},"
     "'resources':{'subscribe':true},'experimental':{'x':1}},'instructions':'hi'}",
     0, "2025-11-25", false, NULL},
    {"{'protocolVersion':'2024-11-05','capabilities':{}}", -EPROTO, NULL, false,
     "the server speaks protocol '2024-11-05', which Reflexor does not: it needs "
     "2025-03-26 or newer"},
    {"{'protocolVersion':'2026-06-01','capabilities':{}}", -EPROTO, NULL, false,
     "protocol '2026-06-01', which Reflexor does not: it speaks 2025-11-25, 2025-06-18 "
     "and 2025-03-26"},
    {"{'protocolVersion':'2025-05-01','capabilities':{}}", -EPROTO, NULL, false,
     "it speaks 2025-11-25"},
    {"{'protocolVersion':'','capabilities':{}}", -EPROTO, NULL, false,
     "needs 2025-03-26"},
    {"{'protocolVersion':'2025-11-25\\u0000x','capabilities':{}}", -EPROTO, NULL, false,
     "'protocolVersion' is not a string"},
    {"{'capabilities':{}}", -EPROTO, NULL, false, "'protocolVersion' is missing"},
    {"{'protocolVersion':20251125,'capabilities':{}}", -EPROTO, NULL, false,
     "'protocolVersion' is not a string"},
    {"{'protocolVersion':null,'capabilities':{}}", -EPROTO, NULL, false,
     "'protocolVersion' is not a string"},
    {"{'protocolVersion':'2025-11-25'}", -EPROTO, NULL, false,
     "'capabilities' is missing"},
    {"{'protocolVersion':'2025-11-25','capabilities':[]}", -EPROTO, NULL, false,
     "'capabilities' is not an object"},
    {"{'protocolVersion':'2025-11-25','capabilities':{'tools':true}}", -EPROTO, NULL,
     false, "'capabilities.tools' is not an object"},
    {"{'protocolVersion':'2025-11-25','capabilities':{'tools':{'listChanged':'yes'}}}",
     -EPROTO, NULL, false, "'capabilities.tools.listChanged' is not a boolean"},
    {"[]", -EPROTO, NULL, false, "initialize result: not an object"},
    {"'2025-11-25'", -EPROTO, NULL, false, "not an object"},
    {"null", -EPROTO, NULL, false, "not an object"},
};

START_TEST(test_initialize)
{
    json_t *r = J(init_rows[_i].result);
    char version[16] = "unchanged";
    bool lc = !init_rows[_i].list_changed;
    struct rx_error err = {""};
    int rc = mcp_rpc_check_initialize(r, version, sizeof(version), &lc, &err);

    ck_assert_msg(rc == init_rows[_i].rc, "%s: rc %d (%s)", init_rows[_i].result, rc,
                  err.text);
    if (rc == 0) {
        ck_assert_str_eq(version, init_rows[_i].version);
        ck_assert_int_eq(lc, init_rows[_i].list_changed);
    } else {
        ck_assert_str_eq(version, "unchanged");
        ck_assert_int_eq(lc, !init_rows[_i].list_changed);
        ck_assert_msg(strstr(err.text, init_rows[_i].msg), "%s: '%s' lacks '%s'",
                      init_rows[_i].result, err.text, init_rows[_i].msg);
    }
    /* The optional outputs: no list_changed, no err. */
    ck_assert_int_eq(mcp_rpc_check_initialize(r, version, sizeof(version), NULL, NULL),
                     init_rows[_i].rc);
    json_decref(r);
}
END_TEST

START_TEST(test_initialize_small_buffer)
{
    json_t *r = J("{'protocolVersion':'2025-11-25','capabilities':{}}");
    char version[10] = "unchanged";
    struct rx_error err = {""};

    ck_assert_int_eq(mcp_rpc_check_initialize(r, version, sizeof(version), NULL, &err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.text, "no room"));
    ck_assert_str_eq(version, "unchanged");
    json_decref(r);
}
END_TEST

START_TEST(test_initialize_huge_version)
{
    char big[2000], text[2100];
    struct rx_error err = {""};
    json_t *r;

    memset(big, '9', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    snprintf(text, sizeof(text), "{\"protocolVersion\":\"%s\",\"capabilities\":{}}", big);
    r = J(text);
    ck_assert_int_eq(mcp_rpc_check_initialize(r, (char[16]){0}, 16, NULL, &err), -EPROTO);
    ck_assert_uint_lt(strlen(err.text), 200); /* the version is quoted, cut */
    json_decref(r);
}
END_TEST

/* ---- classify ------------------------------------------------------------- */

static const struct {
    const char *msg;
    enum mcp_rpc_kind kind;
    json_int_t id;      /* responses */
    const char *method; /* notifications and requests */
} classify_rows[] = {
    /* responses, ids as integers and digit strings */
    {"{'jsonrpc':'2.0','id':1,'result':{}}", MCP_RPC_RESPONSE, 1, NULL},
    {"{'jsonrpc':'2.0','id':0,'result':null}", MCP_RPC_RESPONSE, 0, NULL},
    {"{'jsonrpc':'2.0','id':-4,'result':[]}", MCP_RPC_RESPONSE, -4, NULL},
    {"{'jsonrpc':'2.0','id':9223372036854775807,'result':{}}", MCP_RPC_RESPONSE,
     9223372036854775807LL, NULL},
    {"{'jsonrpc':'2.0','id':'12','result':{}}", MCP_RPC_RESPONSE, 12, NULL},
    {"{'jsonrpc':'2.0','id':'007','result':{}}", MCP_RPC_RESPONSE, 7, NULL},
    {"{'jsonrpc':'2.0','id':'9223372036854775807','result':{}}", MCP_RPC_RESPONSE,
     9223372036854775807LL, NULL},
    {"{'jsonrpc':'2.0','result':{},'id':5}", MCP_RPC_RESPONSE, 5, NULL},
    /* error responses, with and without data, even malformed ones */
    {"{'jsonrpc':'2.0','id':2,'error':{'code':-32602,'message':'Invalid params'}}",
     MCP_RPC_ERROR_RESPONSE, 2, NULL},
    {"{'jsonrpc':'2.0','id':'3','error':{'code':-1,'message':'x','data':{'a':1}}}",
     MCP_RPC_ERROR_RESPONSE, 3, NULL},
    {"{'jsonrpc':'2.0','id':4,'error':'boom'}", MCP_RPC_ERROR_RESPONSE, 4, NULL},
    /* ids that cannot be ours */
    {"{'jsonrpc':'2.0','id':'9223372036854775808','result':{}}", MCP_RPC_INVALID, 0,
     NULL},
    {"{'jsonrpc':'2.0','id':'-4','result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':'','result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':'1a','result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':' 1','result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':'1\\u00002','result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':'abc','result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':1.5,'result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':1.0,'result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':true,'result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':[1],'result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':null,'error':{'code':-32700,'message':'Parse error'}}",
     MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','result':{}}", MCP_RPC_INVALID, 0, NULL},
    /* neither or both of result and error */
    {"{'jsonrpc':'2.0','id':1}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':1,'result':{},'error':{'code':1,'message':'m'}}",
     MCP_RPC_INVALID, 0, NULL},
    /* notifications and requests */
    {"{'jsonrpc':'2.0','method':'notifications/tools/list_changed'}",
     MCP_RPC_NOTIFICATION, 0, "notifications/tools/list_changed"},
    {"{'jsonrpc':'2.0','method':'notifications/"
     "progress','params':{'progressToken':'rx-1',"
     "'progress':5,'total':10}}",
     MCP_RPC_NOTIFICATION, 0, "notifications/progress"},
    {"{'jsonrpc':'2.0','method':'notifications/message','params':'odd'}",
     MCP_RPC_NOTIFICATION, 0, "notifications/message"},
    {"{'jsonrpc':'2.0','method':''}", MCP_RPC_NOTIFICATION, 0, ""},
    {"{'jsonrpc':'2.0','id':7,'method':'ping'}", MCP_RPC_REQUEST, 0, "ping"},
    {"{'jsonrpc':'2.0','id':'srv-1','method':'roots/list','params':{}}", MCP_RPC_REQUEST,
     0, "roots/list"},
    {"{'jsonrpc':'2.0','id':null,'method':'ping'}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':1.5,'method':'ping'}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':{},'method':'ping'}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','method':42}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','method':null}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','method':'pi\\u0000ng','id':1}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','id':1,'method':'ping','result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0','method':'x','error':{}}", MCP_RPC_INVALID, 0, NULL},
    /* the envelope */
    {"{'id':1,'result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'method':'notifications/initialized'}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'1.0','id':1,'result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':2.0,'id':1,'result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0 ','id':1,'result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0\\u0000','id':1,'result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':null,'id':1,'result':{}}", MCP_RPC_INVALID, 0, NULL},
    {"{'jsonrpc':'2.0'}", MCP_RPC_INVALID, 0, NULL},
    {"{}", MCP_RPC_INVALID, 0, NULL},
    {"[{'jsonrpc':'2.0','id':1,'result':{}},{'jsonrpc':'2.0','id':2,'result':{}}]",
     MCP_RPC_INVALID, 0, NULL},
    {"[]", MCP_RPC_INVALID, 0, NULL},
    {"'2.0'", MCP_RPC_INVALID, 0, NULL},
    {"17", MCP_RPC_INVALID, 0, NULL},
    {"null", MCP_RPC_INVALID, 0, NULL},
};

START_TEST(test_classify)
{
    json_t *msg = J(classify_rows[_i].msg);
    json_int_t id = -12345;
    const char *method = "untouched";
    enum mcp_rpc_kind kind = mcp_rpc_classify(msg, &id, &method);

    ck_assert_msg(kind == classify_rows[_i].kind, "%s: kind %d, want %d",
                  classify_rows[_i].msg, kind, classify_rows[_i].kind);
    if (kind == MCP_RPC_RESPONSE || kind == MCP_RPC_ERROR_RESPONSE)
        ck_assert_msg(id == classify_rows[_i].id, "%s: id %lld", classify_rows[_i].msg,
                      (long long)id);
    else
        ck_assert_msg(id == -12345, "%s: id written", classify_rows[_i].msg);
    if (classify_rows[_i].method)
        ck_assert_str_eq(method, classify_rows[_i].method);
    else
        ck_assert_str_eq(method, "untouched");
    /* The outputs are optional. */
    ck_assert_int_eq(mcp_rpc_classify(msg, NULL, NULL), classify_rows[_i].kind);
    json_decref(msg);
}
END_TEST

START_TEST(test_classify_null)
{
    ck_assert_int_eq(mcp_rpc_classify(NULL, NULL, NULL), MCP_RPC_INVALID);
}
END_TEST

/* A batch is the caller's to iterate: each element classifies on its own. */
START_TEST(test_classify_batch_elements)
{
    json_t *batch = J("[{'jsonrpc':'2.0','id':1,'result':{}},"
                      "{'jsonrpc':'2.0','method':'notifications/tools/list_changed'},"
                      "{'jsonrpc':'2.0','id':2,'error':{'code':1,'message':'m'}}, 5]");
    static const enum mcp_rpc_kind want[] = {MCP_RPC_RESPONSE, MCP_RPC_NOTIFICATION,
                                             MCP_RPC_ERROR_RESPONSE, MCP_RPC_INVALID};
    json_t *m;
    size_t i;

    ck_assert_int_eq(mcp_rpc_classify(batch, NULL, NULL), MCP_RPC_INVALID);
    json_array_foreach(batch, i, m)
    {
        ck_assert_int_eq(mcp_rpc_classify(m, NULL, NULL), want[i]);
    }
    json_decref(batch);
}
END_TEST

/* ---- error text ----------------------------------------------------------- */

static const struct {
    const char *msg;
    const char *text;
} error_rows[] = {
    {"{'jsonrpc':'2.0','id':1,'error':{'code':-32602,'message':'Invalid params'}}",
     "MCP error -32602: Invalid params"},
    {"{'jsonrpc':'2.0','id':1,'error':{'code':-32603,'message':'Internal error',"
     "'data':'stack overflow'}}",
     "MCP error -32603: Internal error (stack overflow)"},
    {"{'jsonrpc':'2.0','id':1,'error':{'code':-32602,'message':'Invalid params',"
     "'data':{'field':'path','got':[1,2]}}}",
     "MCP error -32602: Invalid params ({\"field\":\"path\",\"got\":[1,2]})"},
    {"{'jsonrpc':'2.0','id':1,'error':{'code':1,'message':'m','data':null}}",
     "MCP error 1: m"},
    {"{'jsonrpc':'2.0','id':1,'error':{'code':1,'message':'m','data':42}}",
     "MCP error 1: m (42)"},
    {"{'jsonrpc':'2.0','id':1,'error':{'code':1,'message':''}}", "MCP error 1: "},
    {"{'jsonrpc':'2.0','id':1,'error':{'code':-32000}}", "MCP error -32000: no message"},
    {"{'jsonrpc':'2.0','id':1,'error':{'message':'no code here'}}",
     "MCP error: no code here"},
    {"{'jsonrpc':'2.0','id':1,'error':{'code':'-1','message':'string code'}}",
     "MCP error: string code"},
    {"{'jsonrpc':'2.0','id':1,'error':{'code':1.5}}",
     "MCP error: the server sent a malformed error"},
    {"{'jsonrpc':'2.0','id':1,'error':'boom'}",
     "MCP error: the server sent a malformed error"},
    {"{'jsonrpc':'2.0','id':1,'error':{}}",
     "MCP error: the server sent a malformed error"},
    {"{'jsonrpc':'2.0','id':1,'result':{}}",
     "MCP error: the server sent a malformed error"},
    {"[]", "MCP error: the server sent a malformed error"},
};

START_TEST(test_error_text)
{
    json_t *msg = J(error_rows[_i].msg);
    struct rx_error err = {""};

    ck_assert_int_eq(mcp_rpc_error_text(msg, &err), -EIO);
    ck_assert_str_eq(err.text, error_rows[_i].text);
    ck_assert_int_eq(mcp_rpc_error_text(msg, NULL), -EIO);
    json_decref(msg);
}
END_TEST

/* Long messages and data are cut to fit, never overflow. */
START_TEST(test_error_text_long)
{
    char big[3000], text[7000];
    struct rx_error err = {""};
    json_t *msg;

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    snprintf(text, sizeof(text),
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1,\"message\":\"%s\","
             "\"data\":[\"%s\"]}}",
             big, big);
    msg = J(text);
    ck_assert_int_eq(mcp_rpc_error_text(msg, &err), -EIO);
    ck_assert_uint_eq(strlen(err.text), RX_ERR_LEN - 1);
    ck_assert_ptr_nonnull(strstr(err.text, "MCP error 1: xxx"));
    json_decref(msg);
    /* Long data after a short message: the dump is cut, not dropped. */
    snprintf(text, sizeof(text),
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1,\"message\":\"m\","
             "\"data\":[\"%s\"]}}",
             big);
    msg = J(text);
    ck_assert_int_eq(mcp_rpc_error_text(msg, &err), -EIO);
    ck_assert_ptr_nonnull(strstr(err.text, "MCP error 1: m ([\"xxx"));
    json_decref(msg);
}
END_TEST

/* ---- progress tokens ------------------------------------------------------ */

static const json_int_t token_ids[] = {
    0, 1, 42, 9007199254740993LL, -1, 9223372036854775807LL, -9223372036854775807LL - 1};

START_TEST(test_progress_round_trip)
{
    json_t *t = mcp_rpc_progress_token(token_ids[_i]);
    json_int_t id = 0;

    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(mcp_rpc_progress_id(t, &id), 0);
    ck_assert_int_eq(id, token_ids[_i]);
    json_decref(t);
}
END_TEST

static const char *const foreign_tokens[] = {
    "1",
    "'1'",
    "'rx-'",
    "'rx-007'",
    "'rx-1x'",
    "'rx- 1'",
    "'rx-+1'",
    "'rx--0'",
    "'RX-1'",
    "'x-rx-1'",
    "'rx-1 '",
    "'rx_1'",
    "'rx-1\\u00002'",
    "'rx-9223372036854775808'",
    "'rx--9223372036854775809'",
    "null",
    "{'rx':1}",
    "['rx-1']",
    "true",
    "1.5",
    "''",
};

START_TEST(test_progress_foreign)
{
    json_t *t = J(foreign_tokens[_i]);
    json_int_t id = 99;

    ck_assert_msg(mcp_rpc_progress_id(t, &id) == -ENOENT, "%s", foreign_tokens[_i]);
    ck_assert_int_eq(id, 99);
    json_decref(t);
}
END_TEST

START_TEST(test_progress_null)
{
    json_int_t id = 99;

    ck_assert_int_eq(mcp_rpc_progress_id(NULL, &id), -ENOENT);
    ck_assert_int_eq(id, 99);
}
END_TEST

/* ---- tools/list ----------------------------------------------------------- */

#define DEFAULT_SCHEMA "{'type':'object','properties':{}}"

static const struct {
    const char *result;
    int rc;
    const char *tools;  /* what the page appends (rc == 0) */
    const char *cursor; /* single-quoted JSON or NULL */
    size_t skipped;
    const char *msg; /* rc != 0 */
} page_rows[] = {
    {"{'tools':[]}", 0, "[]", NULL, 0, NULL},
    {"{'tools':[{'name':'echo','description':'Echo it','inputSchema':{'type':'object',"
     "'properties':{'message':{'type':'string'}},'required':['message']},"
     "'annotations':{'readOnlyHint':true}}],'nextCursor':'page2'}",
     0,
     "[{'name':'echo','description':'Echo it','inputSchema':{'type':'object',"
     "'properties':{'message':{'type':'string'}},'required':['message']},"
     "'annotations':{'readOnlyHint':true}}]",
     "'page2'", 0, NULL},
    /* defaults, and keys we do not keep (title, icons, outputSchema, _meta) */
    {"{'tools':[{'name':'a','title':'A','icons':[],'outputSchema':{'type':'object'},"
     "'_meta':{'k':1}}]}",
     0,
     "[{'name':'a','description':'','inputSchema':" DEFAULT_SCHEMA ",'annotations':{}}]",
     NULL, 0, NULL},
    {"{'tools':[{'name':'a','description':7,'annotations':'ro'}]}", 0,
     "[{'name':'a','description':'','inputSchema':" DEFAULT_SCHEMA ",'annotations':{}}]",
     NULL, 0, NULL},
    {"{'tools':[{'name':'a','description':null,'annotations':null}]}", 0,
     "[{'name':'a','description':'','inputSchema':" DEFAULT_SCHEMA ",'annotations':{}}]",
     NULL, 0, NULL},
    /* unicode in a description is kept as it is; a NUL leaves the tool out */
    {"{'tools':[{'name':'caf\\u00e9','description':'d\\u00e9j\\u00e0 vu'}]}", 0,
     "[{'name':'caf\\u00e9','description':'d\\u00e9j\\u00e0 "
     "vu','inputSchema':" DEFAULT_SCHEMA ",'annotations':{}}]",
     NULL, 0, NULL},
    {"{'tools':[{'name':'caf\\u00e9','description':'d\\u00e9j\\u00e0 \\u0000 vu'}]}", 0,
     "[]", NULL, 1, NULL},
    /* skipped entries */
    {"{'tools':[{'name':'ok'},{'description':'no name'},{'name':''},{'name':5},"
     "{'name':null},{'name':'x\\u0000y'},{'name':'bad','inputSchema':'object'},"
     "{'name':'bad2','inputSchema':[]},{'name':'bad3','inputSchema':true},"
     "'just a string',7,null,[],{'name':'ok2','inputSchema':{}}]}",
     0,
     "[{'name':'ok','description':'','inputSchema':" DEFAULT_SCHEMA ",'annotations':{}},"
     "{'name':'ok2','description':'','inputSchema':{},'annotations':{}}]",
     NULL, 12, NULL},
    {"{'tools':[{'name':'a'}],'nextCursor':null}", 0,
     "[{'name':'a','description':'','inputSchema':" DEFAULT_SCHEMA ",'annotations':{}}]",
     NULL, 0, NULL},
    {"{'tools':[],'nextCursor':''}", 0, "[]", NULL, 0, NULL},
    {"{'tools':[],'nextCursor':'eyJvZmZzZXQiOjEwfQ=='}", 0, "[]",
     "'eyJvZmZzZXQiOjEwfQ=='", 0, NULL},
    {"{'tools':[],'_meta':{},'extra':1}", 0, "[]", NULL, 0, NULL},
    /* the page itself */
    {"{'tools':[],'nextCursor':2}", -EPROTO, NULL, NULL, 0,
     "'nextCursor' is not a string"},
    {"{'tools':[],'nextCursor':{}}", -EPROTO, NULL, NULL, 0, "'nextCursor'"},
    {"{'tools':{}}", -EPROTO, NULL, NULL, 0, "'tools' is not an array"},
    {"{'tools':null}", -EPROTO, NULL, NULL, 0, "'tools' is not an array"},
    {"{}", -EPROTO, NULL, NULL, 0, "'tools' is not an array"},
    {"[]", -EPROTO, NULL, NULL, 0, "tools/list result: not an object"},
    {"'tools'", -EPROTO, NULL, NULL, 0, "not an object"},
};

START_TEST(test_tools_page)
{
    json_t *r = J(page_rows[_i].result), *tools = J("[{'name':'earlier'}]");
    json_t *cursor = (json_t *)&cursor, *want;
    size_t skipped = 999;
    struct rx_error err = {""};
    int rc = mcp_rpc_tools_page(r, tools, &cursor, &skipped, &err);

    ck_assert_msg(rc == page_rows[_i].rc, "%s: rc %d (%s)", page_rows[_i].result, rc,
                  err.text);
    if (rc) {
        ck_assert_ptr_eq(cursor, (json_t *)&cursor);
        ck_assert_uint_eq(skipped, 999);
        ck_assert_uint_eq(json_array_size(tools), 1);
        ck_assert_msg(strstr(err.text, page_rows[_i].msg), "'%s' lacks '%s'", err.text,
                      page_rows[_i].msg);
        json_decref(tools);
        json_decref(r);
        return;
    }
    ck_assert_uint_eq(skipped, page_rows[_i].skipped);
    if (page_rows[_i].cursor)
        assert_json(cursor, page_rows[_i].cursor, "cursor");
    else
        ck_assert_ptr_null(cursor);
    /* Appended after what was there; nothing shared with the result. */
    want = J(page_rows[_i].tools);
    ck_assert_int_eq(json_array_insert_new(want, 0, J("{'name':'earlier'}")), 0);
    json_decref(r);
    assert_equal(tools, want, "tools");
}
END_TEST

/* One tool with a NUL anywhere (a description, deep in a schema, a key) is
   left out alone; its neighbours stay. */
START_TEST(test_tools_page_skips_nul)
{
    const char *text =
        "{\"tools\":[{\"name\":\"ok\"},{\"name\":\"d\",\"description\":\"a\\u0000b\"},"
        "{\"name\":\"s\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"x\":"
        "{\"enum\":[\"\\u0000\"]}}}},{\"name\":\"k\",\"annotations\":{\"a\\u0000\":1}},"
        "{\"name\":\"ok2\"}]}";
    json_t *r = NULL, *tools = json_array();
    size_t skipped = 0;

    /* jansson refuses a NUL in a key; the parser the transports use does not. */
    ck_assert_int_eq(rx_json_parse(text, strlen(text), RX_JSON_ALLOW_NUL, &r, NULL), 0);
    ck_assert_int_eq(mcp_rpc_tools_page(r, tools, NULL, &skipped, NULL), 0);
    ck_assert_uint_eq(skipped, 3);
    ck_assert_uint_eq(json_array_size(tools), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(tools, 1), "name")),
                     "ok2");
    json_decref(tools);
    json_decref(r);
}
END_TEST

/* The optional outputs, and the copies are deep. */
START_TEST(test_tools_page_copies)
{
    json_t *r = J("{'tools':[{'name':'a','inputSchema':{'type':'object'},"
                  "'annotations':{'readOnlyHint':true}}],'nextCursor':'c'}");
    json_t *tools = json_array(), *src = json_array_get(json_object_get(r, "tools"), 0);
    json_t *t;

    ck_assert_int_eq(mcp_rpc_tools_page(r, tools, NULL, NULL, NULL), 0);
    t = json_array_get(tools, 0);
    ck_assert_ptr_ne(json_object_get(t, "name"), json_object_get(src, "name"));
    ck_assert_ptr_ne(json_object_get(t, "inputSchema"),
                     json_object_get(src, "inputSchema"));
    ck_assert_ptr_ne(json_object_get(t, "annotations"),
                     json_object_get(src, "annotations"));
    ck_assert_int_eq(
        json_object_set_new(json_object_get(src, "inputSchema"), "x", json_true()), 0);
    ck_assert_ptr_null(json_object_get(json_object_get(t, "inputSchema"), "x"));
    json_decref(r);
    ck_assert_str_eq(json_string_value(json_object_get(t, "name")), "a");
    json_decref(tools);
}
END_TEST

/* ---- tool names ----------------------------------------------------------- */

#define A64 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static const struct {
    const char *server, *tool;
    const char *taken[4]; /* names already used */
    const char *want;
} name_rows[] = {
    {"fs", "read_file", {NULL}, "fs__read_file"},
    {"web-1", "Get-URL_2", {NULL}, "web-1__Get-URL_2"},
    {"my server", "do.it/now", {NULL}, "my_server__do_it_now"},
    {"", "echo", {NULL}, "__echo"},
    {"fs", "", {NULL}, "fs__"},
    {"", "", {NULL}, "__"},
    {"caf\xc3\xa9",
     "\xe6\x97\xa5\xe6\x9c\xac",
     {NULL},
     "caf_____"},                                /* é → _, 日本 → __ */
    {"s", "\xf0\x9f\x98\x80!", {NULL}, "s____"}, /* 😀 → _, ! → _ */
    {"s", "\x80\x80x", {NULL}, "s____x"},        /* stray bytes */
    {"s", "\xc3", {NULL}, "s___"},               /* cut sequence */
    {"s", "a\tb\nc d\"e'f\\g", {NULL}, "s__a_b_c_d_e_f_g"},
    {A64, "tool", {NULL}, A64},
    {"srv",
     A64,
     {NULL},
     "srv__"
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
    /* collisions */
    {"fs", "read", {"fs__read"}, "fs__read_2"},
    {"fs", "read", {"fs__read", "fs__read_2", "fs__read_3"}, "fs__read_4"},
    {"f s", "read", {"f_s__read"}, "f_s__read_2"},
    {"fs", "read", {"fs__read_2"}, "fs__read"}, /* only the name itself matters */
    {A64, "t", {A64}, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa_2"},
    {"srv",
     A64,
     {"srv__aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
      "srv__aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa_2"},
     "srv__aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa_3"},
};

/* What taken() saw for one row: the names asked about, the last one last. */
struct row_taken {
    const char *const *taken;
    int asked, taken_answers;
    char last[MCP_RPC_NAME_MAX + 1];
};

static bool taken_in_row(void *ctx, const char *name)
{
    struct row_taken *rt = ctx;

    ck_assert_uint_le(strlen(name), MCP_RPC_NAME_MAX);
    rt->asked++;
    snprintf(rt->last, sizeof(rt->last), "%s", name);
    for (size_t i = 0; i < 4 && rt->taken[i]; i++)
        if (!strcmp(rt->taken[i], name)) {
            rt->taken_answers++;
            return true;
        }
    return false;
}

START_TEST(test_tool_name)
{
    struct row_taken rt = {name_rows[_i].taken, 0, 0, ""};
    char out[MCP_RPC_NAME_MAX + 1];

    ck_assert_int_eq(mcp_rpc_tool_name(name_rows[_i].server, name_rows[_i].tool,
                                       taken_in_row, &rt, NULL, out),
                     0);
    ck_assert_str_eq(out, name_rows[_i].want);
    /* Not implied by the row: the name given is the last one taken() was
       asked about (none is handed out unchecked), and the first it said was
       free (every question before it was answered "taken"). */
    ck_assert_str_eq(rt.last, out);
    ck_assert_int_eq(rt.asked, rt.taken_answers + 1);
    for (const char *p = out; *p; p++)
        ck_assert_msg(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                             "0123456789_-",
                             *p),
                      "'%s' has '%c'", out, *p);
}
END_TEST

START_TEST(test_tool_name_no_taken)
{
    char out[MCP_RPC_NAME_MAX + 1];

    ck_assert_int_eq(mcp_rpc_tool_name("a b", "c", NULL, NULL, NULL, out), 0);
    ck_assert_str_eq(out, "a_b__c");
}
END_TEST

/* A taken() that says yes to all but the n-th name it is asked about. */
struct taken_count {
    int calls;
    int free_at; /* 0: all taken */
    char last[MCP_RPC_NAME_MAX + 1];
};

static bool taken_counting(void *ctx, const char *name)
{
    struct taken_count *c = ctx;

    ck_assert_uint_le(strlen(name), MCP_RPC_NAME_MAX);
    snprintf(c->last, sizeof(c->last), "%s", name);
    return ++c->calls != c->free_at;
}

START_TEST(test_tool_name_exhausted)
{
    struct taken_count c = {0, 0, ""};
    char out[MCP_RPC_NAME_MAX + 1] = "untouched";

    ck_assert_int_eq(mcp_rpc_tool_name("s", "t", taken_counting, &c, NULL, out), -EEXIST);
    ck_assert_int_eq(c.calls, MCP_RPC_NAME_TRIES);
    ck_assert_str_eq(c.last, "s__t_1000");
    ck_assert_str_eq(out, "untouched");
}
END_TEST

START_TEST(test_tool_name_last_try)
{
    struct taken_count c = {0, MCP_RPC_NAME_TRIES, ""};
    char out[MCP_RPC_NAME_MAX + 1];
    char want[MCP_RPC_NAME_MAX + 1];

    /* The longest suffix still keeps to 64 bytes. */
    ck_assert_int_eq(mcp_rpc_tool_name(A64, "t", taken_counting, &c, NULL, out), 0);
    snprintf(want, sizeof(want), "%.59s_1000", A64);
    ck_assert_str_eq(out, want);
    ck_assert_uint_eq(strlen(out), MCP_RPC_NAME_MAX);
}
END_TEST

/* Names given so far, for the resume test: taken() looks them up. */
struct given {
    char names[64][MCP_RPC_NAME_MAX + 1];
    int n, asked;
};

static bool taken_given(void *ctx, const char *name)
{
    struct given *g = ctx;

    g->asked++;
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->names[i], name))
            return true;
    return false;
}

/* With `next`, each duplicate starts where the last one stopped: 50 tools of
   one name cost two questions each (the name, its own suffix), not n. */
START_TEST(test_tool_name_resumes)
{
    struct given g = {.n = 0};
    unsigned next = 0;

    for (int i = 0; i < 50; i++) {
        char want[MCP_RPC_NAME_MAX + 1];

        ck_assert_int_eq(
            mcp_rpc_tool_name("s", "t", taken_given, &g, &next, g.names[g.n]), 0);
        if (i)
            snprintf(want, sizeof(want), "s__t_%d", i + 1);
        else
            snprintf(want, sizeof(want), "s__t");
        ck_assert_str_eq(g.names[g.n], want);
        g.n++;
    }
    ck_assert_uint_eq(next, 51);
    ck_assert_int_eq(g.asked, 1 + 49 * 2);
}
END_TEST

START_TEST(test_tool_name_huge)
{
    static char server[100000];
    char out[MCP_RPC_NAME_MAX + 1];

    memset(server, '\xe9', sizeof(server) - 1); /* Latin-1 bytes: stray, one '_' each */
    ck_assert_int_eq(mcp_rpc_tool_name(server, "t", NULL, NULL, NULL, out), 0);
    ck_assert_uint_eq(strlen(out), MCP_RPC_NAME_MAX);
    ck_assert_str_eq(out,
                     "________________________________________________________________");
}
END_TEST

/* ---- tools/call text ------------------------------------------------------ */

static const struct {
    const char *result;
    int rc;
    const char *text; /* rc == 0 */
    bool is_error;
    const char *msg; /* rc != 0 */
} call_rows[] = {
    /* text */
    {"{'content':[{'type':'text','text':'hello'}]}", 0, "hello", false, NULL},
    {"{'content':[{'type':'text','text':'a'},{'type':'text','text':'b'}]}", 0, "a\nb",
     false, NULL},
    {"{'content':[{'type':'text','text':''},{'type':'text','text':''}]}", 0, "\n", false,
     NULL},
    {"{'content':[{'type':'text','text':'caf\\u00e9 \\ud83d\\ude00'}]}", 0,
     "caf\xc3\xa9 \xf0\x9f\x98\x80", false, NULL},
    {"{'content':[{'type':'text','text':'a\\u0000b'}]}", 0,
     "a\xef\xbf\xbd"
     "b",
     false, NULL},
    {"{'content':[{'type':'text','text':'x','annotations':{'audience':['user']},"
     "'_meta':{}}]}",
     0, "x", false, NULL},
    /* image and audio: the decoded size, from the length and the padding */
    {"{'content':[{'type':'image','data':'iVBORw0KGgo=','mimeType':'image/png'}]}", 0,
     "[image/png, 8 bytes]", false, NULL},
    {"{'content':[{'type':'image','data':'QQ==','mimeType':'image/png'}]}", 0,
     "[image/png, 1 byte]", false, NULL},
    {"{'content':[{'type':'image','data':'QUI=','mimeType':'image/gif'}]}", 0,
     "[image/gif, 2 bytes]", false, NULL},
    {"{'content':[{'type':'image','data':'QUJD','mimeType':'image/jpeg'}]}", 0,
     "[image/jpeg, 3 bytes]", false, NULL},
    {"{'content':[{'type':'image','data':'QUJDRA','mimeType':'image/png'}]}", 0,
     "[image/png, 4 bytes]", false, NULL}, /* unpadded */
    {"{'content':[{'type':'image','data':'QUJD\\nREVG\\r\\n','mimeType':'image/png'}]}",
     0, "[image/png, 6 bytes]", false, NULL}, /* MIME line breaks */
    {"{'content':[{'type':'image','data':'','mimeType':'image/png'}]}", 0,
     "[image/png, 0 bytes]", false, NULL},
    {"{'content':[{'type':'audio','data':'UklGRiQAAABXQVZF','mimeType':'audio/wav'}]}", 0,
     "[audio/wav, 12 bytes]", false, NULL},
    {"{'content':[{'type':'image','data':'QUJD'}]}", 0, "[image, 3 bytes]", false, NULL},
    {"{'content':[{'type':'audio','mimeType':'audio/mpeg'}]}", 0, "[audio/mpeg]", false,
     NULL},
    {"{'content':[{'type':'image','data':5,'mimeType':7}]}", 0, "[image]", false, NULL},
    /* resource links and embedded resources */
    {"{'content':[{'type':'resource_link','uri':'file:///a.txt','name':'a.txt'}]}", 0,
     "[resource a.txt: file:///a.txt]", false, NULL},
    {"{'content':[{'type':'resource_link','uri':'file:///a.txt'}]}", 0,
     "[resource: file:///a.txt]", false, NULL},
    {"{'content':[{'type':'resource_link','uri':'file:///a.txt','name':''}]}", 0,
     "[resource: file:///a.txt]", false, NULL},
    {"{'content':[{'type':'resource_link','name':'a'}]}", 0, "[resource_link content]",
     false, NULL},
    {"{'content':[{'type':'resource','resource':{'uri':'test://1','mimeType':"
     "'text/plain','text':'the text'}}]}",
     0, "the text", false, NULL},
    {"{'content':[{'type':'resource','resource':{'uri':'test://2','mimeType':"
     "'application/octet-stream','blob':'AAECAw=='}}]}",
     0, "[resource test://2, application/octet-stream, 4 bytes]", false, NULL},
    {"{'content':[{'type':'resource','resource':{'uri':'test://3','blob':'AA=='}}]}", 0,
     "[resource test://3, 1 byte]", false, NULL},
    {"{'content':[{'type':'resource','resource':{'uri':'test://4'}}]}", 0,
     "[resource test://4]", false, NULL},
    {"{'content':[{'type':'resource','resource':'test://5'}]}", 0, "[resource content]",
     false, NULL},
    {"{'content':[{'type':'resource'}]}", 0, "[resource content]", false, NULL},
    /* unknown and malformed parts */
    {"{'content':[{'type':'video','data':'x'}]}", 0, "[video content]", false, NULL},
    {"{'content':[{'type':'text'}]}", 0, "[text content]", false, NULL},
    {"{'content':[{'type':'text','text':5}]}", 0, "[text content]", false, NULL},
    {"{'content':[{'text':'no type'}]}", 0, "[malformed content]", false, NULL},
    {"{'content':[{'type':7}]}", 0, "[malformed content]", false, NULL},
    {"{'content':['text',null,3]}", 0,
     "[malformed content]\n[malformed content]\n[malformed content]", false, NULL},
    {"{'content':[{'type':'t\\u0000x'}]}", 0, "[malformed content]", false, NULL},
    /* mixed, in order */
    {"{'content':[{'type':'text','text':'Here:'},{'type':'image','data':'QUJD',"
     "'mimeType':'image/png'},{'type':'resource_link','uri':'u:1','name':'n'},"
     "{'type':'text','text':'done'}]}",
     0, "Here:\n[image/png, 3 bytes]\n[resource n: u:1]\ndone", false, NULL},
    /* structuredContent stands in only when there is no text part */
    {"{'content':[],'structuredContent':{'temperature':22.5,'city':'Paris'}}", 0,
     "{\"temperature\":22.5,\"city\":\"Paris\"}", false, NULL},
    {"{'structuredContent':{'a':[1,{'b':null}]}}", 0, "{\"a\":[1,{\"b\":null}]}", false,
     NULL},
    {"{'content':[{'type':'text','text':'{\\'a\\':1}'}],'structuredContent':{'a':1}}", 0,
     "{\"a\":1}", false, NULL}, /* the text part wins over structuredContent */
    {"{'content':[{'type':'image','data':'QUJD','mimeType':'image/png'}],"
     "'structuredContent':{'n':1}}",
     0, "{\"n\":1}\n[image/png, 3 bytes]", false, NULL},
    {"{'content':[{'type':'text','text':5}],'structuredContent':{'n':1}}", 0,
     "{\"n\":1}\n[text content]", false, NULL},
    {"{'content':'oops','structuredContent':{'n':1}}", 0, "{\"n\":1}", false, NULL},
    {"{'content':[],'structuredContent':[1,'x']}", 0, "[1,\"x\"]", false, NULL},
    {"{'content':[],'structuredContent':'s'}", 0, "\"s\"", false, NULL},
    {"{'content':[],'structuredContent':null}", 0, "", false, NULL},
    /* empty results */
    {"{}", 0, "", false, NULL},
    {"{'content':[]}", 0, "", false, NULL},
    {"{'content':null}", 0, "", false, NULL},
    /* isError */
    {"{'content':[{'type':'text','text':'no such file'}],'isError':true}", 0,
     "no such file", true, NULL},
    {"{'content':[{'type':'text','text':'fine'}],'isError':false}", 0, "fine", false,
     NULL},
    {"{'content':[{'type':'text','text':'fine'}],'isError':'true'}", 0, "fine", false,
     NULL},
    {"{'content':[{'type':'text','text':'fine'}],'isError':1}", 0, "fine", false, NULL},
    {"{'isError':true}", 0, "", true, NULL},
    /* not a result */
    {"{'content':{'type':'text','text':'x'}}", -EPROTO, NULL, false,
     "'content' is not an array"},
    {"{'content':'x'}", -EPROTO, NULL, false, "'content' is not an array"},
    {"[]", -EPROTO, NULL, false, "tools/call result: not an object"},
    {"'text'", -EPROTO, NULL, false, "not an object"},
    {"null", -EPROTO, NULL, false, "not an object"},
};

START_TEST(test_call_text)
{
    json_t *r = J(call_rows[_i].result);
    char *text = (char *)"untouched";
    bool is_error = !call_rows[_i].is_error;
    struct rx_error err = {""};
    int rc = mcp_rpc_call_text(r, &text, &is_error, &err);

    ck_assert_msg(rc == call_rows[_i].rc, "%s: rc %d (%s)", call_rows[_i].result, rc,
                  err.text);
    if (rc) {
        ck_assert_str_eq(text, "untouched");
        ck_assert_int_eq(is_error, !call_rows[_i].is_error);
        ck_assert_msg(strstr(err.text, call_rows[_i].msg), "'%s' lacks '%s'", err.text,
                      call_rows[_i].msg);
    } else {
        ck_assert_ptr_nonnull(text);
        ck_assert_msg(!strcmp(text, call_rows[_i].text), "%s: got '%s', want '%s'",
                      call_rows[_i].result, text, call_rows[_i].text);
        ck_assert_int_eq(is_error, call_rows[_i].is_error);
        free(text);
    }
    json_decref(r);
}
END_TEST

/* The optional outputs, and a result with embedded unicode type names. */
START_TEST(test_call_text_optional)
{
    json_t *r = J("{'content':[{'type':'\\u00e9t\\u00e9'}],'isError':true}");
    char *text = NULL;

    ck_assert_int_eq(mcp_rpc_call_text(r, &text, NULL, NULL), 0);
    ck_assert_str_eq(text, "[\xc3\xa9t\xc3\xa9 content]");
    free(text);
    json_decref(r);
}
END_TEST

/* A long unknown type is quoted cut; a long text is whole. */
START_TEST(test_call_text_long)
{
    static char big[300000];
    char *text = NULL;
    json_t *r;

    memset(big, 'y', sizeof(big) - 1);
    r = json_pack("{s:[{s:s, s:s}, {s:s}]}", "content", "type", "text", "text", big,
                  "type", big);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(mcp_rpc_call_text(r, &text, NULL, NULL), 0);
    ck_assert_uint_eq(strlen(text), sizeof(big) - 1 + 1 + 1 + 64 + 9);
    ck_assert_int_eq(memcmp(text, big, sizeof(big) - 1), 0);
    free(text);
    json_decref(r);
}
END_TEST

/* ---- out of memory in the readers ---------------------------------------- */

static const char *const oom_page =
    "{'tools':[{'name':'a','description':'d','inputSchema':{'type':'object','properties':"
    "{'x':{'type':'string'}}},'annotations':{'readOnlyHint':true}},{'name':'b'},"
    "{'bad':1}],'nextCursor':'next'}";

START_TEST(test_tools_page_oom)
{
    json_t *r = J(oom_page), *tools = J("[1]"), *cursor = NULL;
    size_t skipped = 999;
    int rc = -1;

    for (long n = 1; n < CHAOS_MAX && rc; n++) {
        chaos_on(n);
        rc = mcp_rpc_tools_page(r, tools, &cursor, &skipped, NULL);
        chaos_off();
        if (rc) {
            ck_assert_int_eq(rc, -ENOMEM);
            ck_assert_uint_eq(json_array_size(tools), 1);
            ck_assert_ptr_null(cursor);
            ck_assert_uint_eq(skipped, 999);
        }
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(json_array_size(tools), 3);
    ck_assert_uint_eq(skipped, 1);
    assert_json(cursor, "'next'", "cursor");
    json_decref(tools);
    json_decref(r);
}
END_TEST

static const char *const oom_calls[] = {
    ("{'content':[{'type':'text','text':'a'},{'type':'image','data':'QUJD','mimeType':"
     "'image/png'},{'type':'resource_link','uri':'u','name':'n'},{'type':'resource',"
     "'resource':{'uri':'v','blob':'AA=='}},{'type':'x'}]}"),
    ("{'content':[{'type':'audio','data':'QUJD'}],"
     "'structuredContent':{'a':[1,{'b':'c'}]}}"),
    "{}",
};

START_TEST(test_call_text_oom)
{
    json_t *r = J(oom_calls[_i]);
    char *text = (char *)"untouched";
    bool is_error = true;
    int rc = -1;

    for (long n = 1; n < CHAOS_MAX && rc; n++) {
        chaos_on(n);
        rc = mcp_rpc_call_text(r, &text, &is_error, NULL);
        chaos_off();
        if (rc) {
            ck_assert_int_eq(rc, -ENOMEM);
            ck_assert_str_eq(text, "untouched");
            ck_assert_int_eq(is_error, true);
        }
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(is_error, false);
    free(text);
    json_decref(r);
}
END_TEST

START_TEST(test_reply_oom)
{
    json_t *req = J("{'jsonrpc':'2.0','id':'q','method':'elicitation/create'}");
    json_t *got = NULL;

    for (long n = 1; n < CHAOS_MAX && !got; n++) {
        chaos_on(n);
        got = mcp_rpc_reply(req);
        chaos_off();
    }
    assert_json(got,
                "{'jsonrpc':'2.0','id':'q','error':{'code':-32601,"
                "'message':'method not found: \\u0027elicitation/create\\u0027'}}",
                "reply");
    json_decref(req);
}
END_TEST

Suite *mcp_rpc_suite(void)
{
    Suite *s = suite_create("mcp_rpc");
    TCase *tc;

    tc = tcase_create("versions");
    tcase_add_loop_test(tc, test_version, 0, N_ROWS(version_rows));
    suite_add_tcase(s, tc);

    tc = tcase_create("build");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_build, 0, N_ROWS(build_rows));
    tcase_add_loop_test(tc, test_build_oom, 0, N_ROWS(build_rows));
    tcase_add_test(tc, test_result_copies_id);
    suite_add_tcase(s, tc);

    tc = tcase_create("reply");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_reply, 0, N_ROWS(reply_rows));
    tcase_add_test(tc, test_reply_long_method);
    tcase_add_test(tc, test_reply_long_unicode_method);
    tcase_add_test(tc, test_reply_oom);
    suite_add_tcase(s, tc);

    tc = tcase_create("initialize");
    tcase_add_loop_test(tc, test_initialize, 0, N_ROWS(init_rows));
    tcase_add_test(tc, test_initialize_small_buffer);
    tcase_add_test(tc, test_initialize_huge_version);
    suite_add_tcase(s, tc);

    tc = tcase_create("classify");
    tcase_add_loop_test(tc, test_classify, 0, N_ROWS(classify_rows));
    tcase_add_test(tc, test_classify_null);
    tcase_add_test(tc, test_classify_batch_elements);
    suite_add_tcase(s, tc);

    tc = tcase_create("error_text");
    tcase_add_loop_test(tc, test_error_text, 0, N_ROWS(error_rows));
    tcase_add_test(tc, test_error_text_long);
    suite_add_tcase(s, tc);

    tc = tcase_create("progress");
    tcase_add_loop_test(tc, test_progress_round_trip, 0, N_ROWS(token_ids));
    tcase_add_loop_test(tc, test_progress_foreign, 0, N_ROWS(foreign_tokens));
    tcase_add_test(tc, test_progress_null);
    suite_add_tcase(s, tc);

    tc = tcase_create("tools_page");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_tools_page, 0, N_ROWS(page_rows));
    tcase_add_test(tc, test_tools_page_copies);
    tcase_add_test(tc, test_tools_page_skips_nul);
    tcase_add_test(tc, test_tools_page_oom);
    suite_add_tcase(s, tc);

    tc = tcase_create("tool_name");
    tcase_add_loop_test(tc, test_tool_name, 0, N_ROWS(name_rows));
    tcase_add_test(tc, test_tool_name_no_taken);
    tcase_add_test(tc, test_tool_name_exhausted);
    tcase_add_test(tc, test_tool_name_last_try);
    tcase_add_test(tc, test_tool_name_huge);
    tcase_add_test(tc, test_tool_name_resumes);
    suite_add_tcase(s, tc);

    tc = tcase_create("call_text");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_call_text, 0, N_ROWS(call_rows));
    tcase_add_test(tc, test_call_text_optional);
    tcase_add_test(tc, test_call_text_long);
    tcase_add_loop_test(tc, test_call_text_oom, 0, N_ROWS(oom_calls));
    suite_add_tcase(s, tc);

    return s;
}
