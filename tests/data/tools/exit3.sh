#!/bin/sh
# Test fixture: fails with status 3 and says why on stderr.
echo "something broke" >&2
echo "second line" >&2
exit 3
