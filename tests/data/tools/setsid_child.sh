#!/bin/sh
# Test fixture: starts a grandchild the way a daemon does (a double fork, then
# setsid: a new session and process group, parent gone), writes the
# grandchild's pid to "$1", then with "$2" = exit prints "started" and exits 0,
# otherwise waits forever. The grandchild keeps the tool's stdout open.
(setsid sh -c 'echo $$ > "$1.tmp" && mv "$1.tmp" "$1" && exec sleep 300' sh "$1" &)
while [ ! -s "$1" ]; do sleep 0.01; done
if [ "$2" = exit ]; then
    echo started
    exit 0
fi
exec sleep 300
