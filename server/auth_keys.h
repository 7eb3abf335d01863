/*
 * auth_keys - the users of auth.mode "keys" (SPEC 4.4) and their API keys:
 * made, stored, listed, rotated, removed and checked. What `reflexor users`
 * runs, and what server/auth asks when a request shows a key it has not
 * seen lately.
 *
 * A key is "rxk_" + a 16-hex-digit key id + "_" + 43 characters of
 * base64url: 32 random bytes from libsodium. Only its id and a salted hash
 * are kept: BLAKE2b-256 (libsodium's crypto_generichash) of the secret part,
 * keyed with 16 random bytes of salt. A key carries 256 bits of chance, so
 * one fast hash is all a guess must beat (a password hash, slow on purpose,
 * is for secrets people choose); comparisons are constant-time
 * (sodium_memcmp). A key is never logged: the id alone names it.
 *
 * Kept as two kinds of store records (store_record_*), so both backends
 * and every node of a cluster share them at once, with no schema of their
 * own: "auth.user" (key: the name) {"admin", "keyId", "createdAt"} and
 * "auth.key" (key: the key id) {"user", "salt", "hash"}. A key is good
 * while its user's record names it: removing the user, or rotating (the
 * user's record then names the new key), ends it in one write, before the
 * old key's record is deleted.
 *
 * Depends on store/store.h, server/principal.h, libsodium and jansson.
 * Ownership: every string in is borrowed; a key made is written into the
 * caller's buffer.
 */
#ifndef AUTH_KEYS_H
#define AUTH_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/principal.h"
#include "state_machine/rx_common.h"

struct store;

#define AUTH_KEY_ID_LEN     16 /* hex digits */
#define AUTH_KEY_SECRET_LEN 43 /* base64url of 32 bytes, no padding */
/* "rxk_" id "_" secret, and its NUL. */
#define AUTH_KEY_LEN  (4 + AUTH_KEY_ID_LEN + 1 + AUTH_KEY_SECRET_LEN + 1)
#define AUTH_SALT_LEN 16
#define AUTH_HASH_LEN 32

/* What a key id stands for, as read from the store. */
struct auth_key_entry {
    char user[PRINCIPAL_NAME_MAX + 1];
    bool admin;
    unsigned char salt[AUTH_SALT_LEN];
    unsigned char hash[AUTH_HASH_LEN];
};

/* libsodium's set-up, once per process. 0 or -EIO. */
int auth_keys_init(void) RX_WUR;

/*
 * Split `key` into its id (into `id`, AUTH_KEY_ID_LEN + 1 bytes) and its
 * secret (*secret, borrowed from `key`). False when it is not a key's shape.
 */
bool auth_key_parse(const char *key, char *id, const char **secret);
/* Does `secret` hash to `e`'s hash under its salt? Constant-time. */
bool auth_key_matches(const struct auth_key_entry *e, const char *secret);
/*
 * The user of key id `id` and the key's salt and hash, read from the store;
 * -ENOENT when there is no such key or its user no longer names it
 * (removed, rotated); -EIO, -ENOMEM.
 */
int auth_key_lookup(struct store *st, const char *id, struct auth_key_entry *out) RX_WUR;

/*
 * Add user `name` (principal_name_is_valid) with a new key, written into
 * `key` (AUTH_KEY_LEN bytes). 0, -EINVAL (the name), -EEXIST, or the
 * store's -ENOSPC / -EIO.
 */
int auth_user_add(struct store *st, const char *name, bool admin, char *key) RX_WUR;
/* A new key for `name`; the old one stops working. 0, -ENOENT, or the store's. */
int auth_user_rotate(struct store *st, const char *name, char *key) RX_WUR;
/* Remove user `name`; its key stops working. 0, -ENOENT, or the store's. */
int auth_user_remove(struct store *st, const char *name) RX_WUR;

/* One user as auth_user_list shows it. */
struct auth_user_row {
    char name[PRINCIPAL_NAME_MAX + 1];
    bool admin;
    int64_t created_at;
    char key_id[AUTH_KEY_ID_LEN + 1];
};
/*
 * Call `each` with every user in name order (until it returns non-zero,
 * which is then returned). 0, -ENOMEM, -EIO.
 */
int auth_user_list(struct store *st,
                   int (*each)(void *ctx, const struct auth_user_row *u),
                   void *ctx) RX_WUR;

#endif
