/*
 * check_lg_frames - the kept events of a LangGraph run (server/protocols/lg_frames):
 * the exact bytes of a frame, ids 1, 2, 3... in order, what a join after
 * each id gets, the byte bound (the oldest go, the newest always stays),
 * ids going on after a release, and refusals that leave the log as it was.
 * Every step checks the invariants.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/protocols/lg_frames.h"
#include "server/sse.h"

Suite *lg_frames_suite(void);

static void add(struct lg_frames *fl, const char *event, const char *json)
{
    ck_assert_int_eq(lg_frames_add(fl, event, json, strlen(json), NULL), 0);
    ck_assert(lg_frames_check_invariants(fl));
}

/* The ids a join after `after` gets, as "3,4,5" (from the frames' own bytes). */
static void joined_is(struct lg_frames *fl, int64_t after, const char *want)
{
    size_t n;
    struct sse_frame **f = lg_frames_after(fl, after, &n);
    char got[256] = "";

    for (size_t i = 0; i < n; i++) {
        const char *id = strstr(f[i]->data, "\nid: ");

        ck_assert_ptr_nonnull(id);
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%lld", i ? "," : "",
                 strtoll(id + 5, NULL, 10));
    }
    ck_assert_msg(!strcmp(got, want), "after %lld: got '%s', want '%s'", (long long)after,
                  got, want);
}

START_TEST(frame_bytes_and_ids)
{
    struct lg_frames fl;
    struct sse_frame *f = NULL;

    lg_frames_init(&fl, LG_FRAMES_BYTES);
    ck_assert_int_eq(lg_frames_next_id(&fl), 1);
    ck_assert_int_eq(lg_frames_add(&fl, "metadata", "{\"run_id\":\"r\"}", 14, &f), 0);
    ck_assert_str_eq(f->data, "event: metadata\ndata: {\"run_id\":\"r\"}\nid: 1\n\n");
    ck_assert_uint_eq(f->len, strlen(f->data));
    add(&fl, "values", "{}");
    add(&fl, "messages", "[]");
    ck_assert_int_eq(lg_frames_next_id(&fl), 4);
    joined_is(&fl, -1, "1,2,3");
    joined_is(&fl, 0, "1,2,3");
    joined_is(&fl, 1, "2,3");
    joined_is(&fl, 3, "");
    joined_is(&fl, 99, "");
    /* A name that would break the framing is refused; nothing changes. */
    ck_assert_int_eq(lg_frames_add(&fl, "bad\nname", "{}", 2, NULL), -EINVAL);
    ck_assert_int_eq(lg_frames_next_id(&fl), 4);
    ck_assert(lg_frames_check_invariants(&fl));
    lg_frames_release(&fl);
    joined_is(&fl, -1, "");
    /* Ids go on: a join never sees an id twice. */
    add(&fl, "values", "{}");
    joined_is(&fl, -1, "4");
    lg_frames_release(&fl);
}
END_TEST

START_TEST(byte_bound)
{
    struct lg_frames fl;
    char big[200];
    size_t one;

    /* Each frame: "event: e\ndata: " + 10 bytes + "\nid: N\n\n". */
    lg_frames_init(&fl, 0);
    add(&fl, "e", "0123456789");
    one = fl.bytes;
    lg_frames_release(&fl);

    lg_frames_init(&fl, 3 * one);
    for (int i = 0; i < 5; i++)
        add(&fl, "e", "0123456789");
    ck_assert_uint_eq(fl.len, 3);
    joined_is(&fl, -1, "3,4,5");
    /* After an id that is gone: from the oldest kept. */
    joined_is(&fl, 1, "3,4,5");
    joined_is(&fl, 3, "4,5");
    /* One frame over the bound alone is still kept (the newest). */
    memset(big, 'x', sizeof(big) - 3);
    big[0] = '"';
    big[sizeof(big) - 3] = '"';
    big[sizeof(big) - 2] = '\0';
    add(&fl, "e", big);
    ck_assert_uint_eq(fl.len, 1);
    joined_is(&fl, -1, "6");
    add(&fl, "e", "0123456789");
    joined_is(&fl, -1, "7");
    lg_frames_release(&fl);
}
END_TEST

START_TEST(many_frames_slide_and_grow)
{
    struct lg_frames fl;

    lg_frames_init(&fl, 50 * 40);
    for (int i = 0; i < 1000; i++)
        add(&fl, "e", "0123456789");
    ck_assert_int_eq(lg_frames_next_id(&fl), 1001);
    ck_assert_uint_le(fl.bytes, 50 * 40);
    ck_assert_uint_le(fl.cap, 256);
    {
        size_t n;

        lg_frames_after(&fl, 999, &n);
        ck_assert_uint_eq(n, 1);
    }
    lg_frames_release(&fl);
}
END_TEST

Suite *lg_frames_suite(void)
{
    Suite *s = suite_create("lg_frames");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, frame_bytes_and_ids);
    tcase_add_test(tc, byte_bound);
    tcase_add_test(tc, many_frames_slide_and_grow);
    suite_add_tcase(s, tc);
    return s;
}
