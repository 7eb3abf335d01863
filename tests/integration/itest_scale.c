/*
 * itest_scale - what the scale suites share. See itest_scale.h.
 */
#include "tests/integration/itest_scale.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool itest_scale_slow_build(void)
{
    return getenv("RX_SERVER_WRAPPER") || getenv("ASAN_OPTIONS");
}

static int read_ids(struct itest_scale *x, long want)
{
    FILE *f = fopen(x->ids_path, "r");
    char line[128];

    if (!f || !(x->ids = calloc((size_t)want, sizeof(*x->ids)))) {
        if (f)
            fclose(f);
        return -1;
    }
    while (x->n < want && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!(x->ids[x->n] = strdup(line)))
            break;
        x->n++;
    }
    fclose(f);
    return x->n == want ? 0 : -1;
}

int itest_scale_fill(struct itest_scale *x, const char *const *args, long want)
{
    const char *argv[40];
    size_t argc = 0;
    int fd;

    memset(x, 0, sizeof(*x));
    snprintf(x->db, sizeof(x->db), "/tmp/rx-itest-scale-XXXXXX");
    fd = mkstemp(x->db);
    if (fd < 0)
        return -1;
    close(fd);
    snprintf(x->ids_path, sizeof(x->ids_path), "%s.ids", x->db);
    for (size_t i = 0; args && args[i] && argc < 36; i++)
        argv[argc++] = args[i];
    argv[argc++] = "--ids";
    argv[argc++] = x->ids_path;
    argv[argc] = NULL;
    if (itest_fill(x->db, argv) || read_ids(x, want)) {
        itest_scale_remove(x);
        return -1;
    }
    return 0;
}

void itest_scale_remove(struct itest_scale *x)
{
    itest_remove_db(x->db);
    unlink(x->ids_path);
    for (long i = 0; i < x->n; i++)
        free(x->ids[i]);
    free(x->ids);
    x->ids = NULL;
    x->n = 0;
}

long itest_scale_call(const struct itest_server *s, const char *method, const char *path,
                      const char *body, const char *const *headers, long timeout_ms,
                      json_t **out)
{
    char url[1024];
    struct itest_resp r;
    long status;

    snprintf(url, sizeof(url), "%s%s", s->base, path);
    status =
        itest_request_within(method, url, body, headers, timeout_ms, &r) ? -1 : r.status;
    if (out)
        *out = status < 0 ? NULL : itest_resp_json(&r);
    itest_resp_release(&r);
    return status;
}

long itest_scale_say(const struct itest_server *s, const char *sid, const char *mid,
                     const char *text)
{
    json_t *body = json_pack("{s:s, s:s, s:s}", "type", "user-send-message", "messageId",
                             mid, "content", text);
    char *b = body ? json_dumps(body, JSON_COMPACT) : NULL;
    long status = b ? itest_post_input(s, sid, b, NULL) : -1;

    free(b);
    json_decref(body);
    return status;
}

bool itest_scale_answered(json_t *state, void *arg)
{
    json_t *a = json_object_get(state, "assistantMessages"), *m;
    size_t i, n = *(size_t *)arg;

    if (json_array_size(a) < n ||
        json_array_size(json_object_get(state, "userMessages")) > json_array_size(a))
        return false;
    json_array_foreach(a, i, m)
    {
        const char *st = json_string_value(json_object_get(m, "status"));

        if (!st || strcmp(st, "complete"))
            return false;
    }
    return true;
}
