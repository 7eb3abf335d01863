/*
 * static_files - safe static file serving. See static_files.h.
 */
#include "server/static_files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *ext;
    const char *type;
} mime_types[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".mjs", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".json", "application/json"},
    {".map", "application/json"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".jpg", "image/jpeg"},
    {".ico", "image/x-icon"},
    {".txt", "text/plain; charset=utf-8"},
    {".woff2", "font/woff2"},
    {".webmanifest", "application/manifest+json"},
};

const char *static_files_mime(const char *name)
{
    const char *dot = strrchr(name, '.');

    for (size_t i = 0; dot && i < sizeof(mime_types) / sizeof(mime_types[0]); i++)
        if (!strcasecmp(dot, mime_types[i].ext))
            return mime_types[i].type;
    return "application/octet-stream";
}

/* Refuse anything that could climb out of the root before touching the disk. */
static bool path_is_safe(const char *url)
{
    const char *p = url;

    if (*url != '/' || strchr(url, '\\'))
        return false;
    while (*p) {
        size_t n;

        p += strspn(p, "/");
        n = strcspn(p, "/");
        if ((n == 2 && !strncmp(p, "..", 2)) || (n == 1 && *p == '.'))
            return false;
        p += n;
    }
    return true;
}

int static_files_response(const char *root, const char *url, struct MHD_Response **resp)
{
    char path[PATH_MAX], real[PATH_MAX];
    size_t rootlen = strlen(root);
    struct stat st;
    int fd, n;

    if (!path_is_safe(url))
        return -EACCES;
    n = snprintf(path, sizeof(path), "%s%s%s", root, url,
                 url[strlen(url) - 1] == '/' ? "index.html" : "");
    if (n < 0 || (size_t)n >= sizeof(path))
        return -ENOENT;
    if (!realpath(path, real))
        return -ENOENT;
    /* Symlinks resolve first: the target itself must be inside the root. */
    if (strncmp(real, root, rootlen) || real[rootlen] != '/')
        return -EACCES;
    /* O_NONBLOCK: opening a FIFO would otherwise wait for a writer, holding an
       HTTP thread (and shutdown) hostage. Only regular files are served. */
    fd = open(real, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -ENOENT;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return -ENOENT;
    }
    *resp = MHD_create_response_from_fd((uint64_t)st.st_size, fd); /* owns fd */
    if (!*resp) {
        close(fd);
        return -ENOMEM;
    }
    MHD_add_response_header(*resp, "Content-Type", static_files_mime(real));
    MHD_add_response_header(*resp, "Cache-Control", "no-cache");
    MHD_add_response_header(*resp, "X-Content-Type-Options", "nosniff");
    return 0;
}
