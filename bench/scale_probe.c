/*
 * scale_probe - the requests of bench/scale.sh (SPEC 6.2, issue 29), timed
 * one by one on one keep-alive connection to 127.0.0.1 (libcurl):
 *
 *   scale_probe touch PORT IDS COUNT SEED
 *       GET /api/reflexor/sessions/<id> for COUNT ids drawn at random (seeded)
 *       from the file IDS (one id a line, as scale_fill --ids writes them),
 *       each once: the first touch of a cold session.
 *       -> touch n=.. p50_ms=.. p99_ms=.. max_ms=.. errors=..
 *   scale_probe sweep PORT PID IDS COUNT SEED
 *       COUNT touches one after another over consecutive ids of IDS from a
 *       random start (wrapping), sampling the server's VmRSS every 256
 *       touches: what the resident set costs while every touch loads one
 *       more session.
 *       -> sweep n=.. secs=.. per_s=.. rss_start_kb=.. rss_max_kb=.. rss_end_kb=..
 * errors=.. scale_probe get PORT PATH REPS GET PATH (an API path with its query) REPS
 * times: the first answer's time and size, the median and the largest.
 *       -> get n=.. first_ms=.. p50_ms=.. max_ms=.. bytes=.. errors=..
 *
 * An answer other than 200 counts as an error (and is said on stderr, the
 * first few). Results go to stdout as one key=value line; usage errors exit 1.
 * Bench code only: it talks to 127.0.0.1 and nothing else.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

/* Ids kept in memory: a million UUIDs are 37 MB. */
#define PROBE_IDS_MAX 20000000L
#define PROBE_SAY_MAX 5

struct probe {
    CURL *c;
    int port;
    size_t bytes; /* of the last answer */
    long errors;
};

static double mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static size_t count_body(char *p, size_t size, size_t n, void *cls)
{
    struct probe *pr = cls;

    (void)p;
    pr->bytes += size * n;
    return size * n;
}

/* GET the API path; its time in ms (an error is counted, and timed too). */
static double get(struct probe *pr, const char *path)
{
    char url[1024];
    long status = 0;
    double t0 = mono_ms(), t;
    CURLcode rc;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/reflexor%s", pr->port, path);
    pr->bytes = 0;
    curl_easy_setopt(pr->c, CURLOPT_URL, url);
    rc = curl_easy_perform(pr->c);
    t = mono_ms() - t0;
    curl_easy_getinfo(pr->c, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK || status != 200) {
        if (pr->errors++ < PROBE_SAY_MAX)
            fprintf(stderr, "scale_probe: GET %s: %s, status %ld\n", path,
                    curl_easy_strerror(rc), status);
    }
    return t;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* The q-quantile of v[0..n) (sorted in place). */
static double quantile(double *v, size_t n, double q)
{
    size_t i;

    if (!n)
        return 0;
    qsort(v, n, sizeof(*v), cmp_double);
    i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* Every line of `path` (one id each) into *ids; their count, or -1. */
static long read_ids(const char *path, char ***ids)
{
    FILE *f = fopen(path, "r");
    char line[256], **v = NULL;
    long n = 0, cap = 0;

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f) && n < PROBE_IDS_MAX) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!*line)
            continue;
        if (n == cap) {
            char **w = realloc(v, (size_t)(cap = cap ? cap * 2 : 4096) * sizeof(*v));

            if (!w)
                break;
            v = w;
        }
        if (!(v[n] = strdup(line)))
            break;
        n++;
    }
    fclose(f);
    *ids = v;
    return n;
}

/* VmRSS of `pid` in KiB, or -1. */
static long rss_kb(long pid)
{
    char path[64], line[256];
    long kb = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%ld/status", pid);
    if (!(f = fopen(path, "r")))
        return -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = strtol(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

static int touch(struct probe *pr, char **ids, long n, long count, unsigned seed)
{
    double *t = calloc((size_t)count, sizeof(*t)), max = 0;
    char path[300];

    if (!t || n < 1 || count > n) {
        fprintf(stderr, "scale_probe: touch: %ld touches of %ld ids\n", count, n);
        free(t);
        return 1;
    }
    srand(seed);
    for (long i = 0; i < count; i++) {
        /* A partial Fisher-Yates shuffle: each id drawn once, so every touch is
           a first one (drawing with replacement touched a third of a small
           file twice, warm). */
        long k = i + (long)(((unsigned long)rand() << 16 ^ (unsigned long)rand()) %
                            (unsigned long)(n - i));
        char *id = ids[k];

        ids[k] = ids[i];
        ids[i] = id;
        snprintf(path, sizeof(path), "/sessions/%s", id);
        t[i] = get(pr, path);
        max = t[i] > max ? t[i] : max;
    }
    printf("touch n=%ld p50_ms=%.3f p99_ms=%.3f max_ms=%.3f errors=%ld\n", count,
           quantile(t, (size_t)count, 0.5), quantile(t, (size_t)count, 0.99), max,
           pr->errors);
    free(t);
    return 0;
}

static int sweep(struct probe *pr, long pid, char **ids, long n, long count,
                 unsigned seed)
{
    long start, rss0 = rss_kb(pid), peak = rss0, kb;
    char path[300];
    double t0 = mono_ms(), secs;

    if (n < 1)
        return 1;
    srand(seed);
    start = rand() % n;
    for (long i = 0; i < count; i++) {
        snprintf(path, sizeof(path), "/sessions/%s", ids[(start + i) % n]);
        (void)get(pr, path);
        if (i % 256 == 255 && (kb = rss_kb(pid)) > peak)
            peak = kb;
    }
    secs = (mono_ms() - t0) / 1e3;
    kb = rss_kb(pid);
    peak = kb > peak ? kb : peak;
    printf("sweep n=%ld secs=%.2f per_s=%.0f rss_start_kb=%ld rss_max_kb=%ld "
           "rss_end_kb=%ld errors=%ld\n",
           count, secs, (double)count / (secs > 0 ? secs : 1e-9), rss0, peak, kb,
           pr->errors);
    return 0;
}

static int get_reps(struct probe *pr, const char *path, long reps)
{
    double *t = calloc((size_t)reps, sizeof(*t)), first, max = 0;
    size_t bytes;

    if (!t)
        return 1;
    first = t[0] = get(pr, path);
    bytes = pr->bytes;
    for (long i = 0; i < reps; i++) {
        if (i)
            t[i] = get(pr, path);
        max = t[i] > max ? t[i] : max;
    }
    printf("get n=%ld first_ms=%.3f p50_ms=%.3f max_ms=%.3f bytes=%zu errors=%ld\n", reps,
           first, quantile(t, (size_t)reps, 0.5), max, bytes, pr->errors);
    free(t);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: scale_probe touch PORT IDS COUNT SEED\n"
                    "       scale_probe sweep PORT PID IDS COUNT SEED\n"
                    "       scale_probe get PORT PATH REPS\n");
    return 1;
}

int main(int argc, char **argv)
{
    struct probe pr = {0};
    char **ids = NULL;
    long n = 0;
    int rc;

    if (argc < 5)
        return usage();
    pr.port = atoi(argv[2]);
    if (!strcmp(argv[1], "touch") && argc == 6)
        n = read_ids(argv[3], &ids);
    else if (!strcmp(argv[1], "sweep") && argc == 7)
        n = read_ids(argv[4], &ids);
    else if (strcmp(argv[1], "get") || argc != 5)
        return usage();
    if (n < 0) {
        fprintf(stderr, "scale_probe: cannot read the ids\n");
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    pr.c = curl_easy_init();
    if (!pr.c)
        return 1;
    curl_easy_setopt(pr.c, CURLOPT_WRITEFUNCTION, count_body);
    curl_easy_setopt(pr.c, CURLOPT_WRITEDATA, &pr);
    curl_easy_setopt(pr.c, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(pr.c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(pr.c, CURLOPT_TCP_NODELAY, 1L);
    if (!strcmp(argv[1], "touch"))
        rc = touch(&pr, ids, n, atol(argv[4]), (unsigned)atol(argv[5]));
    else if (!strcmp(argv[1], "sweep"))
        rc = sweep(&pr, atol(argv[3]), ids, n, atol(argv[5]), (unsigned)atol(argv[6]));
    else
        rc = get_reps(&pr, argv[3], atol(argv[4]));
    curl_easy_cleanup(pr.c);
    curl_global_cleanup();
    for (long i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    return rc;
}
