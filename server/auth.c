/*
 * auth - who a request comes from. See auth.h.
 */
#include "server/auth.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "base/cidr.h"
#include "base/now.h"
#include "effects/log.h"
#include "server/auth_keys.h"
#include "server/config.h"

/* Keys trusted from memory: a direct-mapped table, a slot per key id hash. */
#define KEY_SLOTS 1024
/* Principals with a rate bucket: chained, grown never (users are few). */
#define RATE_BUCKETS 256

struct key_slot {
    char id[AUTH_KEY_ID_LEN + 1]; /* "" empty */
    struct auth_key_entry e;
    int64_t checked_ms; /* monotonic: when the store last said it is good */
};

struct rate {
    struct rate *next;
    double tokens;
    int64_t at_ms; /* monotonic: when `tokens` was counted */
    char name[];
};

struct auth {
    const struct config *cfg;
    struct store *st;
    struct cidr *proxies;
    size_t n_proxies;
    pthread_mutex_t keys_lock; /* a leaf: guards `slots` */
    struct key_slot slots[KEY_SLOTS];
    pthread_mutex_t rate_lock; /* a leaf: guards `rates` */
    struct rate *rates[RATE_BUCKETS];
};

int auth_create(const struct config *cfg, struct store *st, struct auth **out,
                struct rx_error *err)
{
    struct auth *a = calloc(1, sizeof(*a));

    if (!a || (cfg->n_auth_proxies &&
               !(a->proxies = calloc(cfg->n_auth_proxies, sizeof(*a->proxies))))) {
        free(a);
        return -ENOMEM;
    }
    a->cfg = cfg;
    a->st = st;
    for (size_t i = 0; i < cfg->n_auth_proxies; i++)
        if (!cidr_parse(cfg->auth_proxies[i], &a->proxies[a->n_proxies]))
            a->n_proxies++; /* config_load_file refused the bad ones */
    pthread_mutex_init(&a->keys_lock, NULL);
    pthread_mutex_init(&a->rate_lock, NULL);
    *out = a;
    if (config_auth_mode(cfg) == CONFIG_AUTH_TOKEN && !*config_auth_token(cfg)) {
        rx_error_set(err, -EINVAL, "auth.mode \"token\" needs auth.token");
        goto out_destroy;
    }
    if (config_auth_mode(cfg) == CONFIG_AUTH_KEYS && !st) {
        rx_error_set(err, -EINVAL,
                     "auth.mode \"keys\" keeps its keys in the database: not with "
                     "--db :memory:");
        goto out_destroy;
    }
    if (config_auth_mode(cfg) == CONFIG_AUTH_KEYS && auth_keys_init()) {
        rx_error_set(err, -EINVAL, "libsodium cannot start");
        goto out_destroy;
    }
    return 0;

out_destroy:
    auth_destroy(a);
    *out = NULL;
    return -EINVAL;
}

void auth_destroy(struct auth *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < RATE_BUCKETS; i++)
        while (a->rates[i]) {
            struct rate *r = a->rates[i];

            a->rates[i] = r->next;
            free(r);
        }
    sodium_memzero(a->slots, sizeof(a->slots));
    pthread_mutex_destroy(&a->rate_lock);
    pthread_mutex_destroy(&a->keys_lock);
    free(a->proxies);
    free(a);
}

/*
 * The mode now: auth.mode when the file sets it; else token or none by
 * whether a token is set, which a SIGHUP may change (config_auth_token).
 */
static enum config_auth_mode mode_of(const struct auth *a)
{
    return config_auth_mode(a->cfg);
}

const char *auth_mode_name(const struct auth *a)
{
    return config_auth_mode_name(mode_of(a));
}

bool auth_asks_credential(const struct auth *a)
{
    enum config_auth_mode m = mode_of(a);

    return m == CONFIG_AUTH_TOKEN || m == CONFIG_AUTH_KEYS;
}

/* The credential a request carries, or NULL (auth.h says where it may be). */
static const char *credential(struct MHD_Connection *conn)
{
    const char *got = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");

    if (got && !strncmp(got, "Bearer ", 7))
        return got + 7;
    if ((got = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Api-Key")))
        return got;
    return MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "token");
}

/* Equal secrets, in time that depends on their lengths only. */
static bool same_secret(const char *got, const char *want)
{
    size_t n = strlen(want), diff = 0;

    if (!got || strlen(got) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        diff |= (size_t)(got[i] ^ want[i]);
    return diff == 0;
}

static void set_principal(struct principal *who, const char *name, bool admin)
{
    snprintf(who->name, sizeof(who->name), "%s", name);
    who->admin = admin;
}

static size_t slot_of(const char *id)
{
    return (size_t)strtoull(id + AUTH_KEY_ID_LEN - 8, NULL, 16) % KEY_SLOTS;
}

/*
 * Key `id`'s entry: from memory when the store said so less than
 * AUTH_KEY_TRUST_MS ago, else from the store (and kept). 0 or -ENOENT, -EIO.
 */
static int key_entry(struct auth *a, const char *id, struct auth_key_entry *e)
{
    struct key_slot *slot = &a->slots[slot_of(id)];
    int64_t now = now_mono_ms();
    int err;

    pthread_mutex_lock(&a->keys_lock);
    if (!strcmp(slot->id, id) && now - slot->checked_ms < AUTH_KEY_TRUST_MS) {
        *e = slot->e;
        pthread_mutex_unlock(&a->keys_lock);
        return 0;
    }
    pthread_mutex_unlock(&a->keys_lock);
    err = auth_key_lookup(a->st, id, e);
    pthread_mutex_lock(&a->keys_lock);
    if (!err) {
        strcpy(slot->id, id);
        slot->e = *e;
        slot->checked_ms = now;
    } else if (!strcmp(slot->id, id)) {
        slot->id[0] = '\0'; /* gone: never trusted again from memory */
    }
    pthread_mutex_unlock(&a->keys_lock);
    return err;
}

static int by_key(struct auth *a, const char *got, struct principal *who)
{
    char id[AUTH_KEY_ID_LEN + 1];
    const char *secret;
    struct auth_key_entry e;
    int err;

    if (!got || !auth_key_parse(got, id, &secret))
        return -EACCES;
    if ((err = key_entry(a, id, &e))) {
        if (err != -ENOENT)
            log_warn("auth: key %s cannot be checked: %s", id, strerror(-err));
        return -EACCES;
    }
    if (!auth_key_matches(&e, secret))
        return -EACCES;
    set_principal(who, e.user, e.admin);
    return 0;
}

static bool from_trusted_proxy(struct auth *a, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

    for (size_t i = 0; ci && i < a->n_proxies; i++)
        if (cidr_contains(&a->proxies[i], ci->client_addr))
            return true;
    return false;
}

static int by_header(struct auth *a, struct MHD_Connection *conn, struct principal *who)
{
    const char *name =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, a->cfg->auth_header);
    bool admin = false;

    if (!name || !principal_name_is_valid(name) || !from_trusted_proxy(a, conn))
        return -EACCES;
    for (size_t i = 0; i < a->cfg->n_auth_admins; i++)
        admin = admin || !strcmp(a->cfg->auth_admins[i], name);
    set_principal(who, name, admin);
    return 0;
}

int auth_identify(struct auth *a, struct MHD_Connection *conn, struct principal *who)
{
    const char *token = config_auth_token(a->cfg), *got;

    enum config_auth_mode mode = mode_of(a);

    switch (mode) {
    case CONFIG_AUTH_TRUSTED_HEADER:
        return by_header(a, conn, who);
    case CONFIG_AUTH_TOKEN:
    case CONFIG_AUTH_KEYS:
        got = credential(conn);
        if (*token && same_secret(got, token)) {
            set_principal(who, PRINCIPAL_ADMIN, true);
            return 0;
        }
        return mode == CONFIG_AUTH_KEYS ? by_key(a, got, who) : -EACCES;
    default:
        set_principal(who, PRINCIPAL_LOCAL, true);
        return 0;
    }
}

/* `name`'s bucket, made full when new; NULL on ENOMEM. Rate lock held. */
static struct rate *rate_of(struct auth *a, const char *name, double burst, int64_t now)
{
    uint32_t h = 2166136261u;
    struct rate **head, *r;

    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    head = &a->rates[h % RATE_BUCKETS];
    for (r = *head; r && strcmp(r->name, name); r = r->next)
        ;
    if (!r && (r = malloc(sizeof(*r) + strlen(name) + 1))) {
        strcpy(r->name, name);
        r->tokens = burst;
        r->at_ms = now;
        r->next = *head;
        *head = r;
    }
    return r;
}

int auth_admit(struct auth *a, const struct principal *who, int *retry_s)
{
    int rate = __atomic_load_n(&a->cfg->user_rate, __ATOMIC_RELAXED);
    double burst = 2.0 * rate;
    int64_t now = now_mono_ms();
    struct rate *r;
    int err = 0;

    if (who->admin || rate <= 0)
        return 0;
    pthread_mutex_lock(&a->rate_lock);
    if ((r = rate_of(a, who->name, burst, now))) {
        r->tokens += (double)(now - r->at_ms) * rate / 1000.0;
        if (r->tokens > burst)
            r->tokens = burst;
        r->at_ms = now;
        if (r->tokens >= 1.0) {
            r->tokens -= 1.0;
        } else {
            *retry_s = 1 + (int)((1.0 - r->tokens) / rate);
            err = -EAGAIN;
        }
    }
    pthread_mutex_unlock(&a->rate_lock);
    return err;
}

bool auth_metrics_token(struct auth *a, struct MHD_Connection *conn)
{
    return *a->cfg->metrics_token && same_secret(credential(conn), a->cfg->metrics_token);
}
