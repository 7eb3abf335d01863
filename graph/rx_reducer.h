/*
 * rx_reducer - reducers over jansson values, and the partial-update merge
 * (SPEC 2, seeds 000 and 003).
 *
 * A reducer folds an update into the current value of one state key:
 * (current, update) -> merged. A schema (an array of struct rx_reducer, one
 * per key) names each key's reducer; keys it does not name are last-value.
 * rx_reducer_merge applies a partial update key by key: keys absent from the
 * update keep their value.
 *
 * Depends on state_machine/ and base/idgen only; no I/O, clock, threads
 * or mutable globals. The only outside call is idgen_uuid (libuuid) for messages
 * without an id, and a caller may replace it with struct rx_reducer_ids for
 * deterministic tests.
 *
 * Values are never modified in place: every reducer builds a new value that
 * shares unchanged members (messages, items) with the old one by reference.
 * This is what lets rx_graph merge a step into a shallow copy (json_copy) of
 * the state while the old state stays intact. Custom reducers must keep that
 * promise.
 *
 * Ownership: `current` and `update` are borrowed; `*out` is a new reference,
 * set only on success. `state` given to rx_reducer_merge is modified in place
 * only on success. Schemas are the caller's and only read.
 * Errors: 0 or a negative errno (-EINVAL for a bad update, -ENOENT for a remove
 * of an unknown id, -ENOMEM); the error struct (NULL allowed) then says what
 * went wrong (the id, the message index), and rx_reducer_apply and
 * rx_reducer_merge prefix it with the key.
 */
#ifndef RX_REDUCER_H
#define RX_REDUCER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>
#include "state_machine/rx_common.h"

#define RX_REDUCER_ID_LEN 37 /* a lower-case UUID and its NUL */
/* The id of a remove marker that clears the whole list (LangGraph REMOVE_ALL_MESSAGES).
 */
#define RX_REDUCER_REMOVE_ALL "__remove_all__"

/* Where add_messages and patch_by_id get ids for id-less messages. */
struct rx_reducer_ids {
    /* Write a NUL-terminated id into out; 0 or a negative errno. */
    int (*next)(void *ctx, char out[RX_REDUCER_ID_LEN]);
    void *ctx;
};

enum rx_reducer_kind {
    RX_REDUCER_LAST_VALUE, /* the update wins */
    RX_REDUCER_APPEND,     /* list concatenation */
    RX_REDUCER_MAX,        /* numeric max */
    RX_REDUCER_ADD_MESSAGES,
    RX_REDUCER_PATCH_BY_ID,
    RX_REDUCER_CUSTOM, /* `fn` below */
};

struct rx_reducer;

/*
 * A caller's reducer. current is NULL when the key is not yet in the state.
 * Must set *out to a new reference and return 0 (0 with *out left NULL is
 * taken as -EINVAL), or return a negative errno (and may fill err); must not
 * modify current or update.
 */
typedef int (*rx_reducer_fn)(const struct rx_reducer *r, json_t *current, json_t *update,
                             json_t **out, struct rx_error *err);

/* One schema entry: the reducer of state key `key`. */
struct rx_reducer {
    const char *key;
    enum rx_reducer_kind kind;
    rx_reducer_fn fn; /* RX_REDUCER_CUSTOM only */
    void *ctx;        /* for fn */
};

/*
 * The builtin reducers. current may be NULL (key absent) or JSON null, which
 * count as "no value yet".
 * - last_value: *out = update.
 * - append: both arrays; *out = current ++ update.
 * - max: both numbers; *out = the larger (current on a tie).
 * - add_messages (LangGraph's messagesStateReducer): update is an array of
 *   messages, or one message. A message is an object, a bare string (a
 *   human message) or a [role, content] pair; an object's "role" becomes
 *   LangChain's "type" (user/human -> human, assistant/ai -> ai, system,
 *   developer -> system with additional_kwargs.__openai_role__, tool,
 *   function; an explicit "type" wins; an unknown role is -EINVAL), as
 *   coerceMessageLikeToMessage does. Objects with neither stay as given.
 *   Id-less messages (id missing or null) on both sides, current included,
 *   get an id from `ids` (libuuid when NULL). Then: a message whose id
 *   exists is replaced in place; a new id is appended;
 *   {"type":"remove","id":X} deletes X (-ENOENT when X is unknown); a later
 *   duplicate id in the update replaces the earlier one, and a message
 *   removed then re-added in one update stays, at its place. After the last
 *   {"type":"remove","id":"__remove_all__"} the rest of the update is the
 *   new list exactly as given (no merge by id, as in LangGraph).
 * - patch_by_id: as add_messages without the message coercion (records are
 *   objects, kept as given), but a record whose id exists is merged field by
 *   field into the existing one (update's fields win).
 */
int rx_reducer_last_value(json_t *current, json_t *update, json_t **out,
                          struct rx_error *err) RX_WUR;
int rx_reducer_append(json_t *current, json_t *update, json_t **out,
                      struct rx_error *err) RX_WUR;
int rx_reducer_max(json_t *current, json_t *update, json_t **out,
                   struct rx_error *err) RX_WUR;
int rx_reducer_add_messages(json_t *current, json_t *update,
                            const struct rx_reducer_ids *ids, json_t **out,
                            struct rx_error *err) RX_WUR;
int rx_reducer_patch_by_id(json_t *current, json_t *update,
                           const struct rx_reducer_ids *ids, json_t **out,
                           struct rx_error *err) RX_WUR;

/* The schema entry for `key` (borrowed from schema), or NULL (last value). */
const struct rx_reducer *rx_reducer_find(const struct rx_reducer *schema, size_t n,
                                         const char *key);

/* True when `key` is last-value in the schema (absent keys are). */
bool rx_reducer_is_last_value(const struct rx_reducer *schema, size_t n, const char *key);

/*
 * Apply one reducer (r may be NULL: last value). Same ownership and errors as
 * the builtins; err text is prefixed with the key.
 */
int rx_reducer_apply(const struct rx_reducer *r, const char *key, json_t *current,
                     json_t *update, const struct rx_reducer_ids *ids, json_t **out,
                     struct rx_error *err) RX_WUR;

/*
 * Merge the partial update `update` (an object; borrowed) into `state` (an
 * object; modified in place) through the schema's reducers. All or nothing:
 * every new value is computed before any is set, so on any error, -ENOMEM
 * included, `state` is unchanged. -EINVAL when state or update is not an object.
 */
int rx_reducer_merge(json_t *state, json_t *update, const struct rx_reducer *schema,
                     size_t n, const struct rx_reducer_ids *ids,
                     struct rx_error *err) RX_WUR;

#endif
