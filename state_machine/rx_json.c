/*
 * rx_json - JSON text read without recursion: the parser, nesting depth and
 * the one-object check. See rx_json.h.
 */
#include "state_machine/rx_json.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "state_machine/rx_alloc.h"
#include "state_machine/rx_buf.h"

size_t rx_json_depth(const char *text, size_t len)
{
    size_t depth = 0, deepest = 0;
    bool in_string = false;

    for (size_t i = 0; i < len; i++) {
        char c = text[i];

        if (in_string) {
            if (c == '\\')
                i++; /* the escaped character cannot end the string */
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest)
                deepest = depth;
        } else if ((c == ']' || c == '}') && depth) {
            depth--;
        }
    }
    return deepest;
}

bool rx_json_depth_ok(const char *text)
{
    return rx_json_depth(text, strlen(text)) <= RX_JSON_DEPTH_MAX;
}

/* ---- one JSON object, validated without recursion or allocation ------------ */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static int hex4(const char *p, const char *end)
{
    int v = 0;

    if (end - p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        char c = p[i];

        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return -1;
    }
    return v;
}

/* `p` at the opening quote: just past the closing one, or NULL. */
static const char *scan_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        unsigned char c = (unsigned char)*p;
        int u;

        if (c == '"')
            return p + 1;
        if (c < 0x20)
            return NULL;
        if (c != '\\')
            continue;
        if (++p == end)
            return NULL;
        if (strchr("\"\\/bfnrt", *p) && *p)
            continue;
        if (*p != 'u' || (u = hex4(p + 1, end)) <= 0 || (u >= 0xDC00 && u <= 0xDFFF))
            return NULL;
        p += 4;
        if (u >= 0xD800 && u <= 0xDBFF) {
            /* A high surrogate must be followed by an escaped low one. */
            int lo = end - p >= 7 && p[1] == '\\' && p[2] == 'u' ? hex4(p + 3, end) : -1;

            if (lo < 0xDC00 || lo > 0xDFFF)
                return NULL;
            p += 6;
        }
    }
    return NULL;
}

static const char *scan_digits(const char *p, const char *end)
{
    const char *start = p;

    while (p < end && *p >= '0' && *p <= '9')
        p++;
    return p > start ? p : NULL;
}

static const char *scan_number(const char *p, const char *end)
{
    if (p < end && *p == '-')
        p++;
    if (p < end && *p == '0')
        p++;
    else if (!(p = scan_digits(p, end)))
        return NULL;
    if (p < end && *p == '.' && !(p = scan_digits(p + 1, end)))
        return NULL;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        p = scan_digits(p, end);
    }
    return p;
}

static const char *scan_literal(const char *p, const char *end, const char *word)
{
    size_t n = strlen(word);

    return (size_t)(end - p) >= n && !memcmp(p, word, n) ? p + n : NULL;
}

/* One scalar at p (string, number, literal): just past it, or NULL. */
static const char *scan_scalar(const char *p, const char *end)
{
    switch (*p) {
    case '"':
        return scan_string(p, end);
    case 't':
        return scan_literal(p, end, "true");
    case 'f':
        return scan_literal(p, end, "false");
    case 'n':
        return scan_literal(p, end, "null");
    default:
        return scan_number(p, end);
    }
}

bool rx_json_is_object_text(const char *text, size_t len)
{
    /* What comes next: a value, a value or ']' (an array just opened), a key,
       or what follows a value (',', a closing bracket, or the end). */
    enum { VALUE, VALUE_OR_CLOSE, KEY, AFTER } want = VALUE;
    char kind[RX_JSON_DEPTH_MAX]; /* '{' or '[' per level */
    const char *p = skip_ws(text, text + len), *end = text + len;
    size_t depth = 0;

    if (p == end || *p != '{')
        return false;
    for (;;) {
        p = skip_ws(p, end);
        if (want == AFTER) {
            if (!depth)
                return p == end;
            if (p == end)
                return false;
            if (*p == ',') {
                want = kind[depth - 1] == '{' ? KEY : VALUE;
            } else if (*p == (kind[depth - 1] == '{' ? '}' : ']')) {
                depth--;
            } else {
                return false;
            }
            p++;
            continue;
        }
        if (p == end)
            return false;
        if (want == KEY) {
            if (*p != '"' || !(p = scan_string(p, end)))
                return false;
            p = skip_ws(p, end);
            if (p == end || *p != ':')
                return false;
            p++;
            want = VALUE;
            continue;
        }
        if (want == VALUE_OR_CLOSE && *p == ']') {
            depth--;
            p++;
            want = AFTER;
            continue;
        }
        if (*p == '{' || *p == '[') {
            if (depth == RX_JSON_DEPTH_MAX)
                return false;
            kind[depth++] = *p;
            want = *p == '[' ? VALUE_OR_CLOSE : KEY;
            p = skip_ws(p + 1, end);
            if (want == KEY && p < end && *p == '}') {
                depth--;
                p++;
                want = AFTER;
            }
            continue;
        }
        if (!(p = scan_scalar(p, end)))
            return false;
        want = AFTER;
    }
}

/* ---- the parser: text to a jansson tree, in a loop ------------------------- */

#define TEXT_OF_(x) #x
#define TEXT_OF(x)  TEXT_OF_(x)
#define DEPTH_TEXT  TEXT_OF(RX_JSON_DEPTH_MAX)

/* The one reason that is not the text's fault: told apart by its address. */
static const char OUT_OF_MEMORY[] = "out of memory";

struct parser {
    const char *text, *p, *end;      /* p: where the parse is */
    json_t *root;                    /* the tree so far (owned) */
    json_t *open[RX_JSON_DEPTH_MAX]; /* the containers still open (borrowed) */
    size_t depth;
    const char *key; /* the key whose value comes next (in text or keybuf) */
    size_t key_len;
    struct rx_buf keybuf, strbuf; /* decoded strings that had escapes */
    const char *why;              /* what went wrong, at p */
    unsigned flags;               /* RX_JSON_* */
};

size_t rx_json_utf8_len(const char *s, size_t left)
{
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[0], v;
    size_t n;

    if (c < 0x80)
        return 1;
    if (c < 0xC2 || c > 0xF4)
        return 0;
    n = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (left < n)
        return 0;
    v = c & (0x3F >> (n - 1));
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (p[i] & 0x3F);
    }
    if ((n == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) ||
        (n == 4 && (v < 0x10000 || v > 0x10FFFF)))
        return 0;
    return n;
}

static int put_utf8(struct rx_buf *b, unsigned v)
{
    char u[4];
    size_t n;

    if (v < 0x80) {
        u[0] = (char)v, n = 1;
    } else if (v < 0x800) {
        u[0] = (char)(0xC0 | v >> 6), u[1] = (char)(0x80 | (v & 0x3F)), n = 2;
    } else if (v < 0x10000) {
        u[0] = (char)(0xE0 | v >> 12), u[1] = (char)(0x80 | (v >> 6 & 0x3F));
        u[2] = (char)(0x80 | (v & 0x3F)), n = 3;
    } else {
        u[0] = (char)(0xF0 | v >> 18), u[1] = (char)(0x80 | (v >> 12 & 0x3F));
        u[2] = (char)(0x80 | (v >> 6 & 0x3F)), u[3] = (char)(0x80 | (v & 0x3F)), n = 4;
    }
    return rx_buf_append(b, u, n);
}

static bool fail(struct parser *ps, const char *at, const char *why)
{
    ps->p = at;
    ps->why = why;
    return false;
}

static json_t *fail_null(struct parser *ps, const char *at, const char *why)
{
    fail(ps, at, why);
    return NULL;
}

/* The escape at p (just past its backslash) appended to b; p moves past it. */
static bool unescape(struct parser *ps, const char **pp, struct rx_buf *b)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *p = *pp, *hit;
    int u, lo;

    if (p == ps->end)
        return fail(ps, p, "unterminated string");
    if (*p != 'u') {
        if (!*p || !(hit = strchr(from, *p)))
            return fail(ps, p, "invalid escape");
        *pp = p + 1;
        return !rx_buf_putc(b, to[hit - from]) || fail(ps, p, OUT_OF_MEMORY);
    }
    if ((u = hex4(p + 1, ps->end)) < 0)
        return fail(ps, p, "invalid \\u escape");
    if (u == 0 && !(ps->flags & RX_JSON_ALLOW_NUL))
        return fail(ps, p, "\\u0000 is not allowed");
    if (u >= 0xDC00 && u <= 0xDFFF)
        return fail(ps, p, "a low surrogate without a high one");
    p += 5;
    if (u >= 0xD800 && u <= 0xDBFF) {
        lo = ps->end - p >= 6 && p[0] == '\\' && p[1] == 'u' ? hex4(p + 2, ps->end) : -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return fail(ps, p, "a high surrogate without a low one");
        u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
        p += 6;
    }
    *pp = p;
    return !put_utf8(b, (unsigned)u) || fail(ps, p, OUT_OF_MEMORY);
}

/*
 * The string whose opening quote is at ps->p: its bytes in *s, *n (UTF-8,
 * NUL-free unless RX_JSON_ALLOW_NUL). They point into the text when it has no escape (the
 * common case: no copy), else into b. ps->p moves past the closing quote.
 */
static bool parse_string(struct parser *ps, struct rx_buf *b, const char **s, size_t *n)
{
    const unsigned char *q = (const unsigned char *)ps->p + 1, *run = q,
                        *end = (const unsigned char *)ps->end;
    bool copied = false;

    for (;;) {
        size_t k;

        if (q == end)
            return fail(ps, (const char *)q, "unterminated string");
        if (*q == '"')
            break;
        if (*q < 0x20)
            return fail(ps, (const char *)q, "control character in a string");
        if (*q != '\\') {
            if (!(k = rx_json_utf8_len((const char *)q, (size_t)(end - q))))
                return fail(ps, (const char *)q, "invalid UTF-8");
            q += k;
            continue;
        }
        if (!copied)
            rx_buf_reset(b);
        copied = true;
        if (rx_buf_append(b, run, (size_t)(q - run)))
            return fail(ps, (const char *)q, OUT_OF_MEMORY);
        q++;
        if (!unescape(ps, (const char **)&q, b))
            return false;
        run = q;
    }
    if (copied && rx_buf_append(b, run, (size_t)(q - run)))
        return fail(ps, (const char *)q, OUT_OF_MEMORY);
    *s = copied ? b->data : (const char *)ps->p + 1;
    *n = copied ? b->len : (size_t)(q - (const unsigned char *)ps->p - 1);
    ps->p = (const char *)q + 1;
    return true;
}

/* strtod of the `n` bytes of a JSON number (terminated, writable). strtod
   reads the decimal point of LC_NUMERIC: in a program that set a locale
   with a comma, '.' stops it, and the point is swapped (as jansson does).
   localeconv() only reads the process's locale: no I/O, still pure. */
static double c_strtod(char *num, size_t n)
{
    char *stop, *dot;
    double d = strtod(num, &stop);

    if (stop != num + n && (dot = strchr(num, '.')) && localeconv()->decimal_point[0]) {
        *dot = localeconv()->decimal_point[0];
        d = strtod(num, NULL);
    }
    return d;
}

/* The number at ps->p, as jansson reads it: an integer when it has neither
   fraction nor exponent (and must then fit int64), else a finite double. */
static json_t *parse_number(struct parser *ps)
{
    const char *p = ps->p, *q = scan_number(p, ps->end);
    bool neg = *p == '-', real = false;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    char small[64], *copy = small;
    double d;

    if (!q)
        return fail_null(ps, p, "invalid number");
    for (const char *c = p; c < q && !real; c++)
        real = *c == '.' || *c == 'e' || *c == 'E';
    if (!real) {
        for (const char *c = p + neg; c < q; c++) {
            unsigned digit = (unsigned)(*c - '0');

            if (v > (limit - digit) / 10)
                return fail_null(ps, p,
                                 neg ? "too big negative integer" : "too big integer");
            v = v * 10 + digit;
        }
        ps->p = q;
        return json_integer(neg ? (json_int_t)(0 - v) : (json_int_t)v);
    }
    ps->p = q;
    /* strtod needs a terminated copy: the text is not terminated after it. */
    if ((size_t)(q - p) >= sizeof(small) && !(copy = rx_malloc((size_t)(q - p) + 1)))
        return fail_null(ps, p, OUT_OF_MEMORY);
    memcpy(copy, p, (size_t)(q - p));
    copy[q - p] = '\0';
    d = c_strtod(copy, (size_t)(q - p));
    if (copy != small)
        rx_free(copy);
    if (isinf(d))
        return fail_null(ps, p, "real number overflow");
    return json_real(d);
}

static json_t *parse_literal(struct parser *ps, const char *word, json_t *v)
{
    const char *q = scan_literal(ps->p, ps->end, word);

    if (!q)
        return fail_null(ps, ps->p, "invalid token");
    ps->p = q;
    return v;
}

/* The scalar at ps->p, a new reference; NULL when it is not one (ps->why
   says why) or out of memory (ps->why NULL). */
static json_t *parse_scalar(struct parser *ps)
{
    const char *s;
    size_t n;

    switch (*ps->p) {
    case '"':
        return parse_string(ps, &ps->strbuf, &s, &n) ? json_stringn_nocheck(s, n) : NULL;
    case 't':
        return parse_literal(ps, "true", json_true());
    case 'f':
        return parse_literal(ps, "false", json_false());
    case 'n':
        return parse_literal(ps, "null", json_null());
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
            return parse_number(ps);
        return fail_null(ps, ps->p, "invalid token");
    }
}

/* v (stolen) becomes the root, the next element of the open array, or the
   value of the pending key of the open object (the last of equal keys wins). */
static bool attach(struct parser *ps, json_t *v)
{
    json_t *in;

    if (!ps->depth) {
        ps->root = v;
        return true;
    }
    in = ps->open[ps->depth - 1];
    if (json_is_array(in) ? json_array_append_new(in, v)
                          : json_object_setn_new_nocheck(in, ps->key, ps->key_len, v))
        return fail(ps, ps->p, OUT_OF_MEMORY);
    return true;
}

/* A container opens: attached to its parent at once (so the tree owns it
   from the start and one decref of the root frees everything on failure). */
static bool open_container(struct parser *ps)
{
    json_t *c;

    if (ps->depth == RX_JSON_DEPTH_MAX)
        return fail(ps, ps->p, "nested deeper than " DEPTH_TEXT " levels");
    if (!(c = *ps->p == '{' ? json_object() : json_array()) || !attach(ps, c))
        return fail(ps, ps->p, OUT_OF_MEMORY);
    ps->open[ps->depth++] = c;
    ps->p++;
    return true;
}

/* The loop over the text: what comes next is a value, a value or ']' (an
   array just opened), a key or '}' (an object just opened), a key (after a
   comma), or what follows a value (',', a closing bracket, or the end). */
static bool parse(struct parser *ps)
{
    enum { VALUE, VALUE_OR_CLOSE, KEY_OR_CLOSE, KEY, AFTER } want = VALUE;
    json_t *v;

    for (;;) {
        ps->p = skip_ws(ps->p, ps->end);
        if (want == AFTER && !ps->depth)
            return ps->p == ps->end || fail(ps, ps->p, "end of text expected");
        if (ps->p == ps->end)
            return fail(ps, ps->p, "unexpected end of text");
        if (want == AFTER) {
            bool obj = json_is_object(ps->open[ps->depth - 1]);

            if (*ps->p == ',')
                want = obj ? KEY : VALUE;
            else if (*ps->p == (obj ? '}' : ']'))
                ps->depth--;
            else
                return fail(ps, ps->p,
                            obj ? "',' or '}' expected" : "',' or ']' expected");
            ps->p++;
            continue;
        }
        if ((want == VALUE_OR_CLOSE && *ps->p == ']') ||
            (want == KEY_OR_CLOSE && *ps->p == '}')) {
            ps->depth--;
            ps->p++;
            want = AFTER;
            continue;
        }
        if (want == KEY || want == KEY_OR_CLOSE) {
            if (*ps->p != '"')
                return fail(ps, ps->p, "string or '}' expected");
            if (!parse_string(ps, &ps->keybuf, &ps->key, &ps->key_len))
                return false;
            ps->p = skip_ws(ps->p, ps->end);
            if (ps->p == ps->end || *ps->p != ':')
                return fail(ps, ps->p, "':' expected");
            ps->p++;
            want = VALUE;
            continue;
        }
        if (*ps->p == '{' || *ps->p == '[') {
            want = *ps->p == '{' ? KEY_OR_CLOSE : VALUE_OR_CLOSE;
            if (!open_container(ps))
                return false;
            continue;
        }
        if (!(v = parse_scalar(ps)))
            return ps->why ? false : fail(ps, ps->p, OUT_OF_MEMORY);
        if (!attach(ps, v))
            return false;
        want = AFTER;
    }
}

/* "line L, column C: why", C counted in bytes from the line's start. */
static int parse_error(const struct parser *ps, struct rx_error *err)
{
    int line = 1;
    const char *sol = ps->text;

    if (ps->why == OUT_OF_MEMORY)
        return rx_error_set(err, -ENOMEM, "%s", OUT_OF_MEMORY);
    for (const char *c = ps->text; c < ps->p; c++)
        if (*c == '\n')
            line++, sol = c + 1;
    return rx_error_set(err, -EINVAL, "line %d, column %d: %s", line,
                        (int)(ps->p - sol) + 1, ps->why);
}

int rx_json_parse(const char *text, size_t len, unsigned flags, json_t **out,
                  struct rx_error *err)
{
    struct parser ps = {.text = text ? text : "", .flags = flags};
    const char *first;
    bool ok;

    ps.p = ps.text;
    ps.end = ps.text + (text ? len : 0);
    first = skip_ws(ps.text, ps.end);
    /* A decoded string is never longer than the text it came from. */
    rx_buf_init(&ps.keybuf, len);
    rx_buf_init(&ps.strbuf, len);
    if (!(flags & RX_JSON_ANY) && (first == ps.end || (*first != '{' && *first != '[')))
        ok = fail(&ps, first, "'[' or '{' expected");
    else
        ok = parse(&ps);
    rx_buf_release(&ps.keybuf);
    rx_buf_release(&ps.strbuf);
    *out = ok ? ps.root : NULL;
    if (ok)
        return 0;
    json_decref(ps.root);
    return parse_error(&ps, err);
}
