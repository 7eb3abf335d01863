/*
 * session_search - the sessions list, searched and paged
 * (session_table_search, see session_table.h).
 *
 * With a store, the list is the store's (SPEC 6.2: it holds every session,
 * memory only those in use): a page comes from store_sessions_page, in the
 * order of its index, and matches from its full-text index; a session that
 * is in memory shows its title and count from there (fresher than its row,
 * which is written with its inputs). The page's order and `next` are the
 * row's updated_at, which the store rewrites when it moves by a second or
 * the messages change (store.h).
 *
 * With no store (--db :memory:) the sessions in memory are scanned for the
 * same words, matched at token boundaries, so both answer alike for ASCII
 * text; the table's lock is held only to take a reference to each
 * candidate, each is then read under its own lock.
 */
#include "server/session_table.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "effects/log.h"
#include "server/event.h"
#include "server/session_internal.h"
#include "store/store.h"

/* A query cut into words, and each word as the scan looks for it. */
struct query {
    char *copy; /* the query, cut into words in place */
    const char *words[STORE_SEARCH_WORDS_MAX];
    char *norm[STORE_SEARCH_WORDS_MAX]; /* " tok tok " (the last: " tok tok") */
    size_t n;
};

/* A candidate: a reference, and the updatedAt it is ordered by. */
struct hit {
    struct session *s;
    int64_t updated;
};

/* Letters and digits as the scan sees them: ASCII ones, and any byte of UTF-8. */
static bool token_byte(unsigned char c)
{
    return c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z');
}

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/*
 * `text` as " tok tok tok " (ASCII lower case) into `b`: a word then matches
 * at token boundaries with strstr, a phrase as consecutive tokens. `last`
 * leaves the closing space off (a prefix). 0 or -ENOMEM.
 */
static int normalize(const char *text, bool last, struct rx_buf *b)
{
    bool in = false;

    rx_buf_reset(b);
    if (rx_buf_putc(b, ' '))
        return -ENOMEM;
    for (const char *p = text; *p; p++) {
        if (token_byte((unsigned char)*p)) {
            if (rx_buf_putc(b, lower(*p)))
                return -ENOMEM;
            in = true;
        } else if (in) {
            if (rx_buf_putc(b, ' '))
                return -ENOMEM;
            in = false;
        }
    }
    if (in && !last && rx_buf_putc(b, ' '))
        return -ENOMEM;
    if (!in && last && b->len > 1)
        rx_buf_truncate(b, b->len - 1);
    return 0;
}

static void query_release(struct query *q)
{
    for (size_t i = 0; i < q->n; i++)
        free(q->norm[i]);
    free(q->copy);
    memset(q, 0, sizeof(*q));
}

/* Cut `text` at white space; words without a letter or digit are dropped. */
static int query_parse(const char *text, struct query *q)
{
    const char *sep = " \t\r\n\f\v";
    char *save = NULL;

    memset(q, 0, sizeof(*q));
    if (!text)
        return 0;
    if (strlen(text) > SESSION_SEARCH_QUERY_MAX)
        return -E2BIG;
    if (!(q->copy = strdup(text)))
        return -ENOMEM;
    for (char *w = strtok_r(q->copy, sep, &save); w; w = strtok_r(NULL, sep, &save)) {
        bool has_token = false;

        for (const char *p = w; *p && !has_token; p++)
            has_token = token_byte((unsigned char)*p);
        if (!has_token)
            continue;
        if (q->n == STORE_SEARCH_WORDS_MAX)
            return -E2BIG;
        q->words[q->n++] = w;
    }
    for (size_t i = 0; i < q->n; i++) {
        struct rx_buf b;

        rx_buf_init(&b, RX_BUF_SMALL_MAX);
        if (normalize(q->words[i], i + 1 == q->n, &b)) {
            rx_buf_release(&b);
            return -ENOMEM;
        }
        q->norm[i] = rx_buf_take(&b, NULL);
    }
    return 0;
}

/* Which words of `q` `text` holds, added to *mask. 0 or -ENOMEM. */
static int scan_text(const struct query *q, const char *text, struct rx_buf *scratch,
                     unsigned *mask)
{
    if (!text || !*text)
        return 0;
    if (normalize(text, false, scratch))
        return -ENOMEM;
    for (size_t i = 0; i < q->n; i++)
        if (!(*mask & (1u << i)) && strstr(scratch->data, q->norm[i]))
            *mask |= 1u << i;
    return 0;
}

/* Does the session hold every word, in its title or any message? Lock held. */
static bool scan_session(const struct query *q, struct session *s, struct rx_buf *scratch)
{
    const struct rx_message_list *lists[] = {&s->state.user, &s->state.assistant};
    unsigned all = (1u << q->n) - 1, mask = 0;

    if (scan_text(q, s->title, scratch, &mask))
        goto out_nomem;
    for (size_t l = 0; l < 2 && mask != all; l++)
        for (size_t i = 0; i < lists[l]->len && mask != all; i++)
            if (scan_text(q, lists[l]->items[i].content, scratch, &mask))
                goto out_nomem;
    return mask == all;

out_nomem:
    log_warn("search: out of memory scanning session %s", s->id);
    return false;
}

/* Newest first; ties by id, so pages are stable. */
static int hit_cmp(const void *a, const void *b)
{
    const struct hit *x = a, *y = b;

    if (x->updated != y->updated)
        return x->updated < y->updated ? 1 : -1;
    return -strcmp(x->s->id, y->s->id);
}

/*
 * A reference to each session of the table, with the table's lock held
 * only for that. 0 or -ENOMEM.
 */
static int candidates(struct session_table *t, struct hit **out, size_t *n)
{
    struct hit *v;
    size_t k = 0;

    pthread_mutex_lock(&t->lock);
    v = calloc(t->count ? t->count : 1, sizeof(*v));
    if (v) {
        for (struct session *s = t->head; s; s = s->next) {
            session_ref(s);
            v[k++].s = s;
        }
    }
    pthread_mutex_unlock(&t->lock);
    if (!v)
        return -ENOMEM;
    *out = v;
    *n = k;
    return 0;
}

/* A stored session's entry; one in memory shows its own title and count. */
static json_t *stored_entry(struct session_table *t, const struct store_session_info *r)
{
    struct event_session e = {r->id, r->created_at, r->updated_at,
                              r->title ? r->title : SESSION_FEED_UNTITLED, r->messages};
    struct session *s = session_table_peek(t, r->id);
    json_t *o;

    if (!s)
        return event_session_json(&e);
    pthread_mutex_lock(&s->lock);
    {
        struct event_session m;

        session_feed_entry(s, &m);
        e.title = m.title;
        e.message_count = m.message_count;
        o = event_session_json(&e); /* under the lock: m.title is the session's */
    }
    pthread_mutex_unlock(&s->lock);
    session_unref(s);
    return o;
}

/* session_table_search with a store: its page, as it orders it. */
static int stored_page(struct session_table *t, const char *owner, const struct query *q,
                       int64_t before, int limit, struct session_page *page)
{
    struct store_list l = {0};
    size_t take = (size_t)limit;
    json_t *arr;
    /* One more than asked: whether there is a next page. */
    int err =
        store_sessions_page(t->env.store, owner, q->words, q->n, before, take + 1, &l);

    if (err)
        return err;
    /* The page's last updatedAt is `next`: those that share it come too. */
    while (take < l.n && l.v[take].updated_at == l.v[take - 1].updated_at)
        take++;
    if (take > l.n)
        take = l.n;
    if (!(arr = json_array()))
        err = -ENOMEM;
    for (size_t i = 0; !err && i < take; i++)
        if (json_array_append_new(arr, stored_entry(t, &l.v[i])))
            err = -ENOMEM;
    /* Every row read is on the page only when the store had no more than
       one past the limit, all sharing its updatedAt: then ask on anyway. */
    page->next =
        !err && (take < l.n || l.n > (size_t)limit) ? l.v[take - 1].updated_at : -1;
    page->list = err ? NULL : arr;
    if (err)
        json_decref(arr);
    store_list_release(&l);
    return err;
}

/*
 * Keep the hits of `owner` (NULL: anyone's) that match and are older than
 * `before`, each read under its own lock; the others' references are
 * dropped. Returns how many are kept.
 */
static size_t filter(struct hit *v, size_t n, const char *owner, const struct query *q,
                     bool scan, int64_t before)
{
    struct rx_buf scratch;
    size_t k = 0;

    rx_buf_init(&scratch, RX_BUF_STATE_MAX);
    for (size_t i = 0; i < n; i++) {
        struct session *s = v[i].s;
        struct event_session e;
        bool keep;

        pthread_mutex_lock(&s->lock);
        session_feed_entry(s, &e);
        keep = !s->deleted && (!owner || !strcmp(s->owner, owner)) &&
               (before < 0 || e.updated_at < before) &&
               (!scan || scan_session(q, s, &scratch));
        pthread_mutex_unlock(&s->lock);
        if (!keep) {
            session_unref(s);
            continue;
        }
        v[k].s = s;
        v[k++].updated = e.updated_at;
    }
    rx_buf_release(&scratch);
    return k;
}

/* The page's entries, each read under its session's lock. NEW array or NULL. */
static json_t *page_json(const struct hit *v, size_t n)
{
    json_t *arr = json_array();

    for (size_t i = 0; arr && i < n; i++) {
        struct event_session e;
        json_t *o;

        pthread_mutex_lock(&v[i].s->lock);
        session_feed_entry(v[i].s, &e);
        o = event_session_json(&e);
        pthread_mutex_unlock(&v[i].s->lock);
        if (json_array_append_new(arr, o)) {
            json_decref(arr);
            arr = NULL;
        }
    }
    return arr;
}

int session_table_search(struct session_table *t, const char *owner, const char *text,
                         int64_t before, int limit, struct session_page *page)
{
    struct query q;
    struct hit *v = NULL;
    size_t n = 0, take;
    int err;

    if (limit < 1)
        limit = 1;
    if ((err = query_parse(text, &q)))
        goto out_release;
    if (t->env.store) {
        err = stored_page(t, owner, &q, before, limit, page);
        goto out_release;
    }
    if ((err = candidates(t, &v, &n)))
        goto out_release;
    n = filter(v, n, owner, &q, q.n, before);
    qsort(v, n, sizeof(*v), hit_cmp);
    take = (size_t)limit < n ? (size_t)limit : n;
    /* Those that share the last one's updatedAt too: `next` must lose none. */
    while (take && take < n && v[take].updated == v[take - 1].updated)
        take++;
    page->next = take < n ? v[take - 1].updated : -1;
    page->list = page_json(v, take);
    if (!page->list)
        err = -ENOMEM;
    for (size_t i = 0; i < n; i++)
        session_unref(v[i].s);

out_release:
    free(v);
    query_release(&q);
    return err;
}

json_t *session_table_list(struct session_table *t, const char *owner)
{
    struct session_page page = {NULL, -1};

    if (session_table_search(t, owner, NULL, -1,
                             t->env.store ? SESSION_LIST_MAX : INT_MAX, &page))
        return NULL;
    return page.list;
}
