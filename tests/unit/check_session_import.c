/*
 * check_session_import - the import's text reader (session_import_replay_text)
 * against a table of documents: each is read as rx_json_parse would read the
 * whole (an error where the whole is not JSON, the last of equal keys wins),
 * and the policies a document writes are replaced by today's.
 */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "server/session_import.h"

#define HEAD "{\"format\":\"reflexor-session\",\"version\":1,"
#define USER(n)                                                                          \
    "{\"seq\":" #n ",\"input\":{\"type\":\"user-send-message\",\"timestamp\":10" #n      \
    ",\"messageId\":\"m" #n "\",\"content\":\"hi\"}}"

static const struct row {
    const char *text;
    int err;           /* 0 or -EINVAL */
    size_t n;          /* inputs replayed when err is 0 */
    const char *field; /* the refusal's field, when it names one */
} rows[] = {
    {HEAD "\"inputs\":[]}", 0, 0, NULL},
    {HEAD "\"inputs\":[" USER(1) "," USER(2) "]}", 0, 2, NULL},
    {" \n" HEAD "\"title\":\"t\", \"inputs\" : [ " USER(1) " ] } \n", 0, 1, NULL},
    /* inputs before the fields that say what the document is */
    {"{\"inputs\":[" USER(1) "],\"version\":1,\"format\":\"reflexor-session\"}", 0, 1,
     NULL},
    /* the last of equal keys wins */
    {HEAD "\"inputs\":7,\"inputs\":[" USER(1) "]}", 0, 1, NULL},
    {HEAD "\"version\":2,\"inputs\":[]}", -EINVAL, 0, "version"},
    {HEAD "\"extra\":{\"a\":[1,\"]\"]},\"inputs\":[]}", 0, 0, NULL},
    /* not JSON, each in its own way */
    {"", -EINVAL, 0, NULL},
    {"[]", -EINVAL, 0, NULL},
    {HEAD "\"inputs\":[]", -EINVAL, 0, NULL},
    {HEAD "\"inputs\":[]} x", -EINVAL, 0, NULL},
    {HEAD "\"inputs\":[],}", -EINVAL, 0, NULL},
    {HEAD "\"inputs\":[" USER(1) ",]}", -EINVAL, 0, NULL},
    {HEAD "\"inputs\":[" USER(1) " " USER(2) "]}", -EINVAL, 0, NULL},
    {HEAD "\"extra\":tru,\"inputs\":[]}", -EINVAL, 0, NULL},
    {HEAD "\"inputs\":[{\"seq\":1,\"input\":{\"type\":\"x\\u0000\"}}]}", -EINVAL, 0,
     NULL},
    {HEAD "\"inputs\":[\"unterminated]}", -EINVAL, 0, NULL},
    {HEAD "\"inputs\":{}}", -EINVAL, 0, "inputs"},
    {"{\"format\":\"reflexor-session\",\"version\":1}", -EINVAL, 0, "inputs"},
    {HEAD "\"inputs\":[" USER(2) "]}", -EINVAL, 0, "seq"},
};

START_TEST(test_text_documents)
{
    const struct row *r = &rows[_i];
    struct session_import_error e = {.index = -1};
    struct session_import imp;
    int err;

    ck_assert_int_eq(session_import_init(&imp, NULL, true), 0);
    err = session_import_replay_text(r->text, strlen(r->text), &imp, &e);
    ck_assert_msg(err == r->err, "row %d: %d (%s)", _i, err, e.message);
    if (!err)
        ck_assert_uint_eq(imp.n, r->n);
    if (err && r->field)
        ck_assert_str_eq(e.field ? e.field : "(none)", r->field);
    session_import_release(&imp);
}
END_TEST

/* A call the document marks "deny" is stamped with what today says (auto here). */
START_TEST(test_document_policy_replaced)
{
    static const char text[] = HEAD "\"inputs\":[" USER(
        1) ",{\"input\":{\"type\":\"brain-call-tools\","
           "\"timestamp\":200,\"calledBrainAt\":101,\"toolCalls\":{\"c1\":{\"name\":"
           "\"calculator\",\"parameters\":\"{}\",\"policy\":\"deny\"}}}}]}";
    struct session_import_error e = {.index = -1};
    struct session_import imp;

    ck_assert_int_eq(session_import_init(&imp, NULL, true), 0);
    ck_assert_msg(!session_import_replay_text(text, sizeof(text) - 1, &imp, &e), "%s",
                  e.message);
    ck_assert_uint_eq(imp.state.tools.len, 1);
    /* Not denied: pending, with no result, as an auto call is. */
    ck_assert(!imp.state.tools.items[0].result.present);
    ck_assert_int_eq(imp.state.tools.items[0].approval, RX_APPROVAL_NONE);
    ck_assert_ptr_null(strstr(imp.texts.data, "\"deny\""));
    session_import_release(&imp);
}
END_TEST

Suite *session_import_suite(void);
Suite *session_import_suite(void)
{
    Suite *s = suite_create("session_import");
    TCase *tc = tcase_create("text");

    tcase_add_loop_test(tc, test_text_documents, 0, sizeof(rows) / sizeof(rows[0]));
    tcase_add_test(tc, test_document_policy_replaced);
    suite_add_tcase(s, tc);
    return s;
}
