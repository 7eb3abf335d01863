/*
 * users_cmd - reflexor users. See users_cmd.h.
 */
#include "server/users_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "server/auth.h"
#include "server/auth_keys.h"
#include "store/store.h"

static const char usage[] =
    "usage: reflexor [--config F] [--db D] users add NAME [--admin]\n"
    "       reflexor [--config F] [--db D] users list\n"
    "       reflexor [--config F] [--db D] users remove NAME\n"
    "       reflexor [--config F] [--db D] users rotate NAME\n";

bool users_cmd_is(const char *word)
{
    return !strcmp(word, "users");
}

static int print_row(void *ctx, const struct auth_user_row *u)
{
    time_t t = (time_t)(u->created_at / 1000);
    struct tm tm;
    char at[32] = "";

    (void)ctx;
    if (gmtime_r(&t, &tm))
        strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf("%s\t%s\tkey %s\t%s\n", u->name, u->admin ? "admin" : "user", u->key_id, at);
    return 0;
}

/* Every server stops trusting the old key from memory within this. */
static void wait_out_trust(void)
{
    struct timespec ts = {0, (AUTH_KEY_TRUST_MS + 50) * 1000000L};

    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

static int fail(const char *what, const char *name, int err)
{
    const char *why = err == -EEXIST   ? "there is such a user already"
                      : err == -ENOENT ? "there is no such user"
                      : err == -EINVAL ? "a name is 1 to 64 letters, digits or '._@-'"
                                       : strerror(-err);

    fprintf(stderr, "reflexor: users %s %s: %s\n", what, name, why);
    return 1;
}

int users_cmd_run(struct store *st, char **args, int n, bool admin)
{
    char key[AUTH_KEY_LEN];
    const char *cmd = n > 0 ? args[0] : "", *name = n > 1 ? args[1] : NULL;
    int err;

    if (auth_keys_init()) {
        fprintf(stderr, "reflexor: libsodium cannot start\n");
        return 1;
    }
    if (!strcmp(cmd, "list") && n == 1) {
        err = auth_user_list(st, print_row, NULL);
        return err ? fail("list", "", err) : 0;
    }
    if (n != 2 || (admin && strcmp(cmd, "add"))) {
        fputs(usage, stderr);
        return 2;
    }
    if (!strcmp(cmd, "add")) {
        if ((err = auth_user_add(st, name, admin, key)))
            return fail(cmd, name, err);
        fprintf(stderr, "user %s added%s; its key (shown once, keep it):\n", name,
                admin ? " as an admin" : "");
    } else if (!strcmp(cmd, "rotate")) {
        if ((err = auth_user_rotate(st, name, key)))
            return fail(cmd, name, err);
        wait_out_trust();
        fprintf(stderr, "user %s: the old key no longer works; the new one:\n", name);
    } else if (!strcmp(cmd, "remove")) {
        if ((err = auth_user_remove(st, name)))
            return fail(cmd, name, err);
        wait_out_trust();
        fprintf(stderr, "user %s removed; its key no longer works\n", name);
        return 0;
    } else {
        fputs(usage, stderr);
        return 2;
    }
    printf("%s\n", key);
    fflush(stdout);
    sodium_memzero(key, sizeof(key));
    return 0;
}
