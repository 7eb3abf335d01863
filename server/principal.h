/*
 * principal - who a request comes from (SPEC 4.4): a name and whether it is
 * an admin. server/auth finds it for each request; every route of every
 * protocol is given it, and the session table shows a principal only the
 * sessions it owns (an admin, all of them).
 *
 * Depends on nothing: the session table and the protocols use it without
 * knowing how a request was authenticated.
 * Ownership: a struct principal is a value, copied or borrowed for a request.
 */
#ifndef PRINCIPAL_H
#define PRINCIPAL_H

#include <stdbool.h>
#include <string.h>

/* The longest principal name, in bytes (the store's owner column allows it). */
#define PRINCIPAL_NAME_MAX 64

/* The principal of auth.mode "none", and the bearer of the shared auth.token. */
#define PRINCIPAL_LOCAL "local"
#define PRINCIPAL_ADMIN "admin"

struct principal {
    char name[PRINCIPAL_NAME_MAX + 1];
    bool admin;
};

/* May `who` see a session owned by `owner`? NULL `who`: the server itself. */
static inline bool principal_sees(const struct principal *who, const char *owner)
{
    return !who || who->admin || !strcmp(who->name, owner);
}

/*
 * Whose sessions a list for `who` shows: an admin's (or the server's) shows
 * `asked` (a ?owner= filter; NULL: everyone's), anyone else's only their own.
 */
static inline const char *principal_filter(const struct principal *who, const char *asked)
{
    return !who || who->admin ? asked : who->name;
}

/* The owner of what `who` makes (NULL: the server itself makes it for admin). */
static inline const char *principal_owner(const struct principal *who)
{
    return who ? who->name : PRINCIPAL_ADMIN;
}

/*
 * A name a principal may have: 1 to PRINCIPAL_NAME_MAX bytes of letters,
 * digits and "._@-" (user names, e-mail addresses), nothing a log line, a
 * header or a URL would have to escape.
 */
static inline bool principal_name_is_valid(const char *name)
{
    size_t n = 0;

    for (const char *p = name; *p; p++, n++) {
        char c = *p;

        if (n >= PRINCIPAL_NAME_MAX ||
            !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '@' || c == '-'))
            return false;
    }
    return n > 0;
}

#endif
