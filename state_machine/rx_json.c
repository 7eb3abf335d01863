/*
 * rx_json - nesting depth without recursion. See rx_json.h.
 */
#include "state_machine/rx_json.h"

#include <string.h>

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
