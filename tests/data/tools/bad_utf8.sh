#!/bin/sh
# Test fixture: prints a byte that is not UTF-8, then a newline.
printf '\377ok\n'
