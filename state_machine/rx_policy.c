/*
 * rx_policy - tool policies and approvals. See rx_policy.h.
 *
 * The map is a sorted array: a session overrides a handful of tools, looks
 * one up per tool call, and encodes them all in a stable order; a hash would
 * need sorting for the encoding anyway.
 */
#include "state_machine/rx_policy.h"

#include <errno.h>
#include <string.h>

#include "state_machine/rx_alloc.h"

static const char *const policy_names[] = {
    [RX_POLICY_AUTO] = "auto",
    [RX_POLICY_ASK] = "ask",
    [RX_POLICY_DENY] = "deny",
};

static const char *const approval_names[] = {
    [RX_APPROVAL_PENDING] = "pending",   /* SPEC 3.6 */
    [RX_APPROVAL_APPROVED] = "approved", /* by a review or a retry */
    [RX_APPROVAL_REJECTED] = "rejected", /* by a review, a new message or a cancel */
    [RX_APPROVAL_IN_DOUBT] = "in-doubt", /* SPEC 3.7 */
    [RX_APPROVAL_RESOLVED] = "resolved", /* the person gave its result */
};

#define N_POLICIES  (sizeof(policy_names) / sizeof(policy_names[0]))
#define N_APPROVALS (sizeof(approval_names) / sizeof(approval_names[0]))

const char *rx_policy_name(enum rx_policy p)
{
    return (size_t)p < N_POLICIES ? policy_names[p] : NULL;
}

/* The index of `s` among names[1..n) (0 is the unnamed value), or 0. */
static size_t name_index(const char *const *names, size_t n, const char *s)
{
    for (size_t i = 1; s && i < n; i++)
        if (!strcmp(s, names[i]))
            return i;
    return 0;
}

int rx_policy_parse(const char *s, enum rx_policy *out)
{
    size_t i = name_index(policy_names, N_POLICIES, s);

    if (!i)
        return -EINVAL;
    *out = (enum rx_policy)i;
    return 0;
}

const char *rx_approval_name(enum rx_approval a)
{
    return (size_t)a < N_APPROVALS ? approval_names[a] : NULL;
}

int rx_approval_parse(const char *s, enum rx_approval *out)
{
    size_t i = name_index(approval_names, N_APPROVALS, s);

    if (!i)
        return -EINVAL;
    *out = (enum rx_approval)i;
    return 0;
}

bool rx_approval_is_awaiting(enum rx_approval a)
{
    return a == RX_APPROVAL_PENDING || a == RX_APPROVAL_IN_DOUBT;
}

/* ---- the map ---------------------------------------------------------------- */

void rx_policy_map_init(struct rx_policy_map *m)
{
    memset(m, 0, sizeof(*m));
}

void rx_policy_map_release(struct rx_policy_map *m)
{
    for (size_t i = 0; i < m->len; i++)
        rx_free(m->items[i].tool);
    rx_free(m->items);
    rx_policy_map_init(m);
}

/* The position of `tool`, or where it would go; *found says which. */
static size_t lower_bound(const struct rx_policy_map *m, const char *tool, bool *found)
{
    size_t lo = 0, hi = m->len;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (strcmp(m->items[mid].tool, tool) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < m->len && !strcmp(m->items[lo].tool, tool);
    return lo;
}

enum rx_policy rx_policy_map_get(const struct rx_policy_map *m, const char *tool)
{
    bool found;
    size_t i = lower_bound(m, tool, &found);

    return found ? m->items[i].policy : RX_POLICY_UNSET;
}

int rx_policy_map_reserve(struct rx_policy_map *m, size_t extra)
{
    size_t ncap = m->cap ? m->cap : 4;
    struct rx_tool_policy *p;

    if (m->len + extra <= m->cap)
        return 0;
    while (ncap < m->len + extra)
        ncap *= 2;
    p = rx_realloc(m->items, m->cap * sizeof(*p), ncap * sizeof(*p));
    if (!p)
        return -ENOMEM;
    m->items = p;
    m->cap = ncap;
    return 0;
}

bool rx_policy_map_put(struct rx_policy_map *m, char **tool, enum rx_policy p)
{
    bool found;
    size_t i = lower_bound(m, *tool, &found);

    if (found && p == RX_POLICY_UNSET) {
        rx_free(m->items[i].tool);
        memmove(&m->items[i], &m->items[i + 1], (m->len - i - 1) * sizeof(m->items[0]));
        m->len--;
        return true;
    }
    if (found) {
        if (m->items[i].policy == p)
            return false;
        m->items[i].policy = p;
        return true;
    }
    if (p == RX_POLICY_UNSET)
        return false;
    memmove(&m->items[i + 1], &m->items[i], (m->len - i) * sizeof(m->items[0]));
    m->items[i].tool = *tool;
    m->items[i].policy = p;
    m->len++;
    *tool = NULL;
    return true;
}

int rx_policy_map_copy(const struct rx_policy_map *src, struct rx_policy_map *dst)
{
    struct rx_policy_map m;

    rx_policy_map_init(&m);
    if (rx_policy_map_reserve(&m, src->len))
        goto out_release;
    for (size_t i = 0; i < src->len; i++) {
        m.items[i].tool = rx_strdup(src->items[i].tool);
        if (!m.items[i].tool)
            goto out_release;
        m.items[i].policy = src->items[i].policy;
        m.len++;
    }
    *dst = m;
    return 0;

out_release:
    rx_policy_map_release(&m);
    rx_policy_map_init(dst);
    return -ENOMEM;
}

int rx_policy_map_encode(const struct rx_policy_map *m, struct rx_buf *b)
{
    size_t start = b->len;
    int err = rx_buf_putc(b, '{');

    for (size_t i = 0; i < m->len && !err; i++) {
        if ((i && (err = rx_buf_putc(b, ','))) ||
            (err = rx_buf_put_json_str(b, m->items[i].tool)) ||
            (err = rx_buf_putc(b, ':')) ||
            (err = rx_buf_put_json_str(b, rx_policy_name(m->items[i].policy))))
            break;
    }
    if (!err)
        err = rx_buf_putc(b, '}');
    if (err)
        rx_buf_truncate(b, start);
    return err;
}

int rx_policy_map_decode(json_t *json, struct rx_policy_map *m, struct rx_error *err)
{
    const char *key;
    json_t *v;
    int rc = -EINVAL;

    rx_policy_map_init(m);
    if (!json || json_is_null(json))
        return 0;
    if (!json_is_object(json) || json_object_size(json) > RX_POLICIES_MAX)
        return rx_error_set(err, -EINVAL,
                            "'toolPolicies' must be an object of at most %d tools",
                            RX_POLICIES_MAX);
    if (rx_policy_map_reserve(m, json_object_size(json)))
        return -ENOMEM;
    json_object_foreach(json, key, v)
    {
        enum rx_policy p;
        char *tool;

        if (!*key || rx_policy_parse(json_string_value(v), &p)) {
            rx_error_set(err, 0,
                         "'toolPolicies' must map tool names to \"auto\", "
                         "\"ask\" or \"deny\"");
            goto out_release;
        }
        /* A name with a NUL reads as a shorter one: a duplicate, refused. */
        if (rx_policy_map_get(m, key) != RX_POLICY_UNSET) {
            rx_error_set(err, 0, "'toolPolicies' names '%s' twice", key);
            goto out_release;
        }
        tool = rx_strdup(key);
        if (!tool) {
            rc = -ENOMEM;
            goto out_release;
        }
        rx_policy_map_put(m, &tool, p); /* room reserved: takes tool */
    }
    return 0;

out_release:
    rx_policy_map_release(m);
    return rc;
}

bool rx_policy_map_check(const struct rx_policy_map *m)
{
    if (m->len > m->cap || m->len > RX_POLICIES_MAX)
        return false;
    for (size_t i = 0; i < m->len; i++) {
        const struct rx_tool_policy *e = &m->items[i];

        if (!e->tool || !*e->tool || e->policy == RX_POLICY_UNSET ||
            !rx_policy_name(e->policy))
            return false;
        if (i && strcmp(m->items[i - 1].tool, e->tool) >= 0)
            return false;
    }
    return true;
}
