/*
 * fake_llm - a minimal OpenAI-compatible streaming endpoint for the token
 * relay benchmark (bench/run.sh).
 *
 *   fake_llm [PORT] [TOKENS] [INTERVAL_MS]    defaults: 0 (free port), 60, 5
 *
 * Every POST (whatever its path or body) is answered with TOKENS streamed
 * Chat Completions chunks, one every INTERVAL_MS, then "data: [DONE]". The
 * text of each token is "<t>|", where t is CLOCK_MONOTONIC in nanoseconds
 * read just before the token is written; the subscriber of the Reflexor
 * message stream subtracts it from its own clock on receipt. CLOCK_MONOTONIC
 * is one clock for every process of the machine, so the difference is the
 * whole relay: curl -> openai brain -> session chunk path -> SSE -> client.
 *
 * Raw sockets and one thread per connection, so a token goes out the moment
 * it is stamped (TCP_NODELAY, no library buffering). Prints
 * "listening on 127.0.0.1:PORT" once it listens; serves until SIGTERM/SIGINT.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define REQ_MAX (4u << 20)

static int g_tokens = 60;
static int g_interval_ms = 5;

static long long now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Read the request to its end (headers, then Content-Length bytes). */
static int read_request(int fd)
{
    char *buf = malloc(REQ_MAX);
    size_t len = 0, want = 0;
    int rc = -1;

    if (!buf)
        return -1;
    for (;;) {
        ssize_t r = recv(fd, buf + len, REQ_MAX - 1 - len, 0);
        char *end;

        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
        buf[len] = '\0';
        if (!want && (end = strstr(buf, "\r\n\r\n"))) {
            const char *cl = strcasestr(buf, "\r\ncontent-length:");

            want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 17, NULL, 10) : 0);
            /* curl waits for this before sending a large body. */
            if (strcasestr(buf, "\r\nexpect: 100-continue") &&
                write_all(fd, "HTTP/1.1 100 Continue\r\n\r\n", 25))
                break;
        }
        if (want && len >= want) {
            rc = 0;
            break;
        }
        if (len >= REQ_MAX - 1)
            break;
    }
    free(buf);
    return rc;
}

static void *serve(void *arg)
{
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               "Cache-Control: no-cache\r\nConnection: close\r\n\r\n";
    static const char tail[] =
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
        "data: [DONE]\n\n";
    int fd = (int)(intptr_t)arg, one = 1, i;
    char line[160];

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (read_request(fd) || write_all(fd, head, sizeof(head) - 1))
        goto out;
    for (i = 0; i < g_tokens; i++) {
        struct timespec gap = {0, (long)g_interval_ms * 1000000L};
        int n;

        if (i)
            nanosleep(&gap, NULL);
        n = snprintf(
            line, sizeof(line),
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%lld|\"}}]}"
            "\n\n",
            now_ns());
        if (write_all(fd, line, (size_t)n))
            goto out;
    }
    write_all(fd, tail, sizeof(tail) - 1);
out:
    close(fd);
    return NULL;
}

int main(int argc, char **argv)
{
    struct sockaddr_in addr = {.sin_family = AF_INET};
    socklen_t alen = sizeof(addr);
    int lfd, one = 1;

    addr.sin_port = htons((uint16_t)(argc > 1 ? atoi(argv[1]) : 0));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (argc > 2)
        g_tokens = atoi(argv[2]);
    if (argc > 3)
        g_interval_ms = atoi(argv[3]);
    signal(SIGPIPE, SIG_IGN);
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) || listen(lfd, 64) ||
        getsockname(lfd, (struct sockaddr *)&addr, &alen)) {
        perror("fake_llm");
        return 1;
    }
    printf("listening on 127.0.0.1:%u\n", (unsigned)ntohs(addr.sin_port));
    fflush(stdout);
    /* Ends on SIGTERM's default action; threads hold nothing to clean up. */
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        pthread_t t;

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            perror("fake_llm: accept");
            return 1;
        }
        if (pthread_create(&t, NULL, serve, (void *)(intptr_t)fd)) {
            close(fd);
            continue;
        }
        pthread_detach(t);
    }
}
