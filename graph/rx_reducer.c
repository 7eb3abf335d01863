/*
 * rx_reducer - see rx_reducer.h. The id-merging reducers follow LangGraph's
 * add_messages step for step (index by id, replace in place, mark removals,
 * filter at the end), so "remove then re-add in one update" keeps the
 * message where it was, exactly as there.
 */
#include "graph/rx_reducer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "graph/rx_uuid.h"

#include "state_machine/rx_alloc.h"

__attribute__((format(printf, 3, 4))) static int fail(struct rx_error *e, int code,
                                                      const char *fmt, ...)
{
    va_list ap;

    if (e) {
        va_start(ap, fmt);
        vsnprintf(e->text, sizeof(e->text), fmt, ap);
        va_end(ap);
    }
    return code;
}

static bool is_empty(json_t *v)
{
    return !v || json_is_null(v);
}

int rx_reducer_last_value(json_t *current, json_t *update, json_t **out,
                          struct rx_error *err)
{
    (void)current;
    if (!update)
        return fail(err, -EINVAL, "no update value");
    *out = json_incref(update);
    return 0;
}

int rx_reducer_append(json_t *current, json_t *update, json_t **out, struct rx_error *err)
{
    json_t *res;

    if (!json_is_array(update))
        return fail(err, -EINVAL, "append needs an array update");
    if (!is_empty(current) && !json_is_array(current))
        return fail(err, -EINVAL, "append needs an array value");
    /* json_copy of an array is shallow: the items are shared, not copied. */
    res = is_empty(current) ? json_array() : json_copy(current);
    if (!res || json_array_extend(res, update)) {
        json_decref(res);
        return fail(err, -ENOMEM, "out of memory");
    }
    *out = res;
    return 0;
}

int rx_reducer_max(json_t *current, json_t *update, json_t **out, struct rx_error *err)
{
    if (!json_is_number(update))
        return fail(err, -EINVAL, "max needs a number update");
    if (is_empty(current)) {
        *out = json_incref(update);
        return 0;
    }
    if (!json_is_number(current))
        return fail(err, -EINVAL, "max needs a number value");
    if (json_number_value(update) > json_number_value(current))
        *out = json_incref(update);
    else
        *out = json_incref(current);
    return 0;
}

static int uuid_next(void *ctx, char out[RX_REDUCER_ID_LEN])
{
    (void)ctx;
    _Static_assert(RX_REDUCER_ID_LEN >= RX_UUID_LEN, "a UUID must fit an id");
    rx_uuid_new(out);
    return 0;
}

static const struct rx_reducer_ids default_ids = {uuid_next, NULL};

static bool is_remove(json_t *m)
{
    const char *type = json_string_value(json_object_get(m, "type"));

    return type && !strcmp(type, "remove");
}

/*
 * The update as an array of messages that all carry a string id: id-less
 * messages are shallow-copied with a fresh id, the others shared.
 */
static int normalize(json_t *update, const struct rx_reducer_ids *ids, json_t **out,
                     struct rx_error *err)
{
    json_t *right, *m, *id, *copy;
    char buf[RX_REDUCER_ID_LEN];
    size_t i;
    int rc;

    if (json_is_object(update)) {
        /* One message alone is a list of one, as in LangGraph. */
        right = json_array();
        if (!right || json_array_append(right, update)) {
            json_decref(right);
            return fail(err, -ENOMEM, "out of memory");
        }
        update = right;
    } else if (json_is_array(update)) {
        json_incref(update);
    } else {
        return fail(err, -EINVAL, "messages update must be an array or an object");
    }
    right = json_array();
    if (!right) {
        json_decref(update);
        return fail(err, -ENOMEM, "out of memory");
    }
    json_array_foreach(update, i, m)
    {
        if (!json_is_object(m)) {
            rc = fail(err, -EINVAL, "message %zu is not an object", i);
            goto err_decref_both;
        }
        id = json_object_get(m, "id");
        if (json_is_string(id)) {
            if (json_array_append(right, m))
                goto err_nomem;
            continue;
        }
        if (id && !json_is_null(id)) {
            rc = fail(err, -EINVAL, "message %zu has a non-string id", i);
            goto err_decref_both;
        }
        if (is_remove(m)) {
            rc = fail(err, -EINVAL, "remove marker %zu has no id", i);
            goto err_decref_both;
        }
        rc = ids->next(ids->ctx, buf);
        if (rc) {
            fail(err, rc, "no id for message %zu", i);
            goto err_decref_both;
        }
        copy = json_copy(m);
        if (!copy || json_object_set_new(copy, "id", json_string(buf)) ||
            json_array_append_new(right, copy)) {
            goto err_nomem;
        }
    }
    json_decref(update);
    *out = right;
    return 0;

err_nomem:
    rc = fail(err, -ENOMEM, "out of memory");
err_decref_both:
    json_decref(update);
    json_decref(right);
    return rc;
}

static int merge_by_id(json_t *current, json_t *update, const struct rx_reducer_ids *ids,
                       bool patch, json_t **out, struct rx_error *err)
{
    json_t *right = NULL, *merged = NULL, *index = NULL, *removed = NULL, *res = NULL;
    json_t *m, *pos, *rec;
    const char *id;
    size_t i, start = 0;
    int rc;

    if (!is_empty(current) && !json_is_array(current))
        return fail(err, -EINVAL, "messages value must be an array");
    rc = normalize(update, ids ? ids : &default_ids, &right, err);
    if (rc)
        return rc;
    rc = -ENOMEM;
    merged = json_array();
    index = json_object();
    removed = json_object();
    if (!merged || !index || !removed)
        goto err_nomem;

    /* The last remove-all wins: nothing before it survives, current included. */
    for (i = json_array_size(right); i > 0; i--) {
        m = json_array_get(right, i - 1);
        if (is_remove(m) &&
            !strcmp(json_string_value(json_object_get(m, "id")), RX_REDUCER_REMOVE_ALL)) {
            start = i;
            break;
        }
    }
    if (!start && !is_empty(current)) {
        json_array_foreach(current, i, m)
        {
            if (json_array_append(merged, m))
                goto err_nomem;
            id = json_string_value(json_object_get(m, "id"));
            if (id && json_object_set_new(index, id, json_integer((json_int_t)i)))
                goto err_nomem;
        }
    }

    for (i = start; i < json_array_size(right); i++) {
        m = json_array_get(right, i);
        id = json_string_value(json_object_get(m, "id"));
        pos = json_object_get(index, id);
        if (!pos) {
            if (is_remove(m)) {
                rc = fail(err, -ENOENT, "cannot remove unknown id '%s'", id);
                goto err_release;
            }
            if (json_object_set_new(index, id,
                                    json_integer((json_int_t)json_array_size(merged))) ||
                json_array_append(merged, m))
                goto err_nomem;
            continue;
        }
        if (is_remove(m)) {
            if (json_object_set_new(removed, id, json_true()))
                goto err_nomem;
            continue;
        }
        json_object_del(removed, id);
        if (patch) {
            rec = json_copy(json_array_get(merged, (size_t)json_integer_value(pos)));
            if (!rec || json_object_update(rec, m)) {
                json_decref(rec);
                goto err_nomem;
            }
        } else {
            rec = json_incref(m);
        }
        if (json_array_set_new(merged, (size_t)json_integer_value(pos), rec))
            goto err_nomem;
    }

    if (json_object_size(removed)) {
        res = json_array();
        if (!res)
            goto err_nomem;
        json_array_foreach(merged, i, m)
        {
            id = json_string_value(json_object_get(m, "id"));
            if (id && json_object_get(removed, id))
                continue;
            if (json_array_append(res, m))
                goto err_nomem;
        }
        json_decref(merged);
        merged = res;
        res = NULL;
    }
    *out = merged;
    merged = NULL;
    rc = 0;
    goto err_release;

err_nomem:
    rc = fail(err, -ENOMEM, "out of memory");
err_release:
    json_decref(res);
    json_decref(removed);
    json_decref(index);
    json_decref(merged);
    json_decref(right);
    return rc;
}

int rx_reducer_add_messages(json_t *current, json_t *update,
                            const struct rx_reducer_ids *ids, json_t **out,
                            struct rx_error *err)
{
    return merge_by_id(current, update, ids, false, out, err);
}

int rx_reducer_patch_by_id(json_t *current, json_t *update,
                           const struct rx_reducer_ids *ids, json_t **out,
                           struct rx_error *err)
{
    return merge_by_id(current, update, ids, true, out, err);
}

const struct rx_reducer *rx_reducer_find(const struct rx_reducer *schema, size_t n,
                                         const char *key)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (schema[i].key && !strcmp(schema[i].key, key))
            return &schema[i];
    return NULL;
}

bool rx_reducer_is_last_value(const struct rx_reducer *schema, size_t n, const char *key)
{
    const struct rx_reducer *r = rx_reducer_find(schema, n, key);

    return !r || r->kind == RX_REDUCER_LAST_VALUE;
}

int rx_reducer_apply(const struct rx_reducer *r, const char *key, json_t *current,
                     json_t *update, const struct rx_reducer_ids *ids, json_t **out,
                     struct rx_error *err)
{
    struct rx_error local = {{0}};
    json_t *res = NULL;
    int rc;

    switch (r ? r->kind : RX_REDUCER_LAST_VALUE) {
    case RX_REDUCER_LAST_VALUE:
        rc = rx_reducer_last_value(current, update, &res, &local);
        break;
    case RX_REDUCER_APPEND:
        rc = rx_reducer_append(current, update, &res, &local);
        break;
    case RX_REDUCER_MAX:
        rc = rx_reducer_max(current, update, &res, &local);
        break;
    case RX_REDUCER_ADD_MESSAGES:
        rc = rx_reducer_add_messages(current, update, ids, &res, &local);
        break;
    case RX_REDUCER_PATCH_BY_ID:
        rc = rx_reducer_patch_by_id(current, update, ids, &res, &local);
        break;
    case RX_REDUCER_CUSTOM:
        if (!r->fn) {
            rc = fail(&local, -EINVAL, "custom reducer without a function");
            break;
        }
        rc = r->fn(r, current, update, &res, &local);
        if (!rc && !res)
            rc = fail(&local, -EINVAL, "custom reducer returned no value");
        break;
    default:
        rc = fail(&local, -EINVAL, "unknown reducer kind %d", (int)r->kind);
        break;
    }
    if (rc) {
        json_decref(res);
        if (!local.text[0])
            snprintf(local.text, sizeof(local.text), "%s", strerror(-rc));
        return fail(err, rc, "key '%s': %s", key, local.text);
    }
    *out = res;
    return 0;
}

int rx_reducer_merge(json_t *state, json_t *update, const struct rx_reducer *schema,
                     size_t n, const struct rx_reducer_ids *ids, struct rx_error *err)
{
    struct slot {
        const char *key;
        json_t *value; /* new reference until handed to state */
        bool inserted;
    } * slots;
    size_t count, i = 0, j;
    const char *key;
    json_t *val;
    int rc = 0;

    if (!json_is_object(state) || !json_is_object(update))
        return fail(err, -EINVAL, "state and update must be objects");
    count = json_object_size(update);
    if (!count)
        return 0;
    slots = rx_malloc(count * sizeof(*slots));
    if (!slots)
        return fail(err, -ENOMEM, "out of memory");
    memset(slots, 0, count * sizeof(*slots));

    /* Phase 1: every new value, while the state is untouched. */
    json_object_foreach(update, key, val)
    {
        slots[i].key = key;
        rc =
            rx_reducer_apply(rx_reducer_find(schema, n, key), key,
                             json_object_get(state, key), val, ids, &slots[i].value, err);
        if (rc)
            goto out_release_values;
        i++;
    }
    /*
     * Phase 2: make room for new keys. Only inserting allocates; replacing a
     * value through an iterator does not, so once every key exists the last
     * phase cannot fail and the merge is all or nothing.
     */
    for (i = 0; i < count; i++) {
        if (json_object_get(state, slots[i].key))
            continue;
        if (json_object_set_new(state, slots[i].key, json_null())) {
            rc = fail(err, -ENOMEM, "out of memory");
            goto out_remove_inserted;
        }
        slots[i].inserted = true;
    }
    /* Phase 3: swap the values in; set_new steals each one. */
    for (i = 0; i < count; i++) {
        void *it = json_object_iter_at(state, slots[i].key);

        json_object_iter_set_new(state, it, slots[i].value);
        slots[i].value = NULL;
    }
    rx_free(slots);
    return 0;

out_remove_inserted:
    for (j = 0; j < count; j++)
        if (slots[j].inserted)
            json_object_del(state, slots[j].key);
out_release_values:
    for (j = 0; j < count; j++)
        json_decref(slots[j].value);
    rx_free(slots);
    return rc;
}
