/*
 * static_files - the web UI's files from one root directory.
 *
 * No path traversal: ".." segments (also percent-encoded, which MHD decodes
 * before we see the path), backslashes and NULs are refused, and the resolved
 * path must stay under the root's real path, so a symlink out of the root is
 * refused too. Content types come from the file extension.
 * Depends on libmicrohttpd and POSIX files only; nothing else of server/.
 * Ownership: `root` and `url` are borrowed; *resp is a new MHD response, the
 * caller's to queue and destroy; MIME types are static strings.
 */
#ifndef STATIC_FILES_H
#define STATIC_FILES_H

#include <microhttpd.h>
#include "state_machine/rx_common.h"

/*
 * A response for `url` under `root` (a real path). 0 with *resp, -ENOENT
 * (404), -EACCES (403 for a refused path) or -ENOMEM.
 */
int static_files_response(const char *root, const char *url,
                          struct MHD_Response **resp) RX_WUR;
/* The MIME type for a file name (never NULL). */
const char *static_files_mime(const char *name);

#endif
