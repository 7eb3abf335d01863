/*
 * auth_keys - users and their API keys. See auth_keys.h.
 */
#include "server/auth_keys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "base/now.h"
#include "effects/log.h"
#include "store/store.h"

#define KIND_USER "auth.user"
#define KIND_KEY  "auth.key"

int auth_keys_init(void)
{
    return sodium_init() < 0 ? -EIO : 0;
}

/* j[key] as a string, "" when it is not one. */
static const char *str_at(json_t *j, const char *key)
{
    const char *v = json_string_value(json_object_get(j, key));

    return v ? v : "";
}

/* Delete a record nobody names any more; failing leaves it dead, not alive. */
static void tidy(struct store *st, const char *kind, const char *key)
{
    int err = store_record_delete(st, kind, key);

    if (err && err != -ENOENT)
        log_warn("auth: the record %s %s, no longer used, was not deleted: %s", kind, key,
                 strerror(-err));
}

static bool is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

bool auth_key_parse(const char *key, char *id, const char **secret)
{
    if (strlen(key) != AUTH_KEY_LEN - 1 || strncmp(key, "rxk_", 4) ||
        key[4 + AUTH_KEY_ID_LEN] != '_' || !is_hex(key + 4, AUTH_KEY_ID_LEN))
        return false;
    memcpy(id, key + 4, AUTH_KEY_ID_LEN);
    id[AUTH_KEY_ID_LEN] = '\0';
    *secret = key + 4 + AUTH_KEY_ID_LEN + 1;
    return true;
}

static void hash_secret(const unsigned char *salt, const char *secret, unsigned char *out)
{
    crypto_generichash(out, AUTH_HASH_LEN, (const unsigned char *)secret, strlen(secret),
                       salt, AUTH_SALT_LEN);
}

bool auth_key_matches(const struct auth_key_entry *e, const char *secret)
{
    unsigned char h[AUTH_HASH_LEN];

    hash_secret(e->salt, secret, h);
    return sodium_memcmp(h, e->hash, AUTH_HASH_LEN) == 0;
}

/* `n` bytes from hex text `s` (2n digits). False when it is not that. */
static bool from_hex(const char *s, unsigned char *out, size_t n)
{
    size_t got = 0;

    return s && strlen(s) == 2 * n &&
           !sodium_hex2bin(out, n, s, 2 * n, NULL, &got, NULL) && got == n;
}

/* A record's JSON (NEW reference), or NULL: -ENOENT, -EIO, -ENOMEM in *err. */
static json_t *record_json(struct store *st, const char *kind, const char *key, int *err)
{
    struct store_record r;
    json_t *j;

    if ((*err = store_record_get(st, kind, key, &r)))
        return NULL;
    j = json_loadb(r.text, r.len, 0, NULL);
    store_record_release(&r);
    if (!j)
        *err = -EIO; /* not ours: nobody else writes these kinds */
    return j;
}

static int record_put_json(struct store *st, const char *kind, const char *key, json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    int err;

    json_decref(j);
    if (!text)
        return -ENOMEM;
    err = store_record_put(st, kind, key, NULL, text, strlen(text));
    free(text);
    return err;
}

int auth_key_lookup(struct store *st, const char *id, struct auth_key_entry *out)
{
    json_t *key, *user = NULL;
    const char *name;
    int err;

    if (!(key = record_json(st, KIND_KEY, id, &err)))
        return err;
    name = json_string_value(json_object_get(key, "user"));
    if (!name || !principal_name_is_valid(name) ||
        !from_hex(json_string_value(json_object_get(key, "salt")), out->salt,
                  AUTH_SALT_LEN) ||
        !from_hex(json_string_value(json_object_get(key, "hash")), out->hash,
                  AUTH_HASH_LEN)) {
        err = -EIO;
        goto out_decref;
    }
    /* The user's record decides: a key it no longer names is over. */
    if (!(user = record_json(st, KIND_USER, name, &err)))
        goto out_decref;
    if (strcmp(id, str_at(user, "keyId"))) {
        err = -ENOENT;
        goto out_decref;
    }
    strcpy(out->user, name);
    out->admin = json_is_true(json_object_get(user, "admin"));
    err = 0;

out_decref:
    json_decref(user);
    json_decref(key);
    return err;
}

/*
 * A new key for `name`: its record stored (salt and hash only), its text in
 * `key`, its id in `id`. The user's record must then name it.
 */
static int key_make(struct store *st, const char *name, char *key, char *id)
{
    unsigned char raw_id[AUTH_KEY_ID_LEN / 2], secret[32], salt[AUTH_SALT_LEN];
    unsigned char hash[AUTH_HASH_LEN];
    char salt_hex[2 * AUTH_SALT_LEN + 1], hash_hex[2 * AUTH_HASH_LEN + 1];
    char b64[AUTH_KEY_SECRET_LEN + 1];
    int err;

    randombytes_buf(raw_id, sizeof(raw_id));
    randombytes_buf(secret, sizeof(secret));
    randombytes_buf(salt, sizeof(salt));
    sodium_bin2hex(id, AUTH_KEY_ID_LEN + 1, raw_id, sizeof(raw_id));
    sodium_bin2base64(b64, sizeof(b64), secret, sizeof(secret),
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    snprintf(key, AUTH_KEY_LEN, "rxk_%s_%s", id, b64);
    hash_secret(salt, b64, hash);
    sodium_bin2hex(salt_hex, sizeof(salt_hex), salt, sizeof(salt));
    sodium_bin2hex(hash_hex, sizeof(hash_hex), hash, sizeof(hash));
    sodium_memzero(secret, sizeof(secret));
    sodium_memzero(b64, sizeof(b64));
    err = record_put_json(
        st, KIND_KEY, id,
        json_pack("{s:s, s:s, s:s}", "user", name, "salt", salt_hex, "hash", hash_hex));
    if (err)
        sodium_memzero(key, AUTH_KEY_LEN);
    return err;
}

static int user_put(struct store *st, const char *name, bool admin, const char *id,
                    int64_t created_at)
{
    return record_put_json(st, KIND_USER, name,
                           json_pack("{s:b, s:s, s:I}", "admin", admin, "keyId", id,
                                     "createdAt", (json_int_t)created_at));
}

int auth_user_add(struct store *st, const char *name, bool admin, char *key)
{
    char id[AUTH_KEY_ID_LEN + 1];
    json_t *old;
    int err;

    if (!principal_name_is_valid(name))
        return -EINVAL;
    if ((old = record_json(st, KIND_USER, name, &err))) {
        json_decref(old);
        return -EEXIST;
    }
    if (err != -ENOENT)
        return err;
    if ((err = key_make(st, name, key, id)))
        return err;
    if ((err = user_put(st, name, admin, id, now_wall_ms()))) {
        tidy(st, KIND_KEY, id); /* a key nobody names is dead */
        sodium_memzero(key, AUTH_KEY_LEN);
    }
    return err;
}

int auth_user_rotate(struct store *st, const char *name, char *key)
{
    char id[AUTH_KEY_ID_LEN + 1], old_id[AUTH_KEY_ID_LEN + 1];
    json_t *user;
    int err;

    if (!principal_name_is_valid(name))
        return -ENOENT;
    if (!(user = record_json(st, KIND_USER, name, &err)))
        return err;
    snprintf(old_id, sizeof(old_id), "%s", str_at(user, "keyId"));
    if (!(err = key_make(st, name, key, id)) &&
        /* This write ends the old key; deleting its record only tidies. */
        !(err = user_put(st, name, json_is_true(json_object_get(user, "admin")), id,
                         json_integer_value(json_object_get(user, "createdAt")))))
        tidy(st, KIND_KEY, old_id);
    else if (!err)
        sodium_memzero(key, AUTH_KEY_LEN);
    json_decref(user);
    return err;
}

int auth_user_remove(struct store *st, const char *name)
{
    json_t *user;
    char id[AUTH_KEY_ID_LEN + 1];
    int err;

    if (!principal_name_is_valid(name))
        return -ENOENT;
    if (!(user = record_json(st, KIND_USER, name, &err)))
        return err;
    snprintf(id, sizeof(id), "%s", str_at(user, "keyId"));
    json_decref(user);
    if ((err = store_record_delete(st, KIND_USER, name)))
        return err;
    if (*id)
        tidy(st, KIND_KEY, id);
    return 0;
}

int auth_user_list(struct store *st,
                   int (*each)(void *ctx, const struct auth_user_row *u), void *ctx)
{
    struct store_records l = {0};
    int err = store_record_list(st, KIND_USER, NULL, NULL, 0, &l);

    for (size_t i = 0; !err && i < l.n; i++) {
        json_t *j = json_loadb(l.v[i].text, l.v[i].len, 0, NULL);
        struct auth_user_row u = {.admin = json_is_true(json_object_get(j, "admin"))};

        snprintf(u.name, sizeof(u.name), "%s", l.v[i].key);
        snprintf(u.key_id, sizeof(u.key_id), "%s", str_at(j, "keyId"));
        u.created_at = json_integer_value(json_object_get(j, "createdAt"));
        json_decref(j);
        err = each(ctx, &u);
    }
    store_records_release(&l);
    return err;
}
