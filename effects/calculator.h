/*
 * calculator - a safe arithmetic evaluator for the `calculator` tool.
 *
 * A recursive-descent parser over a fixed grammar: no system(), no eval, no
 * variables or functions, so whatever a model or a user sends can at worst be
 * rejected. Grammar (usual precedence, lowest first):
 *
 *     expr    := term   (('+' | '-') term)*
 *     term    := unary  (('*' | '/' | '%') unary)*
 *     unary   := ('-' | '+') unary | power
 *     power   := primary ('^' unary)?          right-associative: 2^3^2 = 2^9
 *     primary := number | '(' expr ')'
 *     number  := digits ['.' digits] | '.' digits, then [('e'|'E') ['+'|'-'] digits]
 *
 * Unary minus binds looser than '^' (-2^2 = -4), as in mathematics; '%' is the
 * remainder of truncated division (C fmod). Whitespace is allowed anywhere
 * between tokens.
 *
 * Depends on libc and libm only. Thread-safe: no state.
 * Ownership: nothing is allocated; callers own every buffer and the
 * struct rx_error they pass.
 */
#ifndef CALCULATOR_H
#define CALCULATOR_H

#include <stddef.h>
#include "state_machine/rx_common.h"

/* Longest expression accepted, in bytes. */
#define CALCULATOR_INPUT_MAX 4096
/* Deepest nesting of parentheses, signs and powers accepted. */
#define CALCULATOR_DEPTH_MAX 64
/* Size of a buffer that holds any calculator_format() result. */
#define CALCULATOR_FMT_LEN 32

/*
 * Evaluate `expr`. 0 and *out on success. -EINVAL for a syntax error (empty,
 * trailing text, unbalanced parentheses, nesting deeper than
 * CALCULATOR_DEPTH_MAX, input longer than CALCULATOR_INPUT_MAX); -EDOM for a
 * math error (division or modulo by zero, a result that is not a finite
 * number). On error *out is unchanged and `err` (may be NULL) holds a
 * one-line lower-case message such as "division by zero" or "unexpected 'x'
 * at position 4" (positions count from 1).
 */
int calculator_eval(const char *expr, double *out, struct rx_error *err) RX_WUR;

/*
 * Print `v` for people: integral values without a fraction ("5", "-12",
 * "1000000"), others with up to 15 significant digits ("0.3", "3.14159265358979",
 * "1e+20"); -0 prints as "0". 0, -EDOM for NaN or infinity, -ENOSPC when `size`
 * is too small (CALCULATOR_FMT_LEN always suffices). `buf` is unchanged on error.
 */
int calculator_format(double v, char *buf, size_t size) RX_WUR;

#endif
