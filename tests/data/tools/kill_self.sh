#!/bin/sh
# Test fixture: dies by a signal.
kill -9 $$
