/*
 * users_cmd - `reflexor [--config F] [--db D] users add|list|remove|rotate`
 * (SPEC 4.4): the users of auth.mode "keys", managed in the store, also
 * while a server runs on it (every node sees a change at once: the keys
 * are store records, server/auth_keys).
 *
 *   users add NAME [--admin]  a new user; its key is printed once, on stdout
 *   users list                NAME, role, key id, created (UTC), one a line
 *   users remove NAME         the user and its key; the key stops working
 *   users rotate NAME         a new key, printed; the old one stops working
 *
 * remove and rotate return once no server can still accept the old key:
 * servers trust a key they checked for AUTH_KEY_TRUST_MS (server/auth),
 * and the command waits that long after its write.
 *
 * Depends on server/auth_keys and store/store.h.
 * Ownership: the store is borrowed; args are argv's.
 */
#ifndef USERS_CMD_H
#define USERS_CMD_H

#include <stdbool.h>

struct store;

/* True when argv's first operand is "users". */
bool users_cmd_is(const char *word);
/* Run `args` (after "users"; `admin`: --admin was given). The process's exit code. */
int users_cmd_run(struct store *st, char **args, int n, bool admin);

#endif
