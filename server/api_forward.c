/*
 * api_forward - an input POSTed to a node that follows its session goes to
 * the session's owner (SPEC 6.1, server/cluster): relayed over HTTP with
 * libcurl, on a thread of its own while the request is parked (no MHD thread
 * waits), and answered with the owner's answer. With no live owner, this
 * node claims the session and the input is applied here.
 *
 * A relayed request carries X-Reflexor-Forwarded: a node that gets one for a
 * session it does not own (ownership moved meanwhile) claims it if it is
 * nobody's, else answers 503 with Retry-After, never relays it again, so a
 * request crosses at most one hop.
 *
 * Ownership: struct forward holds copies of what it sends, and the answer;
 * one reference for the request (the park's release), one for the thread.
 */
#include "server/api_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "effects/log.h"
#include "server/cluster.h"
#include "server/park.h"
#include "server/reply.h"
#include "server/session_follow.h"
#include "state_machine/rx_buf.h"

/* How long the owner may take: a commit and its answer, with room. */
#define FORWARD_TIMEOUT_MS 10000L
#define FORWARD_ANSWER_MAX (1u << 20)

struct forward {
    struct park park;
    int refs;                       /* atomic */
    char *url, *auth, *user, *body; /* auth, user: header lines, or NULL */
    size_t body_len;
    /* The owner's answer: written by the thread before park_finish. */
    long status; /* 0: no answer */
    char type[96];
    struct rx_buf answer;
};

static void forward_unref(struct forward *f)
{
    if (__atomic_sub_fetch(&f->refs, 1, __ATOMIC_ACQ_REL))
        return;
    free(f->url);
    free(f->auth);
    free(f->user);
    free(f->body);
    rx_buf_release(&f->answer);
    park_destroy(&f->park);
    free(f);
}

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    struct forward *f = arg;

    return rx_buf_append(&f->answer, p, size * n) ? 0 : size * n;
}

static void *forward_main(void *arg)
{
    struct forward *f = arg;
    struct curl_slist *h = NULL, *h2;
    CURL *curl = curl_easy_init();
    char *type = NULL;

    h2 = curl_slist_append(h, "Content-Type: application/json");
    h = h2 ? curl_slist_append(h2, "X-Reflexor-Forwarded: 1") : NULL;
    if (h && f->auth && (h2 = curl_slist_append(h, f->auth)))
        h = h2;
    if (h && f->user && (h2 = curl_slist_append(h, f->user)))
        h = h2;
    if (curl && h) {
        curl_easy_setopt(curl, CURLOPT_URL, f->url);
        curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, f->body);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)f->body_len);
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(curl, CURLOPT_WRITEDATA, f);
        curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, FORWARD_TIMEOUT_MS);
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
        if (curl_easy_perform(curl) == CURLE_OK) {
            curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &f->status);
            if (!curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &type) && type)
                snprintf(f->type, sizeof(f->type), "%s", type);
        } else {
            log_warn("cluster: the owner at %s does not answer", f->url);
        }
    }
    if (curl)
        curl_easy_cleanup(curl);
    curl_slist_free_all(h ? h : h2);
    park_finish(&f->park);
    forward_unref(f);
    return NULL;
}

enum MHD_Result api__retry_soon(struct MHD_Connection *conn, const char *code,
                                const char *msg)
{
    return reply_json_retry(conn, 503,
                            json_pack("{s:s, s:s}", "error", code, "message", msg), 1);
}

static enum MHD_Result forward_answer(struct park *park, struct door *srv,
                                      struct MHD_Connection *conn)
{
    struct forward *f = (struct forward *)park;

    (void)srv;
    if (!f->status)
        return api__retry_soon(conn, "owner-unreachable",
                               "the node that owns this session does not answer; retry");
    return reply_queue(conn, (unsigned)f->status,
                       reply_response(*f->type ? f->type : "application/json",
                                      f->answer.data ? f->answer.data : "",
                                      f->answer.len));
}

static void forward_release(struct park *park)
{
    forward_unref((struct forward *)park);
}

static const struct park_ops forward_ops = {forward_answer, forward_release};

/*
 * The request's credentials as header lines for the owner, which checks
 * them again (SPEC 4.4): its bearer (from Authorization, X-Api-Key or
 * ?token=) and, behind a proxy that authenticates, the header naming the
 * user (this node must then be one of the owner's auth.trusted_proxies).
 * 0 or -ENOMEM.
 */
static int credentials(const struct config *cfg, struct MHD_Connection *conn,
                       struct forward *f)
{
    const char *auth =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Api-Key");
    const char *user =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, cfg->auth_header);

    if (!key)
        key = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "token");
    if ((auth && asprintf(&f->auth, "Authorization: %s", auth) < 0) ||
        (!auth && key && asprintf(&f->auth, "Authorization: Bearer %s", key) < 0)) {
        f->auth = NULL;
        return -ENOMEM;
    }
    if (config_auth_mode(cfg) == CONFIG_AUTH_TRUSTED_HEADER && user &&
        asprintf(&f->user, "%s: %s", cfg->auth_header, user) < 0) {
        f->user = NULL;
        return -ENOMEM;
    }
    return 0;
}

/* Relay to `owner`, parked. The caller has counted the request (park_enter). */
static enum MHD_Result relay(const struct config *cfg, struct MHD_Connection *conn,
                             const char *owner, const char *path,
                             const struct rx_buf *body, struct park **slot,
                             bool *suspended)
{
    struct forward *f = calloc(1, sizeof(*f));
    size_t n = strlen(owner) + strlen(path) + 1;
    pthread_attr_t attr;
    pthread_t t;

    if (!f)
        goto out_nomem;
    rx_buf_init(&f->answer, FORWARD_ANSWER_MAX);
    park_init(&f->park, &forward_ops, conn);
    f->refs = 2;
    f->body_len = body->len;
    if (!(f->url = malloc(n)) || !(f->body = malloc(body->len + 1)) ||
        credentials(cfg, conn, f))
        goto out_free;
    snprintf(f->url, n, "%s%s", owner, path);
    if (body->len)
        memcpy(f->body, body->data, body->len);
    f->body[body->len] = '\0';
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, forward_main, f)) {
        pthread_attr_destroy(&attr);
        goto out_free;
    }
    pthread_attr_destroy(&attr);
    if (!park_suspend(&f->park)) { /* answered already */
        enum MHD_Result ret = forward_answer(&f->park, NULL, conn);

        forward_unref(f);
        return ret;
    }
    *suspended = true;
    *slot = &f->park;
    return MHD_YES;

out_free:
    f->refs = 1;
    forward_unref(f);
out_nomem:
    return reply_error(conn, 500, "internal", NULL, "out of memory");
}

int api__forward(struct door *srv, struct MHD_Connection *conn, struct session *s,
                 const struct rx_buf *body, struct park **slot, bool *suspended,
                 enum MHD_Result *ret)
{
    struct cluster *c = __atomic_load_n(&srv->cluster, __ATOMIC_ACQUIRE);
    char *owner = NULL, path[512];
    bool relayed;
    int err;

    if (!c || !session_is_follower(s))
        return 0; /* apply it here */
    relayed = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Reflexor-Forwarded");
    for (int tries = 0; tries < 2; tries++) {
        err = relayed ? -ENOENT : cluster_owner_url(c, session_id(s), &owner);
        if (err == -ENOENT)
            err = cluster_claim(c, session_id(s));
        if (!err && !owner)
            return 0; /* this node owns it now */
        if (err != -EBUSY || relayed)
            break;
    }
    if (owner) {
        snprintf(path, sizeof(path), "%s/sessions/%s/moorex", srv->cfg->prefix,
                 session_id(s));
        *ret = relay(srv->cfg, conn, owner, path, body, slot, suspended);
        free(owner);
        return 1;
    }
    if (err == -EBUSY)
        *ret = api__retry_soon(
            conn, "not-owner",
            "another node owns this session and it moved meanwhile; retry");
    else
        *ret = api__retry_soon(conn, "store-unavailable",
                               "the database does not answer (see /healthz); retry");
    return 1;
}
