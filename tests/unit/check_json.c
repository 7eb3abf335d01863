/*
 * check_json - rx_json_depth: the bound every outside JSON text passes
 * before jansson sees it (issue 12: nesting that overflowed an effect stack);
 * rx_json_is_object_text: one JSON object, as jansson would load it, checked
 * without allocating (a user's edited tool arguments, SPEC 3.6).
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "state_machine/rx_json.h"

static const struct {
    const char *text;
    size_t depth;
} rows[] = {
    {"", 0},
    {"42", 0},
    {"\"[[[\"", 0},    /* brackets inside a string do not count */
    {"\"a\\\"[\"", 0}, /* nor after an escaped quote */
    {"[]", 1},
    {"{\"a\":[1,{\"b\":[]}]}", 4},
    {"[[],[[]]]", 3},
    {"{\"k\":\"}}}\",\"v\":[{}]}", 3}, /* closers in strings do not count down */
    {"]]]][", 1},                      /* stray closers never go below zero */
    {"[[[", 3},                        /* unterminated: still a bound */
    {"\"\\\\\"[", 1},                  /* an escaped backslash ends the escape */
};

START_TEST(test_depth_table)
{
    ck_assert_uint_eq(rx_json_depth(rows[_i].text, strlen(rows[_i].text)),
                      rows[_i].depth);
}
END_TEST

/* The attack of issue 12: arguments nested 100 000 deep are measured, not parsed. */
START_TEST(test_deep_text_is_refused_without_recursion)
{
    size_t n = 100000;
    char *t = malloc(2 * n + 1);

    ck_assert_ptr_nonnull(t);
    memset(t, '[', n);
    memset(t + n, ']', n);
    t[2 * n] = '\0';
    ck_assert_uint_eq(rx_json_depth(t, 2 * n), n);
    ck_assert(!rx_json_depth_ok(t));
    t[RX_JSON_DEPTH_MAX] = '\0'; /* exactly the limit: accepted */
    ck_assert(rx_json_depth_ok(t));
    free(t);
}
END_TEST

static const struct {
    const char *text;
    bool object;
} object_rows[] = {
    {"{}", true},
    {" \t\r\n{ } \n", true},
    {"{\"a\":1}", true},
    {"{\"a\":[1,-2,3.5,-0.25e+3,1E9,0,true,false,null,\"s\",{},[]]}", true},
    {"{\"\":{\"\":{}}}", true},
    {"{\"k\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\":\"\\ud83d\\ude00\"}", true},
    {"{\"a\":\"caf\xc3\xa9\"}", true},
    {"", false},
    {"   ", false},
    {"[]", false},
    {"[{}]", false},
    {"1", false},
    {"\"{}\"", false},
    {"null", false},
    {"{", false},
    {"}", false},
    {"{}}", false},
    {"{} {}", false},
    {"{}x", false},
    {"{\"a\"}", false},
    {"{\"a\":}", false},
    {"{\"a\" 1}", false},
    {"{a:1}", false},
    {"{'a':1}", false},
    {"{\"a\":1,}", false},
    {"{,\"a\":1}", false},
    {"{\"a\":[1,]}", false},
    {"{\"a\":[,1]}", false},
    {"{\"a\":[1 2]}", false},
    {"{\"a\":01}", false},
    {"{\"a\":-}", false},
    {"{\"a\":1.}", false},
    {"{\"a\":.5}", false},
    {"{\"a\":1e}", false},
    {"{\"a\":+1}", false},
    {"{\"a\":tru}", false},
    {"{\"a\":True}", false},
    {"{\"a\":nul}", false},
    {"{\"a\":\"x}", false},
    {"{\"a\":\"\\x\"}", false},
    {"{\"a\":\"\\u12\"}", false},
    {"{\"a\":\"\\u0000\"}", false},
    {"{\"a\":\"\\ud83d\"}", false},
    {"{\"a\":\"\\ude00\"}", false},
    {"{\"a\":\"\\ud83d\\u0041\"}", false},
    {"{\"a\":\"tab\there\"}", false},
    {"{\"a\":[}", false},
    {"{\"a\":{]}", false},
    {"{\"a\":[1}]", false},
};

/* Each row, and jansson agrees with it. */
START_TEST(test_object_table)
{
    const char *t = object_rows[_i].text;
    json_t *j = json_loads(t, JSON_DECODE_ANY, NULL);

    ck_assert_msg(rx_json_is_object_text(t, strlen(t)) == object_rows[_i].object, "%s",
                  t);
    ck_assert_msg(json_is_object(j) == object_rows[_i].object, "jansson: %s", t);
    json_decref(j);
}
END_TEST

/* `levels` objects nested in each other, alternating with arrays. */
static char *nested(int levels)
{
    char *t = malloc(8 * (size_t)levels + 2), *p = t;

    ck_assert_ptr_nonnull(t);
    for (int i = 0; i < levels; i++)
        p += sprintf(p, i % 2 ? "[" : "{\"a\":");
    *p++ = '1';
    for (int i = levels; i-- > 0;)
        *p++ = i % 2 ? ']' : '}';
    *p = '\0';
    return t;
}

/* Nesting up to the limit is an object; one more level is refused. */
START_TEST(test_object_depth)
{
    char *ok = nested(RX_JSON_DEPTH_MAX), *deep = nested(RX_JSON_DEPTH_MAX + 1);
    json_t *j = json_loads(ok, 0, NULL);

    ck_assert_ptr_nonnull(j);
    ck_assert(rx_json_is_object_text(ok, strlen(ok)));
    ck_assert(!rx_json_is_object_text(deep, strlen(deep)));
    json_decref(j);
    free(ok);
    free(deep);
}
END_TEST

/* One random edit of the n bytes of t (kept NUL-terminated): a byte
   replaced by one of the alphabet's, a byte deleted, or the text cut. */
static void mutate(char *t, size_t *n, uint64_t *r, const char *alphabet, size_t letters)
{
    *r ^= *r << 13;
    *r ^= *r >> 7;
    *r ^= *r << 17;
    switch (*r % 3) {
    case 0: /* replace */
        t[(*r >> 8) % *n] = alphabet[(*r >> 20) % letters];
        break;
    case 1: /* delete */
        if (*n > 1) {
            size_t at = (*r >> 8) % *n;

            memmove(t + at, t + at + 1, *n - at);
            (*n)--;
        }
        break;
    default: /* truncate */
        *n = 1 + (*r >> 8) % *n;
        t[*n] = '\0';
    }
}

/* Mutations of valid objects: the checker and jansson agree on every one
   (a differential test: jansson is the reference the tools parse with). */
START_TEST(test_object_agrees_with_jansson)
{
    static const char *const seeds[] = {
        "{\"a\":[1,{\"b\":\"c\\n\"},-2.5e3,true,null],\"d\":{}}",
        "{\"k\":\"\\u00e9\\ud83d\\ude00\",\"n\":[[],[{}]],\"f\":false}",
    };
    static const char alphabet[] = "{}[]\",:\\ 0123456789.-+eEtrufalsn\tu";
    uint64_t r = 88172645463325252ull;

    for (int round = 0; round < 20000; round++) {
        char t[128];
        size_t n;
        json_t *j;
        json_error_t e;

        snprintf(t, sizeof(t), "%s", seeds[round % 2]);
        n = strlen(t);
        for (int k = 0; k < 1 + round % 3; k++)
            mutate(t, &n, &r, alphabet, sizeof(alphabet) - 1);
        j = json_loads(t, JSON_DECODE_ANY, &e);
        /* The one documented difference: a number too big for jansson. */
        if (!j && (strstr(e.text, "overflow") || strstr(e.text, "too big")))
            continue;
        ck_assert_msg(rx_json_is_object_text(t, n) == json_is_object(j), "'%s': %d", t,
                      json_is_object(j));
        json_decref(j);
    }
}
END_TEST

/* ---- rx_json_parse: the tree jansson would build, and the same refusals --- */

/* rx_json_parse's tree or NULL, its code checked: 0 exactly when there is a
   tree, else -EINVAL (the tests have memory). */
static json_t *parse(const char *t, size_t n, unsigned flags, struct rx_error *err)
{
    json_t *j = json_null(); /* any non-NULL: the parser must set it */
    int rc = rx_json_parse(t, n, flags, &j, err);

    ck_assert_msg(rc == 0 || rc == -EINVAL, "rc %d", rc);
    ck_assert_msg((rc == 0) == (j != NULL), "rc %d with%s a tree", rc, j ? "" : "out");
    return j;
}

/* Both parsers on the same bytes (flags: any value at the top): they agree
   on whether the text is JSON, and on the tree when it is. */
static void assert_agrees(const char *t, size_t n)
{
    struct rx_error why;
    json_t *mine = parse(t, n, RX_JSON_ANY, &why);
    json_t *ref = json_loadb(t, n, JSON_DECODE_ANY, NULL);

    /* jansson's lexer skips a NUL byte after a number or a literal; a NUL is
       never JSON, and rx_json_parse refuses it wherever it stands. */
    if (!mine && ref && memchr(t, '\0', n)) {
        json_decref(ref);
        return;
    }
    ck_assert_msg(!mine == !ref, "'%.*s': rx_json_parse %s, jansson %s", (int)n, t,
                  mine ? "accepts" : why.text, ref ? "accepts" : "refuses");
    if (mine)
        ck_assert_msg(json_equal(mine, ref), "'%.*s': different trees", (int)n, t);
    json_decref(mine);
    json_decref(ref);
}

static const char *const parse_rows[] = {
    "{}",
    "[]",
    " \t\r\n[ ] \n",
    "0",
    "-0",
    "1",
    "-1",
    "42",
    "3.5",
    "-0.25e+3",
    "1E9",
    "1e-400",
    "1e400",
    "-1e400",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "-9223372036854775809",
    "99999999999999999999.5",
    "0.000000000000000000000000000000000000000000000000000000000000000000000000001",
    "123456789012345678901234567890e-10",
    "true",
    "false",
    "null",
    "\"\"",
    "\"s\"",
    "\"k\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u20AC\"",
    "\"\\ud83d\\ude00\"",
    "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"",
    "\"\x7f\"",
    "{\"a\":1,\"a\":[2]}", /* the last of equal keys wins */
    "{\"\":{\"\":{}}}",
    "[1,-2,3.5,true,false,null,\"s\",{},[]]",
    "{\"a\":[1,{\"b\":\"c\\n\"},-2.5e3,true,null],\"d\":{}}",
    /* refused */
    "",
    " ",
    "{",
    "}",
    "[",
    "]",
    "{}}",
    "[]]",
    "{} {}",
    "{}x",
    "{\"a\"}",
    "{\"a\":}",
    "{\"a\" 1}",
    "{a:1}",
    "{'a':1}",
    "{\"a\":1,}",
    "{,\"a\":1}",
    "[1,]",
    "[,1]",
    "[1 2]",
    "01",
    "-",
    "-a",
    "1.",
    ".5",
    "1e",
    "1e+",
    "+1",
    "tru",
    "True",
    "nul",
    "truex",
    "[true1]",
    "\"x",
    "\"\\x\"",
    "\"\\u12\"",
    "\"\\u0000\"",
    "\"\\ud83d\"",
    "\"\\ude00\"",
    "\"\\ud83d\\u0041\"",
    "\"\\ud83d\\\"",
    "\"tab\there\"",
    "\"nl\n\"",
    "[}",
    "{]",
    "[1}]",
    "\"\\\"",
    "\"\xc3\"",
    "\"\xc3(\"",
    "\"\xc0\xaf\"",
    "\"\xe0\x80\xaf\"",
    "\"\xed\xa0\x80\"",
    "\"\xf4\x90\x80\x80\"",
    "\"\xf5\x80\x80\x80\"",
    "\"\xff\"",
    "\"\x80\"",
    "[1]\x01",
    "[\"a\":1]",
    "{\"a\":1:2}",
    "{1:2}",
    "{\"a\",1}",
};

START_TEST(test_parse_table)
{
    assert_agrees(parse_rows[_i], strlen(parse_rows[_i]));
}
END_TEST

/* Without RX_JSON_ANY the top is an object or an array, as jansson's flag 0. */
START_TEST(test_parse_top)
{
    static const char *const scalars[] = {"1", "\"s\"", "null", "", "  "};
    struct rx_error why;
    json_t *j;

    for (size_t i = 0; i < sizeof(scalars) / sizeof(scalars[0]); i++) {
        ck_assert_ptr_null(parse(scalars[i], strlen(scalars[i]), 0, &why));
        ck_assert_ptr_null(json_loads(scalars[i], 0, NULL));
        ck_assert_msg(strstr(why.text, "'[' or '{' expected"), "%s", why.text);
    }
    j = parse(" [1] ", 5, 0, NULL);
    ck_assert(json_is_array(j) && json_array_size(j) == 1);
    json_decref(j);
}
END_TEST

/* The length bounds the text: it needs no terminator, and a NUL is an error. */
START_TEST(test_parse_length)
{
    json_t *j = parse("[12]garbage", 4, 0, NULL);

    ck_assert(json_is_array(j));
    ck_assert_int_eq(json_integer_value(json_array_get(j, 0)), 12);
    json_decref(j);
    j = parse("[1.5e3]", 6, 0, NULL); /* cut before ']' */
    ck_assert_ptr_null(j);
    j = parse("12345", 3, RX_JSON_ANY, NULL); /* a number cut short */
    ck_assert_int_eq(json_integer_value(j), 123);
    json_decref(j);
    assert_agrees("[1]\0", 4);
    assert_agrees("[\"a\0b\"]", 7);
    assert_agrees("\0", 1);
    ck_assert_ptr_null(parse(NULL, 0, RX_JSON_ANY, NULL)); /* NULL reads as empty */
}
END_TEST

/* Integers at the edges of int64 stay integers, one past them is refused;
   a fraction or exponent makes a real. */
/* RX_JSON_ALLOW_NUL lets "\u0000" into strings and keys, and nothing else. */
START_TEST(test_parse_allow_nul)
{
    static const char text[] = "{\"a\\u0000\":\"x\\u0000y\"}";
    json_t *v = NULL;
    const char *key;
    json_t *val;

    ck_assert_int_eq(rx_json_parse(text, strlen(text), 0, &v, NULL), -EINVAL);
    ck_assert_int_eq(rx_json_parse(text, strlen(text), RX_JSON_ALLOW_NUL, &v, NULL), 0);
    json_object_foreach(v, key, val)
    {
        ck_assert_uint_eq(json_object_iter_key_len(json_object_key_to_iter(key)), 2);
        ck_assert_uint_eq(json_string_length(val), 3);
        ck_assert_int_eq(memcmp(json_string_value(val), "x\0y", 3), 0);
    }
    json_decref(v);
    /* A NUL byte in the text itself is still refused. */
    ck_assert_int_eq(rx_json_parse("{\"a\":\"x\0\"}", 8, RX_JSON_ALLOW_NUL, &v, NULL),
                     -EINVAL);
}
END_TEST

START_TEST(test_parse_numbers)
{
    const char *t = "[9223372036854775807,-9223372036854775808,-0,1.0,1e2]";
    json_t *j = parse(t, strlen(t), 0, NULL);

    ck_assert_ptr_nonnull(j);
    ck_assert(json_integer_value(json_array_get(j, 0)) == INT64_MAX);
    ck_assert(json_integer_value(json_array_get(j, 1)) == INT64_MIN);
    ck_assert(json_is_integer(json_array_get(j, 2)));
    ck_assert(json_is_real(json_array_get(j, 3)));
    ck_assert(json_real_value(json_array_get(j, 4)) == 100.0);
    json_decref(j);
}
END_TEST

/* The error says where: line and column of the offending byte. */
START_TEST(test_parse_error_position)
{
    struct rx_error why;

    ck_assert_ptr_null(parse("{\n  \"a\": x}", 11, 0, &why));
    ck_assert_str_eq(why.text, "line 2, column 8: invalid token");
    ck_assert_ptr_null(parse("[1,", 3, 0, &why));
    ck_assert_str_eq(why.text, "line 1, column 4: unexpected end of text");
    ck_assert_ptr_null(parse("{not json", 9, 0, NULL)); /* err may be NULL */
}
END_TEST

/* Nesting up to the limit parses; one more level, or 100 000, is refused
   without recursion. */
START_TEST(test_parse_depth)
{
    char *ok = nested(RX_JSON_DEPTH_MAX), *deep = nested(RX_JSON_DEPTH_MAX + 1);
    size_t n = 100000;
    char *t = malloc(n + 1);
    struct rx_error why;
    json_t *j = parse(ok, strlen(ok), 0, NULL), *ref = json_loads(ok, 0, NULL);

    ck_assert(j && json_equal(j, ref));
    ck_assert_ptr_null(parse(deep, strlen(deep), 0, &why));
    ck_assert_msg(strstr(why.text, "nested deeper than 64 levels"), "%s", why.text);
    ck_assert_ptr_nonnull(t);
    memset(t, '[', n);
    ck_assert_ptr_null(parse(t, n, 0, NULL));
    json_decref(j);
    json_decref(ref);
    free(t);
    free(ok);
    free(deep);
}
END_TEST

/* Mutations of valid texts, with bytes of broken UTF-8, control characters
   and NULs among the replacements: the two parsers agree on every one. */
START_TEST(test_parse_agrees_with_jansson)
{
    static const char *const seeds[] = {
        "{\"a\":[1,{\"b\":\"c\\n\"},-2.5e3,true,null],\"d\":{}}",
        "{\"k\":\"\\u00e9\\ud83d\\ude00\",\"n\":[[],[{}]],\"f\":false}",
        "[\"caf\xc3\xa9\",\"\xe2\x82\xac\xf0\x9f\x98\x80\",12345678901234567,0.1]",
        "{\"type\":\"user-send-message\",\"messageId\":\"m1\",\"content\":\"hi\"}",
    };
    static const char alphabet[] = "{}[]\",:\\ 0123456789.-+eEtrufalsn\tu"
                                   "\xc3\xa9\xe2\x82\xf0\x9f\xed\xa0\xff\x80\x01\n\0";
    uint64_t r = 0x9E3779B97F4A7C15ull;

    for (int round = 0; round < 40000; round++) {
        char t[160];
        size_t n;

        n = (size_t)snprintf(t, sizeof(t), "%s", seeds[round % 4]);
        for (int k = 0; k < 1 + round % 3; k++)
            mutate(t, &n, &r, alphabet, sizeof(alphabet) - 1);
        assert_agrees(t, n);
    }
}
END_TEST

Suite *json_suite(void);
Suite *json_suite(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("depth");

    tcase_add_loop_test(tc, test_depth_table, 0, sizeof(rows) / sizeof(rows[0]));
    tcase_add_test(tc, test_deep_text_is_refused_without_recursion);
    suite_add_tcase(s, tc);

    tc = tcase_create("object");
    tcase_add_loop_test(tc, test_object_table, 0,
                        sizeof(object_rows) / sizeof(object_rows[0]));
    tcase_add_test(tc, test_object_depth);
    tcase_add_test(tc, test_object_agrees_with_jansson);
    suite_add_tcase(s, tc);

    tc = tcase_create("parse");
    tcase_add_loop_test(tc, test_parse_table, 0,
                        sizeof(parse_rows) / sizeof(parse_rows[0]));
    tcase_add_test(tc, test_parse_top);
    tcase_add_test(tc, test_parse_length);
    tcase_add_test(tc, test_parse_allow_nul);
    tcase_add_test(tc, test_parse_numbers);
    tcase_add_test(tc, test_parse_error_position);
    tcase_add_test(tc, test_parse_depth);
    tcase_add_test(tc, test_parse_agrees_with_jansson);
    suite_add_tcase(s, tc);
    return s;
}
