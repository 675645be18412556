#!/bin/bash
# Issue 33 on Zen 5, a fourth session: the third seed's run again with
# binary $1, named after4 (what ran at 20:28 UTC: zen5-seed3.sh with its
# names after4).
exec "$(dirname "$0")/zen5-seed3.sh" "$1" after4
