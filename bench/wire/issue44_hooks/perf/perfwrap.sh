#!/usr/bin/env bash
exec perf record -F 999 -g -o /tmp/ab/perf/$PERF_TAG.$$.data -- "$@"
