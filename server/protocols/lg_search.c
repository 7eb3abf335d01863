/*
 * lg_search - POST /threads/search of the LangGraph subset: the sessions as
 * threads, filtered (ids, metadata, status), sorted (created_at,
 * updated_at or thread_id, either way) and paged (limit, offset, with
 * X-Pagination-Total and X-Pagination-Next).
 *
 * Which sessions: with a store, the store's list, read in pages of
 * LG_SEARCH_PAGE (store_list_sessions), so a search never needs every
 * session in memory (SPEC 6.2): only the ids and times of the matches are
 * kept to sort them, and only the threads of the page answered are looked
 * at (a status filter looks at each candidate: it is the session's state).
 * With --db :memory: every session is in memory, and its list is walked.
 * Metadata filters read the metadata of every thread that has some, a page
 * of the store's records at a time (lg__thread_meta_all), once per search,
 * rather than one record per candidate.
 */
#include "server/protocols/lg_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/session_table.h"
#include "store/store.h"

/* The most threads one search returns. */
#define LG_SEARCH_MAX 1000
/* Sessions read from the store at a time. */
#define LG_SEARCH_PAGE 512

/* One thread that passed the filters. */
struct found {
    char id[SESSION_ID_MAX + 1];
    int64_t key;
};

struct found_list {
    struct found *v;
    size_t n, cap;
};

/* What the request asks for. */
struct query {
    json_t *q;           /* the body, borrowed */
    const char *sort_by; /* NULL: created_at */
    bool desc;
    json_t *meta; /* {tid: what clients set} from the store, or NULL: ask each thread */
    const char *owner; /* whose threads (SPEC 4.4); NULL: everyone's */
};

static int by_key(const void *a, const void *b, void *desc)
{
    const struct found *x = a, *y = b;
    int c = x->key < y->key ? -1 : x->key > y->key ? 1 : strcmp(x->id, y->id);

    return *(bool *)desc ? -c : c;
}

/* Keep thread `id` when it passes the search's filters. */
static bool passes(struct door *srv, const char *id, const struct query *qu)
{
    json_t *q = qu->q;
    json_t *ids = json_object_get(q, "ids"), *want = json_object_get(q, "metadata"), *v;
    const char *status = json_string_value(json_object_get(q, "status"));
    bool ok = !json_array_size(ids);
    const char *k;
    size_t i;

    json_array_foreach(ids, i, v)
    {
        ok |= json_is_string(v) && !strcmp(json_string_value(v), id);
    }
    if (ok && json_object_size(want)) {
        json_t *have = qu->meta ? lg__thread_meta_with(json_object_get(qu->meta, id))
                                : lg__thread_meta(id);

        json_object_foreach(want, k, v)
        {
            ok &= json_equal(json_object_get(have, k), v);
        }
        json_decref(have);
    }
    if (ok && status) {
        struct session *s = session_table_get(srv->sessions, id);

        ok = s && !strcmp(lg_thread_status(s), status);
        if (s)
            session_unref(s);
    }
    return ok;
}

/* Add thread `id` (created, updated: ms) when it passes. 0 or -ENOMEM. */
static int consider(struct door *srv, const struct query *qu, const char *id,
                    int64_t created, int64_t updated, struct found_list *l)
{
    struct found *f;

    if (strlen(id) > SESSION_ID_MAX || !passes(srv, id, qu))
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct found *v = realloc(l->v, cap * sizeof(*v));

        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    f = &l->v[l->n++];
    strcpy(f->id, id);
    f->key = qu->sort_by && !strcmp(qu->sort_by, "thread_id")    ? 0
             : qu->sort_by && !strcmp(qu->sort_by, "updated_at") ? updated
                                                                 : created;
    return 0;
}

/* The matches among the stored sessions, a page of the list at a time. */
static int collect_stored(struct door *srv, struct store *st, const struct query *qu,
                          struct found_list *l)
{
    struct store_list page = {0};
    struct store_cursor at;
    char last[SESSION_ID_MAX + 1] = "";
    bool more = true;
    int err = 0;

    while (!err && more) {
        err = store_list_sessions(st, *last ? &at : NULL, LG_SEARCH_PAGE, &page);
        for (size_t i = 0; !err && i < page.n; i++)
            if (!qu->owner || !strcmp(page.v[i].owner, qu->owner))
                err = consider(srv, qu, page.v[i].id, page.v[i].created_at,
                               page.v[i].updated_at, l);
        more = !err && page.n == LG_SEARCH_PAGE;
        if (more) {
            snprintf(last, sizeof(last), "%s", page.v[page.n - 1].id);
            at.created_at = page.v[page.n - 1].created_at;
            at.id = last;
        }
        store_list_release(&page);
    }
    return err;
}

/* The matches among the sessions in memory (--db :memory: holds them all). */
static int collect_resident(struct door *srv, const struct query *qu,
                            struct found_list *l)
{
    json_t *all = session_table_list(srv->sessions, qu->owner), *e;
    size_t i;
    int err = all ? 0 : -ENOMEM;

    json_array_foreach(all, i, e)
    {
        const char *id = json_string_value(json_object_get(e, "id"));

        if (!err && id)
            err =
                consider(srv, qu, id, json_integer_value(json_object_get(e, "createdAt")),
                         json_integer_value(json_object_get(e, "updatedAt")), l);
    }
    json_decref(all);
    return err;
}

/* NEW: the threads of l->v[offset..offset+limit), with `select`ed fields. */
static json_t *threads_page(struct door *srv, const struct found_list *l, json_t *select,
                            json_int_t limit, json_int_t offset)
{
    json_t *out = json_array();

    for (size_t i = (size_t)offset;
         out && i < l->n && json_array_size(out) < (size_t)limit; i++) {
        struct session *s = session_table_get(srv->sessions, l->v[i].id);
        int err = 0;
        json_t *t = s ? lg__thread_json(s, select, &err) : NULL;

        if (s)
            session_unref(s);
        if (err == -ENOMEM || (t && json_array_append_new(out, t))) {
            json_decref(out);
            out = NULL;
        }
    }
    return out;
}

/* 200 with the page and its pagination headers. */
static enum MHD_Result reply_page(struct MHD_Connection *conn, json_t *out, size_t n,
                                  json_int_t limit, json_int_t offset)
{
    char *text = json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER), total[32];
    struct MHD_Response *r =
        text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE)
             : NULL;

    if (!r) {
        free(text);
        return lg__detail(conn, 500, "out of memory");
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    snprintf(total, sizeof(total), "%zu", n);
    MHD_add_response_header(r, "X-Pagination-Total", total);
    /* offset may be anything up to INT64_MAX: compared, never added past n. */
    if ((size_t)offset < n && n - (size_t)offset > (size_t)limit) {
        snprintf(total, sizeof(total), "%lld", (long long)(offset + limit));
        MHD_add_response_header(r, "X-Pagination-Next", total);
    }
    return lg__queue(conn, 200, r);
}

/* A count field of the body: its value, `dflt` when absent or null, -1 when not one. */
static json_int_t count_field(json_t *q, const char *name, json_int_t dflt)
{
    json_t *v = json_object_get(q, name);

    if (json_is_integer(v))
        return json_integer_value(v);
    return v && !json_is_null(v) ? -1 : dflt;
}

enum MHD_Result lg__threads_search(struct door *srv, const struct principal *who,
                                   struct MHD_Connection *conn, const struct rx_buf *body)
{
    enum MHD_Result ret;
    json_t *q = lg__body(conn, body, &ret), *out = NULL;
    struct found_list l = {0};
    struct store *st = session_table_store(srv->sessions);
    struct query qu = {q, NULL, true, NULL, principal_filter(who, NULL)};
    const char *order;
    json_int_t limit, offset;
    int err;

    if (!q)
        return ret;
    qu.sort_by = json_string_value(json_object_get(q, "sort_by"));
    order = json_string_value(json_object_get(q, "sort_order"));
    qu.desc = !order || strcmp(order, "asc");
    limit = count_field(q, "limit", 10);
    offset = count_field(q, "offset", 0);
    if (limit < 1 || limit > LG_SEARCH_MAX || offset < 0) {
        ret = lg__detail(conn, 422, "'limit' must be 1 to %d, 'offset' at least 0",
                         LG_SEARCH_MAX);
        goto out;
    }
    if (json_object_size(json_object_get(q, "values"))) {
        ret = lg__detail(conn, 422, "searching threads by 'values' is not supported");
        goto out;
    }
    /* Metadata filters read every thread's: one list, not one read per thread. */
    err = 0;
    if (st && json_object_size(json_object_get(q, "metadata")))
        qu.meta = lg__thread_meta_all(&err);
    if (!err)
        err = st ? collect_stored(srv, st, &qu, &l) : collect_resident(srv, &qu, &l);
    if (err) {
        ret = lg__table_error(conn, err, "");
        goto out;
    }
    if (l.n) /* no array at all when nothing matched */
        qsort_r(l.v, l.n, sizeof(*l.v), by_key, &qu.desc);
    if (!(out = threads_page(srv, &l, json_object_get(q, "select"), limit, offset)))
        ret = lg__detail(conn, 500, "out of memory");
    else
        ret = reply_page(conn, out, l.n, limit, offset);
out:
    json_decref(qu.meta);
    json_decref(out);
    json_decref(q);
    free(l.v);
    return ret;
}
