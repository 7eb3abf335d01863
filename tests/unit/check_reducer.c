/*
 * check_reducer - rx_reducer: the builtins, add_messages golden cases (a
 * table: current, update, exact expected JSON or error), patch_by_id and the
 * all-or-nothing partial merge, also under failing allocations.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "graph/rx_reducer.h"

/* Deterministic ids: "gen-1", "gen-2", ... */
static int counter_next(void *ctx, char out[RX_REDUCER_ID_LEN])
{
    int *n = ctx;

    snprintf(out, RX_REDUCER_ID_LEN, "gen-%d", ++*n);
    return 0;
}

static json_t *load(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &e);

    ck_assert_msg(v != NULL, "bad test json '%s': %s", text, e.text);
    return v;
}

static void assert_json_eq(json_t *got, const char *want)
{
    json_t *w = load(want);
    char *g = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);

    ck_assert_msg(json_equal(got, w), "got %s, want %s", g, want);
    free(g);
    json_decref(w);
}

struct golden {
    const char *name;
    const char *current; /* NULL: key absent */
    const char *update;
    const char *want; /* NULL: an error */
    int err;
    const char *err_has; /* a substring of the error text */
};

static const struct golden add_messages_cases[] = {
    {"append to empty", NULL, "[{\"id\":\"a\",\"content\":\"x\"}]",
     "[{\"id\":\"a\",\"content\":\"x\"}]", 0, NULL},
    {"replace keeps position",
     "[{\"id\":\"a\",\"content\":\"1\"},{\"id\":\"b\",\"content\":\"2\"},"
     "{\"id\":\"c\",\"content\":\"3\"}]",
     "[{\"id\":\"b\",\"content\":\"B\"}]",
     "[{\"id\":\"a\",\"content\":\"1\"},{\"id\":\"b\",\"content\":\"B\"},"
     "{\"id\":\"c\",\"content\":\"3\"}]",
     0, NULL},
    {"new id appended", "[{\"id\":\"a\"}]", "[{\"id\":\"b\"}]",
     "[{\"id\":\"a\"},{\"id\":\"b\"}]", 0, NULL},
    {"id-less gets a generated id", "[{\"id\":\"a\"}]",
     "[{\"content\":\"hi\"},{\"id\":null}]",
     "[{\"id\":\"a\"},{\"id\":\"gen-1\",\"content\":\"hi\"},{\"id\":\"gen-2\"}]", 0,
     NULL},
    {"single object update", "[{\"id\":\"a\",\"v\":1}]", "{\"id\":\"a\",\"v\":2}",
     "[{\"id\":\"a\",\"v\":2}]", 0, NULL},
    {"remove", "[{\"id\":\"a\"},{\"id\":\"b\"},{\"id\":\"c\"}]",
     "[{\"type\":\"remove\",\"id\":\"b\"}]", "[{\"id\":\"a\"},{\"id\":\"c\"}]", 0, NULL},
    {"remove then re-add in one update keeps the message",
     "[{\"id\":\"a\",\"v\":1},{\"id\":\"b\",\"v\":1},{\"id\":\"c\"}]",
     "[{\"type\":\"remove\",\"id\":\"b\"},{\"id\":\"b\",\"v\":2}]",
     "[{\"id\":\"a\",\"v\":1},{\"id\":\"b\",\"v\":2},{\"id\":\"c\"}]", 0, NULL},
    {"re-add then remove in one update removes", "[{\"id\":\"a\"},{\"id\":\"b\"}]",
     "[{\"id\":\"b\",\"v\":2},{\"type\":\"remove\",\"id\":\"b\"}]", "[{\"id\":\"a\"}]", 0,
     NULL},
    {"duplicate id inside one update: the later wins", "[{\"id\":\"a\"}]",
     "[{\"id\":\"x\",\"v\":1},{\"id\":\"y\"},{\"id\":\"x\",\"v\":2}]",
     "[{\"id\":\"a\"},{\"id\":\"x\",\"v\":2},{\"id\":\"y\"}]", 0, NULL},
    {"remove of a message added earlier in the update", "[]",
     "[{\"id\":\"x\"},{\"type\":\"remove\",\"id\":\"x\"}]", "[]", 0, NULL},
    {"removing an unknown id is an error", "[{\"id\":\"a\"}]",
     "[{\"type\":\"remove\",\"id\":\"zz\"}]", NULL, -ENOENT, "'zz'"},
    {"remove-all followed by new messages", "[{\"id\":\"a\"},{\"id\":\"b\"}]",
     "[{\"id\":\"c\"},{\"type\":\"remove\",\"id\":\"__remove_all__\"},"
     "{\"id\":\"d\"},{\"content\":\"e\"}]",
     "[{\"id\":\"d\"},{\"id\":\"gen-1\",\"content\":\"e\"}]", 0, NULL},
    {"remove-all alone empties", "[{\"id\":\"a\"}]",
     "[{\"type\":\"remove\",\"id\":\"__remove_all__\"}]", "[]", 0, NULL},
    /* LangGraph: after remove-all the rest is the new list as given, unmerged. */
    {"after remove-all the rest is taken as given", "[{\"id\":\"a\"}]",
     "[{\"type\":\"remove\",\"id\":\"__remove_all__\"},{\"type\":\"remove\",\"id\":\"a\"}"
     ",{\"id\":\"x\",\"v\":1},{\"id\":\"x\",\"v\":2}]",
     "[{\"type\":\"remove\",\"id\":\"a\"},{\"id\":\"x\",\"v\":1},{\"id\":\"x\",\"v\":2}]",
     0, NULL},
    {"the last remove-all wins", "[{\"id\":\"a\"}]",
     "[{\"type\":\"remove\",\"id\":\"__remove_all__\"},{\"id\":\"b\"},"
     "{\"type\":\"remove\",\"id\":\"__remove_all__\"},{\"id\":\"c\"}]",
     "[{\"id\":\"c\"}]", 0, NULL},
    /* LangGraph gives ids to id-less messages of the current list too. */
    {"an id-less message in the current list gets an id",
     "[{\"content\":\"old\"},{\"id\":\"a\"}]", "[{\"id\":\"a\",\"v\":1}]",
     "[{\"id\":\"gen-1\",\"content\":\"old\"},{\"id\":\"a\",\"v\":1}]", 0, NULL},
    {"current ids are given before the update's", "[{\"content\":\"old\"}]",
     "[{\"content\":\"new\"}]",
     "[{\"id\":\"gen-1\",\"content\":\"old\"},{\"id\":\"gen-2\",\"content\":\"new\"}]", 0,
     NULL},
    /* coerceMessageLikeToMessage: strings, [role, content] pairs, roles. */
    {"a bare string is a human message", "[]", "\"hi\"",
     "[{\"type\":\"human\",\"content\":\"hi\",\"id\":\"gen-1\"}]", 0, NULL},
    {"a list of bare strings", NULL, "[\"a\",\"b\"]",
     "[{\"type\":\"human\",\"content\":\"a\",\"id\":\"gen-1\"},"
     "{\"type\":\"human\",\"content\":\"b\",\"id\":\"gen-2\"}]",
     0, NULL},
    {"a [role, content] pair", "[]", "[[\"assistant\",\"yes\"],[\"user\",\"q\"]]",
     "[{\"type\":\"ai\",\"content\":\"yes\",\"id\":\"gen-1\"},"
     "{\"type\":\"human\",\"content\":\"q\",\"id\":\"gen-2\"}]",
     0, NULL},
    {"role becomes type", "[]",
     "[{\"role\":\"user\",\"content\":\"u\",\"id\":\"1\"},"
     "{\"role\":\"assistant\",\"content\":\"a\",\"id\":\"2\"},"
     "{\"role\":\"system\",\"content\":\"s\",\"id\":\"3\"},"
     "{\"role\":\"tool\",\"content\":\"t\",\"tool_call_id\":\"c\",\"id\":\"4\"}]",
     "[{\"type\":\"human\",\"content\":\"u\",\"id\":\"1\"},"
     "{\"type\":\"ai\",\"content\":\"a\",\"id\":\"2\"},"
     "{\"type\":\"system\",\"content\":\"s\",\"id\":\"3\"},"
     "{\"type\":\"tool\",\"content\":\"t\",\"tool_call_id\":\"c\",\"id\":\"4\"}]",
     0, NULL},
    {"developer is a system message that keeps its role", "[]",
     "[{\"role\":\"developer\",\"content\":\"d\",\"id\":\"1\"}]",
     "[{\"type\":\"system\",\"content\":\"d\",\"id\":\"1\","
     "\"additional_kwargs\":{\"__openai_role__\":\"developer\"}}]",
     0, NULL},
    {"type wins over role, aliases normalised", "[]",
     "[{\"type\":\"user\",\"role\":\"assistant\",\"content\":\"x\",\"id\":\"1\"}]",
     "[{\"type\":\"human\",\"content\":\"x\",\"id\":\"1\"}]", 0, NULL},
    {"a role-shaped current message is coerced too",
     "[{\"role\":\"user\",\"content\":\"q\",\"id\":\"1\"}]", "[]",
     "[{\"type\":\"human\",\"content\":\"q\",\"id\":\"1\"}]", 0, NULL},
    {"an unknown role", "[]", "[{\"role\":\"robot\",\"content\":\"x\"}]", NULL, -EINVAL,
     "unknown role 'robot'"},
    {"a pair with an unknown role", "[]", "[[\"robot\",\"x\"]]", NULL, -EINVAL,
     "unknown role 'robot'"},
    {"a list that is not a pair", "[]", "[[\"user\"]]", NULL, -EINVAL,
     "[role, content] pair"},
    {"a non-object message", "[]", "[1]", NULL, -EINVAL, "message 0"},
    {"a non-string id", "[]", "[{\"id\":7}]", NULL, -EINVAL, "non-string id"},
    {"a remove marker without id", "[]", "[{\"type\":\"remove\"}]", NULL, -EINVAL,
     "no id"},
    {"current not a list", "{}", "[]", NULL, -EINVAL, "array"},
    {"update not a list", "[]", "3", NULL, -EINVAL, "array"},
};

START_TEST(add_messages_golden)
{
    const struct golden *g = &add_messages_cases[_i];
    int n = 0;
    struct rx_reducer_ids ids = {counter_next, &n};
    struct rx_error e = {{0}};
    json_t *cur = g->current ? load(g->current) : NULL;
    json_t *upd = load(g->update);
    char *before = cur ? json_dumps(cur, JSON_COMPACT) : NULL;
    json_t *out = NULL;
    int rc = rx_reducer_add_messages(cur, upd, &ids, &out, &e);

    if (g->want) {
        ck_assert_msg(rc == 0, "%s: rc %d (%s)", g->name, rc, e.text);
        assert_json_eq(out, g->want);
    } else {
        ck_assert_msg(rc == g->err, "%s: rc %d, want %d", g->name, rc, g->err);
        ck_assert_ptr_null(out);
        ck_assert_msg(strstr(e.text, g->err_has), "%s: error '%s' lacks '%s'", g->name,
                      e.text, g->err_has);
    }
    if (cur) {
        /* Reducers never modify their inputs. */
        char *after = json_dumps(cur, JSON_COMPACT);

        ck_assert_str_eq(before, after);
        free(after);
    }
    free(before);
    json_decref(out);
    json_decref(upd);
    json_decref(cur);
}
END_TEST

START_TEST(add_messages_uuid)
{
    json_t *upd = load("[{\"content\":\"x\"}]");
    json_t *out = NULL;
    const char *id;

    ck_assert_int_eq(rx_reducer_add_messages(NULL, upd, NULL, &out, NULL), 0);
    id = json_string_value(json_object_get(json_array_get(out, 0), "id"));
    ck_assert_ptr_nonnull(id);
    ck_assert_uint_eq(strlen(id), 36);
    ck_assert_int_eq(id[14], '4'); /* a random (version 4) UUID */
    json_decref(out);
    json_decref(upd);
}
END_TEST

START_TEST(patch_by_id_merges_fields)
{
    int n = 0;
    struct rx_reducer_ids ids = {counter_next, &n};
    json_t *cur = load("[{\"id\":\"a\",\"x\":1,\"y\":1},{\"id\":\"b\",\"x\":1}]");
    json_t *upd =
        load("[{\"id\":\"a\",\"y\":2,\"z\":3},{\"id\":\"c\"},{\"id\":\"a\",\"x\":9},"
             "{\"type\":\"remove\",\"id\":\"b\"}]");
    json_t *out = NULL;

    ck_assert_int_eq(rx_reducer_patch_by_id(cur, upd, &ids, &out, NULL), 0);
    assert_json_eq(out, "[{\"id\":\"a\",\"x\":9,\"y\":2,\"z\":3},{\"id\":\"c\"}]");
    assert_json_eq(cur, "[{\"id\":\"a\",\"x\":1,\"y\":1},{\"id\":\"b\",\"x\":1}]");
    json_decref(out);
    json_decref(upd);
    json_decref(cur);
}
END_TEST

START_TEST(append_and_max)
{
    json_t *a = load("[1,2]"), *b = load("[3]"), *out = NULL;
    json_t *five = json_integer(5), *three = json_real(3.5);
    struct rx_error e;

    ck_assert_int_eq(rx_reducer_append(a, b, &out, NULL), 0);
    assert_json_eq(out, "[1,2,3]");
    json_decref(out);
    ck_assert_int_eq(rx_reducer_append(NULL, b, &out, NULL), 0);
    assert_json_eq(out, "[3]");
    json_decref(out);
    ck_assert_int_eq(rx_reducer_append(a, five, &out, &e), -EINVAL);
    ck_assert_int_eq(rx_reducer_max(five, three, &out, NULL), 0);
    ck_assert_ptr_eq(out, five);
    json_decref(out);
    ck_assert_int_eq(rx_reducer_max(three, five, &out, NULL), 0);
    ck_assert_ptr_eq(out, five);
    json_decref(out);
    ck_assert_int_eq(rx_reducer_max(json_null(), three, &out, NULL), 0);
    ck_assert_ptr_eq(out, three);
    json_decref(out);
    ck_assert_int_eq(rx_reducer_max(five, a, &out, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.text, "number"));
    json_decref(five);
    json_decref(three);
    json_decref(a);
    json_decref(b);
}
END_TEST

static int concat_strings(const struct rx_reducer *r, json_t *current, json_t *update,
                          json_t **out, struct rx_error *err)
{
    char buf[64];

    (void)r;
    (void)err;
    snprintf(buf, sizeof(buf), "%s%s", current ? json_string_value(current) : "",
             json_string_value(update));
    *out = json_string(buf);
    return *out ? 0 : -ENOMEM;
}

static const struct rx_reducer schema[] = {
    {"messages", RX_REDUCER_ADD_MESSAGES, NULL, NULL},
    {"log", RX_REDUCER_APPEND, NULL, NULL},
    {"calledBrainAt", RX_REDUCER_MAX, NULL, NULL},
    {"text", RX_REDUCER_CUSTOM, concat_strings, NULL},
};
#define NSCHEMA (sizeof(schema) / sizeof(schema[0]))

START_TEST(merge_partial)
{
    int n = 0;
    struct rx_reducer_ids ids = {counter_next, &n};
    json_t *st = load("{\"messages\":[{\"id\":\"a\"}],\"log\":[1],\"calledBrainAt\":7,"
                      "\"title\":\"t\",\"text\":\"ab\"}");
    json_t *upd =
        load("{\"messages\":[{\"content\":\"c\"}],\"log\":[2],\"calledBrainAt\":3,"
             "\"new\":true,\"text\":\"cd\"}");

    ck_assert(rx_reducer_is_last_value(schema, NSCHEMA, "title"));
    ck_assert(!rx_reducer_is_last_value(schema, NSCHEMA, "log"));
    ck_assert_int_eq(rx_reducer_merge(st, upd, schema, NSCHEMA, &ids, NULL), 0);
    assert_json_eq(st,
                   "{\"messages\":[{\"id\":\"a\"},{\"id\":\"gen-1\",\"content\":\"c\"}],"
                   "\"log\":[1,2],\"calledBrainAt\":7,\"title\":\"t\",\"new\":true,"
                   "\"text\":\"abcd\"}");
    json_decref(upd);
    json_decref(st);
}
END_TEST

START_TEST(merge_error_leaves_state)
{
    struct rx_error e = {{0}};
    json_t *st = load("{\"messages\":[{\"id\":\"a\"}],\"log\":[1]}");
    json_t *upd = load(
        "{\"log\":[2],\"fresh\":1,\"messages\":[{\"type\":\"remove\",\"id\":\"q\"}]}");

    ck_assert_int_eq(rx_reducer_merge(st, upd, schema, NSCHEMA, NULL, &e), -ENOENT);
    ck_assert_str_eq(e.text, "key 'messages': cannot remove unknown id 'q'");
    assert_json_eq(st, "{\"messages\":[{\"id\":\"a\"}],\"log\":[1]}");
    ck_assert_int_eq(rx_reducer_merge(st, json_null(), schema, NSCHEMA, NULL, &e),
                     -EINVAL);
    json_decref(upd);
    json_decref(st);
}
END_TEST

/* jansson test_chaos.c: fail the Nth allocation, for every N until success. */
static int chaos_left;

static void *chaos_malloc(size_t n)
{
    if (chaos_left-- == 0)
        return NULL;
    return malloc(n);
}

START_TEST(merge_all_or_nothing_under_enomem)
{
    const char *start =
        "{\"messages\":[{\"id\":\"a\",\"v\":1}],\"log\":[1],\"k1\":1,\"k2\":2,"
        "\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7}";
    const char *upd_text =
        "{\"messages\":[{\"id\":\"a\",\"v\":2},{\"content\":\"n\"}],\"log\":[2],"
        "\"calledBrainAt\":9,\"n1\":1,\"n2\":2,\"n3\":3,\"n4\":4,\"n5\":5,\"n6\":6,"
        "\"n7\":7,"
        "\"n8\":8,\"n9\":9,\"k1\":0}";
    int fail_at, rc = -ENOMEM;

    for (fail_at = 0; rc && fail_at < 10000; fail_at++) {
        int n = 0;
        struct rx_reducer_ids ids = {counter_next, &n};
        json_t *st = load(start), *upd = load(upd_text);

        chaos_left = fail_at;
        json_set_alloc_funcs(chaos_malloc, free);
        rc = rx_reducer_merge(st, upd, schema, NSCHEMA, &ids, NULL);
        json_set_alloc_funcs(malloc, free);
        if (rc) {
            ck_assert_int_eq(rc, -ENOMEM);
            assert_json_eq(st, start);
        } else {
            ck_assert_int_eq(json_integer_value(json_object_get(st, "n9")), 9);
            ck_assert_int_eq(json_array_size(json_object_get(st, "messages")), 2);
        }
        json_decref(upd);
        json_decref(st);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(fail_at, 5);
}
END_TEST

Suite *reducer_suite(void);
Suite *reducer_suite(void)
{
    Suite *s = suite_create("reducer");
    TCase *tc = tcase_create("core");

    tcase_add_loop_test(
        tc, add_messages_golden, 0,
        (int)(sizeof(add_messages_cases) / sizeof(add_messages_cases[0])));
    tcase_add_test(tc, add_messages_uuid);
    tcase_add_test(tc, patch_by_id_merges_fields);
    tcase_add_test(tc, append_and_max);
    tcase_add_test(tc, merge_partial);
    tcase_add_test(tc, merge_error_leaves_state);
    tcase_add_test(tc, merge_all_or_nothing_under_enomem);
    suite_add_tcase(s, tc);
    return s;
}
