/*
 * check_json - rx_json_depth: the bound every outside JSON text passes
 * before jansson sees it (issue 12: nesting that overflowed an effect stack).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

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

Suite *json_suite(void);
Suite *json_suite(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("depth");

    tcase_add_loop_test(tc, test_depth_table, 0, sizeof(rows) / sizeof(rows[0]));
    tcase_add_test(tc, test_deep_text_is_refused_without_recursion);
    suite_add_tcase(s, tc);
    return s;
}
