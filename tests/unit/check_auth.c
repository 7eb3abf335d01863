/*
 * check_auth - users and their keys (server/auth_keys), address blocks
 * (base/cidr) and whose sessions a principal sees (server/principal.h), on a
 * SQLite file in a temporary directory:
 *  - a key's shape: parsed only when it is exactly rxk_<16 hex>_<43 chars>;
 *    another case, a cut or an 8 KiB key is not one;
 *  - add: the key printed checks against the store (lookup + hash), a wrong
 *    secret of the right shape does not; the store holds no secret (the key
 *    text is in no record); a name taken is -EEXIST, a bad name -EINVAL;
 *  - rotate: the old key is gone at once (-ENOENT), the new one works, the
 *    user keeps its role; remove: its key is gone;
 *  - a second opener beside the store (store_open_beside) sees a key added
 *    through the first at once, and a removal;
 *  - list: every user in name order, with its role;
 *  - cidr: IPv4 and IPv6 blocks, mapped IPv4, bad texts refused;
 *  - principal_sees / principal_filter / principal_name_is_valid, table-driven.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cidr.h"
#include "server/auth_keys.h"
#include "server/principal.h"
#include "store/store.h"

Suite *auth_suite(void);

static char dir[64], path[128];
static struct store *st;

static void setup(void)
{
    struct rx_error err = {""};

    snprintf(dir, sizeof(dir), "/tmp/rx-auth-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/a.db", dir);
    st = store_open(path, &err);
    ck_assert_msg(st != NULL, "store_open: %s", err.text);
    ck_assert_int_eq(auth_keys_init(), 0);
}

static void teardown(void)
{
    char p[160];

    store_close(st);
    st = NULL;
    for (const char *const *f =
             (const char *const[]){"a.db", "a.db-wal", "a.db-shm", NULL};
         *f; f++) {
        snprintf(p, sizeof(p), "%s/%s", dir, *f);
        unlink(p);
    }
    rmdir(dir);
}

/* 0 when `key` checks against `s`: its id found and its secret matching. */
static int check_key(struct store *s, const char *key, struct auth_key_entry *e)
{
    char id[AUTH_KEY_ID_LEN + 1];
    const char *secret;
    int err;

    if (!auth_key_parse(key, id, &secret))
        return -EINVAL;
    if ((err = auth_key_lookup(s, id, e)))
        return err;
    return auth_key_matches(e, secret) ? 0 : -EACCES;
}

START_TEST(test_key_shape)
{
    char key[AUTH_KEY_LEN], id[AUTH_KEY_ID_LEN + 1], big[8193];
    const char *secret;

    ck_assert_int_eq(auth_user_add(st, "alice", false, key), 0);
    ck_assert_uint_eq(strlen(key), AUTH_KEY_LEN - 1);
    ck_assert(auth_key_parse(key, id, &secret));
    ck_assert_int_eq(strncmp(key + 4, id, AUTH_KEY_ID_LEN), 0);
    {
        char upper[AUTH_KEY_LEN];

        strcpy(upper, key);
        for (char *p = upper; *p; p++)
            if (*p >= 'a' && *p <= 'f')
                *p = (char)(*p - 'a' + 'A');
        ck_assert(!auth_key_parse(upper, id, &secret)); /* the id is lower-case hex */
    }
    key[AUTH_KEY_LEN - 2] = '\0';
    ck_assert(!auth_key_parse(key, id, &secret)); /* cut by one */
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ck_assert(!auth_key_parse(big, id, &secret));
    ck_assert(!auth_key_parse("", id, &secret));
    ck_assert(!auth_key_parse("Bearer x", id, &secret));
}
END_TEST

START_TEST(test_add_check)
{
    char key[AUTH_KEY_LEN], wrong[AUTH_KEY_LEN], other[AUTH_KEY_LEN];
    struct auth_key_entry e;
    struct store_record r;

    ck_assert_int_eq(auth_user_add(st, "alice", false, key), 0);
    ck_assert_int_eq(check_key(st, key, &e), 0);
    ck_assert_str_eq(e.user, "alice");
    ck_assert(!e.admin);
    /* The right id with another secret of the right shape. */
    strcpy(wrong, key);
    wrong[AUTH_KEY_LEN - 2] = wrong[AUTH_KEY_LEN - 2] == 'A' ? 'B' : 'A';
    ck_assert_int_eq(check_key(st, wrong, &e), -EACCES);
    /* No record holds the secret. */
    ck_assert_int_eq(store_record_get(st, "auth.key", e.user, &r), -ENOENT);
    {
        char id[AUTH_KEY_ID_LEN + 1];
        const char *secret;

        ck_assert(auth_key_parse(key, id, &secret));
        ck_assert_int_eq(store_record_get(st, "auth.key", id, &r), 0);
        ck_assert_ptr_null(strstr(r.text, secret));
        store_record_release(&r);
        ck_assert_int_eq(store_record_get(st, "auth.user", "alice", &r), 0);
        ck_assert_ptr_null(strstr(r.text, secret));
        store_record_release(&r);
    }
    ck_assert_int_eq(auth_user_add(st, "alice", true, other), -EEXIST);
    ck_assert_int_eq(auth_user_add(st, "al ice", false, other), -EINVAL);
    ck_assert_int_eq(auth_user_add(st, "", false, other), -EINVAL);
    ck_assert_int_eq(auth_user_add(st, "root", true, other), 0);
    ck_assert_int_eq(check_key(st, other, &e), 0);
    ck_assert_str_eq(e.user, "root");
    ck_assert(e.admin);
}
END_TEST

START_TEST(test_rotate_remove)
{
    char key[AUTH_KEY_LEN], fresh[AUTH_KEY_LEN];
    struct auth_key_entry e;

    ck_assert_int_eq(auth_user_add(st, "root", true, key), 0);
    ck_assert_int_eq(auth_user_rotate(st, "root", fresh), 0);
    ck_assert_str_ne(key, fresh);
    ck_assert_int_eq(check_key(st, key, &e), -ENOENT);
    ck_assert_int_eq(check_key(st, fresh, &e), 0);
    ck_assert(e.admin); /* the role stays */
    ck_assert_int_eq(auth_user_rotate(st, "nobody", fresh), -ENOENT);
    ck_assert_int_eq(auth_user_remove(st, "root"), 0);
    ck_assert_int_eq(check_key(st, fresh, &e), -ENOENT);
    ck_assert_int_eq(auth_user_remove(st, "root"), -ENOENT);
}
END_TEST

static int collect(void *ctx, const struct auth_user_row *u)
{
    char *out = ctx;

    strcat(out, u->name);
    strcat(out, u->admin ? "+," : ",");
    return 0;
}

START_TEST(test_list)
{
    char key[AUTH_KEY_LEN], names[256] = "";

    ck_assert_int_eq(auth_user_add(st, "carol", false, key), 0);
    ck_assert_int_eq(auth_user_add(st, "alice", true, key), 0);
    ck_assert_int_eq(auth_user_add(st, "bob", false, key), 0);
    ck_assert_int_eq(auth_user_list(st, collect, names), 0);
    ck_assert_str_eq(names, "alice+,bob,carol,");
}
END_TEST

START_TEST(test_beside)
{
    struct rx_error err = {""};
    struct store *side;
    char key[AUTH_KEY_LEN];
    struct auth_key_entry e;

    /* This process holds the file: a second store_open is refused, beside is not. */
    ck_assert_ptr_null(store_open(path, &err));
    side = store_open_beside(path, &err);
    ck_assert_msg(side != NULL, "store_open_beside: %s", err.text);
    ck_assert_int_eq(auth_user_add(side, "dave", false, key), 0);
    ck_assert_int_eq(check_key(st, key, &e), 0); /* seen at once by the holder */
    ck_assert_int_eq(auth_user_remove(side, "dave"), 0);
    ck_assert_int_eq(check_key(st, key, &e), -ENOENT);
    store_close(side);
}
END_TEST

static struct sockaddr_in6 v6(const char *text)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};

    ck_assert_int_eq(inet_pton(AF_INET6, text, &a.sin6_addr), 1);
    return a;
}

static struct sockaddr_in v4(const char *text)
{
    struct sockaddr_in a = {.sin_family = AF_INET};

    ck_assert_int_eq(inet_pton(AF_INET, text, &a.sin_addr), 1);
    return a;
}

static const struct {
    const char *block, *addr;
    bool in;
} cidr_rows[] = {
    {"127.0.0.1/32", "127.0.0.1", true},
    {"127.0.0.1/32", "127.0.0.2", false},
    {"127.0.0.1", "127.0.0.1", true},
    {"10.0.0.0/8", "10.255.1.2", true},
    {"10.0.0.0/8", "11.0.0.1", false},
    {"192.168.4.0/22", "192.168.7.255", true},
    {"192.168.4.0/22", "192.168.8.0", false},
    {"0.0.0.0/0", "8.8.8.8", true},
    {"::1/128", "::1", true},
    {"::1/128", "::2", false},
    {"fd00::/8", "fd12:3456::1", true},
    {"10.0.0.0/8", "::ffff:10.1.2.3", true}, /* an IPv4 peer on a v6 socket */
    {"::1/128", "127.0.0.1", false},
};

START_TEST(test_cidr)
{
    struct cidr c;
    bool in;

    ck_assert_int_eq(cidr_parse(cidr_rows[_i].block, &c), 0);
    if (strchr(cidr_rows[_i].addr, ':')) {
        struct sockaddr_in6 a = v6(cidr_rows[_i].addr);

        in = cidr_contains(&c, (struct sockaddr *)&a);
    } else {
        struct sockaddr_in a = v4(cidr_rows[_i].addr);

        in = cidr_contains(&c, (struct sockaddr *)&a);
    }
    ck_assert_msg(in == cidr_rows[_i].in, "%s in %s", cidr_rows[_i].addr,
                  cidr_rows[_i].block);
}
END_TEST

START_TEST(test_cidr_bad)
{
    static const char *const bad[] = {"",          "10.0.0.0/33", "::1/129", "10.0.0/8",
                                      "10.0.0.0/", "10.0.0.0/x",  "host",    "/8"};
    struct cidr c;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(cidr_parse(bad[i], &c) == -EINVAL, "'%s' parsed", bad[i]);
    ck_assert(!cidr_contains(&c, NULL));
}
END_TEST

START_TEST(test_principal)
{
    const struct principal alice = {"alice", false}, root = {"root", true};

    ck_assert(principal_sees(&alice, "alice"));
    ck_assert(!principal_sees(&alice, "bob"));
    ck_assert(principal_sees(&root, "bob"));
    ck_assert(principal_sees(NULL, "bob")); /* the server's own work */
    ck_assert_str_eq(principal_filter(&alice, "bob"), "alice"); /* ?owner= ignored */
    ck_assert_str_eq(principal_filter(&root, "bob"), "bob");
    ck_assert_ptr_null(principal_filter(&root, NULL));
    ck_assert_str_eq(principal_owner(NULL), PRINCIPAL_ADMIN);
    ck_assert(principal_name_is_valid("alice.smith@example.com"));
    ck_assert(principal_name_is_valid("a_b-c"));
    ck_assert(!principal_name_is_valid(""));
    ck_assert(!principal_name_is_valid("a b"));
    ck_assert(!principal_name_is_valid("a\r\nX-Evil: 1"));
    ck_assert(!principal_name_is_valid("ünïcode"));
    ck_assert(principal_name_is_valid(
        "0123456789012345678901234567890123456789012345678901234567890123"));
    ck_assert(!principal_name_is_valid(
        "01234567890123456789012345678901234567890123456789012345678901234"));
}
END_TEST

Suite *auth_suite(void)
{
    Suite *s = suite_create("auth");
    TCase *keys = tcase_create("keys"), *pure = tcase_create("pure");

    tcase_add_checked_fixture(keys, setup, teardown);
    tcase_add_test(keys, test_key_shape);
    tcase_add_test(keys, test_add_check);
    tcase_add_test(keys, test_rotate_remove);
    tcase_add_test(keys, test_list);
    tcase_add_test(keys, test_beside);
    tcase_add_loop_test(pure, test_cidr, 0, sizeof(cidr_rows) / sizeof(cidr_rows[0]));
    tcase_add_test(pure, test_cidr_bad);
    tcase_add_test(pure, test_principal);
    suite_add_tcase(s, keys);
    suite_add_tcase(s, pure);
    return s;
}
