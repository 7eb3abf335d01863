/*
 * bench_pure - what one input costs the pure layer as history grows: the
 * transition (rx_machine_apply), effects_at (rx_effects_at) and encoding the
 * new state (rx_state_encode, what every state-updated event carries), for
 * states of 10, 100, 1 000 and 10 000 messages.
 *
 * Also rx_patch_encode, what a `?mode=patch` subscriber gets instead of the
 * whole state.
 *
 * The state is a live one, as in a running session: built by the machine
 * itself, every record encoded once (finished records keep their cached
 * JSON), then a batch of inputs applied in a row, each timed. A batch is at
 * most a tenth of the history, so the state stays near N; batches restart
 * from a new state. Inputs alternate user messages and completed assistant
 * answers, as a conversation does. Three rounds; each figure is the median
 * over the rounds of the per-round median.
 *
 * Output: one line per size, `pure msgs=N apply_ns=.. effects_ns=..
 * encode_ns=.. patch_ns=.. total_ns=.. patch_total_ns=.. state_bytes=..
 * samples=..`, read by bench/run.sh. total = apply + effects + encode (the
 * full state-updated event); patch_total = apply + effects + patch.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "state_machine/rx_effects.h"
#include "state_machine/rx_input.h"
#include "state_machine/rx_json.h"
#include "state_machine/rx_machine.h"
#include "state_machine/rx_patch.h"
#include "state_machine/rx_state.h"

#define ROUNDS 3

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

static int64_t median(int64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_i64);
    return v[n / 2];
}

/* Apply one input given as JSON text; it must be accepted. */
static int apply_json(struct rx_state *s, const char *text)
{
    json_t *j;
    struct rx_outcome out;
    struct rx_input in;
    const char *field = NULL;
    int err;

    if ((err = rx_json_parse(text, strlen(text), 0, &j, NULL)))
        return err;
    err = rx_input_parse(j, &in, &field, NULL);
    json_decref(j);
    if (err)
        return err;
    err = rx_machine_apply(s, &in, &out);
    rx_input_release(&in);
    if (!err && out.verdict != RX_ACCEPTED) {
        fprintf(stderr, "bench_pure: input refused (%s): %s\n",
                rx_reason_name(out.reason), text);
        err = -EINVAL;
    }
    return err;
}

/* A conversation of `n` messages: user question, assistant answer, ... */
static int build_state(struct rx_state *s, int n)
{
    char text[512];
    int i, err = rx_state_init(s);

    for (i = 0; !err && i < n; i++) {
        int64_t t = 1000 + 2 * (int64_t)i;

        if (i % 2 == 0)
            snprintf(text, sizeof(text),
                     "{\"type\":\"user-send-message\",\"timestamp\":%" PRId64
                     ",\"messageId\":\"u-%d\",\"content\":\"Question %d: what does "
                     "the benchmark measure when the history grows?\"}",
                     t, i, i);
        else
            snprintf(text, sizeof(text),
                     "{\"type\":\"brain-send-message-complete\",\"timestamp\":%" PRId64
                     ",\"calledBrainAt\":%" PRId64
                     ",\"messageId\":\"a-%d\",\"content\":\"Echo: Question %d: what "
                     "does the benchmark measure when the history grows?\"}",
                     t, t - 2, i, i - 1);
        err = apply_json(s, text);
    }
    if (err)
        rx_state_release(s);
    return err;
}

/* The i-th input after a history of n messages, alternating like build_state. */
static void nth_input(char *text, size_t size, int n, int i)
{
    int k = n + i;
    int64_t t = 1000 + 2 * (int64_t)k;

    if (k % 2 == 0)
        snprintf(text, size,
                 "{\"type\":\"user-send-message\",\"timestamp\":%" PRId64
                 ",\"messageId\":\"u-%d\",\"content\":\"One more question, please.\"}",
                 t, k);
    else
        snprintf(text, size,
                 "{\"type\":\"brain-send-message-complete\",\"timestamp\":%" PRId64
                 ",\"calledBrainAt\":%" PRId64
                 ",\"messageId\":\"a-%d\",\"content\":\"Echo: One more question.\"}",
                 t, t - 2, k);
}

enum { C_APPLY, C_EFFECTS, C_ENCODE, C_PATCH, C_TOTAL, C_PATCH_TOTAL, C__COUNT };

struct series {
    int64_t *v[C__COUNT];
    size_t n;
};

/*
 * One batch: a live state of n messages, warmed the way a running session is
 * (every record encoded once, so finished records hold their cached JSON),
 * then k inputs applied one after the other, each timed. k is at most n/10,
 * so the state stays within 10% of n.
 */
static int batch(int n, int k, struct series *out)
{
    struct rx_input *ins = calloc((size_t)k, sizeof(*ins));
    struct rx_effect_set set;
    struct rx_state s;
    struct rx_buf b, p;
    char text[512];
    int i, built = 0, err;

    if (!ins)
        return -ENOMEM;
    rx_effect_set_init(&set);
    rx_buf_init(&b, RX_BUF_STATE_MAX);
    rx_buf_init(&p, RX_BUF_SMALL_MAX);
    err = build_state(&s, n);
    if (err)
        goto out_free;
    for (built = 0; !err && built < k; built++) {
        const char *field = NULL;
        json_t *j;

        nth_input(text, sizeof(text), n, built);
        err = rx_json_parse(text, strlen(text), 0, &j, NULL);
        if (!err)
            err = rx_input_parse(j, &ins[built], &field, NULL);
        json_decref(j);
        if (err)
            break;
    }
    if (!err)
        err = rx_state_encode(&s, &b); /* warm the cached encodings */
    for (i = 0; !err && i < k; i++) {
        struct rx_outcome o;
        int64_t t0, t1, t2, t3, t4;
        size_t at = out->n + (size_t)i;

        rx_buf_reset(&b);
        rx_buf_reset(&p);
        t0 = now_ns();
        err = rx_machine_apply(&s, &ins[i], &o);
        t1 = now_ns();
        if (!err)
            err = rx_effects_at(&s, &set);
        t2 = now_ns();
        if (!err)
            err = rx_state_encode(&s, &b);
        t3 = now_ns();
        if (!err)
            err = rx_patch_encode(&s, &o, &p);
        t4 = now_ns();
        if (!err && o.verdict != RX_ACCEPTED)
            err = -EINVAL;
        out->v[C_APPLY][at] = t1 - t0;
        out->v[C_EFFECTS][at] = t2 - t1;
        out->v[C_ENCODE][at] = t3 - t2;
        out->v[C_PATCH][at] = t4 - t3;
        out->v[C_TOTAL][at] = t3 - t0;
        out->v[C_PATCH_TOTAL][at] = (t2 - t0) + (t4 - t3);
    }
    if (!err)
        out->n += (size_t)k;
    rx_state_release(&s);
out_free:
    while (built-- > 0)
        rx_input_release(&ins[built]);
    free(ins);
    rx_buf_release(&p);
    rx_buf_release(&b);
    rx_effect_set_release(&set);
    return err;
}

static int measure(int n)
{
    /* Inputs per batch: at most a tenth of the history (1 for 10 messages);
       batches so that every size gets a few thousand samples. */
    int k = n / 10 > 0 ? n / 10 : 1;
    int batches = n <= 10 ? 3000 : n <= 100 ? 300 : n <= 1000 ? 30 : 3;
    int64_t med[C__COUNT][ROUNDS];
    struct series ser;
    size_t total = (size_t)k * (size_t)batches, bytes = 0;
    int r, c, i, err = 0;

    for (c = 0; c < C__COUNT; c++)
        if (!(ser.v[c] = calloc(total, sizeof(int64_t))))
            err = -ENOMEM;
    for (r = 0; !err && r < ROUNDS; r++) {
        ser.n = 0;
        for (i = 0; !err && i < batches; i++)
            err = batch(n, k, &ser);
        for (c = 0; !err && c < C__COUNT; c++)
            med[c][r] = median(ser.v[c], ser.n);
    }
    if (!err) {
        struct rx_state s;
        struct rx_buf b;

        rx_buf_init(&b, RX_BUF_STATE_MAX);
        if (!(err = build_state(&s, n))) {
            if (!(err = rx_state_encode(&s, &b)))
                bytes = b.len;
            rx_state_release(&s);
        }
        rx_buf_release(&b);
    }
    if (!err)
        printf("pure msgs=%d apply_ns=%" PRId64 " effects_ns=%" PRId64
               " encode_ns=%" PRId64 " patch_ns=%" PRId64 " total_ns=%" PRId64
               " patch_total_ns=%" PRId64 " state_bytes=%zu samples=%zu\n",
               n, median(med[C_APPLY], ROUNDS), median(med[C_EFFECTS], ROUNDS),
               median(med[C_ENCODE], ROUNDS), median(med[C_PATCH], ROUNDS),
               median(med[C_TOTAL], ROUNDS), median(med[C_PATCH_TOTAL], ROUNDS), bytes,
               total * ROUNDS);
    for (c = 0; c < C__COUNT; c++)
        free(ser.v[c]);
    return err;
}

int main(void)
{
    static const int sizes[] = {10, 100, 1000, 10000};
    size_t i;
    int err;

    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if ((err = measure(sizes[i]))) {
            fprintf(stderr, "bench_pure: %d messages: %s\n", sizes[i], strerror(-err));
            return 1;
        }
        fflush(stdout);
    }
    return 0;
}
