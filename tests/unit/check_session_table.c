/*
 * check_session_table - the table of sessions (server/session_table) without
 * a store: ids found among thousands, through the growth of its buckets and
 * deletions from the middle; the listing keeps every session once, newest
 * first; bad ids and duplicates refused.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "server/config.h"
#include "server/session.h"
#include "server/session_table.h"

#define N_SESSIONS 1000 /* the table starts with 64 buckets: grown three times */

struct fixture {
    struct config cfg;
    struct session_table *t;
};

static void open_table(struct fixture *f)
{
    ck_assert_int_eq(config_init(&f->cfg), 0);
    f->cfg.effects = false;
    f->t = session_table_create(&(struct session_env){.cfg = &f->cfg});
    ck_assert_ptr_nonnull(f->t);
}

static void close_table(struct fixture *f)
{
    session_table_destroy(f->t);
    config_release(&f->cfg);
}

static void name(char *out, size_t n, int i)
{
    snprintf(out, n, "s-%04d", i);
}

static bool present(struct session_table *t, const char *id)
{
    struct session *s = session_table_get(t, id);

    if (s)
        ck_assert_str_eq(session_id(s), id);
    session_unref(s);
    return s != NULL;
}

START_TEST(test_find_grow_delete)
{
    struct fixture f;
    char id[32];
    json_t *list;

    open_table(&f);
    for (int i = 0; i < N_SESSIONS; i++) {
        name(id, sizeof(id), i);
        ck_assert_int_eq(session_table_create_session(f.t, id, NULL, NULL), 0);
    }
    ck_assert_uint_eq(session_table_count(f.t), N_SESSIONS);
    for (int i = 0; i < N_SESSIONS; i++) {
        name(id, sizeof(id), i);
        ck_assert_msg(present(f.t, id), "%s not found", id);
    }
    /* Every third one goes: from the head, the tail and the middle of chains. */
    for (int i = 0; i < N_SESSIONS; i += 3) {
        name(id, sizeof(id), i);
        ck_assert_int_eq(session_table_delete(f.t, id), 0);
        ck_assert_int_eq(session_table_delete(f.t, id), -ENOENT);
    }
    for (int i = 0; i < N_SESSIONS; i++) {
        name(id, sizeof(id), i);
        ck_assert_int_eq(present(f.t, id), i % 3 != 0);
    }
    ck_assert_uint_eq(session_table_count(f.t), N_SESSIONS - (N_SESSIONS + 2) / 3);
    /* The listing: every live session once, the newest first. */
    list = session_table_list(f.t, NULL);
    ck_assert_ptr_nonnull(list);
    ck_assert_uint_eq(json_array_size(list), session_table_count(f.t));
    for (size_t k = 0, i = N_SESSIONS - 1; k < json_array_size(list); k++, i--) {
        if (i % 3 == 0)
            i--;
        name(id, sizeof(id), (int)i);
        ck_assert_str_eq(
            json_string_value(json_object_get(json_array_get(list, k), "id")), id);
    }
    json_decref(list);
    /* A deleted id can be made again. */
    ck_assert_int_eq(session_table_create_session(f.t, "s-0000", NULL, NULL), 0);
    ck_assert(present(f.t, "s-0000"));
    close_table(&f);
}
END_TEST

static const struct {
    const char *id;
    int err;
} id_rows[] = {
    {"ok-1", 0},      {"", -EINVAL},    {".", -EINVAL},   {"..", -EINVAL},
    {"a/b", -EINVAL}, {"a b", -EINVAL}, {"%00", -EINVAL}, {"x.y_z-1", 0},
};

START_TEST(test_ids)
{
    struct fixture f;

    open_table(&f);
    ck_assert_int_eq(session_table_create_session(f.t, id_rows[_i].id, NULL, NULL),
                     id_rows[_i].err);
    ck_assert_int_eq(present(f.t, id_rows[_i].id), id_rows[_i].err == 0);
    if (!id_rows[_i].err)
        ck_assert_int_eq(session_table_create_session(f.t, id_rows[_i].id, NULL, NULL),
                         -EEXIST);
    close_table(&f);
}
END_TEST

Suite *session_table_suite(void);

Suite *session_table_suite(void)
{
    Suite *s = suite_create("session_table");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_find_grow_delete);
    tcase_add_loop_test(tc, test_ids, 0, sizeof(id_rows) / sizeof(id_rows[0]));
    suite_add_tcase(s, tc);
    return s;
}
