/*
 * calculator - safe arithmetic evaluator. See calculator.h for the grammar.
 */
#include "effects/calculator.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A number literal longer than this is garbage, not arithmetic. */
#define NUMBER_MAX 400

struct parser {
    const char *s;        /* the whole expression */
    size_t pos;           /* next byte to read */
    int depth;            /* current nesting, bounded by CALCULATOR_DEPTH_MAX */
    int rc;               /* first error, 0 while none */
    struct rx_error *err; /* the caller's, or NULL */
};

/* Record the first error only: later ones are consequences of it. */
static __attribute__((format(printf, 3, 4))) int fail(struct parser *p, int rc,
                                                      const char *fmt, ...)
{
    va_list ap;

    if (p->rc)
        return p->rc;
    p->rc = rc;
    va_start(ap, fmt);
    rx_error_setv(p->err, rc, fmt, ap);
    va_end(ap);
    return rc;
}

static void skip_space(struct parser *p)
{
    while (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
           p->s[p->pos] == '\r')
        p->pos++;
}

static char peek(struct parser *p)
{
    skip_space(p);
    return p->s[p->pos];
}

static int unexpected(struct parser *p)
{
    char c = p->s[p->pos];

    if (!c)
        return fail(p, -EINVAL, "unexpected end of expression");
    if (c == ')')
        return fail(p, -EINVAL, "unbalanced ')' at position %zu", p->pos + 1);
    if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
        return fail(p, -EINVAL, "unexpected character at position %zu", p->pos + 1);
    return fail(p, -EINVAL, "unexpected '%c' at position %zu", c, p->pos + 1);
}

/* Every recursion passes here, so hostile input cannot exhaust the stack. */
static int enter(struct parser *p)
{
    if (++p->depth > CALCULATOR_DEPTH_MAX)
        return fail(p, -EINVAL, "expression nested deeper than %d levels",
                    CALCULATOR_DEPTH_MAX);
    return 0;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/*
 * Scan the literal ourselves and hand only its exact span to strtod: strtod
 * alone would also take hex, "inf" and "nan", which are not arithmetic here.
 */
static int parse_number(struct parser *p, double *out)
{
    const char *s = p->s + p->pos;
    size_t n = 0, digits = 0;
    char buf[NUMBER_MAX + 1];
    char *end;
    double v;

    while (is_digit(s[n]))
        n++, digits++;
    if (s[n] == '.') {
        n++;
        while (is_digit(s[n]))
            n++, digits++;
    }
    if (!digits) {
        if (*s == ')')
            return fail(p, -EINVAL, "expected a number before ')' at position %zu",
                        p->pos + 1);
        return unexpected(p);
    }
    if (s[n] == 'e' || s[n] == 'E') {
        size_t e = n + 1;

        if (s[e] == '+' || s[e] == '-')
            e++;
        if (!is_digit(s[e]))
            return fail(p, -EINVAL, "malformed exponent at position %zu", p->pos + n + 1);
        while (is_digit(s[e]))
            e++;
        n = e;
    }
    if (n > NUMBER_MAX)
        return fail(p, -EINVAL, "number too long at position %zu", p->pos + 1);
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    v = strtod(buf, &end);
    if (end != buf + n)
        return fail(p, -EINVAL, "malformed number at position %zu", p->pos + 1);
    if (errno == ERANGE && isinf(v))
        return fail(p, -EDOM, "number out of range at position %zu", p->pos + 1);
    p->pos += n;
    *out = v;
    return 0;
}

static int parse_expr(struct parser *p, double *out);
static int parse_unary(struct parser *p, double *out);

static int parse_primary(struct parser *p, double *out)
{
    size_t open;

    if (peek(p) != '(')
        return parse_number(p, out);
    open = p->pos++;
    if (enter(p) || parse_expr(p, out))
        return p->rc;
    if (peek(p) != ')') {
        if (p->s[p->pos])
            return unexpected(p);
        return fail(p, -EINVAL, "missing ')' for '(' at position %zu", open + 1);
    }
    p->pos++;
    p->depth--;
    return 0;
}

static int check_finite(struct parser *p, double v, const char *what)
{
    if (isnan(v))
        return fail(p, -EDOM, "%s is undefined", what);
    if (isinf(v))
        return fail(p, -EDOM, "%s is too large", what);
    return 0;
}

static int parse_power(struct parser *p, double *out)
{
    double base, exponent;

    if (parse_primary(p, &base))
        return p->rc;
    if (peek(p) != '^') {
        *out = base;
        return 0;
    }
    p->pos++;
    /* The exponent is a unary so that 2^-1 works and 2^3^2 groups right. */
    if (enter(p) || parse_unary(p, &exponent))
        return p->rc;
    p->depth--;
    *out = pow(base, exponent);
    return check_finite(p, *out, "power");
}

static int parse_unary(struct parser *p, double *out)
{
    char c = peek(p);

    if (c != '-' && c != '+')
        return parse_power(p, out);
    p->pos++;
    if (enter(p) || parse_unary(p, out))
        return p->rc;
    p->depth--;
    if (c == '-')
        *out = -*out;
    return 0;
}

static int parse_term(struct parser *p, double *out)
{
    double lhs, rhs;
    char op;

    if (parse_unary(p, &lhs))
        return p->rc;
    for (op = peek(p); op == '*' || op == '/' || op == '%'; op = peek(p)) {
        p->pos++;
        if (parse_unary(p, &rhs))
            return p->rc;
        if (op == '*') {
            lhs *= rhs;
        } else if (rhs == 0) {
            return fail(p, -EDOM, op == '/' ? "division by zero" : "modulo by zero");
        } else {
            lhs = op == '/' ? lhs / rhs : fmod(lhs, rhs);
        }
        if (check_finite(p, lhs, "result"))
            return p->rc;
    }
    *out = lhs;
    return 0;
}

static int parse_expr(struct parser *p, double *out)
{
    double lhs, rhs;
    char op;

    if (parse_term(p, &lhs))
        return p->rc;
    for (op = peek(p); op == '+' || op == '-'; op = peek(p)) {
        p->pos++;
        if (parse_term(p, &rhs))
            return p->rc;
        lhs = op == '+' ? lhs + rhs : lhs - rhs;
        if (check_finite(p, lhs, "result"))
            return p->rc;
    }
    *out = lhs;
    return 0;
}

int calculator_eval(const char *expr, double *out, struct rx_error *err)
{
    struct parser p = {.s = expr, .err = err};
    double v;

    if (!expr || !*expr)
        return fail(&p, -EINVAL, "empty expression");
    if (strnlen(expr, CALCULATOR_INPUT_MAX + 1) > CALCULATOR_INPUT_MAX)
        return fail(&p, -EINVAL, "expression longer than %d bytes", CALCULATOR_INPUT_MAX);
    if (!peek(&p))
        return fail(&p, -EINVAL, "empty expression");
    if (parse_expr(&p, &v))
        return p.rc;
    if (peek(&p))
        return unexpected(&p);
    *out = v;
    return 0;
}

int calculator_format(double v, char *buf, size_t size)
{
    char tmp[CALCULATOR_FMT_LEN];
    int n;

    if (!isfinite(v))
        return -EDOM;
    if (v == 0)
        v = 0; /* -0 reads as a bug to people */
    /* Below 1e15 every integral double prints exactly without a fraction. */
    if (v == trunc(v) && fabs(v) < 1e15)
        n = snprintf(tmp, sizeof(tmp), "%.0f", v);
    else
        n = snprintf(tmp, sizeof(tmp), "%.15g", v);
    if (n < 0 || (size_t)n >= sizeof(tmp) || (size_t)n >= size)
        return -ENOSPC;
    memcpy(buf, tmp, (size_t)n + 1);
    return 0;
}
