/*
 * check_sse_parse - the incremental Server-Sent-Events parser (effects/sse_parse).
 *
 * Every case is a recorded stream and the exact result it must give: a
 * one-line summary of the dispatched events (name, id, data), the return
 * value, the last event ID and `retry`. Each stream is fed whole, one byte at
 * a time, split in two at every byte position and in three pieces at every
 * pair of positions (http-parser's test_scan): the summary must be the same
 * every time. RX_TEST_QUICK=1 (valgrind) runs the three-piece scan on short
 * streams only.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "effects/sse_parse.h"
#include "state_machine/rx_buf.h"

Suite *sse_parse_suite(void);

/* A byte string and its length: streams may hold NULs. */
#define S(x) x, sizeof(x) - 1

/* The callback's stop value in the cases that stop (a negative errno). */
#define STOP_RC (-ECANCELED)

/* The first bytes of a BOM and what follows must be separate literals. */
#define BOM "\xEF\xBB\xBF"

/*
 * A realistic stream: a BOM, a comment, retry, an MCP-style JSON-RPC answer
 * in two data lines, CR-only and CRLF events, an event name and an empty data
 * line, an id without data, a NUL in data, an unknown field, and a last event
 * cut before its blank line.
 */
/* clang-format off */
static const char golden[] =
    BOM ": welcome\r\n"
    "retry: 2500\r\n"
    "\r\n"
    "event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\n"
    "data:  \"result\":{}}\n\n"
    "id: 2\r"
    "data: second\r"
    "\r"
    ": keep-alive\n\n"
    "event: endpoint\r\ndata\r\ndata: /mcp?x=1\r\n\r\n"
    "event: ignored\nid: 3\n\n"
    "data: after \0 nul\n"
    "unknown: field\n"
    "data:last\n\n"
    "id: 4\ndata: cut";
/* clang-format on */

static const struct pcase {
    const char *name;
    const char *in;
    size_t len;
    size_t max;    /* the bound; 0 means 1 MiB */
    bool partial;  /* finish(p, true): dispatch a cut last event */
    int stop_at;   /* the callback returns STOP_RC (or 1) at this event, 0 never */
    bool stop_pos; /* stop with 1 instead of STOP_RC */
    const char *want;
} cases[] = {
    /* Fields and data. */
    {"one event", S("data: hello\n\n"), 0, false, 0, false,
     "[message||hello] rc=0 last= retry=-1"},
    {"data lines joined with LF", S("data: a\ndata: b\ndata: c\n\n"), 0, false, 0, false,
     "[message||a\\nb\\nc] rc=0 last= retry=-1"},
    {"one space after the colon removed, only one",
     S("data:x\n\ndata:  two\n\ndata: \n\n"), 0, false, 0, false,
     "[message||x][message|| two][message||] rc=0 last= retry=-1"},
    {"a field without colon has an empty value", S("data\n\ndata\ndata\n\n"), 0, false, 0,
     false, "[message||][message||\\n] rc=0 last= retry=-1"},
    {"colons in the value are kept", S("data: a: b:c\n\n"), 0, false, 0, false,
     "[message||a: b:c] rc=0 last= retry=-1"},
    {"NUL in data", S("data: a\0b\n\n"), 0, false, 0, false,
     "[message||a\\0b] rc=0 last= retry=-1"},
    {"unknown fields ignored",
     S("foo: bar\nDATA: y\ndata : z\ndatax: w\ndata: x\nevent2: q\nid : 9\n\n"), 0, false,
     0, false, "[message||x] rc=0 last= retry=-1"},

    /* Line ends. */
    {"LF, CRLF and lone CR", S("data: a\r\n\r\ndata: b\r\rdata: c\n\ndata: d\r\n\n"), 0,
     false, 0, false,
     "[message||a][message||b][message||c][message||d] rc=0 last= retry=-1"},
    {"CR then CRLF is two line ends", S("data: a\r\r\ndata: b\n\r\n"), 0, false, 0, false,
     "[message||a][message||b] rc=0 last= retry=-1"},
    {"LF then CR is two line ends", S("data: a\n\rdata: b\n\n"), 0, false, 0, false,
     "[message||a][message||b] rc=0 last= retry=-1"},
    {"CRLF inside an event is one line end", S("data: a\r\ndata: b\r\n\r\n"), 0, false, 0,
     false, "[message||a\\nb] rc=0 last= retry=-1"},

    /* Comments. */
    {"comments ignored", S(": ping\n\n:\n\n: data: x\ndata: y\n:z\n\n"), 0, false, 0,
     false, "[message||y] rc=0 last= retry=-1"},

    /* Event names. */
    {"event name, back to message after dispatch",
     S("event: update\ndata: 1\n\ndata: 2\n\n"), 0, false, 0, false,
     "[update||1][message||2] rc=0 last= retry=-1"},
    {"event without data: not dispatched, name forgotten",
     S("event: a\n\ndata: 2\n\nevent: b\n\n"), 0, false, 0, false,
     "[message||2] rc=0 last= retry=-1"},
    {"an empty event name is message", S("event:\ndata: x\n\nevent: \ndata: y\n\n"), 0,
     false, 0, false, "[message||x][message||y] rc=0 last= retry=-1"},
    {"the last event field wins", S("event: a\nevent: b\ndata: x\n\n"), 0, false, 0,
     false, "[b||x] rc=0 last= retry=-1"},

    /* Last event ID. */
    {"id kept across events, reset by an empty id",
     S("id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n"), 0, false, 0, false,
     "[message|7|a][message|7|b][message||c] rc=0 last= retry=-1"},
    {"id with a NUL ignored", S("id: 1\ndata: a\n\nid: 2\0x\ndata: b\n\n"), 0, false, 0,
     false, "[message|1|a][message|1|b] rc=0 last=1 retry=-1"},
    {"id without data moves the resume point", S("id: 5\n\n"), 0, false, 0, false,
     " rc=0 last=5 retry=-1"},
    {"id of a cut event is not taken", S("id: 1\ndata: a\n\nid: 2\ndata: b\n"), 0, false,
     0, false, "[message|1|a] rc=0 last=1 retry=-1"},
    {"id of a cut event dispatched with partial", S("id: 1\ndata: a\n\nid: 2\ndata: b\n"),
     0, true, 0, false, "[message|1|a][message|2|b] rc=0 last=2 retry=-1"},

    /* Retry. */
    {"retry: ASCII digits only",
     S("retry: 3000\nretry: 30x\nretry:\nretry: -1\nretry:  5\nretry: +7\n"
       "retry: 99999999999999999999\n\n"),
     0, false, 0, false, " rc=0 last= retry=3000"},
    {"retry: the last valid one", S("retry: 10\n\nretry:20\n\n"), 0, false, 0, false,
     " rc=0 last= retry=20"},

    /* End of stream. */
    {"cut event discarded", S("data: a\n\nevent: e\ndata: b\n"), 0, false, 0, false,
     "[message||a] rc=0 last= retry=-1"},
    {"cut inside a line discarded", S("data: a\n\nevent: e\ndata: b"), 0, false, 0, false,
     "[message||a] rc=0 last= retry=-1"},
    {"cut event dispatched with partial", S("data: a\n\nevent: e\ndata: b"), 0, true, 0,
     false, "[message||a][e||b] rc=0 last= retry=-1"},
    {"cut after a CR dispatched with partial", S("data: a\r"), 0, true, 0, false,
     "[message||a] rc=0 last= retry=-1"},
    {"partial with nothing pending", S("data: a\n\n: bye\n"), 0, true, 0, false,
     "[message||a] rc=0 last= retry=-1"},
    {"empty stream", S(""), 0, true, 0, false, " rc=0 last= retry=-1"},

    /* Byte order mark. */
    {"BOM skipped", S(BOM "data: x\n\n"), 0, false, 0, false,
     "[message||x] rc=0 last= retry=-1"},
    {"BOM skipped once only", S(BOM BOM "data: x\n\ndata: y\n\n"), 0, false, 0, false,
     "[message||y] rc=0 last= retry=-1"},
    {"part of a BOM is ordinary bytes",
     S("\xEF\xBB"
       "data: x\n\ndata: y\n\n"),
     0, false, 0, false, "[message||y] rc=0 last= retry=-1"},
    {"one BOM byte is ordinary bytes",
     S("\xEF"
       "data: x\n\ndata: y\n\n"),
     0, false, 0, false, "[message||y] rc=0 last= retry=-1"},
    {"a stream of part of a BOM", S("\xEF\xBB"), 0, true, 0, false,
     " rc=0 last= retry=-1"},
    {"BOM bytes later are data", S("data: " BOM "x\n\n"), 0, false, 0, false,
     "[message||\\xef\\xbb\\xbfx] rc=0 last= retry=-1"},

    /* Bounds. */
    {"a line of exactly max bytes", S("data: 12\n\n"), 8, false, 0, false,
     "[message||12] rc=0 last= retry=-1"},
    {"a line past max", S("data:a\n\ndata: 123\n\n"), 8, false, 0, false,
     "[message||a] rc=-7/line last= retry=-1"},
    {"a comment past max", S(": 1234567\n\n"), 8, false, 0, false,
     " rc=-7/line last= retry=-1"},
    {"a cut line past max", S("data: 1234567"), 8, false, 0, false,
     " rc=-7/line last= retry=-1"},
    {"an event of exactly max bytes", S("data:ab\ndata:c\ndata:de\n\n"), 7, false, 0,
     false, "[message||ab\\nc\\nde] rc=0 last= retry=-1"},
    {"an event past max", S("data:ab\ndata:c\ndata:de\ndata\n\n"), 7, false, 0, false,
     " rc=-7/event last= retry=-1"},

    /* The callback stops the parser. */
    {"callback stops", S("data: 1\n\ndata: 2\n\ndata: 3\n\n"), 0, false, 2, false,
     "[message||1][message||2] rc=-125 last= retry=-1"},
    {"callback stops with a positive value", S("data: 1\n\ndata: 2\n\n"), 0, false, 1,
     true, "[message||1] rc=1 last= retry=-1"},
    {"callback stops at finish", S("data: 1\n\ndata: 2"), 0, true, 2, false,
     "[message||1][message||2] rc=-125 last= retry=-1"},

    /* Everything at once. */
    {"golden", golden, sizeof(golden) - 1, 0, false, 0, false,
     "[message|1|{\"jsonrpc\":\"2.0\",\"id\":1,\\n \"result\":{}}][message|2|second]"
     "[endpoint|2|\\n/mcp?x=1][message|3|after \\0 nul\\nlast] rc=0 last=3 retry=2500"},
    {"golden, partial", golden, sizeof(golden) - 1, 0, true, 0, false,
     "[message|1|{\"jsonrpc\":\"2.0\",\"id\":1,\\n \"result\":{}}][message|2|second]"
     "[endpoint|2|\\n/mcp?x=1][message|3|after \\0 nul\\nlast][message|4|cut] rc=0 "
     "last=4 retry=2500"},
};

/* What the callback saw, as text. */
struct rec {
    struct sse_parse *p;
    struct rx_buf out;
    int n;
    int stop_at;
    int stop_rc;
};

/* Append `n` bytes with LF, CR, NUL, '\' and non-ASCII bytes escaped. */
static void put_escaped(struct rx_buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int rc;

        if (c == '\n')
            rc = rx_buf_puts(b, "\\n");
        else if (c == '\r')
            rc = rx_buf_puts(b, "\\r");
        else if (c == '\0')
            rc = rx_buf_puts(b, "\\0");
        else if (c == '\\')
            rc = rx_buf_puts(b, "\\\\");
        else if (c >= 0x80 || c < 0x20)
            rc = rx_buf_printf(b, "\\x%02x", c);
        else
            rc = rx_buf_putc(b, (char)c);
        ck_assert_int_eq(rc, 0);
    }
}

static int on_event(void *ctx, const struct sse_parse_event *ev)
{
    struct rec *r = ctx;

    /* The event's promises: strings set and NUL-terminated, id the resume point. */
    ck_assert_ptr_nonnull(ev->event);
    ck_assert_ptr_nonnull(ev->data);
    ck_assert_ptr_nonnull(ev->id);
    ck_assert_uint_gt(strlen(ev->event), 0);
    ck_assert_int_eq(ev->data[ev->data_len], '\0');
    ck_assert_str_eq(ev->id, sse_parse_last_id(r->p));
    ck_assert(!rx_buf_putc(&r->out, '['));
    put_escaped(&r->out, ev->event, strlen(ev->event));
    ck_assert(!rx_buf_putc(&r->out, '|'));
    put_escaped(&r->out, ev->id, strlen(ev->id));
    ck_assert(!rx_buf_putc(&r->out, '|'));
    put_escaped(&r->out, ev->data, ev->data_len);
    ck_assert(!rx_buf_putc(&r->out, ']'));
    return ++r->n == r->stop_at ? r->stop_rc : 0;
}

/* What the header promises of the parser's state between calls. */
static void check_invariants(const struct sse_parse *p)
{
    ck_assert_uint_le(p->line.len, p->line.max);
    ck_assert_uint_le(p->data.len, p->data.max);
    ck_assert(p->have_data || !p->data.len);
    ck_assert(p->error_code == -E2BIG || p->bound == SSE_PARSE_BOUND_NONE);
    ck_assert_uint_le(p->bom_seen, 3);
}

static int feed(struct sse_parse *p, const char *s, size_t n)
{
    int rc = sse_parse_feed(p, s, n);

    check_invariants(p);
    return rc;
}

/* Feed case `c` in pieces cut at a <= b (or byte by byte), finish; the summary. */
static char *run(const struct pcase *c, size_t a, size_t b, bool bytewise)
{
    struct sse_parse p;
    struct rec r = {.p = &p, .stop_at = c->stop_at, .stop_rc = c->stop_pos ? 1 : STOP_RC};
    int rc = 0;

    rx_buf_init(&r.out, 1 << 20);
    sse_parse_init(&p, c->max ? c->max : 1u << 20, on_event, &r);
    if (bytewise) {
        for (size_t i = 0; i < c->len && !rc; i++)
            rc = feed(&p, c->in + i, 1);
    } else {
        rc = feed(&p, c->in, a);
        rc = rc ? rc : feed(&p, c->in + a, b - a);
        rc = rc ? rc : feed(&p, c->in + b, c->len - b);
    }
    rc = rc ? rc : sse_parse_finish(&p, c->partial);
    /* Errors and stops are sticky, and nothing more is dispatched. */
    if (rc) {
        int n = r.n;

        ck_assert_int_eq(sse_parse_feed(&p, "data: x\n\n", 9), rc);
        ck_assert_int_eq(sse_parse_finish(&p, true), rc);
        ck_assert_int_eq(r.n, n);
    }
    ck_assert(!rx_buf_printf(&r.out, " rc=%d%s last=", rc,
                             rc != -E2BIG                       ? ""
                             : p.bound == SSE_PARSE_BOUND_LINE  ? "/line"
                             : p.bound == SSE_PARSE_BOUND_EVENT ? "/event"
                                                                : "/none"));
    put_escaped(&r.out, sse_parse_last_id(&p), strlen(sse_parse_last_id(&p)));
    ck_assert(!rx_buf_printf(&r.out, " retry=%lld", p.retry_ms));
    sse_parse_release(&p);
    return rx_buf_take(&r.out, NULL);
}

static void expect(const char *got, const struct pcase *c, size_t a, size_t b)
{
    ck_assert_msg(!strcmp(got, c->want), "%s split at %zu,%zu:\n got: %s\nwant: %s",
                  c->name, a, b, got, c->want);
}

START_TEST(test_whole)
{
    const struct pcase *c = &cases[_i];
    char *got = run(c, c->len, c->len, false);

    expect(got, c, c->len, c->len);
    free(got);
    got = run(c, 0, 0, true);
    expect(got, c, 1, 1);
    free(got);
}
END_TEST

START_TEST(test_split_every_position)
{
    const struct pcase *c = &cases[_i];

    for (size_t a = 0; a <= c->len; a++) {
        char *got = run(c, a, a, false);

        expect(got, c, a, a);
        free(got);
    }
}
END_TEST

START_TEST(test_split_every_pair)
{
    const struct pcase *c = &cases[_i];
    const char *quick = getenv("RX_TEST_QUICK");

    if (quick && *quick && strcmp(quick, "0") && c->len > 120)
        return;
    for (size_t a = 0; a <= c->len; a++) {
        for (size_t b = a; b <= c->len; b++) {
            char *got = run(c, a, b, false);

            expect(got, c, a, b);
            free(got);
        }
    }
}
END_TEST

/* A CR that ends one feed and an LF that starts the next are one line end. */
START_TEST(test_crlf_across_feeds)
{
    static const char *const pieces[] = {"data: a\r", "\ndata: b\r", "\n\r", "\n"};
    struct sse_parse p;
    struct rec r = {.p = &p};

    rx_buf_init(&r.out, 1 << 10);
    sse_parse_init(&p, 64, on_event, &r);
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++)
        ck_assert_int_eq(sse_parse_feed(&p, pieces[i], strlen(pieces[i])), 0);
    ck_assert_int_eq(sse_parse_finish(&p, false), 0);
    /* Had the LFs been line ends of their own, "a" and "b" were two events. */
    ck_assert_str_eq(r.out.data, "[message||a\\nb]");
    sse_parse_release(&p);
    rx_buf_release(&r.out);
}
END_TEST

/* After finish() the parser reads a new stream: a reconnection that resumes. */
START_TEST(test_finish_starts_a_new_stream)
{
    static const char first[] = "retry: 50\nid: 5\ndata: a\n\nid: 6\nevent: e\ndata: cut";
    static const char second[] = BOM "data: b\n\n";
    struct sse_parse p;
    struct rec r = {.p = &p};

    rx_buf_init(&r.out, 1 << 10);
    sse_parse_init(&p, 64, on_event, &r);
    ck_assert_int_eq(sse_parse_feed(&p, first, strlen(first)), 0);
    ck_assert_int_eq(sse_parse_finish(&p, false), 0);
    ck_assert_str_eq(sse_parse_last_id(&p), "5");
    /* The BOM is skipped again; the cut event's id and name are gone. */
    ck_assert_int_eq(sse_parse_feed(&p, second, strlen(second)), 0);
    ck_assert_int_eq(sse_parse_finish(&p, false), 0);
    ck_assert_str_eq(r.out.data, "[message|5|a][message|5|b]");
    ck_assert_int_eq(p.retry_ms, 50);
    sse_parse_release(&p);
    rx_buf_release(&r.out);
}
END_TEST

/* Without a callback the parser still tracks the resume point and retry. */
START_TEST(test_no_callback)
{
    static const char s[] = "retry: 7\nid: x1\ndata: a\n\n";
    struct sse_parse p;

    sse_parse_init(&p, 64, NULL, NULL);
    ck_assert_str_eq(sse_parse_last_id(&p), "");
    ck_assert_int_eq(sse_parse_feed(&p, s, strlen(s)), 0);
    ck_assert_int_eq(sse_parse_finish(&p, true), 0);
    ck_assert_str_eq(sse_parse_last_id(&p), "x1");
    ck_assert_int_eq(p.retry_ms, 7);
    sse_parse_release(&p);
}
END_TEST

/* A big event in many feeds: no quadratic copy, the exact bytes come out. */
START_TEST(test_big_event)
{
    enum { N = 1 << 20 };
    char *s = malloc(N + 16);
    struct sse_parse p;
    struct rec r = {.p = &p};
    size_t n;

    ck_assert_ptr_nonnull(s);
    n = (size_t)sprintf(s, "data: ");
    memset(s + n, 'x', N);
    n += N;
    memcpy(s + n, "\r\n\r\n", 4);
    n += 4;
    rx_buf_init(&r.out, 2 * N);
    sse_parse_init(&p, N + 6, on_event, &r);
    for (size_t i = 0; i < n; i += 4093)
        ck_assert_int_eq(sse_parse_feed(&p, s + i, n - i < 4093 ? n - i : 4093), 0);
    ck_assert_int_eq(r.n, 1);
    ck_assert_uint_eq(r.out.len, N + strlen("[message||]"));
    sse_parse_release(&p);
    rx_buf_release(&r.out);
    free(s);
}
END_TEST

Suite *sse_parse_suite(void)
{
    Suite *s = suite_create("sse_parse");
    TCase *tc = tcase_create("cases");
    TCase *api = tcase_create("api");
    int n = (int)(sizeof(cases) / sizeof(cases[0]));

    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_whole, 0, n);
    tcase_add_loop_test(tc, test_split_every_position, 0, n);
    tcase_add_loop_test(tc, test_split_every_pair, 0, n);
    suite_add_tcase(s, tc);
    tcase_add_test(api, test_crlf_across_feeds);
    tcase_add_test(api, test_finish_starts_a_new_stream);
    tcase_add_test(api, test_no_callback);
    tcase_add_test(api, test_big_event);
    suite_add_tcase(s, api);
    return s;
}
