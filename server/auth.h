/*
 * auth - who a request comes from (SPEC 4.4), by auth.mode:
 *   none            everyone is PRINCIPAL_LOCAL, an admin;
 *   token           the shared auth.token's bearer is PRINCIPAL_ADMIN;
 *   keys            a user's API key (server/auth_keys) names the user; the
 *                   shared auth.token, when set, still names PRINCIPAL_ADMIN;
 *   trusted-header  the header auth.header names the user, believed only
 *                   from an address of auth.trusted_proxies (auth.admins
 *                   are admins).
 * A credential is sent as "Authorization: Bearer X", "X-Api-Key: X" (the
 * LangGraph SDK) or "?token=X" (EventSource cannot set headers).
 *
 * Keys are checked against the store, and a key seen lately is trusted from
 * memory for AUTH_KEY_TRUST_MS: one lookup in a small table and one hash
 * per request, not a store read. A key removed or rotated (on any node, or
 * by `reflexor users` against the running server's store) is therefore
 * refused by every node within AUTH_KEY_TRUST_MS; the command waits that
 * long before it returns, so when it says a key is gone, it is.
 *
 * Also the per-principal request rate (limits.user_rate, a token bucket per
 * non-admin principal, its burst two seconds' worth).
 *
 * Depends on libmicrohttpd, server/config, server/principal, server/auth_keys,
 * base/cidr.
 * Locks: the key cache's and the rate table's locks are leaves.
 * Ownership: struct auth borrows the config and the store (both outlive it).
 */
#ifndef AUTH_H
#define AUTH_H

#include <stdbool.h>

#include <microhttpd.h>

#include "server/principal.h"
#include "state_machine/rx_common.h"

struct config;
struct store;

/* How long a key checked against the store is believed without asking again. */
#define AUTH_KEY_TRUST_MS 250

struct auth;

/*
 * The auth of `cfg` (its mode resolved, its proxies parsed), checking keys
 * in `st` (NULL: no store; then mode "keys" is refused). 0 and *out, or
 * -EINVAL with the reason in `err`, or -ENOMEM.
 */
int auth_create(const struct config *cfg, struct store *st, struct auth **out,
                struct rx_error *err) RX_WUR;
void auth_destroy(struct auth *a);

/* The mode in force ("none", "token", "keys", "trusted-header"). */
const char *auth_mode_name(const struct auth *a);
/* Must a client send a credential (token or keys)? */
bool auth_asks_credential(const struct auth *a);

/* Who sent the request: 0 and *who, or -EACCES (answer 401). */
int auth_identify(struct auth *a, struct MHD_Connection *conn, struct principal *who);
/*
 * limits.user_rate: may `who` make one more request now? 0, or -EAGAIN with
 * the seconds to wait in *retry_s (answer 429 with Retry-After).
 */
int auth_admit(struct auth *a, const struct principal *who, int *retry_s);
/* Does the request carry metrics.token (when one is set)? */
bool auth_metrics_token(struct auth *a, struct MHD_Connection *conn);

#endif
