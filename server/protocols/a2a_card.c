/*
 * a2a_card - the A2A agent card at /.well-known/agent-card.json. See a2a.h.
 */
#include "server/protocols/a2a.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "server/reply.h"

/* The server's own URL as the client reached it (Host, X-Forwarded-Proto). */
static void base_url(struct door *d, struct MHD_Connection *conn, char *out, size_t n)
{
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
    const char *proto =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Forwarded-Proto");
    bool https = proto && !strcasecmp(proto, "https");

    if (host && *host && strcspn(host, " \t\r\n/\"\\") == strlen(host))
        snprintf(out, n, "%s://%s", https ? "https" : "http", host);
    else
        snprintf(out, n, "http://%s:%d", d->cfg->listen_host, d->cfg->listen_port);
}

enum MHD_Result a2a_card(struct door *d, struct MHD_Connection *conn, const char *method)
{
    enum config_auth_mode mode = config_auth_mode(d->cfg);
    char url[1024], base[512];
    json_t *card;

    if (!*d->cfg->a2a_prefix)
        return reply_error(conn, 404, "not-found", NULL,
                           "A2A is turned off (a2a.prefix)");
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return reply_method_not_allowed(conn, "GET, HEAD");
    base_url(d, conn, base, sizeof(base));
    snprintf(url, sizeof(url), "%s%s", base, d->cfg->a2a_prefix);
    /* 1.0's fields, and 0.3's (url, preferredTransport, protocolVersion,
       security) for older peers: each reads its own and ignores the rest. */
    card = json_pack(
        "{s:s, s:s, s:[{s:s, s:s, s:s}, {s:s, s:s, s:s}], s:s, s:{s:b, s:b}, "
        "s:[s], s:[s], s:[{s:s, s:s, s:s, s:[s,s], s:[s,s]}], s:s, s:s, s:s}",
        "name", "Reflexor", "description",
        "An agent that answers and uses its tools; some tool calls wait for a "
        "person's approval (the task is then input-required: answer it with a data "
        "part {\"decision\": \"approve\"|\"reject\"|\"edit\"}).",
        "supportedInterfaces", "url", url, "protocolBinding", "JSONRPC",
        "protocolVersion", "1.0", "url", url, "protocolBinding", "JSONRPC",
        "protocolVersion", "0.3", "version", "1.0.0", "capabilities", "streaming", 1,
        "pushNotifications", 0, "defaultInputModes", "text/plain", "defaultOutputModes",
        "text/plain", "skills", "id", "chat", "name", "Chat with tools", "description",
        d->brain_name ? d->brain_name : "the server's agent", "tags", "chat", "tools",
        "examples", "Hello!", "what is 6*7?", "url", url, "preferredTransport", "JSONRPC",
        "protocolVersion", "0.3.0");
    if (card && (mode == CONFIG_AUTH_TOKEN || mode == CONFIG_AUTH_KEYS) &&
        (json_object_set_new(card, "securitySchemes",
                             json_pack("{s:{s:{s:s}, s:s, s:s}}", "bearer",
                                       "httpAuthSecurityScheme", "scheme", "Bearer",
                                       "type", "http", "scheme", "bearer")) ||
         json_object_set_new(
             card, "securityRequirements",
             json_pack("[{s:{s:{s:[]}}}]", "schemes", "bearer", "list")) ||
         json_object_set_new(card, "security", json_pack("[{s:[]}]", "bearer")))) {
        json_decref(card);
        card = NULL;
    }
    return reply_json(conn, 200, card);
}
