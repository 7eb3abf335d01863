/*
 * rx_reducer - see rx_reducer.h. The id-merging reducers follow LangGraph's
 * add_messages step for step (index by id, replace in place, mark removals,
 * filter at the end), so "remove then re-add in one update" keeps the
 * message where it was, exactly as there.
 */
#include "graph/rx_reducer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/idgen.h"

#include "state_machine/rx_alloc.h"

static bool is_empty(json_t *v)
{
    return !v || json_is_null(v);
}

int rx_reducer_last_value(json_t *current, json_t *update, json_t **out,
                          struct rx_error *err)
{
    (void)current;
    if (!update)
        return rx_error_set(err, -EINVAL, "no update value");
    *out = json_incref(update);
    return 0;
}

int rx_reducer_append(json_t *current, json_t *update, json_t **out, struct rx_error *err)
{
    json_t *res;

    if (!json_is_array(update))
        return rx_error_set(err, -EINVAL, "append needs an array update");
    if (!is_empty(current) && !json_is_array(current))
        return rx_error_set(err, -EINVAL, "append needs an array value");
    /* json_copy of an array is shallow: the items are shared, not copied. */
    res = is_empty(current) ? json_array() : json_copy(current);
    if (!res || json_array_extend(res, update)) {
        json_decref(res);
        return rx_error_set(err, -ENOMEM, "out of memory");
    }
    *out = res;
    return 0;
}

int rx_reducer_max(json_t *current, json_t *update, json_t **out, struct rx_error *err)
{
    if (!json_is_number(update))
        return rx_error_set(err, -EINVAL, "max needs a number update");
    if (is_empty(current)) {
        *out = json_incref(update);
        return 0;
    }
    if (!json_is_number(current))
        return rx_error_set(err, -EINVAL, "max needs a number value");
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
    idgen_uuid(out);
    return 0;
}

static const struct rx_reducer_ids default_ids = {uuid_next, NULL};

static bool is_remove(json_t *m)
{
    const char *type = json_string_value(json_object_get(m, "type"));

    return type && !strcmp(type, "remove");
}

/*
 * LangChain's message types by the names a message may be given with
 * (coerceMessageLikeToMessage): OpenAI roles and LangChain types alike.
 */
static const struct {
    const char *name, *type;
} role_types[] = {
    {"human", "human"},  {"user", "human"},        {"ai", "ai"},
    {"assistant", "ai"}, {"system", "system"},     {"developer", "system"},
    {"tool", "tool"},    {"function", "function"}, {"remove", "remove"},
};

static const char *type_of_role(const char *role)
{
    size_t i;

    for (i = 0; i < sizeof(role_types) / sizeof(role_types[0]); i++)
        if (!strcmp(role_types[i].name, role))
            return role_types[i].type;
    return NULL;
}

/* A developer message is a system message that remembers its OpenAI role. */
static int mark_developer(json_t *msg)
{
    json_t *kw = json_object_get(msg, "additional_kwargs");

    kw = json_is_object(kw) ? json_copy(kw) : json_object();
    if (!kw || json_object_set_new(kw, "__openai_role__", json_string("developer")))
        goto err_nomem;
    return json_object_set_new(msg, "additional_kwargs", kw) ? -ENOMEM : 0;

err_nomem:
    json_decref(kw);
    return -ENOMEM;
}

/*
 * One message as LangChain holds it: a bare string is a human message, a
 * [role, content] pair and an object's "role" become "type" (an explicit
 * "type" wins, as there). An object with neither stays as it is (LangChain
 * would refuse it; records that are not chat messages use this). *out is a
 * new reference to m itself when nothing changes, else to a new object.
 */
static int coerce(json_t *m, size_t i, json_t **out, struct rx_error *err)
{
    json_t *copy = NULL;
    const char *name, *type;

    if (json_is_string(m)) {
        *out = json_pack("{s:s,s:O}", "type", "human", "content", m);
        return *out ? 0 : rx_error_set(err, -ENOMEM, "out of memory");
    }
    if (json_is_array(m)) {
        name = json_string_value(json_array_get(m, 0));
        if (json_array_size(m) != 2 || !name)
            return rx_error_set(err, -EINVAL,
                                "message %zu: a list must be a [role, content] pair", i);
        type = type_of_role(name);
        if (!type)
            goto err_role;
        copy = json_pack("{s:s,s:O}", "type", type, "content", json_array_get(m, 1));
        if (!copy || (!strcmp(name, "developer") && mark_developer(copy)))
            goto err_nomem;
        *out = copy;
        return 0;
    }
    if (!json_is_object(m))
        return rx_error_set(err, -EINVAL,
                            "message %zu is not an object, a string or a pair", i);
    name = json_string_value(json_object_get(m, "type"));
    if (!name)
        name = json_string_value(json_object_get(m, "role"));
    type = name ? type_of_role(name) : NULL;
    if (!json_object_get(m, "role") && (!type || !strcmp(type, name))) {
        *out = json_incref(m);
        return 0;
    }
    if (!type)
        goto err_role;
    copy = json_copy(m);
    if (!copy)
        goto err_nomem;
    json_object_del(copy, "role");
    if (json_object_set_new(copy, "type", json_string(type)) ||
        (!strcmp(name, "developer") && mark_developer(copy)))
        goto err_nomem;
    *out = copy;
    return 0;

err_nomem:
    json_decref(copy);
    return rx_error_set(err, -ENOMEM, "out of memory");
err_role:
    return rx_error_set(err, -EINVAL,
                        "message %zu: unknown role '%s' (use human, user, ai, assistant, "
                        "system, developer, tool or function)",
                        i, name);
}

/*
 * A list as an array of messages that all carry a string id: coerced (for
 * add_messages), and id-less ones copied with a fresh id; the others are
 * shared. LangGraph does this to both sides of the merge. A lone message
 * (an object, or a string when coercing) is a list of one.
 */
static int normalize(json_t *list, const char *side, const struct rx_reducer_ids *ids,
                     bool coerce_msgs, json_t **out, struct rx_error *err)
{
    json_t *right = NULL, *m, *c = NULL, *id;
    char buf[RX_REDUCER_ID_LEN];
    size_t i, n;
    bool lone = json_is_object(list) || (coerce_msgs && json_is_string(list));
    int rc;

    if (!lone && !json_is_array(list))
        return rx_error_set(err, -EINVAL, "messages %s must be an array or an object",
                            side);
    right = json_array();
    if (!right)
        return rx_error_set(err, -ENOMEM, "out of memory");
    n = lone ? 1 : json_array_size(list);
    for (i = 0; i < n; i++) {
        m = lone ? list : json_array_get(list, i);
        if (coerce_msgs) {
            rc = coerce(m, i, &c, err);
            if (rc)
                goto err_release;
        } else if (json_is_object(m)) {
            c = json_incref(m);
        } else {
            rc = rx_error_set(err, -EINVAL, "message %zu is not an object", i);
            goto err_release;
        }
        id = json_object_get(c, "id");
        if (!json_is_string(id)) {
            if (id && !json_is_null(id)) {
                rc = rx_error_set(err, -EINVAL, "message %zu has a non-string id", i);
                goto err_release;
            }
            if (is_remove(c)) {
                rc = rx_error_set(err, -EINVAL, "remove marker %zu has no id", i);
                goto err_release;
            }
            rc = ids->next(ids->ctx, buf);
            if (rc) {
                rx_error_set(err, rc, "no id for message %zu", i);
                goto err_release;
            }
            if (c == m) {
                /* Shared with the caller's value: give the id to a copy. */
                json_decref(c);
                c = json_copy(m);
                if (!c)
                    goto err_nomem;
            }
            if (json_object_set_new(c, "id", json_string(buf)))
                goto err_nomem;
        }
        rc = json_array_append_new(right, c);
        c = NULL;
        if (rc)
            goto err_nomem;
    }
    *out = right;
    return 0;

err_nomem:
    rc = rx_error_set(err, -ENOMEM, "out of memory");
err_release:
    json_decref(c);
    json_decref(right);
    return rc;
}

static int merge_by_id(json_t *current, json_t *update, const struct rx_reducer_ids *ids,
                       bool patch, json_t **out, struct rx_error *err)
{
    json_t *left = NULL, *right = NULL, *merged = NULL, *index = NULL, *removed = NULL;
    json_t *res = NULL, *m, *pos, *rec;
    const char *id;
    size_t i, start = 0;
    int rc;

    if (!ids)
        ids = &default_ids;
    if (!is_empty(current) && !json_is_array(current))
        return rx_error_set(err, -EINVAL, "messages value must be an array");
    /* LangGraph gives ids to the current list first, then to the update. */
    if (is_empty(current)) {
        merged = json_array();
        if (!merged)
            goto err_nomem;
    } else {
        rc = normalize(current, "value", ids, !patch, &left, err);
        if (rc)
            goto err_release;
        merged = left; /* a new array of our own: free to write to */
        left = NULL;
    }
    rc = normalize(update, "update", ids, !patch, &right, err);
    if (rc)
        goto err_release;
    /* The last remove-all wins, and what follows it is the new list as given. */
    for (i = json_array_size(right); i > 0; i--) {
        m = json_array_get(right, i - 1);
        if (is_remove(m) &&
            !strcmp(json_string_value(json_object_get(m, "id")), RX_REDUCER_REMOVE_ALL)) {
            start = i;
            break;
        }
    }
    if (start) {
        res = json_array();
        for (i = start; res && i < json_array_size(right); i++)
            if (json_array_append(res, json_array_get(right, i)))
                goto err_nomem;
        if (!res)
            goto err_nomem;
        *out = res;
        res = NULL;
        rc = 0;
        goto err_release;
    }
    rc = -ENOMEM;
    index = json_object();
    removed = json_object();
    if (!index || !removed)
        goto err_nomem;
    json_array_foreach(merged, i, m)
    {
        id = json_string_value(json_object_get(m, "id"));
        if (json_object_set_new(index, id, json_integer((json_int_t)i)))
            goto err_nomem;
    }

    for (i = 0; i < json_array_size(right); i++) {
        m = json_array_get(right, i);
        id = json_string_value(json_object_get(m, "id"));
        pos = json_object_get(index, id);
        if (!pos) {
            if (is_remove(m)) {
                rc = rx_error_set(err, -ENOENT, "cannot remove unknown id '%s'", id);
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
    rc = rx_error_set(err, -ENOMEM, "out of memory");
err_release:
    json_decref(res);
    json_decref(removed);
    json_decref(index);
    json_decref(merged);
    json_decref(left);
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
            rc = rx_error_set(&local, -EINVAL, "custom reducer without a function");
            break;
        }
        rc = r->fn(r, current, update, &res, &local);
        if (!rc && !res)
            rc = rx_error_set(&local, -EINVAL, "custom reducer returned no value");
        break;
    default:
        rc = rx_error_set(&local, -EINVAL, "unknown reducer kind %d", (int)r->kind);
        break;
    }
    if (rc) {
        json_decref(res);
        if (!local.text[0])
            snprintf(local.text, sizeof(local.text), "%s", strerror(-rc));
        return rx_error_set(err, rc, "key '%s': %s", key, local.text);
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
        return rx_error_set(err, -EINVAL, "state and update must be objects");
    count = json_object_size(update);
    if (!count)
        return 0;
    slots = rx_malloc(count * sizeof(*slots));
    if (!slots)
        return rx_error_set(err, -ENOMEM, "out of memory");
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
            rc = rx_error_set(err, -ENOMEM, "out of memory");
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
