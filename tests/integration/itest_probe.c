/*
 * itest_probe - whether a server under attack still holds: a /healthz probe
 * on a thread of its own and the server's resident memory; and the hostile
 * inputs more than one test sends. See itest.h.
 */
#include "tests/integration/itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long itest_rss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (!(f = fopen(path, "r")))
        return -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = strtol(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

static void *probe_main(void *arg)
{
    struct itest_probe *p = arg;
    char url[128];

    snprintf(url, sizeof(url), "%s/healthz", p->s->base);
    while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
        long t0 = mono_ms(), dt;
        struct itest_resp r;
        long kb = itest_rss_kb(p->s->pid);

        if (itest_request("GET", url, NULL, NULL, &r) || r.status != 200)
            p->failed++;
        itest_resp_release(&r);
        dt = mono_ms() - t0;
        p->asked++;
        if (dt > p->worst_ms)
            p->worst_ms = dt;
        if (kb > p->peak_kb)
            p->peak_kb = kb;
        usleep(100 * 1000);
    }
    return NULL;
}

int itest_probe_start(struct itest_probe *p, const struct itest_server *s)
{
    memset(p, 0, sizeof(*p));
    p->s = s;
    return pthread_create(&p->thread, NULL, probe_main, p) ? -1 : 0;
}

void itest_probe_stop(struct itest_probe *p, const char *what)
{
    __atomic_store_n(&p->stop, true, __ATOMIC_RELEASE);
    pthread_join(p->thread, NULL);
    fprintf(stderr, "%s: %d probes, slowest %ld ms, %d failed, peak RSS %ld KiB\n", what,
            p->asked, p->worst_ms, p->failed, p->peak_kb);
}

long itest_mem_bound(long mb)
{
    return getenv("ASAN_OPTIONS") ? 3 * mb + 256 : mb;
}

char *itest_deep_tool_call(int depth)
{
    char *body = malloc(2 * (size_t)depth + 256), *p;

    if (!body)
        return NULL;
    p = body + sprintf(body, "{\"type\":\"brain-call-tools\",\"calledBrainAt\":0,"
                             "\"toolCalls\":{\"c1\":{\"name\":\"calculator\","
                             "\"parameters\":\"");
    memset(p, '[', (size_t)depth);
    memset(p + depth, ']', (size_t)depth);
    strcpy(p + 2 * depth, "\"}}}");
    return body;
}
