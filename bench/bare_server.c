/*
 * bare_server - the baseline every server figure of bench/run.sh is divided
 * by: a bare libmicrohttpd daemon that answers every request with a fixed JSON
 * body of the size the real server sends for an accepted input.
 *
 * It runs MHD exactly as server/http.c does: the same flags
 * (MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME),
 * the same pool of epoll threads (one per CPU, at most 4, as
 * limits.http_threads 0 gives), the same connection limit, and the answer
 * queued on the access handler's final call, once the body is read. It
 * builds each response the same way (a copied buffer plus the same two
 * headers), so the ratio isolates what Reflexor adds on top of MHD: parsing,
 * the session queue, the transition, the publish and the effects.
 *
 * Usage: bare_server [PORT [THREADS]] (PORT 0 or none: a free port; THREADS
 * 0 or none: the server's default). Prints "listening on 127.0.0.1:PORT" on
 * stdout, then serves until SIGTERM/SIGINT.
 */
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

/* What server/http.c answers to an accepted user-send-message. */
static const char body[] = "{\"success\":true,\"timestamp\":1700000000000,\"seq\":1,"
                           "\"messageId\":\"m-0000000001\"}";

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    static int marker;
    struct MHD_Response *r;
    enum MHD_Result ret;

    (void)cls;
    (void)url;
    (void)method;
    (void)version;
    (void)upload_data;
    /* First call: headers only. Like the real server, answer after the body. */
    if (!*con_cls) {
        *con_cls = &marker;
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    r = MHD_create_response_from_buffer(sizeof(body) - 1, (void *)body,
                                        MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

int main(int argc, char **argv)
{
    struct sockaddr_in addr = {.sin_family = AF_INET};
    const union MHD_DaemonInfo *info;
    struct MHD_Daemon *d;
    struct sigaction sa = {.sa_handler = on_signal};
    int want, threads;

    addr.sin_port = htons((uint16_t)(argc > 1 ? atoi(argv[1]) : 0));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* server/http.c's rule for limits.http_threads 0. */
    want = argc > 2 ? atoi(argv[2]) : 0;
    threads = want > 0 ? want : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1)
        threads = 1;
    if (want <= 0 && threads > 4)
        threads = 4;
    d = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC |
                             MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
                         0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR,
                         (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT, 4096U,
                         MHD_OPTION_LISTENING_ADDRESS_REUSE, 1U,
                         MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "bare_server: cannot start libmicrohttpd\n");
        return 1;
    }
    info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    printf("listening on 127.0.0.1:%u\n", info ? (unsigned)info->port : 0U);
    fflush(stdout);
    while (!g_stop)
        pause();
    MHD_stop_daemon(d);
    return 0;
}
