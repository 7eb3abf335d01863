/*
 * idgen - see idgen.h.
 */
#include "base/idgen.h"

#include <uuid/uuid.h>

void idgen_uuid(char out[RX_UUID_LEN])
{
    uuid_t u;

    uuid_generate_random(u);
    uuid_unparse_lower(u, out);
}
