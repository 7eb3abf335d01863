#!/bin/sh
# Test fixture: never ends. Leaves a grandchild holding stdout open and writes
# its pid to "$1", so a test can check the whole process group was killed.
sleep 1000 &
echo $! > "$1.tmp" && mv "$1.tmp" "$1"
wait
