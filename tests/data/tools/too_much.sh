#!/bin/sh
# Test fixture: prints without end, past any output bound.
exec yes 0123456789abcdef
