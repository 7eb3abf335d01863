/*
 * rx_state_delta - see rx_state_delta.h. Comparisons use json_equal, which
 * returns at once for the same object, so a state that shares its lists
 * with its parent's costs little to compare.
 */
#include "graph/rx_state_delta.h"

#include <errno.h>

/* The difference of `now` from `prev` (NULL: from nothing). A new reference. */
json_t *rx_state_delta_make(json_t *prev, json_t *now)
{
    json_t *set = json_object(), *app = json_object(), *del = json_array(), *d = NULL;
    json_t *old, *v, *tail;
    const char *key;
    size_t i, n;

    if (!set || !app || !del)
        goto out_release;
    json_object_foreach(now, key, v)
    {
        old = json_object_get(prev, key);
        if (old && json_equal(old, v))
            continue; /* unchanged: not written again */
        n = json_array_size(old);
        if (json_is_array(old) && json_is_array(v) && json_array_size(v) > n) {
            for (i = 0; i < n; i++)
                if (!json_equal(json_array_get(old, i), json_array_get(v, i)))
                    break;
            if (i == n) {
                /* It grew at the end: only the new items. */
                tail = json_array();
                for (; tail && i < json_array_size(v); i++)
                    if (json_array_append(tail, json_array_get(v, i))) {
                        json_decref(tail);
                        tail = NULL;
                    }
                if (!tail || json_object_set_new(app, key, tail))
                    goto out_release;
                continue;
            }
        }
        if (json_object_set(set, key, v))
            goto out_release;
    }
    json_object_foreach(prev, key, v)
    {
        if (!json_object_get(now, key) && json_array_append_new(del, json_string(key)))
            goto out_release;
    }
    d = json_object();
    if (d && ((json_object_size(set) && json_object_set(d, "s", set)) ||
              (json_object_size(app) && json_object_set(d, "a", app)) ||
              (json_array_size(del) && json_object_set(d, "d", del)))) {
        json_decref(d);
        d = NULL;
    }
out_release:
    json_decref(set);
    json_decref(app);
    json_decref(del);
    return d;
}

/* Apply delta `d` to `state` (an object of our own, changed in place). */
int rx_state_delta_apply(json_t *state, json_t *d)
{
    json_t *set = json_object_get(d, "s"), *app = json_object_get(d, "a");
    json_t *del = json_object_get(d, "d"), *v, *old, *grown;
    const char *key;
    size_t i;

    if (!json_is_object(d) || (set && !json_is_object(set)) ||
        (app && !json_is_object(app)) || (del && !json_is_array(del)))
        return -EBADMSG;
    if (set && json_object_update(state, set))
        return -ENOMEM;
    json_object_foreach(app, key, v)
    {
        old = json_object_get(state, key);
        if (!json_is_array(old) || !json_is_array(v))
            return -EBADMSG;
        grown = json_copy(old); /* shallow: the items are shared */
        if (!grown || json_array_extend(grown, v) ||
            json_object_set_new(state, key, grown))
            return -ENOMEM;
    }
    json_array_foreach(del, i, v)
    {
        if (!json_is_string(v))
            return -EBADMSG;
        json_object_del(state, json_string_value(v));
    }
    return 0;
}
