#!/bin/sh
# Test fixture: closes its output early but keeps running.
exec >&- 2>&-
sleep 1000
