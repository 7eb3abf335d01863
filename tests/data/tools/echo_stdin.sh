#!/bin/sh
# Test fixture: the result is the arguments JSON the toolkit wrote to stdin.
exec cat
