/*
 * check_calculator - the safe evaluator behind the `calculator` tool:
 * precedence, associativity, signs, parentheses, errors, formatting.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "effects/calculator.h"

Suite *calculator_suite(void);

static const struct {
    const char *expr;
    double want;
} good[] = {
    {"1", 1},        {"2+3", 5},       {" 2 + 3 ", 5},   {"2+3*4", 14},
    {"(2+3)*4", 20}, {"12*(3+4)", 84}, {"10-4-3", 3}, /* left-associative */
    {"100/10/5", 2},                                  /* left-associative */
    {"2^3^2", 512},                                   /* right-associative */
    {"(2^3)^2", 64}, {"-2^2", -4}, /* unary minus binds looser than ^ */
    {"(-2)^2", 4},   {"2^-1", 0.5},    {"-3", -3},       {"--3", 3},
    {"+3", 3},       {"-(2+3)", -5},   {"3*-2", -6},     {"7%3", 1},
    {"-7%3", -1},                  /* C fmod: sign of the dividend */
    {"7.5%2", 1.5},  {"2*3%4", 2}, /* same level, left to right */
    {"1.5e3", 1500}, {"2E-2", 0.02},   {".5+.25", 0.75}, {"1.", 1},
    {"7/2", 3.5},    {"((((1))))", 1}, {"\t1\n+\r2", 3}, {"0.1+0.2", 0.1 + 0.2},
};

START_TEST(test_good)
{
    double v = -12345;
    struct rx_error err = {""};

    ck_assert_msg(calculator_eval(good[_i].expr, &v, &err) == 0, "'%s': %s",
                  good[_i].expr, err.text);
    ck_assert_msg(fabs(v - good[_i].want) < 1e-12, "'%s' = %.17g, want %.17g",
                  good[_i].expr, v, good[_i].want);
}
END_TEST

static const struct {
    const char *expr;
    int rc;
    const char *msg; /* a substring of the error message */
} bad[] = {
    {"", -EINVAL, "empty expression"},
    {"   ", -EINVAL, "empty expression"},
    {"7/0", -EDOM, "division by zero"},
    {"7/(3-3)", -EDOM, "division by zero"},
    {"7%0", -EDOM, "modulo by zero"},
    {"2+", -EINVAL, "unexpected end"},
    {"2 3", -EINVAL, "unexpected '3' at position 3"},
    {"2+3)", -EINVAL, "unbalanced ')' at position 4"},
    {"(2+3", -EINVAL, "missing ')' for '(' at position 1"},
    {"()", -EINVAL, "expected a number before ')'"},
    {"abc", -EINVAL, "unexpected 'a' at position 1"},
    {"2+x", -EINVAL, "unexpected 'x' at position 3"},
    {"0x10", -EINVAL, "unexpected 'x'"},
    {"inf", -EINVAL, "unexpected 'i'"},
    {"nan", -EINVAL, "unexpected 'n'"},
    {"1e", -EINVAL, "malformed exponent"},
    {"1e+", -EINVAL, "malformed exponent"},
    {"1..2", -EINVAL, "unexpected '.'"},
    {"2**3", -EINVAL, "unexpected '*'"},
    {"system(\"ls\")", -EINVAL, "unexpected 's'"},
    {"1e999", -EDOM, "number out of range"},
    {"10^400", -EDOM, "power is too large"},
    {"(-8)^0.5", -EDOM, "power is undefined"},
    {"0^-1", -EDOM, "power is too large"},
    {"1e308*10", -EDOM, "result is too large"},
    {"2\xc3\xa9", -EINVAL, "unexpected character at position 2"},
};

START_TEST(test_bad)
{
    double v = 42;
    struct rx_error err = {""};

    ck_assert_int_eq(calculator_eval(bad[_i].expr, &v, &err), bad[_i].rc);
    ck_assert_msg(strstr(err.text, bad[_i].msg), "'%s': got \"%s\", want \"%s\"",
                  bad[_i].expr, err.text, bad[_i].msg);
    ck_assert(v == 42); /* output untouched on error */
}
END_TEST

START_TEST(test_null_err_buffer)
{
    double v;

    ck_assert_int_eq(calculator_eval("1/0", &v, NULL), -EDOM);
    ck_assert_int_eq(calculator_eval(NULL, &v, NULL), -EINVAL);
    ck_assert_int_eq(calculator_eval("1+1", &v, NULL), 0);
    ck_assert(v == 2);
}
END_TEST

/* Build `n` copies of `open`, a "1", then `n` copies of `close`. */
static void nested(char *buf, int n, const char *open, const char *close)
{
    buf[0] = '\0';
    for (int i = 0; i < n; i++)
        strcat(buf, open);
    strcat(buf, "1");
    for (int i = 0; i < n; i++)
        strcat(buf, close);
}

START_TEST(test_depth)
{
    static char buf[CALCULATOR_INPUT_MAX + 64];
    struct rx_error err = {""};
    double v;

    nested(buf, CALCULATOR_DEPTH_MAX, "(", ")");
    ck_assert_int_eq(calculator_eval(buf, &v, &err), 0);
    ck_assert(v == 1);
    nested(buf, CALCULATOR_DEPTH_MAX + 1, "(", ")");
    ck_assert_int_eq(calculator_eval(buf, &v, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.text, "nested deeper than 64"));
    /* Signs and powers nest too: they recurse just the same. */
    nested(buf, 1000, "-", "");
    ck_assert_int_eq(calculator_eval(buf, &v, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.text, "nested deeper"));
    nested(buf, 1000, "1^", "");
    ck_assert_int_eq(calculator_eval(buf, &v, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.text, "nested deeper"));
}
END_TEST

START_TEST(test_too_long)
{
    static char buf[CALCULATOR_INPUT_MAX + 2];
    struct rx_error err = {""};
    double v;

    /* "1+1+...+1": exactly at the bound is fine, one byte more is not. */
    for (size_t i = 0; i < CALCULATOR_INPUT_MAX; i++)
        buf[i] = i % 2 ? '+' : '1';
    buf[CALCULATOR_INPUT_MAX - 1] = ' ';
    buf[CALCULATOR_INPUT_MAX] = '\0';
    ck_assert_int_eq(calculator_eval(buf, &v, &err), 0);
    ck_assert(v == CALCULATOR_INPUT_MAX / 2);
    buf[CALCULATOR_INPUT_MAX] = ' ';
    buf[CALCULATOR_INPUT_MAX + 1] = '\0';
    ck_assert_int_eq(calculator_eval(buf, &v, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.text, "longer than 4096"));
}
END_TEST

static const struct {
    double v;
    const char *want;
} fmts[] = {
    {5, "5"},
    {-12, "-12"},
    {0, "0"},
    {-0.0, "0"},
    {1e6, "1000000"},
    {0.5, "0.5"},
    {0.1 + 0.2, "0.3"},
    {1.0 / 3, "0.333333333333333"},
    {3.141592653589793, "3.14159265358979"},
    {1e20, "1e+20"},
    {-2.5e-7, "-2.5e-07"},
    {999999999999999, "999999999999999"},
};

START_TEST(test_format)
{
    char buf[CALCULATOR_FMT_LEN];

    ck_assert_int_eq(calculator_format(fmts[_i].v, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, fmts[_i].want);
}
END_TEST

START_TEST(test_format_errors)
{
    char buf[4] = "xyz";

    ck_assert_int_eq(calculator_format(INFINITY, buf, sizeof(buf)), -EDOM);
    ck_assert_int_eq(calculator_format(NAN, buf, sizeof(buf)), -EDOM);
    ck_assert_int_eq(calculator_format(12345, buf, sizeof(buf)), -ENOSPC);
    ck_assert_str_eq(buf, "xyz");
    ck_assert_int_eq(calculator_format(123, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, "123");
}
END_TEST

Suite *calculator_suite(void)
{
    Suite *s = suite_create("calculator");
    TCase *tc = tcase_create("eval");

    tcase_add_loop_test(tc, test_good, 0, sizeof(good) / sizeof(good[0]));
    tcase_add_loop_test(tc, test_bad, 0, sizeof(bad) / sizeof(bad[0]));
    tcase_add_test(tc, test_null_err_buffer);
    tcase_add_test(tc, test_depth);
    tcase_add_test(tc, test_too_long);
    suite_add_tcase(s, tc);
    tc = tcase_create("format");
    tcase_add_loop_test(tc, test_format, 0, sizeof(fmts) / sizeof(fmts[0]));
    tcase_add_test(tc, test_format_errors);
    suite_add_tcase(s, tc);
    return s;
}
