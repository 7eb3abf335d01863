/*
 * api_sessions - the routes of the sessions list (SPEC 4): search and pages
 * of GET /sessions, rename (PATCH), export, and the sessions feed (GET
 * /events); import is api_import.c. See api_internal.h; the shapes are in README.md
 * ("API").
 */
#include "server/api_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "effects/log.h"
#include "server/reply.h"
#include "server/session.h"
#include "server/session_import.h"
#include "server/session_table.h"
#include "state_machine/rx_json.h"

/* Inputs read from the log per page of an export. */
#define EXPORT_PAGE_ROWS 1000
/* How much of an export MHD asks for at a time. */
#define EXPORT_BLOCK (64u << 10)

/* ---- GET /sessions ----------------------------------------------------------- */

/* Whose sessions `who` asks for: ?owner= filters an admin's lists (SPEC 4.4). */
static const char *owner_filter(const struct principal *who, struct MHD_Connection *conn)
{
    return principal_filter(
        who, MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "owner"));
}

enum MHD_Result api_sessions_list(struct door *srv, const struct principal *who,
                                  struct MHD_Connection *conn)
{
    const char *owner = owner_filter(who, conn);
    const char *q = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "q");
    const char *l = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
    const char *b = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "before");
    long long limit = SESSION_PAGE_DEFAULT, before = -1;
    struct session_page page;
    int err;

    /* No paging asked: the whole list, as it always was (an array). */
    if (!q && !l && !b)
        return reply_json(conn, 200, session_table_list(srv->sessions, owner));
    if (l && (limit = door_parse_count(l)) < 1)
        return reply_error(conn, 400, "invalid-input", "limit",
                           "'limit' must be an integer from 1 to %d", SESSION_PAGE_MAX);
    if (limit > SESSION_PAGE_MAX)
        limit = SESSION_PAGE_MAX;
    if (b && (before = door_parse_count(b)) < 0)
        return reply_error(conn, 400, "invalid-input", "before",
                           "'before' must be a non-negative integer (an updatedAt from "
                           "the last page's 'next')");
    err = session_table_search(srv->sessions, owner, q, before, (int)limit, &page);
    if (err == -E2BIG)
        return reply_error(conn, 400, "invalid-input", "q",
                           "'q' may hold at most %d words and %d bytes",
                           STORE_SEARCH_WORDS_MAX, SESSION_SEARCH_QUERY_MAX);
    if (err)
        return api__store_error(conn, err);
    /* "o" steals both, even when the pack fails. */
    return reply_json(conn, 200,
                      json_pack("{s:o, s:o}", "sessions", page.list, "next",
                                page.next < 0 ? json_null() : json_integer(page.next)));
}

/* ---- PATCH /sessions/<sid> ------------------------------------------------------- */

enum MHD_Result api_session_rename(struct door *srv, struct MHD_Connection *conn,
                                   struct session *s, const struct rx_buf *body)
{
    json_t *j, *title;
    enum MHD_Result ret;
    int err;

    if (door_is_stopping(srv))
        return reply_error(conn, 503, "shutting-down", NULL, "the server is stopping");
    if (!api__content_type_ok(conn))
        return reply_error(conn, 415, "unsupported-media-type", NULL,
                           "send {\"title\": ...} as Content-Type: application/json");
    if ((err = rx_json_parse(body->data, body->len, 0, &j, NULL)) == -ENOMEM)
        return reply_error(conn, 500, "internal", NULL, "out of memory");
    title = json_object_get(j, "title");
    if (!json_is_string(title) || !session_title_is_valid(json_string_value(title))) {
        json_decref(j);
        return reply_error(conn, 400, "invalid-input", "title",
                           "send {\"title\": <a string that is not blank, of at most %d "
                           "characters>}",
                           SESSION_TITLE_MAX);
    }
    err = session_table_rename(srv->sessions, session_id(s), json_string_value(title));
    if (err == -ENOENT)
        ret = reply_error(conn, 404, "not-found", NULL, "no such session");
    else if (err)
        ret = api__store_error(conn, err);
    else
        ret = reply_json(conn, 200,
                         json_pack("{s:s, s:O}", "id", session_id(s), "title", title));
    json_decref(j);
    return ret;
}

/* ---- GET /sessions/<sid>/export -------------------------------------------------- */

/* An export on its way: the log read page by page as MHD takes the bytes. */
struct export_stream {
    struct session *s; /* a reference */
    int64_t after;     /* the last seq sent */
    bool any, done;    /* an input was sent; the closing bytes are in `out` */
    struct rx_buf page, out;
    size_t off; /* bytes of `out` already handed to MHD */
};

/* The next page of the log (its rows, comma-joined) or the end into x->out. */
static int export_more(struct export_stream *x)
{
    int64_t last;
    int err;

    rx_buf_reset(&x->page);
    if ((err = session_history_page(x->s, x->after, EXPORT_PAGE_ROWS, &x->page, &last)))
        return err;
    if (x->page.len <= 2) { /* "[]": the whole log is out */
        x->done = true;
        return rx_buf_puts(&x->out, "]}") ? -ENOMEM : 0;
    }
    /* The page's rows without its brackets. */
    if ((x->any && rx_buf_putc(&x->out, ',')) ||
        rx_buf_append(&x->out, x->page.data + 1, x->page.len - 2))
        return -ENOMEM;
    x->any = true;
    x->after = last;
    return 0;
}

static ssize_t export_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct export_stream *x = cls;
    size_t n;
    int err;

    (void)pos;
    while (x->off == x->out.len) {
        if (x->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        rx_buf_reset(&x->out);
        x->off = 0;
        /* After the headers, a failure can only cut the document short. */
        if ((err = export_more(x))) {
            log_warn("session %s: export stopped at input %lld: %s", session_id(x->s),
                     (long long)x->after, strerror(-err));
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    n = x->out.len - x->off < max ? x->out.len - x->off : max;
    memcpy(buf, x->out.data + x->off, n);
    x->off += n;
    return (ssize_t)n;
}

static void export_free(void *cls)
{
    struct export_stream *x = cls;

    session_unref(x->s);
    rx_buf_release(&x->page);
    rx_buf_release(&x->out);
    free(x);
}

/* The document's head: format, version, title, and the inputs' opening. */
static int export_head(struct export_stream *x)
{
    char *title = NULL;
    int err = session_title(x->s, &title);

    if (!err &&
        (rx_buf_printf(&x->out,
                       "{\"format\":\"" SESSION_EXPORT_FORMAT
                       "\",\"version\":%d,\"title\":",
                       SESSION_EXPORT_VERSION) ||
         (title ? rx_buf_put_json_str(&x->out, title) : rx_buf_puts(&x->out, "null")) ||
         rx_buf_puts(&x->out, ",\"inputs\":[")))
        err = -ENOMEM;
    free(title);
    return err;
}

/*
 * The first page is read before anything is sent, so a session without a
 * log (501) or a store that fails answers with its status; the rest follows
 * page by page (EXPORT_PAGE_ROWS inputs, each page one short read of the
 * log's read-only connection), so a long log neither sits whole in memory
 * nor holds the log's reader between pages.
 */
enum MHD_Result api_session_export(struct door *srv, struct MHD_Connection *conn,
                                   struct session *s)
{
    struct export_stream *x = calloc(1, sizeof(*x));
    struct MHD_Response *r;
    char disposition[128];
    int err;

    (void)srv;
    if (!x)
        return reply_error(conn, 500, "internal", NULL, "out of memory");
    session_ref(s);
    x->s = s;
    rx_buf_init(&x->page, RX_BUF_STATE_MAX);
    rx_buf_init(&x->out, RX_BUF_STATE_MAX);
    if ((err = export_head(x)) || (err = export_more(x))) {
        export_free(x);
        return err == -ENOMEM ? reply_error(conn, 500, "internal", NULL, "out of memory")
                              : api__store_error(conn, err);
    }
    r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, EXPORT_BLOCK, export_read, x,
                                          export_free);
    if (!r) {
        export_free(x);
        return reply_error(conn, 500, "internal", NULL, "out of memory");
    }
    /* Ids are letters, digits and -_. (session_table.c): safe in the header. */
    snprintf(disposition, sizeof(disposition),
             "attachment; filename=\"reflexor-session-%s.json\"", session_id(s));
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Content-Disposition", disposition);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    return reply_queue(conn, MHD_HTTP_OK, r);
}

/* ---- GET /events ----------------------------------------------------------------- */

enum MHD_Result api_events(struct door *srv, const struct principal *who,
                           struct MHD_Connection *conn)
{
    return reply_stream(conn, session_table_follow(srv->sessions, owner_filter(who, conn),
                                                   api__attach_stream, conn));
}
