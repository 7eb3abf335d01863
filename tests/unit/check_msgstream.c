/*
 * check_msgstream - what a message stream tells (SPEC 4, "GET
 * .../messages/:mid"): the snapshot of a live message (its text and its
 * reasoning so far) and of a finished one (the state's record), and the
 * plain JSON answer, byte for byte; reasoning is kept beside the text,
 * within the same bound.
 */
#include "tests/unit/helper_sm.h"

#include "server/event.h"
#include "server/msgstream.h"
#include "server/sse.h"

static char *frame_text(struct sse_frame *f)
{
    char *t;

    ck_assert_ptr_nonnull(f);
    t = strndup(f->data, f->len);
    ck_assert_ptr_nonnull(t);
    sse_frame_unref(f);
    return t;
}

#define ck_assert_frame(f, want)                                                         \
    do {                                                                                 \
        char *got_ = frame_text(f), *want_ = q(want);                                    \
        ck_assert_str_eq(got_, want_);                                                   \
        free(got_);                                                                      \
        free(want_);                                                                     \
    } while (0)

/* The JSON `j` (a NEW reference, released here) with sorted keys must be `want`. */
static void json_is(json_t *j, const char *want)
{
    char *got = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS), *w = q(want);

    ck_assert_ptr_nonnull(got);
    ck_assert_str_eq(got, w);
    free(got);
    free(w);
    json_decref(j);
}

START_TEST(test_live_snapshot)
{
    static char id[] = "a1", empty[] = "";
    struct msgstream *head = NULL, *m = msgstream_open(&head, "a1", 16, 8);
    struct rx_message msg = {.id = id, .content = empty, .status = RX_STATUS_STREAMING};

    ck_assert_ptr_nonnull(m);
    /* Nothing yet: the plain snapshot, as before reasoning existed. */
    ck_assert_frame(msgstream_snapshot(m, &msg),
                    "id: 0\ndata: {'type':'snapshot','content':''}\n\n");
    ck_assert_int_eq(msgstream_append_reasoning(m, "Let me "), 0);
    ck_assert_int_eq(msgstream_append_reasoning(m, "think."), 0);
    ck_assert_frame(
        msgstream_snapshot(m, &msg),
        "id: 0\ndata: {'type':'snapshot','content':'','reasoning':'Let me think.'}\n\n");
    ck_assert_int_eq(msgstream_append(m, "Answer."), 0);
    ck_assert_frame(msgstream_snapshot(m, &msg),
                    "id: 7\ndata: {'type':'snapshot','content':'Answer.','reasoning':"
                    "'Let me think.'}\n\n");
    json_is(msgstream_json("a1", m, &msg),
            "{'content':'Answer.','isComplete':false,'messageId':'a1',"
            "'reasoning':'Let me think.','status':'streaming'}");
    /* The reasoning has the text's bound: past it, nothing is taken. */
    ck_assert_int_eq(msgstream_append_reasoning(m, "0123"), -E2BIG);
    ck_assert_str_eq(m->reasoning.data, "Let me think.");
    msgstream_free_all(&head);
}
END_TEST

/*
 * A delta at its offset in the answer: only what lies past the buffer is
 * taken (an answer streamed again from its start by a new owner, or relayed
 * from another node), a gap is dropped, each kind has its own offsets.
 */
START_TEST(test_append_at_offset)
{
    static const struct {
        bool reasoning;
        size_t offset;
        const char *delta, *text, *why;
    } steps[] = {
        {false, 0, "Hel", "Hel", ""},
        {false, 3, "lo", "Hello", ""},
        {false, 0, "Hello, w", "Hello, w", "a resumed answer: only the new tail"},
        {false, 0, "Hel", "Hello, w", "all of it here already"},
        {false, 20, "xyz", "Hello, w", "a gap: dropped"},
        {false, 8, "orld", "Hello, world", ""},
        {true, 0, "hmm", "Hello, world", "reasoning counts apart"},
        {true, 1, "mmm", "Hello, world", ""},
    };
    struct msgstream *head = NULL, *m = msgstream_open(&head, "a1", 64, 8);

    ck_assert_ptr_nonnull(m);
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        ck_assert_int_eq(msgstream_append_at(m, steps[i].reasoning, steps[i].offset,
                                             steps[i].delta, strlen(steps[i].delta)),
                         0);
        ck_assert_msg(m->text.len == strlen(steps[i].text) &&
                          !memcmp(m->text.data, steps[i].text, m->text.len),
                      "step %zu (%s): text %.*s", i, steps[i].why, (int)m->text.len,
                      m->text.data);
    }
    ck_assert_uint_eq(m->reasoning.len, 4);
    ck_assert_int_eq(memcmp(m->reasoning.data, "hmmm", 4), 0);
    msgstream_free_all(&head);
}
END_TEST

/* The text the store kept, loaded after a restart (SPEC 3.7). */
START_TEST(test_load_kept_text)
{
    struct msgstream *head = NULL, *m = msgstream_open(&head, "a1", 16, 8);
    struct sse_frame *f;
    char *t;

    ck_assert_ptr_nonnull(m);
    /* Into an empty buffer: all of it, and it counts as saved. */
    ck_assert_int_eq(msgstream_load(m, "Hello", 5), 0);
    ck_assert_uint_eq(m->text.len, 5);
    ck_assert_uint_eq(m->saved, 5);
    /* A follower that had more keeps it; one that had less gets the rest. */
    ck_assert_int_eq(msgstream_append_at(m, false, 5, ", wo", 4), 0);
    ck_assert_int_eq(msgstream_load(m, "Hello, w", 8), 0);
    ck_assert_uint_eq(m->text.len, 9);
    ck_assert_uint_eq(m->saved, 8);
    ck_assert_int_eq(msgstream_load(m, "Hello, world", 12), 0);
    ck_assert_uint_eq(m->text.len, 12);
    ck_assert_int_eq(memcmp(m->text.data, "Hello, world", 12), 0);
    ck_assert_uint_eq(m->saved, 12);
    /* The brain's count (streamed) is the host's, untouched here. */
    ck_assert_uint_eq(m->streamed[0], 0);
    /* Past the bound: refused, the buffer as it was. */
    ck_assert_int_eq(msgstream_load(m, "Hello, world and more", 21), -E2BIG);
    ck_assert_uint_eq(m->text.len, 12);
    /* A late snapshot says the kept text. */
    f = msgstream_snapshot(m, NULL);
    t = frame_text(f);
    ck_assert_ptr_nonnull(strstr(t, "\"content\":\"Hello, world\""));
    free(t);
    msgstream_free_all(&head);
}
END_TEST

START_TEST(test_finished_snapshot)
{
    static char id1[] = "a1", answer[] = "Answer.", why[] = "Let me \"think\".";
    static char id2[] = "a2", hi[] = "Hi";
    struct rx_message done = {
        .id = id1, .content = answer, .status = RX_STATUS_COMPLETE, .reasoning = why};
    struct rx_message plain = {.id = id2, .content = hi, .status = RX_STATUS_STOPPED};

    ck_assert_frame(msgstream_snapshot(NULL, &done),
                    "id: 7\ndata: {'type':'snapshot','content':'Answer.','reasoning':"
                    "'Let me \\'think\\'.'}\n\n");
    ck_assert_frame(msgstream_snapshot(NULL, &plain),
                    "id: 2\ndata: {'type':'snapshot','content':'Hi'}\n\n");
    json_is(msgstream_json("a1", NULL, &done),
            "{'content':'Answer.','isComplete':true,'messageId':'a1',"
            "'reasoning':'Let me \\'think\\'.','status':'complete'}");
    json_is(msgstream_json("a2", NULL, &plain),
            "{'content':'Hi','isComplete':true,'messageId':'a2','status':"
            "'stopped'}");
}
END_TEST

Suite *msgstream_suite(void);

Suite *msgstream_suite(void)
{
    Suite *s = suite_create("msgstream");
    TCase *tc = tcase_create("frames");

    tcase_add_test(tc, test_live_snapshot);
    tcase_add_test(tc, test_finished_snapshot);
    tcase_add_test(tc, test_append_at_offset);
    tcase_add_test(tc, test_load_kept_text);
    suite_add_tcase(s, tc);
    return s;
}
