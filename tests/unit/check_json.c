/*
 * check_json - rx_json_depth: the bound every outside JSON text passes
 * before jansson sees it (issue 12: nesting that overflowed an effect stack);
 * rx_json_is_object_text: one JSON object, as jansson would load it, checked
 * without allocating (a user's edited tool arguments, SPEC 3.6).
 */
#include <check.h>
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
        for (int k = 0; k < 1 + round % 3; k++) {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            switch (r % 3) {
            case 0: /* replace */
                t[(r >> 8) % n] = alphabet[(r >> 20) % (sizeof(alphabet) - 1)];
                break;
            case 1: /* delete */
                if (n > 1) {
                    size_t at = (r >> 8) % n;

                    memmove(t + at, t + at + 1, n - at);
                    n--;
                }
                break;
            default: /* truncate */
                n = 1 + (r >> 8) % n;
                t[n] = '\0';
            }
        }
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
    return s;
}
